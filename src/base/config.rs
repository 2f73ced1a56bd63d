//! Hugging Face `config.json` → [`ModelConfig`], the resolved configuration the
//! engine plans from. Supports Qwen2ForCausalLM and LlamaForCausalLM.
//!
//! [`HfConfig`] mirrors config.json with its own field names; [`ModelConfig::from_json`]
//! resolves it (defaults as transformers fills them) and rejects what the engine
//! does not implement (other activations, scaled RoPE, sliding-window attention),
//! naming the field. [`ModelConfig::preset`] gives the published configs by name.

use serde::Deserialize;

/// Why a config.json was rejected; every message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// Not JSON, or a field of the wrong type (serde's message has line and column).
    #[error("config.json: {0}")]
    Json(#[from] serde_json::Error),
    #[error("config.json: {field} = {value} is not supported ({reason})")]
    Unsupported { field: &'static str, value: String, reason: String },
    #[error("config.json: {field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("unknown model preset {0:?} (known: qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-3b, smollm2-135m)")]
    UnknownPreset(String),
}

/// Which family a checkpoint belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arch {
    Qwen2,
    Llama,
}

/// config.json resolved: every field the engine needs, defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelConfig {
    pub arch: Arch,
    /// C: hidden_size
    pub hidden: usize,
    /// L: num_hidden_layers
    pub layers: usize,
    /// Hq: num_attention_heads
    pub heads: usize,
    /// Hkv: num_key_value_heads (GQA; = heads when absent)
    pub kv_heads: usize,
    /// D: head_dim (explicit, or hidden / heads)
    pub head_dim: usize,
    /// F: intermediate_size
    pub intermediate: usize,
    /// V: vocab_size
    pub vocab: usize,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub tie_word_embeddings: bool,
    /// q, k, v projections have a bias (Qwen2 always; Llama when attention_bias).
    pub qkv_bias: bool,
    /// o projection has a bias (Llama with attention_bias).
    pub o_bias: bool,
    /// gate, up, down have a bias (Llama's mlp_bias).
    pub mlp_bias: bool,
    pub max_position_embeddings: usize,
    pub bos_token_id: Option<u32>,
    pub eos_token_ids: Vec<u32>,
    /// torch_dtype / dtype as written in config.json, if any (informational).
    pub dtype: Option<String>,
}

/// config.json as transformers writes it (the fields the engine reads; others are ignored).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct HfConfig {
    pub architectures: Option<Vec<String>>,
    pub model_type: Option<String>,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: Option<usize>,
    pub head_dim: Option<usize>,
    pub intermediate_size: usize,
    pub vocab_size: usize,
    pub rms_norm_eps: Option<f64>,
    pub rope_theta: Option<f64>,
    /// transformers 5: {"rope_type": "default", "rope_theta": ...}
    pub rope_parameters: Option<serde_json::Value>,
    /// transformers 4: null, or {"rope_type"/"type": ..., "factor": ...}
    pub rope_scaling: Option<serde_json::Value>,
    pub tie_word_embeddings: Option<bool>,
    /// Llama: bias on q, k, v and o.
    pub attention_bias: Option<bool>,
    /// Llama: bias on gate, up and down.
    pub mlp_bias: Option<bool>,
    pub hidden_act: Option<String>,
    pub max_position_embeddings: Option<usize>,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<TokenIds>,
    pub torch_dtype: Option<String>,
    /// transformers 5 writes `dtype` instead of `torch_dtype`.
    pub dtype: Option<String>,
    /// Qwen2: sliding-window attention (must be off).
    pub use_sliding_window: Option<bool>,
    /// transformers 5: per-layer attention kind (must all be "full_attention").
    pub layer_types: Option<Vec<String>>,
}

/// `eos_token_id`: one id or a list.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum TokenIds {
    One(u32),
    Many(Vec<u32>),
}

fn invalid(field: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid { field, reason: reason.into() }
}

/// `rope_type` (or the older `type`) of a rope_scaling / rope_parameters object:
/// only absent, null or "default" is plain RoPE.
fn check_rope_type(field: &'static str, v: &serde_json::Value) -> Result<(), ConfigError> {
    let obj = match v {
        serde_json::Value::Null => return Ok(()),
        serde_json::Value::Object(o) => o,
        other => return Err(invalid(field, format!("expected an object or null, found {other}"))),
    };
    for key in ["rope_type", "type"] {
        match obj.get(key) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(t)) if t == "default" => {}
            Some(t) => {
                return Err(ConfigError::Unsupported {
                    field,
                    value: format!("{{\"{key}\": {t}, ..}}"),
                    reason: "only plain RoPE (rope_type \"default\") is implemented".into(),
                })
            }
        }
    }
    Ok(())
}

impl ModelConfig {
    /// Parse and resolve the text of a config.json.
    pub fn from_json(text: &str) -> Result<ModelConfig, ConfigError> {
        let hf: HfConfig = serde_json::from_str(text)?;
        ModelConfig::from_hf(&hf)
    }

    /// Resolve a parsed config.json: fill defaults, check consistency.
    pub fn from_hf(hf: &HfConfig) -> Result<ModelConfig, ConfigError> {
        let arch = resolve_arch(hf)?;

        let act = hf.hidden_act.as_deref().unwrap_or("silu");
        if act != "silu" {
            return Err(ConfigError::Unsupported {
                field: "hidden_act",
                value: format!("{act:?}"),
                reason: "only \"silu\" (SwiGLU) is implemented".into(),
            });
        }
        if hf.use_sliding_window == Some(true) {
            return Err(ConfigError::Unsupported {
                field: "use_sliding_window",
                value: "true".into(),
                reason: "sliding-window attention is not implemented".into(),
            });
        }
        if let Some(kind) = hf.layer_types.iter().flatten().find(|k| k.as_str() != "full_attention") {
            return Err(ConfigError::Unsupported {
                field: "layer_types",
                value: format!("[.., {kind:?}, ..]"),
                reason: "only \"full_attention\" layers are implemented".into(),
            });
        }
        if let Some(v) = &hf.rope_scaling {
            check_rope_type("rope_scaling", v)?;
        }
        let mut rope_theta = hf.rope_theta;
        if let Some(v) = &hf.rope_parameters {
            check_rope_type("rope_parameters", v)?;
            match v.get("rope_theta") {
                None | Some(serde_json::Value::Null) => {}
                Some(t) => match t.as_f64() {
                    Some(t) => rope_theta = rope_theta.or(Some(t)),
                    None => return Err(invalid("rope_parameters.rope_theta", format!("expected a number, found {t}"))),
                },
            }
        }
        let rope_theta = rope_theta.unwrap_or(10000.0);
        if !(rope_theta > 0.0 && rope_theta.is_finite()) {
            return Err(invalid("rope_theta", format!("must be a positive number, found {rope_theta}")));
        }

        for (field, v) in [
            ("hidden_size", hf.hidden_size),
            ("num_hidden_layers", hf.num_hidden_layers),
            ("num_attention_heads", hf.num_attention_heads),
            ("intermediate_size", hf.intermediate_size),
            ("vocab_size", hf.vocab_size),
        ] {
            if v == 0 {
                return Err(invalid(field, "must be positive, found 0"));
            }
        }
        let heads = hf.num_attention_heads;
        let kv_heads = hf.num_key_value_heads.unwrap_or(heads);
        if kv_heads == 0 {
            return Err(invalid("num_key_value_heads", "must be positive, found 0"));
        }
        if heads % kv_heads != 0 {
            return Err(invalid(
                "num_key_value_heads",
                format!("num_attention_heads = {heads} is not a multiple of num_key_value_heads = {kv_heads}"),
            ));
        }
        let head_dim = match hf.head_dim {
            Some(0) => return Err(invalid("head_dim", "must be positive, found 0")),
            Some(d) => d,
            None => {
                if hf.hidden_size % heads != 0 {
                    return Err(invalid(
                        "hidden_size",
                        format!(
                            "hidden_size = {} is not a multiple of num_attention_heads = {heads} and head_dim is absent",
                            hf.hidden_size
                        ),
                    ));
                }
                hf.hidden_size / heads
            }
        };
        if head_dim % 2 != 0 {
            return Err(invalid("head_dim", format!("RoPE needs an even head_dim, found {head_dim}")));
        }
        let rms_norm_eps = hf.rms_norm_eps.unwrap_or(1e-6);
        if !(rms_norm_eps > 0.0 && rms_norm_eps.is_finite()) {
            return Err(invalid("rms_norm_eps", format!("must be a positive number, found {rms_norm_eps}")));
        }

        let (qkv_bias, o_bias, mlp_bias) = match arch {
            Arch::Qwen2 => (true, false, false),
            Arch::Llama => {
                let ab = hf.attention_bias.unwrap_or(false);
                (ab, ab, hf.mlp_bias.unwrap_or(false))
            }
        };
        let max_position_embeddings = hf.max_position_embeddings.unwrap_or(match arch {
            Arch::Qwen2 => 32768,
            Arch::Llama => 2048,
        });
        let eos_token_ids = match &hf.eos_token_id {
            None => Vec::new(),
            Some(TokenIds::One(t)) => vec![*t],
            Some(TokenIds::Many(v)) => v.clone(),
        };

        Ok(ModelConfig {
            arch,
            hidden: hf.hidden_size,
            layers: hf.num_hidden_layers,
            heads,
            kv_heads,
            head_dim,
            intermediate: hf.intermediate_size,
            vocab: hf.vocab_size,
            rms_norm_eps,
            rope_theta,
            tie_word_embeddings: hf.tie_word_embeddings.unwrap_or(false),
            qkv_bias,
            o_bias,
            mlp_bias,
            max_position_embeddings,
            bos_token_id: hf.bos_token_id,
            eos_token_ids,
            dtype: hf.torch_dtype.clone().or_else(|| hf.dtype.clone()),
        })
    }

    /// The published config.json of a known model (the -Instruct variants' token ids).
    /// Names: "qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "smollm2-135m".
    pub fn preset(name: &str) -> Result<ModelConfig, ConfigError> {
        let qwen = |hidden, layers, heads, intermediate| ModelConfig {
            arch: Arch::Qwen2,
            hidden,
            layers,
            heads,
            kv_heads: 2,
            head_dim: hidden / heads,
            intermediate,
            vocab: 151936,
            rms_norm_eps: 1e-6,
            rope_theta: 1_000_000.0,
            tie_word_embeddings: true,
            qkv_bias: true,
            o_bias: false,
            mlp_bias: false,
            max_position_embeddings: 32768,
            bos_token_id: Some(151643),
            eos_token_ids: vec![151645],
            dtype: Some("bfloat16".into()),
        };
        Ok(match name.to_ascii_lowercase().as_str() {
            "qwen2.5-0.5b" => qwen(896, 24, 14, 4864),
            "qwen2.5-1.5b" => qwen(1536, 28, 12, 8960),
            "qwen2.5-3b" => qwen(2048, 36, 16, 11008),
            "smollm2-135m" => ModelConfig {
                arch: Arch::Llama,
                hidden: 576,
                layers: 30,
                heads: 9,
                kv_heads: 3,
                head_dim: 64,
                intermediate: 1536,
                vocab: 49152,
                rms_norm_eps: 1e-5,
                rope_theta: 100_000.0,
                tie_word_embeddings: true,
                qkv_bias: false,
                o_bias: false,
                mlp_bias: false,
                max_position_embeddings: 8192,
                bos_token_id: Some(1),
                eos_token_ids: vec![2],
                dtype: Some("bfloat16".into()),
            },
            _ => return Err(ConfigError::UnknownPreset(name.to_string())),
        })
    }
}

/// Qwen2 or Llama, from `architectures` (first) or `model_type`; they must agree.
fn resolve_arch(hf: &HfConfig) -> Result<Arch, ConfigError> {
    let from_archs = match &hf.architectures {
        Some(list) if !list.is_empty() => {
            let mut found = None;
            for a in list {
                match a.as_str() {
                    "Qwen2ForCausalLM" => found = found.or(Some(Arch::Qwen2)),
                    "LlamaForCausalLM" => found = found.or(Some(Arch::Llama)),
                    _ => {}
                }
            }
            match found {
                Some(a) => Some(a),
                None => {
                    return Err(ConfigError::Unsupported {
                        field: "architectures",
                        value: format!("{list:?}"),
                        reason: "supported: Qwen2ForCausalLM, LlamaForCausalLM".into(),
                    })
                }
            }
        }
        _ => None,
    };
    let from_type = match hf.model_type.as_deref() {
        None => None,
        Some("qwen2") => Some(Arch::Qwen2),
        Some("llama") => Some(Arch::Llama),
        Some(t) => {
            return Err(ConfigError::Unsupported {
                field: "model_type",
                value: format!("{t:?}"),
                reason: "supported: \"qwen2\", \"llama\"".into(),
            })
        }
    };
    match (from_archs, from_type) {
        (Some(a), Some(t)) if a != t => Err(invalid(
            "model_type",
            format!("{:?} disagrees with architectures {:?}", hf.model_type.as_deref().unwrap_or(""), hf.architectures),
        )),
        (Some(a), _) | (None, Some(a)) => Ok(a),
        (None, None) => Err(invalid("architectures", "neither architectures nor model_type is given")),
    }
}

#[cfg(test)]
mod tests {
    use crate::platform::test;

    use super::*;

    /// Qwen/Qwen2.5-0.5B-Instruct config.json.
    pub const QWEN25_05B: &str = r#"{
  "architectures": ["Qwen2ForCausalLM"],
  "attention_dropout": 0.0,
  "bos_token_id": 151643,
  "eos_token_id": 151645,
  "hidden_act": "silu",
  "hidden_size": 896,
  "initializer_range": 0.02,
  "intermediate_size": 4864,
  "max_position_embeddings": 32768,
  "max_window_layers": 21,
  "model_type": "qwen2",
  "num_attention_heads": 14,
  "num_hidden_layers": 24,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 1000000.0,
  "sliding_window": 32768,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers_version": "4.43.1",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
}"#;

    /// HuggingFaceTB/SmolLM2-135M-Instruct config.json.
    pub const SMOLLM2_135M: &str = r#"{
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": 2,
  "head_dim": 64,
  "hidden_act": "silu",
  "hidden_size": 576,
  "initializer_range": 0.041666666666666664,
  "intermediate_size": 1536,
  "is_llama_config": true,
  "max_position_embeddings": 8192,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 9,
  "num_hidden_layers": 30,
  "num_key_value_heads": 3,
  "pad_token_id": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_interleaved": false,
  "rope_scaling": null,
  "rope_theta": 100000,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "transformers.js_config": {"kv_cache_dtype": {"q4f16": "float16", "fp16": "float16"}},
  "transformers_version": "4.42.3",
  "use_cache": true,
  "vocab_size": 49152
}"#;

    /// Replace (or add, with `None` removing) top-level fields of a config.
    fn edit(base: &str, changes: &[(&str, Option<serde_json::Value>)]) -> String {
        let mut v: serde_json::Value = serde_json::from_str(base).expect("test config parses");
        let obj = v.as_object_mut().expect("object");
        for (k, val) in changes {
            match val {
                Some(x) => {
                    obj.insert(k.to_string(), x.clone());
                }
                None => {
                    obj.remove(*k);
                }
            }
        }
        v.to_string()
    }

    fn err(text: &str) -> String {
        match ModelConfig::from_json(text) {
            Ok(c) => panic!("expected an error, got {c:?}"),
            Err(e) => e.to_string(),
        }
    }

    use serde_json::json;

    #[test]
    fn qwen25_05b_config() {
        let c = ModelConfig::from_json(QWEN25_05B).expect("parses");
        assert_eq!(c.arch, Arch::Qwen2);
        assert_eq!((c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim), (896, 24, 14, 2, 64));
        assert_eq!((c.intermediate, c.vocab), (4864, 151936));
        assert_eq!(c.rms_norm_eps, 1e-6);
        assert_eq!(c.rope_theta, 1e6);
        assert!(c.tie_word_embeddings);
        assert!(c.qkv_bias && !c.o_bias && !c.mlp_bias);
        assert_eq!(c.max_position_embeddings, 32768);
        assert_eq!(c.bos_token_id, Some(151643));
        assert_eq!(c.eos_token_ids, vec![151645]);
        assert_eq!(c.dtype.as_deref(), Some("bfloat16"));
        assert_eq!(c, ModelConfig::preset("qwen2.5-0.5b").expect("preset"));
    }

    #[test]
    fn smollm2_135m_config() {
        let c = ModelConfig::from_json(SMOLLM2_135M).expect("parses");
        assert_eq!(c.arch, Arch::Llama);
        assert_eq!((c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim), (576, 30, 9, 3, 64));
        assert_eq!((c.intermediate, c.vocab), (1536, 49152));
        assert_eq!(c.rms_norm_eps, 1e-5);
        assert_eq!(c.rope_theta, 1e5);
        assert!(c.tie_word_embeddings);
        assert!(!c.qkv_bias && !c.o_bias && !c.mlp_bias);
        assert_eq!(c.max_position_embeddings, 8192);
        assert_eq!((c.bos_token_id, c.eos_token_ids.clone()), (Some(1), vec![2]));
        assert_eq!(c, ModelConfig::preset("smollm2-135m").expect("preset"));
    }

    #[test]
    fn presets() {
        let c = ModelConfig::preset("qwen2.5-1.5b").expect("preset");
        assert_eq!((c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.intermediate), (1536, 28, 12, 2, 128, 8960));
        let c = ModelConfig::preset("Qwen2.5-3B").expect("preset");
        assert_eq!(
            (c.hidden, c.layers, c.heads, c.kv_heads, c.head_dim, c.intermediate),
            (2048, 36, 16, 2, 128, 11008)
        );
        assert!(c.tie_word_embeddings && c.vocab == 151936 && c.rope_theta == 1e6);
        let e = ModelConfig::preset("gpt2").expect_err("unknown").to_string();
        assert!(e.contains("\"gpt2\"") && e.contains("qwen2.5-0.5b"), "{e}");
    }

    #[test]
    fn defaults_and_variants() {
        // Minimal Llama: no kv heads (= heads), no head_dim, no theta, no tie, no eos.
        let t = r#"{"architectures":["LlamaForCausalLM"],"hidden_size":64,"num_hidden_layers":2,
            "num_attention_heads":4,"intermediate_size":100,"vocab_size":50}"#;
        let c = ModelConfig::from_json(t).expect("parses");
        assert_eq!((c.kv_heads, c.head_dim), (4, 16));
        assert_eq!(c.rope_theta, 10000.0);
        assert!(!c.tie_word_embeddings);
        assert!(c.eos_token_ids.is_empty() && c.bos_token_id.is_none());
        assert_eq!(c.max_position_embeddings, 2048);

        // model_type alone, llama biases, eos list, transformers-5 rope_parameters and dtype.
        let t = r#"{"model_type":"llama","hidden_size":64,"num_hidden_layers":2,"num_attention_heads":4,
            "num_key_value_heads":2,"head_dim":24,"intermediate_size":100,"vocab_size":50,
            "attention_bias":true,"mlp_bias":true,"eos_token_id":[128001,128008,128009],
            "rope_parameters":{"rope_type":"default","rope_theta":500000.0},"dtype":"float32"}"#;
        let c = ModelConfig::from_json(t).expect("parses");
        assert_eq!(c.arch, Arch::Llama);
        assert_eq!(c.head_dim, 24);
        assert!(c.qkv_bias && c.o_bias && c.mlp_bias);
        assert_eq!(c.eos_token_ids, vec![128001, 128008, 128009]);
        assert_eq!(c.rope_theta, 500000.0);
        assert_eq!(c.dtype.as_deref(), Some("float32"));

        // Qwen2 ignores Llama's bias flags.
        let t = edit(QWEN25_05B, &[("attention_bias", Some(json!(true))), ("mlp_bias", Some(json!(true)))]);
        let c = ModelConfig::from_json(&t).expect("parses");
        assert!(c.qkv_bias && !c.o_bias && !c.mlp_bias);
        // rope_type "default" in rope_scaling is plain RoPE.
        let t = edit(QWEN25_05B, &[("rope_scaling", Some(json!({"rope_type": "default"})))]);
        assert!(ModelConfig::from_json(&t).is_ok());
    }

    #[test]
    fn rejects_unsupported() {
        let e = err(&edit(QWEN25_05B, &[("hidden_act", Some(json!("gelu")))]));
        assert!(e.contains("hidden_act") && e.contains("gelu"), "{e}");
        let e = err(&edit(SMOLLM2_135M, &[("rope_scaling", Some(json!({"rope_type": "llama3", "factor": 32.0})))]));
        assert!(e.contains("rope_scaling") && e.contains("llama3"), "{e}");
        let e = err(&edit(SMOLLM2_135M, &[("rope_scaling", Some(json!({"type": "linear", "factor": 2.0})))]));
        assert!(e.contains("rope_scaling") && e.contains("linear"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("rope_parameters", Some(json!({"rope_type": "yarn", "rope_theta": 1e6})))]));
        assert!(e.contains("rope_parameters") && e.contains("yarn"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("use_sliding_window", Some(json!(true)))]));
        assert!(e.contains("use_sliding_window"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("layer_types", Some(json!(["full_attention", "sliding_attention"])))]));
        assert!(e.contains("layer_types") && e.contains("sliding_attention"), "{e}");
        let ok = edit(QWEN25_05B, &[("layer_types", Some(json!(vec!["full_attention"; 24])))]);
        assert!(ModelConfig::from_json(&ok).is_ok());
        let e = err(&edit(QWEN25_05B, &[("architectures", Some(json!(["MistralForCausalLM"])))]));
        assert!(e.contains("architectures") && e.contains("MistralForCausalLM"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("architectures", None), ("model_type", Some(json!("gemma")))]));
        assert!(e.contains("model_type") && e.contains("gemma"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("model_type", Some(json!("llama")))]));
        assert!(e.contains("model_type") && e.contains("disagrees"), "{e}");
    }

    #[test]
    fn rejects_inconsistent() {
        let e = err(&edit(QWEN25_05B, &[("num_key_value_heads", Some(json!(3)))]));
        assert!(e.contains("num_key_value_heads") && e.contains("14"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("num_key_value_heads", Some(json!(0)))]));
        assert!(e.contains("num_key_value_heads"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("hidden_size", Some(json!(900)))]));
        assert!(e.contains("hidden_size") && e.contains("900"), "{e}");
        // ... but an explicit head_dim makes hidden_size free.
        assert!(ModelConfig::from_json(&edit(
            QWEN25_05B,
            &[("hidden_size", Some(json!(900))), ("head_dim", Some(json!(64)))]
        ))
        .is_ok());
        for field in ["num_hidden_layers", "vocab_size", "intermediate_size", "num_attention_heads", "hidden_size"] {
            let e = err(&edit(QWEN25_05B, &[(field, Some(json!(0)))]));
            assert!(e.contains(field), "{e}");
        }
        let e = err(&edit(QWEN25_05B, &[("vocab_size", None)]));
        assert!(e.contains("vocab_size"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("rms_norm_eps", Some(json!(-1.0)))]));
        assert!(e.contains("rms_norm_eps"), "{e}");
        let e = err(&edit(QWEN25_05B, &[("head_dim", Some(json!(0)))]));
        assert!(e.contains("head_dim"), "{e}");
        let e = err("{\"hidden_size\": 12,\n \"num_hidden_layers\": }");
        assert!(e.starts_with("config.json") && e.contains("line 2"), "{e}");
    }
}
