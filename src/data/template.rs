//! HF chat templates rendered with minijinja the way transformers renders them with Jinja2:
//! trim_blocks and lstrip_blocks on, loop controls, Python string/dict methods (pycompat),
//! `raise_exception(msg)`, a `tojson` that writes what Python's `json.dumps` writes, and
//! `{% generation %}` blocks (transformers' assistant-mask extension) rendered as plain content.
//! Variables: `messages`, `add_generation_prompt`, `tools` and `documents` (none), every
//! `*_token` string of tokenizer_config.json, and, when a date is set, `date_string` and
//! `strftime_now(fmt)`.

use std::collections::BTreeMap;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Environment, Error, ErrorKind, Value};

use super::tokenizer::Message;
use super::DataError;

const NAME: &str = "chat_template";

/// A calendar date for templates that print today's date (Llama 3.x); set it with
/// [`super::Tokenizer::set_date`]. Without one, `date_string` and `strftime_now` are undefined and
/// such templates fall back to their own default date, which keeps renders reproducible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Date {
    pub year: i32,
    /// 1..=12
    pub month: u32,
    /// 1..=31
    pub day: u32,
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const WEEKDAYS: [&str; 7] = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"];

impl Date {
    /// 0 = Sunday (Sakamoto's method, Gregorian calendar).
    fn weekday(&self) -> usize {
        const T: [i32; 12] = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4];
        let y = if self.month < 3 { self.year - 1 } else { self.year };
        let m = (self.month.clamp(1, 12) - 1) as usize;
        (y + y.div_euclid(4) - y.div_euclid(100) + y.div_euclid(400) + T[m] + self.day as i32).rem_euclid(7) as usize
    }

    /// Python's `strftime` for the date directives (%d %m %Y %y %b %B %a %A %j %%); time
    /// directives (%H %M %S %I %p) print midnight.
    pub fn strftime(&self, fmt: &str) -> Result<String, String> {
        let month = MONTHS[(self.month.clamp(1, 12) - 1) as usize];
        let weekday = WEEKDAYS[self.weekday()];
        let mut out = String::new();
        let mut chars = fmt.chars();
        while let Some(c) = chars.next() {
            if c != '%' {
                out.push(c);
                continue;
            }
            match chars.next() {
                Some('d') => out.push_str(&format!("{:02}", self.day)),
                Some('m') => out.push_str(&format!("{:02}", self.month)),
                Some('Y') => out.push_str(&format!("{}", self.year)),
                Some('y') => out.push_str(&format!("{:02}", self.year.rem_euclid(100))),
                Some('b') => out.push_str(&month[..3]),
                Some('B') => out.push_str(month),
                Some('a') => out.push_str(&weekday[..3]),
                Some('A') => out.push_str(weekday),
                Some('j') => {
                    let leap = (self.year % 4 == 0 && self.year % 100 != 0) || self.year % 400 == 0;
                    let before =
                        [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334][(self.month.clamp(1, 12) - 1) as usize];
                    let day = before + self.day + u32::from(leap && self.month > 2);
                    out.push_str(&format!("{day:03}"));
                }
                Some('H' | 'M' | 'S') => out.push_str("00"),
                Some('I') => out.push_str("12"),
                Some('p') => out.push_str("AM"),
                Some('%') => out.push('%'),
                Some(other) => return Err(format!("strftime_now: unsupported directive %{other}")),
                None => return Err("strftime_now: format ends with a lone %".into()),
            }
        }
        Ok(out)
    }
}

/// A parsed chat template, ready to render.
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatTemplate")
    }
}

/// minijinja's message with the template line (`(in chat_template:12)`) and the cause, if any.
fn template_error(e: &Error) -> DataError {
    let mut msg = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        msg.push_str(&format!(": {s}"));
        source = s.source();
    }
    DataError::Template(msg)
}

impl ChatTemplate {
    pub(crate) fn new(source: &str) -> Result<ChatTemplate, DataError> {
        let mut env = Environment::new();
        // transformers: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True); Jinja2's
        // default keep_trailing_newline=False is minijinja's default too.
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, format!("raise_exception: {msg}")))
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned(NAME, rewrite_generation_tags(source)).map_err(|e| template_error(&e))?;
        Ok(ChatTemplate { env })
    }

    /// Render `messages`; `special_tokens` maps tokenizer_config's `*_token` keys to their strings.
    pub(crate) fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        special_tokens: &BTreeMap<String, String>,
        date: Option<Date>,
    ) -> Result<String, DataError> {
        let mut ctx: BTreeMap<String, Value> =
            special_tokens.iter().map(|(k, v)| (k.clone(), Value::from(v.as_str()))).collect();
        ctx.insert("messages".into(), Value::from_serialize(messages));
        ctx.insert("add_generation_prompt".into(), Value::from(add_generation_prompt));
        ctx.insert("tools".into(), Value::from(()));
        ctx.insert("documents".into(), Value::from(()));
        if let Some(date) = date {
            let today = date.strftime("%d %b %Y").map_err(DataError::Template)?;
            ctx.insert("date_string".into(), Value::from(today));
            ctx.insert(
                "strftime_now".into(),
                Value::from_function(move |fmt: String| -> Result<String, Error> {
                    date.strftime(&fmt).map_err(|m| Error::new(ErrorKind::InvalidOperation, m))
                }),
            );
        }
        let tmpl = self.env.get_template(NAME).map_err(|e| template_error(&e))?;
        tmpl.render(ctx).map_err(|e| template_error(&e))
    }
}

/// The template source: chat_template.jinja when given (transformers lets it override), else
/// tokenizer_config.json's "chat_template", a string or a list of {name, template} (the one named
/// "default"). None when neither has one.
pub(crate) fn template_source(
    tokenizer_config: Option<&serde_json::Value>,
    jinja_file: Option<&[u8]>,
) -> Result<Option<String>, DataError> {
    if let Some(bytes) = jinja_file {
        let text = std::str::from_utf8(bytes)
            .map_err(|e| DataError::File { file: "chat_template.jinja".into(), reason: format!("not UTF-8: {e}") })?;
        return Ok(Some(text.to_string()));
    }
    let bad = |reason: String| DataError::File { file: "tokenizer_config.json".into(), reason };
    match tokenizer_config.and_then(|c| c.get("chat_template")) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
        Some(serde_json::Value::Array(list)) => {
            let mut names = Vec::new();
            for (i, entry) in list.iter().enumerate() {
                let name = entry.get("name").and_then(|n| n.as_str());
                let template = entry.get("template").and_then(|t| t.as_str());
                match (name, template) {
                    (Some("default"), Some(t)) => return Ok(Some(t.to_string())),
                    (Some(n), Some(_)) => names.push(n.to_string()),
                    _ => {
                        return Err(bad(format!(
                            "chat_template[{i}] is not an object with string fields \"name\" and \"template\""
                        )))
                    }
                }
            }
            Err(bad(format!("chat_template lists templates {names:?} but none named \"default\"")))
        }
        Some(other) => Err(bad(format!("chat_template is neither a string nor a list of {{name, template}}: {other}"))),
    }
}

/// transformers' `{% generation %}...{% endgeneration %}` marks assistant text for its token mask;
/// for rendering it is plain content, so it becomes `{% if true %}...{% endif %}` with the same
/// whitespace control.
fn rewrite_generation_tags(src: &str) -> String {
    let mut out = String::with_capacity(src.len());
    let mut rest = src;
    while let Some(i) = rest.find("{%") {
        out.push_str(&rest[..i]);
        let tag = &rest[i..];
        // The closing "%}" after the opening "{%" (in "{%}" they share the '%').
        let Some(end) = tag[2..].find("%}").map(|e| e + 2) else {
            out.push_str(tag);
            return out;
        };
        let inner = &tag[2..end];
        let (lead, body) = match inner.strip_prefix(['-', '+']) {
            Some(b) => (&inner[..1], b),
            None => ("", inner),
        };
        let (body, trail) = match body.strip_suffix(['-', '+']) {
            Some(b) => (b, &body[b.len()..]),
            None => (body, ""),
        };
        match body.trim() {
            "generation" => out.push_str(&format!("{{%{lead} if true {trail}%}}")),
            "endgeneration" => out.push_str(&format!("{{%{lead} endif {trail}%}}")),
            _ => out.push_str(&tag[..end + 2]),
        }
        rest = &tag[end + 2..];
    }
    out.push_str(rest);
    out
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, so `{"a": 1, "b": [1, 2]}` with Python's spacing and no HTML escaping.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let indent: Option<Value> = kwargs.get("indent")?;
    let ensure_ascii: Option<bool> = kwargs.get("ensure_ascii")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let separators: Option<Value> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let indent = match indent {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => match (v.as_i64(), v.as_str()) {
            (Some(n), _) => Some(" ".repeat(n.max(0) as usize)),
            (_, Some(s)) => Some(s.to_string()),
            _ => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: indent must be an integer or a string")),
        },
    };
    let (item_sep, key_sep) = match separators {
        Some(seps) if !seps.is_none() => {
            let a = seps.get_item(&Value::from(0))?;
            let b = seps.get_item(&Value::from(1))?;
            match (a.as_str(), b.as_str()) {
                (Some(a), Some(b)) => (a.to_string(), b.to_string()),
                _ => return Err(Error::new(ErrorKind::InvalidOperation, "tojson: separators must be two strings")),
            }
        }
        _ => ((if indent.is_some() { "," } else { ", " }).to_string(), ": ".to_string()),
    };
    let opts = JsonOpts {
        indent,
        ensure_ascii: ensure_ascii.unwrap_or(false),
        sort_keys: sort_keys.unwrap_or(false),
        item_sep,
        key_sep,
    };
    let mut out = String::new();
    write_json(value, &opts, 0, &mut out)?;
    Ok(Value::from_safe_string(out))
}

struct JsonOpts {
    indent: Option<String>,
    ensure_ascii: bool,
    sort_keys: bool,
    item_sep: String,
    key_sep: String,
}

fn write_json(v: &Value, o: &JsonOpts, depth: usize, out: &mut String) -> Result<(), Error> {
    let newline = |out: &mut String, depth: usize| {
        if let Some(ind) = &o.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    };
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
        ValueKind::Number => {
            if v.is_integer() {
                out.push_str(&v.to_string());
            } else {
                let f = f64::try_from(v.clone())?;
                out.push_str(&python_float(f));
            }
        }
        ValueKind::String => write_json_str(v.as_str().unwrap_or_default(), o.ensure_ascii, out),
        ValueKind::Seq | ValueKind::Iterable => {
            let items: Vec<Value> = v.try_iter()?.collect();
            if items.is_empty() {
                out.push_str("[]");
                return Ok(());
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, depth + 1);
                write_json(item, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push(']');
        }
        ValueKind::Map => {
            let mut keys: Vec<Value> = v.try_iter()?.collect();
            if o.sort_keys {
                keys.sort();
            }
            if keys.is_empty() {
                out.push_str("{}");
                return Ok(());
            }
            out.push('{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(&o.item_sep);
                }
                newline(out, depth + 1);
                // json.dumps turns non-string keys into strings: 1 → "1", True → "true", None → "null".
                let key_text = match key.kind() {
                    ValueKind::String => key.as_str().unwrap_or_default().to_string(),
                    ValueKind::None | ValueKind::Undefined => "null".into(),
                    ValueKind::Bool => (if key.is_true() { "true" } else { "false" }).into(),
                    _ => key.to_string(),
                };
                write_json_str(&key_text, o.ensure_ascii, out);
                out.push_str(&o.key_sep);
                write_json(&v.get_item(key)?, o, depth + 1, out)?;
            }
            newline(out, depth);
            out.push('}');
        }
        kind => {
            return Err(Error::new(ErrorKind::InvalidOperation, format!("tojson: a {kind} is not JSON serializable")))
        }
    }
    Ok(())
}

/// Python's float repr as json.dumps prints it: `1.0`, `0.1`, `1e+16`, `1e-07`, `NaN`, `Infinity`.
fn python_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return (if f > 0.0 { "Infinity" } else { "-Infinity" }).into();
    }
    // Rust's Debug is the shortest round-trip form and switches to exponents where Python does
    // (exponent < -4 or >= 16); only the exponent's spelling differs.
    let s = format!("{f:?}");
    match s.split_once('e') {
        None => s,
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
    }
}

/// A JSON string as Python writes it: `\"`, `\\`, `\n`, `\r`, `\t`, `\b`, `\f`, other controls as
/// `\u00XX`; with ensure_ascii, non-ASCII as `\uXXXX` (surrogate pairs above U+FFFF).
fn write_json_str(s: &str, ensure_ascii: bool, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c if ensure_ascii && !c.is_ascii() => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use crate::platform::test;

    use super::super::testdata::{reference, smol, smol_with_template, QWEN25_TEMPLATE};
    use super::*;

    fn messages(v: &serde_json::Value) -> Vec<Message> {
        serde_json::from_value(v.clone()).expect("messages")
    }

    fn render(template: &str, msgs: &[Message], gen: bool) -> Result<String, DataError> {
        ChatTemplate::new(template)?.render(msgs, gen, &BTreeMap::new(), None)
    }

    fn user(content: &str) -> Vec<Message> {
        vec![Message { role: "user".into(), content: content.into() }]
    }

    /// Every conversation of reference.json, under SmolLM2's template and Qwen2.5's, both
    /// add_generation_prompt values: text and token ids exactly as transformers.
    #[test]
    fn renders_match_transformers() {
        let r = reference();
        let smol = smol();
        let qwen = smol_with_template(QWEN25_TEMPLATE);
        let chats = r["chats"].as_array().expect("chats");
        assert!(chats.len() >= 20);
        for c in chats {
            let tok = match c["template"].as_str() {
                Some("smollm2") => &smol,
                Some("qwen2.5") => &qwen,
                other => panic!("unknown template {other:?}"),
            };
            let msgs = messages(&c["messages"]);
            let gen = c["add_generation_prompt"].as_bool().expect("flag");
            let got = tok.apply_chat_template(&msgs, gen).expect("renders");
            assert_eq!(got, c["rendered"].as_str().expect("rendered"), "{} gen={gen} {msgs:?}", c["template"]);
            let ids: Vec<u32> = serde_json::from_value(c["ids"].clone()).expect("ids");
            assert_eq!(tok.encode(&got, false).expect("encodes"), ids, "{} {msgs:?}", c["template"]);
        }
        // Qwen's default system prompt appears when no system message is given.
        let text = qwen.apply_chat_template(&user("hi"), true).expect("renders");
        assert!(text.starts_with(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        ));
        assert!(text.ends_with("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
    }

    /// SmolLM2's template with {% generation %} tags renders as the plain one (transformers' extension).
    #[test]
    fn generation_tags_render_as_content() {
        let r = reference();
        let tagged = r["smollm2_generation_template"].as_str().expect("template");
        let plain = std::str::from_utf8(super::super::testdata::SMOL_CHAT_TEMPLATE).expect("utf8");
        for m in r["assistant_masks"].as_array().expect("masks") {
            let msgs = messages(&m["messages"]);
            assert_eq!(render(tagged, &msgs, false).expect("tagged"), render(plain, &msgs, false).expect("plain"));
        }
        let src = "a{%- generation -%} b {%+ endgeneration %}c{% if x %}y{% endif %}";
        assert_eq!(rewrite_generation_tags(src), "a{%- if true -%} b {%+ endif %}c{% if x %}y{% endif %}");
        // Found by the chat_template fuzz target: "{%}" once sliced backwards.
        for odd in ["{%}", "{%}%}", "x{%", "{%-}", "{%%}{% generation %}"] {
            assert!(ChatTemplate::new(odd).is_err(), "{odd} is not a template");
        }
    }

    #[test]
    fn variables_and_functions() {
        let mut special = BTreeMap::new();
        special.insert("bos_token".to_string(), "<s>".to_string());
        special.insert("eos_token".to_string(), "</s>".to_string());
        let t = ChatTemplate::new(
            "{{ bos_token }}{% for m in messages %}{{ m.role|upper }}:{{ m.content.strip() }}{{ eos_token }}\n{% endfor %}\
             {% if tools is none %}T{% endif %}{% if date_string is not defined %}D{% endif %}\
             {% if add_generation_prompt %}>{% endif %}",
        )
        .expect("parses");
        let msgs = user("  hi  ");
        assert_eq!(t.render(&msgs, true, &special, None).expect("renders"), "<s>USER:hi</s>\nTD>");
        let date = Some(Date { year: 2024, month: 7, day: 26 });
        let t = ChatTemplate::new("{{ date_string }}|{{ strftime_now('%A %d %B %Y, %j') }}").expect("parses");
        assert_eq!(t.render(&msgs, false, &special, date).expect("renders"), "26 Jul 2024|Friday 26 July 2024, 208");
        // Python methods through pycompat; loop controls.
        let t = ChatTemplate::new(
            "{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}|{{ 'a,b'.split(',')|length }}|\
             {% for m in messages %}{% if loop.first %}{% continue %}{% endif %}{{ m.content }}{% endfor %}",
        )
        .expect("parses");
        let two = vec![user("x")[0].clone(), Message { role: "assistant".into(), content: "y".into() }];
        assert_eq!(t.render(&two, false, &special, None).expect("renders"), "a=1|2|y");
    }

    #[test]
    fn tojson_is_python_json_dumps() {
        let t = ChatTemplate::new(
            "{{ {'b': [1, 2.5, none, true], 'a': 'x\"<é>\\n'} | tojson }}|{{ 1e20 | tojson }}|{{ 1e-7 | tojson }}|\
             {{ [1, {'k': 'v'}] | tojson(indent=2) }}|{{ 'é😀' | tojson(ensure_ascii=true) }}|\
             {{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
        )
        .expect("parses");
        let got = t.render(&[], false, &BTreeMap::new(), None).expect("renders");
        // json.dumps({'b': [1, 2.5, None, True], 'a': 'x"<é>\n'}) keeps insertion order in Python;
        // minijinja's maps are sorted (no preserve_order feature), so only the format is compared.
        assert_eq!(
            got,
            "{\"a\": \"x\\\"<é>\\n\", \"b\": [1, 2.5, null, true]}|1e+20|1e-07|\
             [\n  1,\n  {\n    \"k\": \"v\"\n  }\n]|\"\\u00e9\\ud83d\\ude00\"|{\"a\":2,\"b\":1}"
        );
    }

    #[test]
    fn errors_name_the_line() {
        let e = render(
            "line one\n{% if messages %}\n{{ raise_exception('only user roles') }}\n{% endif %}",
            &user("x"),
            false,
        )
        .expect_err("raises");
        let msg = e.to_string();
        assert!(msg.contains("only user roles") && msg.contains("chat_template:3"), "{msg}");
        let e = render("ok\n\n{% for m in messages %}{{ m.content }", &[], false).expect_err("does not parse");
        let msg = e.to_string();
        assert!(msg.starts_with("chat template:") && msg.contains("chat_template:3"), "{msg}");
        let e = render("{{ messages[0].role.nope() }}", &user("x"), false).expect_err("unknown method");
        assert!(e.to_string().contains("chat_template:1"), "{e}");
    }

    #[test]
    fn template_sources() {
        let cfg: serde_json::Value = serde_json::json!({"chat_template": [
            {"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]});
        assert_eq!(template_source(Some(&cfg), None).expect("ok").as_deref(), Some("D"));
        assert_eq!(template_source(Some(&cfg), Some(b"J")).expect("ok").as_deref(), Some("J"));
        let cfg = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "T"}]});
        let e = template_source(Some(&cfg), None).expect_err("no default").to_string();
        assert!(e.contains("tokenizer_config.json") && e.contains("default"), "{e}");
        let cfg = serde_json::json!({"chat_template": 3});
        assert!(template_source(Some(&cfg), None).expect_err("bad").to_string().contains("chat_template"));
        assert_eq!(template_source(Some(&serde_json::json!({})), None).expect("ok"), None);
        let e = template_source(None, Some(&[0xff, 0xfe])).expect_err("not utf8").to_string();
        assert!(e.contains("chat_template.jinja"), "{e}");
    }

    #[test]
    fn dates() {
        let d = Date { year: 2000, month: 1, day: 1 };
        assert_eq!(d.strftime("%a %Y-%m-%d %y %j %%").expect("ok"), "Sat 2000-01-01 00 001 %");
        assert_eq!(Date { year: 2024, month: 12, day: 31 }.strftime("%A %j").expect("ok"), "Tuesday 366");
        assert!(d.strftime("%Q").is_err());
    }
}
