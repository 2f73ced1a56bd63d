//! `webtune grad`: the loss and LoRA gradients of one batch, as a library call
//! shared by the CLI and the tests (native and browser).

use crate::base::error::{Error, Result};
use crate::formats::batch::Batch;
use crate::formats::checkpoint::Checkpoint;
use crate::formats::peft::Adapter;
use crate::gpu::{Category, Gpu};
use crate::model::block::Mode;
use crate::model::lora::{read_set, Lora};
use crate::model::weights::WeightFormat;
use crate::model::Model;

/// Loss and gradients keyed like the adapter's tensors.
pub struct GradResult {
    pub loss: f32,
    /// (PEFT key, shape, values)
    pub grads: Vec<(String, Vec<usize>, Vec<f32>)>,
}

impl GradResult {
    /// The `webtune grad` output file: `loss` (f32, [1]) and one gradient per adapter key.
    pub fn to_safetensors(&self) -> Vec<u8> {
        let mut all = vec![("loss".to_string(), vec![1], vec![self.loss])];
        all.extend(self.grads.iter().cloned());
        crate::formats::peft::write_f32_safetensors(&all)
    }
}

/// Load the model and adapter, run forward and the MeSP backward on `batch_json`.
pub async fn compute_grads(gpu: &Gpu, ckpt: &Checkpoint, adapter: &Adapter, batch_json: &str) -> Result<GradResult> {
    compute_grads_mode(gpu, ckpt, adapter, batch_json, Mode::Mesp).await
}

/// [`compute_grads`] with another memory schedule (same gradients, other peak memory).
pub async fn compute_grads_mode(
    gpu: &Gpu,
    ckpt: &Checkpoint,
    adapter: &Adapter,
    batch_json: &str,
    mode: Mode,
) -> Result<GradResult> {
    let opts = GradOptions { mode, ..GradOptions::default() };
    compute_grads_with(gpu, ckpt, adapter, batch_json, &opts).await
}

/// How `webtune grad` runs: memory schedule, weight format, streamed or resident weights.
#[derive(Clone, Debug, Default)]
pub struct GradOptions {
    pub mode: Mode,
    pub weights: WeightFormat,
    /// Upload each block's weights only while it runs (the default for training big models).
    pub stream: bool,
    /// Tokens per chunk of MeSP's MLP backward (None: the model's default; 0: no chunking).
    pub mlp_chunk_rows: Option<usize>,
}

/// [`compute_grads`] with every option.
pub async fn compute_grads_with(
    gpu: &Gpu,
    ckpt: &Checkpoint,
    adapter: &Adapter,
    batch_json: &str,
    opts: &GradOptions,
) -> Result<GradResult> {
    compute_grads_traced(gpu, ckpt, adapter, batch_json, opts).await.map_err(|(_, e)| e)
}

/// The input an error of [`compute_grads_traced`] is about, so that a caller which read the
/// inputs from files can name the right one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradInput {
    Model,
    Adapter,
    Batch,
}

/// [`compute_grads_with`], each error paired with the input it is about (None: the GPU or the
/// computation itself).
pub async fn compute_grads_traced(
    gpu: &Gpu,
    ckpt: &Checkpoint,
    adapter: &Adapter,
    batch_json: &str,
    opts: &GradOptions,
) -> Result<GradResult, (Option<GradInput>, Error)> {
    let about = |input: GradInput| {
        move |e: Error| match e {
            Error::Gpu(_) => (None, e),
            e => (Some(input), e),
        }
    };
    crate::formats::checkpoint::validate(ckpt).map_err(Error::from).map_err(about(GradInput::Model))?;
    let mode = opts.mode;
    let mut model = if opts.stream {
        let src: std::sync::Arc<dyn crate::model::source::WeightSource> =
            std::sync::Arc::new(crate::model::source::CheckpointSource::new(ckpt.clone()));
        Model::streamed(gpu, src, opts.weights)
    } else {
        Model::load_as(gpu, ckpt, opts.weights)
    }
    .map_err(about(GradInput::Model))?;
    if let Some(r) = opts.mlp_chunk_rows {
        model.mlp_chunk_rows = r;
    }
    let lora = Lora::from_adapter(gpu, &model.cfg, adapter).map_err(about(GradInput::Adapter))?;
    let batch = Batch::from_json(batch_json, model.cfg.vocab)
        .map_err(|e| Error::msg(e.to_string()))
        .map_err(about(GradInput::Batch))?;
    let input = model.prepare(gpu, &batch).map_err(about(GradInput::Batch))?;
    // Past here a model file read late (streamed weights) is still the model's fault.
    let blame = |e: Error| match e {
        Error::Checkpoint(_) | Error::Config(_) => (Some(GradInput::Model), e),
        e => (None, e),
    };
    let grads = lora.zeros_like(gpu, Category::Grads).map_err(blame)?;
    let loss = model.loss_and_grads_mode(gpu, &lora, Some(&grads), &input, mode).await.map_err(blame)?;
    let grads = read_set(gpu, &grads).await.map_err(blame)?;
    Ok(GradResult { loss, grads })
}
