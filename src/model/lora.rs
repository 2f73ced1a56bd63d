//! LoRA adapters on the GPU: A (r, in) and B (out, r) per targeted projection,
//! and their gradients in the same shape. Converted to and from PEFT's format
//! (crate::formats::peft) in one place.

use crate::base::config::ModelConfig;
use crate::base::error::{Error, Result};
use crate::base::names::{self, Proj};
use crate::formats::peft::Adapter;
use crate::gpu::{Category, Gpu, Tensor};
use crate::kernels::elementwise::fill;

/// One LoRA pair (or its gradient).
pub struct LoraPair {
    /// a: (r, in)
    pub a: Tensor,
    /// b: (out, r)
    pub b: Tensor,
}

/// Per layer, per projection (indexed by `Proj as usize`): the pair, if targeted.
///
/// A set made by [`LoraSet::zeros`] (every adapter, gradient and optimizer state) lies in a few
/// buffers: each tensor is a [`Tensor::slice`] of one, layer after layer, so that what is done
/// to every tensor alike (zeroing the gradients, their norm, the optimizer's update) is one
/// dispatch per buffer or per layer instead of one per tensor (SmolLM2-135M at rank 8 on all
/// seven: 420 tensors, 1,260 dispatches of a training step's 3,814). Two sets made from the same
/// shapes on the same device lie alike ([`LoraSet::same_layout`]); the padding between tensors is
/// zero and stays zero under every update.
pub struct LoraSet {
    pub layers: Vec<Vec<Option<LoraPair>>>,
    /// Per layer, one f32 tensor over all its pairs and the padding between them (empty for a
    /// set of separate buffers).
    spans: Vec<Tensor>,
    /// The buffers whole, each one f32 tensor over whole layers.
    arenas: Vec<Tensor>,
    /// The most bytes a buffer of it was allowed ([`LoraSet::zeros_capped`]), for sets laid out alike.
    cap: u64,
}

/// The most bytes one buffer of a [`LoraSet`] holds: the elementwise kernels' 1-D dispatch of
/// 256 vec4 per workgroup reaches 64 MiB at 16,384 workgroups, well inside the 65,535 allowed.
const ARENA_BYTES: u64 = 64 << 20;

/// The shapes of a set: per layer, per projection, (A's, B's) where targeted.
pub type LoraShapes = Vec<Vec<Option<(Vec<usize>, Vec<usize>)>>>;

impl LoraSet {
    /// A zero-filled set of `shapes`, f32, accounted as `cat`, in as few buffers as the device
    /// allows (see [`LoraSet`]); in separate buffers where one layer alone is larger than a buffer
    /// may be.
    pub fn zeros(gpu: &Gpu, shapes: &LoraShapes, cat: Category) -> Result<LoraSet> {
        Self::zeros_capped(gpu, shapes, cat, ARENA_BYTES)
    }

    /// [`LoraSet::zeros`] with buffers of at most `cap` bytes (tests: several buffers, or
    /// separate ones).
    pub fn zeros_capped(gpu: &Gpu, shapes: &LoraShapes, cat: Category, cap: u64) -> Result<LoraSet> {
        let align = gpu.storage_alignment().max(256);
        let limit = gpu.max_binding().min(cap);
        let padded = |shape: &[usize]| (4 * shape.iter().product::<usize>() as u64).max(4).next_multiple_of(align);
        let layer_bytes: Vec<u64> = shapes
            .iter()
            .map(|l| l.iter().flatten().map(|(a, b)| padded(a) + padded(b)).sum::<u64>().max(align))
            .collect();
        if layer_bytes.iter().any(|&b| b > limit) {
            let mut layers = Vec::with_capacity(shapes.len());
            for l in shapes {
                let mut row = Vec::with_capacity(l.len());
                for pair in l {
                    row.push(match pair {
                        None => None,
                        Some((a, b)) => Some(LoraPair {
                            a: gpu.zeros(a, crate::gpu::DType::F32, cat)?,
                            b: gpu.zeros(b, crate::gpu::DType::F32, cat)?,
                        }),
                    });
                }
                layers.push(row);
            }
            return Ok(LoraSet { layers, spans: Vec::new(), arenas: Vec::new(), cap });
        }
        // Whole layers to each buffer, in order.
        let mut groups: Vec<(usize, usize, u64)> = Vec::new(); // (first layer, end, bytes)
        for (i, &b) in layer_bytes.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if g.2 + b <= limit => {
                    g.1 = i + 1;
                    g.2 += b;
                }
                _ => groups.push((i, i + 1, b)),
            }
        }
        let (mut layers, mut spans, mut arenas) = (Vec::new(), Vec::new(), Vec::new());
        for (first, end, bytes) in groups {
            let arena = gpu.zeros(&[(bytes / 4) as usize], crate::gpu::DType::F32, cat)?;
            let mut at = 0;
            for (l, lb) in shapes[first..end].iter().zip(&layer_bytes[first..end]) {
                spans.push(arena.slice(at, *lb, &[(*lb / 4) as usize], crate::gpu::DType::F32));
                let mut o = at;
                let mut row = Vec::with_capacity(l.len());
                for pair in l {
                    row.push(pair.as_ref().map(|(a, b)| {
                        let mut take = |shape: &[usize]| {
                            let n = 4 * shape.iter().product::<usize>() as u64;
                            let t = arena.slice(o, n.max(4), shape, crate::gpu::DType::F32);
                            o += padded(shape);
                            t
                        };
                        LoraPair { a: take(a), b: take(b) }
                    }));
                }
                layers.push(row);
                at += lb;
            }
            arenas.push(arena);
        }
        Ok(LoraSet { layers, spans, arenas, cap })
    }

    /// The shapes of this set's tensors.
    pub fn shapes(&self) -> LoraShapes {
        self.layers
            .iter()
            .map(|l| l.iter().map(|p| p.as_ref().map(|p| (p.a.shape.clone(), p.b.shape.clone()))).collect())
            .collect()
    }

    /// Its buffers whole, each an f32 tensor over whole layers (empty: separate buffers).
    pub fn arenas(&self) -> &[Tensor] {
        &self.arenas
    }

    /// Layer `i`'s pairs and the padding between them as one f32 tensor, where the set lies in
    /// few buffers.
    pub fn span(&self, i: usize) -> Option<&Tensor> {
        self.spans.get(i)
    }

    /// Whether `other` lies in buffers exactly like this set's (made from the same shapes), so
    /// an elementwise kernel over this set's buffers meets the same tensor at the same place in
    /// `other`'s.
    pub fn same_layout(&self, other: &LoraSet) -> bool {
        !self.arenas.is_empty()
            && self.arenas.len() == other.arenas.len()
            && self.arenas.iter().zip(&other.arenas).all(|(a, b)| a.bytes() == b.bytes())
            && self.spans.len() == other.spans.len()
    }

    pub fn pair(&self, layer: usize, p: Proj) -> Option<&LoraPair> {
        self.layers[layer][p as usize].as_ref()
    }
    /// Every (layer, proj, pair), in PEFT key order of layers then projections.
    pub fn iter(&self) -> impl Iterator<Item = (usize, Proj, &LoraPair)> {
        self.layers.iter().enumerate().flat_map(|(i, l)| {
            Proj::all().into_iter().filter_map(move |p| l[p as usize].as_ref().map(|pair| (i, p, pair)))
        })
    }
    /// Bytes of all tensors.
    pub fn bytes(&self) -> u64 {
        self.iter().map(|(_, _, p)| p.a.bytes() + p.b.bytes()).sum()
    }
}

/// The trainable adapter: its hyperparameters and parameters.
pub struct Lora {
    pub r: usize,
    pub alpha: f64,
    pub targets: Vec<Proj>,
    pub params: LoraSet,
}

impl Lora {
    /// s = alpha / r
    pub fn scale(&self) -> f32 {
        (self.alpha / self.r as f64) as f32
    }

    /// Upload a PEFT adapter (validated against the model first).
    pub fn from_adapter(gpu: &Gpu, cfg: &ModelConfig, adapter: &Adapter) -> Result<Lora> {
        adapter.validate(cfg).map_err(|e| Error::msg(e.to_string()))?;
        let r = adapter.config.r;
        let targets = adapter.config.target_modules.clone();
        let mut values = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let mut row = Vec::with_capacity(7);
            for p in Proj::all() {
                if !targets.contains(&p) {
                    row.push(None);
                    continue;
                }
                let (ka, kb) = (names::lora_a_key(i, p), names::lora_b_key(i, p));
                let ta = adapter.tensors.get(&ka).ok_or_else(|| Error::msg(format!("adapter: missing {ka}")))?;
                let tb = adapter.tensors.get(&kb).ok_or_else(|| Error::msg(format!("adapter: missing {kb}")))?;
                row.push(Some((ta, tb)));
            }
            values.push(row);
        }
        let shapes: LoraShapes = values
            .iter()
            .map(|l| l.iter().map(|p| p.map(|(a, b)| (a.shape.clone(), b.shape.clone()))).collect())
            .collect();
        let params = LoraSet::zeros(gpu, &shapes, Category::Lora)?;
        for (l, row) in params.layers.iter().zip(&values) {
            for (pair, v) in l.iter().zip(row) {
                if let (Some(pair), Some((ta, tb))) = (pair, v) {
                    gpu.write_f32(&pair.a, &ta.to_f32());
                    gpu.write_f32(&pair.b, &tb.to_f32());
                }
            }
        }
        Ok(Lora { r, alpha: adapter.config.lora_alpha, targets, params })
    }

    /// A zero-filled set of one layer's shapes (every layer has the same): the gradient buffer
    /// of a fused, layer-by-layer update.
    pub fn zeros_row(&self, gpu: &Gpu, cat: Category) -> Result<LoraSet> {
        let first = self.params.shapes().into_iter().take(1).collect();
        LoraSet::zeros_capped(gpu, &first, cat, self.params.cap)
    }

    /// Zero-filled tensors of the parameters' shapes, laid out alike (gradients, optimizer moments).
    pub fn zeros_like(&self, gpu: &Gpu, cat: Category) -> Result<LoraSet> {
        self.params.zeros_like(gpu, cat)
    }
}

impl LoraSet {
    /// A zero-filled set of this one's shapes, laid out alike.
    pub fn zeros_like(&self, gpu: &Gpu, cat: Category) -> Result<LoraSet> {
        LoraSet::zeros_capped(gpu, &self.shapes(), cat, self.cap)
    }
}

/// Read a set (parameters or gradients) back as PEFT-keyed f32 tensors.
pub async fn read_set(gpu: &Gpu, set: &LoraSet) -> Result<Vec<(String, Vec<usize>, Vec<f32>)>> {
    let tensors: Vec<&Tensor> = set.iter().flat_map(|(_, _, pair)| [&pair.a, &pair.b]).collect();
    let mut values = gpu.read_f32_many(&tensors).await?.into_iter();
    let mut out = Vec::new();
    for (i, p, pair) in set.iter() {
        let (a, b) = (values.next().unwrap_or_default(), values.next().unwrap_or_default());
        out.push((names::lora_a_key(i, p), pair.a.shape.clone(), a));
        out.push((names::lora_b_key(i, p), pair.b.shape.clone(), b));
    }
    Ok(out)
}

/// Zero one layer's gradients (the fused, layer-by-layer backward): a one-layer set.
pub fn zero_row(gpu: &Gpu, row: &LoraSet) {
    zero_set(gpu, row)
}

/// Zero every tensor of a set (gradients before a step): one dispatch per buffer.
pub fn zero_set(gpu: &Gpu, set: &LoraSet) {
    if !set.arenas.is_empty() {
        for a in &set.arenas {
            fill(gpu, a, 0.0);
        }
        return;
    }
    for (_, _, pair) in set.iter() {
        fill(gpu, &pair.a, 0.0);
        fill(gpu, &pair.b, 0.0);
    }
}
