//! SwiGLU of the MLP: out = silu(gate) · up, elementwise over (N, F), and its backward.
//! Forward saves nothing: backward recomputes σ(gate) from gate and up, which the MLP keeps
//! (or recomputes) anyway. vec4 loads when N·F % 4 == 0, scalar otherwise.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::render;

const SRC: &str = include_str!("swiglu.wgsl");

/// Elements (of T) one workgroup covers: 64 invocations × 4.
const PER_GROUP: usize = 256;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

fn check(op: &str, ts: &[(&str, &Tensor)]) {
    let (n, f) = (ts[0].1.rows(), ts[0].1.cols());
    let ok = ts.iter().all(|(_, t)| t.rows() == n && t.cols() == f && t.dtype == DType::F32);
    assert!(
        ok,
        "{op}: shapes {} (want all the same (N, F), f32)",
        ts.iter().map(|(name, t)| format!("{name} {:?} {:?}", t.shape, t.dtype)).collect::<Vec<_>>().join(", ")
    );
}

fn launch(gpu: &Gpu, op: &str, names: &[(&str, bool)], body: &str, ts: &[&Tensor]) {
    let numel = ts[0].numel();
    if numel == 0 {
        return;
    }
    let (ty, n) = if numel % 4 == 0 { ("vec4<f32>", numel / 4) } else { ("f32", numel) };
    let pipeline = gpu.pipeline(&format!("swiglu/{op}/{ty}"), || {
        let bindings: String = names
            .iter()
            .enumerate()
            .map(|(i, (name, rw))| {
                let access = if *rw { "read_write" } else { "read" };
                format!("@group(0) @binding({}) var<storage, {access}> {name}: array<{ty}>;   // (N, F)\n", i + 1)
            })
            .collect();
        render(SRC, &[("T", ty.into()), ("BINDINGS", bindings), ("BODY", body.into())])
    });
    let p = Params { n: n as u32, _p0: 0, _p1: 0, _p2: 0 };
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), ts, (n.div_ceil(PER_GROUP) as u32, 1, 1));
}

/// out (N, F) = silu(gate (N, F)) · up (N, F)
pub fn swiglu_forward(gpu: &Gpu, gate: &Tensor, up: &Tensor, out: &Tensor) {
    check("swiglu_forward", &[("gate", gate), ("up", up), ("out", out)]);
    launch(gpu, "fwd", &[("gate", false), ("up", false), ("out", true)], "out[i] = g * s * up[i];", &[gate, up, out]);
}

/// dgate (N, F) = dout · up · silu'(gate), dup (N, F) = dout · silu(gate); both overwritten.
pub fn swiglu_backward(gpu: &Gpu, dout: &Tensor, gate: &Tensor, up: &Tensor, dgate: &Tensor, dup: &Tensor) {
    check("swiglu_backward", &[("dout", dout), ("gate", gate), ("up", up), ("dgate", dgate), ("dup", dup)]);
    launch(
        gpu,
        "bwd",
        &[("dout", false), ("gate", false), ("up", false), ("dgate", true), ("dup", true)],
        "let d = dout[i];
            dgate[i] = d * up[i] * s * (1.0 + g * (1.0 - s));
            dup[i] = d * g * s;",
        &[dout, gate, up, dgate, dup],
    );
}

/// f64 references, elementwise over flat slices.
pub mod reference {
    fn sigmoid(g: f64) -> f64 {
        1.0 / (1.0 + (-g).exp())
    }
    pub fn forward(gate: &[f64], up: &[f64]) -> Vec<f64> {
        gate.iter().zip(up).map(|(&g, &u)| g * sigmoid(g) * u).collect()
    }
    /// (dgate, dup)
    pub fn backward(dout: &[f64], gate: &[f64], up: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let mut dg = Vec::with_capacity(gate.len());
        let mut du = Vec::with_capacity(gate.len());
        for ((&d, &g), &u) in dout.iter().zip(gate).zip(up) {
            let s = sigmoid(g);
            dg.push(d * u * s * (1.0 + g * (1.0 - s)));
            du.push(d * g * s);
        }
        (dg, du)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, Rng};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// gate spans ±6 plus a few saturating values; up and dout ±1.
    fn inputs(n: usize, f: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let mut rng = Rng::new((n * 31 + f) as u64);
        let mut gate = rng.vec(n * f, 6.0);
        let len = gate.len();
        for (i, v) in [-100.0f32, 100.0, -30.0, 30.0, 0.0].into_iter().enumerate() {
            if i < len {
                gate[i * 7 % len] = v;
            }
        }
        (gate, rng.vec(n * f, 1.0), rng.vec(n * f, 1.0))
    }

    const SHAPES: [(usize, usize); 4] = [(37, 29), (8, 44), (1, 3), (97, 301)];

    async fn run(gpu: &Gpu, n: usize, f: usize) -> [Vec<f32>; 3] {
        let (gate, up, dout) = inputs(n, f);
        let tg = gpu.upload_f32(&gate, &[n, f], Category::Activations).unwrap();
        let tu = gpu.upload_f32(&up, &[n, f], Category::Activations).unwrap();
        let td = gpu.upload_f32(&dout, &[n, f], Category::Grads).unwrap();
        let nan = vec![f32::NAN; n * f];
        let to = gpu.upload_f32(&nan, &[n, f], Category::Activations).unwrap();
        let tdg = gpu.upload_f32(&nan, &[n, f], Category::Grads).unwrap();
        let tdu = gpu.upload_f32(&nan, &[n, f], Category::Grads).unwrap();
        swiglu_forward(gpu, &tg, &tu, &to);
        swiglu_backward(gpu, &td, &tg, &tu, &tdg, &tdu);
        [gpu.read_f32(&to).await.unwrap(), gpu.read_f32(&tdg).await.unwrap(), gpu.read_f32(&tdu).await.unwrap()]
    }

    gpu_test!(async fn swiglu_forward_backward_shapes(gpu) {
        for (n, f) in SHAPES {
            let (gate, up, dout) = inputs(n, f);
            let [out, dg, du] = run(gpu, n, f).await;
            let (g, u, d) = (f64s(&gate), f64s(&up), f64s(&dout));
            assert_close(&format!("swiglu out {n}x{f}"), &out, &reference::forward(&g, &u), 1e-5, 1e-5);
            let (want_dg, want_du) = reference::backward(&d, &g, &u);
            assert_close(&format!("swiglu dgate {n}x{f}"), &dg, &want_dg, 1e-5, 1e-5);
            assert_close(&format!("swiglu dup {n}x{f}"), &du, &want_du, 1e-5, 1e-5);
        }
    });

    // The backward formula against central differences of the f64 forward, L = Σ dout·out.
    gpu_test!(async fn swiglu_backward_finite_diff(gpu) {
        let (n, f) = (2, 5);
        let (mut gate, up, dout) = inputs(n, f);
        gate.iter_mut().for_each(|v| *v = v.clamp(-8.0, 8.0));
        let (g, u, d) = (f64s(&gate), f64s(&up), f64s(&dout));
        let loss = |g: &[f64], u: &[f64]| -> f64 { reference::forward(g, u).iter().zip(&d).map(|(a, b)| a * b).sum() };
        let h = 1e-6;
        let fd = |wrt_gate: bool| -> Vec<f64> {
            (0..n * f)
                .map(|i| {
                    let (mut gp, mut gm, mut up_, mut um) = (g.clone(), g.clone(), u.clone(), u.clone());
                    if wrt_gate {
                        gp[i] += h;
                        gm[i] -= h;
                    } else {
                        up_[i] += h;
                        um[i] -= h;
                    }
                    (loss(&gp, &up_) - loss(&gm, &um)) / (2.0 * h)
                })
                .collect()
        };
        let (fd_g, fd_u) = (fd(true), fd(false));
        let (want_dg, want_du) = reference::backward(&d, &g, &u);
        let f32s = |v: &[f64]| v.iter().map(|&x| x as f32).collect::<Vec<_>>();
        assert_close("swiglu reference dgate vs finite differences", &f32s(&want_dg), &fd_g, 1e-6, 1e-6);
        assert_close("swiglu reference dup vs finite differences", &f32s(&want_du), &fd_u, 1e-6, 1e-6);
        let tg = gpu.upload_f32(&gate, &[n, f], Category::Activations).unwrap();
        let tu = gpu.upload_f32(&up, &[n, f], Category::Activations).unwrap();
        let td = gpu.upload_f32(&dout, &[n, f], Category::Grads).unwrap();
        let tdg = gpu.zeros(&[n, f], DType::F32, Category::Grads).unwrap();
        let tdu = gpu.zeros(&[n, f], DType::F32, Category::Grads).unwrap();
        swiglu_backward(gpu, &td, &tg, &tu, &tdg, &tdu);
        assert_close("swiglu GPU dgate vs finite differences", &gpu.read_f32(&tdg).await.unwrap(), &fd_g, 1e-5, 1e-5);
        assert_close("swiglu GPU dup vs finite differences", &gpu.read_f32(&tdu).await.unwrap(), &fd_u, 1e-5, 1e-5);
    });
}
