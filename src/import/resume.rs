//! Resuming an interrupted import: `<model>/import.json` records the plan's fingerprint and
//! the chunks written and checked; imports that stopped before their manifest are listed
//! ([`partial_imports`]).

use super::plan::{ChunkPlan, Plan};
use crate::base::bytes::fnv1a64;
use crate::base::error::{Error, Result};
use crate::store::{import_key, manifest_key, ready, AsyncChunkStore, ChunkEntry, ChunkStore, Manifest};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// An import that stopped before its manifest was written and can resume. The app sees
/// `{name, bytes, total}`: `bytes` of `total` stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct PartialImport {
    #[serde(rename = "name")]
    pub model: String,
    /// Chunk bytes stored so far
    #[serde(rename = "bytes")]
    pub done: u64,
    /// Chunk bytes of the whole model (0 when its import state is unreadable)
    pub total: u64,
}

/// What `<model>/import.json` holds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(super) struct ImportState {
    /// [`fnv1a64`] of the plan: the manifest without chunk checksums, the file ranges of
    /// every chunk and the sizes of the weight files.
    pub(super) plan: String,
    /// Chunk bytes of the whole plan
    pub(super) total: u64,
    /// Chunks written and checked, with their checksums.
    pub(super) done: Vec<ChunkEntry>,
}

/// The fingerprint of a plan over weight files of `sizes`.
pub(super) fn fingerprint(plan: &Plan, sizes: &BTreeMap<&str, u64>, max_chunk: usize) -> Result<String> {
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
pub(super) fn without_sums(man: &Manifest) -> Manifest {
    let mut man = man.clone();
    man.chunks.iter_mut().for_each(|c| c.fnv1a64.clear());
    man
}

pub(super) async fn write_state<S: AsyncChunkStore>(store: &S, model: &str, state: &ImportState) -> Result<()> {
    let json = serde_json::to_vec(state).map_err(|e| Error::msg(format!("import {model}: import.json: {e}")))?;
    store.put(&import_key(model), &json).await
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
