//! Generation with a KV cache on the committed fixtures (tests/fixtures, scripts/make-fixtures.py),
//! natively (lavapipe) and in headless Chromium (SwiftShader):
//!
//! - the cached decode's logits at every step equal those of a full forward without a cache
//!   (`logits_last`, through the training block), and greedy tokens agree;
//! - a prompt fed in pieces (n > 1 new tokens at p0 > 0) gives the same logits as in one piece;
//! - LoRA merged into the weights gives the same logits and greedy tokens as unmerged;
//! - seeded sampling is reproducible, top_k = 1 is greedy, EOS and cancel stop generation;
//! - `logits_last` agrees with the training loss: −log_softmax at the label equals
//!   `Model::loss_and_grads` of a one-row batch whose only label is that token.
//!
//! With `.cache/models/smollm2-135m-instruct/` and tests/fixtures/smollm2/greedy.json, the ignored
//! `smollm2_greedy_matches_transformers` compares greedy ids with transformers' (native only).

use crate::common;

use common::both;
use common::fixtures::{llama_bias, llama_tiny, qwen2_tiny, Fixture};
use webtune::formats::batch::Batch;
use webtune::generate::{argmax, generate, logits_last, Decoder, GenerateOptions};
use webtune::gpu::Gpu;
use webtune::model::lora::Lora;
use webtune::model::Model;

struct Loaded {
    gpu: std::rc::Rc<Gpu>,
    model: Model,
    lora: Lora,
    /// Row 2 of batch.json: no padding.
    row: Vec<u32>,
}

async fn load(f: &Fixture) -> Loaded {
    let gpu = webtune::kernels::testutil::shared_test_gpu().await;
    let ckpt = f.checkpoint();
    let model = Model::load(&gpu, &ckpt).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let adapter = f.adapter();
    let lora = Lora::from_adapter(&gpu, &model.cfg, &adapter).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let batch = Batch::from_json(f.batch, model.cfg.vocab).unwrap_or_else(|e| panic!("{}: {e}", f.name));
    let row = batch.input_ids[2 * batch.seq..3 * batch.seq].to_vec();
    Loaded { gpu, model, lora, row }
}

/// ‖a − b‖ / ‖b‖
fn rel(a: &[f32], b: &[f32]) -> f64 {
    let b64: Vec<f64> = b.iter().map(|&x| x as f64).collect();
    webtune::kernels::testutil::rel_err(a, &b64)
}

fn assert_logits(what: &str, got: &[f32], want: &[f32], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: logits length");
    let e = rel(got, want);
    assert!(e <= tol, "{what}: relative difference {e:.3e} > {tol:.0e}");
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions { max_new_tokens: n, ..Default::default() }
}

async fn run(l: &Loaded, lora: Option<&Lora>, prompt: &[u32], opts: &GenerateOptions) -> Vec<u32> {
    generate(&l.gpu, &l.model, lora, prompt, opts, &mut |_| true).await.expect("generate")
}

/// Cached decode against full forwards, step by step, with and without the adapter; then
/// `generate` must give the same greedy tokens.
async fn cached_matches_uncached(f: Fixture) {
    let l = load(&f).await;
    let (gpu, model) = (&l.gpu, &l.model);
    let prompt = &l.row[..5];
    let steps = 12;
    for (which, lora) in [("lora", Some(&l.lora)), ("base", None)] {
        let mut dec = Decoder::new(gpu, model, lora, prompt.len() + steps, false).expect("decoder");
        let mut seq = prompt.to_vec();
        let mut logits = dec.forward(gpu, prompt).await.expect("prefill");
        let mut worst = 0.0f64;
        for step in 0..steps {
            let full = logits_last(gpu, model, lora, &seq).await.expect("logits_last");
            assert_logits(&format!("{} {which} step {step}", f.name), &logits, &full, 1e-4);
            worst = worst.max(rel(&logits, &full));
            let tok = argmax(&logits) as u32;
            assert_eq!(tok, argmax(&full) as u32, "{} {which} step {step}: greedy token", f.name);
            seq.push(tok);
            if step + 1 < steps {
                logits = dec.forward(gpu, &[tok]).await.expect("decode");
            }
        }
        let got = run(&l, lora, prompt, &greedy(steps)).await;
        assert_eq!(got, seq[prompt.len()..], "{} {which}: generate vs step-by-step greedy", f.name);
        println!("{} {which}: {steps} steps, worst relative logit difference {worst:.2e}", f.name);
    }
}

/// The row fed in pieces of 4, 1, 3 and the rest equals feeding it at once, at every piece's end.
async fn chunked_prefill(f: Fixture) {
    let l = load(&f).await;
    let (gpu, model) = (&l.gpu, &l.model);
    let mut dec = Decoder::new(gpu, model, Some(&l.lora), l.row.len(), false).expect("decoder");
    let mut p0 = 0;
    for piece in [4, 1, 3, l.row.len() - 8] {
        let got = dec.forward(gpu, &l.row[p0..p0 + piece]).await.expect("forward");
        p0 += piece;
        let want = logits_last(gpu, model, Some(&l.lora), &l.row[..p0]).await.expect("logits_last");
        assert_logits(&format!("{} after {p0} tokens in pieces", f.name), &got, &want, 1e-4);
    }
    assert_eq!(dec.len(), l.row.len());
    assert!(dec.forward(gpu, &[1]).await.is_err(), "{}: a full cache must refuse more tokens", f.name);
}

/// LoRA folded into f32 weights: same logits (1e-4) and the same greedy tokens.
async fn merged_matches_unmerged(f: Fixture) {
    let l = load(&f).await;
    let (gpu, model) = (&l.gpu, &l.model);
    let prompt = &l.row[..6];
    let steps = 10;
    let mut plain = Decoder::new(gpu, model, Some(&l.lora), prompt.len() + steps, false).expect("decoder");
    let mut merged = Decoder::new(gpu, model, Some(&l.lora), prompt.len() + steps, true).expect("merged decoder");
    let (mut a, mut b) = (plain.forward(gpu, prompt).await.unwrap(), merged.forward(gpu, prompt).await.unwrap());
    for step in 0..steps {
        assert_logits(&format!("{} merged step {step}", f.name), &b, &a, 1e-4);
        let tok = argmax(&a) as u32;
        a = plain.forward(gpu, &[tok]).await.unwrap();
        b = merged.forward(gpu, &[tok]).await.unwrap();
    }
    let want = run(&l, Some(&l.lora), prompt, &greedy(steps)).await;
    let got = run(&l, Some(&l.lora), prompt, &GenerateOptions { merge: true, ..greedy(steps) }).await;
    assert_eq!(got, want, "{}: merged vs unmerged greedy tokens", f.name);
}

/// Seeded sampling repeats; top_k = 1 is greedy; EOS and cancel stop generation.
async fn sampling_eos_cancel(f: Fixture) {
    let l = load(&f).await;
    let prompt = &l.row[..4];
    let lora = Some(&l.lora);
    let sampled =
        GenerateOptions { max_new_tokens: 16, temperature: 1.3, top_k: 20, top_p: 0.95, seed: 7, ..Default::default() };
    let a = run(&l, lora, prompt, &sampled).await;
    let b = run(&l, lora, prompt, &sampled).await;
    assert_eq!(a, b, "{}: the same seed must give the same tokens", f.name);
    assert_eq!(a.len(), 16);
    let c = run(&l, lora, prompt, &GenerateOptions { seed: 8, ..sampled.clone() }).await;
    println!("{}: seed 7 {a:?}, seed 8 {c:?}", f.name);

    let g = run(&l, lora, prompt, &greedy(16)).await;
    let k1 = run(&l, lora, prompt, &GenerateOptions { top_k: 1, ..sampled.clone() }).await;
    assert_eq!(k1, g, "{}: top_k 1 vs greedy", f.name);

    // EOS: stop right after the first occurrence of greedy token 5, returning it.
    let eos = g[5];
    let first = g.iter().position(|&t| t == eos).unwrap_or(5);
    let stopped = run(&l, lora, prompt, &GenerateOptions { eos_ids: vec![999_999, eos], ..greedy(16) }).await;
    assert_eq!(stopped, g[..=first], "{}: stop at EOS", f.name);

    // Cancel after 3 tokens; every token was streamed.
    let mut seen = vec![];
    let opts = greedy(16);
    let out = generate(&l.gpu, &l.model, lora, prompt, &opts, &mut |t| {
        seen.push(t);
        seen.len() < 3
    })
    .await
    .expect("generate");
    assert_eq!(out, g[..3], "{}: cancel", f.name);
    assert_eq!(seen, out);

    // Bad input is an error, not a panic.
    let bad = generate(&l.gpu, &l.model, lora, &[l.model.cfg.vocab as u32], &opts, &mut |_| true).await;
    assert!(bad.is_err(), "{}: an id past the vocabulary must be refused", f.name);
    assert!(generate(&l.gpu, &l.model, lora, &[], &opts, &mut |_| true).await.is_err());
    assert!(run(&l, lora, prompt, &greedy(0)).await.is_empty());
}

/// −log_softmax(logits_last(row[..T−1]))[row[T−1]] equals the training loss of the one-row batch
/// whose only label is row[T−1].
async fn logits_match_training_loss(f: Fixture) {
    let l = load(&f).await;
    let (gpu, model) = (&l.gpu, &l.model);
    let t = l.row.len();
    let target = l.row[t - 1] as usize;
    let logits = logits_last(gpu, model, Some(&l.lora), &l.row[..t - 1]).await.expect("logits_last");
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = m + logits.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
    let nll = lse - logits[target] as f64;
    let mut labels = vec![-100i64; t];
    labels[t - 1] = target as i64;
    let json = serde_json::json!({ "input_ids": [l.row.clone()], "labels": [labels] }).to_string();
    let batch = Batch::from_json(&json, model.cfg.vocab).expect("batch");
    let input = model.prepare(gpu, &batch).expect("prepare");
    let loss = model.loss_and_grads(gpu, &l.lora, None, &input).await.expect("loss") as f64;
    let e = ((nll - loss) / loss).abs();
    println!("{}: -log p(target) {nll:.7} from logits_last, {loss:.7} from the training loss", f.name);
    assert!(e <= 1e-5, "{}: {nll} vs training loss {loss}: relative difference {e:.3e}", f.name);
}

/// The tiny model's output table (SmolLM2's 49,152-token vocabulary) comes in six chunks, each
/// product writing into its slice of the logits: −log_softmax at targets in the first, a middle
/// and the last chunk equals the training loss (whose chunked cross-entropy never goes through
/// those logits).
async fn chunked_table_logits_match_training_loss() {
    use webtune::formats::checkpoint::Checkpoint;
    let gpu = webtune::kernels::testutil::shared_test_gpu().await;
    let ckpt = Checkpoint::from_files(common::tiny_model_files(3)).expect("the tiny model opens");
    let model = Model::load(&gpu, &ckpt).expect("loads");
    let lora = Lora::from_adapter(
        &gpu,
        &model.cfg,
        &webtune::formats::peft::Adapter::new_init(&model.cfg, 4, 8.0, &[webtune::base::names::Proj::Q], 1),
    )
    .expect("an adapter whose B is zero");
    let prompt: Vec<u32> = vec![1, 504, 17_000, 33, 9];
    let logits = logits_last(&gpu, &model, None, &prompt).await.expect("logits_last");
    let m = logits.iter().cloned().fold(f32::NEG_INFINITY, f32::max) as f64;
    let lse = m + logits.iter().map(|&x| (x as f64 - m).exp()).sum::<f64>().ln();
    for target in [5usize, 8192 * 3 + 77, common::VOCAB - 1] {
        let nll = lse - logits[target] as f64;
        let mut ids = prompt.clone();
        ids.push(target as u32);
        let mut labels = vec![-100i64; ids.len()];
        labels[ids.len() - 1] = target as i64;
        let json = serde_json::json!({ "input_ids": [ids], "labels": [labels] }).to_string();
        let batch = Batch::from_json(&json, model.cfg.vocab).expect("batch");
        let input = model.prepare(&gpu, &batch).expect("prepare");
        let loss = model.loss_and_grads(&gpu, &lora, None, &input).await.expect("loss") as f64;
        let e = ((nll - loss) / loss).abs();
        assert!(e <= 1e-5, "target {target}: {nll} from the logits vs training loss {loss} ({e:.3e})");
    }
}

both!(tiny_model_chunked_table_logits_match_training_loss, chunked_table_logits_match_training_loss());
both!(qwen2_tiny_cached_matches_uncached, cached_matches_uncached(qwen2_tiny()));
both!(llama_tiny_cached_matches_uncached, cached_matches_uncached(llama_tiny()));
both!(llama_bias_cached_matches_uncached, cached_matches_uncached(llama_bias()));
both!(qwen2_tiny_chunked_prefill, chunked_prefill(qwen2_tiny()));
both!(llama_tiny_chunked_prefill, chunked_prefill(llama_tiny()));
both!(qwen2_tiny_merged_matches_unmerged, merged_matches_unmerged(qwen2_tiny()));
both!(llama_tiny_merged_matches_unmerged, merged_matches_unmerged(llama_tiny()));
both!(llama_bias_merged_matches_unmerged, merged_matches_unmerged(llama_bias()));
both!(qwen2_tiny_sampling_eos_cancel, sampling_eos_cancel(qwen2_tiny()));
both!(qwen2_tiny_logits_match_training_loss, logits_match_training_loss(qwen2_tiny()));
both!(llama_tiny_logits_match_training_loss, logits_match_training_loss(llama_tiny()));
both!(llama_bias_logits_match_training_loss, logits_match_training_loss(llama_bias()));

/// SmolLM2-135M-Instruct (scripts/get-smollm2.sh) against transformers' greedy ids for the prompts
/// of tests/fixtures/smollm2/greedy.json, 32 new tokens, EOS 2; prints how many match and the
/// time per token, without LoRA and with a zero-B rank-8 adapter on all projections (same
/// tokens), unmerged and merged.
/// `XDG_RUNTIME_DIR=/tmp cargo test --test integration generate::smollm2 -- --ignored --nocapture`
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore]
fn smollm2_greedy_matches_transformers() {
    use webtune::base::names::Proj;
    use webtune::formats::checkpoint::Checkpoint;
    use webtune::formats::peft::Adapter;
    use webtune::platform::{block_on, now_ms};
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join(".cache/models/smollm2-135m-instruct");
    let text = std::fs::read_to_string(root.join("tests/fixtures/smollm2/greedy.json")).expect("greedy.json");
    let want: serde_json::Value = serde_json::from_str(&text).expect("greedy.json parses");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().expect("an id list").iter().map(|x| x.as_u64().expect("an id") as u32).collect()
    };
    block_on(async {
        let gpu = webtune::kernels::testutil::shared_test_gpu().await;
        let ckpt = Checkpoint::open_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let model = Model::load(&gpu, &ckpt).expect("model loads");
        let adapter = Adapter::new_init(&model.cfg, 8, 16.0, &Proj::all(), 1);
        let lora = Lora::from_adapter(&gpu, &model.cfg, &adapter).expect("adapter");
        let cases = want["cases"].as_array().expect("cases");
        let max_new = want["decoding"]["max_new_tokens"].as_u64().unwrap_or(32) as usize;
        let eos = want["decoding"]["eos_token_id"].as_u64().unwrap_or(2) as u32;
        let mut matched = 0;
        for (which, lora, merge) in
            [("base", None, false), ("lora", Some(&lora), false), ("lora merged", Some(&lora), true)]
        {
            let mut lines = vec![];
            matched = 0;
            for (i, case) in cases.iter().enumerate() {
                let prompt = ids(&case["prompt_ids"]);
                let expected = ids(&case["new_ids"]);
                let opts = GenerateOptions { max_new_tokens: max_new, eos_ids: vec![eos], merge, ..Default::default() };
                // Prefill alone, then the whole generation (prefill again + decode).
                let mut dec = Decoder::new(&gpu, &model, lora, prompt.len(), merge).expect("decoder");
                let t0 = now_ms();
                let logits = dec.forward(&gpu, &prompt).await.expect("prefill");
                let prefill_ms = now_ms() - t0;
                let top = &case["last_logits_top5"];
                let top_err = ids(&top["ids"])
                    .iter()
                    .zip(top["values"].as_array().expect("values"))
                    .map(|(&id, v)| (logits[id as usize] as f64 - v.as_f64().unwrap_or(f64::NAN)).abs())
                    .fold(0.0, f64::max);
                drop(dec);
                let mut stamps = vec![];
                let t0 = now_ms();
                let got = generate(&gpu, &model, lora, &prompt, &opts, &mut |_| {
                    stamps.push(now_ms());
                    true
                })
                .await
                .expect("generate");
                let first_diff = got.iter().zip(&expected).position(|(a, b)| a != b);
                let same = got == expected;
                matched += same as usize;
                let decode_ms = if stamps.len() > 1 {
                    (stamps[stamps.len() - 1] - stamps[0]) / (stamps.len() - 1) as f64
                } else {
                    f64::NAN
                };
                lines.push(format!(
                    "  case {i}: prompt {} tokens, {} new, {} (first difference at {first_diff:?}); prefill {prefill_ms:.0} ms, \
                     decode {decode_ms:.1} ms/token, total {:.0} ms; top-5 prefill logits max |diff| {top_err:.2e}",
                    prompt.len(),
                    got.len(),
                    if same { "MATCH" } else { "DIFFER" },
                    now_ms() - t0
                ));
                if !same {
                    lines.push(format!("    got  {got:?}\n    want {expected:?}"));
                }
            }
            println!("{which}: {matched} of {} prompts match transformers' greedy ids", cases.len());
            for l in lines {
                println!("{l}");
            }
        }
        assert_eq!(matched, cases.len(), "greedy ids differ from transformers'");
    });
}

/// Where a SmolLM2 decode step's time goes: recording (host: buffers, bind groups) vs waiting for
/// the GPU, and process CPU time. `cargo test --test integration generate::smollm2_decode_bench -- --ignored --nocapture`
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore]
fn smollm2_decode_bench() {
    use webtune::formats::checkpoint::Checkpoint;
    use webtune::platform::{block_on, now_ms};
    let cpu_ms = || -> f64 {
        let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0.0 };
        dir.filter_map(|e| e.ok())
            .filter_map(|e| std::fs::read_to_string(e.path().join("schedstat")).ok())
            .filter_map(|t| t.split_whitespace().next().and_then(|x| x.parse::<u64>().ok()))
            .sum::<u64>() as f64
            / 1e6
    };
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".cache/models/smollm2-135m-instruct");
    block_on(async {
        let gpu = webtune::kernels::testutil::shared_test_gpu().await;
        let ckpt = Checkpoint::open_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let model = Model::load(&gpu, &ckpt).expect("model loads");
        let prompt: Vec<u32> = (0..40).map(|i| 100 + i * 7).collect();
        let mut dec = Decoder::new(&gpu, &model, None, 80, false).expect("decoder");
        let mut logits = dec.forward(&gpu, &prompt).await.expect("prefill");
        let (mut rec, mut wait, mut cpu) = (vec![], vec![], vec![]);
        for _ in 0..16 {
            let tok = argmax(&logits) as u32;
            let (t0, c0) = (now_ms(), cpu_ms());
            let t = dec.encode(&gpu, &[tok]).await.expect("encode");
            let t1 = now_ms();
            gpu.flush();
            logits = gpu.read_f32(&t).await.expect("read");
            let (t2, c2) = (now_ms(), cpu_ms());
            rec.push(t1 - t0);
            wait.push(t2 - t1);
            cpu.push(c2 - c0);
        }
        let med = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "decode step (median of 16): record {:.1} ms, GPU wait {:.1} ms, process CPU {:.1} ms",
            med(&mut rec),
            med(&mut wait),
            med(&mut cpu)
        );
    });
}
