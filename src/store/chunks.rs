//! The chunked weight store: a model's tensors kept as chunks (byte ranges of one
//! tensor, or groups of small tensors, at most [`MAX_CHUNK_BYTES`] each) in a
//! key-value [`ChunkStore`] — a directory natively ([`DirStore`]), memory in tests
//! ([`MemoryStore`]), IndexedDB later — plus `<model>/manifest.json`, written last,
//! that says where every tensor lies and checksums every chunk, plus the model's small
//! files (tokenizer.json, ...) under `<model>/files/<name>`, checksummed in the manifest too.
//! [`import_checkpoint`] stores a checkpoint already in memory;
//! [`import_files`](super::import::import_files) streams one from its files, resumably.
//! [`StoreSource`] streams a stored model into [`Model::streamed`](crate::model::Model::streamed),
//! reading only the chunks a tensor or a set of embedding rows needs.

use super::asyncio::AsyncChunkStore;
use super::import::{ordered, plan, TensorSource};
use super::{host, Checkpoint, HostTensor, StoreError, OPTIONAL_FILES};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::model::layout::{self, Proj};
use crate::model::stream::{LayerHost, WeightSource};
use safetensors::Dtype;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

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

fn missing(key: &str) -> Error {
    Error::msg(format!("chunk store: {key}: not found"))
}

/// Blobs in memory (tests, and the browser before IndexedDB).
#[derive(Default)]
pub struct MemoryStore {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>>> {
        self.map.lock().map_err(|_| Error::msg("memory store: lock poisoned by a panic"))
    }
}

impl ChunkStore for MemoryStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        check_key(key)?;
        self.lock()?.insert(key.to_string(), bytes.to_vec());
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.lock()?.get(key).cloned().ok_or_else(|| missing(key))
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.lock()?.remove(key);
        Ok(())
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .lock()?
            .range(prefix.to_string()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
}

/// One file per key under `root` ("a/b" is `root/a/b`), each written atomically
/// (to `<file>.tmp`, then renamed).
#[cfg(not(target_arch = "wasm32"))]
pub struct DirStore {
    pub root: std::path::PathBuf,
}

#[cfg(not(target_arch = "wasm32"))]
impl DirStore {
    /// A store under `root` (created on the first write).
    pub fn new(root: impl Into<std::path::PathBuf>) -> DirStore {
        DirStore { root: root.into() }
    }
    fn path(&self, key: &str) -> Result<std::path::PathBuf> {
        check_key(key)?;
        Ok(key.split('/').fold(self.root.clone(), |p, s| p.join(s)))
    }
    fn walk(&self, dir: &std::path::Path, prefix: &str, out: &mut Vec<String>) -> Result<()> {
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let path = entry.map_err(|e| io(dir, e))?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
            let key = if prefix.is_empty() { name.to_string() } else { format!("{prefix}/{name}") };
            if path.is_dir() {
                self.walk(&path, &key, out)?;
            } else if !name.ends_with(".tmp") {
                out.push(key);
            }
        }
        Ok(())
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn io(path: &std::path::Path, source: std::io::Error) -> Error {
    StoreError::Io { path: path.display().to_string(), source }.into()
}

#[cfg(not(target_arch = "wasm32"))]
impl ChunkStore for DirStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let path = self.path(key)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let path = self.path(key)?;
        std::fs::read(&path)
            .map_err(|e| if e.kind() == std::io::ErrorKind::NotFound { missing(key) } else { io(&path, e) })
    }
    fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path, e)),
            _ => {}
        }
        // Remove directories left empty, up to the root.
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| *d != self.root.as_path() && d.is_dir()) {
            if std::fs::read_dir(d).map_err(|e| io(d, e))?.next().is_some() {
                break;
            }
            std::fs::remove_dir(d).map_err(|e| io(d, e))?;
            dir = d.parent();
        }
        Ok(())
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if self.root.is_dir() {
            self.walk(&self.root, "", &mut out)?;
        }
        out.retain(|k| k.starts_with(prefix));
        out.sort();
        Ok(out)
    }
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
    /// The small files stored with the model (those of [`OPTIONAL_FILES`] it has), in that order.
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

/// FNV-1a, 64 bits, as 16 hex digits.
pub fn fnv1a64(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3));
    format!("{h:016x}")
}

/// `<model>/manifest.json`
pub fn manifest_key(model: &str) -> String {
    format!("{model}/manifest.json")
}

/// `<model>/chunks/00012`
pub(crate) fn chunk_key(model: &str, i: usize) -> String {
    format!("{model}/chunks/{i:05}")
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

/// Store `ckpt` as `model` in chunks of at most `max_chunk` bytes (replacing a
/// model of that name), with its small files. Tensors go in layout order: one that fits a
/// chunk is never split, a bigger one is split by byte range, small ones share a chunk
/// (the plan of [`import_files`](super::import::import_files), which gives the same
/// manifest for the same files). Each chunk is read back and checked after writing; the
/// manifest is written last, so the model is listed only once complete. Extra memory:
/// about one chunk.
pub fn import_checkpoint(store: &dyn ChunkStore, model: &str, ckpt: &Checkpoint, max_chunk: usize) -> Result<Manifest> {
    check_model(model)?;
    layout::validate(ckpt)?;
    let config = std::str::from_utf8(ckpt.file(super::CONFIG_FILE).unwrap_or_default())
        .map_err(|e| Error::msg(format!("{}: not UTF-8: {e}", super::CONFIG_FILE)))?
        .to_string();
    let small: Vec<(&str, &[u8])> = OPTIONAL_FILES.iter().filter_map(|&n| Some((n, ckpt.file(n)?))).collect();
    let files = small.iter().map(|&(name, bytes)| file_entry(model, name, bytes)).collect();
    let tensors = ckpt.entries.iter().map(|(name, e)| {
        let (start, end) = (e.start as u64, e.end as u64);
        let t = TensorSource {
            name: name.clone(),
            dtype: e.dtype,
            shape: e.shape.clone(),
            file: e.file.clone(),
            start,
            end,
        };
        (name.clone(), t)
    });
    let tensors = ordered(ckpt.config(), tensors.collect())?;
    let plan = plan(model, config, files, &tensors, max_chunk)?;
    delete_model(store, model)?;

    for (&(_, bytes), f) in small.iter().zip(&plan.manifest.files) {
        put_checked(store, model, &f.key, bytes)?;
    }
    let mut man = plan.manifest;
    for (c, entry) in plan.chunks.iter().zip(&mut man.chunks) {
        let mut buf = Vec::with_capacity(c.bytes);
        for s in &c.segments {
            let data = ckpt.files.get(&s.file).and_then(|f| f.get(s.start as usize..s.start as usize + s.len));
            buf.extend_from_slice(data.ok_or_else(|| StoreError::MissingFile { file: s.file.clone() })?);
        }
        entry.fnv1a64 = put_checked(store, model, &c.key, buf)?;
    }
    let json = serde_json::to_vec(&man).map_err(|e| Error::msg(format!("import {model}: manifest: {e}")))?;
    store.put(&manifest_key(model), &json)?;
    Ok(man)
}

/// The manifest entry of small file `name` of `model`.
pub(crate) fn file_entry(model: &str, name: &str, bytes: &[u8]) -> FileEntry {
    FileEntry { name: name.into(), key: file_key(model, name), bytes: bytes.len(), fnv1a64: fnv1a64(bytes) }
}

/// Write `bytes` under `key`, read them back and check them; their checksum.
fn put_checked(store: &dyn ChunkStore, model: &str, key: &str, bytes: impl AsRef<[u8]>) -> Result<String> {
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
    if back.len() != len || fnv1a64(&back) != sum {
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
    store.delete(&super::import::import_key(model)).await?;
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
    if bytes.len() != f.bytes || fnv1a64(&bytes) != f.fnv1a64 {
        return Err(Error::msg(format!(
            "model {}: {} ({}) is corrupt (size or checksum differs)",
            man.model, name, f.key
        )));
    }
    Ok(Some(bytes))
}

/// A stored model as a [`WeightSource`]: each read fetches only the chunks that hold
/// the bytes asked for, checks their checksums, and keeps nothing.
pub struct StoreSource {
    store: Arc<dyn ChunkStore>,
    man: Manifest,
    cfg: ModelConfig,
    tensors: HashMap<String, usize>,
    chunks: HashMap<String, usize>,
}

impl StoreSource {
    /// Read and check `model`'s manifest: config.json parses, every tensor the config
    /// needs is there with its shape, and every piece lies inside a listed chunk.
    pub fn open(store: Arc<dyn ChunkStore>, model: &str) -> Result<StoreSource> {
        let man = read_manifest(store.as_ref(), model)?;
        let bad = |what: String| Error::msg(format!("model {model}: {what}"));
        if man.version != MANIFEST_VERSION || man.model != model {
            return Err(bad(format!("the manifest is version {} for model {}", man.version, man.model)));
        }
        let cfg = ModelConfig::from_json(&man.config).map_err(|e| bad(format!("config.json: {e}")))?;
        let tensors: HashMap<String, usize> =
            man.tensors.iter().enumerate().map(|(i, t)| (t.name.clone(), i)).collect();
        let chunks: HashMap<String, usize> = man.chunks.iter().enumerate().map(|(i, c)| (c.key.clone(), i)).collect();
        for (name, shape) in layout::expected_tensors(&cfg) {
            match tensors.get(&name).map(|&i| &man.tensors[i].shape) {
                None => return Err(bad(format!("{name}: missing (expected shape {shape:?} from config.json)"))),
                Some(s) if *s != shape => return Err(bad(format!("{name}: expected shape {shape:?}, found {s:?}"))),
                Some(_) => {}
            }
        }
        for t in &man.tensors {
            let want = t.shape.iter().try_fold(t.dtype.bitsize(), |a, &d| a.checked_mul(d)).map(|b| b.div_ceil(8));
            if want.is_none_or(|w| t.pieces.iter().try_fold(0usize, |a, p| a.checked_add(p.len)) != Some(w)) {
                return Err(bad(format!("{}: its pieces do not add up to its shape and dtype", t.name)));
            }
            for p in &t.pieces {
                let c = chunks.get(&p.chunk).map(|&i| &man.chunks[i]);
                if c.is_none_or(|c| p.offset.checked_add(p.len).is_none_or(|end| end > c.bytes)) {
                    return Err(bad(format!("{}: piece outside chunk {}", t.name, p.chunk)));
                }
            }
        }
        Ok(StoreSource { store, man, cfg, tensors, chunks })
    }

    /// The manifest read at open.
    pub fn manifest(&self) -> &Manifest {
        &self.man
    }

    fn entry(&self, name: &str) -> Result<&TensorEntry> {
        let i = self
            .tensors
            .get(name)
            .ok_or_else(|| Error::msg(format!("model {}: {name}: not stored", self.man.model)))?;
        Ok(&self.man.tensors[*i])
    }

    /// Fetch one chunk and check its size and checksum.
    fn chunk(&self, key: &str) -> Result<Vec<u8>> {
        let c = &self.man.chunks[self.chunks[key]];
        let bytes = self.store.get(key)?;
        if bytes.len() != c.bytes || fnv1a64(&bytes) != c.fnv1a64 {
            return Err(Error::msg(format!(
                "model {}: chunk {key} is corrupt (size or checksum differs)",
                self.man.model
            )));
        }
        Ok(bytes)
    }

    /// The bytes `ranges` (of the tensor's own bytes) concatenated; each chunk is fetched once.
    fn read(&self, t: &TensorEntry, ranges: &[std::ops::Range<usize>]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; ranges.iter().map(|r| r.len()).sum()];
        let mut at = 0; // where in the tensor's bytes piece p starts
        for p in &t.pieces {
            let piece = at..at + p.len;
            at += p.len;
            let mut chunk: Option<Vec<u8>> = None;
            let mut dst = 0;
            for r in ranges {
                let (s, e) = (r.start.max(piece.start), r.end.min(piece.end));
                if s < e {
                    let bytes = match &chunk {
                        Some(b) => b,
                        None => chunk.insert(self.chunk(&p.chunk)?),
                    };
                    let src = p.offset + s - piece.start;
                    out[dst + s - r.start..dst + e - r.start].copy_from_slice(&bytes[src..src + e - s]);
                }
                dst += r.len();
            }
        }
        Ok(out)
    }

    fn decode(&self, t: &TensorEntry, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
        host::decode(t.dtype, shape, bytes).ok_or_else(|| {
            Error::msg(format!(
                "model {}: {}: dtype {} is not supported (F32, F64, BF16, F16 are)",
                self.man.model, t.name, t.dtype
            ))
        })
    }

    /// One whole tensor, decoded like [`Checkpoint::tensor`].
    pub fn tensor(&self, name: &str) -> Result<HostTensor> {
        let t = self.entry(name)?;
        let all = 0..t.pieces.iter().map(|p| p.len).sum();
        let bytes = self.read(t, std::slice::from_ref(&all))?;
        self.decode(t, &t.shape, &bytes)
    }

    /// Rows `rows` of a (vocab, C) table as one (rows.len(), C) tensor.
    fn rows(&self, key: &str, rows: &[usize]) -> Result<HostTensor> {
        let t = self.entry(key)?;
        let (v, c) = (self.cfg.vocab, self.cfg.hidden);
        if let Some(r) = rows.iter().find(|&&r| r >= v) {
            return Err(Error::msg(format!("model {}: {key}: row {r} is out of range (vocab {v})", self.man.model)));
        }
        let row = c * t.dtype.bitsize() / 8; // sub-byte dtypes fail to decode below
        let mut ranges: Vec<std::ops::Range<usize>> = Vec::new(); // runs of consecutive rows merged
        for &r in rows {
            match ranges.last_mut() {
                Some(last) if last.end == r * row => last.end += row,
                _ => ranges.push(r * row..(r + 1) * row),
            }
        }
        self.decode(t, &[rows.len(), c], &self.read(t, &ranges)?)
    }
}

impl WeightSource for StoreSource {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn layer(&self, i: usize) -> Result<LayerHost> {
        let get = |key: String, shape: &[usize]| -> Result<HostTensor> {
            let t = self.tensor(&key)?;
            if t.shape != shape {
                return Err(Error::msg(format!(
                    "{key}: expected shape {shape:?} (from config.json), found {:?}",
                    t.shape
                )));
            }
            Ok(t)
        };
        let mut proj = Vec::with_capacity(7);
        for p in Proj::all() {
            let (out, inp) = p.dims(&self.cfg);
            let w = get(layout::proj_weight_key(i, p), &[out, inp])?;
            let b = if p.has_bias(&self.cfg) { Some(get(layout::proj_bias_key(i, p), &[out])?) } else { None };
            proj.push((w, b));
        }
        Ok(LayerHost {
            input_norm: get(layout::input_norm_key(i), &[self.cfg.hidden])?,
            post_norm: get(layout::post_norm_key(i), &[self.cfg.hidden])?,
            proj,
        })
    }
    fn final_norm(&self) -> Result<HostTensor> {
        self.tensor(layout::FINAL_NORM_KEY)
    }
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let rows: Vec<usize> = ids.iter().map(|&id| id as usize).collect();
        Ok(self.rows(layout::EMBED_KEY, &rows)?.to_f32())
    }
    fn output_rows(&self, r0: usize, r1: usize) -> Result<HostTensor> {
        let key = if self.cfg.tie_word_embeddings { layout::EMBED_KEY } else { layout::LM_HEAD_KEY };
        self.rows(key, &(r0..r1).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;

    #[test]
    fn fnv1a64_and_keys() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), "cbf29ce484222325");
        assert_eq!(fnv1a64(b"a"), "af63dc4c8601ec8c");
        assert_eq!(fnv1a64(b"foobar"), "85944171f73967e8");
        for bad in ["", "a//b", "/a", "a/", "a/../b", ".", "a\\b", "x.tmp"] {
            assert!(check_key(bad).is_err(), "{bad:?} accepted");
        }
        check_key("qwen2.5-0.5b/chunks/00003").expect("a valid key");
        assert!(check_model("a/b").is_err());
    }
}
