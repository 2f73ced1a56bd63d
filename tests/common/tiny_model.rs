//! The tiny random model of the end-to-end tests: a LlamaForCausalLM with the SmolLM2
//! tokenizer, built entirely in Rust (seeded), as model files in memory (the browser tests hand
//! them to `Checkpoint::from_files`; `webtune tiny-model` writes them out). Self-contained, so
//! the CLI can include this file alone.
//!
//! The model: hidden 64, 2 layers, 4 heads of 16, 2 kv heads, intermediate 96, tied
//! embeddings, vocab 49152 (SmolLM2's tokenizer), bf16 weights scaled so activations are O(1):
//! embedding rows of RMS ≈ 1, projections uniform in ±√(3/in) (unit gain), norm weights ≈ 1.

#![allow(dead_code)] // each user takes its own part

use std::collections::HashMap;
use webtune::base::config::ModelConfig;
use webtune::base::host::{HostData, HostTensor};
use webtune::base::rng::Rng;
use webtune::formats::safetensors::encode_safetensors;

pub const TOKENIZER_JSON: &[u8] = include_bytes!("../fixtures/tokenizers/smollm2/tokenizer.json");
pub const TOKENIZER_CONFIG: &[u8] = include_bytes!("../fixtures/tokenizers/smollm2/tokenizer_config.json");
pub const CHAT_TEMPLATE: &[u8] = include_bytes!("../fixtures/tokenizers/smollm2/chat_template.jinja");
pub const GENERATION_CONFIG: &str = r#"{"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2}"#;

/// SmolLM2's vocabulary size (its tokenizer's, padded as the published model's embedding).
pub const VOCAB: usize = 49152;

/// config.json of the tiny model.
pub fn tiny_config_json() -> String {
    serde_json::json!({
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 96,
        "vocab_size": VOCAB,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": true,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "bfloat16"
    })
    .to_string()
}

fn bf16(values: impl Iterator<Item = f32>) -> HostData {
    HostData::BF16(values.map(|v| half::bf16::from_f32(v).to_bits()).collect())
}

/// Every file of the tiny model: config.json, model.safetensors (random bf16 weights from
/// `seed`), the SmolLM2 tokenizer files and generation_config.json (eos 2 = `<|im_end|>`).
pub fn tiny_model_files(seed: u64) -> HashMap<String, Vec<u8>> {
    let config_json = tiny_config_json();
    let cfg = ModelConfig::from_json(&config_json).expect("the tiny config parses");
    let mut rng = Rng::new(seed);
    let tensors: Vec<(String, HostTensor)> = webtune::base::names::expected_tensors(&cfg)
        .into_iter()
        .map(|(name, shape)| {
            let n: usize = shape.iter().product();
            let data = if name.ends_with("norm.weight") {
                // ≈ 1, a little uneven so the norms are not the identity
                bf16((0..n).map(|_| 1.0 + 0.2 * (rng.uniform() as f32 - 0.5)))
            } else if name.ends_with("embed_tokens.weight") {
                // uniform in ±√3: RMS 1 per entry, so tokens are far apart in the (tied) output table
                bf16(rng.vec(n, 3f32.sqrt()).into_iter())
            } else if name.ends_with(".bias") {
                bf16(rng.vec(n, 0.1).into_iter())
            } else {
                // (out, in): unit gain, uniform in ±√(3/in)
                let fan_in = *shape.last().expect("a weight has a shape");
                bf16(rng.vec(n, (3.0 / fan_in as f32).sqrt()).into_iter())
            };
            (name, HostTensor { shape, data })
        })
        .collect();
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut files = HashMap::new();
    files.insert("config.json".to_string(), config_json.into_bytes());
    files.insert("model.safetensors".to_string(), encode_safetensors(&refs));
    files.insert("tokenizer.json".to_string(), TOKENIZER_JSON.to_vec());
    files.insert("tokenizer_config.json".to_string(), TOKENIZER_CONFIG.to_vec());
    files.insert("chat_template.jinja".to_string(), CHAT_TEMPLATE.to_vec());
    files.insert("generation_config.json".to_string(), GENERATION_CONFIG.as_bytes().to_vec());
    files
}

/// One chat example as a JSONL line: `{"messages": [user q, assistant a]}`.
pub fn chat_line(question: &str, answer: &str) -> String {
    serde_json::json!({"messages": [
        {"role": "user", "content": question},
        {"role": "assistant", "content": answer}
    ]})
    .to_string()
}
