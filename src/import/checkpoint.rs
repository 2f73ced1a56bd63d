//! [`import_checkpoint`]: a checkpoint already in host memory into the weight store, with
//! the same plan (and so the same manifest) as the streaming importer.

use super::plan::{ordered, plan, TensorSource};
use crate::base::error::{CheckpointError, Error, Result};
use crate::base::names::{CONFIG_FILE, OPTIONAL_FILES};
use crate::formats::checkpoint::{validate, Checkpoint};
use crate::store::{check_model, delete_model, file_entry, manifest_key, put_checked, ChunkStore, Manifest};

/// Store `ckpt` as `model` in chunks of at most `max_chunk` bytes (replacing a
/// model of that name), with its small files. Tensors go in layout order: one that fits a
/// chunk is never split, a bigger one is split by byte range, small ones share a chunk
/// (the plan of [`import_files`](super::import_files), which gives the same
/// manifest for the same files). Each chunk is read back and checked after writing; the
/// manifest is written last, so the model is listed only once complete. Extra memory:
/// about one chunk.
pub fn import_checkpoint(store: &dyn ChunkStore, model: &str, ckpt: &Checkpoint, max_chunk: usize) -> Result<Manifest> {
    check_model(model)?;
    validate(ckpt)?;
    let config = std::str::from_utf8(ckpt.file(CONFIG_FILE).unwrap_or_default())
        .map_err(|e| Error::msg(format!("{}: not UTF-8: {e}", CONFIG_FILE)))?
        .to_string();
    let small: Vec<(&str, &[u8])> = OPTIONAL_FILES.iter().filter_map(|&n| Some((n, ckpt.file(n)?))).collect();
    let files = small.iter().map(|&(name, bytes)| file_entry(model, name, bytes)).collect();
    let tensors = ckpt.locations().map(|l| {
        let t = TensorSource {
            name: l.name.to_string(),
            dtype: l.dtype,
            shape: l.shape.to_vec(),
            file: l.file.to_string(),
            start: l.start as u64,
            end: l.end as u64,
        };
        (l.name.to_string(), t)
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
            let data = ckpt.file(&s.file).and_then(|f| f.get(s.start as usize..s.start as usize + s.len));
            buf.extend_from_slice(data.ok_or_else(|| CheckpointError::MissingFile { file: s.file.clone() })?);
        }
        entry.fnv1a64 = put_checked(store, model, &c.key, buf)?;
    }
    let json = serde_json::to_vec(&man).map_err(|e| Error::msg(format!("import {model}: manifest: {e}")))?;
    store.put(&manifest_key(model), &json)?;
    Ok(man)
}
