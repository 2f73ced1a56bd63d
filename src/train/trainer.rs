//! The trainer: batches from a tokenized dataset, gradient accumulation, the
//! optimizer and schedule, and checkpoints that resume to the same losses.
//!
//! Determinism: the data order of epoch e is a Fisher–Yates shuffle seeded by
//! (seed, e); the cursor into it, the step, the LoRA parameters and the
//! optimizer moments are all in the checkpoint, and the GPU kernels reduce in a
//! fixed order, so a resumed run repeats the uninterrupted run's losses.
//!
//! The run's configuration, [`TrainConfig`], is in `train::config` (re-exported here).

use crate::base::error::{Error, Result};
use crate::base::rng::Rng;
use crate::data::dataset::Example;
use crate::formats::batch::Batch;
use crate::formats::peft::{Adapter, AdapterConfig};
use crate::gpu::{Category, Gpu};
use crate::kernels::elementwise::scale;
use crate::model::block::Mode;
use crate::model::lora::zero_set;
use crate::model::lora::{read_set, Lora, LoraSet};
use crate::model::{Grads, Model};
use crate::platform::now_ms;
use crate::train::checkpoint::{self, NamedF32};
use crate::train::config::describe_diff;
use crate::train::mezo::{mezo_step, MezoConfig};
use crate::train::optimizer::Optimizer;
use crate::train::schedule::Schedule;
use serde::{Deserialize, Serialize};

/// The run's configuration, kept reachable here: the runtime, the CLI and the tests name it
/// `train::trainer::TrainConfig`.
pub use crate::train::config::TrainConfig;

/// Where the run is; saved in checkpoints.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub config: TrainConfig,
    /// Optimizer steps done.
    pub step: u32,
    pub total_steps: u32,
    /// Data cursor: epoch and position in that epoch's shuffled order.
    pub epoch: u32,
    pub cursor: usize,
    /// Loss of every step so far.
    pub losses: Vec<f32>,
    /// FNV-1a hash of the tokenized dataset: resuming on other data is refused.
    pub data_hash: u64,
    /// Attempts skipped because the loss or the gradients were not finite, as the step number
    /// each would have had; the batches they drew are consumed (the data moves on).
    #[serde(default)]
    pub skipped: Vec<u32>,
    /// Skipped attempts since the last good step; [`MAX_BAD_IN_ROW`] stops the run.
    #[serde(default)]
    pub bad_in_row: u32,
}

/// Non-finite steps in a row after which training stops (the parameters are not touched by
/// a skipped step, so the last checkpoint stays good).
pub const MAX_BAD_IN_ROW: u32 = 3;

/// What one optimizer step did.
#[derive(Clone, Debug, Serialize)]
pub struct StepReport {
    pub step: u32,
    pub total_steps: u32,
    pub loss: f32,
    pub lr: f32,
    /// Real (non-padding) tokens processed.
    pub tokens: usize,
    pub ms: f64,
    /// The loss or the gradients were not finite: nothing was updated and `step` did not
    /// advance (the batch was consumed).
    pub skipped: bool,
}

/// Where a step's gradients are kept.
enum GradBuf {
    /// A whole set: gradient accumulation and global clipping need every gradient first.
    Full(LoraSet),
    /// One layer's worth: the optimizer update is fused into the backward, layer by layer.
    Row(LoraSet),
    /// MeZO: no gradients at all.
    None,
}

pub struct Trainer {
    pub state: TrainState,
    pub lora: Lora,
    grads: GradBuf,
    opt: Optimizer,
    sched: Schedule,
    examples: Vec<Example>,
    adapter_config: AdapterConfig,
    /// The shuffled order of epoch `order.0`.
    order: (u32, Vec<usize>),
    /// Messages about the data (truncated examples), for the caller to show.
    pub warnings: Vec<String>,
}

fn data_hash(examples: &[Example]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    let mut eat = |x: u64| {
        for b in x.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    };
    for e in examples {
        eat(e.input_ids.len() as u64);
        for (&i, &l) in e.input_ids.iter().zip(&e.labels) {
            eat(i as u64);
            eat(l as i64 as u64);
        }
    }
    h
}

/// The example order of one epoch.
fn epoch_order(n: usize, seed: u64, epoch: u32) -> Vec<usize> {
    let mut rng = Rng::new(seed ^ (epoch as u64 + 1).wrapping_mul(0x9e3779b97f4a7c15));
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
    order
}

impl Trainer {
    /// A new run (a fresh PEFT-initialised adapter, or `init` to continue training one).
    pub fn new(
        gpu: &Gpu,
        model: &Model,
        examples: Vec<Example>,
        config: TrainConfig,
        init: Option<&Adapter>,
    ) -> Result<Trainer> {
        if examples.is_empty() {
            return Err(Error::msg("the dataset has no examples"));
        }
        if config.batch == 0 || config.accum == 0 || config.seq < 2 || config.rank == 0 {
            return Err(Error::msg("--batch, --accum and --rank must be at least 1 and --seq at least 2"));
        }
        let targets = config.target_projs()?;
        let mut warnings = Vec::new();
        let mut examples = examples;
        for e in &mut examples {
            if e.input_ids.len() > config.seq {
                warnings.push(format!(
                    "example on line {}: {} tokens, truncated to --seq {}",
                    e.line,
                    e.input_ids.len(),
                    config.seq
                ));
                e.input_ids.truncate(config.seq);
                e.labels.truncate(config.seq);
            }
        }
        let adapter = match init {
            Some(a) => a.clone(),
            None => Adapter::new_init(&model.cfg, config.rank, config.alpha, &targets, config.seed),
        };
        let lora = Lora::from_adapter(gpu, &model.cfg, &adapter)?;
        let opt = Optimizer::new(gpu, config.optimizer_config()?, &lora)?;
        // Without clipping and accumulation, each layer is updated right after its backward
        // (same result), so gradients are held for one layer at a time.
        if config.is_mezo() {
            MezoConfig { eps: config.mezo_eps, lr: config.lr }.validate()?;
            if config.accum != 1 {
                return Err(Error::msg("--optimizer mezo: gradient accumulation (--accum) is not supported"));
            }
        }
        let grads = if config.is_mezo() {
            GradBuf::None
        } else if opt.can_fuse() && config.accum == 1 {
            GradBuf::Row(lora.zeros_row(gpu, Category::Grads)?)
        } else {
            GradBuf::Full(lora.zeros_like(gpu, Category::Grads)?)
        };
        let total_steps = config.total_steps(examples.len());
        let sched = config.lr_schedule(total_steps)?;
        let state = TrainState {
            config,
            step: 0,
            total_steps,
            epoch: 0,
            cursor: 0,
            losses: Vec::new(),
            data_hash: data_hash(&examples),
            skipped: Vec::new(),
            bad_in_row: 0,
        };
        let order = (0, epoch_order(examples.len(), state.config.seed, 0));
        Ok(Trainer { state, lora, grads, opt, sched, examples, adapter_config: adapter.config, order, warnings })
    }

    /// Whether updates are fused into the backward (no clipping, no accumulation).
    pub fn fused(&self) -> bool {
        matches!(self.grads, GradBuf::Row(_))
    }

    /// Keep whole gradient sets even where fusing is possible (for comparisons).
    pub fn unfuse(&mut self, gpu: &Gpu) -> Result<()> {
        self.grads = GradBuf::Full(self.lora.zeros_like(gpu, Category::Grads)?);
        Ok(())
    }

    pub fn num_examples(&self) -> usize {
        self.examples.len()
    }

    pub fn done(&self) -> bool {
        self.state.step >= self.state.total_steps
    }

    /// The next micro-batch, padded on the right to its longest row.
    fn next_batch(&mut self) -> Batch {
        let n = self.examples.len();
        let mut rows: Vec<usize> = Vec::with_capacity(self.state.config.batch);
        while rows.len() < self.state.config.batch {
            if self.state.cursor >= n {
                self.state.epoch += 1;
                self.state.cursor = 0;
            }
            if self.order.0 != self.state.epoch {
                self.order = (self.state.epoch, epoch_order(n, self.state.config.seed, self.state.epoch));
            }
            rows.push(self.order.1[self.state.cursor]);
            self.state.cursor += 1;
        }
        let seq = rows.iter().map(|&i| self.examples[i].input_ids.len()).max().unwrap_or(1).max(1);
        let mut b = Batch {
            rows: rows.len(),
            seq,
            input_ids: vec![0; rows.len() * seq],
            labels: vec![-100; rows.len() * seq],
            attention_mask: Some(vec![0; rows.len() * seq]),
        };
        for (r, &i) in rows.iter().enumerate() {
            let e = &self.examples[i];
            let o = r * seq;
            b.input_ids[o..o + e.input_ids.len()].copy_from_slice(&e.input_ids);
            b.labels[o..o + e.labels.len()].copy_from_slice(&e.labels);
            if let Some(m) = b.attention_mask.as_mut() {
                m[o..o + e.input_ids.len()].fill(1);
            }
        }
        b
    }

    /// One optimizer step: `accum` micro-batches of forward + MeSP backward, then the update.
    ///
    /// A loss or gradient that is not finite (NaN or ±∞) skips the step: the parameters and
    /// the optimizer state are left as they were and the report says `skipped`;
    /// [`MAX_BAD_IN_ROW`] skips in a row end the run with an error suggesting a lower learning
    /// rate. With updates fused into the backward (no clipping, no accumulation) non-finite
    /// gradients under a finite loss are only seen once some layers were updated: that is an
    /// error at once (the parameters of that step are not kept; the caller's last checkpoint is).
    pub async fn step(&mut self, gpu: &Gpu, model: &Model) -> Result<StepReport> {
        let t0 = now_ms();
        if let GradBuf::Full(g) = &self.grads {
            zero_set(gpu, g);
        }
        let lr = self.sched.lr_at(self.state.step);
        let accum = self.state.config.accum;
        let mut loss_sum = 0.0f32;
        let mut counted = 0usize;
        let mut tokens = 0usize;
        let mut finite = true;
        for _ in 0..accum {
            let batch = self.next_batch();
            if batch.shifted_targets().1 == 0 {
                continue; // nothing to learn from (every label masked or truncated away)
            }
            tokens += batch
                .attention_mask
                .as_ref()
                .map(|m| m.iter().filter(|&&v| v != 0).count())
                .unwrap_or(batch.input_ids.len());
            if !finite {
                continue; // the step is skipped; its remaining batches are still consumed
            }
            let input = model.prepare(gpu, &batch)?;
            let loss = match &self.grads {
                GradBuf::None => {
                    let mz = MezoConfig { eps: self.state.config.mezo_eps, lr };
                    // One perturbation per step, regenerated from (seed, step).
                    let seed = self.state.config.seed.wrapping_mul(0x9e3779b97f4a7c15) ^ self.state.step as u64;
                    let (plus, minus, g) = mezo_step(gpu, model, &self.lora, &input, &mz, seed).await?;
                    if g.is_finite() {
                        0.5 * (plus + minus)
                    } else {
                        f32::NAN
                    }
                }
                GradBuf::Full(g) => model.loss_and_grads(gpu, &self.lora, Some(g), &input).await?,
                GradBuf::Row(row) => {
                    self.opt.begin_fused(gpu);
                    let (opt, params) = (&self.opt, &self.lora.params);
                    let mut apply = |i: usize, g: &LoraSet| opt.step_layer(gpu, params, i, g, lr);
                    let grads = Grads::PerLayer { row, apply: &mut apply };
                    let loss = model.loss_and_grads_into(gpu, &self.lora, Some(grads), &input, Mode::Mesp).await?;
                    if !loss.is_finite() {
                        self.opt.cancel_fused(); // the backward did not run: nothing was updated
                    } else if !self.opt.last_grad_norm(gpu).await?.is_finite() {
                        return Err(Error::msg(format!(
                            "step {}: the gradients are not finite (NaN or infinite) although the loss is {loss}; \
                             this step's parameters are not valid, so training stopped (the last checkpoint is kept). \
                             Try a lower learning rate (now {lr:.3e}) or gradient clipping (max_grad_norm), \
                             with which such a step is skipped instead",
                            self.state.step + 1
                        )));
                    }
                    loss
                }
            };
            finite &= loss.is_finite();
            loss_sum += loss;
            counted += 1;
        }
        if counted == 0 {
            return Err(Error::msg("no example in this step has a token to learn (all labels are masked)"));
        }
        if let (GradBuf::Full(grads), true) = (&self.grads, finite) {
            if counted > 1 {
                for (_, _, g) in grads.iter() {
                    scale(gpu, &g.a, 1.0 / counted as f32);
                    scale(gpu, &g.b, 1.0 / counted as f32);
                }
            }
            self.opt.measure(gpu, grads);
            finite = self.opt.last_grad_norm(gpu).await?.is_finite();
            if finite {
                self.opt.update(gpu, &self.lora.params, grads, lr);
            }
        }
        let loss = loss_sum / counted as f32;
        gpu.flush();
        let report = |step: u32, skipped: bool| StepReport {
            step,
            total_steps: self.state.total_steps,
            loss,
            lr,
            tokens,
            ms: now_ms() - t0,
            skipped,
        };
        if !finite {
            let attempt = self.state.step + 1;
            self.state.skipped.push(attempt);
            self.state.bad_in_row += 1;
            if self.state.bad_in_row >= MAX_BAD_IN_ROW {
                return Err(Error::msg(format!(
                    "the loss or the gradients were not finite (NaN or infinite) {} times in a row, at step {attempt}: \
                     training stopped; the parameters are those of step {} (the last checkpoint is kept). \
                     Try a lower learning rate (now {lr:.3e})",
                    self.state.bad_in_row, self.state.step
                )));
            }
            return Ok(report(self.state.step, true));
        }
        self.state.bad_in_row = 0;
        self.state.step += 1;
        self.state.losses.push(loss);
        Ok(report(self.state.step, false))
    }

    /// The adapter as PEFT would save it.
    pub async fn adapter(&self, gpu: &Gpu) -> Result<Adapter> {
        Ok(Adapter::from_f32(self.adapter_config.clone(), read_set(gpu, &self.lora.params).await?))
    }

    /// A complete checkpoint: trainer state, LoRA parameters, optimizer state.
    pub async fn checkpoint(&self, gpu: &Gpu) -> Result<Vec<u8>> {
        let mut tensors: Vec<NamedF32> = Vec::new();
        for (k, s, v) in read_set(gpu, &self.lora.params).await? {
            tensors.push((format!("lora/{k}"), s, v));
        }
        let (opt_step, opt_tensors) = self.opt.state(gpu).await?;
        for (k, s, v) in opt_tensors {
            tensors.push((format!("optim/{k}"), s, v));
        }
        let saved = SavedState {
            train: self.state.clone(),
            optimizer_step: opt_step,
            adapter_config: self.adapter_config.to_json(),
        };
        checkpoint::encode(&saved, &tensors)
    }

    /// Continue a run from a checkpoint. The configuration and the data must be the ones it was made with.
    pub fn resume(
        gpu: &Gpu,
        model: &Model,
        examples: Vec<Example>,
        config: TrainConfig,
        bytes: &[u8],
        what: &str,
    ) -> Result<Trainer> {
        let (saved, tensors): (SavedState, Vec<NamedF32>) = checkpoint::decode(bytes, what)?;
        // save_every does not change results: a run may be resumed with another one.
        let same = TrainConfig { save_every: config.save_every, ..saved.train.config.clone() } == config;
        if !same {
            return Err(Error::msg(format!(
                "{what}: the checkpoint was made with other settings ({}); run with --fresh to start over",
                describe_diff(&saved.train.config, &config)
            )));
        }
        let adapter_config = AdapterConfig::from_json(&saved.adapter_config)?;
        let mut lora_tensors = Vec::new();
        let mut opt_tensors = Vec::new();
        for (k, s, v) in tensors {
            if let Some(rest) = k.strip_prefix("lora/") {
                lora_tensors.push((rest.to_string(), s, v));
            } else if let Some(rest) = k.strip_prefix("optim/") {
                opt_tensors.push((rest.to_string(), s, v));
            } else {
                return Err(Error::msg(format!("{what}: unexpected tensor {k}")));
            }
        }
        let adapter = Adapter::from_f32(adapter_config, lora_tensors);
        let save_every = config.save_every;
        let mut t = Trainer::new(gpu, model, examples, config, Some(&adapter))?;
        if t.state.data_hash != saved.train.data_hash {
            return Err(Error::msg(format!(
                "{what}: the dataset changed since this checkpoint was written; run with --fresh to start over"
            )));
        }
        t.opt.load_state(gpu, saved.optimizer_step, &opt_tensors)?;
        t.state = saved.train;
        t.state.config.save_every = save_every;

        Ok(t)
    }
}

#[derive(Serialize, Deserialize)]
struct SavedState {
    train: TrainState,
    optimizer_step: u32,
    adapter_config: String,
}
