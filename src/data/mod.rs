//! Training data: the HF tokenizer (tokenizer.json through the `tokenizers` crate, special
//! tokens from tokenizer_config.json and generation_config.json), HF chat templates rendered
//! with minijinja, and JSONL datasets (chat, prompt/completion, plain text) turned into
//! examples with HF-style labels (unshifted, -100 = no loss).

pub mod dataset;
pub mod template;
pub mod tokenizer;

pub use dataset::{load_jsonl, Example};
pub use template::Date;
pub use tokenizer::{Message, StreamDecoder, Tokenizer};

pub use crate::base::error::DataError;
pub use crate::base::IGNORE_INDEX;

#[cfg(test)]
pub(crate) mod testdata {
    //! The SmolLM2-135M-Instruct tokenizer and transformers' reference outputs, made by
    //! scripts/make-tokenizer-fixtures.py and compiled in, so the tests also run in the browser.
    use super::Tokenizer;

    pub const SMOL_TOKENIZER_JSON: &[u8] = include_bytes!("../../tests/fixtures/tokenizers/smollm2/tokenizer.json");
    pub const SMOL_TOKENIZER_CONFIG: &[u8] =
        include_bytes!("../../tests/fixtures/tokenizers/smollm2/tokenizer_config.json");
    pub const SMOL_CHAT_TEMPLATE: &[u8] = include_bytes!("../../tests/fixtures/tokenizers/smollm2/chat_template.jinja");
    pub const SMOL_REFERENCE: &str = include_str!("../../tests/fixtures/tokenizers/smollm2/reference.json");
    pub const QWEN25_TEMPLATE: &str = include_str!("../../tests/fixtures/tokenizers/qwen2.5-chat-template.jinja");

    /// SmolLM2's tokenizer with its own chat template.
    pub fn smol() -> Tokenizer {
        Tokenizer::from_files(SMOL_TOKENIZER_JSON, Some(SMOL_TOKENIZER_CONFIG), None, Some(SMOL_CHAT_TEMPLATE))
            .expect("SmolLM2 fixture loads")
    }

    /// SmolLM2's tokenizer with another template (its tokens are SmolLM2's: <|im_start|>, <|im_end|>).
    pub fn smol_with_template(template: &str) -> Tokenizer {
        Tokenizer::from_files(SMOL_TOKENIZER_JSON, Some(SMOL_TOKENIZER_CONFIG), None, Some(template.as_bytes()))
            .expect("SmolLM2 fixture loads with the template")
    }

    /// Reference outputs of transformers.
    pub fn reference() -> serde_json::Value {
        serde_json::from_str(SMOL_REFERENCE).expect("reference.json parses")
    }
}
