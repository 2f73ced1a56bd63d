//! The soak: 1,000 training steps natively, 300 in headless Chromium, on the fused path (AdamW
//! without clipping, batch 1; tests/memory.rs covers the unfused one). After a warm-up of 50
//! steps the GPU's live bytes return to the same value after every step, the peak does not
//! move, the wasm memory does not grow and the process's RSS grows by less than 16 MiB. The RSS,
//! the JS heap (Chromium's performance.memory) and the step times are printed, never asserted.
//! Its own file, so the browser run has its own time limit.

mod common;

use common::{both, fixtures, log, IN_BROWSER};
use webtune::data::dataset::Example;
use webtune::model::Model;
use webtune::train::trainer::{TrainConfig, Trainer};

fn config(steps: u32) -> TrainConfig {
    TrainConfig {
        rank: 4,
        alpha: 8.0,
        batch: 1,
        steps: Some(steps),
        seed: 3,
        save_every: 0,
        optimizer: "adamw".into(),
        lr: 1e-3,
        max_grad_norm: 0.0,
        schedule: "constant".into(),
        warmup_ratio: 0.0,
        ..TrainConfig::default()
    }
}

/// Steps of the soak: 1,000 natively, 300 in the browser.
const SOAK_STEPS: u32 = if IN_BROWSER { 300 } else { 1000 };
const WARMUP: u32 = 50;

async fn soak() {
    use webtune::platform::{js_heap_bytes, rss, wasm_memory_bytes};
    let gpu = webtune::kernels::testutil::test_gpu().await;
    let ckpt = fixtures::llama_bias().checkpoint(); // hidden 44, 3 layers, vocab 67
    let model = Model::load(&gpu, &ckpt).expect("the llama-bias model loads");
    let mut rng = webtune::base::rng::Rng::new(11);
    let examples: Vec<Example> = (0..9)
        .map(|line| {
            let n = 6 + rng.below(26) as usize;
            let input_ids: Vec<u32> = (0..n).map(|_| rng.below(67) as u32).collect();
            let labels = input_ids.iter().map(|&t| t as i32).collect();
            Example { input_ids, labels, line: line + 1 }
        })
        .collect();
    // AdamW without clipping, batch 1: updates fused into the backward (the accounting test
    // above covers the unfused path).
    let mut trainer = Trainer::new(&gpu, &model, examples, config(SOAK_STEPS), None).expect("a trainer");
    assert!(trainer.fused());
    let mut ms = Vec::new();
    let mut warm = None;
    while !trainer.done() {
        let r = trainer.step(&gpu, &model).await.expect("a step");
        gpu.sync().await.expect("sync");
        assert!(!r.skipped && r.loss.is_finite(), "step {}: loss {}", r.step, r.loss);
        ms.push(r.ms);
        let s = gpu.alloc.stats();
        if r.step == WARMUP {
            gpu.alloc.reset_peaks();
            warm = Some((s.live_total, wasm_memory_bytes(), rss(), js_heap_bytes()));
        } else if let Some((live, _, _, _)) = warm {
            assert_eq!(
                s.live_total, live,
                "step {}: live GPU bytes {} against {live} at step {WARMUP}",
                r.step, s.live_total
            );
        }
    }
    let (live, wasm0, rss0, heap0) = warm.expect("warmed up");
    let peak = gpu.alloc.stats().peak_total;
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let w = WARMUP as usize;
    log!(
        "soak: {SOAK_STEPS} steps; GPU live {live} B after every step from step {WARMUP} on, peak {peak} B; \
         step time {:.1} ms (steps {}-{}) then {:.1} ms (last 100)",
        mean(&ms[w..w + 100]),
        w + 1,
        w + 100,
        mean(&ms[ms.len() - 100..])
    );
    if let (Some(a), Some(b)) = (wasm0, wasm_memory_bytes()) {
        log!("soak: wasm memory {a} B at step {WARMUP}, {b} B at the end");
        assert_eq!(a, b, "wasm memory grew after the warm-up");
    }
    if let (Some(a), Some(b)) = (heap0, js_heap_bytes()) {
        log!("soak: JS heap {a} B at step {WARMUP}, {b} B at the end");
    }
    if let (Some(a), Some(b)) = (rss0, rss()) {
        log!("soak: RSS {a} B at step {WARMUP}, {b} B at the end");
        assert!(b < a + (16 << 20), "RSS grew from {a} B to {b} B after the warm-up");
    }
}
both!(soak_does_not_grow, soak());
