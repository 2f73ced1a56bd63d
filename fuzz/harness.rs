//! The fuzz targets' bodies, shared by `fuzz/fuzz_targets/*.rs` (cargo fuzz, libFuzzer) and
//! `tests/fuzz_corpus.rs` (every saved input and crash, replayed by `cargo test`).
//!
//! Each target takes arbitrary bytes and hands them to one of the parsers a user's files reach
//! (through webtune's public API, as the CLI and the browser do). Errors are the expected
//! outcome; a panic, an unbounded allocation or a hang is a bug. Where a parser accepts the
//! input, the target goes on to what comes next (validation, dequantization, rendering), so
//! accepted-but-wrong inputs are exercised too.
//!
//! Inputs made of two files (an index and a shard, a config and an adapter) are split by
//! [`split2`]: a 2-byte little-endian length of the first part, then the parts.

#![allow(dead_code)] // the fuzz crate uses one target per binary

use std::collections::HashMap;
use std::io::Cursor;
use std::sync::Arc;
use webtune::base::config::ModelConfig;
use webtune::base::host::{HostData, HostTensor};
use webtune::data::{load_jsonl, Message, Tokenizer};
use webtune::formats::batch::Batch;
use webtune::formats::checkpoint::Checkpoint;
use webtune::formats::gguf::{gguf_to_hf_files, Gguf};
use webtune::formats::peft::Adapter;
use webtune::formats::safetensors::encode_safetensors;
use webtune::store::{manifest_key, read_manifest, ChunkStore, MemoryStore, StoreSource};

/// A target's body: whether its first parser accepted the input.
pub type Body = fn(&[u8]) -> bool;

/// Every target: (name, body).
pub const TARGETS: &[(&str, Body)] = &[
    ("safetensors", safetensors),
    ("sharded_index", sharded_index),
    ("gguf", gguf),
    ("config_json", config_json),
    ("chat_template", chat_template),
    ("jsonl_dataset", jsonl_dataset),
    ("peft_adapter", peft_adapter),
    ("grad_batch", grad_batch),
    ("store_manifest", store_manifest),
];

/// Tensors bigger than this are not read (the fuzzer's inputs are small; a header that claims
/// more must already be refused by the parser, which the target checks through `tensor()`).
const MAX_READ_ELEMENTS: usize = 1 << 20;

/// A model small enough that a fuzzer can write whole valid checkpoints for it.
pub fn mini_config_json() -> String {
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 12,
        "vocab_size": 16,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "max_position_embeddings": 64,
        "torch_dtype": "float32"
    })
    .to_string()
}

fn mini_config() -> ModelConfig {
    ModelConfig::from_json(&mini_config_json()).expect("the mini config parses")
}

/// (first, second) of a two-part input; None when the length prefix is missing or too long.
pub fn split2(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = u16::from_le_bytes([*data.first()?, *data.get(1)?]) as usize;
    let rest = &data[2..];
    (n <= rest.len()).then(|| rest.split_at(n))
}

/// The inverse of [`split2`] (for seeds).
pub fn join2(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut v = (a.len() as u16).to_le_bytes().to_vec();
    v.extend_from_slice(a);
    v.extend_from_slice(b);
    v
}

/// Read every tensor of an accepted checkpoint, then check names, shapes and dtypes against
/// config.json as loading a model does.
fn exercise(ckpt: &Checkpoint) {
    for name in ckpt.tensor_names() {
        if let Ok(t) = ckpt.tensor(&name) {
            let n: usize = t.shape.iter().product();
            assert!(n <= MAX_READ_ELEMENTS * 64, "{name}: {n} elements read from a small input");
        }
    }
    let _ = webtune::formats::checkpoint::validate(ckpt);
}

/// model.safetensors of a single-file model (config.json fixed).
pub fn safetensors(data: &[u8]) -> bool {
    let mut files = HashMap::new();
    files.insert("config.json".to_string(), mini_config_json().into_bytes());
    files.insert("model.safetensors".to_string(), data.to_vec());
    Checkpoint::from_files(files).map(|ckpt| exercise(&ckpt)).is_ok()
}

/// model.safetensors.index.json and one shard, model-00001-of-00001.safetensors.
pub fn sharded_index(data: &[u8]) -> bool {
    let Some((index, shard)) = split2(data) else { return false };
    let mut files = HashMap::new();
    files.insert("config.json".to_string(), mini_config_json().into_bytes());
    files.insert("model.safetensors.index.json".to_string(), index.to_vec());
    files.insert("model-00001-of-00001.safetensors".to_string(), shard.to_vec());
    Checkpoint::from_files(files).map(|ckpt| exercise(&ckpt)).is_ok()
}

/// A GGUF file: parsing, dequantizing each tensor, and the conversion to HF files that
/// `webtune import --gguf` and the page run (tokenizer and chat template from metadata).
pub fn gguf(data: &[u8]) -> bool {
    let parsed = Gguf::parse_bytes(data);
    if let Ok(g) = &parsed {
        for t in &g.tensors {
            if t.numel() <= MAX_READ_ELEMENTS {
                let _ = g.tensor_f32(&mut Cursor::new(data), &t.name);
            }
        }
    }
    if let Ok(files) = gguf_to_hf_files(&mut Cursor::new(data)) {
        // What the importer made must itself load, or be refused, without a panic.
        if let Ok(ckpt) = Checkpoint::from_files(files) {
            exercise(&ckpt);
        }
    }
    parsed.is_ok()
}

/// config.json.
pub fn config_json(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(cfg) = ModelConfig::from_json(text) else { return false };
    let _ = webtune::base::names::expected_tensors(&cfg);
    true
}

/// A small word-level tokenizer.json (the chat-template and dataset targets need one that
/// loads fast; what they test is the template and the JSONL, not the tokenizer).
pub const MINI_TOKENIZER_JSON: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null,
  "added_tokens": [
    {"id": 0, "content": "<unk>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 1, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
    {"id": 2, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}
  ],
  "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
  "model": {"type": "WordLevel", "vocab": {"<unk>": 0, "<|im_start|>": 1, "<|im_end|>": 2, "user": 3,
    "assistant": 4, "system": 5, "hello": 6, "hi": 7, "there": 8, "the": 9, "answer": 10, "is": 11,
    "42": 12, "what": 13, "?": 14, ".": 15}, "unk_token": "<unk>"}
}"#;

/// A ChatML template like SmolLM2's and Qwen2.5's.
pub const MINI_TEMPLATE: &str = "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + \
     message['content'] + '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

/// tokenizer_config.json (with its chat template, special tokens and everything else a user's
/// file may hold), then rendering a conversation with it.
pub fn chat_template(data: &[u8]) -> bool {
    let Ok(tok) = Tokenizer::from_files(MINI_TOKENIZER_JSON.as_bytes(), Some(data), None, None) else { return false };
    let messages = [
        Message::new("system", "the answer is 42"),
        Message::new("user", "what ?"),
        Message::new("assistant", "hello there ."),
    ];
    let rendered = tok.apply_chat_template(&messages, true);
    let _ = tok.apply_chat_template(&messages[..2], false);
    rendered.is_ok()
}

fn mini_tokenizer() -> Tokenizer {
    let config = serde_json::json!({"eos_token": "<|im_end|>", "chat_template": MINI_TEMPLATE}).to_string();
    Tokenizer::from_files(MINI_TOKENIZER_JSON.as_bytes(), Some(config.as_bytes()), None, None)
        .expect("the mini tokenizer loads")
}

/// A JSONL dataset (chat `messages`, `prompt`/`completion`, `text`).
pub fn jsonl_dataset(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    load_jsonl(text, &mini_tokenizer()).is_ok()
}

/// adapter_config.json and adapter_model.safetensors, as the page's adapter import and
/// `webtune generate --adapter` read them, then checked against a model.
pub fn peft_adapter(data: &[u8]) -> bool {
    let Some((config, weights)) = split2(data) else { return false };
    let Ok(a) = Adapter::from_files(config, weights) else { return false };
    let _ = a.config.scale();
    a.validate(&mini_config()).is_ok()
}

/// The batch JSON of `webtune grad`.
pub fn grad_batch(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else { return false };
    let Ok(b) = Batch::from_json(text, 16) else { return false };
    let _ = b.shifted_targets();
    true
}

/// A store holding the mini model as model "m" (chunks of at most 256 bytes).
fn mini_store() -> MemoryStore {
    let store = MemoryStore::new();
    let mut files = HashMap::new();
    files.insert("config.json".to_string(), mini_config_json().into_bytes());
    files.insert("model.safetensors".to_string(), mini_safetensors());
    let ckpt = Checkpoint::from_files(files).expect("the mini model loads");
    webtune::import::import_checkpoint(&store, "m", &ckpt, 256).expect("imports");
    store
}

/// A stored model's manifest.json (IndexedDB or a directory store), put over the mini model's
/// own: read, then opened as a weight source (which checks it against config.json and the
/// chunks) and its tensors read.
pub fn store_manifest(data: &[u8]) -> bool {
    let store = mini_store();
    if store.put(&manifest_key("m"), data).is_err() {
        return false;
    }
    let Ok(man) = read_manifest(&store, "m") else { return false };
    let _ = man.chunks.len();
    if let Ok(src) = StoreSource::open(Arc::new(store), "m") {
        let names: Vec<String> = src.manifest().tensors.iter().take(16).map(|t| t.name.clone()).collect();
        for name in names {
            let _ = src.tensor(&name);
        }
    }
    true
}

fn f32_tensor(shape: &[usize], seed: u32) -> HostTensor {
    let n: usize = shape.iter().product();
    HostTensor {
        shape: shape.to_vec(),
        data: HostData::F32((0..n).map(|i| ((i as u32 ^ seed) % 7) as f32 * 0.1).collect()),
    }
}

/// A valid model.safetensors for [`mini_config_json`].
pub fn mini_safetensors() -> Vec<u8> {
    let tensors: Vec<(String, HostTensor)> = webtune::base::names::expected_tensors(&mini_config())
        .into_iter()
        .enumerate()
        .map(|(i, (name, shape))| (name, f32_tensor(&shape, i as u32)))
        .collect();
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    encode_safetensors(&refs)
}

/// Valid inputs for each target (the fuzzer starts from these; the regression test runs them).
/// The GGUF seeds are files under fuzz/seeds/gguf/ (written by the GGUF unit tests' writer).
pub fn seeds() -> Vec<(&'static str, Vec<u8>)> {
    let st = mini_safetensors();
    let names: Vec<String> =
        webtune::base::names::expected_tensors(&mini_config()).into_iter().map(|(n, _)| n).collect();
    let weight_map: serde_json::Map<String, serde_json::Value> =
        names.iter().map(|n| (n.clone(), "model-00001-of-00001.safetensors".into())).collect();
    let index = serde_json::json!({"metadata": {"total_size": st.len()}, "weight_map": weight_map}).to_string();
    let adapter = Adapter::new_init(&mini_config(), 2, 4.0, &webtune::base::names::Proj::all(), 1);
    let tok_config = serde_json::json!({
        "bos_token": null, "eos_token": "<|im_end|>", "pad_token": "<|im_end|>",
        "chat_template": MINI_TEMPLATE, "model_max_length": 64
    })
    .to_string();
    let dataset = [
        r#"{"messages": [{"role": "user", "content": "what ?"}, {"role": "assistant", "content": "the answer is 42 ."}]}"#,
        r#"{"prompt": "hello", "completion": "hi there"}"#,
        r#"{"text": "the answer is 42"}"#,
    ]
    .join("\n");
    let batch = r#"{"input_ids": [[1, 2, 3, 4]], "labels": [[-100, 2, 3, 4]], "attention_mask": [[1, 1, 1, 1]]}"#;
    // The manifest the store writes for the mini model.
    let manifest = mini_store().get(&manifest_key("m")).expect("has a manifest");
    vec![
        ("safetensors", st.clone()),
        ("sharded_index", join2(index.as_bytes(), &st)),
        ("config_json", mini_config_json().into_bytes()),
        ("chat_template", tok_config.into_bytes()),
        ("jsonl_dataset", dataset.into_bytes()),
        ("peft_adapter", join2(adapter.config_json().as_bytes(), &adapter.to_safetensors_bytes())),
        ("grad_batch", batch.as_bytes().to_vec()),
        ("store_manifest", manifest),
    ]
}
