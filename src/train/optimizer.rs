//! The optimizer over a whole LoRA set: torch.optim.AdamW or torch.optim.SGD, preceded by
//! `torch.nn.utils.clip_grad_norm_` over every gradient together.
//!
//! A step computes the global squared gradient norm on the GPU into a (1) tensor, and each
//! update kernel derives the clip factor from it ([`crate::kernels::optimizer`]), so stepping
//! needs no readback. The norm is computed even when clipping is off, for logging
//! ([`Optimizer::last_grad_norm`]). Gradients are read, never modified or zeroed.
//! Checkpoint state uses PEFT's keys with torch's state names appended
//! (".exp_avg", ".exp_avg_sq", ".momentum_buffer").

use crate::base::error::{Error, Result};
use crate::base::names;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::elementwise::{fill, sum_squares};
use crate::kernels::optimizer::{adamw_step, sgd_momentum_step, AdamW, Sgd};
use crate::model::lora::{Lora, LoraSet};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    AdamW,
    Sgd,
}

impl std::str::FromStr for OptimizerKind {
    type Err = Error;
    /// "adamw" (also transformers' "adamw_torch"), "sgd"; case-insensitive.
    fn from_str(s: &str) -> Result<OptimizerKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "adamw" | "adamw_torch" => Ok(OptimizerKind::AdamW),
            "sgd" => Ok(OptimizerKind::Sgd),
            _ => Err(Error::msg(format!("unknown optimizer {s:?} (adamw or sgd)"))),
        }
    }
}

impl std::fmt::Display for OptimizerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OptimizerKind::AdamW => "adamw",
            OptimizerKind::Sgd => "sgd",
        })
    }
}

/// Hyperparameters, with torch's and the HF Trainer's names and defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerConfig {
    pub kind: OptimizerKind,
    /// Base learning rate (the schedule's peak; [`Optimizer::step`] takes the scheduled one).
    pub lr: f32,
    /// AdamW only.
    pub beta1: f32,
    /// AdamW only.
    pub beta2: f32,
    /// AdamW only.
    pub eps: f32,
    /// AdamW: decoupled (p ← p·(1 − lr·wd)); SGD: coupled, added to the gradient (torch's SGD).
    pub weight_decay: f32,
    /// Global gradient-norm clipping; 0 (or ≤ 0, or infinite) turns it off, as in the HF Trainer.
    pub max_grad_norm: f32,
    /// SGD only: momentum μ (dampening 0, not Nesterov); 0 = plain SGD with no state.
    pub momentum: f32,
}

impl Default for OptimizerConfig {
    fn default() -> OptimizerConfig {
        OptimizerConfig {
            kind: OptimizerKind::AdamW,
            lr: 2e-4,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            max_grad_norm: 1.0,
            momentum: 0.0,
        }
    }
}

impl OptimizerConfig {
    /// Refuse values torch would refuse (or that make a step divide by zero).
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str, v: f32, want: &str| Err(Error::msg(format!("optimizer: {what} = {v} (want {want})")));
        if !(self.lr >= 0.0 && self.lr.is_finite()) {
            return bad("lr", self.lr, "a finite value ≥ 0");
        }
        if !(self.weight_decay >= 0.0 && self.weight_decay.is_finite()) {
            return bad("weight_decay", self.weight_decay, "a finite value ≥ 0");
        }
        if self.max_grad_norm.is_nan() {
            return bad("max_grad_norm", self.max_grad_norm, "a number; 0 turns clipping off");
        }
        match self.kind {
            OptimizerKind::AdamW => {
                for (what, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
                    if !(0.0..1.0).contains(&b) {
                        return bad(what, b, "0 ≤ β < 1");
                    }
                }
                if !(self.eps >= 0.0 && self.eps.is_finite()) {
                    return bad("eps", self.eps, "a finite value ≥ 0");
                }
            }
            OptimizerKind::Sgd => {
                if !(self.momentum >= 0.0 && self.momentum.is_finite()) {
                    return bad("momentum", self.momentum, "a finite value ≥ 0");
                }
            }
        }
        Ok(())
    }
}

/// Optimizer state shaped like the parameters (Category::Optimizer).
enum State {
    /// AdamW: exp_avg and exp_avg_sq.
    AdamW { m: LoraSet, v: LoraSet },
    /// SGD: the momentum buffer, when momentum ≠ 0.
    Sgd { buf: Option<LoraSet> },
}

pub struct Optimizer {
    cfg: OptimizerConfig,
    /// Updates done; the next one is step `step + 1` (AdamW's bias corrections are 1-based).
    step: u32,
    state: State,
    /// norm_sq: (1) Σ grad² over every gradient of the last step.
    norm_sq: Tensor,
}

/// Whether two sets hold tensors of the same shapes at the same (layer, projection).
fn same_structure(a: &LoraSet, b: &LoraSet) -> bool {
    a.layers.len() == b.layers.len()
        && a.layers.iter().zip(&b.layers).all(|(la, lb)| {
            la.len() == lb.len()
                && la.iter().zip(lb).all(|(pa, pb)| match (pa, pb) {
                    (None, None) => true,
                    (Some(x), Some(y)) => x.a.shape == y.a.shape && x.b.shape == y.b.shape,
                    _ => false,
                })
        })
}

/// Every tensor of a set under its PEFT key with `suffix` appended, in PEFT order.
fn keyed<'a>(set: &'a LoraSet, suffix: &str) -> Vec<(String, &'a Tensor)> {
    let mut out = Vec::new();
    for (i, p, pair) in set.iter() {
        out.push((format!("{}{suffix}", names::lora_a_key(i, p)), &pair.a));
        out.push((format!("{}{suffix}", names::lora_b_key(i, p)), &pair.b));
    }
    out
}

impl Optimizer {
    /// Bytes of optimizer state for parameters of `param_bytes` (planning): two moments for
    /// AdamW, one buffer for SGD with momentum, plus the norm scalar.
    pub fn state_bytes(cfg: &OptimizerConfig, param_bytes: u64) -> u64 {
        let copies = match cfg.kind {
            OptimizerKind::AdamW => 2,
            OptimizerKind::Sgd if cfg.momentum != 0.0 => 1,
            OptimizerKind::Sgd => 0,
        };
        copies * param_bytes + 4
    }

    /// Validate the configuration and allocate zeroed state shaped like `params`.
    pub fn new(gpu: &Gpu, cfg: OptimizerConfig, params: &Lora) -> Result<Optimizer> {
        cfg.validate()?;
        let state = match cfg.kind {
            OptimizerKind::AdamW => State::AdamW {
                m: params.zeros_like(gpu, Category::Optimizer)?,
                v: params.zeros_like(gpu, Category::Optimizer)?,
            },
            OptimizerKind::Sgd if cfg.momentum != 0.0 => {
                State::Sgd { buf: Some(params.zeros_like(gpu, Category::Optimizer)?) }
            }
            OptimizerKind::Sgd => State::Sgd { buf: None },
        };
        let norm_sq = gpu.zeros(&[1], DType::F32, Category::Scratch)?;
        Ok(Optimizer { cfg, step: 0, state, norm_sq })
    }

    pub fn config(&self) -> &OptimizerConfig {
        &self.cfg
    }

    pub fn step_count(&self) -> u32 {
        self.step
    }

    /// The (1) tensor holding Σ grad² of the last step (e.g. to test for a non-finite norm on the GPU).
    pub fn norm_sq(&self) -> &Tensor {
        &self.norm_sq
    }

    /// One update of every parameter from `grads` with learning rate `lr` (from the
    /// schedule), after global-norm clipping; increments the step count. `params` and `grads`
    /// must be shaped like the set the optimizer was made for. Does not zero the grads.
    pub fn step(&mut self, gpu: &Gpu, params: &LoraSet, grads: &LoraSet, lr: f32) {
        self.measure(gpu, grads);
        self.update(gpu, params, grads, lr);
    }

    /// Compute Σ grad² of `grads` into [`Optimizer::norm_sq`] without updating anything (to test
    /// the gradients for non-finite values before [`Optimizer::update`]).
    pub fn measure(&self, gpu: &Gpu, grads: &LoraSet) {
        let mut first = true;
        // One sum per buffer where the set lies in few (the padding between tensors is zero).
        let whole: Vec<&Tensor> = grads.arenas().iter().collect();
        let each: Vec<&Tensor> = grads.iter().flat_map(|(_, _, g)| [&g.a, &g.b]).collect();
        for t in if whole.is_empty() { each } else { whole } {
            sum_squares(gpu, t, &self.norm_sq, !first);
            first = false;
        }
        if first {
            fill(gpu, &self.norm_sq, 0.0);
        }
    }

    /// [`Optimizer::step`] after [`Optimizer::measure`] of the same `grads`: the update, with
    /// clipping from the norm already measured.
    pub fn update(&mut self, gpu: &Gpu, params: &LoraSet, grads: &LoraSet, lr: f32) {
        assert!(same_structure(params, grads), "Optimizer::step: parameters and gradients differ in structure");
        self.step = self.step.saturating_add(1);
        let c = &self.cfg;
        let max_norm = c.max_grad_norm;
        match &self.state {
            State::AdamW { m, v } => {
                assert!(same_structure(params, m), "Optimizer::step: parameters differ from the optimizer's state");
                let h = AdamW { lr, beta1: c.beta1, beta2: c.beta2, eps: c.eps, weight_decay: c.weight_decay };
                if [grads, m, v].iter().all(|s| params.same_layout(s)) {
                    // Every tensor alike: one update per buffer.
                    for (((p, g), m), v) in params.arenas().iter().zip(grads.arenas()).zip(m.arenas()).zip(v.arenas()) {
                        adamw_step(gpu, &h, self.step, p, g, m, v, &self.norm_sq, max_norm);
                    }
                    return;
                }
                for (i, proj, p) in params.iter() {
                    let (g, m, v) = (grads.pair(i, proj), m.pair(i, proj), v.pair(i, proj));
                    let (Some(g), Some(m), Some(v)) = (g, m, v) else { continue };
                    adamw_step(gpu, &h, self.step, &p.a, &g.a, &m.a, &v.a, &self.norm_sq, max_norm);
                    adamw_step(gpu, &h, self.step, &p.b, &g.b, &m.b, &v.b, &self.norm_sq, max_norm);
                }
            }
            State::Sgd { buf } => {
                if let Some(b) = buf {
                    assert!(same_structure(params, b), "Optimizer::step: parameters differ from the optimizer's state");
                }
                let h = Sgd { lr, momentum: c.momentum, weight_decay: c.weight_decay };
                if params.same_layout(grads) && buf.as_ref().is_none_or(|b| params.same_layout(b)) {
                    for (j, (p, g)) in params.arenas().iter().zip(grads.arenas()).enumerate() {
                        let b = buf.as_ref().map(|b| &b.arenas()[j]);
                        sgd_momentum_step(gpu, &h, p, g, b, &self.norm_sq, max_norm);
                    }
                    return;
                }
                for (i, proj, p) in params.iter() {
                    let Some(g) = grads.pair(i, proj) else { continue };
                    let b = buf.as_ref().and_then(|b| b.pair(i, proj));
                    sgd_momentum_step(gpu, &h, &p.a, &g.a, b.map(|b| &b.a), &self.norm_sq, max_norm);
                    sgd_momentum_step(gpu, &h, &p.b, &g.b, b.map(|b| &b.b), &self.norm_sq, max_norm);
                }
            }
        }
    }

    /// Undo [`Optimizer::begin_fused`]'s count when no layer was updated after all (the
    /// step was skipped because its loss was not finite).
    pub fn cancel_fused(&mut self) {
        self.step = self.step.saturating_sub(1);
    }

    /// Whether updates can be fused into the backward, layer by layer ([`Optimizer::begin_fused`],
    /// [`Optimizer::step_layer`]): only without global clipping, which needs every gradient
    /// before the first update. (Callers also need a single micro-batch per step.)
    pub fn can_fuse(&self) -> bool {
        let m = self.cfg.max_grad_norm;
        !(m > 0.0 && m.is_finite())
    }

    /// Start a fused step: count it and clear the gradient norm, which [`Optimizer::step_layer`]
    /// then accumulates (for [`Optimizer::last_grad_norm`]).
    pub fn begin_fused(&mut self, gpu: &Gpu) {
        assert!(self.can_fuse(), "Optimizer::begin_fused with gradient clipping on");
        self.step = self.step.saturating_add(1);
        fill(gpu, &self.norm_sq, 0.0);
    }

    /// Update layer `layer`'s parameters from its gradients `grads` (one row of the set, right
    /// after that layer's backward), exactly as [`Optimizer::step`] would with clipping off.
    pub fn step_layer(&self, gpu: &Gpu, params: &LoraSet, layer: usize, row: &LoraSet, lr: f32) {
        let c = &self.cfg;
        let grads = &row.layers[0];
        if let Some(span) = row.span(0) {
            sum_squares(gpu, span, &self.norm_sq, true);
        } else {
            for g in grads.iter().flatten() {
                for t in [&g.a, &g.b] {
                    sum_squares(gpu, t, &self.norm_sq, true);
                }
            }
        }
        // The layer's tensors alike in every set: one update over the layer's span.
        fn span<'a>(s: &'a LoraSet, layer: usize, row: &LoraSet) -> Option<&'a Tensor> {
            s.span(layer).filter(|t| row.span(0).is_some_and(|g| g.bytes() == t.bytes()))
        }
        let span = |s| span(s, layer, row);
        if let (Some(p), Some(g)) = (span(params), row.span(0)) {
            match &self.state {
                State::AdamW { m, v } => {
                    if let (Some(m), Some(v)) = (span(m), span(v)) {
                        let h = AdamW { lr, beta1: c.beta1, beta2: c.beta2, eps: c.eps, weight_decay: c.weight_decay };
                        return adamw_step(gpu, &h, self.step, p, g, m, v, &self.norm_sq, 0.0);
                    }
                }
                State::Sgd { buf } => {
                    let b = buf.as_ref().map(span);
                    if b.is_none_or(|b| b.is_some()) {
                        let h = Sgd { lr, momentum: c.momentum, weight_decay: c.weight_decay };
                        return sgd_momentum_step(gpu, &h, p, g, b.flatten(), &self.norm_sq, 0.0);
                    }
                }
            }
        }
        for (j, (p, g)) in params.layers[layer].iter().zip(grads).enumerate() {
            let (Some(p), Some(g)) = (p, g) else { continue };
            match &self.state {
                State::AdamW { m, v } => {
                    let h = AdamW { lr, beta1: c.beta1, beta2: c.beta2, eps: c.eps, weight_decay: c.weight_decay };
                    let (Some(m), Some(v)) = (m.layers[layer][j].as_ref(), v.layers[layer][j].as_ref()) else {
                        continue;
                    };
                    adamw_step(gpu, &h, self.step, &p.a, &g.a, &m.a, &v.a, &self.norm_sq, 0.0);
                    adamw_step(gpu, &h, self.step, &p.b, &g.b, &m.b, &v.b, &self.norm_sq, 0.0);
                }
                State::Sgd { buf } => {
                    let h = Sgd { lr, momentum: c.momentum, weight_decay: c.weight_decay };
                    let b = buf.as_ref().and_then(|b| b.layers[layer][j].as_ref());
                    sgd_momentum_step(gpu, &h, &p.a, &g.a, b.map(|b| &b.a), &self.norm_sq, 0.0);
                    sgd_momentum_step(gpu, &h, &p.b, &g.b, b.map(|b| &b.b), &self.norm_sq, 0.0);
                }
            }
        }
    }

    /// The global gradient norm of the last step, before clipping (what clip_grad_norm_
    /// returns); 0 before the first step. Reads one scalar back.
    pub async fn last_grad_norm(&self, gpu: &Gpu) -> Result<f32> {
        let v = gpu.read_f32(&self.norm_sq).await?;
        Ok((v.first().copied().unwrap_or(0.0) as f64).sqrt() as f32)
    }

    /// Every state tensor under its checkpoint key.
    fn state_tensors(&self) -> Vec<(String, &Tensor)> {
        match &self.state {
            State::AdamW { m, v } => {
                let mut out = keyed(m, ".exp_avg");
                out.extend(keyed(v, ".exp_avg_sq"));
                out
            }
            State::Sgd { buf: Some(b) } => keyed(b, ".momentum_buffer"),
            State::Sgd { buf: None } => Vec::new(),
        }
    }

    /// State for checkpoints: the step count and every state tensor as (PEFT key +
    /// ".exp_avg" / ".exp_avg_sq" (AdamW) or ".momentum_buffer" (SGD with momentum), shape,
    /// values). Plain SGD has no tensors.
    pub async fn state(&self, gpu: &Gpu) -> Result<(u32, Vec<(String, Vec<usize>, Vec<f32>)>)> {
        let named = self.state_tensors();
        let tensors: Vec<&Tensor> = named.iter().map(|(_, t)| *t).collect();
        let values = gpu.read_f32_many(&tensors).await?;
        Ok((self.step, named.iter().zip(values).map(|((key, t), v)| (key.clone(), t.shape.clone(), v)).collect()))
    }

    /// Restore what [`Optimizer::state`] returned. Every expected tensor must be present with
    /// its shape and no other may be; nothing is changed unless all of them are.
    pub fn load_state(&mut self, gpu: &Gpu, step: u32, tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Result<()> {
        let mut given: std::collections::HashMap<&str, (&[usize], &[f32])> = Default::default();
        for (k, s, v) in tensors {
            if given.insert(k.as_str(), (s, v)).is_some() {
                return Err(Error::msg(format!("optimizer state: tensor {k} appears twice")));
            }
        }
        let expected = self.state_tensors();
        let mut writes = Vec::with_capacity(expected.len());
        for (key, t) in &expected {
            let Some(&(shape, values)) = given.get(key.as_str()) else {
                return Err(Error::msg(format!(
                    "optimizer state: missing {key} (the state is not of a {} optimizer for this adapter)",
                    self.cfg.kind
                )));
            };
            if shape != t.shape.as_slice() || values.len() != t.numel() {
                return Err(Error::msg(format!(
                    "optimizer state: {key} has shape {shape:?} with {} values, the adapter needs {:?}",
                    values.len(),
                    t.shape
                )));
            }
            writes.push((*t, values));
        }
        if given.len() != expected.len() {
            let known: std::collections::HashSet<&str> = expected.iter().map(|(k, _)| k.as_str()).collect();
            let extra = tensors.iter().map(|(k, _, _)| k.as_str()).find(|k| !known.contains(k)).unwrap_or("?");
            return Err(Error::msg(format!(
                "optimizer state: unexpected tensor {extra} (the state is not of a {} optimizer for this adapter)",
                self.cfg.kind
            )));
        }
        for (t, values) in writes {
            gpu.write_f32(t, values);
        }
        self.step = step;
        Ok(())
    }
}

/// f64 reference of a whole step over flat host tensors (the set's tensors in PEFT order):
/// the global clip, then torch's AdamW or SGD per tensor.
#[cfg(test)]
pub mod reference {
    use super::{OptimizerConfig, OptimizerKind};
    use crate::kernels::optimizer::reference as k;

    /// Host state: parameters and per-tensor moments (m: exp_avg or momentum buffer; v: exp_avg_sq).
    pub struct Host {
        pub p: Vec<Vec<f64>>,
        pub m: Vec<Vec<f64>>,
        pub v: Vec<Vec<f64>>,
        pub step: u32,
    }

    impl Host {
        pub fn new(p: Vec<Vec<f64>>) -> Host {
            let zeros: Vec<Vec<f64>> = p.iter().map(|t| vec![0.0; t.len()]).collect();
            Host { m: zeros.clone(), v: zeros, p, step: 0 }
        }

        /// One step; returns the global gradient norm.
        pub fn step(&mut self, c: &OptimizerConfig, grads: &[Vec<f64>], lr: f64) -> f64 {
            self.step += 1;
            let norm_sq: f64 = grads.iter().flatten().map(|g| g * g).sum();
            let clip = k::clip_factor(norm_sq, c.max_grad_norm as f64);
            let (b1, b2, eps, wd, mu) =
                (c.beta1 as f64, c.beta2 as f64, c.eps as f64, c.weight_decay as f64, c.momentum as f64);
            for (j, g) in grads.iter().enumerate() {
                match c.kind {
                    OptimizerKind::AdamW => k::adamw_step(
                        lr,
                        b1,
                        b2,
                        eps,
                        wd,
                        self.step,
                        clip,
                        &mut self.p[j],
                        g,
                        &mut self.m[j],
                        &mut self.v[j],
                    ),
                    OptimizerKind::Sgd => {
                        let buf = if mu != 0.0 { Some(self.m[j].as_mut_slice()) } else { None };
                        k::sgd_step(lr, mu, wd, clip, &mut self.p[j], g, buf)
                    }
                }
            }
            norm_sq.sqrt()
        }
    }
}

#[cfg(test)]
#[path = "optimizer_tests.rs"]
mod tests;
