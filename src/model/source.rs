//! The seam between the model and wherever its frozen weights come from: [`WeightSource`]
//! (host tensors of one block, embedding rows, output-table rows), [`Fetch`] (an async store
//! that must fetch a piece before the source can read it) and [`LoadStep`], the pieces a
//! model is read in, with the tensors each holds ([`step_tensors`]). The model defines this
//! seam; the weight store (src/store, a layer above) implements it. Here too: [`CheckpointSource`], a
//! checkpoint held in host memory.

use crate::base::config::ModelConfig;
use crate::base::error::{Error, Result};
use crate::base::host::{HostData, HostTensor};
use crate::base::names::{self, Proj};
use crate::formats::checkpoint::Checkpoint;
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

/// Where streamed weights come from: a checkpoint in memory ([`CheckpointSource`]), random weights
/// at a real shape for benchmarks (`model::synthetic`), the weight store (src/store).
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

/// One piece of loading a resident model: what [`ResidentLoader::run`](super::ResidentLoader::run) reads from the source
/// at a time (a caller with an async store fetches exactly that piece's chunks first).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LoadStep {
    /// model.norm.weight
    FinalNorm,
    /// Decoder layer i
    Layer(usize),
    /// Rows r0..r1 of the embedding (`output` false) or of the output table (lm_head, or the
    /// embedding when tied)
    Table { output: bool, r0: usize, r1: usize },
}

/// The tensors `step` reads, and for a table step the row range.
pub fn step_tensors(cfg: &ModelConfig, step: LoadStep) -> (Vec<String>, Option<(usize, usize)>) {
    match step {
        LoadStep::FinalNorm => (vec![names::FINAL_NORM_KEY.to_string()], None),
        LoadStep::Layer(i) => {
            let mut v = vec![names::input_norm_key(i), names::post_norm_key(i)];
            for p in names::Proj::all() {
                v.push(names::proj_weight_key(i, p));
                if p.has_bias(cfg) {
                    v.push(names::proj_bias_key(i, p));
                }
            }
            (v, None)
        }
        LoadStep::Table { output, r0, r1 } => {
            let key = if output && !cfg.tie_word_embeddings { names::LM_HEAD_KEY } else { names::EMBED_KEY };
            (vec![key.to_string()], Some((r0, r1)))
        }
    }
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
            let w = get(names::proj_weight_key(i, p), &[out, inp])?;
            let b = if p.has_bias(cfg) { Some(get(names::proj_bias_key(i, p), &[out])?) } else { None };
            proj.push((w, b));
        }
        Ok(LayerHost {
            input_norm: get(names::input_norm_key(i), &[cfg.hidden])?,
            post_norm: get(names::post_norm_key(i), &[cfg.hidden])?,
            proj,
        })
    }
    fn final_norm(&self) -> Result<HostTensor> {
        Ok(self.ckpt.tensor(names::FINAL_NORM_KEY)?)
    }
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let t = self.table(names::EMBED_KEY, &self.embed)?;
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
            self.table(names::EMBED_KEY, &self.embed)?
        } else {
            self.table(names::LM_HEAD_KEY, &self.lm_head)?
        };
        Ok(rows_of(t, r0, r1))
    }
}
