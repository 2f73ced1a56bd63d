//! The tensors a Qwen2/Llama checkpoint holds, derived from its config: the one
//! place that spells checkpoint key names (`model.layers.{i}.self_attn.q_proj.weight`)
//! and their shapes, and the check that a checkpoint matches its config.json.

use crate::config::ModelConfig;
use crate::store::{Checkpoint, StoreError};

/// The seven linear projections of a decoder layer, in checkpoint order.
/// `p as usize` indexes per-layer arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proj {
    Q,
    K,
    V,
    O,
    Gate,
    Up,
    Down,
}

impl Proj {
    pub fn all() -> [Proj; 7] {
        [Proj::Q, Proj::K, Proj::V, Proj::O, Proj::Gate, Proj::Up, Proj::Down]
    }

    /// Module name as in the checkpoint and in PEFT's target_modules: "q_proj", ...
    pub fn name(self) -> &'static str {
        match self {
            Proj::Q => "q_proj",
            Proj::K => "k_proj",
            Proj::V => "v_proj",
            Proj::O => "o_proj",
            Proj::Gate => "gate_proj",
            Proj::Up => "up_proj",
            Proj::Down => "down_proj",
        }
    }

    /// Short name users pass in `--targets`: "q", "k", "v", "o", "gate", "up", "down".
    pub fn peft_name(self) -> &'static str {
        match self {
            Proj::Q => "q",
            Proj::K => "k",
            Proj::V => "v",
            Proj::O => "o",
            Proj::Gate => "gate",
            Proj::Up => "up",
            Proj::Down => "down",
        }
    }

    /// Parse a short ("q") or module ("q_proj") name.
    pub fn parse(s: &str) -> Option<Proj> {
        Proj::all().into_iter().find(|p| s == p.name() || s == p.peft_name())
    }

    /// Parse a comma-separated `--targets` list ("q,v" or "q_proj,v_proj", or "all").
    /// Duplicates are dropped; the result is in checkpoint order.
    pub fn parse_list(s: &str) -> Result<Vec<Proj>, String> {
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|x| !x.is_empty()) {
            if part == "all" || part == "all-linear" {
                return Ok(Proj::all().to_vec());
            }
            let p = Proj::parse(part).ok_or_else(|| {
                format!(
                    "unknown projection {part:?} (known: q, k, v, o, gate, up, down, or their *_proj names, or all)"
                )
            })?;
            if !out.contains(&p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            return Err("no projection named".into());
        }
        out.sort();
        Ok(out)
    }

    /// (out_features, in_features) of the weight, which is stored (out, in).
    pub fn dims(self, cfg: &ModelConfig) -> (usize, usize) {
        let q = cfg.heads * cfg.head_dim;
        let kv = cfg.kv_heads * cfg.head_dim;
        match self {
            Proj::Q => (q, cfg.hidden),
            Proj::K | Proj::V => (kv, cfg.hidden),
            Proj::O => (cfg.hidden, q),
            Proj::Gate | Proj::Up => (cfg.intermediate, cfg.hidden),
            Proj::Down => (cfg.hidden, cfg.intermediate),
        }
    }

    pub fn has_bias(self, cfg: &ModelConfig) -> bool {
        match self {
            Proj::Q | Proj::K | Proj::V => cfg.qkv_bias,
            Proj::O => cfg.o_bias,
            Proj::Gate | Proj::Up | Proj::Down => cfg.mlp_bias,
        }
    }

    /// Path inside a layer: "self_attn.q_proj", "mlp.gate_proj".
    pub fn module_path(self) -> &'static str {
        match self {
            Proj::Q => "self_attn.q_proj",
            Proj::K => "self_attn.k_proj",
            Proj::V => "self_attn.v_proj",
            Proj::O => "self_attn.o_proj",
            Proj::Gate => "mlp.gate_proj",
            Proj::Up => "mlp.up_proj",
            Proj::Down => "mlp.down_proj",
        }
    }
}

pub const EMBED_KEY: &str = "model.embed_tokens.weight";
pub const FINAL_NORM_KEY: &str = "model.norm.weight";
pub const LM_HEAD_KEY: &str = "lm_head.weight";

/// "model.layers.{i}"
pub fn layer_prefix(layer: usize) -> String {
    format!("model.layers.{layer}")
}

/// "model.layers.{i}.self_attn.q_proj.weight"
pub fn proj_weight_key(layer: usize, p: Proj) -> String {
    format!("model.layers.{layer}.{}.weight", p.module_path())
}

/// "model.layers.{i}.self_attn.q_proj.bias"
pub fn proj_bias_key(layer: usize, p: Proj) -> String {
    format!("model.layers.{layer}.{}.bias", p.module_path())
}

/// "model.layers.{i}.input_layernorm.weight"
pub fn input_norm_key(layer: usize) -> String {
    format!("model.layers.{layer}.input_layernorm.weight")
}

/// "model.layers.{i}.post_attention_layernorm.weight"
pub fn post_norm_key(layer: usize) -> String {
    format!("model.layers.{layer}.post_attention_layernorm.weight")
}

/// Every tensor the model reads, with its shape, in checkpoint order: embedding,
/// per layer (norms, projections with their biases), final norm, lm_head when untied.
pub fn expected_tensors(cfg: &ModelConfig) -> Vec<(String, Vec<usize>)> {
    let c = cfg.hidden;
    let mut out = vec![(EMBED_KEY.to_string(), vec![cfg.vocab, c])];
    for i in 0..cfg.layers {
        out.push((input_norm_key(i), vec![c]));
        for p in Proj::all() {
            let (o, inp) = p.dims(cfg);
            out.push((proj_weight_key(i, p), vec![o, inp]));
            if p.has_bias(cfg) {
                out.push((proj_bias_key(i, p), vec![o]));
            }
        }
        out.push((post_norm_key(i), vec![c]));
    }
    out.push((FINAL_NORM_KEY.to_string(), vec![c]));
    if !cfg.tie_word_embeddings {
        out.push((LM_HEAD_KEY.to_string(), vec![cfg.vocab, c]));
    }
    out
}

/// Number of frozen parameters the model reads (embedding counted once when tied).
pub fn param_count(cfg: &ModelConfig) -> usize {
    expected_tensors(cfg).iter().map(|(_, s)| s.iter().product::<usize>()).sum()
}

/// Check that every expected tensor exists with the right shape (lm_head only
/// when untied; a tied checkpoint that still ships lm_head.weight is fine).
/// Reads headers only.
pub fn validate(ckpt: &Checkpoint) -> Result<(), StoreError> {
    for (name, expected) in expected_tensors(ckpt.config()) {
        match ckpt.shape(&name) {
            None => return Err(StoreError::Missing { tensor: name, expected }),
            Some(found) if found != expected.as_slice() => {
                return Err(StoreError::Shape { tensor: name, expected, found: found.to_vec() })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::store::testdata::{tiny_checkpoint, tiny_config, tiny_files};

    #[test]
    fn key_names() {
        assert_eq!(proj_weight_key(3, Proj::Q), "model.layers.3.self_attn.q_proj.weight");
        assert_eq!(proj_bias_key(0, Proj::V), "model.layers.0.self_attn.v_proj.bias");
        assert_eq!(proj_weight_key(11, Proj::Down), "model.layers.11.mlp.down_proj.weight");
        assert_eq!(input_norm_key(2), "model.layers.2.input_layernorm.weight");
        assert_eq!(post_norm_key(2), "model.layers.2.post_attention_layernorm.weight");
        for (i, p) in Proj::all().into_iter().enumerate() {
            assert_eq!(p as usize, i);
            assert_eq!(Proj::parse(p.name()), Some(p));
            assert_eq!(Proj::parse(p.peft_name()), Some(p));
            assert!(p.module_path().ends_with(p.name()));
        }
        assert_eq!(Proj::parse("qproj"), None);
        assert_eq!(Proj::parse_list("v, q_proj,q"), Ok(vec![Proj::Q, Proj::V]));
        assert_eq!(Proj::parse_list("all"), Ok(Proj::all().to_vec()));
        let e = Proj::parse_list("q,lm_head").expect_err("unknown");
        assert!(e.contains("lm_head"), "{e}");
        assert!(Proj::parse_list(" , ").is_err());
    }

    #[test]
    fn dims_and_biases_qwen25_05b() {
        let cfg = ModelConfig::preset("qwen2.5-0.5b").expect("preset");
        assert_eq!(Proj::Q.dims(&cfg), (896, 896));
        assert_eq!(Proj::K.dims(&cfg), (128, 896));
        assert_eq!(Proj::V.dims(&cfg), (128, 896));
        assert_eq!(Proj::O.dims(&cfg), (896, 896));
        assert_eq!(Proj::Gate.dims(&cfg), (4864, 896));
        assert_eq!(Proj::Up.dims(&cfg), (4864, 896));
        assert_eq!(Proj::Down.dims(&cfg), (896, 4864));
        let biased: Vec<Proj> = Proj::all().into_iter().filter(|p| p.has_bias(&cfg)).collect();
        assert_eq!(biased, vec![Proj::Q, Proj::K, Proj::V]);
        // 494,032,768 parameters as published (embedding tied).
        assert_eq!(param_count(&cfg), 494_032_768);
        // 2 + 24·(2 + 7 + 3) + 0 tensors.
        assert_eq!(expected_tensors(&cfg).len(), 2 + 24 * 12);
    }

    #[test]
    fn dims_smollm2_135m() {
        let cfg = ModelConfig::preset("smollm2-135m").expect("preset");
        assert_eq!(Proj::K.dims(&cfg), (192, 576));
        assert_eq!(Proj::Down.dims(&cfg), (576, 1536));
        assert!(Proj::all().into_iter().all(|p| !p.has_bias(&cfg)));
        assert_eq!(param_count(&cfg), 134_515_008);
    }

    #[test]
    fn validate_tiny() {
        for tie in [true, false] {
            let cfg = tiny_config(tie);
            let ckpt = tiny_checkpoint(&cfg, &[], &[]);
            validate(&ckpt).expect("complete checkpoint validates");
        }
        // Tied, but lm_head.weight shipped anyway: fine.
        let cfg = tiny_config(true);
        let ckpt = tiny_checkpoint(&cfg, &[], &[(LM_HEAD_KEY, vec![cfg.vocab, cfg.hidden])]);
        validate(&ckpt).expect("extra lm_head is fine");
    }

    #[test]
    fn validate_names_bad_tensor() {
        let cfg = tiny_config(false);
        let q1 = proj_weight_key(1, Proj::Q);
        let ckpt = tiny_checkpoint(&cfg, &[], &[(&q1, vec![36, 40])]);
        let e = validate(&ckpt).expect_err("wrong shape").to_string();
        assert_eq!(
            e,
            "model.layers.1.self_attn.q_proj.weight: expected shape [36, 36] (from config.json), found [36, 40]"
        );

        let ckpt = tiny_checkpoint(&cfg, &[LM_HEAD_KEY], &[]);
        let e = validate(&ckpt).expect_err("missing lm_head").to_string();
        assert!(e.starts_with("lm_head.weight: missing") && e.contains("[50, 36]"), "{e}");

        let kb = proj_bias_key(0, Proj::K);
        let ckpt = tiny_checkpoint(&cfg, &[&kb], &[]);
        let e = validate(&ckpt).expect_err("missing bias").to_string();
        assert!(e.starts_with("model.layers.0.self_attn.k_proj.bias: missing"), "{e}");

        // The same files with a config that wants more layers.
        let mut files = tiny_files(&cfg, &[], &[]);
        let text = String::from_utf8(files["config.json"].clone())
            .expect("utf8")
            .replace("\"num_hidden_layers\":2", "\"num_hidden_layers\":3");
        files.insert("config.json".into(), text.into_bytes());
        let ckpt = Checkpoint::from_files(files).expect("opens");
        let e = validate(&ckpt).expect_err("missing layer").to_string();
        assert!(e.starts_with("model.layers.2.input_layernorm.weight: missing"), "{e}");
    }
}
