//! The frozen base model on the GPU, mirroring the checkpoint's key names.
//! Projection weights and the embedding (and untied lm_head) table keep their stored 16-bit
//! (or f32) form, or are converted at upload to the [`WeightFormat`] asked for (bf16, or
//! blockwise Q8/Q4 quantized along their rows, dequantized inside the kernels); norm weights
//! and biases are small and kept as f32. The tables are split by rows so that no buffer
//! exceeds the device's binding limit. [`quantized_checkpoint_f32`] gives the f32 values the
//! GPU model then computes with (for reference fixtures).

use crate::base::config::ModelConfig;
use crate::base::dtype::{dequantize, quantize, DType};
use crate::base::error::{Error, Result};
use crate::base::host::{HostData, HostTensor};
use crate::base::names::{self, Proj};
use crate::formats::checkpoint::Checkpoint;
use crate::gpu::{Category, Gpu, Tensor};

/// How the frozen matrices (projections, embedding, untied lm_head) are kept on the GPU
/// (`--weights stored|bf16|q8|q4`). Gradients are exact for the model so converted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum WeightFormat {
    /// As the checkpoint stores them (f32, bf16 or f16).
    #[default]
    Stored,
    /// bfloat16 (f32 and f16 checkpoints are rounded to nearest).
    Bf16,
    /// Blockwise 8-bit along rows, groups of 32, w = scale·q + offset (`DType::Q8`).
    Q8,
    /// Blockwise 4-bit along rows, groups of 64, w = scale·q + offset (`DType::Q4`).
    Q4,
}

impl WeightFormat {
    pub fn name(self) -> &'static str {
        match self {
            WeightFormat::Stored => "stored",
            WeightFormat::Bf16 => "bf16",
            WeightFormat::Q8 => "q8",
            WeightFormat::Q4 => "q4",
        }
    }

    /// Parse `stored`, `bf16`, `q8` or `q4`.
    pub fn parse(s: &str) -> std::result::Result<WeightFormat, String> {
        [WeightFormat::Stored, WeightFormat::Bf16, WeightFormat::Q8, WeightFormat::Q4]
            .into_iter()
            .find(|f| f.name() == s.trim().to_ascii_lowercase())
            .ok_or_else(|| format!("unknown weight format {s:?} (known: stored, bf16, q8, q4)"))
    }

    /// The GPU dtype of a matrix stored as `stored`.
    pub fn dtype(self, stored: DType) -> DType {
        match self {
            WeightFormat::Stored => stored,
            WeightFormat::Bf16 => DType::BF16,
            WeightFormat::Q8 => DType::Q8,
            WeightFormat::Q4 => DType::Q4,
        }
    }
}

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
    upload_matrix_as(gpu, t, WeightFormat::Stored, cat)
}

/// Upload a (rows, cols) matrix in `format` (converted or quantized along its rows).
pub fn upload_matrix_as(gpu: &Gpu, t: &HostTensor, format: WeightFormat, cat: Category) -> Result<Tensor> {
    let cols = t.shape.last().copied().unwrap_or(1);
    let rows = t.numel().checked_div(cols).unwrap_or(0);
    upload_rows(gpu, t, 0, rows, &t.shape, format, cat)
}

/// Upload rows r0..r1 of matrix `t` as a tensor of `shape` in `format`.
fn upload_rows(
    gpu: &Gpu,
    t: &HostTensor,
    r0: usize,
    r1: usize,
    shape: &[usize],
    format: WeightFormat,
    cat: Category,
) -> Result<Tensor> {
    upload_prepared(gpu, &prepare_rows(t, r0, r1, shape, format), cat)
}

/// A matrix already in its GPU layout on the host (packed 16-bit rows, or quantized words):
/// uploading it is a copy. Streamed models keep their blocks like this, so that a block's
/// upload costs no conversion.
pub struct PreparedMatrix {
    pub bytes: Vec<u8>,
    pub shape: Vec<usize>,
    pub dtype: DType,
}

/// Convert a (rows, cols) matrix to `format`'s GPU layout.
pub fn prepare_matrix(t: &HostTensor, format: WeightFormat) -> PreparedMatrix {
    let cols = t.shape.last().copied().unwrap_or(1);
    let rows = t.numel().checked_div(cols).unwrap_or(0);
    prepare_rows(t, 0, rows, &t.shape, format)
}

fn prepare_rows(t: &HostTensor, r0: usize, r1: usize, shape: &[usize], format: WeightFormat) -> PreparedMatrix {
    let cols = t.shape.last().copied().unwrap_or(1);
    let range = r0 * cols..r1 * cols;
    let dtype = format.dtype(t.dtype());
    let u16_rows = |bits: &[u16]| -> Vec<u8> {
        if cols % 2 == 0 {
            return bytemuck::cast_slice(bits).to_vec();
        }
        let mut padded = Vec::with_capacity(bits.len() + bits.len() / cols.max(1));
        for row in bits.chunks(cols.max(1)) {
            padded.extend_from_slice(row);
            padded.push(0);
        }
        bytemuck::cast_slice(&padded).to_vec()
    };
    let bytes = match (&t.data, dtype) {
        (HostData::F32(v), DType::F32) => bytemuck::cast_slice(&v[range]).to_vec(),
        (HostData::BF16(b), DType::BF16) | (HostData::F16(b), DType::F16) => u16_rows(&b[range]),
        (_, DType::F32) => bytemuck::cast_slice(&rows_f32(t, range)).to_vec(),
        (_, DType::BF16) => {
            u16_rows(&rows_f32(t, range).iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect::<Vec<_>>())
        }
        (_, DType::F16) => {
            u16_rows(&rows_f32(t, range).iter().map(|&v| half::f16::from_f32(v).to_bits()).collect::<Vec<_>>())
        }
        (_, q @ (DType::Q8 | DType::Q4)) => {
            let words = quantize(&rows_f32(t, range), r1 - r0, cols, q);
            bytemuck::cast_slice(&words).to_vec()
        }
    };
    PreparedMatrix { bytes, shape: shape.to_vec(), dtype }
}

/// Upload a prepared matrix.
pub fn upload_prepared(gpu: &Gpu, m: &PreparedMatrix, cat: Category) -> Result<Tensor> {
    Ok(gpu.upload_bytes(&m.bytes, &m.shape, m.dtype, cat)?)
}

/// Elements `range` of `t` widened to f32.
fn rows_f32(t: &HostTensor, range: std::ops::Range<usize>) -> Vec<f32> {
    match &t.data {
        HostData::F32(v) => v[range].to_vec(),
        HostData::BF16(b) => b[range].iter().map(|&x| half::bf16::from_bits(x).to_f32()).collect(),
        HostData::F16(b) => b[range].iter().map(|&x| half::f16::from_bits(x).to_f32()).collect(),
    }
}

/// The f32 values a matrix stands for once uploaded in `format` (bf16 rounding, or
/// dequantize(quantize(w)) along its rows), exactly as the kernels see them.
pub fn converted_f32(t: &HostTensor, format: WeightFormat) -> HostTensor {
    let v = t.to_f32();
    let cols = t.shape.last().copied().unwrap_or(1);
    let rows = v.len().checked_div(cols).unwrap_or(0);
    let data = match format.dtype(t.dtype()) {
        DType::F32 => v,
        DType::BF16 => v.iter().map(|&x| half::bf16::from_f32(x).to_f32()).collect(),
        DType::F16 => v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect(),
        q @ (DType::Q8 | DType::Q4) => dequantize(&quantize(&v, rows, cols, q), rows, cols, q),
    };
    HostTensor::from_f32(&t.shape, data)
}

/// Every tensor the model reads (in checkpoint order, see `names::expected_tensors`) as the f32
/// values the GPU model loaded with `format` computes with: projection weights and the
/// embedding / lm_head tables converted like [`ModelWeights::load_as`] does, the rest widened.
/// For reference fixtures of the quantized model (saved as an f32 checkpoint, they reload
/// with `WeightFormat::Stored` to the same model).
pub fn quantized_checkpoint_f32(ckpt: &Checkpoint, format: WeightFormat) -> Result<Vec<(String, HostTensor)>> {
    let cfg = ckpt.config();
    let converted = converted_keys(cfg);
    let mut out = Vec::new();
    for (name, shape) in names::expected_tensors(cfg) {
        let t = ckpt.tensor(&name)?;
        expect_shape(&name, &t, &shape)?;
        let t = if converted.contains(&name) { converted_f32(&t, format) } else { t.into_f32() };
        out.push((name, t));
    }
    Ok(out)
}

/// The checkpoint keys whose matrices a [`WeightFormat`] converts.
fn converted_keys(cfg: &ModelConfig) -> std::collections::HashSet<String> {
    let mut keys: std::collections::HashSet<String> =
        (0..cfg.layers).flat_map(|i| Proj::all().map(|p| names::proj_weight_key(i, p))).collect();
    keys.insert(names::EMBED_KEY.to_string());
    keys.insert(names::LM_HEAD_KEY.to_string());
    keys
}

/// Upload a vector (norm weight, bias) as f32.
pub fn upload_vector(gpu: &Gpu, t: &HostTensor, cat: Category) -> Result<Tensor> {
    Ok(gpu.upload_f32(&t.to_f32(), &t.shape, cat)?)
}

/// Rows per chunk for a (rows, cols) table: at most 8192 and within the binding limit.
pub fn chunk_rows_for(gpu: &Gpu, cols: usize, dtype: DType) -> usize {
    let row_bytes = dtype.row_bytes(cols) as u64;
    ((gpu.max_binding() / row_bytes.max(1)) as usize).clamp(1, 8192)
}

/// Upload a (rows, C) table split by rows, in its stored dtype.
pub fn upload_row_chunks(gpu: &Gpu, t: &HostTensor, cat: Category) -> Result<RowChunks> {
    upload_row_chunks_as(gpu, t, WeightFormat::Stored, cat)
}

/// Upload a (rows, C) table split by rows, each chunk in `format` (quantization is per row,
/// so the chunks together hold exactly the quantized table).
pub fn upload_row_chunks_as(gpu: &Gpu, t: &HostTensor, format: WeightFormat, cat: Category) -> Result<RowChunks> {
    let (rows, cols) = (t.shape[0], t.shape.get(1).copied().unwrap_or(1));
    let chunk_rows = chunk_rows_for(gpu, cols, format.dtype(t.dtype()));
    let mut chunks = Vec::new();
    let mut r0 = 0;
    while r0 < rows {
        let r1 = (r0 + chunk_rows).min(rows);
        chunks.push(upload_rows(gpu, t, r0, r1, &[r1 - r0, cols], format, cat)?);
        r0 = r1;
    }
    Ok(RowChunks { chunks, chunk_rows, rows })
}

fn expect_shape(name: &str, t: &HostTensor, want: &[usize]) -> Result<()> {
    if t.shape != want {
        return Err(Error::msg(format!("{name}: expected shape {want:?} (from config.json), found {:?}", t.shape)));
    }
    Ok(())
}

impl ModelWeights {
    /// Load every frozen tensor onto the GPU in its stored dtype, checking names and shapes
    /// against the config.
    pub fn load(gpu: &Gpu, ckpt: &Checkpoint) -> Result<ModelWeights> {
        Self::load_as(gpu, ckpt, WeightFormat::Stored)
    }

    /// Load every frozen tensor onto the GPU, the projection matrices and embedding / lm_head
    /// tables in `format` (norm weights and biases as f32).
    pub fn load_as(gpu: &Gpu, ckpt: &Checkpoint, format: WeightFormat) -> Result<ModelWeights> {
        let cfg: &ModelConfig = ckpt.config();
        let c = cfg.hidden;
        let get = |name: &str, shape: &[usize]| -> Result<HostTensor> {
            let t = ckpt.tensor(name)?;
            expect_shape(name, &t, shape)?;
            Ok(t)
        };
        let embed_t = get(names::EMBED_KEY, &[cfg.vocab, c])?;
        let embed = upload_row_chunks_as(gpu, &embed_t, format, Category::Weights)?;
        drop(embed_t);
        let mut layers = Vec::with_capacity(cfg.layers);
        for i in 0..cfg.layers {
            let input_norm = upload_vector(gpu, &get(&names::input_norm_key(i), &[c])?, Category::Weights)?;
            let post_norm = upload_vector(gpu, &get(&names::post_norm_key(i), &[c])?, Category::Weights)?;
            let mut proj = Vec::with_capacity(7);
            for p in Proj::all() {
                let (out, inp) = p.dims(cfg);
                let wt = get(&names::proj_weight_key(i, p), &[out, inp])?;
                let w = upload_matrix_as(gpu, &wt, format, Category::Weights)?;
                let b = if p.has_bias(cfg) {
                    Some(upload_vector(gpu, &get(&names::proj_bias_key(i, p), &[out])?, Category::Weights)?)
                } else {
                    None
                };
                proj.push(Linear { w, b });
            }
            layers.push(LayerWeights { input_norm, post_norm, proj });
        }
        let norm = upload_vector(gpu, &get(names::FINAL_NORM_KEY, &[c])?, Category::Weights)?;
        let lm_head = if cfg.tie_word_embeddings {
            None
        } else {
            Some(upload_row_chunks_as(gpu, &get(names::LM_HEAD_KEY, &[cfg.vocab, c])?, format, Category::Weights)?)
        };
        Ok(ModelWeights { embed, layers, norm, lm_head })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::testdata::{tiny_checkpoint, tiny_config};
    use crate::gpu_test;
    use crate::kernels::embedding::embedding_forward;
    use crate::kernels::matmul::{matmul_nt, reference};
    use crate::kernels::testutil::{assert_close, Rng};

    #[test]
    fn weight_format_parse() {
        assert_eq!(WeightFormat::parse("q4"), Ok(WeightFormat::Q4));
        assert_eq!(WeightFormat::parse(" BF16"), Ok(WeightFormat::Bf16));
        assert!(WeightFormat::parse("q3").unwrap_err().contains("q8"));
    }

    // The GPU model loaded in each format computes with exactly the weights
    // quantized_checkpoint_f32 reports: the embedding gather matches bit for bit, and x·Wᵀ of
    // every projection and the lm_head matches the f64 product with those weights.
    gpu_test!(async fn load_as_matches_quantized_checkpoint(gpu) {
        for tie in [true, false] {
            let cfg = tiny_config(tie);
            let ckpt = tiny_checkpoint(&cfg, &[], &[]);
            for format in [WeightFormat::Stored, WeightFormat::Bf16, WeightFormat::Q8, WeightFormat::Q4] {
                let w = ModelWeights::load_as(gpu, &ckpt, format).unwrap();
                let host: std::collections::HashMap<String, HostTensor> =
                    quantized_checkpoint_f32(&ckpt, format).unwrap().into_iter().collect();
                let f32s = |name: &str| host[name].to_f32();
                let want_dtype = format.dtype(DType::F32);
                assert!(w.embed.chunks.iter().all(|t| t.dtype == want_dtype), "{format:?} embed dtype");
                assert_eq!(w.layers[1].post_norm.dtype, DType::F32);

                let ids: Vec<u32> = (0..cfg.vocab as u32).rev().collect();
                let tids = gpu.upload_u32(&ids, &[ids.len()], Category::Activations).unwrap();
                let out = gpu.zeros(&[ids.len(), cfg.hidden], DType::F32, Category::Activations).unwrap();
                embedding_forward(gpu, &w.embed.chunks, w.embed.chunk_rows, &tids, &out);
                let got = gpu.read_f32(&out).await.unwrap();
                let table = f32s(names::EMBED_KEY);
                let want: Vec<f64> = ids
                    .iter()
                    .flat_map(|&id| table[id as usize * cfg.hidden..(id as usize + 1) * cfg.hidden].iter().map(|&v| v as f64))
                    .collect();
                assert_close(&format!("{format:?} embedding"), &got, &want, 0.0, 0.0);

                let mut rng = Rng::new(5);
                let mut products: Vec<(String, &Tensor)> =
                    vec![(names::LM_HEAD_KEY.into(), &w.output_table().chunks[0])];
                for p in Proj::all() {
                    products.push((names::proj_weight_key(1, p), &w.layers[1].linear(p).w));
                }
                for (name, wt) in products {
                    let (n, k) = (wt.rows(), wt.cols());
                    let key = if name == names::LM_HEAD_KEY && tie { names::EMBED_KEY } else { name.as_str() };
                    assert_eq!((wt.dtype, host[key].shape.clone()), (want_dtype, vec![n, k]), "{format:?} {key}");
                    let m = 7;
                    let x = rng.vec(m * k, 1.0);
                    let tx = gpu.upload_f32(&x, &[m, k], Category::Activations).unwrap();
                    let ty = gpu.zeros(&[m, n], DType::F32, Category::Activations).unwrap();
                    matmul_nt(gpu, &tx, wt, None, &ty, 1.0, 0.0);
                    let got = gpu.read_f32(&ty).await.unwrap();
                    let x64: Vec<f64> = x.iter().map(|&v| v as f64).collect();
                    let w64: Vec<f64> = f32s(key).iter().map(|&v| v as f64).collect();
                    assert_close(&format!("{format:?} {key}"), &got, &reference::nt(&x64, &w64, m, k, n), 1e-4, 1e-4);
                }
            }
        }
    });
}
