//! `webtune grad` (the loss and LoRA gradients of one batch) and `webtune mezo-cosine` (how well
//! MeZO's estimate points along that gradient).

use crate::{gpu, input_err, lib_err, Fail};
use std::path::PathBuf;
use webtune::base::error::Error;
use webtune::formats::checkpoint::Checkpoint;
use webtune::formats::peft::Adapter;
use webtune::train::grad::{compute_grads_traced, GradInput, GradOptions};

#[derive(clap::Args)]
pub struct GradArgs {
    /// Hugging Face model directory (config.json, model.safetensors or sharded)
    #[arg(long)]
    model: PathBuf,
    /// PEFT adapter directory (adapter_config.json, adapter_model.safetensors)
    #[arg(long)]
    adapter: PathBuf,
    /// Batch JSON: {"input_ids": [[..]], "labels": [[..]], "attention_mask": [[..]]?}
    #[arg(long)]
    batch: PathBuf,
    /// Output safetensors file
    #[arg(long)]
    out: PathBuf,
    /// Memory schedule: mesp, mebp or full (same gradients, different peak memory)
    #[arg(long, default_value = "mesp")]
    mode: String,
    /// Frozen weights on the GPU: stored, bf16, q8 or q4 (gradients are exact for that model)
    #[arg(long, default_value = "stored")]
    weights: String,
    /// Upload each block's weights only while it runs
    #[arg(long)]
    stream: bool,
}

#[derive(clap::Args)]
pub struct MezoCosineArgs {
    #[arg(long)]
    model: PathBuf,
    #[arg(long)]
    adapter: PathBuf,
    /// Batch JSON, as for `grad`
    #[arg(long)]
    batch: PathBuf,
    #[arg(long, default_value_t = 8)]
    seeds: u64,
    #[arg(long, default_value_t = 1e-3)]
    eps: f32,
}

pub async fn grad(a: GradArgs) -> Result<(), Fail> {
    let GradArgs { model, adapter: adapter_dir, batch, out, mode, weights, stream } = a;
    let opts = GradOptions {
        mode: mode.parse().map_err(|e| Fail(2, format!("--mode: {e}")))?,
        weights: webtune::model::weights::WeightFormat::parse(&weights)
            .map_err(|e| Fail(2, format!("--weights: {e}")))?,
        stream,
        mlp_chunk_rows: None,
    };
    let ckpt = Checkpoint::open_dir(&model).map_err(input_err)?;
    let adapter = Adapter::open_dir(&adapter_dir).map_err(input_err)?;
    let text = std::fs::read_to_string(&batch).map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
    let gpu = gpu().await?;
    crate::tune(&gpu, ckpt.config(), 256, opts.weights.dtype(webtune::gpu::DType::F32)).await;
    // Each error names the input it is about: the model directory, the adapter directory or the batch file.
    let res =
        compute_grads_traced(&gpu, &ckpt, &adapter, &text, &opts).await.map_err(|(about, e)| match (about, e) {
            (_, Error::Gpu(g)) => Fail(1, g.to_string()),
            (None, other) => Fail(2, other.to_string()),
            (Some(input), other) => {
                let path = match input {
                    GradInput::Model => &model,
                    GradInput::Adapter => &adapter_dir,
                    GradInput::Batch => &batch,
                };
                Fail(2, format!("{}: {other}", path.display()))
            }
        })?;
    std::fs::write(&out, res.to_safetensors()).map_err(|e| Fail(1, format!("{}: {e}", out.display())))?;
    eprintln!("loss {:.6}; {} gradient tensors written to {}", res.loss, res.grads.len(), out.display());
    Ok(())
}

pub async fn mezo_cosine(a: MezoCosineArgs) -> Result<(), Fail> {
    let MezoCosineArgs { model, adapter, batch, seeds, eps } = a;
    let ckpt = Checkpoint::open_dir(&model).map_err(input_err)?;
    webtune::formats::checkpoint::validate(&ckpt).map_err(input_err)?;
    let adapter = Adapter::open_dir(&adapter).map_err(input_err)?;
    let text = std::fs::read_to_string(&batch).map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
    let gpu = gpu().await?;
    let m = webtune::model::Model::load(&gpu, &ckpt).map_err(lib_err)?;
    let lora = webtune::model::lora::Lora::from_adapter(&gpu, &m.cfg, &adapter).map_err(lib_err)?;
    let b = webtune::formats::batch::Batch::from_json(&text, m.cfg.vocab)
        .map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
    let input = m.prepare(&gpu, &b).map_err(lib_err)?;
    let seed_list: Vec<u64> = (1..=seeds).collect();
    let cos =
        webtune::train::mezo::mezo_gradient_cosine(&gpu, &m, &lora, &input, eps, &seed_list).await.map_err(lib_err)?;
    let d: usize = lora.params.iter().map(|(_, _, p)| p.a.numel() + p.b.numel()).sum();
    for (s, c) in seed_list.iter().zip(&cos) {
        println!("seed {s}: cosine {c:+.3e}");
    }
    let mean = cos.iter().map(|&c| c as f64).sum::<f64>() / cos.len().max(1) as f64;
    let mean_abs = cos.iter().map(|&c| (c as f64).abs()).sum::<f64>() / cos.len().max(1) as f64;
    println!(
        "mean cosine {mean:+.3e}, mean |cosine| {mean_abs:.3e} over {} seeds; d = {d} parameters, sqrt(2/(pi d)) = {:.3e}",
        cos.len(),
        (2.0 / (std::f64::consts::PI * d as f64)).sqrt()
    );
    Ok(())
}
