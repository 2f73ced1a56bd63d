//! The transformer: weight layout on the GPU, LoRA adapters, the block forward
//! and its MeSP backward, and the whole-model loss and gradients.

pub mod block;
pub mod layout;
pub mod lora;
pub mod stream;
pub mod weights;

use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::formats::batch::Batch;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::attention::AttnShape;
use crate::kernels::cross_entropy::{
    lm_head_ce_backward, lm_head_ce_forward, LoadChunk, TableChunks, VocabTable, DEFAULT_CHUNK_ROWS,
};
use crate::kernels::embedding::embedding_forward;
use crate::kernels::rmsnorm::{rmsnorm_backward, rmsnorm_forward};
use crate::kernels::rope::{rope_table, RopeTable};
use crate::store::Checkpoint;
use block::{block_backward, block_forward_keep, block_forward_lean, BlockCtx, Mode, Saved};
use futures_util::future::LocalBoxFuture;
use lora::{Lora, LoraSet};
use std::sync::Arc;
use stream::{upload_layer, upload_output_chunk, Fetch, WeightSource};
use weights::{upload_vector, LayerWeights, ModelWeights, RowChunks, WeightFormat};

/// Tokens per chunk of the lm_head + cross-entropy (scratch = this × vocab chunk rows floats).
pub const CE_TOKEN_CHUNK: usize = 256;

/// Most bytes of one (tokens, intermediate) f32 tensor in MeSP's chunked MLP.
pub const MLP_CHUNK_BYTES: usize = 2 << 20;

/// Most tokens per chunk of MeSP's MLP for this model (at least 8, a matmul tile); the
/// tokens are split into equal chunks of at most this many.
pub fn mlp_chunk_rows(cfg: &ModelConfig) -> usize {
    (MLP_CHUNK_BYTES / (4 * cfg.intermediate.max(1))).max(8)
}

/// Where the LoRA gradients of a backward go.
pub enum Grads<'a> {
    /// Accumulated (+=) into a whole set (gradient accumulation, clipping over all of them).
    Full(&'a LoraSet),
    /// One layer at a time: before block i's backward `row` is zeroed, the block writes its
    /// gradients there, and `apply(i, row)` runs right after (a fused optimizer update), so
    /// no whole gradient set is ever held. Every layer has the same LoRA shapes as `row`.
    PerLayer { row: &'a [Option<lora::LoraPair>], apply: &'a mut dyn FnMut(usize, &[Option<lora::LoraPair>]) },
}

/// A batch on the GPU.
pub struct StepInput {
    pub batch: usize,
    pub seq: usize,
    /// ids: (B*T) u32
    pub ids: Tensor,
    /// The same ids on the host (streamed models gather embedding rows there)
    pub ids_host: Vec<u32>,
    /// targets: (B*T) i32, already shifted; -100 = ignored
    pub targets: Tensor,
    /// mask: (B*T) u32, None when nothing is padded
    pub mask: Option<Tensor>,
    /// 1 / number of non-ignored targets
    pub inv_count: f32,
}

pub struct Model {
    pub cfg: ModelConfig,
    /// The resident weights (in streamed mode only the final norm; layers and tables are empty).
    pub weights: ModelWeights,
    /// Streamed mode: where block weights and table chunks come from, and their GPU format.
    stream: Option<(std::sync::Arc<dyn WeightSource>, WeightFormat)>,
    /// Streamed mode: blocks and table chunks already converted to their GPU layout on the host
    /// (made on first use), so each upload is a copy (see [`Model::streamed`]).
    prepared: Prepared,
    /// Streamed from an async store: what fetches each step's weights before they are read.
    fetch: Option<Arc<dyn Fetch>>,
    /// Tokens per chunk of MeSP's MLP backward (default [`mlp_chunk_rows`]; 0 = no chunking).
    pub mlp_chunk_rows: usize,
}

/// Host-side cache of a streamed model in GPU layout.
#[derive(Default)]
struct Prepared {
    on: bool,
    layers: std::sync::Mutex<Vec<Option<std::sync::Arc<stream::PreparedLayer>>>>,
    table: std::sync::Mutex<Vec<Option<std::sync::Arc<weights::PreparedMatrix>>>>,
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
        let rows = weights::chunk_rows_for(gpu, cfg.hidden, format.dtype(DType::BF16)).min(DEFAULT_CHUNK_ROWS);
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
    /// block is fetched while the GPU computes the current one. Nothing is cached on the host,
    /// so host memory holds about one block's stored bytes whatever the model's size.
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
    pub(crate) async fn fetch(&self, step: LoadStep) -> Result<()> {
        match &self.fetch {
            Some(f) => f.fetch(step).await,
            None => Ok(()),
        }
    }

    /// Close a phase ([`phase`]) while the weights of `next` are fetched: a streamed model's
    /// next block is read from the store while the GPU finishes the current one.
    async fn phase_then(&self, gpu: &Gpu, name: impl FnOnce() -> String, next: Option<LoadStep>) -> Result<()> {
        let fetch = async {
            match next {
                Some(step) => self.fetch(step).await,
                None => Ok(()),
            }
        };
        let (done, fetched) = futures_util::future::join(phase(gpu, name), fetch).await;
        done.and(fetched)
    }

    /// Block i's weights, fetched first where the store needs it (see [`Model::layer`]).
    pub(crate) async fn fetch_layer(&self, gpu: &Gpu, i: usize) -> Result<LayerRef<'_>> {
        self.fetch(LoadStep::Layer(i)).await?;
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
    fn table_step(&self, output: bool, i: usize) -> LoadStep {
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
            Some((src, format)) if self.prepared.on => {
                let p = cached(&self.prepared.layers, i, || {
                    Ok::<_, Error>(stream::PreparedLayer::new(src.layer(i)?, *format))
                })?;
                Ok(LayerRef::Streamed(p.upload(gpu)?))
            }
            Some((src, format)) => Ok(LayerRef::Streamed(upload_layer(gpu, &src.layer(i)?, *format)?)),
        }
    }

    /// x (N, C) = embedding rows of the input ids.
    async fn embed(&self, gpu: &Gpu, input: &StepInput, x: &Tensor) -> Result<()> {
        self.embed_ids(gpu, &input.ids_host, &input.ids, x).await
    }

    /// x (N, C) = embedding rows of `ids_host`, which are also on the GPU as `ids` (N) u32
    /// (resident: gathered there; streamed: gathered on the host and uploaded).
    pub(crate) async fn embed_ids(&self, gpu: &Gpu, ids_host: &[u32], ids: &Tensor, x: &Tensor) -> Result<()> {
        match &self.stream {
            None => embedding_forward(gpu, &self.weights.embed.chunks, self.weights.embed.chunk_rows, ids, x),
            Some((src, format)) => {
                let rows = match &self.fetch {
                    None => src.embedding_rows(ids_host)?,
                    Some(_) => self.embedding_rows_fetched(src.as_ref(), ids_host).await?,
                };
                // The rows as the resident table holds them in `format` (quantization is per row).
                let t = crate::store::HostTensor::from_f32(&[ids_host.len(), self.cfg.hidden], rows);
                gpu.write_f32(x, &weights::converted_f32(&t, *format).to_f32())
            }
        }
        Ok(())
    }

    /// Embedding rows of `ids` from a fetched source, one vocab chunk of the table at a time
    /// (a batch's ids are scattered over the whole table; fetching them all at once would hold
    /// as much of it as they touch).
    async fn embedding_rows_fetched(&self, src: &dyn WeightSource, ids: &[u32]) -> Result<Vec<f32>> {
        let (c, per) = (self.cfg.hidden, self.weights.embed.chunk_rows);
        let mut out = vec![0f32; ids.len() * c];
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|&k| ids[k]);
        for group in order.chunk_by(|&a, &b| ids[a] as usize / per == ids[b] as usize / per) {
            self.fetch(self.table_step(false, ids[group[0]] as usize / per)).await?;
            let rows = src.embedding_rows(&group.iter().map(|&k| ids[k]).collect::<Vec<_>>())?;
            for (j, &k) in group.iter().enumerate() {
                out[k * c..(k + 1) * c].copy_from_slice(&rows[j * c..(j + 1) * c]);
            }
        }
        Ok(out)
    }

    /// The RoPE table of this batch's length, made per step (a few KB) so that nothing of a
    /// step outlives it.
    fn rope_for(&self, gpu: &Gpu, seq: usize) -> Result<RopeTable> {
        Ok(rope_table(gpu, seq, self.cfg.head_dim, self.cfg.rope_theta)?)
    }

    /// Upload a validated batch.
    pub fn prepare(&self, gpu: &Gpu, batch: &Batch) -> Result<StepInput> {
        let n = batch.rows * batch.seq;
        let (targets, count) = batch.shifted_targets();
        if count == 0 {
            return Err(Error::msg("batch: no position has a label (all labels are -100)"));
        }
        let ids = gpu.upload_u32(&batch.input_ids, &[n], Category::Activations)?;
        let tbits: Vec<u32> = targets.iter().map(|&t| t as u32).collect();
        let targets = gpu.upload_u32(&tbits, &[n], Category::Activations)?;
        let mask = match &batch.attention_mask {
            Some(m) if m.contains(&0) => Some(gpu.upload_u32(m, &[n], Category::Activations)?),
            _ => None,
        };
        Ok(StepInput {
            batch: batch.rows,
            seq: batch.seq,
            ids,
            ids_host: batch.input_ids.clone(),
            targets,
            mask,
            inv_count: 1.0 / count as f32,
        })
    }

    fn attn_shape(&self, input: &StepInput) -> AttnShape {
        AttnShape {
            batch: input.batch,
            seq: input.seq,
            heads: self.cfg.heads,
            kv_heads: self.cfg.kv_heads,
            head_dim: self.cfg.head_dim,
        }
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
            self.fetch(self.table_step(true, i)).await.map_err(as_gpu)?;
            if !self.prepared.on {
                return upload_output_chunk(gpu, src.as_ref(), r0, r1, *format).map_err(as_gpu);
            }
            let p = cached(&self.prepared.table, i, || {
                Ok(weights::prepare_matrix(&src.output_rows(r0, r1).map_err(as_gpu)?, *format))
            })?;
            weights::upload_prepared(gpu, &p, Category::Weights).map_err(as_gpu)
        })
    }

    /// Mean cross-entropy of the batch, and (when `grads` is given) the LoRA
    /// gradients accumulated (+=) into it, with the MeSP schedule: only block
    /// inputs are kept through the forward; each block is recomputed in backward.
    pub async fn loss_and_grads(
        &self,
        gpu: &Gpu,
        lora: &Lora,
        grads: Option<&LoraSet>,
        input: &StepInput,
    ) -> Result<f32> {
        self.loss_and_grads_mode(gpu, lora, grads, input, Mode::Mesp).await
    }

    /// [`Model::loss_and_grads`] with a choice of memory schedule ([`Mode`]); all give the same
    /// gradients. The allocator's timeline (when recording) gets one sample per phase.
    pub async fn loss_and_grads_mode(
        &self,
        gpu: &Gpu,
        lora: &Lora,
        grads: Option<&LoraSet>,
        input: &StepInput,
        mode: Mode,
    ) -> Result<f32> {
        self.loss_and_grads_into(gpu, lora, grads.map(Grads::Full), input, mode).await
    }

    /// [`Model::loss_and_grads_mode`] with the gradients going where `grads` says (a whole
    /// set, or layer by layer into a fused update).
    pub async fn loss_and_grads_into(
        &self,
        gpu: &Gpu,
        lora: &Lora,
        grads: Option<Grads<'_>>,
        input: &StepInput,
        mode: Mode,
    ) -> Result<f32> {
        let cfg = &self.cfg;
        let n = input.batch * input.seq;
        let rope = self.rope_for(gpu, input.seq)?;
        let ctx = BlockCtx {
            cfg,
            attn: self.attn_shape(input),
            rope: &rope,
            mask: input.mask.as_ref(),
            scale: lora.scale(),
            mlp_chunk_rows: self.mlp_chunk_rows,
        };
        let keep_all = mode == Mode::Full && grads.is_some();
        // MeSP also chunks the MLP of the checkpointed forward; MeBP runs it whole, as autograd.
        let fwd_ctx = BlockCtx { mlp_chunk_rows: if mode == Mode::Mesp { ctx.mlp_chunk_rows } else { 0 }, ..ctx };
        let x0 = gpu.zeros(&[n, cfg.hidden], DType::F32, Category::Checkpoints)?;
        self.embed(gpu, input, &x0).await?;
        self.phase_then(gpu, || "embedding".into(), (cfg.layers > 0).then_some(LoadStep::Layer(0))).await?;
        // Forward, keeping each block's input (and, in full mode, all its intermediates).
        let mut checkpoints: Vec<Tensor> = Vec::with_capacity(cfg.layers + 1);
        let mut saved: Vec<Option<Saved>> = Vec::with_capacity(cfg.layers);
        let mut x = x0;
        for i in 0..cfg.layers {
            let w = self.layer(gpu, i)?;
            let (y, sv) = if keep_all {
                block_forward_keep(gpu, &ctx, &w, Some(&lora.params.layers[i]), &x, true, true)?
            } else {
                (block_forward_lean(gpu, &fwd_ctx, &w, Some(&lora.params.layers[i]), &x)?, None)
            };
            drop(w);
            saved.push(sv);
            let y = retag(gpu, y, Category::Checkpoints)?;
            let xin = std::mem::replace(&mut x, y);
            if grads.is_some() {
                checkpoints.push(xin); // forward only (loss, MeZO): nothing to keep
            }
            let next = if i + 1 < cfg.layers { LoadStep::Layer(i + 1) } else { self.table_step(true, 0) };
            self.phase_then(gpu, || format!("forward {i}"), Some(next)).await?;
        }
        let xf = gpu.zeros(&[n, cfg.hidden], DType::F32, Category::Activations)?;
        let rstd = gpu.zeros(&[n], DType::F32, Category::Activations)?;
        rmsnorm_forward(gpu, &x, &self.weights.norm, cfg.rms_norm_eps as f32, &xf, &rstd);
        let lse = gpu.zeros(&[n], DType::F32, Category::Activations)?;
        let loss_t = gpu.zeros(&[1], DType::F32, Category::Scratch)?;
        let load: &LoadChunk = &|i| self.output_chunk(gpu, i);
        let table = self.vocab_table(load);
        lm_head_ce_forward(gpu, &xf, &table, &input.targets, input.inv_count, &lse, &loss_t, CE_TOKEN_CHUNK).await?;
        let first = grads.is_some().then(|| self.table_step(true, 0));
        self.phase_then(gpu, || "lm_head forward".into(), first).await?;
        let Some(mut grads) = grads else {
            return Ok(gpu.read_f32(&loss_t).await?[0]);
        };
        // A loss that is not finite ends the step here: no backward, no update (the trainer
        // skips it). The GPU is idle after the phase, so this read costs one small copy.
        let loss = gpu.read_f32(&loss_t).await?[0];
        if !loss.is_finite() {
            return Ok(loss);
        }

        // Backward.
        let dxf = gpu.zeros(&[n, cfg.hidden], DType::F32, Category::Activations)?;
        lm_head_ce_backward(gpu, &xf, &table, &input.targets, input.inv_count, &lse, &dxf, 0.0, CE_TOKEN_CHUNK).await?;
        drop((xf, lse));
        let mut dx = gpu.zeros(&[n, cfg.hidden], DType::F32, Category::Activations)?;
        rmsnorm_backward(gpu, &dxf, &x, &self.weights.norm, &rstd, &dx, 0.0);
        drop((dxf, rstd, x));
        let last = cfg.layers.checked_sub(1).map(LoadStep::Layer);
        self.phase_then(gpu, || "lm_head backward".into(), last).await?;
        for i in (0..cfg.layers).rev() {
            let xin = checkpoints.pop().ok_or_else(|| Error::msg("missing checkpoint"))?;
            let sv = saved.pop().flatten();
            let w = self.layer(gpu, i)?;
            let row: &[Option<lora::LoraPair>] = match &grads {
                Grads::Full(set) => &set.layers[i],
                Grads::PerLayer { row, .. } => {
                    crate::train::optimizer::zero_row(gpu, row);
                    row
                }
            };
            dx = block_backward(gpu, &ctx, mode, &w, &lora.params.layers[i], row, &xin, dx, sv)?;
            drop((w, xin));
            if let Grads::PerLayer { row, apply } = &mut grads {
                apply(i, row);
            }
            self.phase_then(gpu, || format!("backward {i}"), i.checked_sub(1).map(LoadStep::Layer)).await?;
        }
        Ok(gpu.read_f32(&loss_t).await?[0])
    }
}

/// Close a phase of the timeline, after waiting for the GPU to finish it. Waiting at every block
/// bounds the work in flight: buffers dropped here are really released (a buffer still used by
/// queued work lives on in the driver, unseen by the accounting), and on the CPU emulators it
/// is faster too (measured: 73 s instead of 136 s per Qwen2.5-0.5B step on lavapipe).
async fn phase(gpu: &Gpu, name: impl FnOnce() -> String) -> Result<()> {
    gpu.sync().await?;
    gpu.alloc.sample(name);
    Ok(())
}

/// Account a tensor under another category (block outputs become checkpoints).
fn retag(gpu: &Gpu, t: Tensor, cat: Category) -> Result<Tensor> {
    if t.category() == cat {
        return Ok(t);
    }
    Ok(gpu.retag(t, cat))
}

/// One piece of loading a resident model: what [`ResidentLoader::run`] reads from the source
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
        LoadStep::FinalNorm => (vec![layout::FINAL_NORM_KEY.to_string()], None),
        LoadStep::Layer(i) => {
            let mut v = vec![layout::input_norm_key(i), layout::post_norm_key(i)];
            for p in layout::Proj::all() {
                v.push(layout::proj_weight_key(i, p));
                if p.has_bias(cfg) {
                    v.push(layout::proj_bias_key(i, p));
                }
            }
            (v, None)
        }
        LoadStep::Table { output, r0, r1 } => {
            let key = if output && !cfg.tie_word_embeddings { layout::LM_HEAD_KEY } else { layout::EMBED_KEY };
            (vec![key.to_string()], Some((r0, r1)))
        }
    }
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
        let chunk_rows = weights::chunk_rows_for(gpu, cfg.hidden, format.dtype(DType::BF16)).min(DEFAULT_CHUNK_ROWS);
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
                    let t = crate::store::HostTensor::from_f32(&[r1 - r0, cfg.hidden], source.embedding_rows(&ids)?);
                    weights::upload_matrix_as(gpu, &t, format, Category::Weights)?
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
