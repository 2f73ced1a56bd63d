//! Timing of `nt` and `nn` as a training step runs them: BF16 and Q4 B, with and without the
//! fused LoRA term, at the Qwen2.5-0.5B attention and MLP shapes, in the variant given by
//! `WEBTUNE_VARIANT` (a [`Variant::name`]; default: the first subgroup-shared candidate, else
//! the register-blocked one). Runs of all cases interleaved so that a shared machine's load
//! hits them alike; best of 5 (`WEBTUNE_SHAPES` picks other shapes):
//! `cargo test --release --lib kernels::matmul::bench -- --ignored --nocapture`.

use super::*;
use crate::gpu::Category;
use crate::kernels::testutil::{test_gpu, Rng};
use crate::platform::{block_on, now_ms};
use gemv::Gemv;

/// Wall milliseconds per call of `batch` (which makes `calls` calls), best of 5 rounds after
/// one that compiles and warms up.
async fn best_ms(gpu: &Gpu, calls: usize, mut batch: impl FnMut()) -> f64 {
    let mut best = f64::INFINITY;
    for round in 0..6 {
        gpu.sync().await.unwrap();
        let t0 = now_ms();
        batch();
        gpu.sync().await.unwrap();
        if round > 0 {
            best = best.min((now_ms() - t0) / calls as f64);
        }
    }
    best
}

/// `WEBTUNE_SHAPES="96,896,4864;256,128,896"`: the (M, K, N) products to time instead of the
/// default ones (M, K, N as in the labels: A (M, K), C (M, N)).
fn shapes_from_env() -> Option<Vec<(usize, usize, usize)>> {
    let s = std::env::var("WEBTUNE_SHAPES").ok()?;
    let parse = |t: &str| -> Option<(usize, usize, usize)> {
        let v: Vec<usize> = t.split(',').map(|x| x.trim().parse().ok()).collect::<Option<_>>()?;
        (v.len() == 3).then(|| (v[0], v[1], v[2]))
    };
    Some(s.split(';').map(|t| parse(t).unwrap_or_else(|| panic!("WEBTUNE_SHAPES: {t:?} is not M,K,N"))).collect())
}

struct Case {
    label: String,
    flops: f64,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    left: Tensor,
    right: Tensor,
    nt: bool,
    lora: bool,
}

#[test]
#[ignore]
fn matmul_weight_dtypes_gflops() {
    block_on(async {
        let gpu = &test_gpu().await;
        let v = match std::env::var("WEBTUNE_VARIANT") {
            Ok(s) => Variant::parse(&s).expect("WEBTUNE_VARIANT: a variant name"),
            Err(_) => {
                candidates(gpu).into_iter().find(|v| matches!(v, Variant::Shared { .. })).unwrap_or(Variant::Blocked)
            }
        };
        println!("variant {}", v.name());
        let mut rng = Rng::new(1);
        let r = 8;
        let mut cases = Vec::new();
        let default = vec![(256, 896, 896), (256, 896, 128), (256, 896, 4864), (256, 4864, 896)];
        for (m, k, n) in shapes_from_env().unwrap_or(default) {
            let a = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Activations).unwrap();
            let c = gpu.zeros(&[m, n], DType::F32, Category::Activations).unwrap();
            let w = rng.vec(n * k, 0.05);
            for dtype in [DType::BF16, DType::Q4] {
                for nt in [true, false] {
                    // nt: y (m, n) = x (m, k)·Wᵀ, W (n, k); nn: dx (m, n) = dy (m, k)·W, W (k, n).
                    let shape = if nt { [n, k] } else { [k, n] };
                    let b = gpu.upload_f32_as(&w, &shape, dtype, Category::Weights).unwrap();
                    let left = gpu.upload_f32(&rng.vec(m * r, 1.0), &[m, r], Category::Activations).unwrap();
                    let right = rng.vec(n * r, 0.1); // (n, r) for nt, (r, n) for nn
                    let right_shape = if nt { [n, r] } else { [r, n] };
                    let right = gpu.upload_f32(&right, &right_shape, Category::Activations).unwrap();
                    for lora in [false, true] {
                        let label = format!(
                            "{} {m}x{k}x{n} {:>4}{}",
                            if nt { "nt" } else { "nn" },
                            dtype.name(),
                            if lora { " +lora" } else { "" }
                        );
                        let (a, b, c, left, right) = (a.clone(), b.clone(), c.clone(), left.clone(), right.clone());
                        cases.push(Case { label, flops: 2.0 * (m * k * n) as f64, a, b, c, left, right, nt, lora });
                    }
                }
            }
        }
        let run = |c: &Case| {
            let fused = c.lora.then_some(Fused { left: &c.left, right: &c.right, scale: 2.0 });
            if c.nt {
                matmul_nt_with(gpu, v, &c.a, &c.b, None, &c.c, 1.0, 0.0, fused)
            } else {
                matmul_nn_with(gpu, v, &c.a, &c.b, &c.c, 1.0, 0.0, fused)
            }
        };
        let mut best = vec![f64::INFINITY; cases.len()];
        for round in 0..6 {
            for (i, case) in cases.iter().enumerate() {
                gpu.sync().await.unwrap();
                let t0 = now_ms();
                run(case);
                gpu.sync().await.unwrap();
                if round > 0 {
                    best[i] = best[i].min(now_ms() - t0); // round 0 compiles and warms up
                }
            }
        }
        for (c, ms) in cases.iter().zip(&best) {
            println!("{:32} {ms:8.2} ms  {:6.1} GFLOP/s (best of 5)", c.label, c.flops / ms / 1e6);
        }
    })
}

/// LoRA's thin products as a step runs them, with r = 8: h = x·Aᵀ (`nt`, N = r), g = dy·B
/// (`nn`, N = r) and the weight gradients dB = dyᵀ·h, dA = gᵀ·x (`tn`), at Qwen2.5-0.5B's
/// attention (256 tokens) and MLP-chunk (107 tokens) shapes; the split-K kernels against the
/// register-blocked ones, best of 5 rounds of 10:
/// `cargo test --release --lib kernels::matmul::bench::thin -- --ignored --nocapture`.
#[test]
#[ignore]
fn thin_gflops() {
    block_on(async {
        let gpu = &test_gpu().await;
        let mut rng = Rng::new(2);
        let r = 8;
        // (op, M, K, N) of C (M, N) with contraction K.
        let shapes = [
            ("nt", 256, 896, r),
            ("nt", 107, 4864, r),
            ("nn", 256, 896, r),
            ("nn", 107, 4864, r),
            ("tn", 896, 256, r),
            ("tn", 4864, 107, r),
            ("tn", r, 256, 896),
            ("tn", r, 107, 4864),
        ];
        for (op, m, k, n) in shapes {
            // nt: A (m, k), B (n, k); nn: A (m, k), B (k, n); tn: A (k, m), B (k, n).
            let (ash, bsh) = match op {
                "nt" => ([m, k], [n, k]),
                "nn" => ([m, k], [k, n]),
                _ => ([k, m], [k, n]),
            };
            let a = gpu.upload_f32(&rng.vec(m * k, 1.0), &ash, Category::Activations).unwrap();
            let b = gpu.upload_f32(&rng.vec(k * n, 1.0), &bsh, Category::Activations).unwrap();
            let c = gpu.zeros(&[m, n], DType::F32, Category::Grads).unwrap();
            for split in [false, true] {
                let run = || match (op, split) {
                    ("nt", false) => blocked::nt(gpu, &a, &b, None, &c, 1.0, 0.0, None),
                    ("nt", true) => thin::run(gpu, true, &a, &b, None, &c, 1.0, 0.0),
                    ("nn", false) => blocked::nn(gpu, &a, &b, &c, 1.0, 0.0, None),
                    ("nn", true) => thin::run(gpu, false, &a, &b, None, &c, 1.0, 0.0),
                    (_, false) => blocked::tn(gpu, &a, &b, &c, 1.0, 1.0),
                    (_, true) => thin::run_tn(gpu, &a, &b, &c, 1.0, 1.0),
                };
                let best = best_ms(gpu, 10, || {
                    for _ in 0..10 {
                        run();
                    }
                })
                .await;
                let name = if split { "split-K" } else { "blocked" };
                println!("{op} {m}x{k}x{n} {name:8} {best:8.3} ms  {:6.2} GFLOP/s", flops(m, n, k) as f64 / best / 1e6);
            }
        }
    })
}

/// One-row products as decoding runs them (SmolLM2-135M's shapes, LoRA rank 8 fused or not):
/// every one-row kernel this device has, GB/s of weights read, best of 5 rounds through 20
/// copies of the weight (streamed from memory, as decoding reads them, not from cache):
/// `cargo test --release --lib kernels::matmul::bench::gemv -- --ignored --nocapture`.
#[test]
#[ignore]
fn gemv_gbps() {
    block_on(async {
        let gpu = &test_gpu().await;
        let mut rng = Rng::new(3);
        let r = 8;
        for (n, k) in [(576, 576), (192, 576), (1536, 576), (576, 1536), (8192, 576)] {
            let x = gpu.upload_f32(&rng.vec(k, 1.0), &[1, k], Category::Activations).unwrap();
            let y = gpu.zeros(&[1, n], DType::F32, Category::Activations).unwrap();
            let h = gpu.upload_f32(&rng.vec(r, 1.0), &[1, r], Category::Activations).unwrap();
            let bl = gpu.upload_f32(&rng.vec(n * r, 0.1), &[n, r], Category::Activations).unwrap();
            for dtype in [DType::BF16, DType::Q4] {
                let host = rng.vec(n * k, 0.05);
                let ws: Vec<Tensor> =
                    (0..20).map(|_| gpu.upload_f32_as(&host, &[n, k], dtype, Category::Weights).unwrap()).collect();
                let mut kernels: Vec<Option<Gemv>> = vec![None];
                kernels.extend(choose::gemv_candidates(gpu).into_iter().filter(|g| g.takes(dtype, k)).map(Some));
                for lora in [false, true] {
                    for c in &kernels {
                        let fused = lora.then_some(Fused { left: &h, right: &bl, scale: 2.0 });
                        let best = best_ms(gpu, ws.len(), || {
                            for w in &ws {
                                gemv::run(gpu, *c, &x, w, None, &y, 1.0, 0.0, fused);
                            }
                        })
                        .await;
                        let name = c.map_or_else(|| BLOCKED.to_string(), Gemv::name);
                        println!(
                            "{n:5}x{k:5} {:5} {}{name:20} {best:7.3} ms  {:6.2} GB/s",
                            dtype.name(),
                            if lora { "+lora " } else { "      " },
                            ws[0].bytes() as f64 / best / 1e6
                        );
                    }
                }
            }
        }
    })
}

/// Decoding's MLP up-projections at SmolLM2-135M's and Qwen2.5-0.5B's shapes (bf16, LoRA rank 8
/// fused or not): gate, up and SwiGLU as three dispatches against [`gate_up_swiglu_row`]'s one,
/// with each rows kernel chosen, best of 5 rounds through 20 copies of the weights:
/// `cargo test --release --lib kernels::matmul::bench::swiglu -- --ignored --nocapture`.
#[test]
#[ignore]
fn swiglu_row_ms() {
    use crate::kernels::swiglu::swiglu_forward;
    block_on(async {
        let gpu = &test_gpu().await;
        let mut rng = Rng::new(4);
        let r = 8;
        for (n, k) in [(1536, 576), (4864, 896)] {
            let x = gpu.upload_f32(&rng.vec(k, 1.0), &[1, k], Category::Activations).unwrap();
            let out: Vec<Tensor> =
                (0..3).map(|_| gpu.zeros(&[1, n], DType::F32, Category::Activations).unwrap()).collect();
            let (g, u, m) = (&out[0], &out[1], &out[2]);
            let h = gpu.upload_f32(&rng.vec(r, 1.0), &[1, r], Category::Activations).unwrap();
            let bl = gpu.upload_f32(&rng.vec(n * r, 0.1), &[n, r], Category::Activations).unwrap();
            let host = rng.vec(n * k, 0.05);
            let ws: Vec<(Tensor, Tensor)> = (0..10)
                .map(|_| {
                    let w = || gpu.upload_f32_as(&host, &[n, k], DType::BF16, Category::Weights).unwrap();
                    (w(), w())
                })
                .collect();
            for choice in choose::gemv_candidates(gpu).into_iter().filter(|c| matches!(c, Gemv::Rows(_))) {
                gpu.set_choice(GEMV_CHOICE, Some(choice.name()));
                for lora in [false, true] {
                    let f = lora.then_some(Fused { left: &h, right: &bl, scale: 2.0 });
                    let three = best_ms(gpu, ws.len(), || {
                        for (wg, wu) in &ws {
                            matmul_nt_with(gpu, Variant::Blocked, &x, wg, None, g, 1.0, 0.0, f);
                            matmul_nt_with(gpu, Variant::Blocked, &x, wu, None, u, 1.0, 0.0, f);
                            swiglu_forward(gpu, g, u, m);
                        }
                    })
                    .await;
                    let one = best_ms(gpu, ws.len(), || {
                        for (wg, wu) in &ws {
                            assert!(gate_up_swiglu_row(gpu, &x, (wg, f), (wu, f), m));
                        }
                    })
                    .await;
                    println!(
                        "{n:5}x{k:5} {} {:10} three dispatches {three:7.3} ms, one {one:7.3} ms",
                        if lora { "+lora" } else { "     " },
                        choice.name()
                    );
                }
            }
            gpu.set_choice(GEMV_CHOICE, None);
        }
    })
}
