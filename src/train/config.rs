//! A run's configuration ([`TrainConfig`]): the serde struct the CLI, the app and checkpoints
//! share, its defaults, and what it makes (the targets, the optimizer's and the schedule's
//! settings, the number of steps), with the differences between two named for a refused resume.

use crate::base::error::{Error, Result};
use crate::base::names::Proj;
use crate::train::optimizer::{OptimizerConfig, OptimizerKind};
use crate::train::schedule::{Schedule, ScheduleKind};
use serde::{Deserialize, Serialize};

/// Everything that defines a run. Defaults suit personalizing a small model on a few dozen examples.
/// The app sends it too (snake_case; see `runtime::train_config_from_app`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct TrainConfig {
    pub rank: usize,
    pub alpha: f64,
    /// q, k, v, o, gate, up, down (short names)
    pub targets: Vec<String>,
    /// Longest sequence; longer examples are truncated (with a warning).
    pub seq: usize,
    /// Examples per micro-batch.
    pub batch: usize,
    /// Micro-batches per optimizer step.
    pub accum: usize,
    /// Optimizer steps; when None, `epochs` decides.
    pub steps: Option<u32>,
    pub epochs: f32,
    pub seed: u64,
    /// Save a checkpoint every N steps (0 = only at the end).
    pub save_every: u32,
    /// "adamw", "sgd", or "mezo" (forward passes only: SPSA along a seeded perturbation)
    pub optimizer: String,
    /// MeZO's perturbation scale ε.
    #[serde(default = "default_mezo_eps")]
    pub mezo_eps: f32,
    pub lr: f32,
    pub weight_decay: f32,
    pub max_grad_norm: f32,
    /// "cosine" or "constant"
    pub schedule: String,
    /// Fraction of steps spent in linear warmup.
    pub warmup_ratio: f32,
}

fn default_mezo_eps() -> f32 {
    1e-3
}

impl Default for TrainConfig {
    fn default() -> Self {
        TrainConfig {
            rank: 16,
            alpha: 32.0,
            targets: Proj::all().iter().map(|p| p.peft_name().to_string()).collect(),
            seq: 256,
            batch: 4,
            accum: 1,
            steps: None,
            epochs: 10.0,
            seed: 0,
            save_every: 50,
            optimizer: "adamw".into(),
            mezo_eps: default_mezo_eps(),
            lr: 1e-3,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            schedule: "cosine".into(),
            warmup_ratio: 0.05,
        }
    }
}

impl TrainConfig {
    pub fn target_projs(&self) -> Result<Vec<Proj>> {
        Proj::parse_list(&self.targets.join(",")).map_err(|e| Error::msg(format!("--targets: {e}")))
    }
    /// Whether this run is MeZO (forward passes only).
    pub fn is_mezo(&self) -> bool {
        self.optimizer.eq_ignore_ascii_case("mezo")
    }
    /// The optimizer's settings (MeZO: a stateless SGD it does not use).
    pub(super) fn optimizer_config(&self) -> Result<OptimizerConfig> {
        if self.is_mezo() {
            // MeZO updates the parameters itself; the optimizer object stays unused and stateless.
            return Ok(OptimizerConfig {
                kind: OptimizerKind::Sgd,
                lr: self.lr,
                max_grad_norm: 0.0,
                ..OptimizerConfig::default()
            });
        }
        let kind: OptimizerKind = self.optimizer.parse().map_err(|_| {
            Error::msg(format!("--optimizer: unknown optimizer {:?} (adamw, sgd or mezo)", self.optimizer))
        })?;
        Ok(OptimizerConfig {
            kind,
            lr: self.lr,
            weight_decay: self.weight_decay,
            max_grad_norm: self.max_grad_norm,
            ..OptimizerConfig::default()
        })
    }
    /// Total optimizer steps for a dataset of `n` examples.
    pub fn total_steps(&self, n: usize) -> u32 {
        self.steps.unwrap_or_else(|| {
            let per_epoch = (n as f64 / (self.batch * self.accum) as f64).max(1.0);
            (per_epoch * self.epochs as f64).ceil().max(1.0) as u32
        })
    }
    /// The learning-rate schedule of a run of `total_steps` steps.
    pub(super) fn lr_schedule(&self, total_steps: u32) -> Result<Schedule> {
        Ok(Schedule {
            kind: self.schedule.parse::<ScheduleKind>().map_err(|_| {
                Error::msg(format!("--schedule: unknown schedule {:?} (cosine or constant)", self.schedule))
            })?,
            lr: self.lr,
            warmup_steps: (self.warmup_ratio * total_steps as f32).ceil() as u32,
            total_steps,
            min_lr_ratio: 0.0,
        })
    }
}

/// The fields in which `a` (then) and `b` (now) differ, for a message.
pub(super) fn describe_diff(a: &TrainConfig, b: &TrainConfig) -> String {
    let (ja, jb) = (serde_json::to_value(a).unwrap_or_default(), serde_json::to_value(b).unwrap_or_default());
    let mut diffs = Vec::new();
    if let (Some(oa), Some(ob)) = (ja.as_object(), jb.as_object()) {
        for (k, va) in oa {
            if ob.get(k) != Some(va) {
                diffs.push(format!("{k}: {va} then, {} now", ob.get(k).cloned().unwrap_or_default()));
            }
        }
    }
    diffs.join(", ")
}
