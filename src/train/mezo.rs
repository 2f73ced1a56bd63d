//! MeZO (Malladi et al. 2023, "Fine-Tuning Language Models with Just Forward Passes"): SPSA
//! with the perturbation regenerated from a seed instead of stored. One step with seed s:
//!
//! ```text
//! θ += ε·z;  L+ = loss(θ)
//! θ -= 2ε·z; L- = loss(θ)
//! g = (L+ − L−) / 2ε                    (projected gradient ≈ z·∇L)
//! θ += (ε − lr·g)·z                     (restore and update in one pass)
//! ```
//!
//! z ~ N(0, 1) per LoRA element comes from [`crate::kernels::perturb`]; LoRA tensor k (in
//! [`LoraSet::iter`] order) uses stream 2k for A and 2k + 1 for B. Nothing is kept but the
//! parameters: two forward passes, no backward, no gradient or optimizer buffers.
//! Perturbing in place costs one f32 rounding per pass, so after a step θ equals
//! θ0 − lr·g·z up to ~3 ulps of |θ| (MeZO's reference implementation does the same).

use crate::base::error::{Error, Result};
use crate::gpu::{Category, Gpu, Tensor};
use crate::kernels::perturb::{perturb, z_host};
use crate::model::lora::{read_set, Lora, LoraSet};
use crate::model::{Model, StepInput};

/// MeZO's hyperparameters (the paper's LoRA runs: lr 1e-4 or 5e-5, ε 1e-2 or 1e-3).
#[derive(Clone, Debug, PartialEq)]
pub struct MezoConfig {
    /// Perturbation scale ε.
    pub eps: f32,
    /// Learning rate (plain SGD along z).
    pub lr: f32,
}

impl Default for MezoConfig {
    fn default() -> MezoConfig {
        MezoConfig { eps: 1e-3, lr: 1e-4 }
    }
}

impl MezoConfig {
    pub fn validate(&self) -> Result<()> {
        if !(self.eps > 0.0 && self.eps.is_finite()) {
            return Err(Error::msg(format!("mezo: eps = {} (want a finite value > 0)", self.eps)));
        }
        if !(self.lr >= 0.0 && self.lr.is_finite()) {
            return Err(Error::msg(format!("mezo: lr = {} (want a finite value ≥ 0)", self.lr)));
        }
        Ok(())
    }
}

/// Every LoRA tensor of a set with its perturbation stream: 2k for A, 2k + 1 for B of pair k.
pub fn streams(set: &LoraSet) -> Vec<(&Tensor, u32)> {
    let mut out = Vec::new();
    for (k, (_, _, pair)) in set.iter().enumerate() {
        out.push((&pair.a, 2 * k as u32));
        out.push((&pair.b, 2 * k as u32 + 1));
    }
    out
}

/// θ += α·z(seed) over every LoRA tensor.
fn perturb_all(gpu: &Gpu, lora: &Lora, alpha: f32, seed: u64) {
    for (t, stream) in streams(&lora.params) {
        perturb(gpu, t, alpha, seed, stream);
    }
}

async fn loss(gpu: &Gpu, model: &Model, lora: &Lora, input: &StepInput) -> Result<f32> {
    model.loss_and_grads(gpu, lora, None, input).await
}

/// L+ and L− for seed `seed`, leaving θ at θ0 − ε·z (the caller moves it on). The difference is
/// taken in f64 so that g carries no rounding beyond the losses' own.
async fn two_losses(
    gpu: &Gpu,
    model: &Model,
    lora: &Lora,
    input: &StepInput,
    eps: f32,
    seed: u64,
) -> Result<(f32, f32, f32)> {
    perturb_all(gpu, lora, eps, seed);
    let plus = loss(gpu, model, lora, input).await;
    perturb_all(gpu, lora, -2.0 * eps, seed);
    let both = match plus {
        Ok(p) => loss(gpu, model, lora, input).await.map(|m| (p, m)),
        Err(e) => Err(e),
    };
    let (plus, minus) = match both {
        Ok(pm) => pm,
        Err(e) => {
            perturb_all(gpu, lora, eps, seed);
            return Err(e);
        }
    };
    let g = ((plus as f64 - minus as f64) / (2.0 * eps as f64)) as f32;
    Ok((plus, minus, g))
}

/// One MeZO step on a batch (two forward passes, no backward, no gradient buffers).
/// Returns (L+, L−, projected gradient g); θ ends at θ0 − lr·g·z. If either loss is not finite
/// the parameters are restored, not updated, and g is returned as it came out (not finite):
/// the caller skips the step.
pub async fn mezo_step(
    gpu: &Gpu,
    model: &Model,
    lora: &Lora,
    input: &StepInput,
    cfg: &MezoConfig,
    seed: u64,
) -> Result<(f32, f32, f32)> {
    cfg.validate()?;
    let (plus, minus, g) = two_losses(gpu, model, lora, input, cfg.eps, seed).await?;
    if !g.is_finite() {
        perturb_all(gpu, lora, cfg.eps, seed);
        return Ok((plus, minus, g));
    }
    perturb_all(gpu, lora, cfg.eps - cfg.lr * g, seed);
    Ok((plus, minus, g))
}

/// For each seed, the cosine between MeZO's estimate g·z and the true gradient ∇L (from
/// [`Model::loss_and_grads`]): cos = sign(g)·(z·∇L)/(|z|·|∇L|), with z from [`z_host`]. Callers
/// average them; for d parameters |cos| is about √(2/(π·d)). The parameters are copied first
/// and copied back after every seed, so they are left exactly as they were.
pub async fn mezo_gradient_cosine(
    gpu: &Gpu,
    model: &Model,
    lora: &Lora,
    input: &StepInput,
    eps: f32,
    seeds: &[u64],
) -> Result<Vec<f32>> {
    MezoConfig { eps, lr: 0.0 }.validate()?;
    let grads = lora.zeros_like(gpu, Category::Grads)?;
    model.loss_and_grads(gpu, lora, Some(&grads), input).await?;
    let grad: Vec<Vec<f32>> = read_set(gpu, &grads).await?.into_iter().map(|(_, _, v)| v).collect();
    drop(grads);
    let grad_norm = grad.iter().flatten().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    let params = streams(&lora.params);
    let backup = lora.zeros_like(gpu, Category::Scratch)?;
    let saved = streams(&backup);
    for ((p, _), (b, _)) in params.iter().zip(&saved) {
        gpu.copy(p, b);
    }
    let mut out = Vec::with_capacity(seeds.len());
    for &seed in seeds {
        let r = two_losses(gpu, model, lora, input, eps, seed).await;
        for ((p, _), (b, _)) in params.iter().zip(&saved) {
            gpu.copy(b, p);
        }
        let (_, _, g) = r?;
        let (mut zg, mut zz) = (0.0f64, 0.0f64);
        for ((t, stream), gr) in params.iter().zip(&grad) {
            let z = z_host(seed, *stream, t.numel());
            zg += z.iter().zip(gr).map(|(&z, &d)| z as f64 * d as f64).sum::<f64>();
            zz += z.iter().map(|&z| (z as f64).powi(2)).sum::<f64>();
        }
        let denom = zz.sqrt() * grad_norm;
        let cos = if denom > 0.0 && g != 0.0 { g.signum() as f64 * zg / denom } else { 0.0 };
        out.push(cos as f32);
    }
    gpu.flush();
    Ok(out)
}
