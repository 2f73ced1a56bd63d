//! Tiny synthetic checkpoints for tests: a Qwen2-shaped (or Llama-shaped) model
//! with awkward sizes (C = 36, 3 heads of 12, 1 kv head, F = 20, V = 50, L = 2).

use crate::base::config::ModelConfig;
use crate::base::host::HostTensor;
use crate::base::names::expected_tensors;
use crate::formats::checkpoint::Checkpoint;
use crate::formats::safetensors::encode_safetensors;
use std::collections::HashMap;

/// The config.json text of the tiny model.
pub fn tiny_config_json(tie: bool) -> String {
    serde_json::json!({
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "hidden_size": 36,
        "num_hidden_layers": 2,
        "num_attention_heads": 3,
        "num_key_value_heads": 1,
        "intermediate_size": 20,
        "vocab_size": 50,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": tie,
        "hidden_act": "silu",
        "torch_dtype": "float32"
    })
    .to_string()
}

pub fn tiny_config(tie: bool) -> ModelConfig {
    ModelConfig::from_json(&tiny_config_json(tie)).expect("tiny config parses")
}

/// Deterministic values: element k of tensor number t.
fn values(t: usize, n: usize) -> Vec<f32> {
    (0..n).map(|k| ((t * 7919 + k * 104729) % 1000) as f32 / 1000.0 - 0.5).collect()
}

/// The files of a tiny checkpoint for `cfg` (config.json from `cfg` must be the
/// tiny one) as one model.safetensors, leaving out `omit` and giving the tensors
/// in `reshape` other shapes (or adding them).
pub fn tiny_files(cfg: &ModelConfig, omit: &[&str], reshape: &[(&str, Vec<usize>)]) -> HashMap<String, Vec<u8>> {
    let mut list = expected_tensors(cfg);
    for (name, shape) in reshape {
        match list.iter_mut().find(|(n, _)| n == name) {
            Some(e) => e.1 = shape.clone(),
            None => list.push((name.to_string(), shape.clone())),
        }
    }
    list.retain(|(n, _)| !omit.contains(&n.as_str()));
    let tensors: Vec<(String, HostTensor)> = list
        .into_iter()
        .enumerate()
        .map(|(i, (n, s))| {
            let data = values(i, s.iter().product());
            (n, HostTensor::from_f32(&s, data))
        })
        .collect();
    let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
    let mut files = HashMap::new();
    files.insert("config.json".to_string(), tiny_config_json(cfg.tie_word_embeddings).into_bytes());
    files.insert("model.safetensors".to_string(), encode_safetensors(&refs));
    files
}

pub fn tiny_checkpoint(cfg: &ModelConfig, omit: &[&str], reshape: &[(&str, Vec<usize>)]) -> Checkpoint {
    Checkpoint::from_files(tiny_files(cfg, omit, reshape)).expect("tiny checkpoint opens")
}
