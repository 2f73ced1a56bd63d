//! RMSNorm with HF semantics, y = w · (x · rsqrt(mean(x²) + eps)), all in f32.
//!
//! Forward saves only rstd (one f32 per row) for backward; the norm weight is frozen, so
//! backward produces dx alone. One workgroup per row with a workgroup reduction; vec4 loads
//! when C % 4 == 0, scalar otherwise.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::{render, sections};

const FWD: &str = include_str!("rmsnorm_fwd.wgsl");
const BWD: &str = include_str!("rmsnorm_bwd.wgsl");
const LORA_H: &str = include_str!("rmsnorm_lora_h.wgsl");
/// The norm of one row, shared by FWD and LORA_H (the `{{NORM_ROW}}` in each).
const NORM_ROW: &str = include_str!("rmsnorm_row.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    c: u32,
    l: u32,
    /// eps (forward) or beta (backward)
    scalar: f32,
}

/// The Params of rmsnorm_lora_h.wgsl.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LoraHParams {
    c: u32,
    /// C in elements of the row type (C or C/4)
    l: u32,
    r: u32,
    eps: f32,
}

/// Element type, its horizontal sum, and the row length in that type.
fn variant(c: usize) -> (&'static str, &'static str, usize) {
    if c % 4 == 0 {
        ("vec4<f32>", "dot(v, vec4<f32>(1.0))", c / 4)
    } else {
        ("f32", "v", c)
    }
}

fn pipeline(gpu: &Gpu, name: &str, src: &str, c: usize) -> (std::sync::Arc<crate::gpu::Kernel>, usize) {
    pipeline_with(gpu, name, src, c, "plain")
}

/// [`pipeline`] keeping the template's `section` (FWD: "plain" or "residual").
fn pipeline_with(
    gpu: &Gpu,
    name: &str,
    src: &str,
    c: usize,
    section: &str,
) -> (std::sync::Arc<crate::gpu::Kernel>, usize) {
    let (ty, hsum, l) = variant(c);
    let key = if section == "plain" { format!("{name}/{ty}") } else { format!("{name}/{section}/{ty}") };
    let p = gpu.pipeline(&key, || {
        let src = render(src, &[("NORM_ROW", NORM_ROW.into()), ("T", ty.into()), ("HSUM", hsum.into())]);
        sections(&src, &[section])
    });
    (p, l)
}

fn all_f32(ts: &[&Tensor]) -> bool {
    ts.iter().all(|t| t.dtype == DType::F32)
}

/// y (N, C) = w (C) · x (N, C) · rstd, saving rstd (N) = 1 / sqrt(mean(x²) + eps) for backward.
pub fn rmsnorm_forward(gpu: &Gpu, x: &Tensor, w: &Tensor, eps: f32, y: &Tensor, rstd: &Tensor) {
    let (n, c) = (x.rows(), x.cols());
    assert!(
        w.numel() == c && y.rows() == n && y.cols() == c && rstd.numel() == n && all_f32(&[x, w, y, rstd]),
        "rmsnorm_forward: x {:?} w {:?} y {:?} rstd {:?} (want x, y (N, C), w (C), rstd (N), all f32)",
        x.shape,
        w.shape,
        y.shape,
        rstd.shape
    );
    if n == 0 || c == 0 {
        return;
    }
    let (pipe, l) = pipeline(gpu, "rmsnorm_fwd", FWD, c);
    let p = Params { n: n as u32, c: c as u32, l: l as u32, scalar: eps };
    gpu.dispatch(&pipe, bytemuck::bytes_of(&p), &[x, w, y, rstd], (n as u32, 1, 1));
}

/// The block's residual and the norm after it in one dispatch: x += r (in place), then
/// y = w · x · rstd with rstd saved, exactly as [`crate::kernels::elementwise::axpy`] of r into x
/// followed by [`rmsnorm_forward`] compute them.
pub fn rmsnorm_residual_forward(gpu: &Gpu, x: &Tensor, r: &Tensor, w: &Tensor, eps: f32, y: &Tensor, rstd: &Tensor) {
    let (n, c) = (x.rows(), x.cols());
    assert!(
        r.shape == x.shape && w.numel() == c && y.rows() == n && y.cols() == c && rstd.numel() == n
            && all_f32(&[x, r, w, y, rstd]),
        "rmsnorm_residual_forward: x {:?} r {:?} w {:?} y {:?} rstd {:?} (want x, r, y (N, C), w (C), rstd (N), all f32)",
        x.shape,
        r.shape,
        w.shape,
        y.shape,
        rstd.shape
    );
    if n == 0 || c == 0 {
        return;
    }
    let (pipe, l) = pipeline_with(gpu, "rmsnorm_fwd", FWD, c, "residual");
    let p = Params { n: n as u32, c: c as u32, l: l as u32, scalar: eps };
    gpu.dispatch(&pipe, bytemuck::bytes_of(&p), &[x, w, y, rstd, r], (n as u32, 1, 1));
}

/// Decoding's norm and the LoRA down-products that read its output, in one dispatch: for one
/// row x (1, C), y = w · x · rstd exactly as [`rmsnorm_forward`] computes it, and h_j (1, r) =
/// y · A_jᵀ for each (A_j (r, C), h_j) of `pairs` (one to three, all f32 of one rank), where
/// decoding would otherwise run the norm and then [`matmul_nt_many`](crate::kernels::matmul::matmul_nt_many):
/// a dispatch less per use, on devices where each costs tens of microseconds. rstd is not
/// kept (decoding has no backward). Returns false, having done nothing, where these are not
/// such inputs or the device has too few storage bindings (3 + 2 per pair).
pub fn rmsnorm_lora_h_row(
    gpu: &Gpu,
    x: &Tensor,
    w: &Tensor,
    eps: f32,
    y: &Tensor,
    pairs: &[(&Tensor, &Tensor)],
) -> bool {
    let c = x.cols();
    let Some(&(a0, _)) = pairs.first() else { return false };
    let r = a0.rows();
    let fits = x.rows() == 1
        && c > 0
        && r > 0
        && pairs.len() <= 3
        && w.numel() == c
        && y.shape == x.shape
        && all_f32(&[x, w, y])
        && pairs
            .iter()
            .all(|(a, h)| a.dtype == DType::F32 && a.shape == [r, c] && h.dtype == DType::F32 && h.numel() == r)
        && 3 + 2 * pairs.len() <= gpu.info.max_storage_buffers_per_shader_stage as usize;
    if !fits {
        return false;
    }
    let (ty, hsum, l) = variant(c);
    let j = pairs.len();
    let pipe = gpu.pipeline(&format!("rmsnorm_lora_h/{j}/{ty}"), || {
        let mut bindings = String::new();
        let mut sums = String::new();
        for i in 0..j {
            bindings += &format!(
                "@group(0) @binding({}) var<storage, read> a{i}: array<{ty}>;        // A_{i}: (r, C)\n",
                4 + i
            );
            bindings += &format!(
                "@group(0) @binding({}) var<storage, read_write> h{i}: array<f32>;   // h_{i}: (1, r)\n",
                4 + j + i
            );
            sums += &format!(
                "        if (j == {i}u) {{\n            for (var i = 0u; i < p.l; i++) {{ acc += hsum(y[i] * a{i}[base + i]); }}\n            h{i}[t] = acc;\n        }}\n"
            );
        }
        render(
            LORA_H,
            &[
                ("NORM_ROW", NORM_ROW.into()),
                ("T", ty.into()),
                ("HSUM", hsum.into()),
                ("J", j.to_string()),
                ("BINDINGS", bindings),
                ("SUMS", sums),
            ],
        )
    });
    let p = LoraHParams { c: c as u32, l: l as u32, r: r as u32, eps };
    let mut bindings = vec![x, w, y];
    bindings.extend(pairs.iter().map(|(a, _)| *a));
    bindings.extend(pairs.iter().map(|(_, h)| *h));
    gpu.dispatch_flops(&pipe, bytemuck::bytes_of(&p), &bindings, (1, 1, 1), (2 * j * r * c) as u64);
    true
}

/// dx (N, C) = β·dx + ∂y/∂x applied to dy (N, C), given x (N, C), w (C) and the forward's rstd (N).
/// β = 1 accumulates into a residual gradient; β = 0 overwrites dx (even if it held NaN).
pub fn rmsnorm_backward(gpu: &Gpu, dy: &Tensor, x: &Tensor, w: &Tensor, rstd: &Tensor, dx: &Tensor, beta: f32) {
    let (n, c) = (x.rows(), x.cols());
    assert!(
        dy.rows() == n
            && dy.cols() == c
            && dx.rows() == n
            && dx.cols() == c
            && w.numel() == c
            && rstd.numel() == n
            && all_f32(&[dy, x, w, rstd, dx]),
        "rmsnorm_backward: dy {:?} x {:?} w {:?} rstd {:?} dx {:?} (want dy, x, dx (N, C), w (C), rstd (N), all f32)",
        dy.shape,
        x.shape,
        w.shape,
        rstd.shape,
        dx.shape
    );
    if n == 0 || c == 0 {
        return;
    }
    let (pipe, l) = pipeline(gpu, "rmsnorm_bwd", BWD, c);
    let p = Params { n: n as u32, c: c as u32, l: l as u32, scalar: beta };
    gpu.dispatch(&pipe, bytemuck::bytes_of(&p), &[dy, x, w, rstd, dx], (n as u32, 1, 1));
}

/// f64 references (row-major).
pub mod reference {
    /// (y (N, C), rstd (N))
    pub fn forward(x: &[f64], w: &[f64], n: usize, c: usize, eps: f64) -> (Vec<f64>, Vec<f64>) {
        let mut y = vec![0.0; n * c];
        let mut rstd = vec![0.0; n];
        for i in 0..n {
            let row = &x[i * c..(i + 1) * c];
            let r = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / c as f64 + eps).sqrt();
            rstd[i] = r;
            for j in 0..c {
                y[i * c + j] = w[j] * row[j] * r;
            }
        }
        (y, rstd)
    }
    /// dx (N, C) = r·w·dy − (r³/C)·x·Σⱼ dyⱼ·wⱼ·xⱼ
    pub fn backward(dy: &[f64], x: &[f64], w: &[f64], n: usize, c: usize, eps: f64) -> Vec<f64> {
        let (_, rstd) = forward(x, w, n, c, eps);
        let mut dx = vec![0.0; n * c];
        for i in 0..n {
            let r = rstd[i];
            let s: f64 = (0..c).map(|j| dy[i * c + j] * w[j] * x[i * c + j]).sum();
            for j in 0..c {
                dx[i * c + j] = r * w[j] * dy[i * c + j] - r * r * r / c as f64 * x[i * c + j] * s;
            }
        }
        dx
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, Rng};

    const EPS: f32 = 1e-6;

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    fn inputs(n: usize, c: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new((n * 100 + c) as u64);
        let x = rng.vec(n * c, 2.0);
        let w: Vec<f32> = rng.vec(c, 0.5).into_iter().map(|v| 1.0 + v).collect();
        let dy = rng.vec(n * c, 1.0);
        (x, w, dy)
    }

    const SHAPES: [(usize, usize); 4] = [(37, 53), (37, 52), (2, 3), (3, 200)];

    gpu_test!(async fn rmsnorm_forward_shapes(gpu) {
        for (n, c) in SHAPES {
            let (x, w, _) = inputs(n, c);
            let tx = gpu.upload_f32(&x, &[n, c], Category::Activations).unwrap();
            let tw = gpu.upload_f32(&w, &[c], Category::Weights).unwrap();
            let ty = gpu.zeros(&[n, c], DType::F32, Category::Activations).unwrap();
            let tr = gpu.zeros(&[n], DType::F32, Category::Activations).unwrap();
            rmsnorm_forward(gpu, &tx, &tw, EPS, &ty, &tr);
            let (want_y, want_r) = reference::forward(&f64s(&x), &f64s(&w), n, c, EPS as f64);
            assert_close(&format!("rmsnorm y {n}x{c}"), &gpu.read_f32(&ty).await.unwrap(), &want_y, 1e-5, 1e-5);
            assert_close(&format!("rmsnorm rstd {n}x{c}"), &gpu.read_f32(&tr).await.unwrap(), &want_r, 1e-5, 1e-5);
        }
    });

    // The block's residual and the norm after it in one dispatch: x + r in place, y and rstd,
    // each bit for bit what axpy and then rmsnorm_forward make (vec4 and scalar rows).
    gpu_test!(async fn rmsnorm_residual_equals_axpy_then_the_norm(gpu) {
        for (n, c) in SHAPES {
            let (x, w, _) = inputs(n, c);
            let r = Rng::new((n * 7 + c) as u64).vec(n * c, 3.0);
            let up = |v: &[f32]| gpu.upload_f32(v, &[n, c], Category::Activations).unwrap();
            let (fused_x, plain_x, tr) = (up(&x), up(&x), up(&r));
            let tw = gpu.upload_f32(&w, &[c], Category::Weights).unwrap();
            let zeros = |shape: &[usize]| gpu.zeros(shape, DType::F32, Category::Activations).unwrap();
            let (y1, s1, y2, s2) = (zeros(&[n, c]), zeros(&[n]), zeros(&[n, c]), zeros(&[n]));
            gpu.profile_start();
            rmsnorm_residual_forward(gpu, &fused_x, &tr, &tw, EPS, &y1, &s1);
            let calls = gpu.profile_take().await.unwrap().map_or(0, |p| p.calls());
            assert_eq!(calls, 1, "{n}x{c}: dispatches");
            crate::kernels::elementwise::axpy(gpu, 1.0, &tr, &plain_x);
            rmsnorm_forward(gpu, &plain_x, &tw, EPS, &y2, &s2);
            for (name, a, b) in [("x + r", &fused_x, &plain_x), ("y", &y1, &y2), ("rstd", &s1, &s2)] {
                let (a, b) = (gpu.read_f32(a).await.unwrap(), gpu.read_f32(b).await.unwrap());
                assert_eq!(a, b, "{n}x{c}: {name}");
            }
            assert_ne!(gpu.read_f32(&fused_x).await.unwrap(), x, "{n}x{c}: the residual added");
        }
    });

    // The fused norm + LoRA h kernel: y bit for bit as rmsnorm_forward's, each h_j = y·A_jᵀ
    // against f64 (from the y it stored), for one to three pairs, vec4 and scalar rows; it
    // declines more than one row.
    gpu_test!(async fn rmsnorm_lora_h_row_matches_the_norm_and_products(gpu) {
        for (c, r, j) in [(52, 8, 3), (53, 5, 2), (200, 1, 1), (3, 16, 3)] {
            let (x, w, _) = inputs(1, c);
            let tx = gpu.upload_f32(&x, &[1, c], Category::Activations).unwrap();
            let tw = gpu.upload_f32(&w, &[c], Category::Weights).unwrap();
            let mut rng = Rng::new((c * 10 + r) as u64);
            let a: Vec<Vec<f32>> = (0..j).map(|_| rng.vec(r * c, 1.0)).collect();
            let ta: Vec<Tensor> =
                a.iter().map(|a| gpu.upload_f32(a, &[r, c], Category::Weights).unwrap()).collect();
            let th: Vec<Tensor> = (0..j).map(|_| gpu.zeros(&[1, r], DType::F32, Category::Scratch).unwrap()).collect();
            let pairs: Vec<(&Tensor, &Tensor)> = ta.iter().zip(&th).collect();
            let (ty, tr) = (gpu.zeros(&[1, c], DType::F32, Category::Activations).unwrap(), gpu.zeros(&[1], DType::F32, Category::Activations).unwrap());
            rmsnorm_forward(gpu, &tx, &tw, EPS, &ty, &tr);
            let want_y = gpu.read_f32(&ty).await.unwrap();
            let fy = gpu.zeros(&[1, c], DType::F32, Category::Activations).unwrap();
            // Declined where the device has fewer storage bindings than 3 + 2 per pair.
            if 3 + 2 * j > gpu.info.max_storage_buffers_per_shader_stage as usize {
                assert!(!rmsnorm_lora_h_row(gpu, &tx, &tw, EPS, &fy, &pairs), "c {c} r {r} j {j}: taken");
                continue;
            }
            assert!(rmsnorm_lora_h_row(gpu, &tx, &tw, EPS, &fy, &pairs), "c {c} r {r} j {j}: declined");
            let y = gpu.read_f32(&fy).await.unwrap();
            assert!(y.iter().zip(&want_y).all(|(a, b)| a.to_bits() == b.to_bits()), "c {c}: y differs from rmsnorm_forward's");
            for (i, h) in th.iter().enumerate() {
                let want: Vec<f64> = (0..r)
                    .map(|t| (0..c).map(|k| y[k] as f64 * a[i][t * c + k] as f64).sum())
                    .collect();
                assert_close(&format!("h_{i} c {c} r {r}"), &gpu.read_f32(h).await.unwrap(), &want, 1e-5, 1e-5);
            }
        }
        let (x, w, _) = inputs(2, 8);
        let tx = gpu.upload_f32(&x, &[2, 8], Category::Activations).unwrap();
        let tw = gpu.upload_f32(&w[..8], &[8], Category::Weights).unwrap();
        let ta = gpu.zeros(&[4, 8], DType::F32, Category::Weights).unwrap();
        let th = gpu.zeros(&[2, 4], DType::F32, Category::Scratch).unwrap();
        let ty = gpu.zeros(&[2, 8], DType::F32, Category::Activations).unwrap();
        assert!(!rmsnorm_lora_h_row(gpu, &tx, &tw, EPS, &ty, &[(&ta, &th)]), "two rows must be declined");
    });

    gpu_test!(async fn rmsnorm_backward_shapes(gpu) {
        for (n, c) in SHAPES {
            for beta in [0.0f32, 1.0] {
                let (x, w, dy) = inputs(n, c);
                let mut rng = Rng::new(7);
                // beta = 0 must overwrite whatever dx held, NaN included.
                let dx0: Vec<f32> = if beta == 0.0 { vec![f32::NAN; n * c] } else { rng.vec(n * c, 1.0) };
                let tx = gpu.upload_f32(&x, &[n, c], Category::Activations).unwrap();
                let tw = gpu.upload_f32(&w, &[c], Category::Weights).unwrap();
                let tdy = gpu.upload_f32(&dy, &[n, c], Category::Grads).unwrap();
                let tdx = gpu.upload_f32(&dx0, &[n, c], Category::Grads).unwrap();
                let ty = gpu.zeros(&[n, c], DType::F32, Category::Activations).unwrap();
                let tr = gpu.zeros(&[n], DType::F32, Category::Activations).unwrap();
                rmsnorm_forward(gpu, &tx, &tw, EPS, &ty, &tr);
                rmsnorm_backward(gpu, &tdy, &tx, &tw, &tr, &tdx, beta);
                let mut want = reference::backward(&f64s(&dy), &f64s(&x), &f64s(&w), n, c, EPS as f64);
                if beta != 0.0 {
                    for (w, d) in want.iter_mut().zip(&dx0) {
                        *w += beta as f64 * *d as f64;
                    }
                }
                let got = gpu.read_f32(&tdx).await.unwrap();
                assert_close(&format!("rmsnorm dx {n}x{c} beta={beta}"), &got, &want, 1e-5, 1e-4);
            }
        }
    });

    // The backward formula against central differences of the f64 forward, L = Σ dy·y.
    gpu_test!(async fn rmsnorm_backward_finite_diff(gpu) {
        let (n, c) = (2, 5);
        let (x, w, dy) = inputs(n, c);
        let (xd, wd, dyd) = (f64s(&x), f64s(&w), f64s(&dy));
        let eps = EPS as f64;
        let loss = |x: &[f64]| -> f64 {
            let (y, _) = reference::forward(x, &wd, n, c, eps);
            y.iter().zip(&dyd).map(|(a, b)| a * b).sum()
        };
        let h = 1e-6;
        let fd: Vec<f64> = (0..n * c)
            .map(|i| {
                let (mut xp, mut xm) = (xd.clone(), xd.clone());
                xp[i] += h;
                xm[i] -= h;
                (loss(&xp) - loss(&xm)) / (2.0 * h)
            })
            .collect();
        let want = reference::backward(&dyd, &xd, &wd, n, c, eps);
        let want32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
        assert_close("rmsnorm reference backward vs finite differences", &want32, &fd, 1e-6, 1e-6);

        let tx = gpu.upload_f32(&x, &[n, c], Category::Activations).unwrap();
        let tw = gpu.upload_f32(&w, &[c], Category::Weights).unwrap();
        let tdy = gpu.upload_f32(&dy, &[n, c], Category::Grads).unwrap();
        let tdx = gpu.zeros(&[n, c], DType::F32, Category::Grads).unwrap();
        let ty = gpu.zeros(&[n, c], DType::F32, Category::Activations).unwrap();
        let tr = gpu.zeros(&[n], DType::F32, Category::Activations).unwrap();
        rmsnorm_forward(gpu, &tx, &tw, EPS, &ty, &tr);
        rmsnorm_backward(gpu, &tdy, &tx, &tw, &tr, &tdx, 0.0);
        assert_close("rmsnorm GPU dx vs finite differences", &gpu.read_f32(&tdx).await.unwrap(), &fd, 1e-5, 1e-5);
    });
}
