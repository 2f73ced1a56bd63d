//! `webtune bench kernels`: time each kernel at the real SmolLM2-135M and
//! Qwen2.5-0.5B shapes at 256 tokens and report GFLOP/s.

use crate::config::ModelConfig;
use crate::error::Result;
use crate::gpu::platform::now_ms;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::matmul::{matmul_nn, matmul_nt, matmul_tn};
use crate::kernels::testutil::Rng;

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

/// The matmul products of one block at `tokens` tokens, forward and backward.
pub async fn bench_matmuls(gpu: &Gpu, name: &str, cfg: &ModelConfig, tokens: usize, rank: usize, reps: usize) -> Result<Vec<KernelTiming>> {
    let mut rng = Rng::new(7);
    let c = cfg.hidden;
    let mut out = Vec::new();
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
        let flops = 2.0 * (tokens * din * dout) as f64;
        let ms = time_it(gpu, reps, || matmul_nt(gpu, &x, &w, None, &y, 1.0, 0.0)).await?;
        out.push(KernelTiming { shape: name.into(), kernel: format!("{proj} x·Wᵀ (nt, bf16)"), dims: format!("{tokens}x{din}x{dout}"), ms, gflops: flops / ms / 1e6, flops });
        let dy = rand(gpu, &mut rng, &[tokens, dout], DType::F32, Category::Activations)?;
        let dx = gpu.zeros(&[tokens, din], DType::F32, Category::Activations)?;
        let ms = time_it(gpu, reps, || matmul_nn(gpu, &dy, &w, &dx, 1.0, 0.0)).await?;
        out.push(KernelTiming { shape: name.into(), kernel: format!("{proj} dy·W (nn, bf16)"), dims: format!("{tokens}x{dout}x{din}"), ms, gflops: flops / ms / 1e6, flops });
        // LoRA thin products
        let a = rand(gpu, &mut rng, &[rank, din], DType::F32, Category::Lora)?;
        let h = gpu.zeros(&[tokens, rank], DType::F32, Category::Activations)?;
        let lflops = 2.0 * (tokens * din * rank) as f64;
        let ms = time_it(gpu, reps, || matmul_nt(gpu, &x, &a, None, &h, 1.0, 0.0)).await?;
        out.push(KernelTiming { shape: name.into(), kernel: format!("{proj} h = x·Aᵀ (nt, r={rank})"), dims: format!("{tokens}x{din}x{rank}"), ms, gflops: lflops / ms / 1e6, flops: lflops });
        let da = gpu.zeros(&[rank, din], DType::F32, Category::Grads)?;
        let ms = time_it(gpu, reps, || matmul_tn(gpu, &h, &x, &da, 1.0, 1.0)).await?;
        out.push(KernelTiming { shape: name.into(), kernel: format!("{proj} dA = gᵀ·x (tn, r={rank})"), dims: format!("{rank}x{tokens}x{din}"), ms, gflops: lflops / ms / 1e6, flops: lflops });
    }
    Ok(out)
}
