//! The Hugging Face tokenizer files of a GGUF whose `tokenizer.ggml.model` is "gpt2" (byte-level
//! BPE): tokenizer.json (vocabulary, merges, added tokens from `tokenizer.ggml.token_type`, the
//! pre-tokenizer `tokenizer.ggml.pre` names), tokenizer_config.json (special tokens, chat template),
//! special_tokens_map.json and the ids generation_config.json needs.
//!
//! It builds what transformers' GGUF tokenizer conversion builds (`integrations/gguf/
//! gguf_tokenizer_mapping.py`, transformers 5.24), plus llama.cpp's "smollm" pre-tokenizer, which
//! transformers lacks: every digit split off first, then GPT-2's byte-level split, as SmolLM2's own
//! tokenizer.json does.

use super::{invalid, unsupported, Gguf, GgufError};
use serde_json::{json, Map, Value as Json};

/// llama.cpp's token types (`tokenizer.ggml.token_type`).
const CONTROL: i64 = 3;
const USER_DEFINED: i64 = 4;

/// The split of Llama 3's tokenizer (llama.cpp "llama-bpe").
const LLAMA3_SPLIT: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// The split of Qwen2's tokenizer (llama.cpp "qwen2").
const QWEN2_SPLIT: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// The files, and the special token ids for config.json and generation_config.json.
pub(super) struct TokenizerFiles {
    pub tokenizer_json: Vec<u8>,
    pub tokenizer_config: Vec<u8>,
    pub special_tokens_map: Vec<u8>,
    pub vocab: usize,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub pad: Option<u32>,
}

/// GPT-2's byte → printable character map (`bytes_to_unicode`): printable Latin-1 bytes map to
/// themselves, the other 68 to U+0100.. in byte order.
pub(super) fn byte_chars() -> [char; 256] {
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let mut out = ['\0'; 256];
    let mut next = 256u32;
    for (b, c) in out.iter_mut().enumerate() {
        let b = b as u32;
        let code = if printable(b) {
            b
        } else {
            next += 1;
            next - 1
        };
        *c = char::from_u32(code).unwrap_or('\u{FFFD}');
    }
    out
}

/// The pre-tokenizer (and normalizer) for a `tokenizer.ggml.pre` value.
fn pre_tokenizer(pre: &str) -> Result<Json, GgufError> {
    let byte_level = |use_regex: bool| json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": use_regex});
    let split = |regex: &str| {
        json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": false},
            byte_level(false),
        ]})
    };
    Ok(match pre {
        "gpt-2" => byte_level(true),
        "smollm" => json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            byte_level(true),
        ]}),
        "llama3" | "llama-v3" | "llama-bpe" | "smaug-bpe" => split(LLAMA3_SPLIT),
        "qwen2" | "deepseek-r1-qwen" => split(QWEN2_SPLIT),
        other => {
            return Err(unsupported(format!(
                "metadata tokenizer.ggml.pre = {other:?} is not supported (gpt-2, smollm, llama-bpe, llama3, \
                 qwen2, deepseek-r1-qwen are)"
            )))
        }
    })
}

/// A token id from `key`, checked against the vocabulary.
fn token_id(g: &Gguf, key: &str, tokens: &[&str]) -> Result<Option<u32>, GgufError> {
    match g.get_u64(key)? {
        None => Ok(None),
        Some(id) if id < tokens.len() as u64 => Ok(Some(id as u32)),
        Some(id) => Err(invalid(format!("metadata {key} = {id} is past the {} tokens", tokens.len()))),
    }
}

/// Strings of an array key, each checked to be a string.
fn strings<'g>(g: &'g Gguf, key: &str) -> Result<Vec<&'g str>, GgufError> {
    let items = g.get_array(key)?.ok_or_else(|| invalid(format!("metadata {key}: missing")))?;
    items
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_str()
                .ok_or_else(|| invalid(format!("metadata {key}[{i}]: expected a string, found {}", v.type_name())))
        })
        .collect()
}

pub(super) fn tokenizer_files(g: &Gguf, model_max_length: u64) -> Result<TokenizerFiles, GgufError> {
    match g.get_str("tokenizer.ggml.model")? {
        Some("gpt2") => {}
        Some(other) => {
            return Err(unsupported(format!(
                "metadata tokenizer.ggml.model = {other:?} is not supported (only \"gpt2\", byte-level BPE)"
            )))
        }
        None => return Err(invalid("metadata tokenizer.ggml.model: missing (the file has no tokenizer)")),
    }
    let pre = g.get_str("tokenizer.ggml.pre")?.ok_or_else(|| {
        unsupported(
            "metadata tokenizer.ggml.pre: missing, so the pre-tokenizer is unknown (re-convert with a newer llama.cpp)",
        )
    })?;
    let pre_tokenizer = pre_tokenizer(pre)?;
    let tokens = strings(g, "tokenizer.ggml.tokens")?;
    let merges = strings(g, "tokenizer.ggml.merges")?;
    let types: Vec<i64> = match g.get_array("tokenizer.ggml.token_type")? {
        None => Vec::new(),
        Some(items) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                v.as_i64().ok_or_else(|| {
                    invalid(format!("metadata tokenizer.ggml.token_type[{i}]: expected an integer, found {v:?}"))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    if !types.is_empty() && types.len() != tokens.len() {
        return Err(invalid(format!(
            "metadata tokenizer.ggml.token_type has {} entries for {} tokens",
            types.len(),
            tokens.len()
        )));
    }

    // The vocabulary in the byte alphabet: a token written with other characters is respelled
    // from its UTF-8 bytes (later duplicates win, as in a Python dict).
    let chars = byte_chars();
    let alphabet: std::collections::HashSet<char> = chars.iter().copied().collect();
    let in_alphabet = |t: &str| t.chars().all(|c| alphabet.contains(&c));
    // Sorted by spelling as a JSON object's keys are (serde_json's map is a BTreeMap); of equal
    // spellings the last id is kept. Streamed into tokenizer.json, never built as a JSON value:
    // a 150k-token vocabulary and its merges would take tens of MB as one.
    let respelled: std::collections::HashMap<usize, String> = tokens
        .iter()
        .enumerate()
        .filter(|(_, t)| !in_alphabet(t))
        .map(|(id, t)| (id, t.bytes().map(|b| chars[b as usize]).collect()))
        .collect();
    let spelling = |id: usize| respelled.get(&id).map_or(tokens[id], String::as_str);
    let mut order: Vec<u32> = (0..tokens.len() as u32).collect();
    order.sort_by(|&a, &b| spelling(a as usize).cmp(spelling(b as usize)));
    let mut vocab = Vec::with_capacity(order.len());
    for (i, &id) in order.iter().enumerate() {
        if order.get(i + 1).is_none_or(|&next| spelling(next as usize) != spelling(id as usize)) {
            vocab.push((spelling(id as usize), id as usize));
        }
    }
    drop(order);
    for (i, m) in merges.iter().enumerate() {
        if m.split_once(' ').is_none_or(|(_, b)| b.contains(' ')) {
            return Err(invalid(format!("metadata tokenizer.ggml.merges[{i}] = {m:?} is not two tokens with a space")));
        }
    }

    // Control tokens (spelled in the byte alphabet) are special; user-defined ones plain added tokens.
    let added: Vec<Json> = types
        .iter()
        .enumerate()
        .filter(|&(id, &ty)| (ty == CONTROL || ty == USER_DEFINED) && in_alphabet(tokens[id]))
        .map(|(id, &ty)| {
            json!({"id": id, "content": tokens[id], "single_word": false, "lstrip": false, "rstrip": false,
                   "normalized": false, "special": ty == CONTROL})
        })
        .collect();

    let bos = token_id(g, "tokenizer.ggml.bos_token_id", &tokens)?;
    let eos = token_id(g, "tokenizer.ggml.eos_token_id", &tokens)?;
    let unk = token_id(g, "tokenizer.ggml.unknown_token_id", &tokens)?;
    let pad = token_id(g, "tokenizer.ggml.padding_token_id", &tokens)?;
    let add_bos = g.get_bool("tokenizer.ggml.add_bos_token")?.unwrap_or(false);
    let add_eos = g.get_bool("tokenizer.ggml.add_eos_token")?.unwrap_or(false);
    let text = |id: Option<u32>| id.map(|i| tokens[i as usize].to_string());

    // Post-processor: BOS before / EOS after each sequence as add_bos_token / add_eos_token say.
    let bos_text = bos.filter(|_| add_bos).map(|i| tokens[i as usize].to_string());
    let eos_text = eos.filter(|_| add_eos).map(|i| tokens[i as usize].to_string());
    let special = |t: &String, type_id: u32| json!({"SpecialToken": {"id": t, "type_id": type_id}});
    let (mut single, mut pair) = (Vec::new(), Vec::new());
    for (list, seqs) in [(&mut single, &[("A", 0)][..]), (&mut pair, &[("A", 0), ("B", 1)][..])] {
        for &(seq, type_id) in seqs {
            list.extend(bos_text.iter().map(|t| special(t, type_id)));
            list.push(json!({"Sequence": {"id": seq, "type_id": type_id}}));
            list.extend(eos_text.iter().map(|t| special(t, type_id)));
        }
    }
    let mut specials = Map::new();
    for (t, id) in bos_text.iter().zip(bos).chain(eos_text.iter().zip(eos)) {
        specials.insert(t.clone(), json!({"id": t, "ids": [id], "tokens": [t]}));
    }

    let rest = json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": added,
        "normalizer": null,
        "pre_tokenizer": pre_tokenizer,
        "post_processor": {"type": "TemplateProcessing", "single": single, "pair": pair, "special_tokens": specials},
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    });
    let model = json!({
        "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": "",
        "end_of_word_suffix": "", "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    });
    let tokenizer_json = TokenizerJson { rest: &rest, model: &model, vocab: &vocab, merges: &merges };

    let mut special_map = Map::new();
    for (name, id) in [("bos_token", bos), ("eos_token", eos), ("pad_token", pad), ("unk_token", unk)] {
        if let Some(t) = text(id) {
            special_map.insert(name.into(), json!(t));
        }
    }
    let mut config = special_map.clone();
    config.insert("add_bos_token".into(), json!(add_bos));
    config.insert("add_eos_token".into(), json!(add_eos));
    config.insert("clean_up_tokenization_spaces".into(), json!(false));
    config.insert("model_max_length".into(), json!(model_max_length));
    config.insert("tokenizer_class".into(), json!("PreTrainedTokenizerFast"));
    if let Some(template) = g.get_str("tokenizer.chat_template")? {
        config.insert("chat_template".into(), json!(template));
    }

    let pretty = |v: &Json| serde_json::to_vec_pretty(v).unwrap_or_default();
    Ok(TokenizerFiles {
        tokenizer_json: to_vec_exact(&tokenizer_json),
        tokenizer_config: pretty(&Json::Object(config)),
        special_tokens_map: pretty(&Json::Object(special_map)),
        vocab: tokens.len(),
        bos,
        eos,
        pad,
    })
}

/// `value` as JSON in a buffer of exactly its length (measured by a first pass): a buffer grown by
/// doubling would take up to three times the bytes of a large tokenizer.json while it grows.
fn to_vec_exact(value: &impl serde::Serialize) -> Vec<u8> {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    let mut out = Vec::new();
    if serde_json::to_writer(&mut n, value).is_ok() {
        out.reserve_exact(n.0);
        let _ = serde_json::to_writer(&mut out, value); // into memory: it cannot fail
    }
    out
}

/// tokenizer.json as serde_json writes a whole value (keys sorted), with the model's vocabulary
/// and merges streamed from the metadata's strings.
struct TokenizerJson<'a> {
    /// Every key but "model".
    rest: &'a Json,
    /// The model's keys but "vocab" and "merges".
    model: &'a Json,
    /// (spelling, id), sorted by spelling, each spelling once.
    vocab: &'a [(&'a str, usize)],
    /// "a b", each checked to split in two.
    merges: &'a [&'a str],
}

/// The entries streamed into [`TokenizerJson`].
enum Part<'a> {
    Model(&'a TokenizerJson<'a>),
    Vocab(&'a [(&'a str, usize)]),
    Merges(&'a [&'a str]),
}

impl serde::Serialize for Part<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            Part::Model(t) => {
                let mut map = s.serialize_map(None)?;
                sorted_with(&mut map, t.model, &[("merges", Part::Merges(t.merges)), ("vocab", Part::Vocab(t.vocab))])?;
                map.end()
            }
            Part::Vocab(v) => s.collect_map(v.iter().map(|(k, id)| (k, id))),
            Part::Merges(m) => s.collect_seq(m.iter().map(|m| m.split_once(' ').unwrap_or((m, "")))),
        }
    }
}

impl serde::Serialize for TokenizerJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        sorted_with(&mut map, self.rest, &[("model", Part::Model(self))])?;
        map.end()
    }
}

/// The entries of the object `base` in key order, with `extra` (sorted) put in their places.
fn sorted_with<M: serde::ser::SerializeMap>(
    map: &mut M,
    base: &Json,
    extra: &[(&str, Part<'_>)],
) -> Result<(), M::Error> {
    let mut extra = extra.iter().peekable();
    for (k, v) in base.as_object().into_iter().flatten() {
        while let Some((ek, ev)) = extra.next_if(|(ek, _)| *ek < k.as_str()) {
            map.serialize_entry(ek, ev)?;
        }
        map.serialize_entry(k, v)?;
    }
    for (ek, ev) in extra {
        map.serialize_entry(ek, ev)?;
    }
    Ok(())
}
