//! The weight store: a model kept as chunks (byte ranges of one tensor, or groups of small
//! tensors, at most [`MAX_CHUNK_BYTES`] each) in a key-value store, plus
//! `<model>/manifest.json`, written last, that says where every tensor lies and checksums
//! every chunk, plus the model's small files (tokenizer.json, ...) under
//! `<model>/files/<name>`, checksummed in the manifest too.
//!
//! Backends: [`ChunkStore`] (sync) — a directory natively ([`dir::DirStore`]), memory
//! ([`memory::MemoryStore`]) — and [`AsyncChunkStore`] (every operation a promise):
//! IndexedDB in the browser (`idb::IdbStore`), any [`ChunkStore`] natively. The store
//! implements the model's weight-source seam: [`source::StoreSource`] reads only the chunks a
//! block or a set of embedding rows needs, and [`staged::StoreFetch`] stages them from an async
//! store one load step at a time. Putting models in is the import layer's job (src/import,
//! above this one).

pub mod asyncstore;
#[cfg(not(target_arch = "wasm32"))]
pub mod dir;
#[cfg(target_arch = "wasm32")]
pub mod idb;
pub mod memory;
pub mod source;
pub mod staged;

pub use asyncstore::AsyncChunkStore;
#[cfg(not(target_arch = "wasm32"))]
pub use dir::DirStore;
pub use memory::MemoryStore;
pub use source::StoreSource;

use crate::base::bytes::{fnv1a64, matches};
use crate::base::error::{Error, Result};
use safetensors::Dtype;
use serde::{Deserialize, Serialize};

/// Default most bytes of one chunk: 16 MiB, so that an import, which holds one chunk at a time
/// (and a load, which reads one), stays well inside a phone's wasm memory.
pub const MAX_CHUNK_BYTES: usize = 16 << 20;

/// The manifest format this code writes and reads.
pub const MANIFEST_VERSION: u32 = 1;

/// A key-value store of byte blobs. Keys are '/'-separated paths of non-empty
/// segments (not "." or "..", no '\\', not ending in ".tmp").
pub trait ChunkStore: Send + Sync {
    /// Write (or replace) `key`.
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// Read `key`; an error naming it when it is missing.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// Remove `key` (nothing to do when it is missing).
    fn delete(&self, key: &str) -> Result<()>;
    /// Every key that starts with `prefix`, sorted.
    fn keys(&self, prefix: &str) -> Result<Vec<String>>;
    /// Call `f` with `key`'s bytes (an error naming it when it is missing): a store that holds
    /// its chunks in memory lends them without a copy.
    fn read_with(&self, key: &str, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        f(&self.get(key)?);
        Ok(())
    }
    /// Whether every chunk this store returns was checked against its model's manifest (size
    /// and checksum) when it came in, so that a reader need not check it again at each read.
    fn checked(&self) -> bool {
        false
    }
}

/// A key is '/'-separated segments, none empty, `.`, `..` or holding `\` or NUL, and not a
/// `.tmp` name (the directory store's write-then-rename files). Every backend checks it.
pub(crate) fn check_key(key: &str) -> Result<()> {
    let bad_segment = |s: &str| s.is_empty() || s == "." || s == ".." || s.contains(['\\', '\0']);
    if key.split('/').any(bad_segment) || key.ends_with(".tmp") {
        return Err(Error::msg(format!("chunk store: {key:?} is not a valid key")));
    }
    Ok(())
}

pub(crate) fn missing(key: &str) -> Error {
    Error::msg(format!("chunk store: {key}: not found"))
}

/// Where a model's tensors lie in its chunks; stored as `<model>/manifest.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`MANIFEST_VERSION`]
    pub version: u32,
    pub model: String,
    /// The text of config.json.
    pub config: String,
    /// Every tensor of the checkpoint: layout order, then the others by name.
    pub tensors: Vec<TensorEntry>,
    /// Every chunk, in key order.
    pub chunks: Vec<ChunkEntry>,
    /// The small files stored with the model (those of [`OPTIONAL_FILES`](crate::base::names::OPTIONAL_FILES) it has), in that order.
    #[serde(default)]
    pub files: Vec<FileEntry>,
}

/// One tensor: its raw little-endian bytes as stored in the safetensors file are
/// the concatenation of its pieces.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorEntry {
    /// The checkpoint's key: "model.layers.0.self_attn.q_proj.weight"
    pub name: String,
    /// As in the safetensors header: "F32", "BF16", ...
    pub dtype: Dtype,
    /// PyTorch order
    pub shape: Vec<usize>,
    /// In order; none for an empty tensor.
    pub pieces: Vec<Piece>,
}

/// A byte range of one chunk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Piece {
    /// The chunk's key
    pub chunk: String,
    /// Byte offset in the chunk
    pub offset: usize,
    /// Bytes
    pub len: usize,
}

/// One chunk: its key, size and FNV-1a 64 checksum (16 hex digits).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ChunkEntry {
    /// `<model>/chunks/00000`, ...
    pub key: String,
    /// Size in bytes
    pub bytes: usize,
    /// [`fnv1a64`] of the bytes
    pub fnv1a64: String,
}

/// One small file stored whole: tokenizer.json, ...
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FileEntry {
    /// Its name in the model directory: "tokenizer.json"
    pub name: String,
    /// `<model>/files/<name>`
    pub key: String,
    /// Size in bytes
    pub bytes: usize,
    /// [`fnv1a64`] of the bytes
    pub fnv1a64: String,
}

/// `<model>/manifest.json`
pub fn manifest_key(model: &str) -> String {
    format!("{model}/manifest.json")
}

/// `<model>/chunks/00012`
pub(crate) fn chunk_key(model: &str, i: usize) -> String {
    format!("{model}/chunks/{i:05}")
}

/// `<model>/import.json`: the state of an unfinished import.
pub fn import_key(model: &str) -> String {
    format!("{model}/import.json")
}

/// `<model>/files/tokenizer.json`
pub fn file_key(model: &str, name: &str) -> String {
    format!("{model}/files/{name}")
}

pub(crate) fn check_model(model: &str) -> Result<()> {
    check_key(model)?;
    if model.contains('/') {
        return Err(Error::msg(format!("model name {model:?}: must not contain '/'")));
    }
    Ok(())
}

/// The manifest entry of small file `name` of `model`.
pub(crate) fn file_entry(model: &str, name: &str, bytes: &[u8]) -> FileEntry {
    FileEntry { name: name.into(), key: file_key(model, name), bytes: bytes.len(), fnv1a64: fnv1a64(bytes) }
}

/// Write `bytes` under `key`, read them back and check them; their checksum.
pub(crate) fn put_checked(store: &dyn ChunkStore, model: &str, key: &str, bytes: impl AsRef<[u8]>) -> Result<String> {
    ready(put_checked_async(store, model, key, bytes))
}

/// Write `bytes` under `key`, read them back and check them; their checksum. Owned bytes
/// are freed before the read-back, so that a chunk is held once.
pub(crate) async fn put_checked_async<S: AsyncChunkStore + ?Sized>(
    store: &S,
    model: &str,
    key: &str,
    bytes: impl AsRef<[u8]>,
) -> Result<String> {
    let sum = fnv1a64(bytes.as_ref());
    store.put(key, bytes.as_ref()).await?;
    let len = bytes.as_ref().len();
    drop(bytes);
    let back = store.get(key).await?;
    if !matches(&back, len, &sum) {
        return Err(Error::msg(format!("import {model}: {key} reads back other bytes than were written")));
    }
    Ok(sum)
}

/// Run an operation of a sync [`ChunkStore`] seen as an [`AsyncChunkStore`]: its futures
/// are ready when first polled.
pub(crate) fn ready<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(r) => r,
        Poll::Pending => Err(Error::msg("chunk store: a sync store's operation did not complete at once")),
    }
}

/// `model`'s manifest; an error when it has none.
pub fn read_manifest(store: &dyn ChunkStore, model: &str) -> Result<Manifest> {
    ready(read_manifest_async(store, model))
}

/// `model`'s manifest; an error when it has none.
pub async fn read_manifest_async<S: AsyncChunkStore + ?Sized>(store: &S, model: &str) -> Result<Manifest> {
    let bytes =
        store.get(&manifest_key(model)).await.map_err(|e| Error::msg(format!("model {model}: no manifest ({e})")))?;
    serde_json::from_slice(&bytes).map_err(|e| Error::msg(format!("model {model}: {}: {e}", manifest_key(model))))
}

/// The complete models in `store` (those with a manifest) and their chunk bytes, by name.
pub fn list_models(store: &dyn ChunkStore) -> Result<Vec<(String, u64)>> {
    ready(list_models_async(store))
}

/// The complete models in `store` (those with a manifest) and their chunk bytes, by name.
pub async fn list_models_async<S: AsyncChunkStore + ?Sized>(store: &S) -> Result<Vec<(String, u64)>> {
    let mut out = Vec::new();
    for key in store.keys("").await? {
        if let Some(model) = key.strip_suffix("/manifest.json").filter(|m| !m.contains('/')) {
            let man = read_manifest_async(store, model).await?;
            out.push((model.to_string(), man.chunks.iter().map(|c| c.bytes as u64).sum()));
        }
    }
    out.sort();
    Ok(out)
}

/// Remove a model, or what an interrupted import left of one: its manifest first (so it is
/// no longer listed), then its import state, then its chunks and files.
pub fn delete_model(store: &dyn ChunkStore, model: &str) -> Result<()> {
    ready(delete_model_async(store, model))
}

/// Remove a model, or what an interrupted import left of one: its manifest first (so it is
/// no longer listed), then its import state, then its chunks and files.
pub async fn delete_model_async<S: AsyncChunkStore + ?Sized>(store: &S, model: &str) -> Result<()> {
    check_model(model)?;
    store.delete(&manifest_key(model)).await?;
    store.delete(&import_key(model)).await?;
    for key in store.keys(&format!("{model}/")).await? {
        store.delete(&key).await?;
    }
    Ok(())
}

/// Small file `name` of a stored model (tokenizer.json, ...), checked against the manifest;
/// None when the model was stored without it.
pub async fn read_model_file<S: AsyncChunkStore + ?Sized>(
    store: &S,
    man: &Manifest,
    name: &str,
) -> Result<Option<Vec<u8>>> {
    let Some(f) = man.files.iter().find(|f| f.name == name) else { return Ok(None) };
    let bytes = store.get(&f.key).await?;
    if !matches(&bytes, f.bytes, &f.fnv1a64) {
        return Err(Error::msg(format!(
            "model {}: {} ({}) is corrupt (size or checksum differs)",
            man.model, name, f.key
        )));
    }
    Ok(Some(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::test;

    #[test]
    fn keys_are_checked() {
        for bad in ["", "a//b", "/a", "a/", "a/../b", ".", "a\\b", "x.tmp"] {
            assert!(check_key(bad).is_err(), "{bad:?} accepted");
        }
        check_key("qwen2.5-0.5b/chunks/00003").expect("a valid key");
        assert!(check_model("a/b").is_err());
    }
}
