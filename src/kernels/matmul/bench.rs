//! Timing of `nt` and `nn` with BF16, Q8 and Q4 B at the Qwen2.5-0.5B MLP shapes, runs of all
//! variants interleaved so that a shared machine's load hits them alike; best of 7:
//! `cargo test --lib kernels::matmul::bench -- --ignored --nocapture`.

use super::*;
use crate::gpu::Category;
use crate::kernels::testutil::{test_gpu, Rng};
use crate::platform::{block_on, now_ms};

#[test]
#[ignore]
fn matmul_weight_dtypes_gflops() {
    block_on(async {
        let gpu = &test_gpu().await;
        let mut rng = Rng::new(1);
        // (label, flops, A, B, C, nt?)
        let mut cases = Vec::new();
        for (m, k, n) in [(256, 896, 4864), (256, 4864, 896)] {
            let a = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Activations).unwrap();
            let c = gpu.zeros(&[m, n], DType::F32, Category::Activations).unwrap();
            let w = rng.vec(n * k, 0.05);
            for dtype in [DType::BF16, DType::Q8, DType::Q4] {
                for nt in [true, false] {
                    let shape = if nt { [n, k] } else { [k, n] };
                    let b = gpu.upload_f32_as(&w, &shape, dtype, Category::Weights).unwrap();
                    let label = format!("{} {m}x{k}x{n} {:>4}", if nt { "nt" } else { "nn" }, dtype.name());
                    cases.push((label, 2.0 * (m * k * n) as f64, a.clone(), b, c.clone(), nt));
                }
            }
        }
        let run = |(_, _, a, b, c, nt): &(String, f64, Tensor, Tensor, Tensor, bool)| {
            if *nt {
                matmul_nt(gpu, a, b, None, c, 1.0, 0.0)
            } else {
                matmul_nn(gpu, a, b, c, 1.0, 0.0)
            }
        };
        let mut best = vec![f64::INFINITY; cases.len()];
        for round in 0..8 {
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
        for ((label, flops, ..), ms) in cases.iter().zip(&best) {
            println!("{label}: {ms:8.1} ms  {:6.1} GFLOP/s (best of 7)", flops / ms / 1e6);
        }
    })
}
