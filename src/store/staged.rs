//! Sync reads over an async store: [`StagedChunks`] holds exactly the chunks fetched
//! (awaited) for the next piece of sync work — a [`ResidentLoader`](crate::model::ResidentLoader)
//! step, say — so that code written against [`ChunkStore`] (like [`StoreSource`](super::StoreSource))
//! runs on IndexedDB's data while host memory holds about one block.

use super::source::ChunkIndex;
use super::{AsyncChunkStore, ChunkStore, Manifest};
use crate::base::config::ModelConfig;
use crate::base::error::{Error, Result};
use crate::model::source::Fetch;
use crate::model::{step_tensors, LoadStep};
use futures_util::future::LocalBoxFuture;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A read-only [`ChunkStore`] of the chunks staged by [`StagedChunks::stage`]; reading a
/// chunk that was not staged is an error (a bug in the caller's plan, not in the data).
#[derive(Default)]
pub struct StagedChunks {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
    /// Kept across stages (the manifest).
    pinned: BTreeSet<String>,
}

impl StagedChunks {
    /// Staged chunks that stay: `pinned` keys (fetched by the first [`Self::stage`]).
    pub fn new(pinned: impl IntoIterator<Item = String>) -> StagedChunks {
        StagedChunks { map: Mutex::new(BTreeMap::new()), pinned: pinned.into_iter().collect() }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>>> {
        self.map.lock().map_err(|_| Error::msg("staged chunks: lock poisoned by a panic"))
    }

    /// Hold exactly `keys` (plus the pinned ones): fetch those missing from `store`, each
    /// checked by `check` as it comes in (a chunk against the manifest's size and checksum), and
    /// drop the rest.
    pub async fn stage<S: AsyncChunkStore>(
        &self,
        store: &S,
        keys: &[String],
        check: &dyn Fn(&str, &[u8]) -> Result<()>,
    ) -> Result<()> {
        let want: BTreeSet<&String> = keys.iter().chain(self.pinned.iter()).collect();
        self.lock()?.retain(|k, _| want.contains(k));
        for key in want {
            if self.lock()?.contains_key(key) {
                continue;
            }
            let bytes = store.get(key).await?;
            check(key, &bytes)?;
            self.lock()?.insert(key.clone(), bytes);
        }
        Ok(())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.map.lock().map(|m| m.values().map(Vec::len).sum()).unwrap_or(0)
    }
}

impl ChunkStore for StagedChunks {
    fn put(&self, key: &str, _bytes: &[u8]) -> Result<()> {
        Err(Error::msg(format!("staged chunks: {key}: read-only")))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.lock()?.get(key).cloned().ok_or_else(|| Error::msg(format!("staged chunks: {key}: not staged")))
    }
    fn read_with(&self, key: &str, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        f(self.lock()?.get(key).ok_or_else(|| Error::msg(format!("staged chunks: {key}: not staged")))?);
        Ok(())
    }
    /// [`Self::stage`] checked each chunk as it came in.
    fn checked(&self) -> bool {
        true
    }
    fn delete(&self, key: &str) -> Result<()> {
        Err(Error::msg(format!("staged chunks: {key}: read-only")))
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self.lock()?.keys().filter(|k| k.starts_with(prefix)).cloned().collect())
    }
}

/// Fetches a streamed model's weights from an async store step by step
/// ([`Fetch`]): each step stages exactly the chunks it reads, dropping the previous step's,
/// and the model reads them through a [`StoreSource`](super::StoreSource) over
/// [`Self::staged`]. Also records the most host bytes staged at once.
pub struct StoreFetch<S> {
    store: Arc<S>,
    staged: Arc<StagedChunks>,
    man: Manifest,
    chunks: ChunkIndex,
    cfg: ModelConfig,
    peak: AtomicUsize,
}

impl<S: AsyncChunkStore> StoreFetch<S> {
    /// For the stored model `man` (its config.json must parse); stages nothing yet.
    pub fn new(store: Arc<S>, man: Manifest) -> Result<StoreFetch<S>> {
        let cfg = ModelConfig::from_json(&man.config)
            .map_err(|e| Error::msg(format!("model {}: config.json: {e}", man.model)))?;
        let staged = Arc::new(StagedChunks::new([super::manifest_key(&man.model)]));
        Ok(StoreFetch { store, staged, chunks: ChunkIndex::new(&man), man, cfg, peak: AtomicUsize::new(0) })
    }

    /// The staged chunks, to read through a [`StoreSource`](super::StoreSource).
    pub fn staged(&self) -> Arc<StagedChunks> {
        self.staged.clone()
    }

    /// Stage `keys` (and the manifest), and note the bytes held.
    pub async fn stage(&self, keys: &[String]) -> Result<()> {
        let check = |key: &str, bytes: &[u8]| self.chunks.check(&self.man, key, bytes);
        self.staged.stage(self.store.as_ref(), keys, &check).await?;
        self.peak.fetch_max(self.staged.bytes(), Ordering::Relaxed);
        Ok(())
    }

    /// The most bytes staged at once so far.
    pub fn peak_bytes(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }
}

impl<S: AsyncChunkStore + wgpu::WasmNotSendSync + 'static> Fetch for StoreFetch<S> {
    fn fetch(&self, step: LoadStep) -> LocalBoxFuture<'_, Result<()>> {
        Box::pin(async move {
            let (names, rows) = step_tensors(&self.cfg, step);
            self.stage(&chunks_for(&self.man, &names, rows)?).await
        })
    }
}

/// The chunks that hold the bytes of tensors `names` (all of each, or only rows
/// `rows` = (r0, r1) of a 2-D tensor), by the manifest.
pub fn chunks_for(man: &Manifest, names: &[String], rows: Option<(usize, usize)>) -> Result<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for name in names {
        let t = man
            .tensors
            .iter()
            .find(|t| &t.name == name)
            .ok_or_else(|| Error::msg(format!("model {}: {name}: not stored", man.model)))?;
        let total: usize = t.pieces.iter().map(|p| p.len).sum();
        let (start, end) = match (rows, t.shape.as_slice()) {
            (Some((r0, r1)), [n, _]) if *n > 0 => (total / n * r0, total / n * r1),
            (Some(_), _) => return Err(Error::msg(format!("model {}: {name}: not a 2-D table", man.model))),
            (None, _) => (0, total),
        };
        let mut at = 0;
        for p in &t.pieces {
            let piece = at..at + p.len;
            at += p.len;
            if piece.start < end && start < piece.end && !out.contains(&p.chunk) {
                out.push(p.chunk.clone());
            }
        }
    }
    Ok(out)
}
