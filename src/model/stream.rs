//! Frozen weights that stay off the GPU until a block needs them.
//!
//! In streamed mode the model keeps only the final norm on the GPU. Each block's
//! weights are uploaded right before the block runs (in forward, and again for
//! the backward's recompute) and dropped after it; the embedding is gathered on
//! the host for the batch's ids only; the output table is uploaded one vocab
//! chunk at a time inside the lm_head + cross-entropy loop. So the resident
//! frozen weights never exceed one block or one vocab chunk, whatever the model size.

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::gpu::{Category, Gpu, Tensor};
use crate::model::layout::{self, Proj};
use crate::model::weights::{
    prepare_matrix, upload_matrix_as, upload_prepared, upload_vector, LayerWeights, Linear, PreparedMatrix,
    WeightFormat,
};
use crate::model::LoadStep;
use crate::store::{Checkpoint, HostData, HostTensor};
use futures_util::future::LocalBoxFuture;

/// The host tensors of one decoder layer.
pub struct LayerHost {
    /// (C)
    pub input_norm: HostTensor,
    /// (C)
    pub post_norm: HostTensor,
    /// q, k, v, o, gate, up, down: weight (out, in) and optional bias (out)
    pub proj: Vec<(HostTensor, Option<HostTensor>)>,
}

/// Where streamed weights come from (a checkpoint in memory, a synthetic model for benchmarks,
/// and later the browser's IndexedDB store).
pub trait WeightSource: Send + Sync {
    fn config(&self) -> &ModelConfig;
    fn layer(&self, i: usize) -> Result<LayerHost>;
    /// model.norm.weight (C)
    fn final_norm(&self) -> Result<HostTensor>;
    /// Embedding rows of `ids` as f32, (N, C) row-major.
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>>;
    /// Rows r0..r1 of the output table (lm_head, or the embedding when tied), (r1 − r0, C).
    fn output_rows(&self, r0: usize, r1: usize) -> Result<HostTensor>;
}

/// Weights that must be fetched (asynchronously) before a [`WeightSource`] can read them: the
/// browser's IndexedDB, whose every read is a callback. A streamed model with a fetcher awaits
/// `fetch(step)` before it reads `step`'s weights, and starts fetching the next block while the
/// GPU computes the current one, so host memory holds about one step's chunks and nothing of
/// the model is cached.
pub trait Fetch: wgpu::WasmNotSendSync {
    /// Make `step`'s weights readable from the source; what earlier calls fetched may be dropped.
    fn fetch(&self, step: LoadStep) -> LocalBoxFuture<'_, Result<()>>;
}

/// One layer in its GPU layout on the host: what a streamed model uploads per block.
pub struct PreparedLayer {
    pub input_norm: HostTensor,
    pub post_norm: HostTensor,
    pub proj: Vec<(PreparedMatrix, Option<HostTensor>)>,
}

impl PreparedLayer {
    pub fn new(host: LayerHost, format: WeightFormat) -> PreparedLayer {
        PreparedLayer {
            proj: host.proj.into_iter().map(|(w, b)| (prepare_matrix(&w, format), b)).collect(),
            input_norm: host.input_norm,
            post_norm: host.post_norm,
        }
    }

    /// Host bytes held.
    pub fn bytes(&self) -> usize {
        let v = |t: &HostTensor| t.numel() * 4;
        v(&self.input_norm)
            + v(&self.post_norm)
            + self.proj.iter().map(|(w, b)| w.bytes.len() + b.as_ref().map_or(0, v)).sum::<usize>()
    }

    pub fn upload(&self, gpu: &Gpu) -> Result<LayerWeights> {
        let mut proj = Vec::with_capacity(7);
        for (w, b) in &self.proj {
            proj.push(Linear {
                w: upload_prepared(gpu, w, Category::Weights)?,
                b: match b {
                    Some(b) => Some(upload_vector(gpu, b, Category::Weights)?),
                    None => None,
                },
            });
        }
        Ok(LayerWeights {
            input_norm: upload_vector(gpu, &self.input_norm, Category::Weights)?,
            post_norm: upload_vector(gpu, &self.post_norm, Category::Weights)?,
            proj,
        })
    }
}

/// Upload one layer in `format` (norms and biases as f32).
pub fn upload_layer(gpu: &Gpu, host: &LayerHost, format: WeightFormat) -> Result<LayerWeights> {
    let mut proj = Vec::with_capacity(7);
    for (w, b) in &host.proj {
        proj.push(Linear {
            w: upload_matrix_as(gpu, w, format, Category::Weights)?,
            b: match b {
                Some(b) => Some(upload_vector(gpu, b, Category::Weights)?),
                None => None,
            },
        });
    }
    Ok(LayerWeights {
        input_norm: upload_vector(gpu, &host.input_norm, Category::Weights)?,
        post_norm: upload_vector(gpu, &host.post_norm, Category::Weights)?,
        proj,
    })
}

/// Upload rows of the output table as one vocab chunk.
pub fn upload_output_chunk(
    gpu: &Gpu,
    src: &dyn WeightSource,
    r0: usize,
    r1: usize,
    format: WeightFormat,
) -> Result<Tensor> {
    upload_matrix_as(gpu, &src.output_rows(r0, r1)?, format, Category::Weights)
}

fn rows_of(t: &HostTensor, r0: usize, r1: usize) -> HostTensor {
    let c = t.shape.last().copied().unwrap_or(1);
    let shape = vec![r1 - r0, c];
    let data = match &t.data {
        HostData::F32(v) => HostData::F32(v[r0 * c..r1 * c].to_vec()),
        HostData::BF16(v) => HostData::BF16(v[r0 * c..r1 * c].to_vec()),
        HostData::F16(v) => HostData::F16(v[r0 * c..r1 * c].to_vec()),
    };
    HostTensor { shape, data }
}

/// Streams from a checkpoint held in host memory (the tables are decoded once and cached).
pub struct CheckpointSource {
    ckpt: Checkpoint,
    embed: std::sync::OnceLock<HostTensor>,
    lm_head: std::sync::OnceLock<HostTensor>,
}

impl CheckpointSource {
    pub fn new(ckpt: Checkpoint) -> CheckpointSource {
        CheckpointSource { ckpt, embed: Default::default(), lm_head: Default::default() }
    }
    fn table<'a>(&'a self, key: &str, cell: &'a std::sync::OnceLock<HostTensor>) -> Result<&'a HostTensor> {
        if let Some(t) = cell.get() {
            return Ok(t);
        }
        let t = self.ckpt.tensor(key)?;
        let want = [self.ckpt.config().vocab, self.ckpt.config().hidden];
        if t.shape != want {
            return Err(Error::msg(format!("{key}: expected shape {want:?} (from config.json), found {:?}", t.shape)));
        }
        Ok(cell.get_or_init(|| t))
    }
}

impl WeightSource for CheckpointSource {
    fn config(&self) -> &ModelConfig {
        self.ckpt.config()
    }
    fn layer(&self, i: usize) -> Result<LayerHost> {
        let cfg = self.ckpt.config();
        let get = |key: String, shape: &[usize]| -> Result<HostTensor> {
            let t = self.ckpt.tensor(&key)?;
            if t.shape != shape {
                return Err(Error::msg(format!(
                    "{key}: expected shape {shape:?} (from config.json), found {:?}",
                    t.shape
                )));
            }
            Ok(t)
        };
        let mut proj = Vec::with_capacity(7);
        for p in Proj::all() {
            let (out, inp) = p.dims(cfg);
            let w = get(layout::proj_weight_key(i, p), &[out, inp])?;
            let b = if p.has_bias(cfg) { Some(get(layout::proj_bias_key(i, p), &[out])?) } else { None };
            proj.push((w, b));
        }
        Ok(LayerHost {
            input_norm: get(layout::input_norm_key(i), &[cfg.hidden])?,
            post_norm: get(layout::post_norm_key(i), &[cfg.hidden])?,
            proj,
        })
    }
    fn final_norm(&self) -> Result<HostTensor> {
        Ok(self.ckpt.tensor(layout::FINAL_NORM_KEY)?)
    }
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let t = self.table(layout::EMBED_KEY, &self.embed)?;
        let c = self.ckpt.config().hidden;
        let mut out = Vec::with_capacity(ids.len() * c);
        for &id in ids {
            let r = id as usize;
            out.extend(rows_of(t, r, r + 1).to_f32());
        }
        Ok(out)
    }
    fn output_rows(&self, r0: usize, r1: usize) -> Result<HostTensor> {
        let t = if self.ckpt.config().tie_word_embeddings {
            self.table(layout::EMBED_KEY, &self.embed)?
        } else {
            self.table(layout::LM_HEAD_KEY, &self.lm_head)?
        };
        Ok(rows_of(t, r0, r1))
    }
}

/// Embedding entries are uniform in ±this: small, like trained tables, so the tied output
/// logits of the random model stay O(1) and its loss near ln(vocab).
const EMBED_SCALE: f32 = 0.05;

/// A model with random bf16 weights at a real shape, generated on demand from a seed (each
/// tensor, and each embedding row, from its own stream): benchmarks need no download and no
/// host memory for the whole model.
pub struct SyntheticSource {
    cfg: ModelConfig,
    seed: u64,
}

impl SyntheticSource {
    pub fn new(cfg: ModelConfig, seed: u64) -> SyntheticSource {
        SyntheticSource { cfg, seed }
    }
    fn bits(&self, stream: u64, n: usize, scale: f32, around: f32) -> Vec<u16> {
        let mut rng = crate::kernels::testutil::Rng::new(self.seed ^ stream.wrapping_mul(0x9e3779b97f4a7c15));
        (0..n).map(|_| half::bf16::from_f32(around + ((rng.uniform() * 2.0 - 1.0) as f32) * scale).to_bits()).collect()
    }
    fn random(&self, stream: u64, shape: &[usize], scale: f32, around: f32) -> HostTensor {
        let bits = self.bits(stream, shape.iter().product(), scale, around);
        HostTensor { shape: shape.to_vec(), data: HostData::BF16(bits) }
    }
}

impl WeightSource for SyntheticSource {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn layer(&self, i: usize) -> Result<LayerHost> {
        let cfg = &self.cfg;
        let base = 1000 * (i as u64 + 1);
        let proj = Proj::all()
            .into_iter()
            .map(|p| {
                let (out, inp) = p.dims(cfg);
                let w = self.random(base + p as u64, &[out, inp], 1.0 / (inp as f32).sqrt(), 0.0);
                let b = p.has_bias(cfg).then(|| self.random(base + 10 + p as u64, &[out], 0.02, 0.0));
                (w, b)
            })
            .collect();
        Ok(LayerHost {
            input_norm: self.random(base + 20, &[cfg.hidden], 0.1, 1.0),
            post_norm: self.random(base + 21, &[cfg.hidden], 0.1, 1.0),
            proj,
        })
    }
    fn final_norm(&self) -> Result<HostTensor> {
        Ok(self.random(7, &[self.cfg.hidden], 0.1, 1.0))
    }
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(ids.len() * self.cfg.hidden);
        for &id in ids {
            out.extend(self.random(1 << 40 | id as u64, &[self.cfg.hidden], EMBED_SCALE, 0.0).to_f32());
        }
        Ok(out)
    }
    fn output_rows(&self, r0: usize, r1: usize) -> Result<HostTensor> {
        // Tied, like every benchmarked shape: row r is embedding row r.
        let c = self.cfg.hidden;
        let mut bits = Vec::with_capacity((r1 - r0) * c);
        for r in r0..r1 {
            bits.extend(self.bits(1 << 40 | r as u64, c, EMBED_SCALE, 0.0));
        }
        Ok(HostTensor { shape: vec![r1 - r0, c], data: HostData::BF16(bits) })
    }
}
