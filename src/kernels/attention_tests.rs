//! Tests of attention.rs: every work split against the f64 reference, masks and padding,
//! finite differences of the reference backward, and a benchmark (ignored).

use super::*;
use crate::gpu_test;
use crate::kernels::testutil::{assert_close, rel_err, Rng};

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

fn shape(batch: usize, seq: usize, heads: usize, kv_heads: usize, head_dim: usize) -> AttnShape {
    AttnShape { batch, seq, heads, kv_heads, head_dim }
}

/// Row 0 loses its first `left` positions to padding, every other row its last `right`.
fn padding(s: &AttnShape, left: usize, right: usize) -> Vec<u32> {
    let t = s.seq;
    (0..s.batch * t)
        .map(|x| {
            let (b, j) = (x / t, x % t);
            let pad = if b == 0 { j < left } else { j + right >= t };
            (!pad) as u32
        })
        .collect()
}

/// Inputs of one case, on the host and on the GPU.
struct Case {
    s: AttnShape,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    g: Vec<f32>,
    mask: Option<Vec<u32>>,
    t: [Tensor; 4],
    tmask: Option<Tensor>,
}

fn case(gpu: &Gpu, s: AttnShape, mask: Option<Vec<u32>>, seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let (ql, kl) = (s.q_len(), s.kv_len());
    // Amplitude 2 makes the softmax far from uniform.
    let (q, k, v, g) = (rng.vec(ql, 2.0), rng.vec(kl, 2.0), rng.vec(kl, 1.0), rng.vec(ql, 1.0));
    let up = |x: &[f32], cols: usize| gpu.upload_f32(x, &[s.batch * s.seq, cols], Category::Activations).unwrap();
    let t = [
        up(&q, s.heads * s.head_dim),
        up(&k, s.kv_heads * s.head_dim),
        up(&v, s.kv_heads * s.head_dim),
        up(&g, s.heads * s.head_dim),
    ];
    let tmask = mask.as_ref().map(|m| gpu.upload_u32(m, &[s.batch * s.seq], Category::Activations).unwrap());
    Case { s, q, k, v, g, mask, t, tmask }
}

fn assert_finite(what: &str, x: &[f32]) {
    if let Some(i) = x.iter().position(|v| !v.is_finite()) {
        panic!("{what}: non-finite value {} at {i}", x[i]);
    }
}

/// Query rows (b, i) that see no key must give exact zeros in `x` (row stride `cols`).
fn assert_blind_rows_zero(what: &str, c: &Case, x: &[f32], cols: usize) {
    let Some(m) = &c.mask else { return };
    let t = c.s.seq;
    for b in 0..c.s.batch {
        for i in 0..t {
            if (0..=i).all(|j| m[b * t + j] == 0) {
                let row = &x[(b * t + i) * cols..][..cols];
                assert!(row.iter().all(|&v| v == 0.0), "{what}: row {i} of batch {b} sees no key but is {row:?}");
            }
        }
    }
}

/// Forward and backward of one case, split as `t` says, against the f64 reference.
async fn check(gpu: &Gpu, c: &Case, t: Tuning) {
    let s = &c.s;
    let name = format!("{s:?} mask {} {t:?}", c.mask.is_some());
    let [q, k, v, g] = &c.t;
    let o = gpu.zeros(&q.shape, DType::F32, Category::Activations).unwrap();
    let lse = gpu.zeros(&[s.rows()], DType::F32, Category::Activations).unwrap();
    // Poison the outputs: backward must overwrite, not accumulate.
    let (dq, dk, dv) = (
        gpu.upload_f32(&vec![7.0; s.q_len()], &q.shape, Category::Grads).unwrap(),
        gpu.upload_f32(&vec![7.0; s.kv_len()], &k.shape, Category::Grads).unwrap(),
        gpu.upload_f32(&vec![7.0; s.kv_len()], &v.shape, Category::Grads).unwrap(),
    );
    let m = c.tmask.as_ref();
    if t == TUNING {
        attention_forward(gpu, s, q, k, v, m, &o, &lse);
        attention_backward(gpu, s, q, k, v, &o, g, &lse, m, &dq, &dk, &dv).unwrap();
    } else {
        forward_with(gpu, s, q, k, v, m, &o, &lse, t);
        backward_with(gpu, s, [q, k, v, &o, g, &lse], m, [&dq, &dk, &dv], t).unwrap();
    }

    let mh = c.mask.as_deref();
    let (want_o, want_lse) = reference::forward(s, &f64s(&c.q), &f64s(&c.k), &f64s(&c.v), mh);
    let (want_dq, want_dk, want_dv) = reference::backward(s, &f64s(&c.q), &f64s(&c.k), &f64s(&c.v), mh, &f64s(&c.g));
    let qc = s.heads * s.head_dim;
    for (what, t, want) in [
        ("o", &o, &want_o),
        ("lse", &lse, &want_lse),
        ("dq", &dq, &want_dq),
        ("dk", &dk, &want_dk),
        ("dv", &dv, &want_dv),
    ] {
        let got = gpu.read_f32(t).await.unwrap();
        let what = format!("{what} {name}");
        assert_finite(&what, &got);
        assert_close(&what, &got, want, 1e-5, 1e-4);
        assert!(rel_err(&got, want) < 1e-5, "{what}: rel err {:.3e}", rel_err(&got, want));
        if t.shape == q.shape {
            assert_blind_rows_zero(&what, c, &got, qc);
        }
    }
}

gpu_test!(async fn attention_gqa_left_and_right_padding(gpu) {
    // D = 10: scalar path; row 0 has 3 fully masked query rows.
    let s = shape(2, 13, 6, 2, 10);
    check(gpu, &case(gpu, s, Some(padding(&s, 3, 2)), 1), TUNING).await;
    // D = 8: vec4 path.
    let s = shape(2, 13, 6, 2, 8);
    check(gpu, &case(gpu, s, Some(padding(&s, 3, 2)), 2), TUNING).await;
});

gpu_test!(async fn attention_multi_head_equal_kv_heads(gpu) {
    let s = shape(2, 13, 3, 3, 8);
    check(gpu, &case(gpu, s, Some(padding(&s, 3, 2)), 3), TUNING).await;
    let s = shape(1, 29, 4, 4, 6);
    check(gpu, &case(gpu, s, None, 4), TUNING).await;
});

gpu_test!(async fn attention_no_mask_and_tiny(gpu) {
    let s = shape(1, 37, 9, 3, 12);
    check(gpu, &case(gpu, s, None, 5), TUNING).await;
    let s = shape(1, 1, 1, 1, 4);
    check(gpu, &case(gpu, s, None, 6), TUNING).await;
    // One real token at the very end of a left-padded row, and a row that is all padding.
    let s = shape(2, 5, 2, 1, 3);
    check(gpu, &case(gpu, s, Some(vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 0]), 7), TUNING).await;
});

gpu_test!(async fn attention_work_split_variants(gpu) {
    // Other rows per invocation and workgroup sizes: block tails (T % rows != 0) and
    // workgroups that straddle heads.
    let s = shape(2, 13, 6, 2, 8);
    let c = case(gpu, s, Some(padding(&s, 3, 2)), 8);
    for (fwd, dq, dkdv, wg) in [(1, 1, 1, 8), (3, 3, 3, 16), (4, 4, 4, 64), (5, 2, 16, 32)] {
        check(gpu, &c, Tuning { fwd, dq, dkdv, wg, tile: 0 }).await;
    }
    // Every tuning the autotune may choose.
    for t in VARIANTS {
        check(gpu, &c, t).await;
    }
    let s = shape(1, 11, 2, 1, 5);
    let c = case(gpu, s, Some(padding(&s, 0, 4)), 9);
    for (fwd, dq, dkdv, wg) in [(1, 1, 1, 8), (4, 3, 4, 16)] {
        check(gpu, &c, Tuning { fwd, dq, dkdv, wg, tile: 0 }).await;
    }
});

gpu_test!(async fn attention_tiled_variants(gpu) {
    // Workgroup-memory tiles: tiles smaller than a workgroup's rows and larger, tails of a tile
    // (T % tile != 0), workgroups past the last block, GQA groups, padding, the scalar path
    // (D = 5, 10); every result as the reference tuning's, against the f64 reference.
    let s = shape(2, 13, 6, 2, 8);
    let c = case(gpu, s, Some(padding(&s, 3, 2)), 12);
    for (fwd, dq, dkdv, wg, tile) in [(1, 1, 1, 8, 4), (3, 2, 3, 4, 2), (2, 2, 2, 16, 32), (1, 1, 1, 64, 1), (5, 4, 16, 2, 8)] {
        check(gpu, &c, Tuning { fwd, dq, dkdv, wg, tile }).await;
    }
    let s = shape(1, 11, 2, 1, 5);
    let c = case(gpu, s, Some(padding(&s, 0, 4)), 13);
    check(gpu, &c, Tuning { fwd: 1, dq: 1, dkdv: 1, wg: 4, tile: 4 }).await;
    let s = shape(2, 5, 2, 1, 10);
    let c = case(gpu, s, Some(vec![0, 0, 0, 0, 1, 0, 0, 0, 0, 0]), 14);
    check(gpu, &c, Tuning { fwd: 2, dq: 1, dkdv: 2, wg: 2, tile: 2 }).await;
    // A tile is cut to what the device's workgroup memory holds.
    let t = Tuning { fwd: 1, dq: 1, dkdv: 1, wg: 64, tile: 1 << 20 };
    let rows = tile_rows(gpu, t, 64, 8);
    assert!(rows.is_power_of_two() && rows * (2 * 64 * 4 + 8) <= gpu.info.max_compute_workgroup_storage_size as usize);
    assert_eq!(tile_rows(gpu, VARIANTS[0], 64, 0), 0);
    // A head too large for one row in workgroup memory runs the untiled kernel.
    let huge = gpu.info.max_compute_workgroup_storage_size as usize / 8 + 1;
    assert_eq!(tile_rows(gpu, t, huge, 0), 0);
});

gpu_test!(async fn attention_choose_checks_and_picks_a_tuning(gpu) {
    let s = shape(1, 37, 4, 2, 16);
    let m = choose(gpu, &s, 1).await.expect("chooses");
    assert_eq!(m.len(), candidates(gpu).len());
    assert_eq!(candidates(gpu).iter().any(|t| t.tile > 0), !gpu.info.cpu);
    assert!(m.iter().all(|x| x.agrees && x.family == CHOICE), "{m:?}");
    assert_eq!(m.iter().filter(|x| x.chosen).count(), 1, "{m:?}");
    let chosen = m.iter().find(|x| x.chosen).map(|x| x.variant.clone());
    assert_eq!(Some(tuning_of(gpu).name()), chosen);
    for t in VARIANTS {
        assert_eq!(Tuning::parse(&t.name()), Some(t));
    }
    gpu.set_choice(CHOICE, None);
    assert_eq!(tuning_of(gpu), TUNING);
});

gpu_test!(async fn attention_backward_matches_finite_differences(gpu) {
    // The reference backward against central differences of the reference forward, for
    // the loss L = Σ o ∘ W (a random projection), then the GPU against the same numbers.
    let s = shape(2, 4, 2, 1, 3);
    let c = case(gpu, s, Some(vec![0, 1, 1, 1, 1, 1, 1, 0]), 10);
    let mh = c.mask.as_deref();
    let w = f64s(&c.g);
    let loss = |q: &[f64], k: &[f64], v: &[f64]| -> f64 {
        reference::forward(&s, q, k, v, mh).0.iter().zip(&w).map(|(a, b)| a * b).sum()
    };
    let (q, k, v) = (f64s(&c.q), f64s(&c.k), f64s(&c.v));
    let (dq, dk, dv) = reference::backward(&s, &q, &k, &v, mh, &w);
    let eps = 1e-6;
    let fd = |which: usize| -> Vec<f64> {
        let mut x = [q.clone(), k.clone(), v.clone()];
        (0..x[which].len())
            .map(|n| {
                let x0 = x[which][n];
                x[which][n] = x0 + eps;
                let up = loss(&x[0], &x[1], &x[2]);
                x[which][n] = x0 - eps;
                let down = loss(&x[0], &x[1], &x[2]);
                x[which][n] = x0;
                (up - down) / (2.0 * eps)
            })
            .collect()
    };
    for (what, got, n) in [("dq", &dq, 0), ("dk", &dk, 1), ("dv", &dv, 2)] {
        let want = fd(n);
        let got: Vec<f32> = got.iter().map(|&x| x as f32).collect();
        assert_close(&format!("reference {what} vs finite differences"), &got, &want, 1e-6, 1e-5);
    }
    check(gpu, &c, TUNING).await;
});

gpu_test!(async fn attention_unroll_expands_nested_loops(gpu) {
    let _ = gpu;
    let src = "x; for (var r = 0u; r < 2u; r++) { // unroll\n a[r] = b.r; for (var n = 0u; n < 2u; n++) { // unroll\n c[r * 2u + n] = 1; } } y;";
    let out: String = unroll(src).split_whitespace().collect();
    assert_eq!(
        out,
        "x;{a[0u]=b.r;{c[0u*2u+0u]=1;}{c[0u*2u+1u]=1;}}{a[1u]=b.r;{c[1u*2u+0u]=1;}{c[1u*2u+1u]=1;}}y;"
    );
});

gpu_test!(async fn attention_templates_make_an_untiled_and_a_tiled_kernel(gpu) {
    let _ = gpu;
    let src = "a\n//#untiled\nu\n//#tiled\nt\n//#end\nb\n  //#tiled\nt2\n  //#end\nc\n";
    assert_eq!(sections(src, &["untiled"]), "a\nu\nb\nc\n");
    assert_eq!(sections(src, &["tiled"]), "a\nt\nb\nt2\nc\n");
    // The untiled kernels read storage only and never wait on a barrier; the tiled ones read
    // their streamed rows from workgroup memory. No marker or placeholder is left in either.
    for src in [FWD, BWD_DQ, BWD_DKDV] {
        for tiled in [false, true] {
            let s = kernel_of(src, tiled);
            assert!(!s.contains("//#"), "a section marker is left:\n{s}");
            assert_eq!(s.contains("workgroupBarrier") || s.contains("var<workgroup>"), tiled, "{s}");
            assert!(["{{KS}}[kb", "{{QS}}[qb"].iter().any(|x| s.contains(x)), "{s}");
            assert!(!s.contains("{{ROWS}}") && !s.contains("{{KEYS}}"), "{s}");
        }
    }
});

/// CPU time of all this process's threads, in ms (Linux; 0 elsewhere).
#[cfg(not(target_arch = "wasm32"))]
fn cpu_ms() -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
    let ns: u64 = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
        .filter_map(|t| t.split_whitespace().next().and_then(|x| x.parse::<u64>().ok()))
        .sum();
    ns as f64 / 1e6
}

/// Times forward and backward at Qwen2.5-0.5B's and SmolLM2-135M's attention shapes, T = 256
/// (and T = 1024 with ATTN_BENCH_LONG=1). ATTN_BENCH="8/8/8/16,4/4/4/32" times those splits
/// (rows per invocation forward/dq/dkdv, workgroup size) instead of the default.
/// `XDG_RUNTIME_DIR=/tmp cargo test --lib kernels::attention::tests::attention_bench -- --ignored --nocapture`
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore]
fn attention_bench() {
    use crate::platform::{block_on, now_ms};
    block_on(async {
        let gpu = &crate::kernels::testutil::test_gpu().await;
        println!("adapter: {}", gpu.info.adapter);
        let long = std::env::var("ATTN_BENCH_LONG").is_ok();
        let tunings: Vec<Tuning> = std::env::var("ATTN_BENCH")
            .map(|v| {
                v.split(',')
                    .map(|x| x.split('/').filter_map(|r| r.trim().parse().ok()).collect::<Vec<usize>>())
                    .filter(|r| (r.len() == 4 || r.len() == 5) && !r[..4].contains(&0))
                    .map(|r| Tuning { fwd: r[0], dq: r[1], dkdv: r[2], wg: r[3], tile: r.get(4).copied().unwrap_or(0) })
                    .collect()
            })
            .unwrap_or_else(|_| vec![TUNING]);
        // Pipeline creation (shader compilation) of the four kernels, per head size.
        for d in [64, 128] {
            let t0 = now_ms();
            for (name, src, rows) in [
                ("fwd", FWD, TUNING.fwd),
                ("bwd_delta", BWD_DELTA, 1),
                ("bwd_dq", BWD_DQ, TUNING.dq),
                ("bwd_dkdv", BWD_DKDV, TUNING.dkdv),
            ] {
                pipeline(gpu, name, src, d, rows, TUNING.wg, 0);
            }
            gpu.sync().await.unwrap();
            println!("D={d}: creating the 4 pipelines took {:.0} ms", now_ms() - t0);
        }
        let shapes = [shape(1, 256, 14, 2, 64), shape(1, 256, 9, 3, 64), shape(1, 1024, 14, 2, 64)];
        for s in shapes.into_iter().take(if long { 3 } else { 2 }) {
            let c = case(gpu, s, None, 11);
            let [q, k, v, g] = &c.t;
            let o = gpu.zeros(&q.shape, DType::F32, Category::Activations).unwrap();
            let lse = gpu.zeros(&[s.rows()], DType::F32, Category::Activations).unwrap();
            let dq = gpu.zeros(&q.shape, DType::F32, Category::Grads).unwrap();
            let dk = gpu.zeros(&k.shape, DType::F32, Category::Grads).unwrap();
            let dv = gpu.zeros(&v.shape, DType::F32, Category::Grads).unwrap();
            // Multiply-adds per visible (query, key) pair and head dimension: 2 forward,
            // 3 for dq and 4 for dk/dv (both recompute the scores).
            let pairs = (s.batch * s.heads * s.seq * (s.seq + 1) / 2 * s.head_dim) as f64;
            for t in &tunings {
                let t = *t;
                let reps = if s.seq > 512 { 3 } else { 8 };
                // Best wall and CPU time (all of lavapipe's threads; less disturbed by other
                // work on a shared machine) of: forward, delta + dq, dk/dv.
                let mut wall = [f64::MAX; 3];
                let mut cpu = [f64::MAX; 3];
                for _ in 0..reps {
                    let mut stamps = vec![];
                    gpu.sync().await.unwrap();
                    stamps.push((now_ms(), cpu_ms()));
                    forward_with(gpu, &s, q, k, v, None, &o, &lse, t);
                    gpu.sync().await.unwrap();
                    stamps.push((now_ms(), cpu_ms()));
                    let stats = backward_stats(gpu, &s, &o, g, &lse, t).unwrap();
                    backward_dq(gpu, &s, [q, k, v, g, &stats], None, &dq, t);
                    gpu.sync().await.unwrap();
                    stamps.push((now_ms(), cpu_ms()));
                    backward_dkdv(gpu, &s, [q, k, v, g, &stats], None, &dk, &dv, t);
                    gpu.sync().await.unwrap();
                    stamps.push((now_ms(), cpu_ms()));
                    for i in 0..3 {
                        wall[i] = wall[i].min(stamps[i + 1].0 - stamps[i].0);
                        cpu[i] = cpu[i].min(stamps[i + 1].1 - stamps[i].1);
                    }
                }
                let gflops = |fma: f64, ms: f64| 2.0 * fma * pairs / ms / 1e6;
                println!(
                    "T={} Hq={} Hkv={} D={} {t:?}: forward {:.1} ms ({:.1} GFLOP/s, cpu {:.1} ms), \
                     backward {:.1} ms = dq {:.1} ({:.1} GFLOP/s, cpu {:.1}) + dkdv {:.1} ({:.1} GFLOP/s, cpu {:.1})",
                    s.seq,
                    s.heads,
                    s.kv_heads,
                    s.head_dim,
                    wall[0],
                    gflops(2.0, wall[0]),
                    cpu[0],
                    wall[1] + wall[2],
                    wall[1],
                    gflops(3.0, wall[1]),
                    cpu[1],
                    wall[2],
                    gflops(4.0, wall[2]),
                    cpu[2]
                );
            }
        }
    });
}
