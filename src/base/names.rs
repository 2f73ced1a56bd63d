//! Every name the engine reads or writes, spelled in one place: the files of a Hugging Face
//! model directory and of a PEFT adapter, the checkpoint's tensor keys
//! (`model.layers.{i}.self_attn.q_proj.weight`) with their shapes derived from the config,
//! and PEFT's adapter keys (`base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`).

use crate::base::config::ModelConfig;

/// A model directory's config.
pub const CONFIG_FILE: &str = "config.json";
/// The weights in one file ...
pub const SINGLE_FILE: &str = "model.safetensors";
/// ... or in shards listed by this index ("weight_map").
pub const INDEX_FILE: &str = "model.safetensors.index.json";
/// Other files read from a model directory when present.
pub const OPTIONAL_FILES: [&str; 7] = [
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "vocab.json",
    "merges.txt",
];
/// A PEFT adapter's config ...
pub const ADAPTER_CONFIG_FILE: &str = "adapter_config.json";
/// ... and its weights.
pub const ADAPTER_WEIGHTS_FILE: &str = "adapter_model.safetensors";

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

/// What every PEFT LoRA key of a decoder layer starts with.
pub(crate) const KEY_PREFIX: &str = "base_model.model.model.layers.";

/// "base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight": A, (r, in)
pub fn lora_a_key(layer: usize, p: Proj) -> String {
    format!("{KEY_PREFIX}{layer}.{}.lora_A.weight", p.module_path())
}

/// "base_model.model.model.layers.{i}.self_attn.q_proj.lora_B.weight": B, (out, r)
pub fn lora_b_key(layer: usize, p: Proj) -> String {
    format!("{KEY_PREFIX}{layer}.{}.lora_B.weight", p.module_path())
}

/// Which matrix of a LoRA pair a key names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AB {
    A,
    B,
}

/// Inverse of [`lora_a_key`] / [`lora_b_key`].
pub fn parse_lora_key(key: &str) -> Option<(usize, Proj, AB)> {
    let rest = key.strip_prefix(KEY_PREFIX)?;
    let (layer, rest) = rest.split_once('.')?;
    if layer.is_empty() || !layer.bytes().all(|b| b.is_ascii_digit()) || (layer.len() > 1 && layer.starts_with('0')) {
        return None;
    }
    let layer: usize = layer.parse().ok()?;
    let (module, ab) = if let Some(m) = rest.strip_suffix(".lora_A.weight") {
        (m, AB::A)
    } else {
        (rest.strip_suffix(".lora_B.weight")?, AB::B)
    };
    let p = Proj::all().into_iter().find(|p| p.module_path() == module)?;
    Some((layer, p, ab))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::test;

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
}
