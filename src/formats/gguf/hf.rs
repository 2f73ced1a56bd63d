//! A llama or qwen2 GGUF → a Hugging Face checkpoint: config.json from the metadata, tensors
//! renamed (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`), dequantized, with
//! llama.cpp's Q/K row permutation undone (llama only), written as one bf16 model.safetensors, and
//! the tokenizer files of [`super::tokenizer`] plus generation_config.json.
//!
//! Every weight is rounded once to bf16 (round to nearest even) from its f32 dequantization, norms
//! included: the same tensors scripts/convert-gguf-to-hf.py makes with transformers, bit for bit.
//! Everything is checked (types, names, shapes against config.json) before the first byte is
//! written, and the weights are streamed one tensor at a time.

use super::tokenizer::tokenizer_files;
use super::{invalid, unsupported, Gguf, GgufError, TensorInfo};
use crate::config::ModelConfig;
use crate::model::layout::expected_tensors;
use crate::store::{CONFIG_FILE, SINGLE_FILE};
use serde_json::json;
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, Write};

type Result<T, E = GgufError> = std::result::Result<T, E>;

/// What an import did, for the CLI to print.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportSummary {
    /// general.architecture ("llama", "qwen2")
    pub architecture: String,
    pub gguf_version: u32,
    /// GGUF tensor type → how many tensors of it were read
    pub source_types: BTreeMap<String, usize>,
    pub tensors: usize,
    pub params: u64,
    pub vocab: usize,
    pub tied_embeddings: bool,
    /// (file name, bytes), in the order written
    pub files: Vec<(String, u64)>,
}

impl std::fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types: Vec<String> = self.source_types.iter().map(|(t, n)| format!("{n} {t}")).collect();
        let files: Vec<String> = self.files.iter().map(|(n, b)| format!("{n} ({b} bytes)")).collect();
        write!(
            f,
            "{} (GGUF v{}): {} tensors ({}) → {} parameters in bf16, vocabulary {}, tied embeddings: {}; files: {}",
            self.architecture,
            self.gguf_version,
            self.tensors,
            types.join(", "),
            self.params,
            self.vocab,
            self.tied_embeddings,
            files.join(", ")
        )
    }
}

/// One output tensor: where it comes from and what is done to it.
struct Planned {
    hf_name: String,
    src: TensorInfo,
    /// (out, in) or (n,)
    shape: Vec<usize>,
    /// Undo llama.cpp's permute with this many heads.
    unpermute_heads: Option<usize>,
}

/// Everything to write, decided (and checked) before any tensor is read.
struct Plan {
    /// The json files by name.
    json: Vec<(&'static str, Vec<u8>)>,
    tensors: Vec<Planned>,
    summary: ImportSummary,
}

/// The HF name of a GGUF tensor (`None`: not a tensor of a llama/qwen2 checkpoint).
fn hf_name(gguf: &str) -> Option<String> {
    let top = match gguf {
        "token_embd.weight" => Some("model.embed_tokens.weight"),
        "output_norm.weight" => Some("model.norm.weight"),
        "output.weight" => Some("lm_head.weight"),
        _ => None,
    };
    if let Some(t) = top {
        return Some(t.to_string());
    }
    let rest = gguf.strip_prefix("blk.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (part, kind) = rest.split_once('.')?;
    if kind != "weight" && kind != "bias" {
        return None;
    }
    let module = match part {
        "attn_norm" => "input_layernorm",
        "attn_q" => "self_attn.q_proj",
        "attn_k" => "self_attn.k_proj",
        "attn_v" => "self_attn.v_proj",
        "attn_output" => "self_attn.o_proj",
        "ffn_norm" => "post_attention_layernorm",
        "ffn_gate" => "mlp.gate_proj",
        "ffn_up" => "mlp.up_proj",
        "ffn_down" => "mlp.down_proj",
        _ => return None,
    };
    Some(format!("model.layers.{layer}.{module}.{kind}"))
}

fn required(g: &Gguf, key: &str) -> Result<u64> {
    match g.get_u64(key)? {
        Some(v) if v > 0 && v <= u32::MAX as u64 => Ok(v),
        Some(v) => Err(invalid(format!("metadata {key} = {v} is out of range"))),
        None => Err(invalid(format!("metadata {key}: missing"))),
    }
}

fn plan(g: &Gguf) -> Result<Plan> {
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
pub(super) fn unpermute_rows(w: &[f32], rows: usize, heads: usize, name: &str) -> Result<Vec<f32>> {
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

/// model.safetensors: the header (every tensor BF16), then each tensor read, dequantized,
/// un-permuted and rounded. Returns the bytes written.
fn write_safetensors<R: Read + Seek, W: Write>(
    g: &Gguf,
    r: &mut R,
    tensors: &[Planned],
    w: &mut W,
    out_name: &str,
) -> Result<u64> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0usize;
    for t in tensors {
        let n = t.shape.iter().product::<usize>() * 2;
        header.insert(
            t.hf_name.clone(),
            json!({"dtype": "BF16", "shape": t.shape, "data_offsets": [offset, offset + n]}),
        );
        offset += n;
    }
    let mut head = serde_json::Value::Object(header).to_string().into_bytes();
    head.resize(head.len().next_multiple_of(8), b' ');
    let io = |source| GgufError::Io { what: format!("writing {out_name}"), source };
    w.write_all(&(head.len() as u64).to_le_bytes()).map_err(io)?;
    w.write_all(&head).map_err(io)?;
    for t in tensors {
        let mut data = g.tensor_f32(r, &t.src.name)?;
        if let Some(heads) = t.unpermute_heads {
            data = unpermute_rows(&data, t.shape[0], heads, &t.src.name)?;
        }
        let bytes: Vec<u8> = data.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect();
        w.write_all(&bytes).map_err(io)?;
    }
    Ok(8 + head.len() as u64 + offset as u64)
}

/// The HF checkpoint files of a llama/qwen2 GGUF, by name: config.json, model.safetensors,
/// tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json
/// (ready for [`crate::store::Checkpoint::from_files`]).
pub fn gguf_to_hf_files<R: Read + Seek>(r: &mut R) -> Result<HashMap<String, Vec<u8>>> {
    gguf_to_hf_files_with_summary(r).map(|(files, _)| files)
}

/// [`gguf_to_hf_files`], and what was imported.
pub fn gguf_to_hf_files_with_summary<R: Read + Seek>(r: &mut R) -> Result<(HashMap<String, Vec<u8>>, ImportSummary)> {
    let g = Gguf::parse(r)?;
    let plan = plan(&g)?;
    let mut summary = plan.summary;
    let mut weights = Vec::new();
    let n = write_safetensors(&g, r, &plan.tensors, &mut weights, SINGLE_FILE)?;
    summary.files.push((SINGLE_FILE.to_string(), n));
    let mut files = HashMap::new();
    files.insert(SINGLE_FILE.to_string(), weights);
    for (name, bytes) in plan.json {
        summary.files.push((name.to_string(), bytes.len() as u64));
        files.insert(name.to_string(), bytes);
    }
    Ok((files, summary))
}

/// `webtune import --gguf FILE --out DIR`: write the HF checkpoint of a GGUF into `out_dir`
/// (created if needed; refused if it already holds any of the files). The weights are streamed
/// into model.safetensors.part and renamed; config.json is written last, so a directory that
/// has it is complete.
#[cfg(not(target_arch = "wasm32"))]
pub fn import_gguf_to_dir(gguf_path: &std::path::Path, out_dir: &std::path::Path) -> Result<ImportSummary> {
    use std::fs::File;
    use std::io::{BufReader, BufWriter};
    let io = |path: &std::path::Path| {
        let what = path.display().to_string();
        move |source| GgufError::Io { what, source }
    };
    let mut r = BufReader::new(File::open(gguf_path).map_err(io(gguf_path))?);
    let g = Gguf::parse(&mut r).map_err(|e| match e {
        GgufError::Invalid(m) => invalid(format!("{}: {m}", gguf_path.display())),
        e => e,
    })?;
    let plan = plan(&g)?;
    for name in plan.json.iter().map(|(n, _)| *n).chain([SINGLE_FILE]) {
        let path = out_dir.join(name);
        if path.exists() {
            return Err(GgufError::Io {
                what: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "already exists (remove it or choose another --out directory)",
                ),
            });
        }
    }
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    let mut summary = plan.summary;

    let part = out_dir.join(format!("{SINGLE_FILE}.part"));
    let written = (|| {
        let mut w = BufWriter::new(File::create(&part).map_err(io(&part))?);
        let n = write_safetensors(&g, &mut r, &plan.tensors, &mut w, SINGLE_FILE)?;
        w.into_inner().map_err(|e| io(&part)(e.into_error()))?.sync_all().map_err(io(&part))?;
        Ok(n)
    })();
    let n = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&part); // best effort: the error being returned is the one that matters
    })?;
    let weights = out_dir.join(SINGLE_FILE);
    std::fs::rename(&part, &weights).map_err(io(&weights))?;
    summary.files.push((SINGLE_FILE.to_string(), n));

    for (name, bytes) in &plan.json {
        let path = out_dir.join(name);
        std::fs::write(&path, bytes).map_err(io(&path))?;
        summary.files.push((name.to_string(), bytes.len() as u64));
    }
    Ok(summary)
}
