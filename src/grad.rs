//! `webtune grad`: the loss and LoRA gradients of one batch, as a library call
//! shared by the CLI and the tests (native and browser).

use crate::error::{Error, Result};
use crate::formats::batch::Batch;
use crate::formats::peft::Adapter;
use crate::gpu::{Category, Gpu};
use crate::model::block::Mode;
use crate::model::lora::{read_set, Lora};
use crate::model::weights::WeightFormat;
use crate::model::Model;
use crate::store::Checkpoint;

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
    crate::model::layout::validate(ckpt)?;
    let mode = opts.mode;
    let mut model = if opts.stream {
        let src: std::sync::Arc<dyn crate::model::stream::WeightSource> =
            std::sync::Arc::new(crate::model::stream::CheckpointSource::new(ckpt.clone()));
        Model::streamed(gpu, src, opts.weights)?
    } else {
        Model::load_as(gpu, ckpt, opts.weights)?
    };
    if let Some(r) = opts.mlp_chunk_rows {
        model.mlp_chunk_rows = r;
    }
    let lora = Lora::from_adapter(gpu, &model.cfg, adapter)?;
    let batch = Batch::from_json(batch_json, model.cfg.vocab).map_err(|e| Error::msg(e.to_string()))?;
    let input = model.prepare(gpu, &batch)?;
    let grads = lora.zeros_like(gpu, Category::Grads)?;
    let loss = model.loss_and_grads_mode(gpu, &lora, Some(&grads), &input, mode).await?;
    let grads = read_set(gpu, &grads).await?;
    Ok(GradResult { loss, grads })
}
