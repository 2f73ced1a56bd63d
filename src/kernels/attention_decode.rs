//! One decode step's attention in one dispatch ([`attention_decode`]): RoPE on q and the new
//! key, the new key and value into the KV cache, causal GQA attention over the cache, and (with
//! LoRA on the output projection) its h = o·Aᵀ, where decoding would otherwise run
//! `rope_into_cache`, `attention_cached` and a product: on a device where each dispatch costs
//! tens of microseconds whatever its work (lavapipe's worker threads are woken and waited for at
//! each), a token's 30 layers spend 30 to 60 dispatches less. Each part computes what its own
//! kernel computes, with the same expressions in the same order.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::attention_cached::HeadShape;
use crate::kernels::render;
use crate::kernels::rope::RopeTable;

const SRC: &str = include_str!("attention_decode.wgsl");

/// Query heads one workgroup takes (an invocation each).
const MAX_HEADS: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    p0: u32,
    h: u32,
    hkv: u32,
    g: u32,
    scale: f32,
    rank: u32,
    /// packed: the new key's and value's first vec4 in the packed buffer
    koff: u32,
    voff: u32,
}

fn source(d: usize, packed: bool, lora: bool) -> String {
    let (n, half) = (d / 4, d / 8);
    let lines = |count: usize, f: &dyn Fn(usize) -> String| (0..count).map(f).collect::<Vec<_>>().join("\n");
    // The new key and value: their own bindings, or q's after it (packed: one (1, (H + 2·HKV)·D)
    // buffer, the three projections' product).
    let (kn, vn) = if packed { ("q[p.koff + nb + ", "q[p.voff + nb + ") } else { ("kn[nb + ", "vn[nb + ") };
    let first = if packed { 2 } else { 4 };
    let qkv = if packed {
        "@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;         // q, k, v: (1, (H + 2·HKV)·D), not rotated".to_string()
    } else {
        "@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;         // q: (1, H·D), not rotated
@group(0) @binding(2) var<storage, read> kn: array<vec4<f32>>;        // k: (1, HKV·D), not rotated
@group(0) @binding(3) var<storage, read> vn: array<vec4<f32>>;        // v: (1, HKV·D)"
            .to_string()
    };
    // rope_cache.wgsl's rotation (a·c − b·s, b·c + a·s) for q (then scaled, as attention_cached
    // loads it) and for the new key.
    let rotate = lines(half, &|t| {
        let u = t + half;
        format!(
            "        let c{t} = cs[tb + {t}u];\n        let s{t} = sn[tb + {t}u];\n\
             \x20       let q{t} = (q[qb + {t}u] * c{t} - q[qb + {u}u] * s{t}) * p.scale;\n\
             \x20       let q{u} = (q[qb + {u}u] * c{t} + q[qb + {t}u] * s{t}) * p.scale;\n\
             \x20       let k{t} = {kn}{t}u] * c{t} - {kn}{u}u] * s{t};\n\
             \x20       let k{u} = {kn}{u}u] * c{t} + {kn}{t}u] * s{t};"
        )
    });
    let (lora_bindings, lora_h) = if lora {
        (
            format!(
                "@group(0) @binding({}) var<storage, read> la: array<vec4<f32>>;        // LoRA A of o: (r, H·D)
@group(0) @binding({}) var<storage, read_write> lh: array<f32>;      // h: (1, r)
",
                first + 5,
                first + 6
            ),
            "    // Every head's o stored and visible, then h = o · Aᵀ, a row of A per invocation.
    storageBarrier();
    let od = p.H * N;
    for (var t = li; t < p.rank; t += 64u) {
        var acc = 0.0;
        for (var i = 0u; i < od; i++) { acc += dot(o[i], la[t * od + i]); }
        lh[t] = acc;
    }",
        )
    } else {
        (String::new(), "")
    };
    render(
        SRC,
        &[
            ("N", n.to_string()),
            ("HALF", half.to_string()),
            ("QKV_BINDINGS", qkv),
            ("B", first.to_string()),
            ("B1", (first + 1).to_string()),
            ("B2", (first + 2).to_string()),
            ("B3", (first + 3).to_string()),
            ("B4", (first + 4).to_string()),
            ("LORA_BINDINGS", lora_bindings),
            ("ROTATE", rotate),
            (
                "CACHE_STORE",
                lines(n, &|t| format!("            k[cb + {t}u] = k{t};\n            v[cb + {t}u] = {vn}{t}u];")),
            ),
            ("ACC_DECL", lines(n, &|t| format!("        var a{t} = vec4<f32>(0.0);"))),
            ("SCORE", lines(n, &|t| format!("            s += dotv(q{t}, k[kb + {t}u]);"))),
            ("ACC_UPDATE", lines(n, &|t| format!("            a{t} = a{t} * c + e * v[kb + {t}u];"))),
            ("SCORE_NEW", lines(n, &|t| format!("            s += dotv(q{t}, k{t});"))),
            ("ACC_UPDATE_NEW", lines(n, &|t| format!("            a{t} = a{t} * c + e * {vn}{t}u];"))),
            ("STORE", lines(n, &|t| format!("        o[qb + {t}u] = a{t} * inv;"))),
            ("LORA", lora_h.into()),
        ],
    )
}

/// The new row's q, k and v (not rotated) as [`attention_decode`] reads them.
#[derive(Clone, Copy)]
pub enum NewQkv<'a> {
    /// q (1, Hq·D), k and v (1, Hkv·D)
    Apart(&'a Tensor, &'a Tensor, &'a Tensor),
    /// q, k, v side by side in one (1, (Hq + 2·Hkv)·D): the three projections as one product
    Packed(&'a Tensor),
}

/// The decode step's attention for q, k, v (1, ·) as the projections stored them (not rotated,
/// apart or packed)
/// at position p0: k and v are rotated and written into the caches (max_seq, Hkv·D) at row p0,
/// o (1, Hq·D) is the attention of the rotated q over cache rows [0, p0], and with `lora_o`
/// (A (r, Hq·D), h (1, r)) h = o·Aᵀ. Equal to `rope_into_cache`, then `attention_cached`, then
/// the product. Returns false, having done nothing, where it does not take these: more than one
/// row, D not a multiple of 8, more than 64 query heads, p0 past the table or the caches, or
/// fewer storage bindings than it needs (8, or 6 packed; 2 more with `lora_o`).
#[allow(clippy::too_many_arguments)]
pub fn attention_decode(
    gpu: &Gpu,
    s: &HeadShape,
    qkv: NewQkv,
    table: &RopeTable,
    p0: usize,
    cache_k: &Tensor,
    cache_v: &Tensor,
    o: &Tensor,
    lora_o: Option<(&Tensor, &Tensor)>,
) -> bool {
    let (d, qd, kvd) = (s.head_dim, s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let (inputs, shapes_ok, packed): (Vec<&Tensor>, bool, bool) = match qkv {
        NewQkv::Apart(q, k, v) => {
            (vec![q, k, v], q.shape == [1, qd] && k.shape == [1, kvd] && v.shape == [1, kvd], false)
        }
        NewQkv::Packed(t) => (vec![t], t.shape == [1, qd + 2 * kvd], true),
    };
    let f32s = inputs.iter().chain([&cache_k, &cache_v, &o]).all(|t| t.dtype == DType::F32);
    let lora_ok = lora_o.is_none_or(|(a, h)| {
        a.dtype == DType::F32 && h.dtype == DType::F32 && a.cols() == qd && a.rows() > 0 && h.numel() == a.rows()
    });
    let storage = inputs.len() + 5 + if lora_o.is_some() { 2 } else { 0 };
    let takes = f32s
        && lora_ok
        && d > 0
        && d % 8 == 0
        && table.head_dim == d
        && s.kv_heads > 0
        && s.heads % s.kv_heads == 0
        && s.heads <= MAX_HEADS
        && shapes_ok
        && o.shape == [1, qd]
        && cache_k.cols() == kvd
        && cache_v.shape == cache_k.shape
        && p0 < cache_k.rows().min(table.seq)
        && storage <= gpu.info.max_storage_buffers_per_shader_stage as usize;
    if !takes {
        return false;
    }
    let lora = lora_o.is_some();
    let pipeline = gpu.pipeline(&format!("attention_decode/{d}/{packed}/{lora}"), || source(d, packed, lora));
    let p = Params {
        p0: p0 as u32,
        h: s.heads as u32,
        hkv: s.kv_heads as u32,
        g: (s.heads / s.kv_heads) as u32,
        scale: 1.0 / (d as f32).sqrt(),
        rank: lora_o.map_or(0, |(a, _)| a.rows() as u32),
        koff: (qd / 4) as u32,
        voff: ((qd + kvd) / 4) as u32,
    };
    let mut bindings = inputs;
    bindings.extend([cache_k, cache_v, &table.cos, &table.sin, o]);
    if let Some((a, h)) = lora_o {
        bindings.extend([a, h]);
    }
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &bindings, (1, 1, 1));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::attention_cached::attention_cached;
    use crate::kernels::matmul::matmul_nt;
    use crate::kernels::rope::{rope_into_cache, rope_table};
    use crate::kernels::testutil::{assert_close, Rng};

    /// attention_decode against rope_into_cache + attention_cached (+ the h product) on the same
    /// inputs: o, h and both caches' new rows equal, and the caches' other rows untouched.
    async fn check(gpu: &Gpu, s: HeadShape, p0: usize, max_seq: usize, rank: usize, packed: bool, seed: u64) {
        let mut rng = Rng::new(seed);
        let (qd, kvd) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
        let table = rope_table(gpu, max_seq, s.head_dim, 10000.0).unwrap();
        let up = |v: &[f32], shape: &[usize]| gpu.upload_f32(v, shape, Category::Activations).unwrap();
        let (q, k, v) = (rng.vec(qd, 2.0), rng.vec(kvd, 2.0), rng.vec(kvd, 1.0));
        let (ck, cv) = (rng.vec(max_seq * kvd, 2.0), rng.vec(max_seq * kvd, 1.0));
        let a = rng.vec(rank.max(1) * qd, 1.0);
        let what = format!("attention_decode {s:?} p0 {p0} rank {rank} packed {packed}");
        // The three dispatches (rope_into_cache rotates q in place).
        let (tq, tk, tv) = (up(&q, &[1, qd]), up(&k, &[1, kvd]), up(&v, &[1, kvd]));
        let (rck, rcv) = (up(&ck, &[max_seq, kvd]), up(&cv, &[max_seq, kvd]));
        let (ro, rh, ta) =
            (up(&vec![0.0; qd], &[1, qd]), up(&vec![0.0; rank.max(1)], &[1, rank.max(1)]), up(&a, &[rank.max(1), qd]));
        rope_into_cache(gpu, &tq, &tk, &tv, s.heads, s.kv_heads, &table, p0, &rck, &rcv);
        attention_cached(gpu, &s, &tq, &rck, &rcv, p0, &ro);
        if rank > 0 {
            matmul_nt(gpu, &ro, &ta, None, &rh, 1.0, 0.0);
        }
        // The one dispatch.
        let (tq, fck, fcv) = (up(&q, &[1, qd]), up(&ck, &[max_seq, kvd]), up(&cv, &[max_seq, kvd]));
        let (fo, fh) = (up(&vec![f32::NAN; qd], &[1, qd]), up(&vec![f32::NAN; rank.max(1)], &[1, rank.max(1)]));
        let packed_qkv = up(&[q.as_slice(), &k, &v].concat(), &[1, qd + 2 * kvd]);
        let new = if packed { NewQkv::Packed(&packed_qkv) } else { NewQkv::Apart(&tq, &tk, &tv) };
        // h is folded in where the device has the storage bindings (else declined, and computed apart).
        let mut lora = (rank > 0).then_some((&ta, &fh));
        let bindings = if packed { 8 } else { 10 };
        if lora.is_some() && (gpu.info.max_storage_buffers_per_shader_stage as usize) < bindings {
            assert!(!attention_decode(gpu, &s, new, &table, p0, &fck, &fcv, &fo, lora), "{what}: taken");
            lora = None;
        }
        assert!(attention_decode(gpu, &s, new, &table, p0, &fck, &fcv, &fo, lora), "{what}: declined");
        if rank > 0 && lora.is_none() {
            matmul_nt(gpu, &fo, &ta, None, &fh, 1.0, 0.0);
        }
        let (want_o, got_o) = (gpu.read_f32(&ro).await.unwrap(), gpu.read_f32(&fo).await.unwrap());
        let f64s = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        assert_close(&format!("{what}: o"), &got_o, &f64s(&want_o), 1e-6, 1e-6);
        for (name, want, got) in [("key cache", &rck, &fck), ("value cache", &rcv, &fcv)] {
            let (want, got) = (gpu.read_f32(want).await.unwrap(), gpu.read_f32(got).await.unwrap());
            assert_eq!(got, want, "{what}: {name}");
        }
        if rank > 0 {
            let (want, got) = (gpu.read_f32(&rh).await.unwrap(), gpu.read_f32(&fh).await.unwrap());
            assert_close(&format!("{what}: h"), &got, &f64s(&want), 1e-5, 1e-5);
        }
    }

    fn hs(heads: usize, kv_heads: usize, head_dim: usize) -> HeadShape {
        HeadShape { heads, kv_heads, head_dim }
    }

    gpu_test!(async fn attention_decode_matches_its_three_dispatches(gpu) {
        for packed in [false, true] {
            check(gpu, hs(5, 1, 8), 0, 7, 0, packed, 1).await; // the first position: no cached key
            check(gpu, hs(5, 1, 8), 6, 7, 3, packed, 2).await; // the last row of the cache
            check(gpu, hs(4, 2, 16), 11, 20, 8, packed, 3).await;
            check(gpu, hs(9, 3, 64), 40, 64, 8, packed, 4).await; // SmolLM2-135M's heads
        }
    });

    gpu_test!(async fn attention_decode_declines_what_it_does_not_take(gpu) {
        let s = hs(2, 1, 6); // D = 6: not whole vec4 half rows
        let table = rope_table(gpu, 4, 6, 10000.0).unwrap();
        let z = |shape: &[usize]| gpu.zeros(shape, DType::F32, Category::Activations).unwrap();
        let (q, k, c, o) = (z(&[1, 12]), z(&[1, 6]), z(&[4, 6]), z(&[1, 12]));
        assert!(!attention_decode(gpu, &s, NewQkv::Apart(&q, &k, &k), &table, 1, &c, &c, &o, None));
        let s = hs(2, 1, 8);
        let table = rope_table(gpu, 4, 8, 10000.0).unwrap();
        let (q, k, c, o) = (z(&[2, 16]), z(&[2, 8]), z(&[4, 8]), z(&[2, 16]));
        assert!(!attention_decode(gpu, &s, NewQkv::Apart(&q, &k, &k), &table, 1, &c, &c, &o, None), "two rows");
    });
}
