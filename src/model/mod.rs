//! The transformer: its weights on the GPU ([`weights`]), where they come from ([`source`], the
//! seam the weight store implements) and how they are loaded or streamed ([`load`]), LoRA
//! adapters ([`lora`]), the block forward and its MeSP backward ([`block`]), and here the
//! whole-model loss and gradients.

pub mod block;
pub mod load;
pub mod lora;
pub mod lora_linear;
pub mod source;
pub mod synthetic;
pub mod weights;

pub use load::{LayerRef, ResidentLoader};
pub use source::{step_tensors, Fetch, LoadStep, WeightSource};

use crate::base::config::ModelConfig;
use crate::base::dtype::DType;
use crate::base::error::{Error, Result};
use crate::formats::batch::Batch;
use crate::gpu::{Category, Gpu, Tensor};
use crate::kernels::attention::AttnShape;
use crate::kernels::cross_entropy::{lm_head_ce_forward, lm_head_ce_forward_backward, LoadChunk};
use crate::kernels::rmsnorm::{rmsnorm_backward, rmsnorm_forward};
use crate::kernels::rope::{rope_table, RopeTable};
use block::{block_backward, block_forward_keep, block_forward_lean, BlockCtx, Mode, Saved};
use lora::{Lora, LoraSet};
use std::sync::Arc;
use weights::{ModelWeights, WeightFormat};

/// Tokens per chunk of the lm_head + cross-entropy (scratch = this × vocab chunk rows floats).
pub const CE_TOKEN_CHUNK: usize = 256;

/// Most bytes of one (tokens, intermediate) f32 tensor in MeSP's chunked MLP. 2.5 MiB lets
/// Qwen2.5-0.5B's 256 tokens run as two chunks of 128 rows, which fill the products' workgroups
/// (2 MiB made three of 96, 96 and 64): its step 12.7–12.8 → 11.7 s on lavapipe for 3.5 MB more
/// at the peak (74.3 → 77.8 MB).
pub const MLP_CHUNK_BYTES: usize = 5 << 19;

/// Most tokens per chunk of MeSP's MLP for this model (at least 8, a matmul tile); the
/// tokens are split into equal chunks of at most this many.
pub fn mlp_chunk_rows(cfg: &ModelConfig) -> usize {
    (MLP_CHUNK_BYTES / (4 * cfg.intermediate.max(1))).max(8)
}

/// Where the LoRA gradients of a backward go.
pub enum Grads<'a> {
    /// Accumulated (+=) into a whole set (gradient accumulation, clipping over all of them).
    Full(&'a LoraSet),
    /// One layer at a time: before block i's backward `row` (a one-layer set) is zeroed, the block writes its
    /// gradients there, and `apply(i, row)` runs right after (a fused optimizer update), so
    /// no whole gradient set is ever held. Every layer has the same LoRA shapes as `row`.
    PerLayer { row: &'a lora::LoraSet, apply: &'a mut dyn FnMut(usize, &lora::LoraSet) },
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
    prepared: load::Prepared,
    /// Streamed from an async store: what fetches each step's weights before they are read.
    fetch: Option<Arc<dyn Fetch>>,
    /// Tokens per chunk of MeSP's MLP backward (default [`mlp_chunk_rows`]; 0 = no chunking).
    pub mlp_chunk_rows: usize,
}

impl Model {
    /// x (N, C) = embedding rows of the input ids.
    async fn embed(&self, gpu: &Gpu, input: &StepInput, x: &Tensor) -> Result<()> {
        self.embed_ids(gpu, &input.ids_host, &input.ids, x).await
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
        let Some(mut grads) = grads else {
            lm_head_ce_forward(gpu, &xf, &table, &input.targets, input.inv_count, &lse, &loss_t, CE_TOKEN_CHUNK)
                .await?;
            self.phase_then(gpu, || "lm_head forward".into(), None).await?;
            return Ok(gpu.read_f32(&loss_t).await?[0]);
        };
        // The loss and its gradient at the final norm's output in one pass over the table.
        let dxf = gpu.zeros(&[n, cfg.hidden], DType::F32, Category::Activations)?;
        lm_head_ce_forward_backward(
            gpu,
            &xf,
            &table,
            &input.targets,
            input.inv_count,
            &lse,
            &loss_t,
            &dxf,
            0.0,
            CE_TOKEN_CHUNK,
        )
        .await?;
        drop((xf, lse));
        let mut dx = gpu.zeros(&[n, cfg.hidden], DType::F32, Category::Activations)?;
        rmsnorm_backward(gpu, &dxf, &x, &self.weights.norm, &rstd, &dx, 0.0);
        drop((dxf, rstd, x));
        let last = cfg.layers.checked_sub(1).map(LoadStep::Layer);
        self.phase_then(gpu, || "lm_head".into(), last).await?;
        // A loss that is not finite ends the step here: no block backward, no update (the
        // trainer skips it). The GPU is idle after the phase, so this read costs one small copy.
        let loss = gpu.read_f32(&loss_t).await?[0];
        if !loss.is_finite() {
            return Ok(loss);
        }

        // Backward through the blocks.
        for i in (0..cfg.layers).rev() {
            let xin = checkpoints.pop().ok_or_else(|| Error::msg("missing checkpoint"))?;
            let sv = saved.pop().flatten();
            let w = self.layer(gpu, i)?;
            let row: &[Option<lora::LoraPair>] = match &grads {
                Grads::Full(set) => &set.layers[i],
                Grads::PerLayer { row, .. } => {
                    lora::zero_row(gpu, row);
                    &row.layers[0]
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

/// Close a phase of the timeline, after waiting for the GPU to finish it, or on a GPU the phase
/// before ([`Gpu::end_phase`]). Waiting at every block bounds the work in flight to one or two
/// blocks, and the accounting holds a dropped buffer's bytes until the work that used it has run
/// (a buffer still used by queued work lives on in the driver); on the CPU emulators waiting
/// for each block is faster (measured: 73 s instead of 136 s per Qwen2.5-0.5B step on
/// lavapipe with no wait at all), on a GPU the host records a block while the device runs the one before.
async fn phase(gpu: &Gpu, name: impl FnOnce() -> String) -> Result<()> {
    gpu.end_phase().await?;
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
