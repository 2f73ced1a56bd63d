//! JSONL datasets → training examples with HF-style labels (unshifted, same length as
//! input_ids, -100 = no loss). Each non-blank line is one of
//! - `{"messages": [{"role", "content"}, ..]}`: rendered with the chat template; loss on each
//!   assistant turn's content and the end-of-turn text the template closes it with (SmolLM2 and
//!   Qwen: the content and `<|im_end|>`, not the newline after it);
//! - `{"prompt": .., "completion": ..}`: `[added prefix (BOS)] prompt completion EOS`, loss on
//!   the completion and EOS;
//! - `{"text": ..}`: `[added prefix (BOS)] text EOS`, loss on everything.
//!
//! Other keys on a line are ignored. An assistant turn's span is found from the template itself:
//! the conversation before it rendered with add_generation_prompt=true is where the answer
//! starts, the conversation through it rendered without is where it ends (less trailing
//! whitespace); both renders must be text prefixes of the full render, and their tokens
//! prefixes of its tokens, or the line is an error.

use serde_json::Value;

use super::tokenizer::{Message, Tokenizer};
use super::{DataError, IGNORE_INDEX};

/// One training example, HF style: labels unshifted (same length as input_ids), -100 = no loss.
#[derive(Clone, Debug, PartialEq)]
pub struct Example {
    pub input_ids: Vec<u32>,
    pub labels: Vec<i32>,
    /// the dataset line it came from, counting from 1
    pub line: usize,
}

impl Example {
    /// How many labels take loss.
    pub fn n_supervised(&self) -> usize {
        self.labels.iter().filter(|&&l| l != IGNORE_INDEX).count()
    }
}

/// Parse a JSONL dataset (see the module doc for the line shapes).
pub fn load_jsonl(text: &str, tok: &Tokenizer) -> Result<Vec<Example>, DataError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut examples = Vec::new();
    for (i, raw) in text.split('\n').enumerate() {
        let line = raw.strip_suffix('\r').unwrap_or(raw);
        if line.trim().is_empty() {
            continue;
        }
        examples.push(parse_line(line, i + 1, tok)?);
    }
    if examples.is_empty() {
        return Err(DataError::EmptyDataset);
    }
    Ok(examples)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// One line → one example; `line` counts from 1.
fn parse_line(text: &str, line: usize, tok: &Tokenizer) -> Result<Example, DataError> {
    let bad = |reason: String| DataError::Line { line, reason };
    let value: Value = serde_json::from_str(text).map_err(|e| {
        // serde_json's message ends "at line 1 column N"; the line is the dataset's.
        let msg = e.to_string();
        let msg = msg.rsplit_once(" at line ").map_or(msg.as_str(), |(m, _)| m);
        bad(format!("invalid JSON at column {}: {msg}", e.column()))
    })?;
    let Value::Object(obj) = &value else {
        return Err(bad(format!("expected a JSON object, found {}", kind(&value))));
    };
    let string = |key: &str| -> Result<&str, DataError> {
        match obj.get(key) {
            Some(Value::String(s)) => Ok(s.as_str()),
            Some(other) => Err(bad(format!("\"{key}\" must be a string, found {}", kind(other)))),
            None => {
                Err(bad(format!("has \"{}\" but no \"{key}\"", if key == "prompt" { "completion" } else { "prompt" })))
            }
        }
    };
    if let Some(messages) = obj.get("messages") {
        let messages = parse_messages(messages, line)?;
        chat_example(&messages, line, tok)
    } else if obj.contains_key("prompt") || obj.contains_key("completion") {
        prompt_completion_example(string("prompt")?, string("completion")?, line, tok)
    } else if let Some(t) = obj.get("text") {
        let Value::String(t) = t else {
            return Err(bad(format!("\"text\" must be a string, found {}", kind(t))));
        };
        text_example(t, line, tok)
    } else {
        let keys: Vec<&str> = obj.keys().map(String::as_str).collect();
        Err(bad(format!(
            "unknown shape: expected {{\"messages\": [..]}}, {{\"prompt\": .., \"completion\": ..}} or {{\"text\": ..}}; \
             found keys {keys:?}"
        )))
    }
}

fn parse_messages(v: &Value, line: usize) -> Result<Vec<Message>, DataError> {
    let bad = |reason: String| DataError::Line { line, reason };
    let Value::Array(list) = v else {
        return Err(bad(format!("\"messages\" must be an array, found {}", kind(v))));
    };
    if list.is_empty() {
        return Err(bad("\"messages\" is empty".into()));
    }
    let mut messages = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        let Value::Object(m) = m else {
            return Err(bad(format!(
                "messages[{i}] must be an object with \"role\" and \"content\", found {}",
                kind(m)
            )));
        };
        let role = match m.get("role") {
            Some(Value::String(r)) => r.as_str(),
            Some(other) => return Err(bad(format!("messages[{i}].role must be a string, found {}", kind(other)))),
            None => return Err(bad(format!("messages[{i}] has no \"role\""))),
        };
        if !matches!(role, "user" | "assistant" | "system") {
            return Err(bad(format!("messages[{i}].role is {role:?}; expected \"user\", \"assistant\" or \"system\"")));
        }
        let content = match m.get("content") {
            Some(Value::String(c)) => c.as_str(),
            Some(other) => return Err(bad(format!("messages[{i}].content must be a string, found {}", kind(other)))),
            None => return Err(bad(format!("messages[{i}] has no \"content\""))),
        };
        messages.push(Message::new(role, content));
    }
    if !messages.iter().any(|m| m.role == "assistant") {
        return Err(bad("no assistant turn: nothing to train on".into()));
    }
    Ok(messages)
}

/// Chat: the full render tokenized once; each assistant turn's tokens found by prefix renders.
fn chat_example(messages: &[Message], line: usize, tok: &Tokenizer) -> Result<Example, DataError> {
    let bad = |reason: String| DataError::Line { line, reason };
    let render = |msgs: &[Message], gen: bool| tok.apply_chat_template(msgs, gen).map_err(|e| bad(e.to_string()));
    let full = render(messages, false)?;
    let input_ids = tok.encode(&full, false).map_err(|e| bad(e.to_string()))?;
    let mut labels = vec![IGNORE_INDEX; input_ids.len()];
    // How many leading tokens of the full render `text` (a prefix of it) accounts for.
    let token_count = |text: &str, what: &str| -> Result<usize, DataError> {
        let ids = tok.encode(text, false).map_err(|e| bad(e.to_string()))?;
        if input_ids.starts_with(&ids) {
            Ok(ids.len())
        } else {
            Err(bad(format!(
                "{what} tokenizes differently on its own than inside the whole conversation \
                 (the tokenizer merges across the turn boundary), so its tokens cannot be located"
            )))
        }
    };
    for (i, m) in messages.iter().enumerate() {
        if m.role != "assistant" {
            continue;
        }
        if i == 0 {
            return Err(bad(
                "messages[0] is an assistant turn: a conversation must open with a user or system turn".into()
            ));
        }
        let before = render(&messages[..i], true)?;
        let through = render(&messages[..=i], false)?;
        if !through.starts_with(&before) {
            return Err(bad(format!(
                "the chat template does not render prefixes consistently: messages[..{i}] with \
                 add_generation_prompt=true renders as {:?}, which does not begin the render through \
                 assistant messages[{i}] ({:?})",
                tail(&before),
                tail(&through)
            )));
        }
        if !full.starts_with(&through) {
            return Err(bad(format!(
                "the chat template does not render prefixes consistently: the render through assistant \
                 messages[{i}] ends {:?}, which does not begin the render of the whole conversation",
                tail(&through)
            )));
        }
        // The turn ends at its end-of-turn text; whitespace the template adds after it takes no loss.
        let end_text = through.trim_end();
        if end_text.len() <= before.len() {
            continue; // an empty answer closed by nothing
        }
        let start = token_count(&before, &format!("the conversation before assistant messages[{i}]"))?;
        let end = token_count(end_text, &format!("the conversation through assistant messages[{i}]"))?;
        for k in start..end {
            labels[k] = input_ids[k] as i32;
        }
    }
    Ok(Example { input_ids, labels, line })
}

/// The last 60 characters of a render, for error messages.
fn tail(s: &str) -> &str {
    let n = s.chars().count();
    match s.char_indices().nth(n.saturating_sub(60)) {
        Some((i, _)) => &s[i..],
        None => s,
    }
}

fn eos(tok: &Tokenizer, line: usize, shape: &str) -> Result<u32, DataError> {
    tok.eos_id().ok_or_else(|| DataError::Line {
        line,
        reason: format!(
            "a {shape} example ends with EOS, and the tokenizer has none (no eos_token in tokenizer_config.json, \
             no eos_token_id in generation_config.json)"
        ),
    })
}

/// `prompt + completion` is tokenized as one text (as the model will see it); tokens that lie
/// wholly inside the prompt take no loss, a token straddling the boundary belongs to the completion.
fn prompt_completion_example(
    prompt: &str,
    completion: &str,
    line: usize,
    tok: &Tokenizer,
) -> Result<Example, DataError> {
    let bad = |e: DataError| DataError::Line { line, reason: e.to_string() };
    let eos = eos(tok, line, "prompt/completion")?;
    let joined = format!("{prompt}{completion}");
    let enc = tok.encode_with_offsets(&joined).map_err(bad)?;
    let ids = enc.get_ids();
    let n_prompt = enc.get_offsets().iter().take_while(|&&(_, end)| end <= prompt.len()).count();
    let prefix = tok.added_prefix();
    let mut input_ids = Vec::with_capacity(prefix.len() + ids.len() + 1);
    input_ids.extend_from_slice(prefix);
    input_ids.extend_from_slice(ids);
    input_ids.push(eos);
    let n_masked = prefix.len() + n_prompt;
    let labels =
        input_ids.iter().enumerate().map(|(k, &id)| if k < n_masked { IGNORE_INDEX } else { id as i32 }).collect();
    Ok(Example { input_ids, labels, line })
}

fn text_example(text: &str, line: usize, tok: &Tokenizer) -> Result<Example, DataError> {
    if text.is_empty() {
        return Err(DataError::Line { line, reason: "\"text\" is empty".into() });
    }
    let eos = eos(tok, line, "text")?;
    let mut input_ids = tok.added_prefix().to_vec();
    input_ids.extend(tok.encode(text, false).map_err(|e| DataError::Line { line, reason: e.to_string() })?);
    input_ids.push(eos);
    let labels = input_ids.iter().map(|&id| id as i32).collect();
    Ok(Example { input_ids, labels, line })
}

#[cfg(test)]
mod tests {
    use crate::platform::test;

    use super::super::testdata::{reference, smol, smol_with_template, QWEN25_TEMPLATE, SMOL_TOKENIZER_JSON};
    use super::*;

    fn err(text: &str, tok: &Tokenizer) -> String {
        match load_jsonl(text, tok) {
            Ok(ex) => panic!("expected an error, got {ex:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// The supervised stretches of an example, decoded.
    fn supervised(ex: &Example, tok: &Tokenizer) -> Vec<String> {
        let mut spans = Vec::new();
        let mut cur = Vec::new();
        for (&id, &l) in ex.input_ids.iter().zip(&ex.labels) {
            if l == IGNORE_INDEX {
                if !cur.is_empty() {
                    spans.push(tok.decode(&cur, false).expect("decodes"));
                    cur.clear();
                }
            } else {
                assert_eq!(l, id as i32, "a supervised label is the token itself (unshifted)");
                cur.push(id);
            }
        }
        if !cur.is_empty() {
            spans.push(tok.decode(&cur, false).expect("decodes"));
        }
        spans
    }

    /// SmolLM2's tokenizer whose post-processor puts <|endoftext|> (id 0) in front, as Llama's puts BOS.
    fn smol_with_bos() -> Tokenizer {
        let mut json: serde_json::Value = serde_json::from_slice(SMOL_TOKENIZER_JSON).expect("json");
        json["post_processor"] = serde_json::json!({
            "type": "TemplateProcessing",
            "single": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
            "pair": [{"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                     {"Sequence": {"id": "B", "type_id": 1}}],
            "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [0], "tokens": ["<|endoftext|>"]}}
        });
        let bytes = serde_json::to_vec(&json).expect("serializes");
        Tokenizer::from_files(&bytes, Some(br#"{"eos_token": "<|im_end|>"}"#), None, None).expect("loads")
    }

    /// Labels equal transformers' return_assistant_tokens_mask under SmolLM2's template with
    /// {% generation %} around each assistant content + <|im_end|>: exactly those tokens take loss.
    #[test]
    fn chat_labels_match_transformers_assistant_masks() {
        let r = reference();
        let tok = smol();
        let cases = r["assistant_masks"].as_array().expect("masks");
        assert!(cases.len() >= 4);
        let jsonl: Vec<String> =
            cases.iter().map(|c| serde_json::json!({"messages": c["messages"], "id": 7}).to_string()).collect();
        let examples = load_jsonl(&jsonl.join("\n"), &tok).expect("loads");
        assert_eq!(examples.len(), cases.len());
        for (k, (ex, c)) in examples.iter().zip(cases).enumerate() {
            assert_eq!(ex.line, k + 1);
            let ids: Vec<u32> = serde_json::from_value(c["input_ids"].clone()).expect("ids");
            let labels: Vec<i32> = serde_json::from_value(c["labels"].clone()).expect("labels");
            assert_eq!(ex.input_ids, ids, "line {}", ex.line);
            assert_eq!(ex.labels, labels, "line {}", ex.line);
        }
        // In words: each assistant content and the <|im_end|> closing it, not the newline after.
        assert_eq!(
            supervised(&examples[1], &tok),
            ["Arr, buried on the island!<|im_end|>", "Skull Island, matey.<|im_end|>"]
        );
        assert_eq!(supervised(&examples[3], &tok), ["<|im_end|>"], "an empty answer still learns to stop");
    }

    #[test]
    fn chat_labels_under_qwen_template() {
        let tok = smol_with_template(QWEN25_TEMPLATE);
        let line = r#"{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                      {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye  \n"}]}"#;
        let ex = &load_jsonl(&line.replace('\n', " "), &tok).expect("loads")[0];
        assert_eq!(supervised(ex, &tok), ["Hello!<|im_end|>", "Bye  \n<|im_end|>"]);
        let text = tok.decode(&ex.input_ids, false).expect("decodes");
        assert!(text.starts_with("<|im_start|>system\nYou are Qwen"), "{text}");
        assert_eq!(ex.input_ids, tok.encode(&text, false).expect("encodes"));
        // A conversation ending on a user turn: that turn takes no loss.
        let line = r#"{"messages": [{"role": "system", "content": "S"}, {"role": "assistant", "content": "A"},
                      {"role": "user", "content": "U"}]}"#;
        let ex = &load_jsonl(&line.replace('\n', " "), &tok).expect("loads")[0];
        assert_eq!(supervised(ex, &tok), ["A<|im_end|>"]);
    }

    #[test]
    fn prompt_completion_and_text() {
        let tok = smol();
        let data = "{\"prompt\": \"Q: 2+2?\\nA:\", \"completion\": \" 4\"}\r\n\
                    \r\n   \n\
                    {\"text\": \"Hello world\"}\n\
                    {\"prompt\": \"Hello wor\", \"completion\": \"ld\"}\n";
        let ex = load_jsonl(data, &tok).expect("loads");
        assert_eq!(ex.iter().map(|e| e.line).collect::<Vec<_>>(), [1, 4, 5]);
        let prompt = tok.encode("Q: 2+2?\nA:", false).expect("encodes");
        let mut want = tok.encode("Q: 2+2?\nA: 4", false).expect("encodes");
        assert!(want.starts_with(&prompt));
        want.push(2);
        assert_eq!(ex[0].input_ids, want);
        assert_eq!(supervised(&ex[0], &tok), [" 4<|im_end|>"]);
        assert_eq!(ex[0].labels[..prompt.len()], vec![IGNORE_INDEX; prompt.len()][..]);
        assert_eq!(ex[0].n_supervised(), want.len() - prompt.len());
        // Text: everything including EOS.
        assert_eq!(ex[1].input_ids, [19556, 905, 2]);
        assert_eq!(ex[1].labels, [19556, 905, 2]);
        // "Hello world" is [Hello, Ġworld]: the token straddling the boundary belongs to the completion.
        assert_eq!(ex[2].input_ids, [19556, 905, 2]);
        assert_eq!(ex[2].labels, [IGNORE_INDEX, 905, 2]);
        // A tokenizer that adds a BOS: in front of both shapes, no loss on it in prompt/completion.
        let bos = smol_with_bos();
        assert_eq!(bos.added_prefix(), &[0]);
        let ex = load_jsonl("{\"prompt\": \"Hello\", \"completion\": \" world\"}\n{\"text\": \"Hello world\"}", &bos)
            .expect("loads");
        assert_eq!(ex[0].input_ids, [0, 19556, 905, 2]);
        assert_eq!(ex[0].labels, [IGNORE_INDEX, IGNORE_INDEX, 905, 2]);
        assert_eq!(ex[1].input_ids, [0, 19556, 905, 2]);
        assert_eq!(ex[1].labels, [0, 19556, 905, 2]);
        // A UTF-8 byte order mark before line 1 is skipped.
        assert_eq!(load_jsonl("\u{feff}{\"text\": \"x\"}", &tok).expect("loads")[0].line, 1);
    }

    #[test]
    fn every_bad_line_is_named() {
        let tok = smol();
        let ok = r#"{"text": "fine"}"#;
        let cases: &[(&str, &str)] = &[
            (r#"{"text": "x""#, "invalid JSON at column 12: EOF while parsing an object"),
            ("[1, 2]", "expected a JSON object, found an array"),
            (r#"{"input": "x", "output": "y"}"#, "unknown shape"),
            (r#"{"messages": []}"#, "\"messages\" is empty"),
            (r#"{"messages": {"role": "user"}}"#, "\"messages\" must be an array"),
            (r#"{"messages": ["hi"]}"#, "messages[0] must be an object"),
            (r#"{"messages": [{"role": "tool", "content": "x"}]}"#, "messages[0].role is \"tool\""),
            (r#"{"messages": [{"role": 1, "content": "x"}]}"#, "messages[0].role must be a string"),
            (r#"{"messages": [{"content": "x"}]}"#, "messages[0] has no \"role\""),
            (r#"{"messages": [{"role": "user", "content": "x"}]}"#, "no assistant turn"),
            (
                r#"{"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": null}]}"#,
                "messages[1].content must be a string, found null",
            ),
            (
                r#"{"messages": [{"role": "user", "content": [{"type": "text"}]}]}"#,
                "messages[0].content must be a string, found an array",
            ),
            (r#"{"messages": [{"role": "user"}]}"#, "messages[0] has no \"content\""),
            (r#"{"prompt": "x"}"#, "has \"prompt\" but no \"completion\""),
            (r#"{"completion": "x"}"#, "has \"completion\" but no \"prompt\""),
            (r#"{"prompt": "x", "completion": 3}"#, "\"completion\" must be a string, found a number"),
            (r#"{"text": ["x"]}"#, "\"text\" must be a string"),
            (r#"{"text": ""}"#, "\"text\" is empty"),
            (
                r#"{"messages": [{"role": "assistant", "content": "A"}, {"role": "user", "content": "U"}]}"#,
                "messages[0] is an assistant turn",
            ),
        ];
        for (bad, want) in cases {
            let data = format!("{ok}\n\n{bad}\n{ok}\n");
            let e = err(&data, &tok);
            assert!(e.starts_with("dataset line 3: ") && e.contains(want), "{bad}: {e}");
        }
        assert!(matches!(load_jsonl("\n  \r\n\n", &tok), Err(DataError::EmptyDataset)));
        assert!(matches!(load_jsonl("", &tok), Err(DataError::EmptyDataset)));
    }

    #[test]
    fn template_problems_are_named() {
        let chat = r#"{"messages": [{"role": "user", "content": "Hel"}, {"role": "assistant", "content": "lo"}]}"#;
        let data = format!("{chat}\n{chat}");
        // The template raises on line 2 of the dataset? No: on every line; the first is named.
        let tok = smol_with_template("{% if messages|length > 1 %}{{ raise_exception('two is too many') }}{% endif %}");
        let e = err(&data, &tok);
        assert!(e.starts_with("dataset line 1: chat template:") && e.contains("two is too many"), "{e}");
        // A template that marks the last message renders prefixes inconsistently.
        let tok =
            smol_with_template("{% for m in messages %}{% if loop.last %}LAST {% endif %}{{ m.content }}|{% endfor %}");
        let e = err(chat, &tok);
        assert!(e.starts_with("dataset line 1: ") && e.contains("does not render prefixes consistently"), "{e}");
        // No separators: "Hel" + "lo" tokenize as "Hello", so the turn's tokens cannot be located.
        let tok = smol_with_template("{% for m in messages %}{{ m.content }}{% endfor %}");
        let e = err(chat, &tok);
        assert!(e.starts_with("dataset line 1: ") && e.contains("merges across the turn boundary"), "{e}");
        // No template at all.
        let tok = Tokenizer::from_files(SMOL_TOKENIZER_JSON, None, None, None).expect("loads");
        let e = err(&format!("\n{chat}"), &tok);
        assert!(e.starts_with("dataset line 2: ") && e.contains("no chat template"), "{e}");
        let e = err("{\"text\": \"x\"}", &tok);
        assert!(e.starts_with("dataset line 1: ") && e.contains("EOS"), "{e}");
    }
}
