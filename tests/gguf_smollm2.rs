//! The GGUF importer on the real SmolLM2-135M-Instruct GGUF (Q4_1, embeddings Q8_0) against the
//! Hugging Face checkpoint transformers makes from the same file (scripts/get-smollm2.sh, which
//! runs scripts/convert-gguf-to-hf.py). Ignored by default: it needs .cache/gguf/ and
//! .cache/models/smollm2-135m-instruct/ (`bash scripts/get-smollm2.sh`) and a GPU adapter.
//!
//!     cargo test --test integration gguf_smollm2:: -- --ignored --nocapture
//!
//! Checks: `import_gguf_to_dir` writes a directory that opens as a checkpoint; every tensor equals
//! the reference's within bf16 rounding (both round the same f32 dequantization once, so they
//! should be identical); config.json resolves to the same model config; the tokenizer encodes
//! chat renders and plain strings as the reference tokenizer does; the last-position logits of
//! the chat prompts in tests/fixtures/smollm2/greedy.json agree between the two checkpoints and
//! with transformers' top-5 values there.
#![cfg(not(target_arch = "wasm32"))]

use crate::common;

use common::{CHAT_TEMPLATE, TOKENIZER_CONFIG, TOKENIZER_JSON};
use std::path::{Path, PathBuf};
use std::time::Instant;
use webtune::data::{Message, Tokenizer};
use webtune::formats::checkpoint::Checkpoint;
use webtune::formats::gguf::import_gguf_to_dir;
use webtune::generate::logits_last;
use webtune::model::Model;
use webtune::platform::block_on;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
#[ignore = "needs .cache from scripts/get-smollm2.sh and a GPU adapter"]
fn smollm2_gguf_import_matches_transformers() {
    let gguf = root().join(".cache/gguf/SmolLM2-135M-Instruct.Q4_1.gguf");
    let reference = root().join(".cache/models/smollm2-135m-instruct");
    assert!(gguf.is_file() && reference.is_dir(), "run `bash scripts/get-smollm2.sh` first");
    let out = TempDir(std::env::temp_dir().join(format!("webtune-gguf-smollm2-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&out.0);

    let t0 = Instant::now();
    let summary = import_gguf_to_dir(&gguf, &out.0).unwrap_or_else(|e| panic!("import: {e}"));
    println!("import: {:.2} s: {summary}", t0.elapsed().as_secs_f64());
    let e = import_gguf_to_dir(&gguf, &out.0).expect_err("a second import into the same directory is refused");
    assert!(e.to_string().contains("already exists"), "{e}");

    let ours = Checkpoint::open_dir(&out.0).expect("the imported directory opens");
    let theirs = Checkpoint::open_dir(&reference).expect("the reference opens");
    let (mut a, mut b) = (ours.config().clone(), theirs.config().clone());
    (a.dtype, b.dtype) = (None, None);
    assert_eq!(a, b, "resolved config.json");

    // Every tensor, within bf16 rounding (one bf16 ulp of the reference value).
    let t0 = Instant::now();
    assert_eq!(ours.tensor_names(), theirs.tensor_names());
    let (mut worst, mut differing, mut total) = (0f32, 0usize, 0usize);
    for name in theirs.tensor_names() {
        let x = ours.tensor(&name).expect("ours").to_f32();
        let y = theirs.tensor(&name).expect("theirs").to_f32();
        assert_eq!(ours.shape(&name), theirs.shape(&name), "{name}");
        for (i, (&p, &q)) in x.iter().zip(&y).enumerate() {
            let d = (p - q).abs();
            assert!(d <= q.abs() / 128.0 + 1e-30, "{name}[{i}]: ours {p}, transformers' {q}");
            worst = worst.max(d);
            differing += (p.to_bits() != q.to_bits()) as usize;
        }
        total += y.len();
    }
    println!(
        "tensors: {} tensors, {total} values: {differing} differ, max |diff| {worst:e} ({:.1} s)",
        theirs.tensor_names().len(),
        t0.elapsed().as_secs_f64()
    );

    // The tokenizer: chat renders and plain strings give the same ids; specials and template agree.
    let tok = Tokenizer::from_checkpoint(&ours).expect("our tokenizer");
    let ref_tok = Tokenizer::from_checkpoint(&theirs).expect("reference tokenizer");
    let fixture = Tokenizer::from_files(TOKENIZER_JSON, Some(TOKENIZER_CONFIG), None, Some(CHAT_TEMPLATE))
        .expect("fixture tokenizer");
    assert_eq!((tok.bos_token(), tok.eos_token()), (ref_tok.bos_token(), ref_tok.eos_token()));
    assert_eq!(
        (tok.eos_ids(), tok.pad_id(), tok.vocab_size()),
        (ref_tok.eos_ids(), ref_tok.pad_id(), ref_tok.vocab_size())
    );
    let chats = [
        vec![Message::new("user", "What is 12 + 30?")],
        vec![
            Message::new("system", "Answer in French."),
            Message::new("user", "Grüße aus Köln! Ça va? 3.14159, 2024-06-13 ... 日本語"),
            Message::new("assistant", "Très bien, merci !\n\n  def f(x):\n\treturn x**2  "),
            Message::new("user", "<|im_end|> inside text, and    spaces\r\n"),
        ],
    ];
    let mut texts: Vec<String> = vec![
        "Hello, world! Tokenizers split text; numbers like 2024 and 3.14 too.".into(),
        " leading and trailing  ".into(),
        "emoji 🤗🚀 and CJK 中文字符 and ﬁ ligatures".into(),
        "1234567890 12,345.67 x2 A1B2".into(),
    ];
    for chat in &chats {
        for gen in [false, true] {
            let text = tok.apply_chat_template(chat, gen).expect("render");
            assert_eq!(text, ref_tok.apply_chat_template(chat, gen).expect("reference render"));
            texts.push(text);
        }
    }
    let mut fixture_differs = 0;
    for text in &texts {
        let ids = tok.encode(text, false).expect("encode");
        assert_eq!(ids, ref_tok.encode(text, false).expect("encode"), "{text:?}");
        assert_eq!(tok.encode(text, true).expect("encode"), ref_tok.encode(text, true).expect("encode"), "{text:?}");
        assert_eq!(&tok.decode(&ids, false).expect("decode"), text);
        fixture_differs += (fixture.encode(text, false).expect("encode") != ids) as usize;
    }
    println!(
        "tokenizer: {} texts ({} chat renders) encode identically; the committed fixture tokenizer (plain ByteLevel) differs on {fixture_differs}",
        texts.len(),
        2 * chats.len()
    );

    // Logits at the last position of the greedy.json chat prompts, resident weights.
    let greedy: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("tests/fixtures/smollm2/greedy.json")).expect("greedy.json"),
    )
    .expect("greedy.json parses");
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array().expect("ids").iter().map(|x| x.as_u64().expect("id") as u32).collect()
    };
    block_on(async {
        let gpu = webtune::kernels::testutil::test_gpu().await;
        let m_ours = Model::load(&gpu, &ours).expect("our model loads");
        let m_theirs = Model::load(&gpu, &theirs).expect("reference model loads");
        for (i, case) in greedy["cases"].as_array().expect("cases").iter().enumerate() {
            let prompt = ids(&case["prompt_ids"]);
            let messages: Vec<Message> = serde_json::from_value(case["messages"].clone()).expect("messages");
            let rendered = tok.apply_chat_template(&messages, true).expect("render");
            assert_eq!(
                tok.encode(&rendered, false).expect("encode"),
                prompt,
                "case {i}: our tokenizer gives the prompt ids"
            );
            let t0 = Instant::now();
            let x = logits_last(&gpu, &m_ours, None, &prompt).await.expect("our logits");
            let y = logits_last(&gpu, &m_theirs, None, &prompt).await.expect("reference logits");
            let ms = t0.elapsed().as_secs_f64() * 1000.0 / 2.0;
            let diff = x.iter().zip(&y).map(|(p, q)| (p - q).abs()).fold(0f32, f32::max);
            let top = &case["last_logits_top5"];
            let tf = ids(&top["ids"])
                .iter()
                .zip(top["values"].as_array().expect("values"))
                .map(|(&id, v)| (x[id as usize] as f64 - v.as_f64().expect("value")).abs())
                .fold(0f64, f64::max);
            let argmax = |v: &[f32]| (0..v.len()).max_by(|&a, &b| v[a].total_cmp(&v[b])).unwrap_or(0);
            println!(
                "logits case {i}: {} tokens, {ms:.0} ms per forward: max |ours − reference| {diff:e}; top-5 vs transformers max |diff| {tf:.2e}; argmax {} / {}",
                prompt.len(),
                argmax(&x),
                argmax(&y)
            );
            assert!(diff <= 1e-3, "case {i}: logits differ by {diff}");
            assert!(tf <= 5e-2, "case {i}: top-5 logits differ from transformers' by {tf}");
            assert_eq!(argmax(&x), argmax(&y));
        }
    });
}
