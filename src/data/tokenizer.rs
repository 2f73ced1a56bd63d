//! The HF tokenizer: tokenizer.json through the `tokenizers` crate (the same code natively and
//! in the browser), special tokens from tokenizer_config.json, EOS/pad ids from
//! generation_config.json, the chat template, and incremental decoding for streamed generation.

use std::collections::BTreeMap;

use super::template::{template_source, ChatTemplate, Date};
use super::DataError;

/// One chat message, as in HF's `messages` lists.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize, PartialEq)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Message {
    pub role: String,
    pub content: String,
}

impl Message {
    pub fn new(role: &str, content: &str) -> Message {
        Message { role: role.to_string(), content: content.to_string() }
    }
}

/// A tokenizer with its special tokens and chat template.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// every `*_token` of tokenizer_config.json given as a string (or as {"content": ..}): bos_token, eos_token, ..
    special: BTreeMap<String, String>,
    eos_ids: Vec<u32>,
    pad_id: Option<u32>,
    /// what the post-processor puts before a single sequence when add_special_tokens is on (BOS, for Llama)
    added_prefix: Vec<u32>,
    template: Option<ChatTemplate>,
    date: Option<Date>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("special", &self.special)
            .field("eos_ids", &self.eos_ids)
            .field("pad_id", &self.pad_id)
            .field("chat_template", &self.template.is_some())
            .finish()
    }
}

fn parse_json(file: &str, bytes: &[u8]) -> Result<serde_json::Value, DataError> {
    serde_json::from_slice(bytes)
        .map_err(|e| DataError::File { file: file.into(), reason: format!("invalid JSON: {e}") })
}

/// A token id field of generation_config.json: absent/null → empty, an integer or a list of them.
fn id_list(cfg: &serde_json::Value, key: &str) -> Result<Vec<u32>, DataError> {
    let bad = || DataError::File {
        file: "generation_config.json".into(),
        reason: format!("{key} is neither a token id nor a list of token ids: {}", cfg[key]),
    };
    let one = |v: &serde_json::Value| v.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(bad);
    match cfg.get(key) {
        None | Some(serde_json::Value::Null) => Ok(Vec::new()),
        Some(serde_json::Value::Array(list)) => list.iter().map(one).collect(),
        Some(v) => Ok(vec![one(v)?]),
    }
}

fn tok_err(e: tokenizers::Error) -> DataError {
    DataError::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// tokenizer.json (required), tokenizer_config.json, generation_config.json and
    /// chat_template.jinja (all optional), as bytes. A chat template that does not parse is an
    /// error here, not at first use.
    pub fn from_files(
        tokenizer_json: &[u8],
        tokenizer_config: Option<&[u8]>,
        generation_config: Option<&[u8]>,
        chat_template: Option<&[u8]>,
    ) -> Result<Tokenizer, DataError> {
        let inner = tokenizers::Tokenizer::from_bytes(tokenizer_json)
            .map_err(|e| DataError::File { file: "tokenizer.json".into(), reason: e.to_string() })?;
        let config = tokenizer_config.map(|b| parse_json("tokenizer_config.json", b)).transpose()?;
        let generation = generation_config.map(|b| parse_json("generation_config.json", b)).transpose()?;

        let mut special = BTreeMap::new();
        if let Some(obj) = config.as_ref().and_then(|c| c.as_object()) {
            for (key, value) in obj {
                if !key.ends_with("_token") {
                    continue;
                }
                // A string, an AddedToken object {"content": ..}, or null.
                let text = match value {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Object(o) => o.get("content").and_then(|c| c.as_str()).map(str::to_string),
                    _ => None,
                };
                if let Some(text) = text {
                    special.insert(key.clone(), text);
                }
            }
        }
        let id_of = |key: &str| -> Result<Option<u32>, DataError> {
            match special.get(key) {
                None => Ok(None),
                Some(text) => inner.token_to_id(text).map(Some).ok_or_else(|| DataError::File {
                    file: "tokenizer_config.json".into(),
                    reason: format!("{key} {text:?} is not in tokenizer.json's vocabulary"),
                }),
            }
        };

        let mut eos_ids = match &generation {
            Some(g) => id_list(g, "eos_token_id")?,
            None => Vec::new(),
        };
        if eos_ids.is_empty() {
            eos_ids.extend(id_of("eos_token")?);
        }
        let pad_id = match id_of("pad_token")? {
            Some(id) => Some(id),
            None => match &generation {
                Some(g) => id_list(g, "pad_token_id")?.first().copied(),
                None => None,
            },
        };

        let template = match template_source(config.as_ref(), chat_template)? {
            Some(src) => Some(ChatTemplate::new(&src)?),
            None => None,
        };

        // The specials the post-processor adds in front: compare one encoding with and without them.
        let probe = "a";
        let plain = inner.encode(probe, false).map_err(tok_err)?.get_ids().to_vec();
        let with = inner.encode(probe, true).map_err(tok_err)?.get_ids().to_vec();
        let added_prefix = (0..=with.len().saturating_sub(plain.len()))
            .find(|&i| with[i..].starts_with(&plain))
            .map(|i| with[..i].to_vec())
            .unwrap_or_default();

        Ok(Tokenizer { inner, special, eos_ids, pad_id, added_prefix, template, date: None })
    }

    /// From a checkpoint's files: tokenizer.json, and tokenizer_config.json,
    /// generation_config.json and chat_template.jinja where present.
    pub fn from_checkpoint(ckpt: &crate::formats::checkpoint::Checkpoint) -> Result<Tokenizer, DataError> {
        let json = ckpt.file("tokenizer.json").ok_or_else(|| DataError::File {
            file: "tokenizer.json".into(),
            reason: "not among the model files (the checkpoint needs its HF tokenizer.json)".into(),
        })?;
        Tokenizer::from_files(
            json,
            ckpt.file("tokenizer_config.json"),
            ckpt.file("generation_config.json"),
            ckpt.file("chat_template.jinja"),
        )
    }

    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, DataError> {
        Ok(self.inner.encode(text, add_special_tokens).map_err(tok_err)?.get_ids().to_vec())
    }

    /// The encoding without special tokens, with each token's byte range in `text` (`get_offsets`).
    pub(crate) fn encode_with_offsets(&self, text: &str) -> Result<tokenizers::Encoding, DataError> {
        self.inner.encode(text, false).map_err(tok_err)
    }

    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, DataError> {
        self.inner.decode(ids, skip_special_tokens).map_err(tok_err)
    }

    /// Vocabulary size including added tokens (the model's embedding may be larger).
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The id of one token string (an added/special token or a vocabulary entry).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    pub fn bos_token(&self) -> Option<&str> {
        self.special.get("bos_token").map(String::as_str)
    }

    pub fn eos_token(&self) -> Option<&str> {
        self.special.get("eos_token").map(String::as_str)
    }

    /// EOS ids: generation_config.json's eos_token_id (int or list), else tokenizer_config's eos_token id.
    pub fn eos_ids(&self) -> &[u32] {
        &self.eos_ids
    }

    /// tokenizer_config's pad_token id, else generation_config's pad_token_id.
    pub fn pad_id(&self) -> Option<u32> {
        self.pad_id
    }

    /// The ids `encode(_, true)` puts before the text (e.g. Llama's BOS; empty for Qwen2 and SmolLM2).
    pub fn added_prefix(&self) -> &[u32] {
        &self.added_prefix
    }

    /// The id to end a plain-text or completion example with: eos_token's id, else the first of eos_ids.
    pub fn eos_id(&self) -> Option<u32> {
        self.eos_token().and_then(|t| self.token_id(t)).or_else(|| self.eos_ids.first().copied())
    }

    pub fn has_chat_template(&self) -> bool {
        self.template.is_some()
    }

    /// The date templates see as `date_string` / `strftime_now` (none by default: templates use their own default).
    pub fn set_date(&mut self, date: Option<Date>) {
        self.date = date;
    }

    /// The chat template rendered as transformers' `apply_chat_template(messages, tokenize=False,
    /// add_generation_prompt=..)` renders it.
    pub fn apply_chat_template(&self, messages: &[Message], add_generation_prompt: bool) -> Result<String, DataError> {
        let template = self.template.as_ref().ok_or(DataError::NoChatTemplate)?;
        template.render(messages, add_generation_prompt, &self.special, self.date)
    }

    /// Incremental decoding for streamed generation.
    pub fn stream_decoder(&self, skip_special_tokens: bool) -> StreamDecoder<'_> {
        StreamDecoder { tok: self, skip_special_tokens, ids: Vec::new(), prefix: String::new(), prefix_index: 0 }
    }
}

/// Decodes ids pushed one at a time into text, only ever returning whole UTF-8 characters: a
/// token that ends inside a character (byte-level BPE) yields "" until the character completes.
/// It keeps a few previous tokens as context, so decoders that depend on neighbours (SentencePiece
/// spaces) print what a full decode prints. (The algorithm of tokenizers' DecodeStream, plus `finish`.)
pub struct StreamDecoder<'a> {
    tok: &'a Tokenizer,
    skip_special_tokens: bool,
    /// the context window: ids[..prefix_index] decode to `prefix`, already returned
    ids: Vec<u32>,
    prefix: String,
    prefix_index: usize,
}

impl StreamDecoder<'_> {
    /// The new text that `id` completes (possibly empty).
    pub fn push(&mut self, id: u32) -> Result<String, DataError> {
        if self.prefix.is_empty() && !self.ids.is_empty() {
            let prefix = self.tok.decode(&self.ids, self.skip_special_tokens)?;
            if !prefix.ends_with('\u{FFFD}') {
                self.prefix = prefix;
                self.prefix_index = self.ids.len();
            }
        }
        self.ids.push(id);
        let text = self.tok.decode(&self.ids, self.skip_special_tokens)?;
        if text.len() <= self.prefix.len() || text.ends_with('\u{FFFD}') {
            return Ok(String::new());
        }
        let new = text.strip_prefix(self.prefix.as_str()).ok_or_else(|| {
            DataError::Tokenizer(format!(
                "stream decode: token {id} changed the text already returned ({:?} is now {text:?})",
                self.prefix
            ))
        })?;
        let new = new.to_string();
        let new_prefix_index = self.ids.len() - self.prefix_index;
        self.ids.drain(..self.prefix_index);
        self.prefix = self.tok.decode(&self.ids, self.skip_special_tokens)?;
        self.prefix_index = new_prefix_index;
        Ok(new)
    }

    /// Whatever is still held back (an incomplete character at the end of generation, decoded
    /// lossily as U+FFFD).
    pub fn finish(self) -> Result<String, DataError> {
        let text = self.tok.decode(&self.ids, self.skip_special_tokens)?;
        Ok(text.strip_prefix(self.prefix.as_str()).unwrap_or("").to_string())
    }
}

#[cfg(test)]
mod tests {
    use crate::platform::test;

    use super::super::testdata::{reference, smol, SMOL_TOKENIZER_CONFIG, SMOL_TOKENIZER_JSON};
    use super::*;

    fn ids(v: &serde_json::Value) -> Vec<u32> {
        serde_json::from_value(v.clone()).expect("ids")
    }

    fn err(r: Result<Tokenizer, DataError>) -> String {
        match r {
            Ok(t) => panic!("expected an error, got {t:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn tokenizer_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Tokenizer>();
    }

    #[test]
    fn encode_decode_match_transformers() {
        let r = reference();
        let tok = smol();
        assert_eq!(tok.vocab_size() as u64, r["vocab_size"].as_u64().expect("vocab_size"));
        let encodings = r["encodings"].as_array().expect("encodings");
        assert!(encodings.len() >= 10);
        for e in encodings {
            let text = e["text"].as_str().expect("text");
            let want = ids(&e["ids"]);
            assert_eq!(tok.encode(text, false).expect("encodes"), want, "{text:?}");
            assert_eq!(tok.encode(text, true).expect("encodes"), ids(&e["ids_special"]), "{text:?}");
            assert_eq!(tok.decode(&want, false).expect("decodes"), e["decoded"].as_str().expect("decoded"));
            assert_eq!(tok.decode(&want, true).expect("decodes"), e["decoded_skip"].as_str().expect("skip"));
        }
    }

    #[test]
    fn special_tokens() {
        let tok = smol();
        assert_eq!(tok.bos_token(), Some("<|im_start|>"));
        assert_eq!(tok.eos_token(), Some("<|im_end|>"));
        assert_eq!(tok.eos_ids(), &[2]);
        assert_eq!(tok.eos_id(), Some(2));
        assert_eq!(tok.pad_id(), Some(2));
        assert_eq!(tok.token_id("<|im_start|>"), Some(1));
        assert!(tok.added_prefix().is_empty());
        assert!(tok.has_chat_template());

        // generation_config's eos_token_id (a list) wins over eos_token; an int works too.
        let gen = br#"{"bos_token_id": 1, "eos_token_id": [2, 0], "pad_token_id": 0}"#;
        let tok = Tokenizer::from_files(SMOL_TOKENIZER_JSON, Some(SMOL_TOKENIZER_CONFIG), Some(gen), None).expect("ok");
        assert_eq!(tok.eos_ids(), &[2, 0]);
        assert_eq!(tok.eos_id(), Some(2), "eos_token first");
        assert_eq!(tok.pad_id(), Some(2), "pad_token wins over pad_token_id");
        assert!(!tok.has_chat_template(), "the config has no chat_template and no .jinja was given");
        assert!(matches!(tok.apply_chat_template(&[], false), Err(DataError::NoChatTemplate)));

        // Only tokenizer.json and generation_config: ids from there; AddedToken objects in the config.
        let tok = Tokenizer::from_files(SMOL_TOKENIZER_JSON, None, Some(br#"{"eos_token_id": 0}"#), None).expect("ok");
        assert_eq!((tok.eos_ids(), tok.pad_id(), tok.bos_token()), (&[0u32][..], None, None));
        let cfg = br#"{"eos_token": {"__type": "AddedToken", "content": "<|endoftext|>"}, "pad_token": null,
                       "chat_template": "{{ eos_token }}"}"#;
        let tok = Tokenizer::from_files(SMOL_TOKENIZER_JSON, Some(cfg), None, None).expect("ok");
        assert_eq!((tok.eos_token(), tok.eos_ids(), tok.pad_id()), (Some("<|endoftext|>"), &[0u32][..], None));
        assert_eq!(tok.apply_chat_template(&[], false).expect("renders"), "<|endoftext|>");
    }

    #[test]
    fn file_errors_name_the_file() {
        let e = err(Tokenizer::from_files(b"{\"model\": 3}", None, None, None));
        assert!(e.starts_with("tokenizer.json:"), "{e}");
        let e = err(Tokenizer::from_files(SMOL_TOKENIZER_JSON, Some(b"{oops"), None, None));
        assert!(e.starts_with("tokenizer_config.json: invalid JSON"), "{e}");
        let e = err(Tokenizer::from_files(SMOL_TOKENIZER_JSON, Some(br#"{"eos_token": "<nope>"}"#), None, None));
        assert!(e.contains("tokenizer_config.json") && e.contains("eos_token") && e.contains("<nope>"), "{e}");
        let e = err(Tokenizer::from_files(SMOL_TOKENIZER_JSON, None, Some(br#"{"eos_token_id": "x"}"#), None));
        assert!(e.starts_with("generation_config.json: eos_token_id"), "{e}");
        let e = err(Tokenizer::from_files(SMOL_TOKENIZER_JSON, None, None, Some(b"{% for %}")));
        assert!(e.starts_with("chat template:") && e.contains("chat_template:1"), "{e}");
    }

    #[test]
    fn from_checkpoint_reads_the_files() {
        use crate::formats::checkpoint::Checkpoint;
        use crate::formats::testdata::{tiny_config, tiny_files};
        let cfg = tiny_config(false);
        let files = tiny_files(&cfg, &[], &[]);
        let ckpt = Checkpoint::from_files(files.clone()).expect("opens");
        let e = Tokenizer::from_checkpoint(&ckpt).expect_err("no tokenizer.json").to_string();
        assert!(e.starts_with("tokenizer.json: not among the model files"), "{e}");
        let mut files = files;
        files.insert("tokenizer.json".into(), SMOL_TOKENIZER_JSON.to_vec());
        files.insert("tokenizer_config.json".into(), SMOL_TOKENIZER_CONFIG.to_vec());
        files.insert("generation_config.json".into(), br#"{"eos_token_id": [2, 0]}"#.to_vec());
        files.insert("chat_template.jinja".into(), b"{{ messages[0].content }}!".to_vec());
        let tok = Tokenizer::from_checkpoint(&Checkpoint::from_files(files).expect("opens")).expect("loads");
        assert_eq!(tok.eos_ids(), &[2, 0]);
        assert_eq!(tok.apply_chat_template(&[Message::new("user", "hi")], false).expect("renders"), "hi!");
    }

    /// Pushing ids one by one gives the full decode, in whole characters only.
    #[test]
    fn stream_decoding() {
        let tok = smol();
        let r = reference();
        for e in r["encodings"].as_array().expect("encodings") {
            for skip in [false, true] {
                let all = ids(&e["ids"]);
                let mut dec = tok.stream_decoder(skip);
                let mut text = String::new();
                for &id in &all {
                    let piece = dec.push(id).expect("pushes");
                    assert!(!piece.contains('\u{FFFD}'), "partial character returned: {piece:?}");
                    text.push_str(&piece);
                }
                text.push_str(&dec.finish().expect("finishes"));
                assert_eq!(text, tok.decode(&all, skip).expect("decodes"));
            }
        }
        // An emoji is 4 bytes over several byte-level tokens: nothing until the last one.
        let emoji = tok.encode("😀", false).expect("encodes");
        assert!(emoji.len() > 1, "{emoji:?}");
        let mut dec = tok.stream_decoder(false);
        for &id in &emoji[..emoji.len() - 1] {
            assert_eq!(dec.push(id).expect("pushes"), "");
        }
        assert_eq!(dec.push(emoji[emoji.len() - 1]).expect("pushes"), "😀");
        // Cut off mid-character: finish returns the lossy remainder.
        let mut dec = tok.stream_decoder(false);
        assert_eq!(dec.push(emoji[0]).expect("pushes"), "");
        assert_eq!(dec.finish().expect("finishes"), "\u{FFFD}");
    }
}
