//! Putting models into the weight store: from files read by byte ranges ([`files`]: memory and
//! directories natively; in the browser `web`: HTTP servers in the hub layout and picked
//! Files), from a GGUF seen as the Hugging Face checkpoint it converts to ([`gguf`]), or from a
//! checkpoint already in memory ([`checkpoint`]).
//!
//! The streaming importer ([`import_files`]) stores a model in the chunk and manifest format of
//! `crate::store`, so that [`StoreSource::open`](crate::store::StoreSource::open) reads the
//! result. It plans first ([`plan`]): from config.json, the small files and the safetensors
//! headers alone (two range reads per weight file) it computes the whole manifest and, for
//! each chunk, the file ranges it is made of (the same plan [`import_checkpoint`] uses). Then
//! it copies ([`copy`]): each chunk is read (adjacent ranges of one file in one read), written,
//! read back and checked, and recorded as done in `<model>/import.json` with the plan's
//! fingerprint; an interrupted import of the same plan resumes after the done chunks that still
//! check out, another plan starts over ([`resume`]). The manifest is written last, so a model is
//! listed only once complete. Host memory: about one chunk, plus the small files and one
//! safetensors header. Progress is reported in transformers.js's conventions ([`Progress`]).

pub mod checkpoint;
pub mod copy;
pub mod files;
pub mod gguf;
pub mod plan;
pub mod resume;
#[cfg(target_arch = "wasm32")]
pub mod web;

pub use checkpoint::import_checkpoint;
pub use copy::import_files;
pub use resume::{partial_imports, partial_imports_async, PartialImport};

use crate::platform::now_ms;
use crate::store::MAX_CHUNK_BYTES;
use serde::Serialize;

/// How to import.
#[derive(Clone, Debug)]
pub struct ImportOptions {
    /// Most bytes of one chunk (default [`MAX_CHUNK_BYTES`]).
    pub max_chunk: usize,
    /// The store's free space (in the browser, quota − usage from
    /// `navigator.storage.estimate()`), where known: an import that needs more is refused
    /// before it writes anything, with an error naming both sizes.
    pub free_bytes: Option<u64>,
}

impl Default for ImportOptions {
    fn default() -> ImportOptions {
        ImportOptions { max_chunk: MAX_CHUNK_BYTES, free_bytes: None }
    }
}

/// What an import reports, in the transformers.js conventions (see notes/ENGINE_API.md).
/// `name` is the model's name; `progress` is a percentage.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Progress {
    /// A file was found and is about to be read.
    Initiate { name: String, file: String },
    /// Its bytes start to come.
    Download { name: String, file: String },
    /// Bytes of the file read so far (a small file: all at once); of a weights file, the
    /// bytes of its tensors stored so far, resumed chunks included.
    Progress { name: String, file: String, loaded: u64, total: u64, progress: f64 },
    /// The file is read (a small file; stored before the first chunk) or stored (a weights file).
    Done { name: String, file: String },
    /// The whole model after each chunk: chunk bytes stored, of `total`; `rate` in bytes per
    /// second over the bytes fetched by this import, `eta` in seconds (0 while unknown).
    Total { name: String, loaded: u64, total: u64, progress: f64, rate: f64, eta: f64 },
    /// The model is stored and listed; `bytes` of chunks.
    Ready { name: String, bytes: u64 },
}

/// Emits the events of one import.
pub(super) struct Reporter<'a> {
    model: String,
    on: &'a mut dyn FnMut(Progress),
}

impl Reporter<'_> {
    fn initiate(&mut self, file: &str) {
        (self.on)(Progress::Initiate { name: self.model.clone(), file: file.into() });
    }
    fn download(&mut self, file: &str) {
        (self.on)(Progress::Download { name: self.model.clone(), file: file.into() });
    }
    fn progress(&mut self, file: &str, loaded: u64, total: u64) {
        let progress = percent(loaded, total);
        (self.on)(Progress::Progress { name: self.model.clone(), file: file.into(), loaded, total, progress });
    }
    fn done(&mut self, file: &str) {
        (self.on)(Progress::Done { name: self.model.clone(), file: file.into() });
    }
    /// `fetched` bytes of the `loaded` came in this import, since `t0` (ms).
    fn total(&mut self, loaded: u64, total: u64, fetched: u64, t0: f64) {
        let secs = (now_ms() - t0) / 1000.0;
        let rate = if secs > 0.0 { fetched as f64 / secs } else { 0.0 };
        let eta = if rate > 0.0 { (total - loaded) as f64 / rate } else { 0.0 };
        let progress = percent(loaded, total);
        (self.on)(Progress::Total { name: self.model.clone(), loaded, total, progress, rate, eta });
    }
    fn ready(&mut self, bytes: u64) {
        (self.on)(Progress::Ready { name: self.model.clone(), bytes });
    }
}

pub(super) fn percent(loaded: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        loaded as f64 * 100.0 / total as f64
    }
}

#[cfg(test)]
mod tests;
