//! The native CLI: the clap command tree, the error type every subcommand returns, and `main`.

// Native only: `wasm-pack test` builds every target for wasm32, where this file is empty.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

mod bench;
mod generate;
mod grad;
mod import;
mod tiny_model;
mod train;

/// The tiny random model of the end-to-end tests (`webtune tiny-model`): the same code the tests use.
#[path = "../../../tests/common/mod.rs"]
mod common;

use clap::{Parser, Subcommand};
use std::process::ExitCode;
use webtune::gpu::Gpu;
use webtune::platform::block_on;

#[derive(Parser)]
#[command(name = "webtune", version, about = "LoRA fine-tuning with exact MeSP gradients on WebGPU/Vulkan")]
struct Cli {
    /// Let the kernel choice take matrix products that multiply in f16 and accumulate in f32,
    /// where the adapter has shader-f16: faster on many GPUs, but gradients then lie within
    /// ~1e-2 of the exact ones instead of float rounding. Off by default.
    #[arg(long, global = true)]
    f16_products: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

/// `--f16-products`, for every device [`gpu`] opens.
static F16_PRODUCTS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

#[derive(Subcommand)]
enum Cmd {
    /// Loss and LoRA gradients of one batch, written as safetensors (`loss` plus one tensor per adapter key).
    Grad(grad::GradArgs),
    /// How well MeZO's forward-only estimate points along the true gradient: for each seed, the
    /// cosine between g·z (SPSA) and the exact gradient of one batch.
    MezoCosine(grad::MezoCosineArgs),
    /// Convert a GGUF (llama.cpp; llama or qwen2; F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K) into a Hugging Face
    /// model directory: config.json, bf16 model.safetensors, tokenizer files with the chat template.
    Import(import::ImportArgs),
    /// Write a GGUF of a preset's shape (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, smollm2-135m) with
    /// random F16 weights and a stand-in byte-level tokenizer: an input to benchmark imports at real
    /// sizes (qwen2.5-0.5b: 988 MB) without a download.
    MakeGguf(import::MakeGgufArgs),
    /// Write the f32 checkpoint that a model loaded with --weights computes with (quantized then
    /// dequantized, exactly as the kernels see it): for reference fixtures and inspection.
    Dequantize(import::DequantizeArgs),
    /// Write the tiny random Llama of the tests (hidden 64, 2 layers, SmolLM2's tokenizer) as a
    /// Hugging Face model directory: for browser tests and trying things out.
    #[command(hide = true)]
    TinyModel(tiny_model::TinyModelArgs),
    /// Train a LoRA adapter on a JSONL dataset; resumes from OUT's checkpoint unless --fresh.
    Train(train::TrainArgs),
    /// Generate text, streamed to stdout as it is made.
    Generate(generate::GenerateArgs),
    /// Benchmark training steps of each memory schedule at a model shape (peak memory by
    /// category, step time, tokens/s); `bench kernels` times single kernels.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        what: Option<bench::BenchCmd>,
        #[command(flatten)]
        train: bench::BenchTrainArgs,
    },
}

/// An error and the exit code it maps to: 2 for bad input, 1 for everything else.
struct Fail(u8, String);

fn input_err(e: impl std::fmt::Display) -> Fail {
    Fail(2, e.to_string())
}

/// A library error: exit code 1 for the GPU's, 2 for the rest (the inputs').
fn lib_err(e: webtune::base::error::Error) -> Fail {
    match e {
        webtune::base::error::Error::Gpu(g) => Fail(1, g.to_string()),
        other => Fail(2, other.to_string()),
    }
}

async fn gpu() -> Result<Gpu, Fail> {
    let gpu = Gpu::new().await.map_err(|e| Fail(1, e.to_string()))?;
    if F16_PRODUCTS.load(std::sync::atomic::Ordering::Relaxed) && !gpu.set_f16_products(true) {
        eprintln!("--f16-products: {} has no shader-f16; the products stay f32", gpu.info.adapter);
    }
    Ok(gpu)
}

/// Choose the kernel variants for a model of shape `cfg` on this device (kernels::tune), with
/// the choices kept in `~/.cache/webtune/kernels.json` so a second run only checks them; prints
/// what it chose. `WEBTUNE_KERNELS=reference` skips it (the reference kernels run).
async fn tune(gpu: &Gpu, cfg: &webtune::base::config::ModelConfig, tokens: usize, dtype: webtune::gpu::DType) {
    if std::env::var("WEBTUNE_KERNELS").is_ok_and(|v| v == "reference") {
        return;
    }
    let path = webtune::platform::cache_dir().map(|d| d.join("kernels.json"));
    let mut cache: webtune::kernels::TuneCache = path
        .as_ref()
        .and_then(|p| std::fs::read(p).ok())
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    match webtune::kernels::tune(gpu, cfg, tokens, dtype, &mut cache).await {
        Ok(t) => {
            eprintln!("kernels: {}", t.summary());
            if let (false, Some(p)) = (t.cached, path) {
                // Best effort: without the file the next run measures again.
                let _ = webtune::platform::write_atomic(
                    &p,
                    serde_json::to_string_pretty(&cache).unwrap_or_default().as_bytes(),
                );
            }
        }
        Err(e) => eprintln!("kernels: the reference kernels run ({e})"),
    }
}

/// Seconds as `42s`, `3m07s` or `1h05m`.
fn fmt_secs(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 3600 {
        format!("{}h{:02}m", s / 3600, (s % 3600) / 60)
    } else if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn main() -> ExitCode {
    webtune::platform::quiet_vulkan_loader();
    let cli = Cli::parse();
    match block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(code)
        }
    }
}

async fn run(cli: Cli) -> Result<(), Fail> {
    F16_PRODUCTS.store(cli.f16_products, std::sync::atomic::Ordering::Relaxed);
    match cli.cmd {
        Cmd::Grad(a) => grad::grad(a).await,
        Cmd::MezoCosine(a) => grad::mezo_cosine(a).await,
        Cmd::Import(a) => import::import(a),
        Cmd::MakeGguf(a) => import::make_gguf(a),
        Cmd::Dequantize(a) => import::dequantize(a),
        Cmd::TinyModel(a) => tiny_model::tiny_model(a),
        Cmd::Train(a) => train::train(a).await,
        Cmd::Generate(a) => generate::generate(a).await,
        Cmd::Bench { what: None, train } => bench::bench_train(train).await,
        Cmd::Bench { what: Some(bench::BenchCmd::Kernels(a)), .. } => bench::bench_kernels(a).await,
        Cmd::Bench { what: Some(bench::BenchCmd::Decode(a)), .. } => bench::bench_decode(a).await,
    }
}
