//! Every error a user can cause or meet, in one place, each with a message that names the
//! file, tensor, field or line: one enum per layer's concern ([`GpuError`], [`CheckpointError`],
//! [`PeftError`], [`BatchError`], [`GgufError`], [`DataError`]; config.json's [`ConfigError`]
//! lives with the config) and [`Error`], the crate's sum of them. The layers re-export theirs.

use crate::base::bytes::human_bytes;
pub use crate::base::config::ConfigError;
use crate::base::names::{ADAPTER_CONFIG_FILE, ADAPTER_WEIGHTS_FILE, INDEX_FILE, SINGLE_FILE};

/// The crate's error.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Gpu(#[from] GpuError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Peft(#[from] PeftError),
    #[error(transparent)]
    Batch(#[from] BatchError),
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{0}")]
    Msg(String),
}

impl Error {
    pub fn msg(s: impl Into<String>) -> Error {
        Error::Msg(s.into())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong with the GPU: no adapter, no device, a failed readback, a buffer past the
/// device's limits or past the memory budget.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no WebGPU/Vulkan adapter is available: {0}")]
    NoAdapter(String),
    #[error("the GPU device could not be created: {0}")]
    Device(String),
    #[error("reading a buffer back from the GPU failed: {0}")]
    Readback(String),
    #[error("a buffer of {bytes} bytes for {what} exceeds the device limit of {limit} bytes")]
    TooLarge { what: String, bytes: u64, limit: u64 },
    #[error(
        "out of the GPU memory budget: {} more for {what} with {} in use would pass the budget of {}; \
         lower the sequence length, the batch or the rank, use --weights q4, or raise the budget",
        human_bytes(*bytes), human_bytes(*live), human_bytes(*budget)
    )]
    OverBudget { what: String, bytes: u64, live: u64, budget: u64 },
}

/// Why a checkpoint could not be opened or a tensor read; messages name the
/// file and the tensor.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("{file}: missing from the model files")]
    MissingFile { file: String },
    #[error("neither {SINGLE_FILE} nor {INDEX_FILE} is among the model files")]
    NoWeights,
    #[error("{file}: not a safetensors file: {reason}")]
    Safetensors { file: String, reason: String },
    #[error("{file}: {reason}")]
    Index { file: String, reason: String },
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{tensor}: not found in {files}")]
    MissingTensor { tensor: String, files: String },
    #[error("{tensor} (in {file}): dtype {dtype} is not supported (F32, F64, BF16, F16 are)")]
    Dtype { tensor: String, file: String, dtype: String },
    #[error("{tensor}: expected shape {expected:?} (from config.json), found {found:?}")]
    Shape { tensor: String, expected: Vec<usize>, found: Vec<usize> },
    #[error("{tensor}: missing from the checkpoint (expected shape {expected:?} from config.json)")]
    Missing { tensor: String, expected: Vec<usize> },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(
        "{tensor} (in {file}): element {element} is NaN or infinite; the file is damaged or holds a diverged model"
    )]
    NotFinite { tensor: String, file: String, element: usize },
}

#[derive(Debug, thiserror::Error)]
pub enum PeftError {
    /// Not JSON, or a field of the wrong type (serde's message has line and column).
    #[error("{ADAPTER_CONFIG_FILE}: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{ADAPTER_CONFIG_FILE}: {field}: {reason}")]
    Config { field: &'static str, reason: String },
    #[error("{ADAPTER_WEIGHTS_FILE}: not a safetensors file: {reason}")]
    Safetensors { reason: String },
    #[error("{ADAPTER_WEIGHTS_FILE}: {tensor}: dtype {dtype} is not supported (F32, F64, BF16, F16 are)")]
    Dtype { tensor: String, dtype: String },
    #[error("{ADAPTER_WEIGHTS_FILE}: {tensor}: {reason}")]
    Tensor { tensor: String, reason: String },
    #[error("{ADAPTER_WEIGHTS_FILE}: {tensor}: expected shape {expected:?} ({what}), found {found:?}")]
    Shape { tensor: String, expected: Vec<usize>, found: Vec<usize>, what: &'static str },
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
}

#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Not JSON, or a field of the wrong type (serde's message has line and column).
    #[error("batch JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("batch JSON: {0} is empty")]
    Empty(String),
    #[error("batch JSON: {field} has {rows} rows, input_ids has {expected}")]
    Rows { field: &'static str, rows: usize, expected: usize },
    #[error("batch JSON: {field} row {row} has {len} entries, input_ids row 0 has {expected}")]
    Ragged { field: &'static str, row: usize, len: usize, expected: usize },
    #[error("batch JSON: {field}[{row}][{col}] = {value}: {reason}")]
    Value { field: &'static str, row: usize, col: usize, value: i64, reason: String },
}

/// Why a GGUF was refused; every message names the field, key or tensor and the value.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file is not well-formed GGUF.
    #[error("GGUF: {0}")]
    Invalid(String),
    /// Well-formed, but not something the importer handles (a tensor type, an architecture, ...).
    #[error("GGUF: {0}")]
    Unsupported(String),
    #[error("GGUF: {what}: {source}")]
    Io { what: String, source: std::io::Error },
}

/// Everything that can go wrong reading tokenizer files, rendering a template or loading a dataset.
/// Each message names the file, the template line or the dataset line.
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A tokenizer file is missing, unreadable or has a bad field.
    #[error("{file}: {reason}")]
    File { file: String, reason: String },
    /// The chat template failed to parse or to render (minijinja's message names the line).
    #[error("chat template: {0}")]
    Template(String),
    /// A chat template is needed but the tokenizer files hold none.
    #[error(
        "the tokenizer has no chat template (neither tokenizer_config.json's \"chat_template\" nor chat_template.jinja)"
    )]
    NoChatTemplate,
    /// Encoding or decoding failed inside the tokenizer.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// One dataset line is malformed (line numbers count from 1).
    #[error("dataset line {line}: {reason}")]
    Line { line: usize, reason: String },
    /// The dataset holds no examples.
    #[error("the dataset is empty: no non-blank lines")]
    EmptyDataset,
}
