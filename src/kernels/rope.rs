//! Rotary position embedding, HF rotate-half convention, in place on (rows, heads·D) tensors.
//! The position of row r is r % seq (positions restart at 0 in every batch row).
//!
//! - [`rope_table`]: cos/sin tables (seq, D/2) built on the host exactly as transformers builds
//!   them in f32 (see [`rope_table_values`]).
//! - [`rope_forward`]: rotation by +angle; [`rope_backward`]: by −angle (the transpose), which
//!   turns dy into dx. Nothing is saved: the table is all backward needs.
//! - [`rope_forward_at`]: generation (batch 1, KV cache): row r is at position pos0 + r.
//! - [`rope_qk_forward`], [`rope_qk_backward`]: q and k (dq and dk) in one dispatch.
//! - [`rope_into_cache`]: generation's new q, k and v rows in one dispatch: q rotated in place,
//!   k rotated into the key cache, v copied into the value cache.
//!
//! One invocation handles 4 pairs of one (row, head), as vec4 when D/2 % 4 == 0.

use crate::gpu::{Category, DType, Gpu, GpuError, Tensor};
use crate::kernels::{render, sections};

const SRC: &str = include_str!("rope.wgsl");
const CACHE_SRC: &str = include_str!("rope_cache.wgsl");

/// cos/sin of the rotary angles, each (seq, D/2) f32.
pub struct RopeTable {
    pub cos: Tensor,
    pub sin: Tensor,
    pub seq: usize,
    pub head_dim: usize,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    total: u32,
    heads: u32,
    half: u32,
    seq: u32,
    groups: u32,
    sign: f32,
    pos0: u32,
    total2: u32,
    heads2: u32,
    _p: [u32; 3],
}

/// Host values of the table, `(cos, sin)`, each (seq, D/2) row-major, computed like
/// transformers' default RoPE in f32: `inv_freq[i] = 1 / theta^((2i as f32) / (D as f32))` with
/// the power and the division each rounded to f32 (this matches torch bit for bit, where the
/// f64 value rounded once would differ in the last bit for about a third of the entries),
/// `angle = (t as f32) · inv_freq[i]` in f32, then cos/sin of that f32 angle rounded to f32
/// (correctly rounded; torch's own f32 cos/sin differ from it by at most 1 ulp).
pub fn rope_table_values(seq: usize, head_dim: usize, theta: f64) -> (Vec<f32>, Vec<f32>) {
    let half = head_dim / 2;
    let inv_freq = inv_freq(head_dim, theta);
    let mut cos = Vec::with_capacity(seq * half);
    let mut sin = Vec::with_capacity(seq * half);
    for t in 0..seq {
        for &f in &inv_freq {
            let angle = ((t as f32) * f) as f64;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    (cos, sin)
}

/// transformers' `inv_freq` (D/2) in f32: `1 / theta^((2i as f32) / (D as f32))`, with the
/// power and the division each rounded to f32 as torch does them.
fn inv_freq(head_dim: usize, theta: f64) -> Vec<f32> {
    let theta32 = theta as f32 as f64;
    (0..head_dim / 2)
        .map(|i| {
            let e = (2 * i) as f32 / head_dim as f32;
            1.0f32 / (theta32.powf(e as f64) as f32)
        })
        .collect()
}

/// Upload the cos/sin tables (seq, D/2) for positions 0..seq.
pub fn rope_table(gpu: &Gpu, seq: usize, head_dim: usize, theta: f64) -> Result<RopeTable, GpuError> {
    assert!(
        head_dim > 0 && head_dim % 2 == 0 && seq > 0,
        "rope_table: seq {seq}, head_dim {head_dim} (want seq > 0 and an even head_dim > 0)"
    );
    let (cos, sin) = rope_table_values(seq, head_dim, theta);
    let shape = [seq, head_dim / 2];
    Ok(RopeTable {
        cos: gpu.upload_f32(&cos, &shape, Category::Activations)?,
        sin: gpu.upload_f32(&sin, &shape, Category::Activations)?,
        seq,
        head_dim,
    })
}

/// Rotate each (x, heads) of `xs` (one, or two of the same rows: q and k) in one dispatch.
fn rope(gpu: &Gpu, op: &str, xs: &[(&Tensor, usize)], table: &RopeTable, sign: f32, pos0: usize) {
    let (rows, d) = (xs[0].0.rows(), table.head_dim);
    for &(x, heads) in xs {
        assert!(
            x.dtype == DType::F32
                && x.rows() == rows
                && x.cols() == heads * d
                && (rows + pos0 <= table.seq || (pos0 == 0 && rows % table.seq == 0))
                && table.cos.numel() == table.seq * (d / 2)
                && table.sin.numel() == table.seq * (d / 2),
            "{op}: x {:?} {:?}, heads {heads}, table seq {} head_dim {} (want f32 x ({rows} rows, heads·D) with \
             rows ≤ seq or a multiple of seq; pos0 {pos0} + rows ≤ seq with an offset)",
            x.shape,
            x.dtype,
            table.seq,
            table.head_dim
        );
    }
    assert!(matches!(xs.len(), 1 | 2), "{op}: {} tensors (one or two)", xs.len());
    let half = d / 2;
    let groups = half.div_ceil(4);
    let total = |heads: usize| rows * heads * groups;
    let pair = xs.len() == 2;
    let (total1, total2) = (total(xs[0].1), if pair { total(xs[1].1) } else { 0 });
    if total1 + total2 == 0 {
        return;
    }
    let (ty, w) = if half % 4 == 0 { ("vec4<f32>", 4) } else { ("f32", 1) };
    let key = format!("rope/{ty}{}", if pair { "/pair" } else { "" });
    let pipeline = gpu.pipeline(&key, || {
        sections(&render(SRC, &[("T", ty.into()), ("W", w.to_string())]), if pair { &["pair"] } else { &[] })
    });
    let p = Params {
        total: total1 as u32,
        heads: xs[0].1 as u32,
        half: half as u32,
        seq: table.seq as u32,
        groups: groups as u32,
        sign,
        pos0: pos0 as u32,
        total2: total2 as u32,
        heads2: if pair { xs[1].1 as u32 } else { 0 },
        _p: [0; 3],
    };
    let mut bindings = vec![xs[0].0, &table.cos, &table.sin];
    if pair {
        bindings.push(xs[1].0);
    }
    gpu.dispatch(
        &pipeline,
        bytemuck::bytes_of(&p),
        &bindings,
        crate::gpu::groups((total1 + total2).div_ceil(64) as u32),
    );
}

/// In place: x (rows, heads·D) rotated by +angle at position row % seq.
pub fn rope_forward(gpu: &Gpu, x: &Tensor, heads: usize, table: &RopeTable) {
    rope(gpu, "rope_forward", &[(x, heads)], table, 1.0, 0);
}

/// In place, in one dispatch: q (rows, heads·D) and k (rows, kv_heads·D) rotated by +angle, as
/// [`rope_forward`] rotates each.
pub fn rope_qk_forward(gpu: &Gpu, q: &Tensor, k: &Tensor, heads: usize, kv_heads: usize, table: &RopeTable) {
    rope(gpu, "rope_qk_forward", &[(q, heads), (k, kv_heads)], table, 1.0, 0);
}

/// In place: x (n, heads·D) of one sequence, row r rotated by +angle at position pos0 + r
/// (pos0 + n ≤ table.seq). Generation uses it for the n new tokens after pos0 cached ones.
pub fn rope_forward_at(gpu: &Gpu, x: &Tensor, heads: usize, table: &RopeTable, pos0: usize) {
    rope(gpu, "rope_forward_at", &[(x, heads)], table, 1.0, pos0);
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct CacheParams {
    total: u32,
    hq: u32,
    hkv: u32,
    half: u32,
    groups: u32,
    pos0: u32,
    _p: [u32; 2],
}

/// The decoder's n new rows at positions pos0.. in one dispatch: q (n, Hq·D) rotated in place
/// (as [`rope_forward_at`]), k (n, Hkv·D) rotated into rows pos0.. of `cache_k` and v copied
/// into the same rows of `cache_v` (both (max_seq, Hkv·D)); k and v are left as they were.
#[allow(clippy::too_many_arguments)]
pub fn rope_into_cache(
    gpu: &Gpu,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    heads: usize,
    kv_heads: usize,
    table: &RopeTable,
    pos0: usize,
    cache_k: &Tensor,
    cache_v: &Tensor,
) {
    let (n, d) = (q.rows(), table.head_dim);
    let kvd = kv_heads * d;
    assert!(
        [q, k, v, cache_k, cache_v].iter().all(|t| t.dtype == DType::F32)
            && q.cols() == heads * d
            && k.rows() == n
            && k.cols() == kvd
            && v.shape == k.shape
            && cache_k.cols() == kvd
            && cache_v.shape == cache_k.shape
            && pos0 + n <= cache_k.rows().min(table.seq),
        "rope_into_cache: q {:?}, k {:?}, v {:?}, caches {:?} {:?}, heads {heads}/{kv_heads}, D {d}, pos0 {pos0}, \
         table seq {} (want f32, q (n, heads·D), k and v (n, kv_heads·D), pos0 + n within the caches and the table)",
        q.shape,
        k.shape,
        v.shape,
        cache_k.shape,
        cache_v.shape,
        table.seq
    );
    let half = d / 2;
    let groups = half.div_ceil(4);
    let total = n * (heads + kv_heads) * groups;
    if total == 0 {
        return;
    }
    let (ty, w) = if half % 4 == 0 { ("vec4<f32>", 4) } else { ("f32", 1) };
    let pipeline =
        gpu.pipeline(&format!("rope_cache/{ty}"), || render(CACHE_SRC, &[("T", ty.into()), ("W", w.to_string())]));
    let p = CacheParams {
        total: total as u32,
        hq: heads as u32,
        hkv: kv_heads as u32,
        half: half as u32,
        groups: groups as u32,
        pos0: pos0 as u32,
        _p: [0; 2],
    };
    let bindings = [q, k, v, cache_k, cache_v, &table.cos, &table.sin];
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &bindings, crate::gpu::groups(total.div_ceil(64) as u32));
}

/// In place: dy (rows, heads·D) becomes dx, the rotation by −angle (the transpose of forward's).
pub fn rope_backward(gpu: &Gpu, dx: &Tensor, heads: usize, table: &RopeTable) {
    rope(gpu, "rope_backward", &[(dx, heads)], table, -1.0, 0);
}

/// In place, in one dispatch: dq and dk become their dx, as [`rope_backward`] turns each.
pub fn rope_qk_backward(gpu: &Gpu, dq: &Tensor, dk: &Tensor, heads: usize, kv_heads: usize, table: &RopeTable) {
    rope(gpu, "rope_qk_backward", &[(dq, heads), (dk, kv_heads)], table, -1.0, 0);
}

/// f64 reference.
pub mod reference {
    /// x (rows, heads·D) rotated by sign·angle, with cos/sin (seq, D/2) given.
    #[allow(clippy::too_many_arguments)]
    pub fn rotate(
        x: &[f64],
        rows: usize,
        heads: usize,
        d: usize,
        seq: usize,
        cos: &[f64],
        sin: &[f64],
        sign: f64,
    ) -> Vec<f64> {
        let half = d / 2;
        let mut y = x.to_vec();
        for r in 0..rows {
            let t = r % seq;
            for h in 0..heads {
                let o = (r * heads + h) * d;
                for j in 0..half {
                    let (c, s) = (cos[t * half + j], sign * sin[t * half + j]);
                    let (a, b) = (x[o + j], x[o + half + j]);
                    y[o + j] = a * c - b * s;
                    y[o + half + j] = b * c + a * s;
                }
            }
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, Rng};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// transformers' inv_freq for theta 1e6, D = 64 (Qwen2.5), as f32 bits, taken from torch 2.15.
    const QWEN_INV_FREQ: [u32; 32] = [
        0x3f800000, 0x3f263de0, 0x3ed7e89b, 0x3e8c3504, 0x3e361887, 0x3dec7fd6, 0x3d99940d, 0x3d47763f, 0x3d0186e3,
        0x3ca8398b, 0x3c5a7bf2, 0x3c0de12d, 0x3bb8449c, 0x3b6f520e, 0x3b1b690d, 0x3ac9d75c, 0x3a83126f, 0x3a2a3b44,
        0x39dd1725, 0x398f9272, 0x393a7753, 0x38f22ce2, 0x389d43a4, 0x384c3fbe, 0x3804a2b2, 0x37ac431d, 0x375fba4f,
        0x371148e3, 0x36bcb0c1, 0x36751070, 0x361f23e4, 0x35ceaf79,
    ];

    gpu_test!(async fn rope_table_matches_transformers_and_f64(_gpu) {
        let got: Vec<u32> = inv_freq(64, 1e6).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, QWEN_INV_FREQ, "inv_freq for theta 1e6, D 64 differs from transformers'");
        // Row t = 1 holds cos/sin of inv_freq itself.
        let (cos, sin) = rope_table_values(2, 64, 1e6);
        for (i, bits) in QWEN_INV_FREQ.iter().enumerate() {
            let f = f32::from_bits(*bits) as f64;
            assert_eq!((cos[32 + i], sin[32 + i]), (f.cos() as f32, f.sin() as f32), "cos/sin of inv_freq[{i}]");
        }
        // Against exact f64 angles (the f32 rounding of angles grows with t).
        let (seq, d, theta) = (50, 10, 10_000.0f64);
        let (cos, sin) = rope_table_values(seq, d, theta);
        let mut want_c = vec![];
        let mut want_s = vec![];
        for t in 0..seq {
            for i in 0..d / 2 {
                let a = t as f64 / theta.powf(2.0 * i as f64 / d as f64);
                want_c.push(a.cos());
                want_s.push(a.sin());
            }
        }
        assert_close("rope cos", &cos, &want_c, 1e-5, 0.0);
        assert_close("rope sin", &sin, &want_s, 1e-5, 0.0);
    });

    /// (seq, rows, heads, D): awkward scalar, vec4, rows < seq, and tiny.
    const CASES: [(usize, usize, usize, usize); 4] = [(13, 39, 3, 10), (7, 14, 2, 16), (16, 5, 3, 8), (2, 2, 1, 4)];

    gpu_test!(async fn rope_forward_backward_shapes(gpu) {
        for (seq, rows, heads, d) in CASES {
            let mut rng = Rng::new((seq * 1000 + rows * 10 + d) as u64);
            let x = rng.vec(rows * heads * d, 1.0);
            let table = rope_table(gpu, seq, d, 10_000.0).unwrap();
            let (cos, sin) = rope_table_values(seq, d, 10_000.0);
            let (cos, sin) = (f64s(&cos), f64s(&sin));
            let tx = gpu.upload_f32(&x, &[rows, heads * d], Category::Activations).unwrap();
            let what = format!("seq {seq} rows {rows} heads {heads} D {d}");

            rope_forward(gpu, &tx, heads, &table);
            let fwd = gpu.read_f32(&tx).await.unwrap();
            let want = reference::rotate(&f64s(&x), rows, heads, d, seq, &cos, &sin, 1.0);
            assert_close(&format!("rope_forward {what}"), &fwd, &want, 1e-6, 1e-5);

            // Backward of a fresh gradient against the reference, then the round trip.
            let dy = rng.vec(rows * heads * d, 1.0);
            let tdy = gpu.upload_f32(&dy, &[rows, heads * d], Category::Grads).unwrap();
            rope_backward(gpu, &tdy, heads, &table);
            let want = reference::rotate(&f64s(&dy), rows, heads, d, seq, &cos, &sin, -1.0);
            assert_close(&format!("rope_backward {what}"), &gpu.read_f32(&tdy).await.unwrap(), &want, 1e-6, 1e-5);

            rope_backward(gpu, &tx, heads, &table);
            assert_close(&format!("rope round trip {what}"), &gpu.read_f32(&tx).await.unwrap(), &f64s(&x), 1e-6, 1e-5);
        }
    });

    // q and k (dq and dk) in one dispatch: each equals its own rotation bit for bit, at every
    // case's shape with k's heads fewer than q's (GQA) and more.
    gpu_test!(async fn rope_of_q_and_k_in_one_dispatch_equals_each_alone(gpu) {
        for (seq, rows, heads, d) in CASES {
            for kv_heads in [1, heads + 2] {
                let mut rng = Rng::new((seq * 1000 + rows * 10 + d + kv_heads) as u64);
                let table = rope_table(gpu, seq, d, 10_000.0).unwrap();
                let q = rng.vec(rows * heads * d, 1.0);
                let k = rng.vec(rows * kv_heads * d, 1.0);
                let up = |v: &[f32], h: usize| gpu.upload_f32(v, &[rows, h * d], Category::Activations).unwrap();
                let what = format!("seq {seq} rows {rows} heads {heads}/{kv_heads} D {d}");
                for forward in [true, false] {
                    let (tq, tk, oq, ok) = (up(&q, heads), up(&k, kv_heads), up(&q, heads), up(&k, kv_heads));
                    gpu.profile_start();
                    if forward {
                        rope_qk_forward(gpu, &tq, &tk, heads, kv_heads, &table);
                    } else {
                        rope_qk_backward(gpu, &tq, &tk, heads, kv_heads, &table);
                    }
                    let calls = gpu.profile_take().await.unwrap().map_or(0, |p| p.calls());
                    assert_eq!(calls, 1, "{what}: {calls} dispatches");
                    if forward {
                        rope_forward(gpu, &oq, heads, &table);
                        rope_forward(gpu, &ok, kv_heads, &table);
                    } else {
                        rope_backward(gpu, &oq, heads, &table);
                        rope_backward(gpu, &ok, kv_heads, &table);
                    }
                    for (name, pair, own, x) in [("q", &tq, &oq, &q), ("k", &tk, &ok, &k)] {
                        let (pair, own) = (gpu.read_f32(pair).await.unwrap(), gpu.read_f32(own).await.unwrap());
                        assert_eq!(pair, own, "{what} forward {forward}: {name} in the pair");
                        assert_ne!(&pair, x, "{what}: {name} rotated");
                    }
                }
            }
        }
    });

    gpu_test!(async fn rope_forward_at_offsets(gpu) {
        // (seq, rows, pos0, heads, D): scalar and vec4, a single decode row, the last position.
        for (seq, rows, pos0, heads, d) in [(23, 5, 9, 3, 10), (20, 7, 13, 2, 16), (17, 1, 16, 3, 6), (4, 4, 0, 1, 4)] {
            let mut rng = Rng::new((seq * 100 + pos0 * 10 + d) as u64);
            let x = rng.vec(rows * heads * d, 1.0);
            let table = rope_table(gpu, seq, d, 10_000.0).unwrap();
            let (cos, sin) = rope_table_values(seq, d, 10_000.0);
            // Row r at position pos0 + r: the reference over the table rows from pos0 on.
            let half = d / 2;
            let (cos, sin) = (f64s(&cos[pos0 * half..]), f64s(&sin[pos0 * half..]));
            let tx = gpu.upload_f32(&x, &[rows, heads * d], Category::Activations).unwrap();
            rope_forward_at(gpu, &tx, heads, &table, pos0);
            let want = reference::rotate(&f64s(&x), rows, heads, d, seq - pos0, &cos, &sin, 1.0);
            let what = format!("rope_forward_at seq {seq} rows {rows} pos0 {pos0} heads {heads} D {d}");
            assert_close(&what, &gpu.read_f32(&tx).await.unwrap(), &want, 1e-6, 1e-5);
        }
    });

    gpu_test!(async fn rope_into_cache_equals_rotate_then_copy(gpu) {
        // (max_seq, n, pos0, Hq, Hkv, D): scalar and vec4 halves, one decode row at the last
        // position, a prompt at 0. Bit for bit what rope_forward_at + copy_rows give.
        use crate::kernels::elementwise::copy_rows;
        for (seq, n, pos0, hq, hkv, d) in [(23, 5, 9, 3, 1, 10), (20, 7, 13, 4, 2, 16), (17, 1, 16, 3, 3, 6), (4, 4, 0, 2, 1, 8)] {
            let mut rng = Rng::new((seq * 100 + pos0 * 10 + d) as u64);
            let table = rope_table(gpu, seq, d, 10_000.0).unwrap();
            let (q, k, v) = (rng.vec(n * hq * d, 1.0), rng.vec(n * hkv * d, 1.0), rng.vec(n * hkv * d, 1.0));
            let cache0 = rng.vec(seq * hkv * d, 1.0);
            let up = |x: &[f32], shape: &[usize]| gpu.upload_f32(x, shape, Category::Activations).unwrap();
            let (tq, tk, tv) = (up(&q, &[n, hq * d]), up(&k, &[n, hkv * d]), up(&v, &[n, hkv * d]));
            let (ck, cv) = (up(&cache0, &[seq, hkv * d]), up(&cache0, &[seq, hkv * d]));
            rope_into_cache(gpu, &tq, &tk, &tv, hq, hkv, &table, pos0, &ck, &cv);
            let got = [&tq, &tk, &tv, &ck, &cv];
            // The two-step way: rotate q and k in place, then copy k and v into the caches.
            let (rq, rk, rv) = (up(&q, &[n, hq * d]), up(&k, &[n, hkv * d]), up(&v, &[n, hkv * d]));
            let (rck, rcv) = (up(&cache0, &[seq, hkv * d]), up(&cache0, &[seq, hkv * d]));
            rope_forward_at(gpu, &rq, hq, &table, pos0);
            rope_forward_at(gpu, &rk, hkv, &table, pos0);
            copy_rows(gpu, &rk, 0, &rck, pos0, n);
            copy_rows(gpu, &rv, 0, &rcv, pos0, n);
            let want = [&rq, &up(&k, &[n, hkv * d]), &rv, &rck, &rcv];
            for (i, (g, w)) in got.iter().zip(want).enumerate() {
                let (g, w) = (gpu.read_f32(g).await.unwrap(), gpu.read_f32(w).await.unwrap());
                let same = g.iter().zip(&w).all(|(a, b)| a.to_bits() == b.to_bits());
                assert!(same, "rope_into_cache seq {seq} n {n} pos0 {pos0} heads {hq}/{hkv} D {d}: output {i} differs");
            }
        }
    });
}
