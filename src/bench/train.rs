//! `webtune bench --shape …`: one training step of each memory schedule (MeSP, MeBP, full,
//! MeZO) in one engine, at a real model shape with random weights, measured side by side:
//! peak GPU bytes by category (every allocation goes through the accounting allocator),
//! the per-phase timeline, step time, tokens/s and, natively, the process's peak RSS.
//!
//! What the peak counts: every GPU buffer alive at the worst moment: LoRA parameters,
//! gradients, optimizer state, checkpoints, activations, scratch, staging, and the frozen
//! weights resident at that moment (streamed: one block or one vocab chunk; `resident`: all).
//! Host memory for the weights being streamed is not GPU memory and is reported only through
//! the process RSS.

use crate::base::config::ModelConfig;
use crate::base::error::{Error, Result};
use crate::base::names::Proj;
use crate::formats::batch::Batch;
use crate::formats::peft::Adapter;
use crate::gpu::alloc::Sample;
use crate::gpu::profile::Profile;
use crate::gpu::{Category, Gpu};
use crate::model::block::Mode;
use crate::model::lora::{Lora, LoraSet};
use crate::model::source::WeightSource;
use crate::model::weights::WeightFormat;
use crate::model::{Grads, Model};
use crate::platform::now_ms;
use crate::train::mezo::{mezo_step, MezoConfig};
use crate::train::optimizer::{Optimizer, OptimizerConfig, OptimizerKind};
use std::collections::BTreeMap;
use std::sync::Arc;

/// A schedule the benchmark runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BenchMode {
    /// Forward + hand-written backward under a memory schedule.
    Backprop(Mode),
    /// MeZO: two forward passes along a seeded perturbation, no backward.
    Mezo,
}

impl BenchMode {
    pub fn name(self) -> &'static str {
        match self {
            BenchMode::Backprop(m) => m.name(),
            BenchMode::Mezo => "mezo",
        }
    }
    /// "mesp,mebp,full,mezo"
    pub fn parse_list(s: &str) -> std::result::Result<Vec<BenchMode>, String> {
        s.split(',')
            .map(|m| m.trim())
            .filter(|m| !m.is_empty())
            .map(|m| match m.to_ascii_lowercase().as_str() {
                "mezo" => Ok(BenchMode::Mezo),
                other => other.parse::<Mode>().map(BenchMode::Backprop).map_err(|e| format!("{e} or mezo")),
            })
            .collect()
    }
}

/// When the optimizer update is fused into the backward, layer by layer (only one layer of
/// gradients held). Needs an optimizer without global clipping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fuse {
    /// MeSP fuses; MeBP and full keep whole gradient sets, as autograd + optimizer.step() do.
    Auto,
    On,
    Off,
}

impl std::str::FromStr for Fuse {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Fuse, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Fuse::Auto),
            "on" => Ok(Fuse::On),
            "off" => Ok(Fuse::Off),
            _ => Err(format!("unknown fuse setting {s:?} (auto, on, off)")),
        }
    }
}

/// What to run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct TrainBenchConfig {
    /// A preset name (random weights at that shape) or a model directory.
    pub shape: String,
    #[serde(skip)]
    pub cfg: ModelConfig,
    pub seq: usize,
    pub rank: usize,
    pub alpha: f64,
    pub targets: Vec<String>,
    #[serde(skip)]
    pub modes: Vec<BenchMode>,
    pub optimizer: String,
    pub lr: f32,
    pub weights: String,
    #[serde(skip)]
    pub format: WeightFormat,
    pub resident: bool,
    /// Streamed: keep blocks converted to their GPU layout on the host (see `Model::streamed`).
    pub host_cache: bool,
    pub fuse: Fuse,
    pub steps: usize,
    pub seed: u64,
    /// Tokens per chunk of MeSP's MLP backward (None: the model's default).
    pub mlp_chunk_rows: Option<usize>,
    /// Time every dispatch of every step by kernel ([`crate::gpu::profile`]).
    pub profile: bool,
}

/// One schedule's measurements.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ModeResult {
    pub mode: String,
    /// Highest total of live GPU bytes during the run (every step).
    pub peak_bytes: u64,
    /// Bytes per category at that moment.
    pub peak_by_category: BTreeMap<&'static str, u64>,
    /// Highest bytes each category reached on its own (their sum can exceed `peak_bytes`).
    pub category_peaks: BTreeMap<&'static str, u64>,
    /// Mean seconds per step, the first (pipeline compilation) excluded when there are more.
    pub step_s: f64,
    pub first_step_s: f64,
    pub tokens_per_s: f64,
    pub losses: Vec<f32>,
    /// Whether the optimizer update ran layer by layer inside the backward.
    pub fused_update: bool,
    /// Peak resident set of the whole process during this mode (native Linux only; with a
    /// CPU Vulkan driver like lavapipe it includes the GPU buffers).
    pub rss_peak_bytes: Option<u64>,
    /// In the browser: the wasm memory size after this mode (it never shrinks).
    pub wasm_memory_bytes: Option<u64>,
    /// Host bytes of the streamed model's GPU-layout cache (the whole model once warm).
    pub host_cache_bytes: usize,
    /// One sample per phase of the last step.
    pub timeline: Vec<Sample>,
    /// With `profile`: each step's kernels and wall time.
    pub profiles: Vec<StepProfile>,
}

/// One profiled step: its wall time and where the GPU's time went.
#[derive(Clone, Debug, serde::Serialize)]
pub struct StepProfile {
    pub step: usize,
    pub wall_ms: f64,
    pub profile: Profile,
}

/// The paper's peak memory (MB) for Qwen2.5 with 4-bit weights, LoRA rank 8, batch 1, SGD
/// (arXiv 2602.13069, Tables 1–3): (shape, seq, MeSP, MeBP).
pub const PAPER_MB: [(&str, usize, f64, f64); 6] = [
    ("qwen2.5-0.5b", 128, 110.7, 252.7),
    ("qwen2.5-0.5b", 256, 136.2, 360.8),
    ("qwen2.5-0.5b", 512, 245.8, 582.4),
    ("qwen2.5-0.5b", 1024, 513.6, 1050.3),
    ("qwen2.5-1.5b", 256, 262.6, 516.2),
    ("qwen2.5-3b", 256, 368.4, 637.6),
];

/// The paper's (MeSP, MeBP) MB for this shape and sequence, if it reports them.
pub fn paper_mb(shape: &str, seq: usize) -> Option<(f64, f64)> {
    PAPER_MB.iter().find(|(s, q, _, _)| s.eq_ignore_ascii_case(shape) && *q == seq).map(|&(_, _, a, b)| (a, b))
}

/// A seeded batch of `seq` random tokens, every position supervised.
fn random_batch(cfg: &ModelConfig, seq: usize, seed: u64) -> Batch {
    let mut rng = crate::base::rng::Rng::new(seed ^ 0xba7c4);
    let input_ids: Vec<u32> = (0..seq).map(|_| rng.below(cfg.vocab as u64) as u32).collect();
    let labels = input_ids.iter().map(|&t| t as i32).collect();
    Batch { rows: 1, seq, input_ids, labels, attention_mask: None }
}

/// Run every mode of `bc` on `source`, one after another on the same device.
pub async fn bench_train(
    gpu: &Gpu,
    source: Arc<dyn WeightSource>,
    bc: &TrainBenchConfig,
    mut progress: impl FnMut(&str),
) -> Result<Vec<ModeResult>> {
    let cfg = source.config().clone();
    if bc.seq < 2 || bc.rank == 0 || bc.steps == 0 {
        return Err(Error::msg("bench: --seq must be at least 2, --rank and --steps at least 1"));
    }
    let targets = Proj::parse_list(&bc.targets.join(",")).map_err(|e| Error::msg(format!("--targets: {e}")))?;
    let kind: OptimizerKind = bc.optimizer.parse()?;
    let adapter = Adapter::new_init(&cfg, bc.rank, bc.alpha, &targets, bc.seed);
    let batch = random_batch(&cfg, bc.seq, bc.seed);
    let dtype = bc.format.dtype(crate::gpu::DType::BF16);
    let tuned = crate::kernels::tune(gpu, &cfg, bc.seq, dtype, &mut Default::default()).await?;
    for t in &tuned.measured {
        progress(&format!(
            "kernel variant {} {}: {}",
            t.family,
            t.variant,
            if !t.agrees {
                "disagrees with the reference, not used".into()
            } else {
                format!("{:.1} ms{}", t.ms, if t.chosen { " (chosen)" } else { "" })
            }
        ));
    }
    let mut out = Vec::new();
    for &mode in &bc.modes {
        progress(mode.name());
        gpu.sync().await?;
        gpu.alloc.reset_peaks();
        gpu.alloc.record_timeline(true);
        crate::platform::reset_peak_rss();
        let mut model = if bc.resident {
            Model::resident(gpu, source.clone(), bc.format)?
        } else if bc.host_cache {
            Model::streamed(gpu, source.clone(), bc.format)?
        } else {
            Model::streamed_uncached(gpu, source.clone(), bc.format)?
        };
        if let Some(r) = bc.mlp_chunk_rows {
            model.mlp_chunk_rows = r;
        }
        let lora = Lora::from_adapter(gpu, &cfg, &adapter)?;
        let input = model.prepare(gpu, &batch)?;
        let opt_cfg = OptimizerConfig { kind, lr: bc.lr, max_grad_norm: 0.0, ..OptimizerConfig::default() };
        let mut opt = match mode {
            BenchMode::Backprop(_) => Some(Optimizer::new(gpu, opt_cfg, &lora)?),
            BenchMode::Mezo => None,
        };
        let fused = match (mode, bc.fuse) {
            (BenchMode::Mezo, _) | (_, Fuse::Off) => false,
            (BenchMode::Backprop(m), Fuse::Auto) => m == Mode::Mesp,
            (BenchMode::Backprop(_), Fuse::On) => true,
        };
        gpu.alloc.sample(|| "setup".into());
        let mut times = Vec::new();
        let mut losses = Vec::new();
        let mut last_start = 0;
        let mut profiles = Vec::new();
        for step in 0..bc.steps {
            if step + 1 == bc.steps {
                last_start = gpu.alloc.timeline().len();
            }
            if bc.profile {
                gpu.profile_start();
            }
            let t0 = now_ms();
            let loss = match (mode, opt.as_mut()) {
                (BenchMode::Backprop(m), Some(opt)) if fused => {
                    let row = lora.zeros_row(gpu, Category::Grads)?;
                    opt.begin_fused(gpu);
                    let (o, params) = (&*opt, &lora.params);
                    let mut apply = |i: usize, g: &LoraSet| o.step_layer(gpu, params, i, g, bc.lr);
                    let grads = Grads::PerLayer { row: &row, apply: &mut apply };
                    model.loss_and_grads_into(gpu, &lora, Some(grads), &input, m).await?
                }
                (BenchMode::Backprop(m), Some(opt)) => {
                    let grads = lora.zeros_like(gpu, Category::Grads)?;
                    let loss = model.loss_and_grads_mode(gpu, &lora, Some(&grads), &input, m).await?;
                    opt.step(gpu, &lora.params, &grads, bc.lr);
                    gpu.alloc.sample(|| "optimizer".into());
                    loss
                }
                _ => {
                    let mz = MezoConfig { eps: 1e-3, lr: bc.lr };
                    let (plus, _, _) = mezo_step(gpu, &model, &lora, &input, &mz, bc.seed + step as u64).await?;
                    plus
                }
            };
            gpu.sync().await?;
            let wall_ms = now_ms() - t0;
            times.push(wall_ms / 1000.0);
            if let Some(profile) = gpu.profile_take().await? {
                profiles.push(StepProfile { step, wall_ms, profile });
            }
            losses.push(loss);
        }
        let mut timeline = gpu.alloc.timeline();
        gpu.alloc.record_timeline(false);
        let stats = gpu.alloc.stats();
        // The phase where the total peaked (the timeline covers the whole run) gives its split.
        let at_peak = timeline
            .iter()
            .find(|s| s.peak_total == stats.peak_total)
            .map(|s| s.peak_by_category.clone())
            .unwrap_or_else(|| Category::ALL.iter().map(|&c| (c.name(), 0u64)).collect());
        let timeline = timeline.split_off(last_start.min(timeline.len()));
        let step_s = if times.len() > 1 { times[1..].iter().sum::<f64>() / (times.len() - 1) as f64 } else { times[0] };
        out.push(ModeResult {
            mode: mode.name().into(),
            peak_bytes: stats.peak_total,
            peak_by_category: at_peak,
            category_peaks: Category::ALL.iter().map(|&c| (c.name(), stats.peak(c))).collect(),
            step_s,
            first_step_s: times[0],
            tokens_per_s: bc.seq as f64 / step_s.max(1e-9),
            losses,
            fused_update: fused,
            rss_peak_bytes: crate::platform::peak_rss(),
            host_cache_bytes: model.prepared_bytes(),
            wasm_memory_bytes: crate::platform::wasm_memory_bytes(),
            timeline,
            profiles,
        });
        drop((input, lora, opt, model));
    }
    Ok(out)
}
