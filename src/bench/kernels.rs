//! `webtune bench kernels`: time each kernel at the real SmolLM2-135M and
//! Qwen2.5-0.5B shapes at 256 tokens and report GFLOP/s.

use crate::base::config::ModelConfig;
use crate::base::error::Result;
use crate::base::rng::Rng;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::matmul::{
    gemv_variants, matmul_nn_with, matmul_nt, matmul_nt_with, matmul_tn, runnable, runnable_f16, Variant, BLOCKED,
    GEMV_CHOICE, SPLIT_K, THIN_CHOICE,
};
use crate::platform::now_ms;

/// One measured kernel.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KernelTiming {
    pub shape: String,
    pub kernel: String,
    /// (M, K, N) of the product, or the op's sizes
    pub dims: String,
    pub ms: f64,
    pub gflops: f64,
    pub flops: f64,
}

async fn time_it(gpu: &Gpu, reps: usize, mut f: impl FnMut()) -> Result<f64> {
    f(); // compile and warm up
    gpu.sync().await?;
    let t0 = now_ms();
    for _ in 0..reps {
        f();
    }
    gpu.sync().await?;
    Ok((now_ms() - t0) / reps as f64)
}

fn rand(gpu: &Gpu, rng: &mut Rng, shape: &[usize], dtype: DType, cat: Category) -> Result<Tensor> {
    let n: usize = shape.iter().product();
    Ok(gpu.upload_f32_as(&rng.vec(n, 0.5), shape, dtype, cat)?)
}

/// Every variant this device can run ([`runnable`]), and those that multiply in f16 where the
/// run allowed them ([`Gpu::set_f16_products`]).
fn offered(gpu: &Gpu) -> Vec<Variant> {
    let mut out = runnable(gpu);
    if gpu.f16_products() {
        out.extend(runnable_f16(gpu));
    }
    out
}

/// The matmul products of one block at `tokens` tokens, forward and backward: the frozen
/// products x·Wᵀ and dy·W with every variant this device can run ([`offered`]; `chosen`
/// marks the one [`crate::kernels::tune`] picked), LoRA's thin products and one token's x·Wᵀ
/// with each kernel of theirs.
pub async fn bench_matmuls(
    gpu: &Gpu,
    name: &str,
    cfg: &ModelConfig,
    tokens: usize,
    rank: usize,
    reps: usize,
) -> Result<Vec<KernelTiming>> {
    let mut rng = Rng::new(7);
    let c = cfg.hidden;
    let mut out = Vec::new();
    let chosen = Variant::of(gpu);
    let shapes = [
        ("q_proj", c, cfg.heads * cfg.head_dim),
        ("k_proj", c, cfg.kv_heads * cfg.head_dim),
        ("o_proj", cfg.heads * cfg.head_dim, c),
        ("gate_proj", c, cfg.intermediate),
        ("down_proj", cfg.intermediate, c),
    ];
    for (proj, din, dout) in shapes {
        let x = rand(gpu, &mut rng, &[tokens, din], DType::F32, Category::Activations)?;
        let w = rand(gpu, &mut rng, &[dout, din], DType::BF16, Category::Weights)?;
        let y = gpu.zeros(&[tokens, dout], DType::F32, Category::Activations)?;
        let dy = rand(gpu, &mut rng, &[tokens, dout], DType::F32, Category::Activations)?;
        let dx = gpu.zeros(&[tokens, din], DType::F32, Category::Activations)?;
        let flops = 2.0 * (tokens * din * dout) as f64;
        for v in offered(gpu) {
            let mark = if v == chosen { " *" } else { "" };
            let ms = time_it(gpu, reps, || matmul_nt_with(gpu, v, &x, &w, None, &y, 1.0, 0.0, None)).await?;
            out.push(KernelTiming {
                shape: name.into(),
                kernel: format!("{proj} x·Wᵀ nt bf16 {}{mark}", v.name()),
                dims: format!("{tokens}x{din}x{dout}"),
                ms,
                gflops: flops / ms / 1e6,
                flops,
            });
            let ms = time_it(gpu, reps, || matmul_nn_with(gpu, v, &dy, &w, &dx, 1.0, 0.0, None)).await?;
            out.push(KernelTiming {
                shape: name.into(),
                kernel: format!("{proj} dy·W nn bf16 {}{mark}", v.name()),
                dims: format!("{tokens}x{dout}x{din}"),
                ms,
                gflops: flops / ms / 1e6,
                flops,
            });
        }
        // LoRA thin products, with each kernel the device may choose for them (the choice is
        // put back after).
        let a = rand(gpu, &mut rng, &[rank, din], DType::F32, Category::Lora)?;
        let h = gpu.zeros(&[tokens, rank], DType::F32, Category::Activations)?;
        let da = gpu.zeros(&[rank, din], DType::F32, Category::Grads)?;
        let lflops = 2.0 * (tokens * din * rank) as f64;
        let before = gpu.choice(THIN_CHOICE);
        for thin in [BLOCKED, SPLIT_K] {
            let mark = if before.as_deref().unwrap_or(BLOCKED) == thin { " *" } else { "" };
            gpu.set_choice(THIN_CHOICE, (thin != BLOCKED).then(|| thin.to_string()));
            let ms = time_it(gpu, reps, || matmul_nt(gpu, &x, &a, None, &h, 1.0, 0.0)).await;
            let tms = time_it(gpu, reps, || matmul_tn(gpu, &h, &x, &da, 1.0, 1.0)).await;
            gpu.set_choice(THIN_CHOICE, before.clone());
            for (what, dims, ms) in [
                ("h = x·Aᵀ (nt", format!("{tokens}x{din}x{rank}"), ms?),
                ("dA = gᵀ·x (tn", format!("{rank}x{tokens}x{din}"), tms?),
            ] {
                out.push(KernelTiming {
                    shape: name.into(),
                    kernel: format!("{proj} {what}, r={rank}) {thin}{mark}"),
                    dims,
                    ms,
                    gflops: lflops / ms / 1e6,
                    flops: lflops,
                });
            }
        }
        // Decoding's one-row product (y = x·Wᵀ for one token), with every one-row kernel.
        let x1 = rand(gpu, &mut rng, &[1, din], DType::F32, Category::Activations)?;
        let y1 = gpu.zeros(&[1, dout], DType::F32, Category::Activations)?;
        let gflops1 = 2.0 * (din * dout) as f64;
        let before = gpu.choice(GEMV_CHOICE);
        for g in std::iter::once(BLOCKED.to_string()).chain(gemv_variants(gpu)) {
            let mark = if before.as_deref().unwrap_or(BLOCKED) == g { " *" } else { "" };
            gpu.set_choice(GEMV_CHOICE, (g != BLOCKED).then(|| g.clone()));
            let ms = time_it(gpu, reps, || matmul_nt(gpu, &x1, &w, None, &y1, 1.0, 0.0)).await;
            gpu.set_choice(GEMV_CHOICE, before.clone());
            let ms = ms?;
            out.push(KernelTiming {
                shape: name.into(),
                kernel: format!("{proj} one token x·Wᵀ bf16 {g}{mark}"),
                dims: format!("1x{din}x{dout}"),
                ms,
                gflops: gflops1 / ms / 1e6,
                flops: gflops1,
            });
        }
    }
    Ok(out)
}

/// Attention (forward, backward), RMSNorm, SwiGLU and lm_head + cross-entropy at one shape.
pub async fn bench_ops(
    gpu: &Gpu,
    name: &str,
    cfg: &ModelConfig,
    tokens: usize,
    reps: usize,
) -> Result<Vec<KernelTiming>> {
    use crate::kernels::attention::{
        self as attn, attention_backward, attention_forward, tuning_of, AttnShape, VARIANTS,
    };
    use crate::kernels::cross_entropy::{lm_head_ce_forward, lm_head_ce_forward_backward, VocabTable};
    use futures_util::FutureExt;
    let mut rng = Rng::new(11);
    let mut out = Vec::new();
    let (c, d) = (cfg.hidden, cfg.head_dim);
    let s = AttnShape { batch: 1, seq: tokens, heads: cfg.heads, kv_heads: cfg.kv_heads, head_dim: d };
    let act = |rng: &mut Rng, shape: &[usize]| rand(gpu, rng, shape, DType::F32, Category::Activations);
    let q = act(&mut rng, &[tokens, cfg.heads * d])?;
    let k = act(&mut rng, &[tokens, cfg.kv_heads * d])?;
    let v = act(&mut rng, &[tokens, cfg.kv_heads * d])?;
    let o = gpu.zeros(&q.shape, DType::F32, Category::Activations)?;
    let lse = gpu.zeros(&[cfg.heads * tokens], DType::F32, Category::Activations)?;
    // causal: half of the T×T scores, QK and PV, 2 flops each
    let aflops = 2.0 * 2.0 * (cfg.heads * tokens * tokens * d) as f64 / 2.0;
    let d_o = act(&mut rng, &q.shape)?;
    let (dq, dk, dv) = (
        gpu.zeros(&q.shape, DType::F32, Category::Activations)?,
        gpu.zeros(&k.shape, DType::F32, Category::Activations)?,
        gpu.zeros(&v.shape, DType::F32, Category::Activations)?,
    );
    // Every tuning (work split, tiles) through the device's choice, which is put back after.
    let (chosen, before) = (tuning_of(gpu), gpu.choice(attn::CHOICE));
    let dims = format!("T={tokens} H={}/{} D={d}", cfg.heads, cfg.kv_heads);
    for t in VARIANTS {
        gpu.set_choice(attn::CHOICE, Some(t.name()));
        let mark = if t == chosen { " *" } else { "" };
        let ms = time_it(gpu, reps, || attention_forward(gpu, &s, &q, &k, &v, None, &o, &lse)).await;
        let mut err = None;
        let bms = time_it(gpu, reps, || {
            if let Err(e) = attention_backward(gpu, &s, &q, &k, &v, &o, &d_o, &lse, None, &dq, &dk, &dv) {
                err = Some(e);
            }
        })
        .await;
        gpu.set_choice(attn::CHOICE, before.clone());
        let (ms, bms) = (ms?, bms?);
        if let Some(e) = err {
            return Err(e.into());
        }
        for (what, ms, flops) in [("forward", ms, aflops), ("backward", bms, 2.5 * aflops)] {
            out.push(KernelTiming {
                shape: name.into(),
                kernel: format!("attention {what} {}{mark}", t.name()),
                dims: dims.clone(),
                ms,
                gflops: flops / ms / 1e6,
                flops,
            });
        }
    }
    let x = act(&mut rng, &[tokens, c])?;
    let w = gpu.upload_f32(&vec![1.0; c], &[c], Category::Weights)?;
    let y = gpu.zeros(&[tokens, c], DType::F32, Category::Activations)?;
    let rstd = gpu.zeros(&[tokens], DType::F32, Category::Activations)?;
    let ms = time_it(gpu, reps, || crate::kernels::rmsnorm::rmsnorm_forward(gpu, &x, &w, 1e-6, &y, &rstd)).await?;
    out.push(KernelTiming {
        shape: name.into(),
        kernel: "rmsnorm forward".into(),
        dims: format!("{tokens}x{c}"),
        ms,
        gflops: 4.0 * (tokens * c) as f64 / ms / 1e6,
        flops: 4.0 * (tokens * c) as f64,
    });
    let f = cfg.intermediate;
    let (g, u, m) = (
        act(&mut rng, &[tokens, f])?,
        act(&mut rng, &[tokens, f])?,
        gpu.zeros(&[tokens, f], DType::F32, Category::Activations)?,
    );
    let ms = time_it(gpu, reps, || crate::kernels::swiglu::swiglu_forward(gpu, &g, &u, &m)).await?;
    out.push(KernelTiming {
        shape: name.into(),
        kernel: "swiglu forward".into(),
        dims: format!("{tokens}x{f}"),
        ms,
        gflops: 5.0 * (tokens * f) as f64 / ms / 1e6,
        flops: 5.0 * (tokens * f) as f64,
    });
    // lm_head + cross-entropy over the real vocabulary, bf16 table in chunks of 8192 rows
    let rows = crate::kernels::cross_entropy::DEFAULT_CHUNK_ROWS;
    let mut chunks = Vec::new();
    for r0 in (0..cfg.vocab).step_by(rows) {
        chunks.push(rand(gpu, &mut rng, &[rows.min(cfg.vocab - r0), c], DType::BF16, Category::Weights)?);
    }
    let table = VocabTable { chunks: (&chunks).into(), chunk_rows: rows, vocab: cfg.vocab };
    let tbits: Vec<u32> = (0..tokens).map(|i| (i * 7919 % cfg.vocab) as u32).collect();
    let targets = gpu.upload_u32(&tbits, &[tokens], Category::Activations)?;
    let (lse2, loss, dx) = (
        gpu.zeros(&[tokens], DType::F32, Category::Activations)?,
        gpu.zeros(&[1], DType::F32, Category::Scratch)?,
        gpu.zeros(&[tokens, c], DType::F32, Category::Activations)?,
    );
    let cflops = 2.0 * (tokens * c * cfg.vocab) as f64;
    let inv = 1.0 / tokens as f32;
    let mut err = None;
    let ms = time_it(gpu, 1, || {
        // A resident table: the future completes without waiting.
        let run = lm_head_ce_forward(gpu, &x, &table, &targets, inv, &lse2, &loss, 1024).now_or_never();
        if let Some(Err(e)) = run {
            err = Some(e);
        }
    })
    .await?;
    out.push(KernelTiming {
        shape: name.into(),
        kernel: "lm_head + CE forward".into(),
        dims: format!("{tokens}x{c}x{}", cfg.vocab),
        ms,
        gflops: cflops / ms / 1e6,
        flops: cflops,
    });
    let ms = time_it(gpu, 1, || {
        let run =
            lm_head_ce_forward_backward(gpu, &x, &table, &targets, inv, &lse2, &loss, &dx, 0.0, 1024).now_or_never();
        if let Some(Err(e)) = run {
            err = Some(e);
        }
    })
    .await?;
    if let Some(e) = err {
        return Err(e.into());
    }
    out.push(KernelTiming {
        shape: name.into(),
        kernel: "lm_head + CE forward+backward".into(),
        dims: format!("{tokens}x{c}x{}", cfg.vocab),
        ms,
        gflops: 2.0 * cflops / ms / 1e6,
        flops: 2.0 * cflops,
    });
    Ok(out)
}

// Native only: `bench kernels` is the CLI's, and in Chromium it would compile every tiling on
// SwiftShader.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    // Every kernel of each family is timed and exactly one of each (per projection) is marked
    // as the device's choice; the choices are left as they were.
    #[test]
    fn bench_lists_every_variant_and_marks_the_chosen() {
        crate::platform::block_on(async {
            let gpu = &crate::kernels::testutil::test_gpu().await;
            let cfg = crate::formats::testdata::tiny_config(false);
            let before = [THIN_CHOICE, GEMV_CHOICE, crate::kernels::attention::CHOICE].map(|f| gpu.choice(f));
            let rows = bench_matmuls(gpu, "tiny", &cfg, 16, 4, 1).await.expect("bench_matmuls");
            let rows: Vec<KernelTiming> =
                rows.into_iter().chain(bench_ops(gpu, "tiny", &cfg, 16, 1).await.expect("bench_ops")).collect();
            let after = [THIN_CHOICE, GEMV_CHOICE, crate::kernels::attention::CHOICE].map(|f| gpu.choice(f));
            assert_eq!(before, after);
            let group = |part: &str| -> Vec<&KernelTiming> {
                rows.iter().filter(|r| r.kernel.starts_with("q_proj") && r.kernel.contains(part)).collect()
            };
            for (part, n) in
                [("h = x·Aᵀ", 2), ("one token", 1 + gemv_variants(gpu).len()), ("x·Wᵀ nt bf16", runnable(gpu).len())]
            {
                let g = group(part);
                assert_eq!(g.len(), n, "{part}: {:?}", g.iter().map(|r| &r.kernel).collect::<Vec<_>>());
                assert_eq!(g.iter().filter(|r| r.kernel.ends_with(" *")).count(), 1, "{part}");
                assert!(g.iter().all(|r| r.ms > 0.0 && r.gflops.is_finite()));
            }
            let attn: Vec<&KernelTiming> = rows.iter().filter(|r| r.kernel.starts_with("attention forward")).collect();
            assert_eq!(attn.len(), crate::kernels::attention::VARIANTS.len());
            assert_eq!(attn.iter().filter(|r| r.kernel.ends_with(" *")).count(), 1);
        });
    }
}
