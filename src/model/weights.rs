//! The frozen base model on the GPU, mirroring the checkpoint's key names.
//! Projection weights keep their stored 16-bit (or f32) form; norm weights and
//! biases are small and kept as f32. The embedding (and untied lm_head) table
//! is split by rows so that no buffer exceeds the device's binding limit.

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::model::layout::{self, Proj};
use crate::store::{Checkpoint, HostData, HostTensor};

/// A frozen linear layer: y = x·Wᵀ + b.
pub struct Linear {
    /// w: (out, in), stored dtype
    pub w: Tensor,
    /// b: (out) f32
    pub b: Option<Tensor>,
}

/// One decoder layer (model.layers.{i}).
pub struct LayerWeights {
    /// input_layernorm.weight: (C)
    pub input_norm: Tensor,
    /// post_attention_layernorm.weight: (C)
    pub post_norm: Tensor,
    /// q, k, v, o, gate, up, down, indexed by `Proj as usize`
    pub proj: Vec<Linear>,
}

impl LayerWeights {
    pub fn linear(&self, p: Proj) -> &Linear {
        &self.proj[p as usize]
    }
}

/// A (rows, C) table split by rows into chunks of `chunk_rows` (the last may be short).
pub struct RowChunks {
    pub chunks: Vec<Tensor>,
    pub chunk_rows: usize,
    pub rows: usize,
}

pub struct ModelWeights {
    /// model.embed_tokens.weight: (V, C), in row chunks
    pub embed: RowChunks,
    pub layers: Vec<LayerWeights>,
    /// model.norm.weight: (C)
    pub norm: Tensor,
    /// lm_head.weight: (V, C), None when tied to the embedding
    pub lm_head: Option<RowChunks>,
}

impl ModelWeights {
    /// The output projection table (lm_head, or the embedding when tied).
    pub fn output_table(&self) -> &RowChunks {
        self.lm_head.as_ref().unwrap_or(&self.embed)
    }
}

/// Upload a matrix in its stored dtype (16-bit stays packed).
pub fn upload_matrix(gpu: &Gpu, t: &HostTensor, cat: Category) -> Result<Tensor> {
    Ok(match &t.data {
        HostData::F32(v) => gpu.upload_f32(v, &t.shape, cat)?,
        HostData::BF16(bits) => gpu.upload_u16_rows(bits, &t.shape, DType::BF16, cat)?,
        HostData::F16(bits) => gpu.upload_u16_rows(bits, &t.shape, DType::F16, cat)?,
    })
}

/// Upload a vector (norm weight, bias) as f32.
pub fn upload_vector(gpu: &Gpu, t: &HostTensor, cat: Category) -> Result<Tensor> {
    Ok(gpu.upload_f32(&t.to_f32(), &t.shape, cat)?)
}

/// Rows per chunk for a (rows, cols) table: at most 8192 and within the binding limit.
pub fn chunk_rows_for(gpu: &Gpu, cols: usize, dtype: DType) -> usize {
    let row_bytes = (dtype.padded_row(cols) * dtype.bytes_per_element()) as u64;
    ((gpu.max_binding() / row_bytes.max(1)) as usize).clamp(1, 8192)
}

/// Upload a (rows, C) table split by rows.
pub fn upload_row_chunks(gpu: &Gpu, t: &HostTensor, cat: Category) -> Result<RowChunks> {
    let (rows, cols) = (t.shape[0], t.shape.get(1).copied().unwrap_or(1));
    let chunk_rows = chunk_rows_for(gpu, cols, t.dtype());
    let mut chunks = Vec::new();
    let mut r0 = 0;
    while r0 < rows {
        let r1 = (r0 + chunk_rows).min(rows);
        let shape = [r1 - r0, cols];
        let part = match &t.data {
            HostData::F32(v) => gpu.upload_f32(&v[r0 * cols..r1 * cols], &shape, cat)?,
            HostData::BF16(b) => gpu.upload_u16_rows(&b[r0 * cols..r1 * cols], &shape, DType::BF16, cat)?,
            HostData::F16(b) => gpu.upload_u16_rows(&b[r0 * cols..r1 * cols], &shape, DType::F16, cat)?,
        };
        chunks.push(part);
        r0 = r1;
    }
    Ok(RowChunks { chunks, chunk_rows, rows })
}

fn expect_shape(name: &str, t: &HostTensor, want: &[usize]) -> Result<()> {
    if t.shape != want {
        return Err(Error::msg(format!(
            "{name}: expected shape {want:?} (from config.json), found {:?}",
            t.shape
        )));
    }
    Ok(())
}

impl ModelWeights {
    /// Load every frozen tensor onto the GPU, checking names and shapes against the config.
    pub fn load(gpu: &Gpu, ckpt: &Checkpoint) -> Result<ModelWeights> {
        let cfg: &ModelConfig = ckpt.config();
        let c = cfg.hidden;
        let get = |name: &str, shape: &[usize]| -> Result<HostTensor> {
            let t = ckpt.tensor(name)?;
            expect_shape(name, &t, shape)?;
            Ok(t)
        };
        let embed_t = get(layout::EMBED_KEY, &[cfg.vocab, c])?;
        let embed = upload_row_chunks(gpu, &embed_t, Category::Weights)?;
        drop(embed_t);
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let input_norm = upload_vector(gpu, &get(&layout::input_norm_key(i), &[c])?, Category::Weights)?;
            let post_norm = upload_vector(gpu, &get(&layout::post_norm_key(i), &[c])?, Category::Weights)?;
            let mut proj = Vec::with_capacity(7);
            for p in Proj::all() {
                let (out, inp) = p.dims(cfg);
                let w = upload_matrix(gpu, &get(&layout::proj_weight_key(i, p), &[out, inp])?, Category::Weights)?;
                let b = if p.has_bias(cfg) {
                    Some(upload_vector(gpu, &get(&layout::proj_bias_key(i, p), &[out])?, Category::Weights)?)
                } else {
                    None
                };
                proj.push(Linear { w, b });
            }
            layers.push(LayerWeights { input_norm, post_norm, proj });
        }
        let norm = upload_vector(gpu, &get(layout::FINAL_NORM_KEY, &[c])?, Category::Weights)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(upload_row_chunks(gpu, &get(layout::LM_HEAD_KEY, &[cfg.vocab, c])?, Category::Weights)?)
        };
        Ok(ModelWeights { embed, layers, norm, lm_head })
    }
}
