//! The plan of an import, from the headers alone: which tensors the weight files hold
//! (`read_weights`, single file or index and shards), checked against config.json, and the
//! chunks that will hold them, each as the file ranges it is made of (`plan`).

use super::files::{ByteSource, FileSet};
use super::Reporter;
use crate::base::config::ModelConfig;
use crate::base::error::{CheckpointError, Error, Result};
use crate::base::names::{self, INDEX_FILE, SINGLE_FILE};
use crate::formats::checkpoint::IndexJson;
use crate::store::{chunk_key, ChunkEntry, FileEntry, Manifest, Piece, TensorEntry, MANIFEST_VERSION};
use safetensors::Dtype;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// Most bytes of a safetensors header (the safetensors crate's limit).
pub const MAX_HEADER_BYTES: u64 = 100_000_000;
/// Most bytes of a small file read whole (config.json, tokenizer.json, the index, ...).
pub const MAX_SMALL_FILE_BYTES: u64 = 100_000_000;

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
    for (name, expected) in names::expected_tensors(cfg) {
        out.push(all.remove(&name).ok_or(CheckpointError::Missing { tensor: name, expected })?);
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
    let bad = |reason: String| Error::from(CheckpointError::Safetensors { file: file.to_string(), reason });
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
    let bad = |reason: String| Error::from(CheckpointError::Safetensors { file: file.to_string(), reason });
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

/// Read small file `name` whole, or None when the model has none.
pub(super) async fn read_small<F: FileSet>(files: &F, name: &str, rep: &mut Reporter<'_>) -> Result<Option<Vec<u8>>> {
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
pub(super) struct Weights<B> {
    /// Every tensor the weights hold (those the index names, with an index).
    pub(super) tensors: BTreeMap<String, TensorSource>,
    pub(super) sources: BTreeMap<String, (B, u64)>,
}

/// Is `name` a file name (no directories) that a weight map may name?
pub(super) fn plain_name(name: &str) -> bool {
    !name.is_empty() && name != "." && name != ".." && !name.contains(['/', '\\', '\0'])
}

/// Open the weights (model.safetensors.index.json and its shards, else model.safetensors)
/// and read their headers.
pub(super) async fn read_weights<F: FileSet>(files: &F, rep: &mut Reporter<'_>) -> Result<Weights<F::Source>> {
    let mut sources = BTreeMap::new();
    let mut tensors = BTreeMap::new();
    if let Some(bytes) = read_small(files, INDEX_FILE, rep).await? {
        let bad = |reason: String| Error::from(CheckpointError::Index { file: INDEX_FILE.into(), reason });
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
        return Err(CheckpointError::NoWeights.into());
    }
    Ok(Weights { tensors, sources })
}

/// Every tensor `cfg` needs is there with its shape; errors name the file and the tensor.
pub(super) fn check_tensors(cfg: &ModelConfig, w: &Weights<impl ByteSource>) -> Result<()> {
    for (name, expected) in names::expected_tensors(cfg) {
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
