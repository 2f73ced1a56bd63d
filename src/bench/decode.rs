//! `webtune bench decode`: greedy generation at a model shape with random weights: the prompt's
//! prefill, then one token at a time through the KV cache with a LoRA adapter applied unmerged
//! (as `webtune generate` runs it), timed per token; optionally profiled kernel by kernel.

use crate::base::error::{Error, Result};
use crate::base::names::Proj;
use crate::formats::peft::Adapter;
use crate::generate::{generate, GenerateOptions};
use crate::gpu::profile::Profile;
use crate::gpu::Gpu;
use crate::model::lora::Lora;
use crate::model::source::WeightSource;
use crate::model::weights::WeightFormat;
use crate::model::Model;
use crate::platform::now_ms;
use std::sync::Arc;

/// What to run.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecodeBenchConfig {
    pub shape: String,
    pub prompt_tokens: usize,
    pub new_tokens: usize,
    pub rank: usize,
    pub weights: String,
    #[serde(skip)]
    pub format: WeightFormat,
    pub seed: u64,
    /// Profile the decode steps (after the first two), kernel by kernel.
    pub profile: bool,
}

/// What was measured.
#[derive(Clone, Debug, serde::Serialize)]
pub struct DecodeResult {
    /// Until the first new token came back (the prompt's forward, and the next forward recorded).
    pub prefill_ms: f64,
    /// Per new token after the first (whose step includes compiling the decode pipelines).
    pub ms_per_token: f64,
    pub tokens_per_s: f64,
    pub tokens: Vec<u32>,
    /// With `profile`: the profiled decode steps together, and their wall time.
    pub profile: Option<(f64, Profile)>,
}

pub async fn bench_decode(gpu: &Gpu, source: Arc<dyn WeightSource>, bc: &DecodeBenchConfig) -> Result<DecodeResult> {
    let cfg = source.config().clone();
    if bc.prompt_tokens == 0 || bc.new_tokens < 3 {
        return Err(Error::msg("bench decode: --prompt must be at least 1 and --tokens at least 3"));
    }
    crate::kernels::tune(gpu, &cfg, 1, bc.format.dtype(crate::gpu::DType::BF16), &mut Default::default()).await?;
    let model = Model::resident(gpu, source, bc.format)?;
    let adapter = Adapter::new_init(&cfg, bc.rank, 2.0 * bc.rank as f64, &Proj::all(), bc.seed);
    let lora = Lora::from_adapter(gpu, &cfg, &adapter)?;
    let mut rng = crate::base::rng::Rng::new(bc.seed ^ 0xdec0de);
    let prompt: Vec<u32> = (0..bc.prompt_tokens).map(|_| rng.below(cfg.vocab as u64) as u32).collect();
    // generate() as `webtune generate` runs it (greedy: the argmax on the GPU, each token's
    // forward recorded before the previous id is read back). The first token comes after the
    // prefill; the second's forward compiles the decode pipelines; the rest are timed (and
    // profiled: from the first token on, so that the forwards of tokens 2.. are).
    let opts = GenerateOptions { max_new_tokens: bc.new_tokens, temperature: 0.0, ..GenerateOptions::default() };
    let mut times = Vec::with_capacity(bc.new_tokens);
    let t0 = now_ms();
    let tokens = generate(gpu, &model, Some(&lora), &prompt, &opts, &mut |_| {
        times.push(now_ms());
        if times.len() == 1 && bc.profile {
            gpu.profile_start();
        }
        true
    })
    .await?;
    if times.len() != bc.new_tokens {
        return Err(Error::msg(format!("bench decode: {} of {} tokens came", times.len(), bc.new_tokens)));
    }
    let prefill_ms = times[0] - t0;
    let timed = bc.new_tokens - 2;
    let wall = times[bc.new_tokens - 1] - times[1];
    let profile = gpu.profile_take().await?.map(|p| (wall, p));
    let ms_per_token = wall / timed as f64;
    Ok(DecodeResult { prefill_ms, ms_per_token, tokens_per_s: 1000.0 / ms_per_token, tokens, profile })
}

/// The decode profile in the browser, as `webtune bench decode --profile` prints it natively
/// (SmolLM2-135M's shape, random bf16 weights, LoRA rank 8 unmerged, 8 tokens of prompt, 8
/// decode steps profiled): `wasm-pack test --headless --chrome --release --lib --
/// --include-ignored --nocapture decode_profile_in_the_browser`.
#[cfg(all(test, target_arch = "wasm32"))]
mod browser {
    use super::*;
    use crate::model::synthetic::SyntheticSource;

    #[wasm_bindgen_test::wasm_bindgen_test]
    #[ignore]
    async fn decode_profile_in_the_browser() {
        let gpu = crate::kernels::testutil::test_gpu().await;
        let cfg = crate::base::config::ModelConfig::preset("smollm2-135m").expect("a preset");
        let source: Arc<dyn WeightSource> = Arc::new(SyntheticSource::new(cfg, 1));
        let format = WeightFormat::parse("bf16").expect("bf16");
        let bc = DecodeBenchConfig {
            shape: "smollm2-135m".into(),
            prompt_tokens: 8,
            new_tokens: 10,
            rank: 8,
            weights: format.name().into(),
            format,
            seed: 1,
            profile: true,
        };
        let r = bench_decode(&gpu, source, &bc).await.expect("decodes");
        let (wall, p) = r.profile.expect("profiled");
        assert!(p.calls() > 0);
        web_sys::console::log_1(&format!("decode: {:.1} ms/token\n{}", r.ms_per_token, p.table(wall)).into());
    }
}
