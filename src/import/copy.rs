//! [`import_files`]: the copy, chunk by chunk, each read from its file ranges, checked for
//! non-finite weights, written, read back and recorded, resuming where an interrupted import
//! of the same plan stopped.

use super::files::{ByteSource, FileSet};
use super::plan::{check_tensors, ordered, plan, read_small, read_weights, ChunkPlan};
use super::resume::{fingerprint, without_sums, write_state, ImportState};
use super::{ImportOptions, Progress, Reporter};
use crate::base::bytes::{human_bytes, matches};
use crate::base::config::ModelConfig;
use crate::base::error::{CheckpointError, Error, Result};
use crate::base::host::{BF16_EXP, F16_EXP, F32_EXP};
use crate::base::names::{CONFIG_FILE, OPTIONAL_FILES};
use crate::platform::now_ms;
use crate::store::{
    check_model, delete_model_async, file_entry, import_key, manifest_key, put_checked_async, AsyncChunkStore,
    ChunkEntry, FileEntry, Manifest,
};
use safetensors::Dtype;
use std::collections::{BTreeMap, HashMap};

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
        .ok_or_else(|| CheckpointError::MissingFile { file: CONFIG_FILE.into() })?;
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
            let ok = d.bytes == c.bytes && store.get(&c.key).await.is_ok_and(|b| matches(&b, d.bytes, &d.fnv1a64));
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
            Dtype::F32 => (4, F32_EXP),
            Dtype::F16 => (2, F16_EXP as u32),
            Dtype::BF16 => (2, BF16_EXP as u32),
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
