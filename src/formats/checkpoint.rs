//! A Hugging Face checkpoint: its files held in memory (config.json, the safetensors file or
//! its shards, tokenizer files), tensors read one at a time into host memory, and the check
//! that it holds every tensor its config.json asks for ([`validate`]). The same code serves
//! the browser (files handed over as bytes) and the native CLI ([`Checkpoint::open_dir`]).
//!
//! Headers are parsed once at open; [`Checkpoint::tensor`] copies one tensor out.

use crate::base::config::ModelConfig;
pub use crate::base::error::CheckpointError;
use crate::base::host::HostTensor;
use crate::base::names::{expected_tensors, CONFIG_FILE, INDEX_FILE, SINGLE_FILE};
use crate::formats::safetensors::decode;
use safetensors::{Dtype, SafeTensors};
use std::collections::{BTreeMap, HashMap};

/// Where one tensor lies: file, dtype, shape and absolute byte range.
#[derive(Clone, Debug)]
struct Entry {
    file: String,
    dtype: Dtype,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// Where one tensor of a [`Checkpoint`] lies ([`Checkpoint::locations`]).
pub struct Location<'a> {
    pub name: &'a str,
    pub file: &'a str,
    pub dtype: Dtype,
    pub shape: &'a [usize],
    /// Absolute byte range in `file`.
    pub start: usize,
    pub end: usize,
}

/// A checkpoint: model.safetensors, or the shards listed in
/// model.safetensors.index.json ("weight_map"), plus the json files.
#[derive(Clone)]
pub struct Checkpoint {
    config: ModelConfig,
    files: HashMap<String, Vec<u8>>,
    /// tensor name → location, for every tensor the weights hold
    entries: BTreeMap<String, Entry>,
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint")
            .field("config", &self.config)
            .field("files", &self.files.keys().collect::<Vec<_>>())
            .field("tensors", &self.entries.len())
            .finish()
    }
}

#[derive(serde::Deserialize)]
pub(crate) struct IndexJson {
    pub(crate) weight_map: BTreeMap<String, String>,
}

/// The tensors of one safetensors file, with absolute byte ranges.
fn read_header(file: &str, bytes: &[u8]) -> Result<Vec<(String, Entry)>, CheckpointError> {
    let (n, meta) = SafeTensors::read_metadata(bytes)
        .map_err(|e| CheckpointError::Safetensors { file: file.to_string(), reason: e.to_string() })?;
    let base = 8 + n;
    Ok(meta
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let (s, e) = info.data_offsets;
            let entry = Entry {
                file: file.to_string(),
                dtype: info.dtype,
                shape: info.shape.clone(),
                start: base + s,
                end: base + e,
            };
            (name, entry)
        })
        .collect())
}

impl Checkpoint {
    /// Files by name as in the model directory: "config.json", "model.safetensors"
    /// or "model.safetensors.index.json" with its shards, optional tokenizer files.
    /// When an index is present it wins over a single file.
    pub fn from_files(files: HashMap<String, Vec<u8>>) -> Result<Checkpoint, CheckpointError> {
        let config_bytes =
            files.get(CONFIG_FILE).ok_or_else(|| CheckpointError::MissingFile { file: CONFIG_FILE.into() })?;
        let config_text = std::str::from_utf8(config_bytes)
            .map_err(|e| CheckpointError::Index { file: CONFIG_FILE.into(), reason: format!("not UTF-8: {e}") })?;
        let config = ModelConfig::from_json(config_text)?;

        let mut entries = BTreeMap::new();
        if let Some(index_bytes) = files.get(INDEX_FILE) {
            let index: IndexJson = serde_json::from_slice(index_bytes)
                .map_err(|e| CheckpointError::Index { file: INDEX_FILE.into(), reason: e.to_string() })?;
            // Each shard named by the weight map, once, in name order.
            let mut shards: BTreeMap<&str, &str> = BTreeMap::new();
            for (tensor, shard) in &index.weight_map {
                shards.entry(shard.as_str()).or_insert(tensor.as_str());
            }
            let mut headers: HashMap<&str, HashMap<String, Entry>> = HashMap::new();
            for (&shard, &tensor) in &shards {
                let bytes = files.get(shard).ok_or_else(|| CheckpointError::Index {
                    file: INDEX_FILE.into(),
                    reason: format!(
                        "weight_map names shard {shard} (for {tensor}), which is not among the model files"
                    ),
                })?;
                headers.insert(shard, read_header(shard, bytes)?.into_iter().collect());
            }
            for (tensor, shard) in &index.weight_map {
                let entry =
                    headers.get(shard.as_str()).and_then(|h| h.get(tensor)).ok_or_else(|| CheckpointError::Index {
                        file: INDEX_FILE.into(),
                        reason: format!("weight_map puts {tensor} in {shard}, but {shard} does not hold it"),
                    })?;
                entries.insert(tensor.clone(), entry.clone());
            }
        } else if let Some(bytes) = files.get(SINGLE_FILE) {
            entries.extend(read_header(SINGLE_FILE, bytes)?);
        } else {
            return Err(CheckpointError::NoWeights);
        }
        Ok(Checkpoint { config, files, entries })
    }

    /// Read a model directory: config.json, the weights (single file or index
    /// with shards) and whichever of [`OPTIONAL_FILES`](crate::base::names::OPTIONAL_FILES) exist.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_dir(dir: &std::path::Path) -> Result<Checkpoint, CheckpointError> {
        let read = |name: &str| -> Result<Vec<u8>, CheckpointError> {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| CheckpointError::Io { path: path.display().to_string(), source })
        };
        let mut files = HashMap::new();
        files.insert(CONFIG_FILE.to_string(), read(CONFIG_FILE)?);
        if dir.join(INDEX_FILE).is_file() {
            let index_bytes = read(INDEX_FILE)?;
            let index: IndexJson = serde_json::from_slice(&index_bytes)
                .map_err(|e| CheckpointError::Index { file: INDEX_FILE.into(), reason: e.to_string() })?;
            let shards: std::collections::BTreeSet<&String> = index.weight_map.values().collect();
            for shard in shards {
                // A shard the index names but the directory lacks is reported by from_files.
                if dir.join(shard).is_file() {
                    files.insert(shard.clone(), read(shard)?);
                }
            }
            files.insert(INDEX_FILE.to_string(), index_bytes);
        } else if dir.join(SINGLE_FILE).is_file() {
            files.insert(SINGLE_FILE.to_string(), read(SINGLE_FILE)?);
        } else {
            return Err(CheckpointError::Io {
                path: dir.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("neither {SINGLE_FILE} nor {INDEX_FILE} is in this directory"),
                ),
            });
        }
        for name in crate::base::names::OPTIONAL_FILES {
            if dir.join(name).is_file() {
                files.insert(name.to_string(), read(name)?);
            }
        }
        Checkpoint::from_files(files)
    }

    /// The model config, parsed from config.json at open.
    pub fn config(&self) -> &ModelConfig {
        &self.config
    }

    /// Raw bytes of any file handed over (tokenizer.json, ...).
    pub fn file(&self, name: &str) -> Option<&[u8]> {
        self.files.get(name).map(|v| v.as_slice())
    }

    /// Every tensor the weights hold, sorted by name.
    pub fn tensor_names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// Shape of a tensor without reading it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.entries.get(name).map(|e| e.shape.as_slice())
    }

    /// Read one tensor: F32, F64 (narrowed to F32), BF16 or F16.
    pub fn tensor(&self, name: &str) -> Result<HostTensor, CheckpointError> {
        let entry = self.entries.get(name).ok_or_else(|| CheckpointError::MissingTensor {
            tensor: name.to_string(),
            files: self.weight_files().join(", "),
        })?;
        let bytes = self
            .files
            .get(&entry.file)
            .and_then(|b| b.get(entry.start..entry.end))
            .ok_or_else(|| CheckpointError::MissingFile { file: entry.file.clone() })?;
        let t = decode(entry.dtype, &entry.shape, bytes).ok_or_else(|| CheckpointError::Dtype {
            tensor: name.to_string(),
            file: entry.file.clone(),
            dtype: entry.dtype.to_string(),
        })?;
        if let Some(element) = t.first_non_finite() {
            return Err(CheckpointError::NotFinite { tensor: name.to_string(), file: entry.file.clone(), element });
        }
        Ok(t)
    }

    /// Where every tensor lies, by name: its file, dtype, shape and absolute byte range.
    pub fn locations(&self) -> impl Iterator<Item = Location<'_>> {
        self.entries.iter().map(|(name, e)| Location {
            name,
            file: &e.file,
            dtype: e.dtype,
            shape: &e.shape,
            start: e.start,
            end: e.end,
        })
    }

    /// Names of the safetensors files the weights come from.
    fn weight_files(&self) -> Vec<String> {
        let set: std::collections::BTreeSet<&String> = self.entries.values().map(|e| &e.file).collect();
        if set.is_empty() {
            return vec![if self.files.contains_key(INDEX_FILE) { INDEX_FILE } else { SINGLE_FILE }.to_string()];
        }
        set.into_iter().cloned().collect()
    }
}

/// Check that every expected tensor exists with the right shape (lm_head only
/// when untied; a tied checkpoint that still ships lm_head.weight is fine).
/// Reads headers only.
pub fn validate(ckpt: &Checkpoint) -> Result<(), CheckpointError> {
    for (name, expected) in expected_tensors(ckpt.config()) {
        match ckpt.shape(&name) {
            None => return Err(CheckpointError::Missing { tensor: name, expected }),
            Some(found) if found != expected.as_slice() => {
                return Err(CheckpointError::Shape { tensor: name, expected, found: found.to_vec() })
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
