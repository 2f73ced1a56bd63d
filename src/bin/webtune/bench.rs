//! `webtune bench`: training steps of each memory schedule at a model shape (peak memory by
//! category, step time, tokens/s); `webtune bench kernels`: single kernels, beside numpy's timings when given.

use crate::{gpu, input_err, lib_err, Fail};
use clap::Subcommand;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct BenchTrainArgs {
    /// A preset (qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, smollm2-135m: random weights at the
    /// published shape), a model's config.json (random weights at its shape) or a Hugging Face
    /// model directory
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
    /// Print where each step's time goes, kernel by kernel (timestamp queries where the
    /// adapter has them, timed submissions otherwise)
    #[arg(long)]
    profile: bool,
    /// Write the results as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Subcommand)]
pub enum BenchCmd {
    /// Time each kernel at the SmolLM2-135M and Qwen2.5-0.5B shapes.
    Kernels(KernelsArgs),
    /// Greedy generation at a model shape (random weights, a LoRA adapter applied unmerged):
    /// prefill time, then milliseconds and tokens per second of decoding.
    Decode(DecodeArgs),
}

#[derive(clap::Args)]
pub struct DecodeArgs {
    /// A preset (random weights at the published shape), a model's config.json (random weights
    /// at its shape) or a Hugging Face model directory
    #[arg(long, default_value = "smollm2-135m")]
    shape: String,
    /// Prompt tokens (prefilled at once)
    #[arg(long, default_value_t = 32)]
    prompt: usize,
    /// New tokens, one at a time (the first two are not timed)
    #[arg(long, default_value_t = 34)]
    tokens: usize,
    #[arg(long, default_value_t = 8)]
    rank: usize,
    /// Frozen weights on the GPU: bf16, q8 or q4 (stored = as in the files)
    #[arg(long, default_value = "bf16")]
    weights: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print where a decode step's time goes, kernel by kernel
    #[arg(long)]
    profile: bool,
    /// Write the results as JSON here
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct KernelsArgs {
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
}

/// The weights `--shape` names: a model directory's, or random ones at a config.json's shape or a
/// preset's.
fn bench_source(shape: &str, seed: u64) -> Result<std::sync::Arc<dyn webtune::model::source::WeightSource>, Fail> {
    use webtune::base::config::ModelConfig;
    use webtune::model::source::CheckpointSource;
    use webtune::model::synthetic::SyntheticSource;
    let path = std::path::Path::new(shape);
    if path.is_dir() {
        let ckpt = webtune::formats::checkpoint::Checkpoint::open_dir(path).map_err(input_err)?;
        webtune::formats::checkpoint::validate(&ckpt).map_err(input_err)?;
        return Ok(std::sync::Arc::new(CheckpointSource::new(ckpt)));
    }
    let cfg = if path.is_file() {
        let text = std::fs::read_to_string(path).map_err(|e| Fail(2, format!("--shape {shape}: {e}")))?;
        ModelConfig::from_json(&text).map_err(|e| Fail(2, format!("--shape {shape}: {e}")))?
    } else {
        ModelConfig::preset(shape).map_err(|e| Fail(2, format!("--shape: {e}")))?
    };
    Ok(std::sync::Arc::new(SyntheticSource::new(cfg, seed)))
}

pub async fn bench_train(a: BenchTrainArgs) -> Result<(), Fail> {
    use webtune::bench::train::{bench_train, paper_mb, BenchMode, TrainBenchConfig};
    let format =
        webtune::model::weights::WeightFormat::parse(&a.weights).map_err(|e| Fail(2, format!("--weights: {e}")))?;
    let modes = BenchMode::parse_list(&a.modes).map_err(|e| Fail(2, format!("--modes: {e}")))?;
    let fuse = a.fuse.parse().map_err(|e| Fail(2, format!("--fuse: {e}")))?;
    let source = bench_source(&a.shape, a.seed)?;
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
        profile: a.profile,
    };
    let gpu = gpu().await?;
    eprintln!(
        "{} ({} layers, hidden {}, vocab {}), seq {}, rank {} on {}, {} weights {}, {}, {} step(s) per mode on {} ({})",
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
        gpu.info.adapter,
        if gpu.phases_ahead() { "phases ahead" } else { "waiting at each phase" }
    );
    let t0 = webtune::platform::now_ms();
    let results =
        bench_train(&gpu, source, &bc, |m| eprintln!("[{:>6.0}s] {m} …", (webtune::platform::now_ms() - t0) / 1000.0))
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
    for r in &results {
        for p in &r.profiles {
            println!("\n{} step {}: {:.0} ms, {} dispatches", r.mode, p.step + 1, p.wall_ms, p.profile.calls());
            print!("{}", p.profile.table(p.wall_ms));
        }
    }
    if let Some(p) = a.json {
        let modes: serde_json::Map<String, serde_json::Value> =
            results.iter().map(|r| (r.mode.clone(), serde_json::to_value(r).unwrap_or_default())).collect();
        let v = serde_json::json!({
            "config": bc,
            "model": { "layers": cfg.layers, "hidden": cfg.hidden, "intermediate": cfg.intermediate, "heads": cfg.heads,
                       "kv_heads": cfg.kv_heads, "vocab": cfg.vocab },
            "adapter": gpu.info.adapter,
            "phases_ahead": gpu.phases_ahead(),
            "modes": modes,
            "paper_mb": paper.map(|(s, b)| serde_json::json!({ "mesp": s, "mebp": b })),
        });
        std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| Fail(1, format!("{}: {e}", p.display())))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

pub async fn bench_kernels(a: KernelsArgs) -> Result<(), Fail> {
    let KernelsArgs { tokens, rank, reps, numpy, json } = a;
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
        let cfg = webtune::base::config::ModelConfig::preset(name).map_err(input_err)?;
        // The variant the autotune picks for this model ("*" below).
        webtune::kernels::tune(&gpu, &cfg, tokens, webtune::gpu::DType::BF16, &mut Default::default())
            .await
            .map_err(lib_err)?;
        let t = webtune::bench::bench_matmuls(&gpu, name, &cfg, tokens, rank, reps)
            .await
            .map_err(|e| Fail(1, e.to_string()))?;
        all.extend(t);
        let t = webtune::bench::bench_ops(&gpu, name, &cfg, tokens, reps).await.map_err(|e| Fail(1, e.to_string()))?;
        all.extend(t);
    }
    println!(
        "{:<14} {:<44} {:>16} {:>9} {:>9} {:>12}",
        "shape", "kernel (* = chosen)", "M×K×N", "ms", "GFLOP/s", "numpy GFLOP/s"
    );
    for t in &all {
        let np = numpy
            .as_ref()
            .and_then(|v| v.get(&t.dims))
            .and_then(|v| v.get("gflops"))
            .and_then(|v| v.as_f64())
            .map(|g| format!("{g:.1}"))
            .unwrap_or_else(|| "-".into());
        println!("{:<14} {:<44} {:>16} {:>9.3} {:>9.2} {:>12}", t.shape, t.kernel, t.dims, t.ms, t.gflops, np);
    }
    if let Some(p) = json {
        let v = serde_json::json!({ "adapter": gpu.info.adapter, "tokens": tokens, "rank": rank, "kernels": all, "numpy": numpy });
        std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| Fail(1, format!("{}: {e}", p.display())))?;
    }
    Ok(())
}

pub async fn bench_decode(a: DecodeArgs) -> Result<(), Fail> {
    use webtune::bench::decode::{bench_decode, DecodeBenchConfig};
    let format =
        webtune::model::weights::WeightFormat::parse(&a.weights).map_err(|e| Fail(2, format!("--weights: {e}")))?;
    let source = bench_source(&a.shape, a.seed)?;
    let bc = DecodeBenchConfig {
        shape: a.shape.clone(),
        prompt_tokens: a.prompt,
        new_tokens: a.tokens,
        rank: a.rank,
        weights: format.name().into(),
        format,
        seed: a.seed,
        profile: a.profile,
    };
    let gpu = gpu().await?;
    eprintln!(
        "{}: {} prompt tokens, {} new (greedy, LoRA rank {} unmerged), {} weights, on {}",
        a.shape,
        a.prompt,
        a.tokens,
        a.rank,
        format.name(),
        gpu.info.adapter
    );
    let r = bench_decode(&gpu, source, &bc).await.map_err(lib_err)?;
    println!(
        "prefill {} tokens: {:.0} ms; decode: {:.1} ms/token, {:.2} tokens/s (over {} tokens)",
        a.prompt,
        r.prefill_ms,
        r.ms_per_token,
        r.tokens_per_s,
        a.tokens - 2
    );
    if let Some((wall, p)) = &r.profile {
        println!("\n{} decode steps: {:.0} ms, {} dispatches", a.tokens - 2, wall, p.calls());
        print!("{}", p.table(*wall));
    }
    if let Some(p) = a.json {
        let v = serde_json::json!({ "config": bc, "adapter": gpu.info.adapter, "result": r });
        std::fs::write(&p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| Fail(1, format!("{}: {e}", p.display())))?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
