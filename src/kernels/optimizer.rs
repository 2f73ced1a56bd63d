//! Optimizer updates of one f32 parameter tensor, elementwise, with PyTorch's formulas:
//!
//! - [`adamw_step`]: torch.optim.AdamW (decoupled weight decay, bias-corrected moments).
//! - [`sgd_step`]: torch.optim.SGD without momentum; [`sgd_momentum_step`] with momentum and
//!   (coupled) weight decay.
//!
//! The gradient is multiplied by the clip factor of `torch.nn.utils.clip_grad_norm_`,
//! `min(1, max_norm / (sqrt(norm_sq) + 1e-6))`, computed on the GPU from a (1) tensor holding
//! the global squared gradient norm (see [`crate::kernels::elementwise::sum_squares`]), so a
//! step needs no readback. `max_norm` ≤ 0, infinite or NaN means no clipping (as the HF
//! Trainer does for `max_grad_norm` 0). The gradient tensor itself is not modified.
//! Hyperparameters are f32; derived constants (bias corrections, 1 − lr·wd) are computed in
//! f64 on the CPU and rounded once. Each update uses vec4 loads when the element count is a
//! multiple of 4 and a scalar variant otherwise; both are checked against the f64 reference.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::render;

const SRC: &str = include_str!("optimizer.wgsl");

/// Elements (of T) one workgroup covers: 64 invocations × 4.
const PER_GROUP: usize = 256;

/// AdamW hyperparameters (torch.optim.AdamW's names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

/// SGD hyperparameters (torch.optim.SGD's names; dampening 0, not Nesterov).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    pub lr: f32,
    pub momentum: f32,
    /// Coupled (L2) weight decay: added to the gradient as `wd·param`, as torch.optim.SGD does.
    pub weight_decay: f32,
}

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    clip: u32,
    max_norm: f32,
    lr: f32,
    wd: f32,
    decay: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    step_size: f32,
    bc2_sqrt: f32,
    _p0: u32,
}

/// Whether `max_norm` asks for clipping at all.
pub fn clips(max_norm: f32) -> bool {
    max_norm > 0.0 && max_norm.is_finite()
}

fn check(op: &str, numel: usize, ts: &[(&str, &Tensor)], norm_sq: &Tensor) {
    for (name, t) in ts {
        assert!(
            t.dtype == DType::F32 && t.numel() == numel,
            "{op}: {name} {:?} {:?} does not match {numel} f32 elements",
            t.shape,
            t.dtype
        );
    }
    assert!(
        norm_sq.dtype == DType::F32 && norm_sq.numel() >= 1,
        "{op}: norm_sq {:?} {:?} must be f32 with at least one element",
        norm_sq.shape,
        norm_sq.dtype
    );
}

/// One update dispatch; `update` names the WGSL function, `ts` are its bindings 1.. in order.
fn launch(gpu: &Gpu, update: &str, mut prm: Params, ts: &[&Tensor], max_norm: f32) {
    let numel = ts[0].numel();
    if numel == 0 {
        return;
    }
    let (ty, n) = if numel % 4 == 0 { ("vec4<f32>", numel / 4) } else { ("f32", numel) };
    let key = format!("optimizer/{update}/{ty}");
    let pipeline = gpu.pipeline(&key, || render(SRC, &[("T", ty.into()), ("UPDATE", update.into())]));
    prm.n = n as u32;
    prm.clip = clips(max_norm) as u32;
    prm.max_norm = max_norm;
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&prm), ts, (n.div_ceil(PER_GROUP) as u32, 1, 1));
}

/// One torch.optim.AdamW step `step` (1-based, counted before the update as torch does):
/// with g = clip·grad,
/// p ← p·(1 − lr·wd); m ← m + (1 − β1)(g − m); v ← β2·v + (1 − β2)·g²;
/// p ← p − lr/(1 − β1^t) · m / (sqrt(v)/sqrt(1 − β2^t) + ε).
///
/// p, g, m, v: any shape, the same number of f32 elements; norm_sq: (1) f32, Σ grad² over
/// every parameter (read only when `max_norm` clips).
#[allow(clippy::too_many_arguments)]
pub fn adamw_step(
    gpu: &Gpu,
    h: &AdamW,
    step: u32,
    p: &Tensor,
    g: &Tensor,
    m: &Tensor,
    v: &Tensor,
    norm_sq: &Tensor,
    max_norm: f32,
) {
    assert!(step >= 1, "adamw_step: the step count is 1-based (got 0)");
    check("adamw_step", p.numel(), &[("p", p), ("g", g), ("m", m), ("v", v)], norm_sq);
    let (lr, b1, b2) = (h.lr as f64, h.beta1 as f64, h.beta2 as f64);
    let t = step.min(i32::MAX as u32) as i32;
    let prm = Params {
        decay: (1.0 - lr * h.weight_decay as f64) as f32,
        beta1: h.beta1,
        beta2: h.beta2,
        eps: h.eps,
        step_size: (lr / (1.0 - b1.powi(t))) as f32,
        bc2_sqrt: (1.0 - b2.powi(t)).sqrt() as f32,
        ..Default::default()
    };
    launch(gpu, "adamw", prm, &[p, g, norm_sq, m, v], max_norm);
}

/// One torch.optim.SGD step without momentum or weight decay: p ← p − lr·clip·g.
/// p, g: the same number of f32 elements; norm_sq: (1) f32.
pub fn sgd_step(gpu: &Gpu, lr: f32, p: &Tensor, g: &Tensor, norm_sq: &Tensor, max_norm: f32) {
    check("sgd_step", p.numel(), &[("p", p), ("g", g)], norm_sq);
    let prm = Params { lr, ..Default::default() };
    launch(gpu, "sgd", prm, &[p, g, norm_sq], max_norm);
}

/// One torch.optim.SGD step with momentum and weight decay: with d = clip·g + wd·p,
/// buf ← μ·buf + d; p ← p − lr·buf. `buf` (the momentum buffer, same size as p) must start at
/// zero, which makes the first step buf = d as torch's does; without `buf` (μ must then be 0)
/// p ← p − lr·d.
#[allow(clippy::too_many_arguments)]
pub fn sgd_momentum_step(
    gpu: &Gpu,
    h: &Sgd,
    p: &Tensor,
    g: &Tensor,
    buf: Option<&Tensor>,
    norm_sq: &Tensor,
    max_norm: f32,
) {
    let prm = Params { lr: h.lr, wd: h.weight_decay, beta1: h.momentum, ..Default::default() };
    match buf {
        Some(b) => {
            check("sgd_momentum_step", p.numel(), &[("p", p), ("g", g), ("buf", b)], norm_sq);
            launch(gpu, "sgd_momentum", prm, &[p, g, norm_sq, b], max_norm);
        }
        None => {
            assert!(h.momentum == 0.0, "sgd_momentum_step: momentum {} needs a buffer", h.momentum);
            check("sgd_momentum_step", p.numel(), &[("p", p), ("g", g)], norm_sq);
            launch(gpu, "sgd", prm, &[p, g, norm_sq], max_norm);
        }
    }
}

/// f64 references of PyTorch's formulas (clip_grad_norm_, AdamW, SGD).
pub mod reference {
    /// clip_grad_norm_'s factor for a global squared norm; 1 when `max_norm` does not clip.
    pub fn clip_factor(norm_sq: f64, max_norm: f64) -> f64 {
        if !(max_norm > 0.0 && max_norm.is_finite()) {
            return 1.0;
        }
        (max_norm / (norm_sq.sqrt() + 1e-6)).min(1.0)
    }

    /// AdamW step t (1-based) in place, with g = clip·grad.
    #[allow(clippy::too_many_arguments)]
    pub fn adamw_step(
        lr: f64,
        beta1: f64,
        beta2: f64,
        eps: f64,
        wd: f64,
        t: u32,
        clip: f64,
        p: &mut [f64],
        grad: &[f64],
        m: &mut [f64],
        v: &mut [f64],
    ) {
        let bc1 = 1.0 - beta1.powi(t as i32);
        let bc2 = 1.0 - beta2.powi(t as i32);
        for i in 0..p.len() {
            let g = grad[i] * clip;
            p[i] *= 1.0 - lr * wd;
            m[i] = beta1 * m[i] + (1.0 - beta1) * g;
            v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
            p[i] -= lr * (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps);
        }
    }

    /// SGD step in place: d = clip·grad + wd·p; with momentum buf = μ·buf + d (buf = d on the
    /// first step, which a zero buffer gives); p -= lr·d (or lr·buf).
    pub fn sgd_step(lr: f64, momentum: f64, wd: f64, clip: f64, p: &mut [f64], grad: &[f64], buf: Option<&mut [f64]>) {
        match buf {
            Some(b) => {
                for i in 0..p.len() {
                    b[i] = momentum * b[i] + grad[i] * clip + wd * p[i];
                    p[i] -= lr * b[i];
                }
            }
            None => {
                for i in 0..p.len() {
                    p[i] -= lr * (grad[i] * clip + wd * p[i]);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::elementwise::sum_squares;
    use crate::kernels::testutil::{assert_close, Rng};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// Awkward (37·29), vec4-aligned (44·52), tiny (3), and large enough for many workgroups.
    const SIZES: [usize; 4] = [37 * 29, 44 * 52, 3, 100_003];
    /// max_norm: active (the random gradients have norm ≫ 1), inactive (norm ≪ 1e3), 0 = off.
    const MAX_NORMS: [f32; 3] = [1.0, 1e3, 0.0];

    /// Two hyperparameter sets: torch's defaults with some decay, and ones where ε and the
    /// decay matter (ε placement after the bias-corrected square root is checked by 1e-3).
    const ADAMW: [AdamW; 2] = [
        AdamW { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 },
        AdamW { lr: 3e-2, beta1: 0.8, beta2: 0.95, eps: 1e-3, weight_decay: 0.1 },
    ];

    /// Upload fresh random gradients and their squared norm (by the GPU reduction); return the
    /// gradients and the norm² as the GPU holds it.
    async fn new_grads(gpu: &Gpu, rng: &mut Rng, g: &Tensor, norm_sq: &Tensor) -> (Vec<f64>, f64) {
        let n = g.numel();
        let gv = rng.vec(n, 1.0);
        gpu.write_f32(g, &gv);
        sum_squares(gpu, g, norm_sq, false);
        let ns = gpu.read_f32(norm_sq).await.unwrap()[0] as f64;
        let want = crate::kernels::elementwise::reference::sum_squares(&f64s(&gv));
        assert!((ns - want).abs() <= 1e-5 * want, "norm² {ns} vs {want}");
        (f64s(&gv), ns)
    }

    gpu_test!(async fn optimizer_adamw_steps(gpu) {
        for &n in &SIZES {
            for (hi, h) in ADAMW.iter().enumerate() {
                for &max_norm in &MAX_NORMS {
                    let mut rng = Rng::new(n as u64 * 31 + hi as u64);
                    let p0 = rng.vec(n, 1.0);
                    let tp = gpu.upload_f32(&p0, &[n], Category::Lora).unwrap();
                    let tg = gpu.zeros(&[n], DType::F32, Category::Grads).unwrap();
                    let tm = gpu.zeros(&[n], DType::F32, Category::Optimizer).unwrap();
                    let tv = gpu.zeros(&[n], DType::F32, Category::Optimizer).unwrap();
                    let tn = gpu.zeros(&[1], DType::F32, Category::Scratch).unwrap();
                    let (mut p, mut m, mut v) = (f64s(&p0), vec![0.0; n], vec![0.0; n]);
                    for t in 1..=4u32 {
                        let (g, ns) = new_grads(gpu, &mut rng, &tg, &tn).await;
                        let clip = reference::clip_factor(ns, max_norm as f64);
                        if max_norm == 1.0 && n > 3 {
                            assert!(clip < 0.5, "clipping should be active (clip {clip})");
                        }
                        adamw_step(gpu, h, t, &tp, &tg, &tm, &tv, &tn, max_norm);
                        let (lr, b1, b2, eps, wd) =
                            (h.lr as f64, h.beta1 as f64, h.beta2 as f64, h.eps as f64, h.weight_decay as f64);
                        reference::adamw_step(lr, b1, b2, eps, wd, t, clip, &mut p, &g, &mut m, &mut v);
                    }
                    let what = format!("adamw n={n} h={hi} max_norm={max_norm}");
                    assert_close(&format!("{what} p"), &gpu.read_f32(&tp).await.unwrap(), &p, 1e-6, 1e-5);
                    assert_close(&format!("{what} m"), &gpu.read_f32(&tm).await.unwrap(), &m, 1e-7, 1e-5);
                    assert_close(&format!("{what} v"), &gpu.read_f32(&tv).await.unwrap(), &v, 1e-12, 1e-5);
                }
            }
        }
    });

    gpu_test!(async fn optimizer_sgd_steps(gpu) {
        for &n in &SIZES {
            for &max_norm in &MAX_NORMS {
                // Plain SGD (the public sgd_step), and momentum with weight decay.
                for (hi, h) in [Sgd { lr: 0.05, momentum: 0.0, weight_decay: 0.0 }, Sgd { lr: 0.05, momentum: 0.9, weight_decay: 0.1 }]
                    .iter()
                    .enumerate()
                {
                    let mut rng = Rng::new(n as u64 * 17 + hi as u64);
                    let p0 = rng.vec(n, 1.0);
                    let tp = gpu.upload_f32(&p0, &[n], Category::Lora).unwrap();
                    let tg = gpu.zeros(&[n], DType::F32, Category::Grads).unwrap();
                    let tb = gpu.zeros(&[n], DType::F32, Category::Optimizer).unwrap();
                    let tn = gpu.zeros(&[1], DType::F32, Category::Scratch).unwrap();
                    let (mut p, mut b) = (f64s(&p0), vec![0.0; n]);
                    for _ in 0..4 {
                        let (g, ns) = new_grads(gpu, &mut rng, &tg, &tn).await;
                        let clip = reference::clip_factor(ns, max_norm as f64);
                        let (lr, mu, wd) = (h.lr as f64, h.momentum as f64, h.weight_decay as f64);
                        if h.momentum == 0.0 {
                            sgd_step(gpu, h.lr, &tp, &tg, &tn, max_norm);
                            reference::sgd_step(lr, mu, wd, clip, &mut p, &g, None);
                        } else {
                            sgd_momentum_step(gpu, h, &tp, &tg, Some(&tb), &tn, max_norm);
                            reference::sgd_step(lr, mu, wd, clip, &mut p, &g, Some(&mut b));
                        }
                    }
                    let what = format!("sgd n={n} h={hi} max_norm={max_norm}");
                    assert_close(&format!("{what} p"), &gpu.read_f32(&tp).await.unwrap(), &p, 1e-6, 1e-5);
                    if h.momentum != 0.0 {
                        assert_close(&format!("{what} buf"), &gpu.read_f32(&tb).await.unwrap(), &b, 1e-6, 1e-5);
                    }
                }
            }
        }
    });

    // A small fixed case against numbers printed by PyTorch 2.15 (f64):
    // ```python
    // p = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    // opt = torch.optim.AdamW([p], lr=0.1, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    // for g in ([0.3, -0.2, 4.0], [1.0, 0.5, -2.0]):
    //     p.grad = torch.tensor(g, dtype=torch.float64)
    //     torch.nn.utils.clip_grad_norm_([p], 1.0); opt.step()
    // print(p.tolist())
    // ```
    gpu_test!(async fn optimizer_adamw_matches_torch(gpu) {
        let h = AdamW { lr: 0.1, beta1: 0.9, beta2: 0.999, eps: 1e-8, weight_decay: 0.01 };
        let tp = gpu.upload_f32(&[0.5, -1.0, 2.0], &[3], Category::Lora).unwrap();
        let tg = gpu.zeros(&[3], DType::F32, Category::Grads).unwrap();
        let tm = gpu.zeros(&[3], DType::F32, Category::Optimizer).unwrap();
        let tv = gpu.zeros(&[3], DType::F32, Category::Optimizer).unwrap();
        let tn = gpu.zeros(&[1], DType::F32, Category::Scratch).unwrap();
        for (t, g) in [[0.3f32, -0.2, 4.0], [1.0, 0.5, -2.0]].iter().enumerate() {
            gpu.write_f32(&tg, g);
            sum_squares(gpu, &tg, &tn, false);
            adamw_step(gpu, &h, t as u32 + 1, &tp, &tg, &tm, &tv, &tn, 1.0);
        }
        let got = gpu.read_f32(&tp).await.unwrap();
        assert_close("adamw vs torch", &got, &TORCH_ADAMW, 1e-6, 1e-5);
    });

    const TORCH_ADAMW: [f64; 3] = [0.31445395582155816, -0.9557507774795914, 1.8947814781044297];
}
