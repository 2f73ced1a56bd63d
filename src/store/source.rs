//! [`StoreSource`]: a stored model as the model's [`WeightSource`], reading only the chunks
//! that hold the bytes asked for.

use super::{read_manifest, ChunkStore, Manifest, TensorEntry, MANIFEST_VERSION};
use crate::base::bytes::matches;
use crate::base::config::ModelConfig;
use crate::base::error::{Error, Result};
use crate::base::host::HostTensor;
use crate::base::names::{self, Proj};
use crate::formats::safetensors::decode;
use crate::model::source::{LayerHost, WeightSource};
use std::collections::HashMap;
use std::sync::Arc;

/// A stored model as a [`WeightSource`]: each read fetches only the chunks that hold
/// the bytes asked for, checks their checksums, and keeps nothing.
pub struct StoreSource {
    store: Arc<dyn ChunkStore>,
    man: Manifest,
    cfg: ModelConfig,
    tensors: HashMap<String, usize>,
    chunks: ChunkIndex,
}

/// Where each chunk of a manifest is listed, to check a chunk read against its entry.
pub(crate) struct ChunkIndex(HashMap<String, usize>);

impl ChunkIndex {
    pub(crate) fn new(man: &Manifest) -> ChunkIndex {
        ChunkIndex(man.chunks.iter().enumerate().map(|(i, c)| (c.key.clone(), i)).collect())
    }

    fn entry<'m>(&self, man: &'m Manifest, key: &str) -> Option<&'m super::ChunkEntry> {
        self.0.get(key).map(|&i| &man.chunks[i])
    }

    /// Check chunk `key` of the model of `man` against the manifest: its size and checksum (a
    /// key the manifest does not list as a chunk, such as the manifest itself, passes).
    pub(crate) fn check(&self, man: &Manifest, key: &str, bytes: &[u8]) -> Result<()> {
        match self.entry(man, key) {
            Some(c) if !matches(bytes, c.bytes, &c.fnv1a64) => {
                Err(Error::msg(format!("model {}: chunk {key} is corrupt (size or checksum differs)", man.model)))
            }
            _ => Ok(()),
        }
    }
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
        let chunks = ChunkIndex::new(&man);
        for (name, shape) in names::expected_tensors(&cfg) {
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
                let c = chunks.entry(&man, &p.chunk);
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

    /// The bytes `ranges` (of the tensor's own bytes) concatenated; each chunk is read once,
    /// and checked against the manifest unless the store checked it when it came in.
    fn read(&self, t: &TensorEntry, ranges: &[std::ops::Range<usize>]) -> Result<Vec<u8>> {
        let mut out = vec![0u8; ranges.iter().map(|r| r.len()).sum()];
        let mut at = 0; // where in the tensor's bytes piece p starts
        for p in &t.pieces {
            let piece = at..at + p.len;
            at += p.len;
            if !ranges.iter().any(|r| r.start.max(piece.start) < r.end.min(piece.end)) {
                continue;
            }
            let mut checked = Ok(());
            self.store.read_with(&p.chunk, &mut |bytes| {
                if !self.store.checked() {
                    checked = self.chunks.check(&self.man, &p.chunk, bytes);
                    if checked.is_err() {
                        return;
                    }
                }
                let mut dst = 0;
                for r in ranges {
                    let (s, e) = (r.start.max(piece.start), r.end.min(piece.end));
                    if s < e {
                        let src = p.offset + s - piece.start;
                        out[dst + s - r.start..dst + e - r.start].copy_from_slice(&bytes[src..src + e - s]);
                    }
                    dst += r.len();
                }
            })?;
            checked?;
        }
        Ok(out)
    }

    fn decode(&self, t: &TensorEntry, shape: &[usize], bytes: &[u8]) -> Result<HostTensor> {
        decode(t.dtype, shape, bytes).ok_or_else(|| {
            Error::msg(format!(
                "model {}: {}: dtype {} is not supported (F32, F64, BF16, F16 are)",
                self.man.model, t.name, t.dtype
            ))
        })
    }

    /// One whole tensor, decoded like [`Checkpoint::tensor`](crate::formats::checkpoint::Checkpoint::tensor).
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
            let w = get(names::proj_weight_key(i, p), &[out, inp])?;
            let b = if p.has_bias(&self.cfg) { Some(get(names::proj_bias_key(i, p), &[out])?) } else { None };
            proj.push((w, b));
        }
        Ok(LayerHost {
            input_norm: get(names::input_norm_key(i), &[self.cfg.hidden])?,
            post_norm: get(names::post_norm_key(i), &[self.cfg.hidden])?,
            proj,
        })
    }
    fn final_norm(&self) -> Result<HostTensor> {
        self.tensor(names::FINAL_NORM_KEY)
    }
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let rows: Vec<usize> = ids.iter().map(|&id| id as usize).collect();
        Ok(self.rows(names::EMBED_KEY, &rows)?.to_f32())
    }
    fn output_rows(&self, r0: usize, r1: usize) -> Result<HostTensor> {
        let key = if self.cfg.tie_word_embeddings { names::EMBED_KEY } else { names::LM_HEAD_KEY };
        self.rows(key, &(r0..r1).collect::<Vec<_>>())
    }
}
