//! `webtune train`: train a LoRA adapter on a JSONL dataset, checkpointing to the output directory
//! and resuming from it.

use crate::{fmt_secs, gpu, input_err, lib_err, Fail};
use std::path::PathBuf;
use webtune::gpu::Gpu;

#[derive(clap::Args)]
pub struct TrainArgs {
    /// Hugging Face model directory
    #[arg(long)]
    model: PathBuf,
    /// JSONL dataset: {"messages": [...]}, {"prompt", "completion"} or {"text"} per line
    #[arg(long)]
    data: PathBuf,
    /// Output directory: the PEFT adapter and the training checkpoint
    #[arg(long)]
    out: PathBuf,
    /// Optimizer steps (default: from --epochs)
    #[arg(long, conflicts_with = "epochs")]
    steps: Option<u32>,
    /// Passes over the data [default: 10]
    #[arg(long)]
    epochs: Option<f32>,
    #[arg(long, default_value_t = 1e-3)]
    lr: f32,
    /// adamw, sgd, or mezo (forward passes only; try --lr 1e-5)
    #[arg(long, default_value = "adamw", value_parser = ["adamw", "sgd", "mezo"])]
    optimizer: String,
    /// MeZO's perturbation scale
    #[arg(long, default_value_t = 1e-3)]
    mezo_eps: f32,
    #[arg(long, default_value_t = 16)]
    rank: usize,
    /// LoRA alpha [default: 2 × rank]
    #[arg(long)]
    alpha: Option<f64>,
    /// Projections to adapt
    #[arg(long, default_value = "q,k,v,o,gate,up,down")]
    targets: String,
    /// Maximum tokens per example (longer ones are truncated with a warning)
    #[arg(long, default_value_t = 256)]
    seq: usize,
    /// Examples per micro-batch
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Micro-batches per optimizer step (gradient accumulation)
    #[arg(long, default_value_t = 1)]
    accum: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Checkpoint every N steps (and always at the end)
    #[arg(long, default_value_t = 50)]
    save_every: u32,
    #[arg(long, default_value = "cosine", value_parser = ["cosine", "constant"])]
    schedule: String,
    #[arg(long, default_value_t = 0.05)]
    warmup_ratio: f32,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    /// Global gradient-norm clipping (0 = off)
    #[arg(long, default_value_t = 1.0)]
    max_grad_norm: f32,
    /// Ignore an existing checkpoint in --out and start over
    #[arg(long)]
    fresh: bool,
    /// Most GPU memory the run may hold at once, in MB (10^6 bytes); an allocation past it
    /// stops the run with a plain error (the last checkpoint is kept)
    #[arg(long, value_name = "MB")]
    memory_budget: Option<f64>,
    /// Frozen weights on the GPU: stored (as in the files), bf16, q8 or q4
    #[arg(long, default_value = "stored")]
    weights: String,
    /// Keep every frozen weight on the GPU (faster) instead of uploading one block at a time
    #[arg(long)]
    resident: bool,
}

pub async fn train(a: TrainArgs) -> Result<(), Fail> {
    use std::io::IsTerminal;
    use webtune::train::trainer::{TrainConfig, Trainer};
    let ckpt = webtune::formats::checkpoint::Checkpoint::open_dir(&a.model).map_err(input_err)?;
    webtune::formats::checkpoint::validate(&ckpt).map_err(input_err)?;
    let tok = webtune::data::tokenizer::Tokenizer::from_checkpoint(&ckpt).map_err(input_err)?;
    let text = std::fs::read_to_string(&a.data).map_err(|e| Fail(2, format!("{}: {e}", a.data.display())))?;
    let examples =
        webtune::data::dataset::load_jsonl(&text, &tok).map_err(|e| Fail(2, format!("{}: {e}", a.data.display())))?;
    let targets = webtune::base::names::Proj::parse_list(&a.targets).map_err(|e| Fail(2, format!("--targets: {e}")))?;
    let config = TrainConfig {
        rank: a.rank,
        alpha: a.alpha.unwrap_or(2.0 * a.rank as f64),
        targets: targets.iter().map(|p| p.peft_name().to_string()).collect(),
        seq: a.seq,
        batch: a.batch,
        accum: a.accum,
        steps: a.steps,
        epochs: a.epochs.unwrap_or(TrainConfig::default().epochs),
        seed: a.seed,
        save_every: a.save_every,
        optimizer: a.optimizer.clone(),
        mezo_eps: a.mezo_eps,
        lr: a.lr,
        weight_decay: a.weight_decay,
        max_grad_norm: a.max_grad_norm,
        schedule: a.schedule.clone(),
        warmup_ratio: a.warmup_ratio,
    };
    let format =
        webtune::model::weights::WeightFormat::parse(&a.weights).map_err(|e| Fail(2, format!("--weights: {e}")))?;
    let gpu = gpu().await?;
    crate::tune(&gpu, ckpt.config(), a.seq * a.batch, format.dtype(webtune::gpu::DType::BF16)).await;
    if let Some(mb) = a.memory_budget {
        if !(mb > 0.0 && mb.is_finite()) {
            return Err(Fail(2, format!("--memory-budget: {mb} (want a size in MB above 0)")));
        }
        gpu.alloc.set_budget(Some((mb * 1e6) as u64));
    }
    let model = if a.resident {
        webtune::model::Model::load_as(&gpu, &ckpt, format).map_err(lib_err)?
    } else {
        let src = std::sync::Arc::new(webtune::model::source::CheckpointSource::new(ckpt.clone()));
        webtune::model::Model::streamed(&gpu, src, format).map_err(lib_err)?
    };
    let ckpt_path = a.out.join(CHECKPOINT_FILE);
    let mut trainer = if !a.fresh && ckpt_path.exists() {
        let bytes = std::fs::read(&ckpt_path).map_err(|e| Fail(1, format!("{}: {e}", ckpt_path.display())))?;
        let t = Trainer::resume(&gpu, &model, examples, config, &bytes, &ckpt_path.display().to_string())
            .map_err(lib_err)?;
        eprintln!("resuming from {} at step {}/{}", ckpt_path.display(), t.state.step, t.state.total_steps);
        t
    } else {
        Trainer::new(&gpu, &model, examples, config, None).map_err(lib_err)?
    };
    for w in &trainer.warnings {
        eprintln!("warning: {w}");
    }
    eprintln!(
        "training {} LoRA parameters ({} examples, {} steps) on {}",
        trainer.lora.params.iter().map(|(_, _, p)| p.a.numel() + p.b.numel()).sum::<usize>(),
        trainer.num_examples(),
        trainer.state.total_steps,
        gpu.info.adapter
    );
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(trainer.state.total_steps as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed_precise}<{eta_precise}]")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_position(trainer.state.step as u64);
        Some(b)
    } else {
        None
    };
    let (mut tok_sum, mut ms_sum) = (0usize, 0.0f64);
    while !trainer.done() {
        let r = trainer.step(&gpu, &model).await.map_err(lib_err)?;
        if r.skipped {
            let msg = format!(
                "step {}/{} skipped: the loss or the gradients were not finite (loss {}); {} in a row",
                r.step + 1,
                r.total_steps,
                r.loss,
                trainer.state.bad_in_row
            );
            match &bar {
                Some(b) => b.println(msg),
                None => eprintln!("{msg}"),
            }
            continue;
        }
        tok_sum += r.tokens;
        ms_sum += r.ms;
        let tps = tok_sum as f64 / (ms_sum / 1000.0).max(1e-9);
        let left = (r.total_steps - r.step) as f64 * ms_sum
            / 1000.0
            / (tok_sum.max(1) as f64 / r.tokens.max(1) as f64).max(1.0);
        match &bar {
            Some(b) => {
                b.set_position(r.step as u64);
                b.set_message(format!("loss {:.4} lr {:.2e} {:.0} tok/s", r.loss, r.lr, tps));
            }
            None => eprintln!(
                "step {}/{} loss {:.6} lr {:.3e} {:.1} tok/s {:.2}s/step left {}",
                r.step,
                r.total_steps,
                r.loss,
                r.lr,
                tps,
                r.ms / 1000.0,
                fmt_secs(left)
            ),
        }
        let every = trainer.state.config.save_every;
        if (every > 0 && r.step % every == 0) || trainer.done() {
            save(&gpu, &trainer, &a.out).await?;
        }
    }
    if let Some(b) = &bar {
        b.finish();
    }
    if trainer.state.step == trainer.state.total_steps && trainer.state.losses.is_empty() {
        save(&gpu, &trainer, &a.out).await?;
    }
    let last = trainer.state.losses.last().copied().unwrap_or(f32::NAN);
    eprintln!("done: {} steps, final loss {last:.6}; adapter in {}", trainer.state.step, a.out.display());
    Ok(())
}

/// The training state beside the adapter in the output directory.
const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

/// Write the adapter and the checkpoint into `out`, each atomically.
async fn save(gpu: &Gpu, trainer: &webtune::train::trainer::Trainer, out: &std::path::Path) -> Result<(), Fail> {
    use webtune::platform::write_atomic;
    let ckpt = trainer.checkpoint(gpu).await.map_err(lib_err)?;
    let adapter = trainer.adapter(gpu).await.map_err(lib_err)?;
    let io = |p: PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
    // The adapter first, then the checkpoint: a checkpoint never points past the adapter on disk.
    let p = out.join("adapter_model.safetensors");
    write_atomic(&p, &adapter.to_safetensors_bytes()).map_err(|e| io(p.clone(), e))?;
    let p = out.join("adapter_config.json");
    write_atomic(&p, adapter.config_json().as_bytes()).map_err(|e| io(p.clone(), e))?;
    let p = out.join(CHECKPOINT_FILE);
    write_atomic(&p, &ckpt).map_err(|e| io(p.clone(), e))?;
    Ok(())
}
