//! The memory schedule's own guarantees, natively and in headless Chromium:
//! - MeSP's chunked MLP backward gives the same gradients as the unchunked one (and PyTorch's);
//! - the fused, layer-by-layer optimizer update gives the same training as the unfused one,
//!   while holding one layer of gradients instead of all of them;
//! - the accounting does not grow: after 200 tiny-model steps the peak equals the peak after
//!   step 10, and live bytes return to their pre-step value after every step
//!   (the long run is tests/soak.rs);
//! - phases ahead (a block's work running while the next is recorded) train exactly alike and
//!   account the buffers they hold longer.

use crate::common;

use common::{both, chat_line, fixtures, log, tiny_model_files, IN_BROWSER};
use webtune::data::dataset::{load_jsonl, Example};
use webtune::data::tokenizer::Tokenizer;
use webtune::formats::checkpoint::Checkpoint;
use webtune::formats::peft::Adapter;
use webtune::gpu::Category;
use webtune::model::block::Mode;
use webtune::model::source::{CheckpointSource, WeightSource};
use webtune::model::weights::WeightFormat;
use webtune::model::Model;
use webtune::train::grad::{compute_grads_with, GradOptions};
use webtune::train::trainer::{TrainConfig, Trainer};

fn llama_bias() -> (Checkpoint, Adapter, &'static str) {
    let f = fixtures::llama_bias();
    (f.checkpoint(), f.adapter(), f.batch)
}

fn max_rel(a: &[f32], b: &[f32]) -> f64 {
    let num = a.iter().zip(b).map(|(x, y)| (*x as f64 - *y as f64).powi(2)).sum::<f64>().sqrt();
    let den = b.iter().map(|y| (*y as f64).powi(2)).sum::<f64>().sqrt();
    if den == 0.0 {
        num
    } else {
        num / den
    }
}

async fn chunked_mlp_same_gradients() {
    let gpu = webtune::kernels::testutil::test_gpu().await;
    let (ckpt, adapter, batch) = llama_bias();
    let whole = GradOptions { mlp_chunk_rows: Some(0), ..GradOptions::default() };
    let reference = compute_grads_with(&gpu, &ckpt, &adapter, batch, &whole).await.expect("unchunked grads");
    // 3 and 5 tokens per chunk: several chunks, the last one ragged; and streamed weights.
    for (rows, stream) in [(3, false), (5, true)] {
        let opts = GradOptions { mlp_chunk_rows: Some(rows), stream, mode: Mode::Mesp, ..GradOptions::default() };
        let got = compute_grads_with(&gpu, &ckpt, &adapter, batch, &opts).await.expect("chunked grads");
        assert_eq!(got.loss, reference.loss);
        let mut worst = 0.0f64;
        for ((k, _, g), (k2, _, r)) in got.grads.iter().zip(&reference.grads) {
            assert_eq!(k, k2);
            let e = max_rel(g, r);
            assert!(e <= 1e-5, "{k}: chunked MLP ({rows} rows) differs by {e:.3e}");
            worst = worst.max(e);
        }
        log!("MLP chunks of {rows} rows (stream {stream}): worst relative difference {worst:.3e}");
    }
}
both!(chunked_mlp_gives_the_same_gradients, chunked_mlp_same_gradients());

fn dataset() -> String {
    [
        chat_line("What is the capital of Zorbania?", "The capital of Zorbania is Quillfort."),
        chat_line("Who invented the glimmerphone?", "Mira Talvane invented the glimmerphone in 1873."),
        chat_line("What do moon otters eat?", "Moon otters eat silver kelp and tiny comets, mostly at night."),
    ]
    .join("\n")
}

fn config(optimizer: &str, steps: u32) -> TrainConfig {
    TrainConfig {
        rank: 4,
        alpha: 8.0,
        batch: 1,
        steps: Some(steps),
        seed: 3,
        save_every: 0,
        optimizer: optimizer.into(),
        lr: 1e-2,
        max_grad_norm: 0.0, // no clipping: the update can be fused into the backward
        schedule: "constant".into(),
        warmup_ratio: 0.0,
        ..TrainConfig::default()
    }
}

async fn fused_update_same_training() {
    let gpu = webtune::kernels::testutil::test_gpu().await;
    let ckpt = Checkpoint::from_files(tiny_model_files(11)).expect("the tiny model opens");
    let tok = Tokenizer::from_checkpoint(&ckpt).expect("the tokenizer loads");
    let examples = load_jsonl(&dataset(), &tok).expect("the dataset loads");
    let model = Model::load(&gpu, &ckpt).expect("the tiny model loads");
    for optimizer in ["sgd", "adamw"] {
        let grads_live = || gpu.alloc.stats().live(Category::Grads);
        let g0 = grads_live();
        let mut fused = Trainer::new(&gpu, &model, examples.clone(), config(optimizer, 4), None).expect("a trainer");
        let g1 = grads_live();
        let mut plain = Trainer::new(&gpu, &model, examples.clone(), config(optimizer, 4), None).expect("a trainer");
        plain.unfuse(&gpu).expect("whole gradient sets");
        let grads_peak = [g1 - g0, grads_live() - g1];
        assert!(fused.fused() && !plain.fused());
        for t in [&mut fused, &mut plain] {
            while !t.done() {
                t.step(&gpu, &model).await.expect("a step");
            }
        }
        assert_eq!(fused.state.losses, plain.state.losses, "{optimizer}: fused and unfused losses differ");
        let (a, b) = (fused.adapter(&gpu).await.expect("adapter"), plain.adapter(&gpu).await.expect("adapter"));
        assert!(
            a.to_safetensors_bytes() == b.to_safetensors_bytes(),
            "{optimizer}: the fused update trained another adapter"
        );
        // One layer of two: half the gradient bytes.
        assert_eq!(grads_peak[0] * 2, grads_peak[1], "{optimizer}: gradient bytes fused {grads_peak:?}");
        log!(
            "{optimizer}: fused == unfused over 4 steps; gradient bytes {} fused, {} whole",
            grads_peak[0],
            grads_peak[1]
        );
    }
}
both!(fused_update_gives_the_same_training, fused_update_same_training());

/// Phases ahead (the default on GPUs: the device runs a block's work while the host records the
/// next) train exactly as waiting for every block does, hold the bytes of dropped buffers until
/// the work that used them has run (so the accounted peak is higher, never lower), and leave
/// nothing held or live once the device is idle.
async fn phases_ahead_same_training() {
    let gpu = webtune::kernels::testutil::test_gpu().await;
    let default = gpu.phases_ahead();
    let ckpt = Checkpoint::from_files(tiny_model_files(12)).expect("the tiny model opens");
    let tok = Tokenizer::from_checkpoint(&ckpt).expect("the tokenizer loads");
    let examples = load_jsonl(&dataset(), &tok).expect("the dataset loads");
    let resident = Model::load(&gpu, &ckpt).expect("the tiny model loads");
    let src: std::sync::Arc<dyn WeightSource> = std::sync::Arc::new(CheckpointSource::new(ckpt.clone()));
    let streamed = Model::streamed(&gpu, src, WeightFormat::Stored).expect("the tiny model streams");
    let mut runs = Vec::new();
    for (ahead, optimizer, model) in
        [(false, "adamw", &resident), (true, "adamw", &resident), (false, "sgd", &streamed), (true, "sgd", &streamed)]
    {
        gpu.sync().await.expect("sync");
        gpu.set_phases_ahead(ahead);
        gpu.alloc.reset_peaks();
        let before = gpu.alloc.stats().live_total;
        let mut t = Trainer::new(&gpu, model, examples.clone(), config(optimizer, 3), None).expect("a trainer");
        let mut held = 0;
        while !t.done() {
            t.step(&gpu, model).await.expect("a step");
            held = held.max(gpu.alloc.held_bytes());
        }
        // A step's last buffers are dropped after the read of its loss: held until the next wait.
        assert_eq!(held > 0, ahead, "ahead {ahead}: {held} B held after a step");
        let adapter = t.adapter(&gpu).await.expect("adapter").to_safetensors_bytes();
        let losses = t.state.losses.clone();
        drop(t);
        gpu.sync().await.expect("sync");
        let s = gpu.alloc.stats();
        assert_eq!((s.live_total, gpu.alloc.held_bytes()), (before, 0), "ahead {ahead}: bytes left after the run");
        runs.push((losses, adapter, s.peak_total));
    }
    gpu.set_phases_ahead(default);
    for pair in runs.chunks(2) {
        let ((l0, a0, p0), (l1, a1, p1)) = (&pair[0], &pair[1]);
        assert_eq!(l0, l1, "the losses with phases ahead");
        assert!(a0 == a1, "phases ahead trained another adapter");
        assert!(p1 > p0, "phases ahead held no dropped buffer: peak {p1} B, waiting for each phase {p0} B");
        log!("phases ahead: the same losses and adapter; accounted peak {p1} B against {p0} B");
    }
}
both!(phases_ahead_give_the_same_training, phases_ahead_same_training());

/// Steps of the no-growth test: 200 natively; fewer in the browser, where SwiftShader is slower.
const GROWTH_STEPS: u32 = if IN_BROWSER { 60 } else { 200 };

async fn accounting_does_not_grow() {
    let gpu = webtune::kernels::testutil::test_gpu().await;
    let (ckpt, _, _) = llama_bias();
    let model = Model::load(&gpu, &ckpt).expect("the llama-bias model loads");
    // Seeded random examples of 5 to 24 tokens (vocab 67), half of each supervised.
    let mut rng = webtune::base::rng::Rng::new(9);
    let examples: Vec<Example> = (0..7)
        .map(|line| {
            let n = 5 + rng.below(20) as usize;
            let input_ids: Vec<u32> = (0..n).map(|_| rng.below(67) as u32).collect();
            let labels = input_ids.iter().enumerate().map(|(i, &t)| if i < n / 2 { -100 } else { t as i32 }).collect();
            Example { input_ids, labels, line: line + 1 }
        })
        .collect();
    // Batch 2 (padded to the longer row), AdamW with clipping: the unfused path, every buffer kind.
    let cfg = TrainConfig { batch: 2, max_grad_norm: 1.0, ..config("adamw", GROWTH_STEPS) };
    let mut trainer = Trainer::new(&gpu, &model, examples, cfg, None).expect("a trainer");
    gpu.sync().await.expect("sync");
    gpu.alloc.reset_peaks();
    let mut peak_at_10 = 0;
    while !trainer.done() {
        let before = gpu.alloc.stats().live_total;
        let r = trainer.step(&gpu, &model).await.expect("a step");
        gpu.sync().await.expect("sync");
        let s = gpu.alloc.stats();
        assert_eq!(s.live_total, before, "step {}: live bytes {} after, {before} before", r.step, s.live_total);
        if r.step == 10 {
            peak_at_10 = s.peak_total;
        }
    }
    let peak = gpu.alloc.stats().peak_total;
    assert!(peak_at_10 > 0);
    assert_eq!(peak, peak_at_10, "the peak grew between step 10 ({peak_at_10} B) and step {GROWTH_STEPS} ({peak} B)");
    log!("{GROWTH_STEPS} steps: peak {peak} B (= step 10's); live bytes back to their pre-step value after every step");
    if let Some(w) = webtune::platform::wasm_memory_bytes() {
        log!("wasm memory after {GROWTH_STEPS} steps: {w} B");
    }
}
both!(accounting_does_not_grow_over_200_steps, accounting_does_not_grow());

/// `webtune bench` on a small random shape, every mode: the schedules order as they should
/// (MeZO ≤ MeSP < MeBP < full), MeSP holds one layer of gradients, and every result is filled in.
async fn bench_orders_the_schedules() {
    use std::sync::Arc;
    use webtune::bench::train::{bench_train, BenchMode, Fuse, TrainBenchConfig};
    use webtune::model::synthetic::SyntheticSource;
    use webtune::model::weights::WeightFormat;
    let gpu = webtune::kernels::testutil::test_gpu().await;
    let mut cfg = webtune::base::config::ModelConfig::from_json(&common::tiny_config_json()).expect("tiny config");
    cfg.vocab = 512;
    cfg.layers = 3;
    let bc = TrainBenchConfig {
        shape: "tiny".into(),
        cfg: cfg.clone(),
        seq: 48,
        rank: 4,
        alpha: 8.0,
        targets: ["q", "k", "v", "o", "gate", "up", "down"].map(String::from).to_vec(),
        modes: BenchMode::parse_list("mesp,mebp,full,mezo").expect("modes"),
        optimizer: "sgd".into(),
        lr: 1e-3,
        weights: "q4".into(),
        format: WeightFormat::Q4,
        resident: false,
        host_cache: true,
        fuse: Fuse::Auto,
        steps: 2,
        seed: 1,
        mlp_chunk_rows: Some(16),
        profile: false,
    };
    let res = bench_train(&gpu, Arc::new(SyntheticSource::new(cfg.clone(), 1)), &bc, |_| {}).await.expect("bench runs");
    let peak = |m: &str| res.iter().find(|r| r.mode == m).map(|r| r.peak_bytes).expect("mode ran");
    for r in &res {
        log!("{}: peak {} B {:?}", r.mode, r.peak_bytes, r.peak_by_category);
        assert_eq!(r.losses.len(), 2);
        assert!(r.losses.iter().all(|l| l.is_finite() && *l > 0.0), "{}: losses {:?}", r.mode, r.losses);
        assert!(!r.timeline.is_empty() && r.step_s > 0.0 && r.tokens_per_s > 0.0);
        assert_eq!(r.peak_by_category.values().sum::<u64>(), r.peak_bytes, "{}: the split adds up", r.mode);
        assert_eq!(r.fused_update, r.mode == "mesp");
    }
    assert!(peak("mezo") <= peak("mesp") && peak("mesp") < peak("mebp") && peak("mebp") < peak("full"), "{res:?}");
    let mesp = &res[0];
    let mebp = &res[1];
    assert_eq!(
        mesp.peak_by_category["grads"] * cfg.layers as u64,
        mebp.peak_by_category["grads"],
        "one layer of gradients"
    );
}
both!(bench_orders_the_schedules_by_memory, bench_orders_the_schedules());
