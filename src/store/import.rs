//! The streaming, resumable importer: a model read from a [`FileSet`] (HTTP Range requests
//! or File objects in the browser, a directory natively, memory in tests) is stored in an
//! [`AsyncChunkStore`] in the chunk and manifest format of [`import_checkpoint`](super::chunks::import_checkpoint), so that
//! [`StoreSource::open`](super::chunks::StoreSource::open) reads the result.
//!
//! It plans first, then copies. From config.json, the small files and the safetensors
//! headers alone (two range reads per weight file) it computes the whole manifest and, for
//! each chunk, the file ranges it is made of ([`plan`], shared with [`import_checkpoint`](super::chunks::import_checkpoint)).
//! Then each chunk is read (adjacent ranges of one file in one read), written, read back and
//! checked, and recorded as done in `<model>/import.json` with the plan's fingerprint. An
//! interrupted import of the same plan resumes after the done chunks that still check out;
//! another plan starts over. The manifest is written last, so a model is listed only once
//! complete. Host memory: about one chunk, plus the small files and one safetensors header.

use super::asyncio::{AsyncChunkStore, ByteSource, FileSet};
use super::chunks::{
    check_model, chunk_key, delete_model_async, file_entry, fnv1a64, manifest_key, put_checked_async, ready,
    ChunkEntry, ChunkStore, FileEntry, Manifest, Piece, TensorEntry, MANIFEST_VERSION, MAX_CHUNK_BYTES,
};
use super::{human_bytes, IndexJson, StoreError, CONFIG_FILE, INDEX_FILE, OPTIONAL_FILES, SINGLE_FILE};
use crate::config::ModelConfig;
use crate::error::{Error, Result};
use crate::gpu::platform::now_ms;
use crate::model::layout;
use safetensors::Dtype;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Most bytes of a safetensors header (the safetensors crate's limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Most bytes of a small file read whole (config.json, tokenizer.json, the index, ...).
pub const MAX_SMALL_FILE_BYTES: u64 = 100_000_000;

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

/// An import that stopped before its manifest was written and can resume.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PartialImport {
    pub model: String,
    /// Chunk bytes stored so far
    pub done: u64,
    /// Chunk bytes of the whole model (0 when its import state is unreadable)
    pub total: u64,
}

/// `<model>/import.json`: the state of an unfinished import.
pub fn import_key(model: &str) -> String {
    format!("{model}/import.json")
}

/// What `<model>/import.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct ImportState {
    /// [`fnv1a64`] of the plan: the manifest without chunk checksums, the file ranges of
    /// every chunk and the sizes of the weight files.
    plan: String,
    /// Chunk bytes of the whole plan
    total: u64,
    /// Chunks written and checked, with their checksums.
    done: Vec<ChunkEntry>,
}

/// One tensor's bytes in a safetensors file (absolute byte range).
#[derive(Clone, Debug)]
pub(crate) struct TensorSource {
    pub name: String,
    pub dtype: Dtype,
    /// PyTorch order
    pub shape: Vec<usize>,
    pub file: String,
    pub start: u64,
    pub end: u64,
}

/// A byte range of one source file.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Segment {
    pub file: String,
    pub start: u64,
    pub len: usize,
}

/// One chunk to write: the concatenation of its segments.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct ChunkPlan {
    pub key: String,
    pub bytes: usize,
    /// In order; adjacent ranges of one file merged.
    pub segments: Vec<Segment>,
}

/// A whole import, computed from the headers: the manifest (chunk checksums empty) and
/// where each chunk's bytes come from.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub manifest: Manifest,
    pub chunks: Vec<ChunkPlan>,
}

/// The tensors in store order: those `cfg` needs in layout order, then the others by name.
pub(crate) fn ordered(cfg: &ModelConfig, mut all: BTreeMap<String, TensorSource>) -> Result<Vec<TensorSource>> {
    let mut out = Vec::with_capacity(all.len());
    for (name, expected) in layout::expected_tensors(cfg) {
        out.push(all.remove(&name).ok_or(StoreError::Missing { tensor: name, expected })?);
    }
    out.extend(all.into_values());
    Ok(out)
}

/// Pack `tensors` (in order) into chunks of at most `max_chunk` bytes: one that fits a
/// chunk is never split, a bigger one is split by byte range, small ones share a chunk.
pub(crate) fn plan(
    model: &str,
    config: String,
    files: Vec<FileEntry>,
    tensors: &[TensorSource],
    max_chunk: usize,
) -> Result<Plan> {
    if max_chunk == 0 {
        return Err(Error::msg("import: the chunk size must be at least one byte"));
    }
    let mut chunks: Vec<ChunkPlan> = Vec::new();
    let mut cur = ChunkPlan { key: chunk_key(model, 0), bytes: 0, segments: Vec::new() };
    let mut entries = Vec::with_capacity(tensors.len());
    for t in tensors {
        let mut left = t
            .end
            .checked_sub(t.start)
            .ok_or_else(|| Error::msg(format!("{}: {}: its byte range ends before it starts", t.file, t.name)))?;
        if cur.bytes > 0 && cur.bytes as u64 + left > max_chunk as u64 {
            let key = chunk_key(model, chunks.len() + 1);
            chunks.push(std::mem::replace(&mut cur, ChunkPlan { key, bytes: 0, segments: Vec::new() }));
        }
        let mut at = t.start;
        let mut pieces = Vec::new();
        while left > 0 {
            if cur.bytes == max_chunk {
                let key = chunk_key(model, chunks.len() + 1);
                chunks.push(std::mem::replace(&mut cur, ChunkPlan { key, bytes: 0, segments: Vec::new() }));
            }
            let take = left.min((max_chunk - cur.bytes) as u64) as usize;
            pieces.push(Piece { chunk: cur.key.clone(), offset: cur.bytes, len: take });
            match cur.segments.last_mut() {
                Some(s) if s.file == t.file && s.start + s.len as u64 == at => s.len += take,
                _ => cur.segments.push(Segment { file: t.file.clone(), start: at, len: take }),
            }
            cur.bytes += take;
            at += take as u64;
            left -= take as u64;
        }
        entries.push(TensorEntry { name: t.name.clone(), dtype: t.dtype, shape: t.shape.clone(), pieces });
    }
    if cur.bytes > 0 {
        chunks.push(cur);
    }
    let chunk_entries =
        chunks.iter().map(|c| ChunkEntry { key: c.key.clone(), bytes: c.bytes, fnv1a64: String::new() }).collect();
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        model: model.to_string(),
        config,
        tensors: entries,
        chunks: chunk_entries,
        files,
    };
    Ok(Plan { manifest, chunks })
}

/// A safetensors header's entry for one tensor.
#[derive(Deserialize)]
struct RawInfo {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

/// The tensors of safetensors file `file` of `size` bytes from its JSON header of `n`
/// bytes, with absolute byte ranges. Rules as the safetensors crate's: known dtypes, byte
/// counts that match dtype and shape, ranges that tile the data exactly.
fn parse_header(file: &str, size: u64, n: u64, json: &[u8]) -> Result<Vec<TensorSource>> {
    let bad = |reason: String| Error::from(StoreError::Safetensors { file: file.to_string(), reason });
    let text = std::str::from_utf8(json).map_err(|e| bad(format!("the header is not UTF-8: {e}")))?;
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| bad(format!("the header: {e}")))?;
    let base = 8 + n;
    let data_len = size - base;
    let mut out = Vec::with_capacity(map.len());
    for (name, value) in map {
        if name == "__metadata__" {
            continue;
        }
        let info: RawInfo = serde_json::from_value(value).map_err(|e| bad(format!("{name}: {e}")))?;
        let dtype: Dtype = serde_json::from_value(serde_json::Value::String(info.dtype.clone()))
            .map_err(|_| bad(format!("{name}: unknown dtype {:?}", info.dtype)))?;
        let (s, e) = info.data_offsets;
        if s > e {
            return Err(bad(format!("{name}: data_offsets [{s}, {e}] end before they start")));
        }
        if e > data_len {
            return Err(bad(format!("{name}: data_offsets [{s}, {e}] lie outside the data ({data_len} bytes)")));
        }
        let bits = info.shape.iter().try_fold(dtype.bitsize() as u64, |a, &d| a.checked_mul(d as u64));
        let shape = &info.shape;
        match bits {
            Some(b) if b % 8 == 0 && b / 8 == e - s => {}
            Some(b) if b % 8 == 0 => {
                return Err(bad(format!(
                    "{name}: dtype {dtype} and shape {shape:?} make {} bytes, but data_offsets [{s}, {e}] hold {}",
                    b / 8,
                    e - s
                )))
            }
            _ => return Err(bad(format!("{name}: dtype {dtype} and shape {shape:?} are not a whole number of bytes"))),
        }
        let t = TensorSource { name, dtype, shape: info.shape, file: file.to_string(), start: base + s, end: base + e };
        out.push(t);
    }
    let mut sorted: Vec<&TensorSource> = out.iter().collect();
    sorted.sort_by_key(|t| (t.start, t.end));
    let mut at = base;
    let mut prev = "the header";
    for t in sorted {
        if t.start < at {
            return Err(bad(format!("{}: its bytes overlap those of {prev}", t.name)));
        }
        if t.start > at {
            return Err(bad(format!("{}: {} bytes before it belong to no tensor", t.name, t.start - at)));
        }
        at = t.end;
        prev = &t.name;
    }
    if at != size {
        return Err(bad(format!("{} bytes after the last tensor belong to no tensor", size - at)));
    }
    Ok(out)
}

/// Read and check the header of safetensors file `file`: two range reads.
async fn read_header<B: ByteSource>(file: &str, src: &B, size: u64) -> Result<Vec<TensorSource>> {
    let bad = |reason: String| Error::from(StoreError::Safetensors { file: file.to_string(), reason });
    if size < 8 {
        return Err(bad(format!("{size} bytes is too short")));
    }
    let head = src.read(0, 8).await?;
    let n = u64::from_le_bytes(head.try_into().map_err(|_| bad("a short read of its first 8 bytes".into()))?);
    if n > MAX_HEADER_BYTES {
        return Err(bad(format!("the header length {n} is over the limit of {MAX_HEADER_BYTES} bytes")));
    }
    if n > size - 8 {
        return Err(bad(format!("the header length {n} runs past the end of the file ({size} bytes)")));
    }
    let json = src.read(8, n as usize).await?;
    if json.len() as u64 != n {
        return Err(bad(format!("a short read of its {n}-byte header")));
    }
    parse_header(file, size, n, &json)
}

/// Emits the events of one import.
struct Reporter<'a> {
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

fn percent(loaded: u64, total: u64) -> f64 {
    if total == 0 {
        100.0
    } else {
        loaded as f64 * 100.0 / total as f64
    }
}

/// Read small file `name` whole, or None when the model has none.
async fn read_small<F: FileSet>(files: &F, name: &str, rep: &mut Reporter<'_>) -> Result<Option<Vec<u8>>> {
    let Some(src) = files.open(name).await? else { return Ok(None) };
    rep.initiate(name);
    let size = src.size().await?;
    if size > MAX_SMALL_FILE_BYTES {
        return Err(Error::msg(format!("{name}: {size} bytes is over the limit of {MAX_SMALL_FILE_BYTES} bytes")));
    }
    rep.download(name);
    let bytes = src.read(0, size as usize).await?;
    if bytes.len() as u64 != size {
        return Err(Error::msg(format!("{name}: read {} of its {size} bytes", bytes.len())));
    }
    rep.progress(name, size, size);
    rep.done(name);
    Ok(Some(bytes))
}

/// The weight files, opened, with their sizes.
struct Weights<B> {
    /// Every tensor the weights hold (those the index names, with an index).
    tensors: BTreeMap<String, TensorSource>,
    sources: BTreeMap<String, (B, u64)>,
}

/// Is `name` a file name (no directories) that a weight map may name?
fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// Open the weights (model.safetensors.index.json and its shards, else model.safetensors)
/// and read their headers.
async fn read_weights<F: FileSet>(files: &F, rep: &mut Reporter<'_>) -> Result<Weights<F::Source>> {
    let mut sources = BTreeMap::new();
    let mut tensors = BTreeMap::new();
    if let Some(bytes) = read_small(files, INDEX_FILE, rep).await? {
        let bad = |reason: String| Error::from(StoreError::Index { file: INDEX_FILE.into(), reason });
        let index: IndexJson = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        // Each shard named by the weight map, once, in name order.
        let mut shards: BTreeMap<&str, &str> = BTreeMap::new();
        for (tensor, shard) in &index.weight_map {
            shards.entry(shard.as_str()).or_insert(tensor.as_str());
        }
        let mut headers: HashMap<&str, HashMap<String, TensorSource>> = HashMap::new();
        for (&shard, &tensor) in &shards {
            if !plain_name(shard) {
                return Err(bad(format!("weight_map names shard {shard:?} (for {tensor}), which is not a file name")));
            }
            let src = files.open(shard).await?.ok_or_else(|| {
                bad(format!("weight_map names shard {shard} (for {tensor}), which is not among the model files"))
            })?;
            rep.initiate(shard);
            let size = src.size().await?;
            let header = read_header(shard, &src, size).await?;
            headers.insert(shard, header.into_iter().map(|t| (t.name.clone(), t)).collect());
            sources.insert(shard.to_string(), (src, size));
        }
        for (tensor, shard) in &index.weight_map {
            let t = headers
                .get_mut(shard.as_str())
                .and_then(|h| h.remove(tensor))
                .ok_or_else(|| bad(format!("weight_map puts {tensor} in {shard}, but {shard} does not hold it")))?;
            tensors.insert(tensor.clone(), t);
        }
    } else if let Some(src) = files.open(SINGLE_FILE).await? {
        rep.initiate(SINGLE_FILE);
        let size = src.size().await?;
        tensors.extend(read_header(SINGLE_FILE, &src, size).await?.into_iter().map(|t| (t.name.clone(), t)));
        sources.insert(SINGLE_FILE.to_string(), (src, size));
    } else {
        return Err(StoreError::NoWeights.into());
    }
    Ok(Weights { tensors, sources })
}

/// Every tensor `cfg` needs is there with its shape; errors name the file and the tensor.
fn check_tensors(cfg: &ModelConfig, w: &Weights<impl ByteSource>) -> Result<()> {
    for (name, expected) in layout::expected_tensors(cfg) {
        match w.tensors.get(&name) {
            None => {
                let files: Vec<&str> = w.sources.keys().map(|s| s.as_str()).collect();
                return Err(Error::msg(format!(
                    "{name}: missing from {} (expected shape {expected:?} from config.json)",
                    files.join(", ")
                )));
            }
            Some(t) if t.shape != expected => {
                return Err(Error::msg(format!(
                    "{}: {name}: expected shape {expected:?} (from config.json), found {:?}",
                    t.file, t.shape
                )))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

/// The fingerprint of a plan over weight files of `sizes`.
fn fingerprint(plan: &Plan, sizes: &BTreeMap<&str, u64>, max_chunk: usize) -> Result<String> {
    #[derive(Serialize)]
    struct Print<'a> {
        manifest: &'a Manifest,
        chunks: &'a [ChunkPlan],
        sizes: &'a BTreeMap<&'a str, u64>,
        max_chunk: usize,
    }
    let print = Print { manifest: &plan.manifest, chunks: &plan.chunks, sizes, max_chunk };
    let json = serde_json::to_vec(&print).map_err(|e| Error::msg(format!("import: the plan: {e}")))?;
    Ok(fnv1a64(&json))
}

/// `man` with its chunk checksums left out, to compare with a plan.
fn without_sums(man: &Manifest) -> Manifest {
    let mut man = man.clone();
    man.chunks.iter_mut().for_each(|c| c.fnv1a64.clear());
    man
}

async fn write_state<S: AsyncChunkStore>(store: &S, model: &str, state: &ImportState) -> Result<()> {
    let json = serde_json::to_vec(state).map_err(|e| Error::msg(format!("import {model}: import.json: {e}")))?;
    store.put(&import_key(model), &json).await
}

/// Store model `model` read from `files` (config.json, the weights, the optional small
/// files) in chunks of at most `opts.max_chunk` bytes, resuming an interrupted import of
/// the same files; returns its manifest. A complete model with the same plan is returned at
/// once; one with another plan is replaced. Reports progress to `on_progress`, `Ready` last.
pub async fn import_files<F: FileSet, S: AsyncChunkStore>(
    store: &S,
    model: &str,
    files: &F,
    opts: &ImportOptions,
    on_progress: &mut dyn FnMut(Progress),
) -> Result<Manifest> {
    check_model(model)?;
    let max_chunk = opts.max_chunk;
    let mut rep = Reporter { model: model.to_string(), on: on_progress };

    // Plan: config.json, the small files, the headers.
    let config = read_small(files, CONFIG_FILE, &mut rep)
        .await?
        .ok_or_else(|| StoreError::MissingFile { file: CONFIG_FILE.into() })?;
    let config =
        String::from_utf8(config).map_err(|e| Error::msg(format!("{CONFIG_FILE}: not UTF-8: {}", e.utf8_error())))?;
    let cfg = ModelConfig::from_json(&config)?;
    let mut small: Vec<(FileEntry, Vec<u8>)> = Vec::new();
    for name in OPTIONAL_FILES {
        if let Some(bytes) = read_small(files, name, &mut rep).await? {
            small.push((file_entry(model, name, &bytes), bytes));
        }
    }
    let weights = read_weights(files, &mut rep).await?;
    check_tensors(&cfg, &weights)?;
    let file_entries = small.iter().map(|(f, _)| f.clone()).collect();
    let plan = plan(model, config, file_entries, &ordered(&cfg, weights.tensors)?, max_chunk)?;
    let sources = weights.sources;
    let sizes: BTreeMap<&str, u64> = sources.iter().map(|(f, (_, n))| (f.as_str(), *n)).collect();
    let print = fingerprint(&plan, &sizes, max_chunk)?;
    let total: u64 = plan.chunks.iter().map(|c| c.bytes as u64).sum();

    // A complete model with this plan is done; anything else stored under its name that
    // is not an unfinished import of this plan goes.
    if let Some(bytes) = store.get_opt(&manifest_key(model)).await? {
        match serde_json::from_slice::<Manifest>(&bytes) {
            Ok(man) if without_sums(&man) == plan.manifest => {
                store.delete(&import_key(model)).await?;
                rep.total(total, total, 0, now_ms());
                rep.ready(total);
                return Ok(man);
            }
            _ => delete_model_async(store, model).await?,
        }
    }
    let resumed = match store.get_opt(&import_key(model)).await? {
        Some(bytes) => serde_json::from_slice::<ImportState>(&bytes).ok().filter(|s| s.plan == print),
        None => None,
    };
    if let Some(free) = opts.free_bytes {
        let done: u64 = resumed.iter().flat_map(|s| &s.done).map(|c| c.bytes as u64).sum();
        let needed = total - done.min(total);
        if needed > free {
            return Err(Error::msg(format!(
                "importing {model} needs {} more storage but only {} is free (the browser's storage quota \
                 for this site); free space by deleting stored models, or allow this site more storage",
                human_bytes(needed),
                human_bytes(free)
            )));
        }
    }
    let mut state = match resumed {
        Some(s) => s,
        None => {
            delete_model_async(store, model).await?;
            let s = ImportState { plan: print, total, done: Vec::new() };
            write_state(store, model, &s).await?;
            s
        }
    };

    // Copy: the small files, then each chunk.
    for (f, bytes) in small {
        put_checked_async(store, model, &f.key, bytes).await?;
    }
    let mut file_total: BTreeMap<&str, u64> = sources.keys().map(|f| (f.as_str(), 0)).collect();
    for s in plan.chunks.iter().flat_map(|c| &c.segments) {
        *file_total.entry(s.file.as_str()).or_default() += s.len as u64;
    }
    let mut file_loaded: BTreeMap<&str, u64> = BTreeMap::new();
    for (&file, _) in file_total.iter().filter(|(_, &n)| n == 0) {
        rep.download(file);
        rep.progress(file, 0, 0);
        rep.done(file);
    }
    let finite_checks = finite_checks(&plan.manifest);
    let t0 = now_ms();
    let (mut loaded, mut fetched) = (0u64, 0u64);
    let mut sums: HashMap<String, String> = HashMap::new();
    for c in &plan.chunks {
        let prior = state.done.iter().position(|d| d.key == c.key);
        let mut sum = None;
        if let Some(i) = prior {
            let d = &state.done[i];
            // A chunk that cannot be read back is fetched again.
            let ok = d.bytes == c.bytes
                && store.get(&c.key).await.is_ok_and(|b| b.len() == d.bytes && fnv1a64(&b) == d.fnv1a64);
            if ok {
                sum = Some(d.fnv1a64.clone());
            } else {
                state.done.remove(i);
            }
        }
        let sum = match sum {
            Some(s) => s,
            None => {
                let bytes = read_chunk(model, c, &sources).await?;
                if let Err(e) =
                    check_finite(model, &c.key, &bytes, finite_checks.get(c.key.as_str()).map_or(&[][..], |v| v))
                {
                    // Resuming would stop at the same value: nothing of this import is kept.
                    let _ = delete_model_async(store, model).await;
                    return Err(e);
                }
                let s = put_checked_async(store, model, &c.key, bytes).await?;
                fetched += c.bytes as u64;
                state.done.push(ChunkEntry { key: c.key.clone(), bytes: c.bytes, fnv1a64: s.clone() });
                write_state(store, model, &state).await?;
                s
            }
        };
        sums.insert(c.key.clone(), sum);
        loaded += c.bytes as u64;
        for s in &c.segments {
            let file = s.file.as_str();
            let n = file_loaded.entry(file).or_insert_with(|| {
                rep.download(file);
                0
            });
            *n += s.len as u64;
            let (n, of) = (*n, file_total.get(file).copied().unwrap_or_default());
            rep.progress(file, n, of);
            if n == of {
                rep.done(file);
            }
        }
        rep.total(loaded, total, fetched, t0);
    }

    // The manifest last, then the import state goes.
    let mut man = plan.manifest;
    for c in &mut man.chunks {
        c.fnv1a64 = sums.remove(&c.key).ok_or_else(|| Error::msg(format!("import {model}: {} not written", c.key)))?;
    }
    let json = serde_json::to_vec(&man).map_err(|e| Error::msg(format!("import {model}: manifest: {e}")))?;
    put_checked_async(store, model, &manifest_key(model), json).await?;
    store.delete(&import_key(model)).await?;
    rep.ready(total);
    Ok(man)
}

/// One float tensor's piece of a chunk, to test for NaN and infinities.
struct FinitePiece<'a> {
    tensor: &'a str,
    /// Bytes per element: 4 (F32) or 2 (F16, BF16)
    size: usize,
    /// Exponent bits of the dtype, in the element read as a little-endian integer
    exp_mask: u32,
    /// Byte offset of the piece in the tensor, and in the chunk
    in_tensor: usize,
    in_chunk: usize,
    len: usize,
}

/// For each chunk key, the float tensors' pieces it holds.
fn finite_checks(man: &Manifest) -> HashMap<&str, Vec<FinitePiece<'_>>> {
    let mut out: HashMap<&str, Vec<FinitePiece<'_>>> = HashMap::new();
    for t in &man.tensors {
        let (size, exp_mask) = match t.dtype {
            Dtype::F32 => (4, super::host::F32_EXP),
            Dtype::F16 => (2, super::host::F16_EXP as u32),
            Dtype::BF16 => (2, super::host::BF16_EXP as u32),
            _ => continue,
        };
        let mut in_tensor = 0;
        for p in &t.pieces {
            out.entry(p.chunk.as_str()).or_default().push(FinitePiece {
                tensor: &t.name,
                size,
                exp_mask,
                in_tensor,
                in_chunk: p.offset,
                len: p.len,
            });
            in_tensor += p.len;
        }
    }
    out
}

/// Refuse weights holding NaN or ±∞ (an exponent of all ones): they would only show up later
/// as a loss that is not a number. The error names the tensor and the element.
fn check_finite(model: &str, key: &str, bytes: &[u8], pieces: &[FinitePiece<'_>]) -> Result<()> {
    for p in pieces {
        // The first whole element of the piece (a chunk boundary may split one).
        let skip = (p.size - p.in_tensor % p.size) % p.size;
        let Some(piece) = bytes.get(p.in_chunk + skip..p.in_chunk + p.len) else {
            return Err(Error::msg(format!("import {model}: chunk {key}: {} lies past the chunk's end", p.tensor)));
        };
        for (i, e) in piece.chunks_exact(p.size).enumerate() {
            let bits = if p.size == 4 {
                u32::from_le_bytes([e[0], e[1], e[2], e[3]])
            } else {
                u16::from_le_bytes([e[0], e[1]]) as u32
            };
            if bits & p.exp_mask == p.exp_mask {
                let element = (p.in_tensor + skip) / p.size + i;
                return Err(Error::msg(format!(
                    "import {model}: {}: element {element} is NaN or infinite; the file is damaged or holds a diverged model",
                    p.tensor
                )));
            }
        }
    }
    Ok(())
}

/// The bytes of chunk `c`: one read per segment; errors name the chunk.
async fn read_chunk<B: ByteSource>(
    model: &str,
    c: &ChunkPlan,
    sources: &BTreeMap<String, (B, u64)>,
) -> Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::new();
    for s in &c.segments {
        let (src, _) = sources
            .get(&s.file)
            .ok_or_else(|| Error::msg(format!("import {model}: chunk {}: {} is not open", c.key, s.file)))?;
        let bytes =
            src.read(s.start, s.len).await.map_err(|e| Error::msg(format!("import {model}: chunk {}: {e}", c.key)))?;
        if bytes.len() != s.len {
            return Err(Error::msg(format!(
                "import {model}: chunk {}: {}: read {} bytes of {} at {}",
                c.key,
                s.file,
                bytes.len(),
                s.len,
                s.start
            )));
        }
        if c.segments.len() == 1 {
            return Ok(bytes);
        }
        if buf.capacity() == 0 {
            buf.reserve_exact(c.bytes);
        }
        buf.extend_from_slice(&bytes);
    }
    Ok(buf)
}

/// The imports in `store` that stopped before their manifest was written, by name.
pub fn partial_imports(store: &dyn ChunkStore) -> Result<Vec<PartialImport>> {
    ready(partial_imports_async(store))
}

/// The imports in `store` that stopped before their manifest was written, by name.
pub async fn partial_imports_async<S: AsyncChunkStore + ?Sized>(store: &S) -> Result<Vec<PartialImport>> {
    let keys = store.keys("").await?;
    let mut out = Vec::new();
    for key in &keys {
        let Some(model) = key.strip_suffix("/import.json").filter(|m| !m.contains('/')) else { continue };
        if keys.binary_search(&manifest_key(model)).is_ok() {
            continue;
        }
        let state = serde_json::from_slice::<ImportState>(&store.get(key).await?).ok();
        let (done, total) = state.map_or((0, 0), |s| (s.done.iter().map(|c| c.bytes as u64).sum(), s.total));
        out.push(PartialImport { model: model.to_string(), done, total });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::super::asyncio::{MemoryFile, MemoryFiles};
    use super::super::chunks::{import_checkpoint, list_models, read_model_file, MemoryStore, StoreSource};
    use super::super::testdata::{tiny_config, tiny_files};
    use super::super::{encode_safetensors, Checkpoint, HostTensor};
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::sync::Arc;

    /// Drive a future over memory files and a memory store: ready when first polled.
    fn run<T>(f: impl std::future::Future<Output = T>) -> T {
        use std::task::{Context, Poll, Waker};
        let mut f = std::pin::pin!(f);
        match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("a memory future was not ready at once"),
        }
    }

    /// Every read: (file, start, len).
    type Log = Rc<RefCell<Vec<(String, u64, usize)>>>;

    /// Memory files that log each read and fail every read after the first `fail_after`.
    struct Logged {
        files: MemoryFiles,
        log: Log,
        fail_after: Option<usize>,
    }

    struct LoggedFile {
        file: MemoryFile,
        log: Log,
        fail_after: Option<usize>,
    }

    impl Logged {
        fn new(files: &HashMap<String, Vec<u8>>, fail_after: Option<usize>) -> Logged {
            Logged { files: MemoryFiles::new(files.clone()), log: Log::default(), fail_after }
        }
        fn reads(&self) -> Vec<(String, u64, usize)> {
            self.log.borrow().clone()
        }
        /// Bytes read from the weights' data (not their headers).
        fn data_reads(&self) -> Vec<(String, u64, usize)> {
            let weights = |f: &str| f.ends_with(".safetensors");
            self.reads().into_iter().filter(|(f, s, _)| weights(f) && *s != 0 && *s != 8).collect()
        }
    }

    impl ByteSource for LoggedFile {
        fn describe(&self) -> String {
            self.file.describe()
        }
        async fn size(&self) -> Result<u64> {
            self.file.size().await
        }
        async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
            let n = self.log.borrow().len();
            if self.fail_after.is_some_and(|k| n >= k) {
                return Err(Error::msg(format!("{}: the network went away", self.file.name)));
            }
            self.log.borrow_mut().push((self.file.name.clone(), start, len));
            self.file.read(start, len).await
        }
    }

    impl FileSet for Logged {
        type Source = LoggedFile;
        async fn open(&self, name: &str) -> Result<Option<LoggedFile>> {
            let file = self.files.open(name).await?;
            Ok(file.map(|file| LoggedFile { file, log: self.log.clone(), fail_after: self.fail_after }))
        }
    }

    const TOKENIZER: &[u8] = b"{\"model\":{\"type\":\"BPE\"}}";
    const TEMPLATE: &[u8] = b"{% for m in messages %}{{ m.content }}{% endfor %}";

    /// The tiny untied model as one model.safetensors, with an extra tensor (stored, not
    /// needed) and two small files.
    fn single() -> HashMap<String, Vec<u8>> {
        let mut files = tiny_files(&tiny_config(false), &[], &[("extra.scale", vec![7])]);
        files.insert("tokenizer.json".into(), TOKENIZER.to_vec());
        files.insert("chat_template.jinja".into(), TEMPLATE.to_vec());
        files
    }

    type Named<'a> = (&'a str, &'a HostTensor);

    /// The same tensors in two shards with an index, each shard in an order of its own;
    /// shard 2 also holds a tensor the index does not name (ignored).
    fn sharded() -> HashMap<String, Vec<u8>> {
        let mut files = single();
        let ckpt = Checkpoint::from_files(files.clone()).expect("the tiny model opens");
        files.remove(SINGLE_FILE);
        let names = ckpt.tensor_names();
        let tensors: Vec<(String, HostTensor)> =
            names.iter().map(|n| (n.clone(), ckpt.tensor(n).expect("reads"))).collect();
        let (mut one, mut two): (Vec<Named>, Vec<Named>) = (Vec::new(), Vec::new());
        let mut map = serde_json::Map::new();
        for (i, (n, t)) in tensors.iter().enumerate() {
            let (shard, list) = if i % 3 == 0 {
                ("model-00001-of-00002.safetensors", &mut one)
            } else {
                ("model-00002-of-00002.safetensors", &mut two)
            };
            list.push((n, t));
            map.insert(n.clone(), shard.into());
        }
        one.reverse();
        let stray = HostTensor::from_f32(&[3], vec![1.0, 2.0, 3.0]);
        two.push(("not.in.the.index", &stray));
        files.insert("model-00001-of-00002.safetensors".into(), encode_safetensors(&one));
        files.insert("model-00002-of-00002.safetensors".into(), encode_safetensors(&two));
        let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
        files.insert(INDEX_FILE.into(), index.to_string().into_bytes());
        files
    }

    type Files = HashMap<String, Vec<u8>>;

    fn opts(max_chunk: usize) -> ImportOptions {
        ImportOptions { max_chunk, free_bytes: None }
    }

    /// Import `files` into `store` as "m"; the manifest and the events.
    fn import(store: &MemoryStore, files: &Logged, max_chunk: usize) -> (Result<Manifest>, Vec<Progress>) {
        let mut events = Vec::new();
        let r = run(import_files(store, "m", files, &opts(max_chunk), &mut |p| events.push(p)));
        (r, events)
    }

    /// Every key and its bytes.
    fn contents(store: &MemoryStore) -> Vec<(String, Vec<u8>)> {
        let keys = ChunkStore::keys(store, "").expect("keys");
        keys.into_iter().map(|k| (k.clone(), ChunkStore::get(store, &k).expect("get"))).collect()
    }

    fn err_text<T: std::fmt::Debug>(r: Result<T>) -> String {
        r.expect_err("expected an error").to_string()
    }

    /// Checks common to every complete import of `files` at `max_chunk`: the same manifest
    /// and chunks as import_checkpoint, each data byte read once, no read over a chunk, the
    /// same tensors through StoreSource, the small files readable.
    fn check_import(files: &HashMap<String, Vec<u8>>, max_chunk: usize) -> Manifest {
        let ckpt = Checkpoint::from_files(files.clone()).expect("opens");
        let want_store = MemoryStore::new();
        let want = import_checkpoint(&want_store, "m", &ckpt, max_chunk).expect("import_checkpoint");
        assert_eq!(want.files.len(), 2, "the small files are in the manifest");

        let store = Arc::new(MemoryStore::new());
        let logged = Logged::new(files, None);
        let (man, _) = import(&store, &logged, max_chunk);
        let man = man.expect("imports");
        assert_eq!(man, want, "the same manifest as import_checkpoint");
        assert_eq!(contents(&store), contents(&want_store), "the same keys and bytes");
        let data = logged.data_reads();
        assert!(data.iter().all(|r| r.2 <= max_chunk), "a read over {max_chunk} bytes: {data:?}");
        let total: usize = man.chunks.iter().map(|c| c.bytes).sum();
        assert_eq!(data.iter().map(|r| r.2).sum::<usize>(), total, "each data byte is read once");
        for (f, s, n) in logged.reads() {
            if f.ends_with(".safetensors") && s == 0 {
                assert_eq!(n, 8, "{f}: the first read is the header length");
            }
        }

        let src = StoreSource::open(store.clone(), "m").expect("opens");
        for name in ckpt.tensor_names() {
            assert_eq!(src.tensor(&name).expect("reads"), ckpt.tensor(&name).expect("reads"), "{name}");
        }
        let tok = run(read_model_file(store.as_ref(), &man, "tokenizer.json")).expect("reads");
        assert_eq!(tok.as_deref(), Some(TOKENIZER));
        assert_eq!(run(read_model_file(store.as_ref(), &man, "merges.txt")).expect("reads"), None);
        assert_eq!(list_models(store.as_ref()).expect("lists"), [("m".to_string(), total as u64)]);
        assert!(partial_imports(store.as_ref()).expect("lists").is_empty());
        man
    }

    #[test]
    fn same_as_import_checkpoint() {
        for files in [single(), sharded()] {
            let whole = check_import(&files, MAX_CHUNK_BYTES);
            assert_eq!(whole.chunks.len(), 1);
            let man = check_import(&files, 700);
            assert!(man.chunks.iter().all(|c| c.bytes <= 700));
            assert!(man.tensors.iter().any(|t| t.pieces.len() > 1), "no tensor was split");
            let shared = man
                .chunks
                .iter()
                .any(|c| man.tensors.iter().filter(|t| t.pieces.iter().any(|p| p.chunk == c.key)).count() > 1);
            assert!(shared, "no chunk holds two tensors");
            let order: Vec<&str> = man.tensors.iter().map(|t| t.name.as_str()).collect();
            assert_eq!(order[0], layout::EMBED_KEY);
            assert_eq!(order[order.len() - 1], "extra.scale", "the others come after the layout's");
            assert!(!order.contains(&"not.in.the.index"));
        }
    }

    #[test]
    fn plan_merges_adjacent_reads() {
        let t = |name: &str, file: &str, start: u64, end: u64| TensorSource {
            name: name.into(),
            dtype: Dtype::U8,
            shape: vec![(end - start) as usize],
            file: file.into(),
            start,
            end,
        };
        let tensors = [t("a", "x", 8, 108), t("b", "x", 108, 158), t("c", "y", 8, 38), t("d", "x", 200, 560)];
        let p = plan("m", String::new(), Vec::new(), &tensors, 200).expect("plans");
        let seg = |f: &str, start, len| Segment { file: f.into(), start, len };
        assert_eq!(p.chunks.len(), 3);
        assert_eq!(p.chunks[0].segments, [seg("x", 8, 150), seg("y", 8, 30)]);
        assert_eq!(p.chunks[1].segments, [seg("x", 200, 200)]);
        assert_eq!(p.chunks[2].segments, [seg("x", 400, 160)]);
        assert_eq!(p.manifest.tensors[3].pieces.len(), 2, "d is split");
        assert!(plan("m", String::new(), Vec::new(), &tensors, 0).is_err());
    }

    #[test]
    fn resumes_where_it_stopped() {
        for files in [single(), sharded()] {
            let max = 700;
            let clean = MemoryStore::new();
            let full = Logged::new(&files, None);
            let want = import(&clean, &full, max).0.expect("imports");
            let reads = full.reads().len();

            // The network fails half way: an error, nothing listed, a partial import.
            let store = MemoryStore::new();
            let (r, _) = import(&store, &Logged::new(&files, Some(reads / 2)), max);
            assert!(err_text(r).contains("the network went away"));
            assert!(list_models(&store).expect("lists").is_empty(), "a partial import is not listed");
            let state: ImportState =
                serde_json::from_slice(&ChunkStore::get(&store, &import_key("m")).expect("import.json"))
                    .expect("parses");
            let done: u64 = state.done.iter().map(|c| c.bytes as u64).sum();
            let total: u64 = want.chunks.iter().map(|c| c.bytes as u64).sum();
            assert!(state.done.len() >= 2 && done < total, "{} chunks done", state.done.len());
            let partial = partial_imports(&store).expect("lists");
            assert_eq!(partial, [PartialImport { model: "m".into(), done, total }]);

            // A done chunk is corrupted: it is fetched again with those not done.
            let bad = &state.done[1];
            let mut bytes = ChunkStore::get(&store, &bad.key).expect("get");
            bytes[3] ^= 0x20;
            ChunkStore::put(&store, &bad.key, &bytes).expect("put");
            let again = Logged::new(&files, None);
            let (man, events) = import(&store, &again, max);
            assert_eq!(man.expect("resumes"), want, "the same manifest as an uninterrupted import");
            assert_eq!(contents(&store), contents(&clean), "the same keys and bytes");
            let fetched: u64 = again.data_reads().iter().map(|r| r.2 as u64).sum();
            assert_eq!(fetched, total - done + bad.bytes as u64, "only the chunks not done are read");
            assert!(partial_imports(&store).expect("lists").is_empty());
            check_events(&events, &want);
        }
    }

    /// A memory store that refuses writes once `room` bytes have been written, as a
    /// browser does when the origin's quota is full.
    struct Full {
        store: MemoryStore,
        room: std::sync::atomic::AtomicUsize,
    }

    impl ChunkStore for Full {
        fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            let room = self.room.load(SeqCst);
            if bytes.len() > room {
                return Err(Error::msg(format!("writing {key} failed: the storage quota is full")));
            }
            self.room.store(room - bytes.len(), SeqCst);
            ChunkStore::put(&self.store, key, bytes)
        }
        fn get(&self, key: &str) -> Result<Vec<u8>> {
            ChunkStore::get(&self.store, key)
        }
        fn delete(&self, key: &str) -> Result<()> {
            ChunkStore::delete(&self.store, key)
        }
        fn keys(&self, prefix: &str) -> Result<Vec<String>> {
            ChunkStore::keys(&self.store, prefix)
        }
    }

    #[test]
    fn a_full_store_is_refused_or_resumed() {
        let files = single();
        let max = 700;
        let clean = MemoryStore::new();
        let want = import(&clean, &Logged::new(&files, None), max).0.expect("imports");
        let total: u64 = want.chunks.iter().map(|c| c.bytes as u64).sum();
        fn import_with_free<S: ChunkStore>(store: &S, files: &Files, max: usize, free: u64) -> Result<Manifest> {
            let o = ImportOptions { max_chunk: max, free_bytes: Some(free) };
            run(import_files(store, "m", &Logged::new(files, None), &o, &mut |_| {}))
        }
        let with_free = |store: &MemoryStore, free: u64| import_with_free(store, &files, max, free);
        let full_with_free = |store: &Full, free: u64| import_with_free(store, &files, max, free);

        // Known too little room: refused before anything is written, both sizes named.
        let store = MemoryStore::new();
        let msg = err_text(with_free(&store, total - 1));
        assert!(msg.contains("quota") && msg.contains(&format!("({total} bytes)")), "{msg}");
        assert!(ChunkStore::keys(&store, "").expect("keys").is_empty(), "nothing is written");

        // The store fills up half way: an error, nothing listed, the chunks written kept.
        let full = Full { store: MemoryStore::new(), room: (total as usize / 2).into() };
        let (r, _) = {
            let mut events = Vec::new();
            let r = run(import_files(&full, "m", &Logged::new(&files, None), &opts(max), &mut |p| events.push(p)));
            (r, events)
        };
        assert!(err_text(r).contains("quota"));
        assert!(list_models(&full).expect("lists").is_empty(), "a partial import is not listed");
        let partial = partial_imports(&full).expect("lists");
        assert_eq!(partial.len(), 1);
        let done = partial[0].done;
        assert!(done > 0 && done < total, "{done} of {total}");

        // Free space known again: one byte short is refused and keeps the partial import;
        // exactly enough finishes it with the same chunks as an uninterrupted import.
        full.room.store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
        let short = total - done - 1;
        assert!(err_text(full_with_free(&full, short)).contains("quota"));
        assert_eq!(partial_imports(&full).expect("lists"), partial, "the partial import is kept");
        assert_eq!(full_with_free(&full, total - done).expect("resumes"), want);
        assert_eq!(contents(&full.store), contents(&clean), "the same keys and bytes");
    }

    #[test]
    fn another_plan_starts_over() {
        let files = sharded();
        let store = MemoryStore::new();
        let (r, _) = import(&store, &Logged::new(&files, Some(12)), 700);
        assert!(r.is_err());
        let man = import(&store, &Logged::new(&files, None), 900).0.expect("imports");
        let mut keys: Vec<String> = man.chunks.iter().map(|c| c.key.clone()).collect();
        keys.extend(man.files.iter().map(|f| f.key.clone()));
        keys.push(manifest_key("m"));
        keys.sort();
        assert_eq!(ChunkStore::keys(&store, "").expect("keys"), keys, "nothing of the first plan is left");

        // Complete with this plan: back at once, reading headers only.
        let again = Logged::new(&files, None);
        let (same, events) = import(&store, &again, 900);
        assert_eq!(same.expect("imports"), man);
        assert!(again.data_reads().is_empty(), "no data is read again");
        assert!(matches!(events.last(), Some(Progress::Ready { .. })));

        // Another plan replaces the model.
        let single = Logged::new(&single(), None);
        let other = import(&store, &single, 900).0.expect("imports");
        assert_ne!(other.chunks.len(), 0);
        let left = ChunkStore::keys(&store, "").expect("keys");
        assert_eq!(left.len(), other.chunks.len() + other.files.len() + 1, "{left:?}");
    }

    /// The header of a safetensors file rewritten by `f`, the data kept.
    fn tamper(bytes: &[u8], f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> Vec<u8> {
        let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
        let mut header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&bytes[8..8 + n]).expect("a header");
        f(&mut header);
        let mut head = serde_json::Value::Object(header).to_string().into_bytes();
        head.resize(head.len().next_multiple_of(8), b' ');
        let mut out = (head.len() as u64).to_le_bytes().to_vec();
        out.extend_from_slice(&head);
        out.extend_from_slice(&bytes[8 + n..]);
        out
    }

    #[test]
    fn hostile_files_are_refused() {
        let norm = "model.norm.weight";
        let n0 = "model.layers.0.input_layernorm.weight";
        let n1 = "model.layers.1.input_layernorm.weight";
        let down = "model.layers.1.mlp.down_proj.weight";
        let with = |name: &str, bytes: Vec<u8>| {
            let mut f = single();
            f.insert(name.into(), bytes);
            f
        };
        let st = single()[SINGLE_FILE].clone();
        let set = |tensor: &'static str, field: &'static str, v: serde_json::Value| {
            tamper(&st, move |h| {
                h[tensor][field] = v;
            })
        };
        let offsets = |h: &serde_json::Map<String, serde_json::Value>, t: &str| h[t]["data_offsets"].clone();
        let mut long = st.clone();
        long[..8].copy_from_slice(&(st.len() as u64).to_le_bytes());
        let mut huge = st.clone();
        huge[..8].copy_from_slice(&200_000_000u64.to_le_bytes());
        let mut trailing = st.clone();
        trailing.extend_from_slice(&[0; 4]);
        let data_len = {
            let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes"));
            st.len() as u64 - 8 - n
        };
        let cfg = tiny_config(false);
        let mut no_config = single();
        no_config.remove(CONFIG_FILE);
        let mut no_weights = single();
        no_weights.remove(SINGLE_FILE);
        let index = |v: serde_json::Value| {
            let mut f = sharded();
            f.insert(INDEX_FILE.into(), v.to_string().into_bytes());
            f
        };
        let shard1 = "model-00001-of-00002.safetensors";
        let nan_at = |element: usize, value: f32| {
            let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes")) as usize;
            let h: serde_json::Value = serde_json::from_slice(&st[8..8 + n]).expect("header");
            assert_eq!(h[down]["dtype"], "F32");
            let at = 8 + n + h[down]["data_offsets"][0].as_u64().expect("offset") as usize + element * 4;
            let mut b = st.clone();
            b[at..at + 4].copy_from_slice(&value.to_le_bytes());
            b
        };
        // (files, what the error must name)
        let cases: Vec<(Files, Vec<&str>)> = vec![
            (with(SINGLE_FILE, nan_at(5, f32::NAN)), vec![down, "element 5", "NaN or infinite"]),
            (with(SINGLE_FILE, nan_at(0, f32::NEG_INFINITY)), vec![down, "element 0", "NaN or infinite"]),
            (with(SINGLE_FILE, long), vec![SINGLE_FILE, "runs past the end"]),
            (with(SINGLE_FILE, huge), vec![SINGLE_FILE, "over the limit"]),
            (with(SINGLE_FILE, st[..5].to_vec()), vec![SINGLE_FILE, "too short"]),
            (with(SINGLE_FILE, trailing), vec![SINGLE_FILE, "after the last tensor"]),
            (
                with(SINGLE_FILE, set(norm, "data_offsets", serde_json::json!([0, data_len + 4]))),
                vec![norm, "outside the data"],
            ),
            (with(SINGLE_FILE, set(norm, "data_offsets", serde_json::json!([40, 8]))), vec![norm, "end before"]),
            (
                with(SINGLE_FILE, tamper(&st, |h| h[n1]["data_offsets"] = offsets(h, n0))),
                vec![SINGLE_FILE, "overlap", n0],
            ),
            (with(SINGLE_FILE, set(norm, "dtype", "Q4".into())), vec![SINGLE_FILE, norm, "unknown dtype"]),
            (with(SINGLE_FILE, set(norm, "shape", serde_json::json!([35]))), vec![SINGLE_FILE, norm, "make 140 bytes"]),
            (with(SINGLE_FILE, b"\x10\0\0\0\0\0\0\0{not json}      ".to_vec()), vec![SINGLE_FILE, "header"]),
            (tiny_files(&cfg, &[], &[(norm, vec![35])]), vec![SINGLE_FILE, norm, "expected shape [36]", "config.json"]),
            (tiny_files(&cfg, &[down], &[]), vec![down, "missing from model.safetensors"]),
            (no_config, vec![CONFIG_FILE, "missing"]),
            (with(CONFIG_FILE, b"{\"hidden_size\": \"wide\"}".to_vec()), vec![CONFIG_FILE]),
            (no_weights, vec![SINGLE_FILE, INDEX_FILE]),
            (index(serde_json::json!({"weights": {}})), vec![INDEX_FILE, "weight_map"]),
            (with(INDEX_FILE, b"not json".to_vec()), vec![INDEX_FILE]),
            (
                index(serde_json::json!({"weight_map": {norm: "model-00003-of-00002.safetensors"}})),
                vec![INDEX_FILE, "model-00003-of-00002.safetensors", norm],
            ),
            (
                index(serde_json::json!({"weight_map": {norm: "../secret.safetensors"}})),
                vec![INDEX_FILE, "not a file name"],
            ),
            (index(serde_json::json!({"weight_map": {"nowhere": shard1}})), vec![INDEX_FILE, "nowhere", shard1]),
        ];
        for (i, (files, want)) in cases.into_iter().enumerate() {
            let store = MemoryStore::new();
            let (r, events) = import(&store, &Logged::new(&files, None), 700);
            let e = err_text(r);
            assert!(want.iter().all(|w| e.contains(w)), "case {i}: {e:?} does not name {want:?}");
            assert!(!events.iter().any(|p| matches!(p, Progress::Ready { .. })), "case {i}: ready");
            assert_eq!(ChunkStore::keys(&store, "").expect("keys"), Vec::<String>::new(), "case {i}: {e}");
        }
    }

    /// Per file: Initiate first, loaded rising to its total, Done once and last; Total
    /// rising to the chunk bytes; Ready last.
    fn check_events(events: &[Progress], man: &Manifest) {
        let total: u64 = man.chunks.iter().map(|c| c.bytes as u64).sum();
        assert_eq!(events.last(), Some(&Progress::Ready { name: "m".into(), bytes: total }));
        assert_eq!(events.iter().filter(|p| matches!(p, Progress::Ready { .. })).count(), 1);
        let totals: Vec<(u64, u64)> = events
            .iter()
            .filter_map(|p| match p {
                Progress::Total { loaded, total, .. } => Some((*loaded, *total)),
                _ => None,
            })
            .collect();
        assert_eq!(totals.len(), man.chunks.len(), "a total after each chunk");
        assert!(totals.windows(2).all(|w| w[0].0 <= w[1].0), "total loaded falls: {totals:?}");
        assert_eq!(totals.last(), Some(&(total, total)));
        let mut files: BTreeMap<&str, Vec<&Progress>> = BTreeMap::new();
        for p in events {
            match p {
                Progress::Initiate { file, .. }
                | Progress::Download { file, .. }
                | Progress::Progress { file, .. }
                | Progress::Done { file, .. } => files.entry(file).or_default().push(p),
                _ => {}
            }
        }
        for (file, list) in &files {
            assert!(matches!(list[0], Progress::Initiate { .. }), "{file}: {list:?}");
            assert!(matches!(list[list.len() - 1], Progress::Done { .. }), "{file}: {list:?}");
            assert_eq!(list.iter().filter(|p| matches!(p, Progress::Done { .. })).count(), 1, "{file}");
            let loaded: Vec<(u64, u64)> = list
                .iter()
                .filter_map(|p| match p {
                    Progress::Progress { loaded, total, progress, .. } => {
                        assert!((0.0..=100.0).contains(progress));
                        Some((*loaded, *total))
                    }
                    _ => None,
                })
                .collect();
            assert!(loaded.windows(2).all(|w| w[0].0 <= w[1].0), "{file}: loaded falls: {loaded:?}");
            let last = loaded.last().expect("progress");
            assert_eq!(last.0, last.1, "{file}: ends at its total");
        }
        for f in [CONFIG_FILE, "tokenizer.json", "chat_template.jinja"] {
            assert!(files.contains_key(f), "{f}: no events");
        }
        let weights: u64 = files
            .iter()
            .filter(|(f, _)| f.ends_with(".safetensors"))
            .map(|(_, list)| match list.iter().rev().find(|p| matches!(p, Progress::Progress { .. })) {
                Some(Progress::Progress { total, .. }) => *total,
                _ => 0,
            })
            .sum();
        assert_eq!(weights, total, "the weight files' totals add up to the chunk bytes");
    }

    #[test]
    fn progress_events() {
        for files in [single(), sharded()] {
            let store = MemoryStore::new();
            let (man, events) = import(&store, &Logged::new(&files, None), 700);
            check_events(&events, &man.expect("imports"));
        }
        let p = Progress::Total { name: "m".into(), loaded: 1, total: 2, progress: 50.0, rate: 3.0, eta: 0.5 };
        let v = serde_json::to_value(&p).expect("serialises");
        assert_eq!(
            v,
            serde_json::json!({"status": "total", "name": "m", "loaded": 1, "total": 2, "progress": 50.0, "rate": 3.0, "eta": 0.5})
        );
        let p = Progress::Initiate { name: "m".into(), file: "config.json".into() };
        let v = serde_json::to_value(&p).expect("serialises");
        assert_eq!(v, serde_json::json!({"status": "initiate", "name": "m", "file": "config.json"}));
    }

    /// The native path: a model directory into a directory store.
    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn directory_to_directory() {
        use super::super::asyncio::DirFiles;
        use super::super::chunks::DirStore;
        let tag = format!("webtune-import-{}-{}", std::process::id(), now_ms() as u64);
        let root = std::env::temp_dir().join(tag);
        let files = sharded();
        let dir = root.join("model");
        std::fs::create_dir_all(&dir).expect("mkdir");
        for (name, bytes) in &files {
            std::fs::write(dir.join(name), bytes).expect("write");
        }
        let want = import(&MemoryStore::new(), &Logged::new(&files, None), 700).0.expect("imports");
        let store = Arc::new(DirStore::new(root.join("store")));
        let man = run(import_files(store.as_ref(), "m", &DirFiles { dir }, &opts(700), &mut |_| {}));
        let result = man.map(|man| (man, StoreSource::open(store.clone(), "m").map(|s| s.manifest().clone())));
        std::fs::remove_dir_all(&root).expect("cleans up");
        let (man, opened) = result.expect("imports");
        assert_eq!(man, want);
        assert_eq!(opened.expect("opens"), want);
    }

    #[test]
    fn model_files_are_checked() {
        let store = MemoryStore::new();
        let man = import(&store, &Logged::new(&single(), None), 700).0.expect("imports");
        let f = man.files.iter().find(|f| f.name == "chat_template.jinja").expect("stored");
        assert_eq!(f.key, "m/files/chat_template.jinja");
        ChunkStore::put(&store, &f.key, b"{{ something else }}").expect("put");
        let e = err_text(run(read_model_file(&store, &man, "chat_template.jinja")));
        assert!(e.contains("chat_template.jinja") && e.contains("corrupt"), "{e}");
        // A manifest written before the files were stored still reads.
        let mut old = serde_json::to_value(&man).expect("serialises");
        old.as_object_mut().expect("an object").remove("files");
        let old: Manifest = serde_json::from_value(old).expect("parses");
        assert!(old.files.is_empty());
        assert_eq!(run(read_model_file(&store, &old, "tokenizer.json")).expect("reads"), None);
    }
}
