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
use super::{dequantize_tensor, invalid, read_at, unsupported, Gguf, GgufError, TensorInfo};
use crate::base::config::ModelConfig;
use crate::base::names::expected_tensors;
use crate::base::names::{CONFIG_FILE, SINGLE_FILE};
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
fn gguf_name(hf: &str) -> Option<String> {
    if let Some((g, _)) = TOP_NAMES.iter().find(|(_, h)| *h == hf) {
        return Some(g.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let (module, kind) = rest.rsplit_once('.')?;
    let (part, _) = BLOCK_NAMES.iter().find(|(_, h)| *h == module)?;
    Some(format!("blk.{layer}.{part}.{kind}"))
}

/// A GGUF of `cfg`'s shape with random weights (F16 matrices, F32 norms and biases, uniform in
/// ±0.05 from `seed`) and a stand-in byte-level BPE tokenizer as large as a real one (3 special
/// tokens, the 256 byte tokens, then pairs and triples of bytes with their merges): what `webtune make-gguf` writes to benchmark imports
/// at real sizes without a download. Written tensor by tensor into `w`; returns the bytes written.
pub fn write_random_model<W: Write>(cfg: &ModelConfig, seed: u64, w: &mut W) -> std::io::Result<u64> {
    use super::write::{T_F16 as F16, T_F32 as F32};
    use crate::base::config::Arch;
    let arch = match cfg.arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
    };
    // Byte-level BPE as real vocabularies are: the 256 byte tokens, then every pair of them, then
    // pairs followed by a byte, each with its merge, up to the vocabulary size.
    let bytes = super::tokenizer::byte_chars();
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).to_vec();
    tokens.extend(bytes.iter().map(|c| c.to_string()));
    let mut merges = Vec::new();
    let pairs = bytes.iter().flat_map(|&a| bytes.iter().map(move |&b| (a.to_string(), b.to_string())));
    let triples = pairs.clone().flat_map(|(a, b)| bytes.iter().map(move |&c| (format!("{a}{b}"), c.to_string())));
    for (a, b) in pairs.chain(triples).take(cfg.vocab.saturating_sub(tokens.len())) {
        tokens.push(format!("{a}{b}"));
        merges.push(format!("{a} {b}"));
    }
    let mut types = vec![3; 3];
    types.resize(tokens.len(), 1);
    let mut g = super::write::GgufWriter::new();
    let key = |k: &str| format!("{arch}.{k}");
    g.str("general.architecture", arch)
        .u32(&key("embedding_length"), cfg.hidden as u32)
        .u32(&key("block_count"), cfg.layers as u32)
        .u32(&key("attention.head_count"), cfg.heads as u32)
        .u32(&key("attention.head_count_kv"), cfg.kv_heads as u32)
        .u32(&key("attention.key_length"), cfg.head_dim as u32)
        .u32(&key("feed_forward_length"), cfg.intermediate as u32)
        .u32(&key("context_length"), cfg.max_position_embeddings as u32)
        .f32(&key("rope.freq_base"), cfg.rope_theta as f32)
        .f32(&key("attention.layer_norm_rms_epsilon"), cfg.rms_norm_eps as f32)
        .gpt2_tokenizer(
            if arch == "qwen2" { "qwen2" } else { "smollm" },
            &tokens,
            &merges,
            &types,
            (1, 2, 0),
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}\
             {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        );
    let tensors = expected_tensors(cfg);
    for (hf, shape) in &tensors {
        let name = gguf_name(hf).ok_or_else(|| std::io::Error::other(format!("{hf}: no GGUF name")))?;
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let numel = shape.iter().product::<usize>() as u64;
        let (ty, bytes) = if shape.len() >= 2 { (F16, 2) } else { (F32, 4) };
        g.tensor_len(&name, &ne, ty, numel * bytes);
    }
    let mut rng = crate::base::rng::Rng::new(seed);
    let mut buf = Vec::new();
    g.write(w, |i, w| {
        let shape = &tensors[i].1;
        let numel: usize = shape.iter().product();
        // 1 Mi values at a time, so a 272 MB embedding table is never whole in memory.
        for start in (0..numel).step_by(1 << 20) {
            buf.clear();
            for _ in start..(start + (1 << 20)).min(numel) {
                let x = ((rng.uniform() * 2.0 - 1.0) * 0.05) as f32;
                if shape.len() >= 2 {
                    buf.extend(half::f16::from_f32(x).to_bits().to_le_bytes());
                } else {
                    buf.extend((1.0 + x).to_le_bytes());
                }
            }
            w.write_all(&buf)?;
        }
        Ok(())
    })
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

/// Most bf16 bytes one conversion unit makes ([`HfView`]): 1 MiB, so converting a unit takes
/// about 4 × that (raw bytes, f32, the un-permuted copy, bf16) whatever the model's size.
pub const UNIT_BYTES: usize = 1 << 20;

/// The Hugging Face checkpoint of a GGUF as a view: the small json files, and model.safetensors
/// as a header plus tensors made on demand in units of whole rows (whole heads for the
/// un-permuted Q and K), each from its own byte range of the GGUF. The metadata is dropped once
/// the plan is made, so a view holds only the tensor infos; converting a range of
/// model.safetensors needs only the units it overlaps. Both the native import (streamed into a
/// file) and the browser's (a virtual file the importer reads in chunks) use it.
pub struct HfView {
    json: Vec<(&'static str, Vec<u8>)>,
    tensors: Vec<Planned>,
    summary: ImportSummary,
    /// The length (u64 LE) and the JSON header of model.safetensors.
    head: Vec<u8>,
    /// Start of each tensor in model.safetensors (absolute), and the file's length last.
    starts: Vec<u64>,
    /// Rows per unit of each tensor.
    unit_rows: Vec<usize>,
}

/// One unit of [`HfView`]: rows `rows` of tensor `tensor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    pub tensor: usize,
    pub rows: (usize, usize),
}

impl HfView {
    /// The view of a parsed GGUF (checked as for [`gguf_to_hf_files`]), with units of at
    /// most `unit_bytes` bf16 bytes where rows allow (one row, or one head's rows, may be more).
    pub fn new(g: Gguf, unit_bytes: usize) -> Result<HfView> {
        let Plan { json, tensors, summary } = plan(&g)?;
        drop(g);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), json!({"format": "pt"}));
        let mut offset = 0u64;
        let mut rel = Vec::with_capacity(tensors.len());
        let mut unit_rows = Vec::with_capacity(tensors.len());
        for t in &tensors {
            let n = t.shape.iter().product::<usize>() as u64 * 2;
            header.insert(
                t.hf_name.clone(),
                json!({"dtype": "BF16", "shape": t.shape, "data_offsets": [offset, offset + n]}),
            );
            rel.push(offset);
            offset += n;
            let (rows, row_bytes) = (t.rows(), t.row_len() * 2);
            let mut per = (unit_bytes / row_bytes.max(1)).clamp(1, rows);
            if let Some(heads) = t.unpermute_heads {
                // Nothing checked divisibility yet: convert() refuses rows that do not split into heads.
                let head_rows = (rows / heads.max(1)).max(1);
                per = per.next_multiple_of(head_rows).min(rows);
            }
            unit_rows.push(per);
        }
        let mut head = serde_json::Value::Object(header).to_string().into_bytes();
        head.resize(head.len().next_multiple_of(8), b' ');
        let mut prefixed = (head.len() as u64).to_le_bytes().to_vec();
        prefixed.extend_from_slice(&head);
        let data = prefixed.len() as u64;
        let mut starts: Vec<u64> = rel.iter().map(|r| data + r).collect();
        starts.push(data + offset);
        Ok(HfView { json, tensors, summary, head: prefixed, starts, unit_rows })
    }

    /// config.json, the tokenizer files and generation_config.json, by name.
    pub fn json_files(&self) -> &[(&'static str, Vec<u8>)] {
        &self.json
    }

    pub fn summary(&self) -> &ImportSummary {
        &self.summary
    }

    /// The length of model.safetensors.
    pub fn safetensors_len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    /// model.safetensors's first bytes: the header length and the header.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The units that hold bytes `start .. end` of model.safetensors, in order.
    pub fn units(&self, start: u64, end: u64) -> Vec<Unit> {
        let mut out = Vec::new();
        let (start, end) = (start.max(self.head.len() as u64), end.min(self.safetensors_len()));
        if start >= end {
            return out;
        }
        // The tensor holding `start`: the last whose start is <= it.
        let first = self.starts[..self.tensors.len()].partition_point(|&s| s <= start).saturating_sub(1);
        for i in first..self.tensors.len() {
            let t0 = self.starts[i];
            if t0 >= end {
                break;
            }
            let row_bytes = (self.tensors[i].row_len() * 2) as u64;
            let rows = self.tensors[i].rows();
            let per = self.unit_rows[i];
            let lo = (start.saturating_sub(t0) / row_bytes) as usize / per * per;
            let hi = ((end - t0).div_ceil(row_bytes) as usize).min(rows);
            let mut r = lo;
            while r < hi {
                out.push(Unit { tensor: i, rows: (r, (r + per).min(rows)) });
                r += per;
            }
        }
        out
    }

    /// Where `unit`'s bytes lie in model.safetensors: (start, end).
    pub fn unit_range(&self, unit: Unit) -> (u64, u64) {
        let row_bytes = (self.tensors[unit.tensor].row_len() * 2) as u64;
        let t0 = self.starts[unit.tensor];
        (t0 + unit.rows.0 as u64 * row_bytes, t0 + unit.rows.1 as u64 * row_bytes)
    }

    /// Where `unit`'s source bytes lie in the GGUF: (offset, length).
    pub fn source_range(&self, unit: Unit) -> (u64, usize) {
        let t = &self.tensors[unit.tensor];
        let row = t.src.n_bytes / t.rows() as u64;
        (t.src.offset + unit.rows.0 as u64 * row, ((unit.rows.1 - unit.rows.0) as u64 * row) as usize)
    }

    /// `unit` in bf16, from its source bytes (as [`HfView::source_range`] says): dequantized,
    /// un-permuted where llama.cpp permuted, rounded once.
    pub fn convert(&self, unit: Unit, raw: &[u8]) -> Result<Vec<u8>> {
        let t = &self.tensors[unit.tensor];
        let rows = unit.rows.1 - unit.rows.0;
        let mut data = dequantize_tensor(&t.src, raw, rows * t.row_len())?;
        if let Some(heads) = t.unpermute_heads {
            let head_rows = t.rows() / heads.max(1);
            if head_rows == 0 || t.rows() % heads != 0 {
                return Err(invalid(format!(
                    "tensor {}: {} rows cannot be split into {heads} heads",
                    t.src.name,
                    t.rows()
                )));
            }
            data = unpermute_rows(&data, rows, rows / head_rows, &t.src.name)?;
        }
        Ok(data.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect())
    }
}

impl Planned {
    /// Rows: the first dimension of a matrix, 1 for a vector.
    fn rows(&self) -> usize {
        if self.shape.len() >= 2 {
            self.shape[0]
        } else {
            1
        }
    }

    /// Elements per row.
    fn row_len(&self) -> usize {
        self.shape.iter().product::<usize>() / self.rows()
    }
}

/// model.safetensors, unit by unit. Returns the bytes written.
fn write_safetensors<R: Read + Seek, W: Write>(view: &HfView, r: &mut R, w: &mut W, out_name: &str) -> Result<u64> {
    let io = |source| GgufError::Io { what: format!("writing {out_name}"), source };
    w.write_all(view.head()).map_err(io)?;
    for unit in view.units(0, view.safetensors_len()) {
        let (offset, len) = view.source_range(unit);
        let raw = read_at(r, &view.tensors[unit.tensor].src.name, offset, len)?;
        w.write_all(&view.convert(unit, &raw)?).map_err(io)?;
    }
    Ok(view.safetensors_len())
}

/// The HF checkpoint files of a llama/qwen2 GGUF, by name: config.json, model.safetensors,
/// tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json
/// (ready for [`crate::formats::checkpoint::Checkpoint::from_files`]).
pub fn gguf_to_hf_files<R: Read + Seek>(r: &mut R) -> Result<HashMap<String, Vec<u8>>> {
    gguf_to_hf_files_with_summary(r).map(|(files, _)| files)
}

/// [`gguf_to_hf_files`], and what was imported.
pub fn gguf_to_hf_files_with_summary<R: Read + Seek>(r: &mut R) -> Result<(HashMap<String, Vec<u8>>, ImportSummary)> {
    let view = HfView::new(Gguf::parse(r)?, UNIT_BYTES)?;
    let mut summary = view.summary.clone();
    let mut weights = Vec::new();
    let n = write_safetensors(&view, r, &mut weights, SINGLE_FILE)?;
    summary.files.push((SINGLE_FILE.to_string(), n));
    let mut files = HashMap::new();
    files.insert(SINGLE_FILE.to_string(), weights);
    for (name, bytes) in view.json {
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
    let view = HfView::new(g, UNIT_BYTES)?;
    for name in view.json.iter().map(|(n, _)| *n).chain([SINGLE_FILE]) {
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
    let mut summary = view.summary.clone();

    let part = out_dir.join(format!("{SINGLE_FILE}.part"));
    let written = (|| {
        let mut w = BufWriter::new(File::create(&part).map_err(io(&part))?);
        let n = write_safetensors(&view, &mut r, &mut w, SINGLE_FILE)?;
        w.into_inner().map_err(|e| io(&part)(e.into_error()))?.sync_all().map_err(io(&part))?;
        Ok(n)
    })();
    let n = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&part); // best effort: the error being returned is the one that matters
    })?;
    let weights = out_dir.join(SINGLE_FILE);
    std::fs::rename(&part, &weights).map_err(io(&weights))?;
    summary.files.push((SINGLE_FILE.to_string(), n));

    for (name, bytes) in &view.json {
        let path = out_dir.join(name);
        std::fs::write(&path, bytes).map_err(io(&path))?;
        summary.files.push((name.to_string(), bytes.len() as u64));
    }
    Ok(summary)
}
