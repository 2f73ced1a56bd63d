//! Loading a model's frozen weights onto the GPU: all of them once ([`Model::load_as`],
//! [`Model::resident`], [`ResidentLoader`] one [`LoadStep`] at a time), or streamed: only the
//! block being computed (or one vocab chunk of a table) is on the GPU, uploaded right before it
//! runs (in forward, and again for the backward's recompute) and dropped after it; the
//! embedding is gathered on the host for the batch's ids only. A streamed model keeps each
//! block converted to its GPU layout on the host ([`Model::streamed`]), converts it again on
//! every upload ([`Model::streamed_uncached`]), or fetches it from an async store first
//! ([`Model::streamed_fetched`]).

use super::source::{Fetch, LayerHost, LoadStep, WeightSource};
use super::weights::{
    chunk_rows_for, converted_f32, prepare_matrix, upload_matrix_as, upload_prepared, upload_vector, LayerWeights,
    Linear, ModelWeights, PreparedMatrix, RowChunks, WeightFormat,
};
use super::{mlp_chunk_rows, phase, Model};
use crate::base::config::ModelConfig;
use crate::base::dtype::DType;
use crate::base::error::{Error, Result};
use crate::base::host::HostTensor;
use crate::formats::checkpoint::Checkpoint;
use crate::gpu::{Category, Gpu, Tensor};
use crate::kernels::cross_entropy::{LoadChunk, TableChunks, VocabTable, DEFAULT_CHUNK_ROWS};
use crate::kernels::embedding::embedding_forward;
use futures_util::future::LocalBoxFuture;
use std::sync::Arc;

/// The kinds of host work a streamed model's uploads are profiled as ([`Gpu::host_work`]).
const FETCH: &str = "weights: fetch from the store";
const READ: &str = "weights: read from the source";
const CONVERT: &str = "weights: convert to the GPU layout";
const WRITE: &str = "weights: write into GPU buffers";

/// Host-side cache of a streamed model in GPU layout.
#[derive(Default)]
pub(crate) struct Prepared {
    on: bool,
    layers: std::sync::Mutex<Vec<Option<std::sync::Arc<PreparedLayer>>>>,
    table: std::sync::Mutex<Vec<Option<std::sync::Arc<PreparedMatrix>>>>,
    /// Without the cache: the next block, converted while the GPU computed the current one
    /// ([`Model::phase_then`]).
    ahead: std::sync::Mutex<Option<(usize, Arc<PreparedLayer>)>>,
}

/// Entry `i` of a host cache, made by `make` (and kept) on first use.
fn cached<T, E>(
    cache: &std::sync::Mutex<Vec<Option<std::sync::Arc<T>>>>,
    i: usize,
    make: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<std::sync::Arc<T>, E> {
    if let Some(p) = cache.lock().ok().and_then(|v| v.get(i).cloned().flatten()) {
        return Ok(p);
    }
    let p = std::sync::Arc::new(make()?);
    if let Ok(mut v) = cache.lock() {
        if v.len() <= i {
            v.resize(i + 1, None);
        }
        v[i] = Some(p.clone());
    }
    Ok(p)
}

/// A block's weights: resident, or uploaded for this use and dropped afterwards.
pub enum LayerRef<'a> {
    Resident(&'a LayerWeights),
    Streamed(LayerWeights),
}

impl std::ops::Deref for LayerRef<'_> {
    type Target = LayerWeights;
    fn deref(&self) -> &LayerWeights {
        match self {
            LayerRef::Resident(w) => w,
            LayerRef::Streamed(w) => w,
        }
    }
}

impl Model {
    pub fn load(gpu: &Gpu, ckpt: &Checkpoint) -> Result<Model> {
        Self::load_as(gpu, ckpt, WeightFormat::Stored)
    }

    /// Every frozen weight resident on the GPU, in `format`.
    pub fn load_as(gpu: &Gpu, ckpt: &Checkpoint, format: WeightFormat) -> Result<Model> {
        let weights = ModelWeights::load_as(gpu, ckpt, format)?;
        let cfg = ckpt.config().clone();
        let mlp_chunk_rows = mlp_chunk_rows(&cfg);
        Ok(Model { cfg, weights, stream: None, prepared: Prepared::default(), fetch: None, mlp_chunk_rows })
    }

    /// Streamed: only the block being computed (or one vocab chunk) is on the GPU. Each block
    /// and table chunk is converted to its GPU layout on first use and kept on the host in that
    /// layout (like a weight store holding GPU-ready chunks), so later uploads are copies;
    /// [`Model::streamed_uncached`] converts every time instead.
    pub fn streamed(gpu: &Gpu, source: std::sync::Arc<dyn WeightSource>, format: WeightFormat) -> Result<Model> {
        let cfg = source.config().clone();
        let norm = upload_vector(gpu, &source.final_norm()?, Category::Weights)?;
        let rows = chunk_rows_for(gpu, cfg.hidden, format.dtype(DType::BF16)).min(DEFAULT_CHUNK_ROWS);
        let weights = ModelWeights {
            embed: RowChunks { chunks: Vec::new(), chunk_rows: rows, rows: cfg.vocab },
            layers: Vec::new(),
            norm,
            lm_head: None,
        };
        let mlp_chunk_rows = mlp_chunk_rows(&cfg);
        let prepared = Prepared { on: true, ..Prepared::default() };
        Ok(Model { cfg, weights, stream: Some((source, format)), prepared, fetch: None, mlp_chunk_rows })
    }

    /// [`Model::streamed`] without the host cache: every upload converts from the source again
    /// (host memory stays at one block; slower).
    pub fn streamed_uncached(
        gpu: &Gpu,
        source: std::sync::Arc<dyn WeightSource>,
        format: WeightFormat,
    ) -> Result<Model> {
        let mut m = Self::streamed(gpu, source, format)?;
        m.prepared.on = false;
        Ok(m)
    }

    /// Streamed from a source that must be fetched asynchronously (IndexedDB): before every
    /// block, embedding range and vocab chunk is read, `fetch` makes it readable; the next
    /// block is fetched and converted while the GPU computes the current one. Nothing is cached
    /// on the host, so host memory holds about one block's stored bytes (and the next one in
    /// its GPU layout) whatever the model's size.
    pub async fn streamed_fetched(
        gpu: &Gpu,
        source: Arc<dyn WeightSource>,
        format: WeightFormat,
        fetch: Arc<dyn Fetch>,
    ) -> Result<Model> {
        fetch.fetch(LoadStep::FinalNorm).await?;
        let mut m = Self::streamed_uncached(gpu, source, format)?;
        m.fetch = Some(fetch);
        Ok(m)
    }

    /// Make `step`'s weights readable from the source (nothing to do unless it is fetched).
    pub(crate) async fn fetch(&self, gpu: &Gpu, step: LoadStep) -> Result<()> {
        match &self.fetch {
            Some(f) => gpu.host_work_async(FETCH, f.fetch(step)).await,
            None => Ok(()),
        }
    }

    /// Close a phase ([`phase`]) while the weights of `next` are made ready: a streamed
    /// model's next block is fetched from the store and converted to its GPU layout while the
    /// GPU finishes the current one (the queued work is submitted first, so that it runs
    /// meanwhile).
    pub(crate) async fn phase_then(
        &self,
        gpu: &Gpu,
        name: impl FnOnce() -> String,
        next: Option<LoadStep>,
    ) -> Result<()> {
        gpu.flush();
        let ahead = async {
            match next {
                Some(step) => {
                    self.fetch(gpu, step).await?;
                    self.prepare_ahead(gpu, step)
                }
                None => Ok(()),
            }
        };
        // The host's work first: natively the wait for the GPU blocks the thread.
        let (ready, done) = futures_util::future::join(ahead, phase(gpu, name)).await;
        done.and(ready)
    }

    /// Block i's weights, fetched first where the store needs it (see [`Model::layer`]).
    pub(crate) async fn fetch_layer(&self, gpu: &Gpu, i: usize) -> Result<LayerRef<'_>> {
        self.fetch(gpu, LoadStep::Layer(i)).await?;
        self.layer(gpu, i)
    }

    /// The output table's chunking: (number of vocab chunks, rows per chunk).
    pub(crate) fn output_chunking(&self) -> (usize, usize) {
        match &self.stream {
            None => {
                let t = self.weights.output_table();
                (t.chunks.len(), t.chunk_rows)
            }
            Some(_) => {
                let rows = self.weights.embed.chunk_rows;
                (self.cfg.vocab.div_ceil(rows), rows)
            }
        }
    }

    /// The rows r0..r1 of a streamed model's vocab chunk i (an i past the table: empty).
    fn table_rows(&self, i: usize) -> (usize, usize) {
        let (rows, vocab) = (self.weights.embed.chunk_rows, self.cfg.vocab);
        (i * rows, ((i + 1) * rows).min(vocab).max(i * rows))
    }

    /// Vocab chunk i of the embedding table (`output` false) or of the output table, as a
    /// [`LoadStep`] of a streamed model.
    pub(crate) fn table_step(&self, output: bool, i: usize) -> LoadStep {
        let (r0, r1) = self.table_rows(i);
        LoadStep::Table { output, r0, r1 }
    }

    /// Bytes of the host cache of a streamed model (0 when resident or uncached).
    pub fn prepared_bytes(&self) -> usize {
        let l: usize = self.prepared.layers.lock().map(|v| v.iter().flatten().map(|p| p.bytes()).sum()).unwrap_or(0);
        let t: usize = self.prepared.table.lock().map(|v| v.iter().flatten().map(|p| p.bytes.len()).sum()).unwrap_or(0);
        l + t
    }

    /// Every weight of `source` uploaded once and kept on the GPU in `format` (faster than
    /// streaming, when memory allows; benchmarks of a synthetic shape use it for `--resident`).
    pub fn resident(gpu: &Gpu, source: std::sync::Arc<dyn WeightSource>, format: WeightFormat) -> Result<Model> {
        let mut loader = ResidentLoader::new(gpu, source.config().clone(), format);
        for step in loader.steps() {
            loader.run(gpu, source.as_ref(), step)?;
        }
        loader.finish()
    }

    pub fn is_streamed(&self) -> bool {
        self.stream.is_some()
    }

    /// Block i's weights (uploaded now when streamed).
    pub fn layer(&self, gpu: &Gpu, i: usize) -> Result<LayerRef<'_>> {
        match &self.stream {
            None => Ok(LayerRef::Resident(&self.weights.layers[i])),
            Some(_) => {
                let p = self.prepared_layer(gpu, i)?;
                Ok(LayerRef::Streamed(gpu.host_work(WRITE, || p.upload(gpu))?))
            }
        }
    }

    /// Block i of a streamed model in its GPU layout: from the host cache, or converted ahead,
    /// or read and converted now.
    fn prepared_layer(&self, gpu: &Gpu, i: usize) -> Result<Arc<PreparedLayer>> {
        let Some((src, format)) = &self.stream else {
            return Err(Error::msg("weights: the model is not streamed"));
        };
        let prepare = || {
            let host = gpu.host_work(READ, || src.layer(i))?;
            Ok::<_, Error>(gpu.host_work(CONVERT, || PreparedLayer::new(host, *format)))
        };
        if self.prepared.on {
            return cached(&self.prepared.layers, i, prepare);
        }
        match self.prepared.ahead.lock().ok().and_then(|mut a| a.take()) {
            Some((j, p)) if j == i => Ok(p),
            _ => Ok(Arc::new(prepare()?)),
        }
    }

    /// Convert `step`'s block ahead of its use (a streamed model's next block, while the GPU
    /// computes the current one): into the host cache, or else into the one-block slot that
    /// [`Model::layer`] takes it from.
    fn prepare_ahead(&self, gpu: &Gpu, step: LoadStep) -> Result<()> {
        if let (Some(_), LoadStep::Layer(i)) = (&self.stream, step) {
            let p = self.prepared_layer(gpu, i)?;
            if !self.prepared.on {
                if let Ok(mut a) = self.prepared.ahead.lock() {
                    *a = Some((i, p));
                }
            }
        }
        Ok(())
    }

    /// x (N, C) = embedding rows of `ids_host`, which are also on the GPU as `ids` (N) u32
    /// (resident: gathered there; streamed: gathered on the host and uploaded).
    pub(crate) async fn embed_ids(&self, gpu: &Gpu, ids_host: &[u32], ids: &Tensor, x: &Tensor) -> Result<()> {
        match &self.stream {
            None => embedding_forward(gpu, &self.weights.embed.chunks, self.weights.embed.chunk_rows, ids, x),
            Some((src, format)) => {
                let rows = match &self.fetch {
                    None => src.embedding_rows(ids_host)?,
                    Some(_) => self.embedding_rows_fetched(gpu, src.as_ref(), ids_host).await?,
                };
                // The rows as the resident table holds them in `format` (quantization is per row).
                let t = crate::base::host::HostTensor::from_f32(&[ids_host.len(), self.cfg.hidden], rows);
                gpu.write_f32(x, &converted_f32(&t, *format).to_f32())
            }
        }
        Ok(())
    }

    /// Embedding rows of `ids` from a fetched source, one vocab chunk of the table at a time
    /// (a batch's ids are scattered over the whole table; fetching them all at once would hold
    /// as much of it as they touch).
    async fn embedding_rows_fetched(&self, gpu: &Gpu, src: &dyn WeightSource, ids: &[u32]) -> Result<Vec<f32>> {
        let (c, per) = (self.cfg.hidden, self.weights.embed.chunk_rows);
        let mut out = vec![0f32; ids.len() * c];
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&k| ids[k]);
        for group in order.chunk_by(|&a, &b| ids[a] as usize / per == ids[b] as usize / per) {
            self.fetch(gpu, self.table_step(false, ids[group[0]] as usize / per)).await?;
            let rows = src.embedding_rows(&group.iter().map(|&k| ids[k]).collect::<Vec<_>>())?;
            for (j, &k) in group.iter().enumerate() {
                out[k * c..(k + 1) * c].copy_from_slice(&rows[j * c..(j + 1) * c]);
            }
        }
        Ok(out)
    }

    /// The output table: resident chunks, or chunks `load`ed one at a time (streamed).
    pub(crate) fn vocab_table<'a>(&'a self, load: &'a LoadChunk<'a>) -> VocabTable<'a> {
        let (count, chunk_rows) = self.output_chunking();
        let chunks = match &self.stream {
            None => (&self.weights.output_table().chunks).into(),
            Some(_) => TableChunks::Streamed { count, load },
        };
        VocabTable { chunks, chunk_rows, vocab: self.cfg.vocab }
    }

    /// Vocab chunk i of a streamed output table, uploaded now (fetched first when the source
    /// needs it).
    pub(crate) fn output_chunk<'a>(
        &'a self,
        gpu: &'a Gpu,
        i: usize,
    ) -> LocalBoxFuture<'a, std::result::Result<Tensor, crate::gpu::GpuError>> {
        Box::pin(async move {
            let as_gpu = |e: Error| match e {
                Error::Gpu(g) => g,
                other => crate::gpu::GpuError::Readback(format!("weights: {other}")),
            };
            let Some((src, format)) = &self.stream else {
                return Err(crate::gpu::GpuError::Readback("weights: the model is not streamed".into()));
            };
            let (r0, r1) = self.table_rows(i);
            self.fetch(gpu, self.table_step(true, i)).await.map_err(as_gpu)?;
            let prepare = || {
                let rows = gpu.host_work(READ, || src.output_rows(r0, r1)).map_err(as_gpu)?;
                Ok(gpu.host_work(CONVERT, || prepare_matrix(&rows, *format)))
            };
            let p = if self.prepared.on { cached(&self.prepared.table, i, prepare)? } else { Arc::new(prepare()?) };
            gpu.host_work(WRITE, || upload_prepared(gpu, &p, Category::Weights)).map_err(as_gpu)
        })
    }
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

/// [`Model::resident`] one [`LoadStep`] at a time, so that a browser can fetch each step's
/// weights from IndexedDB (async) right before it and drop them right after: host memory
/// stays at about one block.
pub struct ResidentLoader {
    cfg: ModelConfig,
    format: WeightFormat,
    chunk_rows: usize,
    norm: Option<Tensor>,
    layers: Vec<Option<LayerWeights>>,
    embed: Vec<Option<Tensor>>,
    lm_head: Vec<Option<Tensor>>,
}

impl ResidentLoader {
    pub fn new(gpu: &Gpu, cfg: ModelConfig, format: WeightFormat) -> ResidentLoader {
        let chunk_rows = chunk_rows_for(gpu, cfg.hidden, format.dtype(DType::BF16)).min(DEFAULT_CHUNK_ROWS);
        let n_chunks = cfg.vocab.div_ceil(chunk_rows);
        let lm = if cfg.tie_word_embeddings { 0 } else { n_chunks };
        ResidentLoader {
            layers: (0..cfg.layers).map(|_| None).collect(),
            embed: (0..n_chunks).map(|_| None).collect(),
            lm_head: (0..lm).map(|_| None).collect(),
            cfg,
            format,
            chunk_rows,
            norm: None,
        }
    }

    /// Every step, in order.
    pub fn steps(&self) -> Vec<LoadStep> {
        let mut out = vec![LoadStep::FinalNorm];
        out.extend((0..self.cfg.layers).map(LoadStep::Layer));
        let v = self.cfg.vocab;
        let table = |output: bool| {
            (0..v).step_by(self.chunk_rows).map(move |r0| LoadStep::Table {
                output,
                r0,
                r1: (r0 + self.chunk_rows).min(v),
            })
        };
        if self.cfg.tie_word_embeddings {
            out.extend(table(true));
        } else {
            out.extend(table(false));
            out.extend(table(true));
        }
        out
    }

    /// Read and upload one step's weights.
    pub fn run(&mut self, gpu: &Gpu, source: &dyn WeightSource, step: LoadStep) -> Result<()> {
        let (cfg, format) = (&self.cfg, self.format);
        match step {
            LoadStep::FinalNorm => self.norm = Some(upload_vector(gpu, &source.final_norm()?, Category::Weights)?),
            LoadStep::Layer(i) => self.layers[i] = Some(upload_layer(gpu, &source.layer(i)?, format)?),
            LoadStep::Table { output, r0, r1 } => {
                let t = if output {
                    upload_output_chunk(gpu, source, r0, r1, format)?
                } else {
                    let ids: Vec<u32> = (r0 as u32..r1 as u32).collect();
                    let t =
                        crate::base::host::HostTensor::from_f32(&[r1 - r0, cfg.hidden], source.embedding_rows(&ids)?);
                    upload_matrix_as(gpu, &t, format, Category::Weights)?
                };
                let table = if output && !cfg.tie_word_embeddings { &mut self.lm_head } else { &mut self.embed };
                table[r0 / self.chunk_rows] = Some(t);
            }
        }
        Ok(())
    }

    /// The model, once every step has run.
    pub fn finish(self) -> Result<Model> {
        let incomplete = || Error::msg("loading a model: not every part was loaded");
        let all = |v: Vec<Option<Tensor>>| v.into_iter().collect::<Option<Vec<_>>>().ok_or_else(incomplete);
        let layers = self.layers.into_iter().collect::<Option<Vec<_>>>().ok_or_else(incomplete)?;
        let (rows, vocab) = (self.chunk_rows, self.cfg.vocab);
        let embed = RowChunks { chunks: all(self.embed)?, chunk_rows: rows, rows: vocab };
        let lm_head = if self.cfg.tie_word_embeddings {
            None
        } else {
            Some(RowChunks { chunks: all(self.lm_head)?, chunk_rows: rows, rows: vocab })
        };
        let weights = ModelWeights { embed, layers, norm: self.norm.ok_or_else(incomplete)?, lm_head };
        let mlp_chunk_rows = mlp_chunk_rows(&self.cfg);
        Ok(Model { cfg: self.cfg, weights, stream: None, prepared: Prepared::default(), fetch: None, mlp_chunk_rows })
    }
}
