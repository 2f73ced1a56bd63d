//! The native CLI: `webtune grad`, `train`, `generate`, `bench kernels`.

// Native only: `wasm-pack test` builds every target for wasm32, where this file is empty.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use webtune::gpu::platform::block_on;
use webtune::gpu::Gpu;

#[derive(Parser)]
#[command(name = "webtune", version, about = "LoRA fine-tuning with exact MeSP gradients on WebGPU/Vulkan")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Loss and LoRA gradients of one batch, written as safetensors (`loss` plus one tensor per adapter key).
    Grad {
        /// Hugging Face model directory (config.json, model.safetensors or sharded)
        #[arg(long)]
        model: PathBuf,
        /// PEFT adapter directory (adapter_config.json, adapter_model.safetensors)
        #[arg(long)]
        adapter: PathBuf,
        /// Batch JSON: {"input_ids": [[..]], "labels": [[..]], "attention_mask": [[..]]?}
        #[arg(long)]
        batch: PathBuf,
        /// Output safetensors file
        #[arg(long)]
        out: PathBuf,
    },
    /// Benchmarks.
    Bench {
        #[command(subcommand)]
        what: BenchCmd,
    },
}

#[derive(Subcommand)]
enum BenchCmd {
    /// Time each kernel at the SmolLM2-135M and Qwen2.5-0.5B shapes.
    Kernels {
        #[arg(long, default_value_t = 256)]
        tokens: usize,
        #[arg(long, default_value_t = 8)]
        rank: usize,
        #[arg(long, default_value_t = 5)]
        reps: usize,
        /// numpy/OpenBLAS timings of the same products (from scripts/bench-numpy.py), shown side by side
        #[arg(long)]
        numpy: Option<PathBuf>,
        /// Write the results as JSON here
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

/// An error and the exit code it maps to: 2 for bad input, 1 for everything else.
struct Fail(u8, String);

fn input_err(e: impl std::fmt::Display) -> Fail {
    Fail(2, e.to_string())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Fail(code, msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(code)
        }
    }
}

async fn gpu() -> Result<Gpu, Fail> {
    Gpu::new().await.map_err(|e| Fail(1, e.to_string()))
}

async fn run(cli: Cli) -> Result<(), Fail> {
    match cli.cmd {
        Cmd::Grad { model, adapter, batch, out } => {
            let ckpt = webtune::store::Checkpoint::open_dir(&model).map_err(input_err)?;
            let adapter = webtune::formats::peft::Adapter::open_dir(&adapter).map_err(input_err)?;
            let text = std::fs::read_to_string(&batch).map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
            let gpu = gpu().await?;
            let res = webtune::grad::compute_grads(&gpu, &ckpt, &adapter, &text).await.map_err(|e| match e {
                webtune::error::Error::Gpu(g) => Fail(1, g.to_string()),
                other => Fail(2, format!("{}: {other}", batch.display())),
            })?;
            std::fs::write(&out, res.to_safetensors()).map_err(|e| Fail(1, format!("{}: {e}", out.display())))?;
            eprintln!("loss {:.6}; {} gradient tensors written to {}", res.loss, res.grads.len(), out.display());
            Ok(())
        }
        Cmd::Bench { what: BenchCmd::Kernels { tokens, rank, reps, numpy, json } } => {
            let gpu = gpu().await?;
            eprintln!("adapter: {} ({})", gpu.info.adapter, gpu.info.backend);
            let numpy: Option<serde_json::Value> = match numpy {
                Some(p) => Some(
                    serde_json::from_str(&std::fs::read_to_string(&p).map_err(|e| Fail(2, format!("{}: {e}", p.display())))?)
                        .map_err(|e| Fail(2, format!("{}: {e}", p.display())))?,
                ),
                None => None,
            };
            let mut all = Vec::new();
            for name in ["smollm2-135m", "qwen2.5-0.5b"] {
                let cfg = webtune::config::ModelConfig::preset(name).map_err(input_err)?;
                let t = webtune::bench::bench_matmuls(&gpu, name, &cfg, tokens, rank, reps).await.map_err(|e| Fail(1, e.to_string()))?;
                all.extend(t);
            }
            println!("{:<14} {:<34} {:>16} {:>9} {:>9} {:>12}", "shape", "kernel", "M×K×N", "ms", "GFLOP/s", "numpy GFLOP/s");
            for t in &all {
                let np = numpy
                    .as_ref()
                    .and_then(|v| v.get(&t.dims))
                    .and_then(|v| v.get("gflops"))
                    .and_then(|v| v.as_f64())
                    .map(|g| format!("{g:.1}"))
                    .unwrap_or_else(|| "-".into());
                println!("{:<14} {:<34} {:>16} {:>9.3} {:>9.2} {:>12}", t.shape, t.kernel, t.dims, t.ms, t.gflops, np);
            }
            if let Some(p) = json {
                let v = serde_json::json!({ "adapter": gpu.info.adapter, "tokens": tokens, "rank": rank, "kernels": all, "numpy": numpy });
                std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
                    .map_err(|e| Fail(1, format!("{}: {e}", p.display())))?;
            }
            Ok(())
        }
    }
}
