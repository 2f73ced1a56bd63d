//! The plan of a GGUF's conversion, made and checked before any tensor is read: config.json
//! from the metadata, the tokenizer files, and every tensor's Hugging Face name, shape and
//! treatment (the GGUF ↔ HF name tables, llama.cpp's Q/K row permutation undone).

use super::ImportSummary;
use crate::base::config::ModelConfig;
use crate::base::names::{expected_tensors, CONFIG_FILE};
use crate::formats::gguf::tokenizer::tokenizer_files;
use crate::formats::gguf::{invalid, unsupported, Gguf, Result, TensorInfo};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};

/// One output tensor: where it comes from and what is done to it.
pub(super) struct Planned {
    pub(super) hf_name: String,
    pub(super) src: TensorInfo,
    /// (out, in) or (n,)
    pub(super) shape: Vec<usize>,
    /// Undo llama.cpp's permute with this many heads.
    pub(super) unpermute_heads: Option<usize>,
}

/// Everything to write, decided (and checked) before any tensor is read.
pub(super) struct Plan {
    /// The json files by name.
    pub(super) json: Vec<(&'static str, Vec<u8>)>,
    pub(super) tensors: Vec<Planned>,
    pub(super) summary: ImportSummary,
}

/// GGUF tensor names of the whole model and their HF counterparts.
const TOP_NAMES: [(&str, &str); 3] = [
    ("token_embd.weight", "model.embed_tokens.weight"),
    ("output_norm.weight", "model.norm.weight"),
    ("output.weight", "lm_head.weight"),
];

/// GGUF module names within a block (`blk.N.`) and their HF counterparts (`model.layers.N.`).
const BLOCK_NAMES: [(&str, &str); 9] = [
    ("attn_norm", "input_layernorm"),
    ("attn_q", "self_attn.q_proj"),
    ("attn_k", "self_attn.k_proj"),
    ("attn_v", "self_attn.v_proj"),
    ("attn_output", "self_attn.o_proj"),
    ("ffn_norm", "post_attention_layernorm"),
    ("ffn_gate", "mlp.gate_proj"),
    ("ffn_up", "mlp.up_proj"),
    ("ffn_down", "mlp.down_proj"),
];

/// The HF name of a GGUF tensor (`None`: not a tensor of a llama/qwen2 checkpoint).
fn hf_name(gguf: &str) -> Option<String> {
    if let Some((_, hf)) = TOP_NAMES.iter().find(|(g, _)| *g == gguf) {
        return Some(hf.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.split_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let (_, module) = BLOCK_NAMES.iter().find(|(g, _)| *g == part)?;
    Some(format!("model.layers.{layer}.{module}.{kind}"))
}

/// The GGUF name of an HF tensor (the inverse of [`hf_name`]).
pub(super) fn gguf_name(hf: &str) -> Option<String> {
    if let Some((g, _)) = TOP_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    let (part, _) = BLOCK_NAMES.iter().find(|(_, h)| *h == module)?;
    Some(format!("blk.{layer}.{part}.{kind}"))
}

fn required(g: &Gguf, key: &str) -> Result<u64> {
    match g.get_u64(key)? {
        Some(v) if v > 0 && v <= u32::MAX as u64 => Ok(v),
        Some(v) => Err(invalid(format!("metadata {key} = {v} is out of range"))),
        None => Err(invalid(format!("metadata {key}: missing"))),
    }
}

pub(super) fn plan(g: &Gguf) -> Result<Plan> {
    let arch = g.get_str("general.architecture")?.ok_or_else(|| invalid("metadata general.architecture: missing"))?;
    let (hf_arch, permuted) = match arch {
        "llama" => ("LlamaForCausalLM", true),
        "qwen2" => ("Qwen2ForCausalLM", false),
        other => {
            return Err(unsupported(format!("general.architecture = {other:?} is not supported (llama and qwen2 are)")))
        }
    };
    let key = |k: &str| format!("{arch}.{k}");
    if g.get_u64(&key("expert_count"))?.unwrap_or(0) > 0 {
        return Err(unsupported(format!("{} > 0: mixture-of-experts models are not supported", key("expert_count"))));
    }
    if let Some(t) = g.get_str(&key("rope.scaling.type"))?.filter(|t| *t != "none") {
        return Err(unsupported(format!("{} = {t:?}: scaled RoPE is not supported", key("rope.scaling.type"))));
    }
    let hidden = required(g, &key("embedding_length"))?;
    let layers = required(g, &key("block_count"))?;
    let heads = required(g, &key("attention.head_count"))?;
    let kv_heads = g.get_u64(&key("attention.head_count_kv"))?.unwrap_or(heads);
    let head_dim = match g.get_u64(&key("attention.key_length"))? {
        Some(d) => d,
        None => hidden / heads,
    };
    if let Some(r) = g.get_u64(&key("rope.dimension_count"))?.filter(|&r| r != head_dim) {
        return Err(unsupported(format!(
            "{} = {r} but the head dimension is {head_dim}: partial rotary embeddings are not supported",
            key("rope.dimension_count")
        )));
    }
    let intermediate = required(g, &key("feed_forward_length"))?;
    let rope_theta = g.get_f64(&key("rope.freq_base"))?.unwrap_or(10000.0);
    let eps = g
        .get_f64(&key("attention.layer_norm_rms_epsilon"))?
        .ok_or_else(|| invalid(format!("metadata {}: missing", key("attention.layer_norm_rms_epsilon"))))?;
    let context = g.get_u64(&key("context_length"))?.unwrap_or(2048);

    let embed = g.tensor("token_embd.weight").ok_or_else(|| invalid("tensor token_embd.weight: missing"))?;
    let vocab_size = embed.dims.get(1).copied().unwrap_or(0);
    let tied = g.tensor("output.weight").is_none();
    let has = |name: &str| g.tensor(name).is_some();
    let tok = tokenizer_files(g, context)?;

    let mut config = json!({
        "architectures": [hf_arch],
        "model_type": arch,
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": context,
        "rms_norm_eps": eps,
        "rope_theta": rope_theta,
        "rope_parameters": {"rope_theta": rope_theta, "rope_type": "default"},
        "tie_word_embeddings": tied,
        "vocab_size": vocab_size,
        "bos_token_id": tok.bos,
        "eos_token_id": tok.eos,
        "pad_token_id": tok.pad,
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "use_cache": true,
    });
    if arch == "llama" {
        config["attention_bias"] = json!(has("blk.0.attn_q.bias"));
        config["mlp_bias"] = json!(has("blk.0.ffn_gate.bias"));
    } else {
        config["use_sliding_window"] = json!(false);
    }
    let config_json = serde_json::to_vec_pretty(&config).unwrap_or_default();
    let cfg = ModelConfig::from_json(&String::from_utf8_lossy(&config_json))
        .map_err(|e| unsupported(format!("the config.json made from the metadata is refused: {e}")))?;

    // Every tensor must be one the config expects, with its shape and a type we read.
    let expected: HashMap<String, Vec<usize>> = expected_tensors(&cfg).into_iter().collect();
    let mut by_name: HashMap<String, Planned> = HashMap::new();
    let mut source_types = BTreeMap::new();
    for t in &g.tensors {
        let name = hf_name(&t.name)
            .ok_or_else(|| unsupported(format!("tensor {}: no Hugging Face {hf_arch} counterpart", t.name)))?;
        let shape = t.shape();
        match expected.get(&name) {
            None => {
                return Err(unsupported(format!("tensor {} ({name}) is not part of this {hf_arch} config", t.name)))
            }
            Some(e) if *e != shape => {
                return Err(invalid(format!(
                    "tensor {} ({name}): shape {shape:?}, but the metadata implies {e:?}",
                    t.name
                )))
            }
            Some(_) => {}
        }
        if !t.ggml_type.dequantizable() {
            return Err(unsupported(format!(
                "tensor {}: type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K are)",
                t.name, t.ggml_type.name
            )));
        }
        *source_types.entry(t.ggml_type.name.to_string()).or_insert(0) += 1;
        let unpermute_heads = match (permuted, name.contains(".self_attn.q_proj."), name.contains(".self_attn.k_proj."))
        {
            (true, true, _) => Some(cfg.heads),
            (true, _, true) => Some(cfg.kv_heads),
            _ => None,
        };
        by_name.insert(name.clone(), Planned { hf_name: name, src: t.clone(), shape, unpermute_heads });
    }
    let mut tensors = Vec::new();
    for (name, shape) in expected_tensors(&cfg) {
        let p = by_name
            .remove(&name)
            .ok_or_else(|| invalid(format!("the file has no tensor for {name} (shape {shape:?})")))?;
        tensors.push(p);
    }

    let mut generation = serde_json::Map::new();
    for (k, v) in [("bos_token_id", tok.bos), ("eos_token_id", tok.eos), ("pad_token_id", tok.pad)] {
        if let Some(v) = v {
            generation.insert(k.into(), json!(v));
        }
    }
    let json = vec![
        ("tokenizer.json", tok.tokenizer_json),
        ("tokenizer_config.json", tok.tokenizer_config),
        ("special_tokens_map.json", tok.special_tokens_map),
        ("generation_config.json", serde_json::to_vec_pretty(&generation).unwrap_or_default()),
        (CONFIG_FILE, config_json),
    ];
    let summary = ImportSummary {
        architecture: arch.to_string(),
        gguf_version: g.version,
        tensors: tensors.len(),
        params: tensors.iter().map(|t| t.shape.iter().product::<usize>() as u64).sum(),
        source_types,
        vocab: tok.vocab,
        tied_embeddings: tied,
        files: Vec::new(),
    };
    Ok(Plan { json, tensors, summary })
}

/// Undo llama.cpp's `permute(w, n_head)`: within each head of `rows / heads` rows, GGUF row
/// 2i + j holds HF row j·half + i (j ∈ {0, 1}, i < half). `w`: (rows, row_len) row-major.
pub(in crate::formats::gguf) fn unpermute_rows(w: &[f32], rows: usize, heads: usize, name: &str) -> Result<Vec<f32>> {
    if heads == 0 || rows % (2 * heads) != 0 {
        return Err(invalid(format!("tensor {name}: {rows} rows cannot be split into {heads} heads of even size")));
    }
    let row_len = w.len() / rows;
    let head_rows = rows / heads;
    let half = head_rows / 2;
    let mut out = vec![0f32; w.len()];
    for h in 0..heads {
        for i in 0..half {
            for j in 0..2 {
                let src = (h * head_rows + 2 * i + j) * row_len;
                let dst = (h * head_rows + j * half + i) * row_len;
                out[dst..dst + row_len].copy_from_slice(&w[src..src + row_len]);
            }
        }
    }
    Ok(out)
}

impl Planned {
    /// Rows: the first dimension of a matrix, 1 for a vector.
    pub(super) fn rows(&self) -> usize {
        if self.shape.len() >= 2 {
            self.shape[0]
        } else {
            1
        }
    }

    /// Elements per row.
    pub(super) fn row_len(&self) -> usize {
        self.shape.iter().product::<usize>() / self.rows()
    }
}
