//! The native CLI: `webtune grad`, `train`, `generate`, `bench kernels`.

// Native only: `wasm-pack test` builds every target for wasm32, where this file is empty.
#![cfg_attr(target_arch = "wasm32", no_main)]
#![cfg(not(target_arch = "wasm32"))]

use clap::{Parser, Subcommand};

/// The tiny random model of the end-to-end tests (`webtune tiny-model`): the same code the tests use.
#[path = "../../tests/common/mod.rs"]
mod common;
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
        /// Memory schedule: mesp, mebp or full (same gradients, different peak memory)
        #[arg(long, default_value = "mesp")]
        mode: String,
        /// Frozen weights on the GPU: stored, bf16, q8 or q4 (gradients are exact for that model)
        #[arg(long, default_value = "stored")]
        weights: String,
        /// Upload each block's weights only while it runs
        #[arg(long)]
        stream: bool,
    },
    /// How well MeZO's forward-only estimate points along the true gradient: for each seed, the
    /// cosine between g·z (SPSA) and the exact gradient of one batch.
    MezoCosine {
        #[arg(long)]
        model: PathBuf,
        #[arg(long)]
        adapter: PathBuf,
        /// Batch JSON, as for `grad`
        #[arg(long)]
        batch: PathBuf,
        #[arg(long, default_value_t = 8)]
        seeds: u64,
        #[arg(long, default_value_t = 1e-3)]
        eps: f32,
    },
    /// Convert a GGUF (llama.cpp; llama or qwen2; F32/F16/BF16/Q8_0/Q4_0/Q4_1/Q4_K/Q5_K/Q6_K) into a Hugging Face
    /// model directory: config.json, bf16 model.safetensors, tokenizer files with the chat template.
    Import {
        /// The .gguf file
        #[arg(long)]
        gguf: PathBuf,
        /// Output directory (created; refused if it already holds any of the files)
        #[arg(long)]
        out: PathBuf,
    },
    /// Write a GGUF of a preset's shape (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, smollm2-135m) with
    /// random F16 weights and a stand-in byte-level tokenizer: an input to benchmark imports at real
    /// sizes (qwen2.5-0.5b: 988 MB) without a download.
    MakeGguf {
        #[arg(long)]
        shape: String,
        /// The .gguf file to write (written as FILE.part, then renamed)
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// Write the f32 checkpoint that a model loaded with --weights computes with (quantized then
    /// dequantized, exactly as the kernels see it): for reference fixtures and inspection.
    Dequantize {
        /// Hugging Face model directory
        #[arg(long)]
        model: PathBuf,
        /// bf16, q8 or q4
        #[arg(long)]
        weights: String,
        /// Output directory (config.json and model.safetensors)
        #[arg(long)]
        out: PathBuf,
    },
    /// Write the tiny random Llama of the tests (hidden 64, 2 layers, SmolLM2's tokenizer) as a
    /// Hugging Face model directory: for browser tests and trying things out.
    #[command(hide = true)]
    TinyModel {
        #[arg(long)]
        out: PathBuf,
        #[arg(long, default_value_t = 7)]
        seed: u64,
    },
    /// Train a LoRA adapter on a JSONL dataset; resumes from OUT's checkpoint unless --fresh.
    Train(TrainArgs),
    /// Generate text, streamed to stdout as it is made.
    Generate(GenerateArgs),
    /// Benchmark training steps of each memory schedule at a model shape (peak memory by
    /// category, step time, tokens/s); `bench kernels` times single kernels.
    #[command(args_conflicts_with_subcommands = true)]
    Bench {
        #[command(subcommand)]
        what: Option<BenchCmd>,
        #[command(flatten)]
        train: BenchTrainArgs,
    },
}

#[derive(clap::Args)]
struct BenchTrainArgs {
    /// A preset (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, smollm2-135m: random weights at the
    /// published shape) or a Hugging Face model directory
    #[arg(long, default_value = "qwen2.5-0.5b")]
    shape: String,
    #[arg(long, default_value_t = 256)]
    seq: usize,
    #[arg(long, default_value_t = 8)]
    rank: usize,
    /// LoRA alpha [default: 2 × rank]
    #[arg(long)]
    alpha: Option<f64>,
    #[arg(long, default_value = "q,k,v,o,gate,up,down")]
    targets: String,
    /// Memory schedules to compare: mesp, mebp, full, mezo
    #[arg(long, default_value = "mesp,mebp,full,mezo")]
    modes: String,
    #[arg(long, default_value = "sgd", value_parser = ["sgd", "adamw"])]
    optimizer: String,
    #[arg(long, default_value_t = 1e-4)]
    lr: f32,
    /// Frozen weights on the GPU: bf16, q8 or q4 (stored = as in the files)
    #[arg(long, default_value = "q4")]
    weights: String,
    /// Keep every weight on the GPU instead of streaming one block at a time
    #[arg(long)]
    resident: bool,
    /// Streamed: convert each block on every upload instead of keeping it converted on the host
    #[arg(long)]
    uncached: bool,
    /// Fuse the optimizer update into the backward (auto: MeSP only)
    #[arg(long, default_value = "auto")]
    fuse: String,
    /// Steps per mode (the first one compiles pipelines and is timed separately)
    #[arg(long, default_value_t = 1)]
    steps: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Tokens per chunk of MeSP's MLP backward [default: from the model's intermediate size]
    #[arg(long)]
    mlp_chunk: Option<usize>,
    /// Write the results as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Hugging Face model directory
    #[arg(long)]
    model: PathBuf,
    /// JSONL dataset: {"messages": [...]}, {"prompt", "completion"} or {"text"} per line
    #[arg(long)]
    data: PathBuf,
    /// Output directory: the PEFT adapter and the training checkpoint
    #[arg(long)]
    out: PathBuf,
    /// Optimizer steps (default: from --epochs)
    #[arg(long, conflicts_with = "epochs")]
    steps: Option<u32>,
    /// Passes over the data [default: 10]
    #[arg(long)]
    epochs: Option<f32>,
    #[arg(long, default_value_t = 1e-3)]
    lr: f32,
    /// adamw, sgd, or mezo (forward passes only; try --lr 1e-5)
    #[arg(long, default_value = "adamw", value_parser = ["adamw", "sgd", "mezo"])]
    optimizer: String,
    /// MeZO's perturbation scale
    #[arg(long, default_value_t = 1e-3)]
    mezo_eps: f32,
    #[arg(long, default_value_t = 16)]
    rank: usize,
    /// LoRA alpha [default: 2 × rank]
    #[arg(long)]
    alpha: Option<f64>,
    /// Projections to adapt
    #[arg(long, default_value = "q,k,v,o,gate,up,down")]
    targets: String,
    /// Maximum tokens per example (longer ones are truncated with a warning)
    #[arg(long, default_value_t = 256)]
    seq: usize,
    /// Examples per micro-batch
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Micro-batches per optimizer step (gradient accumulation)
    #[arg(long, default_value_t = 1)]
    accum: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Checkpoint every N steps (and always at the end)
    #[arg(long, default_value_t = 50)]
    save_every: u32,
    #[arg(long, default_value = "cosine", value_parser = ["cosine", "constant"])]
    schedule: String,
    #[arg(long, default_value_t = 0.05)]
    warmup_ratio: f32,
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f32,
    /// Global gradient-norm clipping (0 = off)
    #[arg(long, default_value_t = 1.0)]
    max_grad_norm: f32,
    /// Ignore an existing checkpoint in --out and start over
    #[arg(long)]
    fresh: bool,
    /// Most GPU memory the run may hold at once, in MB (10^6 bytes); an allocation past it
    /// stops the run with a plain error (the last checkpoint is kept)
    #[arg(long, value_name = "MB")]
    memory_budget: Option<f64>,
    /// Frozen weights on the GPU: stored (as in the files), bf16, q8 or q4
    #[arg(long, default_value = "stored")]
    weights: String,
    /// Keep every frozen weight on the GPU (faster) instead of uploading one block at a time
    #[arg(long)]
    resident: bool,
}

#[derive(clap::Args)]
struct GenerateArgs {
    #[arg(long)]
    model: PathBuf,
    /// PEFT adapter directory (applied unmerged unless --merge)
    #[arg(long)]
    adapter: Option<PathBuf>,
    #[arg(long)]
    prompt: String,
    /// Wrap the prompt in the model's chat template with a generation prompt
    #[arg(long)]
    chat: bool,
    /// System message (with --chat)
    #[arg(long)]
    system: Option<String>,
    #[arg(long, default_value_t = 256)]
    max_new_tokens: usize,
    /// 0 = greedy
    #[arg(long, default_value_t = 0.0)]
    temperature: f32,
    #[arg(long, default_value_t = 1.0)]
    top_p: f32,
    /// 0 = off
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Merge the adapter into a copy of the weights (faster per token)
    #[arg(long)]
    merge: bool,
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
        Cmd::Grad { model, adapter, batch, out, mode, weights, stream } => {
            let opts = webtune::grad::GradOptions {
                mode: mode.parse().map_err(|e| Fail(2, format!("--mode: {e}")))?,
                weights: webtune::model::weights::WeightFormat::parse(&weights)
                    .map_err(|e| Fail(2, format!("--weights: {e}")))?,
                stream,
                mlp_chunk_rows: None,
            };
            let ckpt = webtune::store::Checkpoint::open_dir(&model).map_err(input_err)?;
            let adapter = webtune::formats::peft::Adapter::open_dir(&adapter).map_err(input_err)?;
            let text = std::fs::read_to_string(&batch).map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
            let gpu = gpu().await?;
            let res =
                webtune::grad::compute_grads_with(&gpu, &ckpt, &adapter, &text, &opts).await.map_err(|e| match e {
                    webtune::error::Error::Gpu(g) => Fail(1, g.to_string()),
                    other => Fail(2, format!("{}: {other}", batch.display())),
                })?;
            std::fs::write(&out, res.to_safetensors()).map_err(|e| Fail(1, format!("{}: {e}", out.display())))?;
            eprintln!("loss {:.6}; {} gradient tensors written to {}", res.loss, res.grads.len(), out.display());
            Ok(())
        }
        Cmd::MezoCosine { model, adapter, batch, seeds, eps } => {
            let ckpt = webtune::store::Checkpoint::open_dir(&model).map_err(input_err)?;
            webtune::model::layout::validate(&ckpt).map_err(input_err)?;
            let adapter = webtune::formats::peft::Adapter::open_dir(&adapter).map_err(input_err)?;
            let text = std::fs::read_to_string(&batch).map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
            let gpu = gpu().await?;
            let m = webtune::model::Model::load(&gpu, &ckpt).map_err(lib_err)?;
            let lora = webtune::model::lora::Lora::from_adapter(&gpu, &m.cfg, &adapter).map_err(lib_err)?;
            let b = webtune::formats::batch::Batch::from_json(&text, m.cfg.vocab)
                .map_err(|e| Fail(2, format!("{}: {e}", batch.display())))?;
            let input = m.prepare(&gpu, &b).map_err(lib_err)?;
            let seed_list: Vec<u64> = (1..=seeds).collect();
            let cos = webtune::train::mezo::mezo_gradient_cosine(&gpu, &m, &lora, &input, eps, &seed_list)
                .await
                .map_err(lib_err)?;
            let d: usize = lora.params.iter().map(|(_, _, p)| p.a.numel() + p.b.numel()).sum();
            for (s, c) in seed_list.iter().zip(&cos) {
                println!("seed {s}: cosine {c:+.3e}");
            }
            let mean = cos.iter().map(|&c| c as f64).sum::<f64>() / cos.len().max(1) as f64;
            let mean_abs = cos.iter().map(|&c| (c as f64).abs()).sum::<f64>() / cos.len().max(1) as f64;
            println!(
                "mean cosine {mean:+.3e}, mean |cosine| {mean_abs:.3e} over {} seeds; d = {d} parameters, sqrt(2/(pi d)) = {:.3e}",
                cos.len(),
                (2.0 / (std::f64::consts::PI * d as f64)).sqrt()
            );
            Ok(())
        }
        Cmd::Import { gguf, out } => {
            let summary = webtune::formats::gguf::import_gguf_to_dir(&gguf, &out).map_err(input_err)?;
            eprintln!("{summary}; written to {}", out.display());
            Ok(())
        }
        Cmd::MakeGguf { shape, out, seed } => {
            let cfg = webtune::config::ModelConfig::preset(&shape).map_err(|e| Fail(2, format!("--shape: {e}")))?;
            let part = PathBuf::from(format!("{}.part", out.display()));
            let io = |p: &PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
            let mut w = std::io::BufWriter::new(std::fs::File::create(&part).map_err(|e| io(&part, e))?);
            let n = webtune::formats::gguf::write_random_model(&cfg, seed, &mut w).map_err(|e| io(&part, e))?;
            w.into_inner().map_err(|e| io(&part, e.into_error()))?.sync_all().map_err(|e| io(&part, e))?;
            std::fs::rename(&part, &out).map_err(|e| io(&out, e))?;
            eprintln!("{shape}: {n} bytes of random weights written to {}", out.display());
            Ok(())
        }
        Cmd::Dequantize { model, weights, out } => {
            let format = webtune::model::weights::WeightFormat::parse(&weights)
                .map_err(|e| Fail(2, format!("--weights: {e}")))?;
            let ckpt = webtune::store::Checkpoint::open_dir(&model).map_err(input_err)?;
            webtune::model::layout::validate(&ckpt).map_err(input_err)?;
            let tensors = webtune::model::weights::quantized_checkpoint_f32(&ckpt, format).map_err(input_err)?;
            let refs: Vec<(&str, &webtune::store::HostTensor)> = tensors.iter().map(|(k, t)| (k.as_str(), t)).collect();
            let io = |p: PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
            std::fs::create_dir_all(&out).map_err(|e| io(out.clone(), e))?;
            let p = out.join("model.safetensors");
            std::fs::write(&p, webtune::store::encode_safetensors(&refs)).map_err(|e| io(p.clone(), e))?;
            let src = model.join("config.json");
            let p = out.join("config.json");
            std::fs::copy(&src, &p).map_err(|e| io(src.clone(), e))?;
            eprintln!("{} tensors ({}) written to {}", refs.len(), format.name(), out.display());
            Ok(())
        }
        Cmd::TinyModel { out, seed } => {
            let io = |p: PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
            std::fs::create_dir_all(&out).map_err(|e| io(out.clone(), e))?;
            for (name, bytes) in common::tiny_model_files(seed) {
                let p = out.join(name);
                std::fs::write(&p, bytes).map_err(|e| io(p.clone(), e))?;
            }
            eprintln!("the tiny model (seed {seed}) written to {}", out.display());
            Ok(())
        }
        Cmd::Train(a) => train(a).await,
        Cmd::Generate(a) => generate(a).await,
        Cmd::Bench { what: None, train } => bench_train(train).await,
        Cmd::Bench { what: Some(BenchCmd::Kernels { tokens, rank, reps, numpy, json }), .. } => {
            let gpu = gpu().await?;
            eprintln!("adapter: {} ({})", gpu.info.adapter, gpu.info.backend);
            let numpy: Option<serde_json::Value> = match numpy {
                Some(p) => Some(
                    serde_json::from_str(
                        &std::fs::read_to_string(&p).map_err(|e| Fail(2, format!("{}: {e}", p.display())))?,
                    )
                    .map_err(|e| Fail(2, format!("{}: {e}", p.display())))?,
                ),
                None => None,
            };
            let mut all = Vec::new();
            for name in ["smollm2-135m", "qwen2.5-0.5b"] {
                let cfg = webtune::config::ModelConfig::preset(name).map_err(input_err)?;
                let t = webtune::bench::bench_matmuls(&gpu, name, &cfg, tokens, rank, reps)
                    .await
                    .map_err(|e| Fail(1, e.to_string()))?;
                all.extend(t);
                let t = webtune::bench::bench_ops(&gpu, name, &cfg, tokens, reps)
                    .await
                    .map_err(|e| Fail(1, e.to_string()))?;
                all.extend(t);
            }
            println!(
                "{:<14} {:<34} {:>16} {:>9} {:>9} {:>12}",
                "shape", "kernel", "M×K×N", "ms", "GFLOP/s", "numpy GFLOP/s"
            );
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

async fn bench_train(a: BenchTrainArgs) -> Result<(), Fail> {
    use webtune::bench::train::{bench_train, paper_mb, BenchMode, TrainBenchConfig};
    use webtune::model::stream::{CheckpointSource, SyntheticSource, WeightSource};
    let format =
        webtune::model::weights::WeightFormat::parse(&a.weights).map_err(|e| Fail(2, format!("--weights: {e}")))?;
    let modes = BenchMode::parse_list(&a.modes).map_err(|e| Fail(2, format!("--modes: {e}")))?;
    let fuse = a.fuse.parse().map_err(|e| Fail(2, format!("--fuse: {e}")))?;
    let source: std::sync::Arc<dyn WeightSource> = if std::path::Path::new(&a.shape).is_dir() {
        let ckpt = webtune::store::Checkpoint::open_dir(std::path::Path::new(&a.shape)).map_err(input_err)?;
        webtune::model::layout::validate(&ckpt).map_err(input_err)?;
        std::sync::Arc::new(CheckpointSource::new(ckpt))
    } else {
        let cfg = webtune::config::ModelConfig::preset(&a.shape).map_err(|e| Fail(2, format!("--shape: {e}")))?;
        std::sync::Arc::new(SyntheticSource::new(cfg, a.seed))
    };
    let cfg = source.config().clone();
    let bc = TrainBenchConfig {
        shape: a.shape.clone(),
        cfg: cfg.clone(),
        seq: a.seq,
        rank: a.rank,
        alpha: a.alpha.unwrap_or(2.0 * a.rank as f64),
        targets: a.targets.split(',').map(|t| t.trim().to_string()).collect(),
        modes,
        optimizer: a.optimizer.clone(),
        lr: a.lr,
        weights: format.name().into(),
        format,
        resident: a.resident,
        host_cache: !a.uncached,
        fuse,
        steps: a.steps,
        seed: a.seed,
        mlp_chunk_rows: a.mlp_chunk,
    };
    let gpu = gpu().await?;
    eprintln!(
        "{} ({} layers, hidden {}, vocab {}), seq {}, rank {} on {}, {} weights {}, {}, {} step(s) per mode on {}",
        a.shape,
        cfg.layers,
        cfg.hidden,
        cfg.vocab,
        a.seq,
        a.rank,
        a.targets,
        format.name(),
        if a.resident { "resident" } else { "streamed" },
        a.optimizer,
        a.steps,
        gpu.info.adapter
    );
    let t0 = webtune::gpu::platform::now_ms();
    let results = bench_train(&gpu, source, &bc, |m| {
        eprintln!("[{:>6.0}s] {m} …", (webtune::gpu::platform::now_ms() - t0) / 1000.0)
    })
    .await
    .map_err(lib_err)?;
    let mb = |b: u64| b as f64 / 1e6;
    let cats = ["weights", "lora", "grads", "optimizer", "checkpoints", "activations", "scratch", "staging"];
    print!("{:<6} {:>9}", "mode", "peak MB");
    for c in cats {
        print!(" {:>11}", c);
    }
    println!(" {:>9} {:>8} {:>9} {:>8}", "step s", "tok/s", "RSS MB", "fused");
    for r in &results {
        print!("{:<6} {:>9.1}", r.mode, mb(r.peak_bytes));
        for c in cats {
            print!(" {:>11.1}", mb(r.peak_by_category.get(c).copied().unwrap_or(0)));
        }
        let rss = r.rss_peak_bytes.map(|b| format!("{:.0}", mb(b))).unwrap_or_else(|| "-".into());
        println!(
            " {:>9.2} {:>8.1} {:>9} {:>8}",
            r.step_s,
            r.tokens_per_s,
            rss,
            if r.fused_update { "yes" } else { "no" }
        );
    }
    let peak = |m: &str| results.iter().find(|r| r.mode == m).map(|r| mb(r.peak_bytes));
    let paper = paper_mb(&a.shape, a.seq);
    if let (Some(s), Some(b)) = (peak("mesp"), peak("mebp")) {
        println!("mesp / mebp peak: {:.2}", s / b);
    }
    if let Some((ps, pb)) = paper {
        println!("paper (iPhone 17 Pro, MLX, process footprint): MeSP {ps} MB, MeBP {pb} MB, ratio {:.2}", ps / pb);
    }
    println!("(MB = 10^6 bytes; peak = every live GPU buffer at the worst moment, frozen weights included only while resident)");
    for r in &results {
        // Seconds of the last step by kind of phase (the timeline's first sample closes the
        // previous step's last phase).
        let mut sums: Vec<(&str, f64)> = Vec::new();
        for w in r.timeline.windows(2) {
            let kind = w[1].phase.split(' ').next().unwrap_or("");
            let kind = if w[1].phase.starts_with("lm_head") { w[1].phase.as_str() } else { kind };
            match sums.iter_mut().find(|(k, _)| *k == kind) {
                Some(e) => e.1 += (w[1].t_ms - w[0].t_ms) / 1000.0,
                None => sums.push((kind, (w[1].t_ms - w[0].t_ms) / 1000.0)),
            }
        }
        let parts: Vec<String> = sums.iter().map(|(k, s)| format!("{k} {s:.1}")).collect();
        println!("{}: seconds by phase (last step): {}", r.mode, parts.join(", "));
    }
    if let Some(p) = a.json {
        let modes: serde_json::Map<String, serde_json::Value> =
            results.iter().map(|r| (r.mode.clone(), serde_json::to_value(r).unwrap_or_default())).collect();
        let v = serde_json::json!({
            "config": bc,
            "model": { "layers": cfg.layers, "hidden": cfg.hidden, "intermediate": cfg.intermediate, "heads": cfg.heads,
                       "kv_heads": cfg.kv_heads, "vocab": cfg.vocab },
            "adapter": gpu.info.adapter,
            "modes": modes,
            "paper_mb": paper.map(|(s, b)| serde_json::json!({ "mesp": s, "mebp": b })),
        });
        std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| Fail(1, format!("{}: {e}", p.display())))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

fn lib_err(e: webtune::error::Error) -> Fail {
    match e {
        webtune::error::Error::Gpu(g) => Fail(1, g.to_string()),
        other => Fail(2, other.to_string()),
    }
}

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

async fn save(gpu: &Gpu, trainer: &webtune::train::trainer::Trainer, out: &std::path::Path) -> Result<(), Fail> {
    use webtune::train::checkpoint::write_atomic;
    let ckpt = trainer.checkpoint(gpu).await.map_err(lib_err)?;
    let adapter = trainer.adapter(gpu).await.map_err(lib_err)?;
    let io = |p: std::path::PathBuf, e: std::io::Error| Fail(1, format!("{}: {e}", p.display()));
    // The adapter first, then the checkpoint: a checkpoint never points past the adapter on disk.
    let p = out.join("adapter_model.safetensors");
    write_atomic(&p, &adapter.to_safetensors_bytes()).map_err(|e| io(p.clone(), e))?;
    let p = out.join("adapter_config.json");
    write_atomic(&p, adapter.config_json().as_bytes()).map_err(|e| io(p.clone(), e))?;
    let p = out.join(CHECKPOINT_FILE);
    write_atomic(&p, &ckpt).map_err(|e| io(p.clone(), e))?;
    Ok(())
}

const CHECKPOINT_FILE: &str = "checkpoint.safetensors";

async fn train(a: TrainArgs) -> Result<(), Fail> {
    use std::io::IsTerminal;
    use webtune::train::trainer::{TrainConfig, Trainer};
    let ckpt = webtune::store::Checkpoint::open_dir(&a.model).map_err(input_err)?;
    webtune::model::layout::validate(&ckpt).map_err(input_err)?;
    let tok = webtune::data::tokenizer::Tokenizer::from_checkpoint(&ckpt).map_err(input_err)?;
    let text = std::fs::read_to_string(&a.data).map_err(|e| Fail(2, format!("{}: {e}", a.data.display())))?;
    let examples =
        webtune::data::dataset::load_jsonl(&text, &tok).map_err(|e| Fail(2, format!("{}: {e}", a.data.display())))?;
    let targets =
        webtune::model::layout::Proj::parse_list(&a.targets).map_err(|e| Fail(2, format!("--targets: {e}")))?;
    let config = TrainConfig {
        rank: a.rank,
        alpha: a.alpha.unwrap_or(2.0 * a.rank as f64),
        targets: targets.iter().map(|p| p.peft_name().to_string()).collect(),
        seq: a.seq,
        batch: a.batch,
        accum: a.accum,
        steps: a.steps,
        epochs: a.epochs.unwrap_or(TrainConfig::default().epochs),
        seed: a.seed,
        save_every: a.save_every,
        optimizer: a.optimizer.clone(),
        mezo_eps: a.mezo_eps,
        lr: a.lr,
        weight_decay: a.weight_decay,
        max_grad_norm: a.max_grad_norm,
        schedule: a.schedule.clone(),
        warmup_ratio: a.warmup_ratio,
    };
    let format =
        webtune::model::weights::WeightFormat::parse(&a.weights).map_err(|e| Fail(2, format!("--weights: {e}")))?;
    let gpu = gpu().await?;
    if let Some(mb) = a.memory_budget {
        if !(mb > 0.0 && mb.is_finite()) {
            return Err(Fail(2, format!("--memory-budget: {mb} (want a size in MB above 0)")));
        }
        gpu.alloc.set_budget(Some((mb * 1e6) as u64));
    }
    let model = if a.resident {
        webtune::model::Model::load_as(&gpu, &ckpt, format).map_err(lib_err)?
    } else {
        let src = std::sync::Arc::new(webtune::model::stream::CheckpointSource::new(ckpt.clone()));
        webtune::model::Model::streamed(&gpu, src, format).map_err(lib_err)?
    };
    let ckpt_path = a.out.join(CHECKPOINT_FILE);
    let mut trainer = if !a.fresh && ckpt_path.exists() {
        let bytes = std::fs::read(&ckpt_path).map_err(|e| Fail(1, format!("{}: {e}", ckpt_path.display())))?;
        let t = Trainer::resume(&gpu, &model, examples, config, &bytes, &ckpt_path.display().to_string())
            .map_err(lib_err)?;
        eprintln!("resuming from {} at step {}/{}", ckpt_path.display(), t.state.step, t.state.total_steps);
        t
    } else {
        Trainer::new(&gpu, &model, examples, config, None).map_err(lib_err)?
    };
    for w in &trainer.warnings {
        eprintln!("warning: {w}");
    }
    eprintln!(
        "training {} LoRA parameters ({} examples, {} steps) on {}",
        trainer.lora.params.iter().map(|(_, _, p)| p.a.numel() + p.b.numel()).sum::<usize>(),
        trainer.num_examples(),
        trainer.state.total_steps,
        gpu.info.adapter
    );
    let bar = if std::io::stderr().is_terminal() {
        let b = indicatif::ProgressBar::new(trainer.state.total_steps as u64);
        b.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed_precise}<{eta_precise}]")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        b.set_position(trainer.state.step as u64);
        Some(b)
    } else {
        None
    };
    let (mut tok_sum, mut ms_sum) = (0usize, 0.0f64);
    while !trainer.done() {
        let r = trainer.step(&gpu, &model).await.map_err(lib_err)?;
        if r.skipped {
            let msg = format!(
                "step {}/{} skipped: the loss or the gradients were not finite (loss {}); {} in a row",
                r.step + 1,
                r.total_steps,
                r.loss,
                trainer.state.bad_in_row
            );
            match &bar {
                Some(b) => b.println(msg),
                None => eprintln!("{msg}"),
            }
            continue;
        }
        tok_sum += r.tokens;
        ms_sum += r.ms;
        let tps = tok_sum as f64 / (ms_sum / 1000.0).max(1e-9);
        let left = (r.total_steps - r.step) as f64 * ms_sum
            / 1000.0
            / (tok_sum.max(1) as f64 / r.tokens.max(1) as f64).max(1.0);
        match &bar {
            Some(b) => {
                b.set_position(r.step as u64);
                b.set_message(format!("loss {:.4} lr {:.2e} {:.0} tok/s", r.loss, r.lr, tps));
            }
            None => eprintln!(
                "step {}/{} loss {:.6} lr {:.3e} {:.1} tok/s {:.2}s/step left {}",
                r.step,
                r.total_steps,
                r.loss,
                r.lr,
                tps,
                r.ms / 1000.0,
                fmt_secs(left)
            ),
        }
        let every = trainer.state.config.save_every;
        if (every > 0 && r.step % every == 0) || trainer.done() {
            save(&gpu, &trainer, &a.out).await?;
        }
    }
    if let Some(b) = &bar {
        b.finish();
    }
    if trainer.state.step == trainer.state.total_steps && trainer.state.losses.is_empty() {
        save(&gpu, &trainer, &a.out).await?;
    }
    let last = trainer.state.losses.last().copied().unwrap_or(f32::NAN);
    eprintln!("done: {} steps, final loss {last:.6}; adapter in {}", trainer.state.step, a.out.display());
    Ok(())
}

async fn generate(a: GenerateArgs) -> Result<(), Fail> {
    use std::io::Write;
    let ckpt = webtune::store::Checkpoint::open_dir(&a.model).map_err(input_err)?;
    webtune::model::layout::validate(&ckpt).map_err(input_err)?;
    let tok = webtune::data::tokenizer::Tokenizer::from_checkpoint(&ckpt).map_err(input_err)?;
    let prompt = if a.chat {
        let mut msgs = Vec::new();
        if let Some(s) = &a.system {
            msgs.push(webtune::data::tokenizer::Message { role: "system".into(), content: s.clone() });
        }
        msgs.push(webtune::data::tokenizer::Message { role: "user".into(), content: a.prompt.clone() });
        tok.apply_chat_template(&msgs, true).map_err(input_err)?
    } else {
        a.prompt.clone()
    };
    let ids = tok.encode(&prompt, !a.chat).map_err(input_err)?;
    let gpu = gpu().await?;
    let model = webtune::model::Model::load(&gpu, &ckpt).map_err(lib_err)?;
    let lora = match &a.adapter {
        Some(dir) => {
            let ad = webtune::formats::peft::Adapter::open_dir(dir).map_err(input_err)?;
            Some(webtune::model::lora::Lora::from_adapter(&gpu, &model.cfg, &ad).map_err(lib_err)?)
        }
        None => None,
    };
    let opts = webtune::generate::GenerateOptions {
        max_new_tokens: a.max_new_tokens,
        temperature: a.temperature,
        top_k: a.top_k,
        top_p: a.top_p,
        seed: a.seed,
        eos_ids: tok.eos_ids().to_vec(),
        merge: a.merge,
    };
    let mut dec = tok.stream_decoder(true);
    let mut stdout = std::io::stdout();
    let t0 = webtune::gpu::platform::now_ms();
    let mut failed = None;
    let out = webtune::generate::generate(&gpu, &model, lora.as_ref(), &ids, &opts, &mut |id| {
        match dec.push(id) {
            Ok(text) => {
                if !text.is_empty() {
                    let _ = write!(stdout, "{text}");
                    let _ = stdout.flush();
                }
            }
            Err(e) => failed = Some(e.to_string()),
        }
        true
    })
    .await
    .map_err(lib_err)?;
    println!();
    if let Some(e) = failed {
        return Err(Fail(1, format!("decoding: {e}")));
    }
    let secs = (webtune::gpu::platform::now_ms() - t0) / 1000.0;
    eprintln!(
        "{} prompt tokens, {} new tokens in {:.2}s ({:.2} tok/s)",
        ids.len(),
        out.len(),
        secs,
        out.len() as f64 / secs.max(1e-9)
    );
    Ok(())
}
