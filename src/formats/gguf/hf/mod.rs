//! A llama or qwen2 GGUF → a Hugging Face checkpoint: config.json from the metadata, tensors
//! renamed (`blk.3.attn_q.weight` → `model.layers.3.self_attn.q_proj.weight`), dequantized, with
//! llama.cpp's Q/K row permutation undone (llama only), written as one bf16 model.safetensors, and
//! the tokenizer files of [`super::tokenizer`] plus generation_config.json.
//!
//! Every weight is rounded once to bf16 (round to nearest even) from its f32 dequantization, norms
//! included: the same tensors scripts/convert-gguf-to-hf.py makes with transformers, bit for bit.
//! Everything is checked (types, names, shapes against config.json) before the first byte is
//! written, and the weights are streamed one tensor at a time.
//!
//! Here: what an import did ([`ImportSummary`]), model.safetensors written unit by unit, and the
//! files in memory or in a directory. The plan (config.json, names, shapes, checks) is in
//! `plan`, the checkpoint as a view converted on demand in `view`, and a GGUF of random weights
//! in `random`.

pub(super) mod plan;
mod random;
mod view;

pub use random::write_random_model;
pub use view::{HfView, Unit, UNIT_BYTES};

use crate::base::names::SINGLE_FILE;
use crate::formats::gguf::{read_at, Gguf, GgufError, Result};
use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Seek, Write};

/// What an import did, for the CLI to print.
#[derive(Clone, Debug, PartialEq)]
pub struct ImportSummary {
    /// general.architecture ("llama", "qwen2")
    pub architecture: String,
    pub gguf_version: u32,
    /// GGUF tensor type → how many tensors of it were read
    pub source_types: BTreeMap<String, usize>,
    pub tensors: usize,
    pub params: u64,
    pub vocab: usize,
    pub tied_embeddings: bool,
    /// (file name, bytes), in the order written
    pub files: Vec<(String, u64)>,
}

impl std::fmt::Display for ImportSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types: Vec<String> = self.source_types.iter().map(|(t, n)| format!("{n} {t}")).collect();
        let files: Vec<String> = self.files.iter().map(|(n, b)| format!("{n} ({b} bytes)")).collect();
        write!(
            f,
            "{} (GGUF v{}): {} tensors ({}) → {} parameters in bf16, vocabulary {}, tied embeddings: {}; files: {}",
            self.architecture,
            self.gguf_version,
            self.tensors,
            types.join(", "),
            self.params,
            self.vocab,
            self.tied_embeddings,
            files.join(", ")
        )
    }
}

/// model.safetensors, unit by unit. Returns the bytes written.
fn write_safetensors<R: Read + Seek, W: Write>(view: &HfView, r: &mut R, w: &mut W, out_name: &str) -> Result<u64> {
    let io = |source| GgufError::Io { what: format!("writing {out_name}"), source };
    w.write_all(view.head()).map_err(io)?;
    for unit in view.units(0, view.safetensors_len()) {
        let (offset, len) = view.source_range(unit);
        let raw = read_at(r, &view.tensors[unit.tensor].src.name, offset, len)?;
        w.write_all(&view.convert(unit, &raw)?).map_err(io)?;
    }
    Ok(view.safetensors_len())
}

/// The HF checkpoint files of a llama/qwen2 GGUF, by name: config.json, model.safetensors,
/// tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json
/// (ready for [`crate::formats::checkpoint::Checkpoint::from_files`]).
pub fn gguf_to_hf_files<R: Read + Seek>(r: &mut R) -> Result<HashMap<String, Vec<u8>>> {
    gguf_to_hf_files_with_summary(r).map(|(files, _)| files)
}

/// [`gguf_to_hf_files`], and what was imported.
pub fn gguf_to_hf_files_with_summary<R: Read + Seek>(r: &mut R) -> Result<(HashMap<String, Vec<u8>>, ImportSummary)> {
    let view = HfView::new(Gguf::parse(r)?, UNIT_BYTES)?;
    let mut summary = view.summary.clone();
    let mut weights = Vec::new();
    let n = write_safetensors(&view, r, &mut weights, SINGLE_FILE)?;
    summary.files.push((SINGLE_FILE.to_string(), n));
    let mut files = HashMap::new();
    files.insert(SINGLE_FILE.to_string(), weights);
    for (name, bytes) in view.json {
        summary.files.push((name.to_string(), bytes.len() as u64));
        files.insert(name.to_string(), bytes);
    }
    Ok((files, summary))
}

/// `webtune import --gguf FILE --out DIR`: write the HF checkpoint of a GGUF into `out_dir`
/// (created if needed; refused if it already holds any of the files). The weights are streamed
/// into model.safetensors.part and renamed; config.json is written last, so a directory that
/// has it is complete.
#[cfg(not(target_arch = "wasm32"))]
pub fn import_gguf_to_dir(gguf_path: &std::path::Path, out_dir: &std::path::Path) -> Result<ImportSummary> {
    use crate::formats::gguf::invalid;
    use std::fs::File;
    use std::io::{BufReader, BufWriter};
    let io = |path: &std::path::Path| {
        let what = path.display().to_string();
        move |source| GgufError::Io { what, source }
    };
    let mut r = BufReader::new(File::open(gguf_path).map_err(io(gguf_path))?);
    let g = Gguf::parse(&mut r).map_err(|e| match e {
        GgufError::Invalid(m) => invalid(format!("{}: {m}", gguf_path.display())),
        e => e,
    })?;
    let view = HfView::new(g, UNIT_BYTES)?;
    for name in view.json.iter().map(|(n, _)| *n).chain([SINGLE_FILE]) {
        let path = out_dir.join(name);
        if path.exists() {
            return Err(GgufError::Io {
                what: path.display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    "already exists (remove it or choose another --out directory)",
                ),
            });
        }
    }
    std::fs::create_dir_all(out_dir).map_err(io(out_dir))?;
    let mut summary = view.summary.clone();

    let part = out_dir.join(format!("{SINGLE_FILE}.part"));
    let written = (|| {
        let mut w = BufWriter::new(File::create(&part).map_err(io(&part))?);
        let n = write_safetensors(&view, &mut r, &mut w, SINGLE_FILE)?;
        w.into_inner().map_err(|e| io(&part)(e.into_error()))?.sync_all().map_err(io(&part))?;
        Ok(n)
    })();
    let n = written.inspect_err(|_| {
        let _ = std::fs::remove_file(&part); // best effort: the error being returned is the one that matters
    })?;
    let weights = out_dir.join(SINGLE_FILE);
    std::fs::rename(&part, &weights).map_err(io(&weights))?;
    summary.files.push((SINGLE_FILE.to_string(), n));

    for (name, bytes) in &view.json {
        let path = out_dir.join(name);
        std::fs::write(&path, bytes).map_err(io(&path))?;
        summary.files.push((name.to_string(), bytes.len() as u64));
    }
    Ok(summary)
}
