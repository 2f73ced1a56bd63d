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
pub struct LoraSet {
    pub layers: Vec<Vec<Option<LoraPair>>>,
}

impl LoraSet {
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
        let mut layers = Vec::with_capacity(cfg.layers);
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
                row.push(Some(LoraPair {
                    a: gpu.upload_f32(&ta.to_f32(), &ta.shape, Category::Lora)?,
                    b: gpu.upload_f32(&tb.to_f32(), &tb.shape, Category::Lora)?,
                }));
            }
            layers.push(row);
        }
        Ok(Lora { r, alpha: adapter.config.lora_alpha, targets, params: LoraSet { layers } })
    }

    /// Zero-filled tensors of one layer's shapes (every layer has the same): the gradient
    /// buffer of a fused, layer-by-layer update.
    pub fn zeros_row(&self, gpu: &Gpu, cat: Category) -> Result<Vec<Option<LoraPair>>> {
        let mut row = Vec::with_capacity(7);
        for pair in self.params.layers.first().map(|l| l.as_slice()).unwrap_or(&[]) {
            row.push(match pair {
                None => None,
                Some(p) => Some(LoraPair {
                    a: gpu.zeros(&p.a.shape, p.a.dtype, cat)?,
                    b: gpu.zeros(&p.b.shape, p.b.dtype, cat)?,
                }),
            });
        }
        Ok(row)
    }

    /// Zero-filled tensors of the parameters' shapes (gradients, optimizer moments).
    pub fn zeros_like(&self, gpu: &Gpu, cat: Category) -> Result<LoraSet> {
        let mut layers = Vec::with_capacity(self.params.layers.len());
        for l in &self.params.layers {
            let mut row = Vec::with_capacity(7);
            for pair in l {
                row.push(match pair {
                    None => None,
                    Some(p) => Some(LoraPair {
                        a: gpu.zeros(&p.a.shape, p.a.dtype, cat)?,
                        b: gpu.zeros(&p.b.shape, p.b.dtype, cat)?,
                    }),
                });
            }
            layers.push(row);
        }
        Ok(LoraSet { layers })
    }
}

/// Read a set (parameters or gradients) back as PEFT-keyed f32 tensors.
pub async fn read_set(gpu: &Gpu, set: &LoraSet) -> Result<Vec<(String, Vec<usize>, Vec<f32>)>> {
    let mut out = Vec::new();
    for (i, p, pair) in set.iter() {
        out.push((names::lora_a_key(i, p), pair.a.shape.clone(), gpu.read_f32(&pair.a).await?));
        out.push((names::lora_b_key(i, p), pair.b.shape.clone(), gpu.read_f32(&pair.b).await?));
    }
    Ok(out)
}

/// Zero one layer's gradients (the fused, layer-by-layer backward).
pub fn zero_row(gpu: &Gpu, row: &[Option<LoraPair>]) {
    for pair in row.iter().flatten() {
        fill(gpu, &pair.a, 0.0);
        fill(gpu, &pair.b, 0.0);
    }
}

/// Zero every tensor of a set (gradients before a step).
pub fn zero_set(gpu: &Gpu, set: &LoraSet) {
    for (_, _, pair) in set.iter() {
        fill(gpu, &pair.a, 0.0);
        fill(gpu, &pair.b, 0.0);
    }
}
