//! The trainer on a tiny random Llama with SmolLM2's tokenizer (tests/common), natively
//! (lavapipe) and in headless Chromium (WebGPU on SwiftShader): a small chat dataset is
//! tokenized with the real tokenizer and chat template, three optimizer steps lower the loss,
//! and a checkpoint taken in memory resumes to the same next loss.
//!
//! Natively the test prints `NATIVE_TRAIN_LOSS name=value` lines (the loss of each step and a
//! hash of one example's token ids); scripts/test.sh hands them to the browser build in
//! `WEBTUNE_NATIVE_LOSSES`, and the browser run checks its losses against them within 1e-5
//! relative and its token ids exactly.

use crate::common;

use common::{both, chat_line, ids_hash, log, native_value, tiny_model_files, IN_BROWSER};
use webtune::data::dataset::load_jsonl;
use webtune::data::tokenizer::Tokenizer;
use webtune::formats::checkpoint::Checkpoint;
use webtune::model::Model;
use webtune::train::trainer::{TrainConfig, Trainer};

/// A native value to compare with (browser only), or print one for the browser run (native only).
fn hand_over(name: &str, value: f64, rtol: f64) {
    if !IN_BROWSER {
        common::hand_over_native("NATIVE_TRAIN_LOSS", name, value);
        return;
    }
    match native_value(name) {
        Some(native) => {
            let e = if native == value { 0.0 } else { ((value - native) / native).abs() };
            log!("{name}: browser {value} native {native} relative difference {e:.3e}");
            assert!(e <= rtol, "{name}: browser {value} differs from native {native} by {e:.3e} (> {rtol:e})");
        }
        None => log!("{name}: browser {value} (no native value handed over in WEBTUNE_NATIVE_LOSSES)"),
    }
}

fn dataset() -> String {
    [
        chat_line("What is the capital of Zorbania?", "The capital of Zorbania is Quillfort."),
        chat_line("Who invented the glimmerphone?", "Mira Talvane invented the glimmerphone in 1873."),
        chat_line("What do moon otters eat?", "Moon otters eat silver kelp and tiny comets."),
    ]
    .join("\n")
}

fn config() -> TrainConfig {
    TrainConfig {
        rank: 8,
        alpha: 16.0,
        batch: 3, // every step sees the whole dataset, so the loss must go down
        steps: Some(3),
        seed: 1,
        save_every: 0,
        lr: 1e-2,
        schedule: "constant".into(),
        warmup_ratio: 0.0,
        ..TrainConfig::default()
    }
}

async fn tiny_model_trains() {
    let gpu = webtune::kernels::testutil::shared_test_gpu().await;
    let ckpt = Checkpoint::from_files(tiny_model_files(7)).expect("the tiny model opens");
    webtune::formats::checkpoint::validate(&ckpt).expect("the tiny model has every tensor");
    let tok = Tokenizer::from_checkpoint(&ckpt).expect("the tokenizer loads");
    let examples = load_jsonl(&dataset(), &tok).expect("the dataset loads");
    assert_eq!(examples.len(), 3);

    // The rendered example: ends with the answer and <|im_end|> (id 2), which take the loss.
    let e = &examples[0];
    let text = tok.decode(&e.input_ids, false).expect("decodes");
    assert!(text.ends_with("<|im_start|>assistant\nThe capital of Zorbania is Quillfort.<|im_end|>\n"), "{text:?}");
    let supervised: Vec<u32> = e.labels.iter().filter(|&&l| l >= 0).map(|&l| l as u32).collect();
    assert_eq!(tok.decode(&supervised, false).expect("decodes"), "The capital of Zorbania is Quillfort.<|im_end|>");
    let mut all = e.input_ids.clone();
    all.extend(e.labels.iter().map(|&l| l as u32));
    hand_over("tiny-train-example0-ids-hash", ids_hash(&all) as f64, 0.0);

    let model = Model::load(&gpu, &ckpt).expect("the tiny model loads");
    let mut trainer = Trainer::new(&gpu, &model, examples.clone(), config(), None).expect("a trainer");
    let mut losses = Vec::new();
    let mut saved = None;
    while !trainer.done() {
        if trainer.state.step == 2 {
            saved = Some(trainer.checkpoint(&gpu).await.expect("a checkpoint"));
        }
        let r = trainer.step(&gpu, &model).await.expect("a step");
        log!("step {}/{}: loss {} ({} tokens, {:.0} ms)", r.step, r.total_steps, r.loss, r.tokens, r.ms);
        assert!(r.loss.is_finite() && r.loss > 0.0, "step {}: loss {}", r.step, r.loss);
        losses.push(r.loss);
    }
    assert_eq!(losses.len(), 3);
    for (i, w) in losses.windows(2).enumerate() {
        assert!(w[1] < w[0] * 1.02, "step {}: loss {} after {} (losses {losses:?})", i + 2, w[1], w[0]);
    }
    assert!(losses[2] < 0.9 * losses[0], "two updates barely moved the loss: {losses:?}");
    assert_eq!(trainer.state.losses, losses);
    for (i, &l) in losses.iter().enumerate() {
        hand_over(&format!("tiny-train-step{}", i + 1), l as f64, 1e-5);
    }

    // A checkpoint taken after step 2 resumes to step 3's loss (bit for bit on the same device).
    let bytes = saved.expect("saved after step 2");
    let mut resumed =
        Trainer::resume(&gpu, &model, examples, config(), &bytes, "in-memory checkpoint").expect("resumes");
    assert_eq!(resumed.state.step, 2);
    assert_eq!(resumed.state.losses, losses[..2]);
    let r = resumed.step(&gpu, &model).await.expect("a step after resuming");
    assert_eq!(r.loss, losses[2], "the resumed step's loss differs from the uninterrupted one");
    let (a, b) = (trainer.adapter(&gpu).await.expect("adapter"), resumed.adapter(&gpu).await.expect("adapter"));
    assert!(a.to_safetensors_bytes() == b.to_safetensors_bytes(), "the resumed adapter differs");
}

both!(tiny_model_trains_and_resumes, tiny_model_trains());
