//! Causal grouped-query attention of new query rows against a KV cache (generation, batch 1).
//!
//! - [`attention_cached`]: o (n, Hq·D) for n query rows at positions p0..p0+n, where row i attends
//!   the cache's rows [0, p0 + i] (the new keys and values must already be in the cache). Prefill
//!   is n = prompt length with p0 = 0, a decode step n = 1.
//!
//! Inference only: nothing is saved for a backward. One invocation per (query row, head) loops over
//! its keys with an online softmax (no scores are stored), reading q, k and v as vec4 when
//! D % 4 == 0 and as scalars otherwise. The per-dimension lines of the shader are written out by
//! the launcher for the head size D (in the pipeline cache key), so the query and the accumulator
//! stay in registers.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::render;

const SRC: &str = include_str!("attention_cached.wgsl");

/// Invocations per workgroup: a decode step has only Hq invocations, and small workgroups let
/// lavapipe's threads share a prefill.
const WG: usize = 16;

/// Head layout of q (Hq heads) and of the cache (Hkv heads), each of `head_dim` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeadShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    p0: u32,
    h: u32,
    hkv: u32,
    g: u32,
    scale: f32,
    _p0: u32,
    _p1: u32,
}

fn source(d: usize) -> String {
    let vec = d % 4 == 0;
    let n = if vec { d / 4 } else { d };
    let lines = |f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join("\n");
    render(
        SRC,
        &[
            ("V", if vec { "vec4<f32>" } else { "f32" }.into()),
            ("DOT", if vec { "return dot(a, b);" } else { "return a * b;" }.into()),
            ("N", n.to_string()),
            ("WG", WG.to_string()),
            ("Q_LOAD", lines(&|t| format!("    let q{t} = q[qb + {t}u] * p.scale;"))),
            ("ACC_DECL", lines(&|t| format!("    var a{t} = V(0.0);"))),
            ("SCORE", lines(&|t| format!("        s += dotv(q{t}, k[kb + {t}u]);"))),
            ("ACC_UPDATE", lines(&|t| format!("        a{t} = a{t} * c + e * v[kb + {t}u];"))),
            ("STORE", lines(&|t| format!("    o[qb + {t}u] = a{t} * inv;"))),
        ],
    )
}

/// o (n, Hq·D) = causal GQA attention of q (n, Hq·D) (after RoPE), whose row i is at position
/// p0 + i, against the cache k, v (max_seq, Hkv·D), of which rows [0, p0 + n) are filled; query
/// head h reads kv head h / (Hq/Hkv); scale 1/√D.
pub fn attention_cached(gpu: &Gpu, s: &HeadShape, q: &Tensor, k: &Tensor, v: &Tensor, p0: usize, o: &Tensor) {
    let (qd, kvd) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let n = q.rows();
    let f32s = [q, k, v, o].iter().all(|t| t.dtype == DType::F32);
    assert!(
        s.kv_heads > 0
            && s.head_dim > 0
            && s.heads % s.kv_heads == 0
            && f32s
            && q.cols() == qd
            && o.rows() == n
            && o.cols() == qd
            && k.cols() == kvd
            && v.cols() == kvd
            && k.rows() == v.rows()
            && p0 + n <= k.rows(),
        "attention_cached: {s:?}, p0 {p0}, q {:?} k {:?} v {:?} o {:?} (want f32 q, o (n, Hq·D), k, v \
         (max_seq, Hkv·D) with p0 + n ≤ max_seq, Hq a multiple of Hkv)",
        q.shape,
        k.shape,
        v.shape,
        o.shape
    );
    if n == 0 {
        return;
    }
    let pipeline = gpu.pipeline(&format!("attention_cached/{}/{WG}", s.head_dim), || source(s.head_dim));
    let p = Params {
        n: n as u32,
        p0: p0 as u32,
        h: s.heads as u32,
        hkv: s.kv_heads as u32,
        g: (s.heads / s.kv_heads) as u32,
        scale: 1.0 / (s.head_dim as f32).sqrt(),
        _p0: 0,
        _p1: 0,
    };
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[q, k, v, o], ((n * s.heads).div_ceil(WG) as u32, 1, 1));
}

/// f64 reference.
pub mod reference {
    use super::HeadShape;

    /// o (n, Hq·D) for q (n, Hq·D) at positions p0.., against k, v (≥ p0 + n rows, Hkv·D).
    pub fn forward(s: &HeadShape, q: &[f64], k: &[f64], v: &[f64], n: usize, p0: usize) -> Vec<f64> {
        let (h, hkv, d) = (s.heads, s.kv_heads, s.head_dim);
        let g = h / hkv;
        let scale = 1.0 / (d as f64).sqrt();
        let mut o = vec![0.0; n * h * d];
        for i in 0..n {
            for hh in 0..h {
                let qi = &q[(i * h + hh) * d..][..d];
                let kvh = hh / g;
                let scores: Vec<f64> = (0..=p0 + i)
                    .map(|j| scale * qi.iter().zip(&k[(j * hkv + kvh) * d..][..d]).map(|(a, b)| a * b).sum::<f64>())
                    .collect();
                let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
                let z: f64 = w.iter().sum();
                let out = &mut o[(i * h + hh) * d..][..d];
                for (j, wj) in w.iter().enumerate() {
                    for (t, ot) in out.iter_mut().enumerate() {
                        *ot += wj / z * v[(j * hkv + kvh) * d + t];
                    }
                }
            }
        }
        o
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, rel_err, Rng};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// Random q and a random cache filled to its end (rows past p0 + n must be ignored), checked
    /// against the f64 reference.
    async fn check(gpu: &Gpu, s: HeadShape, n: usize, p0: usize, max_seq: usize, seed: u64) {
        let mut rng = Rng::new(seed);
        let (qd, kvd) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        // Scores of a few units, as in a trained model, so the softmax is not flat.
        let q = rng.vec(n * qd, 2.0);
        let k = rng.vec(max_seq * kvd, 2.0);
        let v = rng.vec(max_seq * kvd, 1.0);
        let tq = gpu.upload_f32(&q, &[n, qd], Category::Activations).unwrap();
        let tk = gpu.upload_f32(&k, &[max_seq, kvd], Category::Activations).unwrap();
        let tv = gpu.upload_f32(&v, &[max_seq, kvd], Category::Activations).unwrap();
        let to = gpu.upload_f32(&vec![f32::NAN; n * qd], &[n, qd], Category::Activations).unwrap();
        attention_cached(gpu, &s, &tq, &tk, &tv, p0, &to);
        let got = gpu.read_f32(&to).await.unwrap();
        let want = reference::forward(&s, &f64s(&q), &f64s(&k), &f64s(&v), n, p0);
        let what = format!("attention_cached {s:?} n {n} p0 {p0} max_seq {max_seq}");
        assert_close(&what, &got, &want, 1e-5, 1e-4);
        assert!(rel_err(&got, &want) < 1e-5, "{what}: rel err {:.3e}", rel_err(&got, &want));
    }

    fn hs(heads: usize, kv_heads: usize, head_dim: usize) -> HeadShape {
        HeadShape { heads, kv_heads, head_dim }
    }

    gpu_test!(async fn attention_cached_scalar_head_dim(gpu) {
        // D = 6 (scalar path, Qwen2-tiny's): prefill, a chunk after p0 > 0, a decode step.
        check(gpu, hs(6, 2, 6), 13, 0, 29, 1).await;
        check(gpu, hs(6, 2, 6), 5, 17, 29, 2).await;
        check(gpu, hs(6, 2, 6), 1, 28, 29, 3).await;
        check(gpu, hs(3, 3, 5), 7, 3, 11, 4).await;
    });

    gpu_test!(async fn attention_cached_vec4_head_dim(gpu) {
        // D = 8 (vec4 path, Llama-tiny's, one kv head for 5 query heads) and D = 12.
        check(gpu, hs(5, 1, 8), 11, 0, 37, 5).await;
        check(gpu, hs(5, 1, 8), 3, 31, 37, 6).await;
        check(gpu, hs(5, 1, 8), 1, 36, 37, 7).await;
        check(gpu, hs(4, 2, 12), 9, 20, 53, 8).await;
        // SmolLM2-135M's heads, decoding at position 299.
        check(gpu, hs(9, 3, 64), 1, 299, 301, 9).await;
    });

    gpu_test!(async fn attention_cached_tiny(gpu) {
        // One head, one key: o = v.
        check(gpu, hs(1, 1, 4), 1, 0, 1, 10).await;
        check(gpu, hs(1, 1, 2), 2, 0, 2, 11).await;
    });
}
