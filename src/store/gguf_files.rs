//! A GGUF file seen as the Hugging Face checkpoint it converts to, for the importer: a
//! [`FileSet`] whose config.json and tokenizer files are made from the GGUF's metadata and whose
//! model.safetensors is virtual, made range by range as the importer reads it ([`HfView`]).
//!
//! Nothing holds the whole GGUF or the whole converted checkpoint: the header, metadata and
//! tensor infos are read from a prefix of the file (grown until they fit), the metadata is
//! dropped once the plan is made, and a read of model.safetensors converts only the units
//! (a few MiB of rows) it overlaps, each from its own byte range of the GGUF, keeping the last
//! unit for the next read. So the memory an import of a GGUF needs does not grow with the
//! model: one chunk being read, one unit being converted, the tokenizer files.

use super::asyncio::{ByteSource, FileSet, MemoryFile};
use super::SINGLE_FILE;
use crate::error::{Error, Result};
use crate::formats::gguf::{Gguf, HfView, Unit, UNIT_BYTES};
use std::cell::RefCell;
use std::rc::Rc;

/// The first read of a GGUF's start; doubled until the header, metadata and tensor infos fit.
const FIRST_READ: usize = 1 << 20;
/// A GGUF whose header, metadata and tensor infos take more than this is refused: read whole
/// before parsing, they bound the import's memory (a 150k-token vocabulary with its merges takes
/// about 5 MB, Llama 3's about 10).
pub const MAX_GGUF_HEADER: usize = 64 << 20;

/// One GGUF as a model's files.
pub struct GgufFiles<S> {
    inner: Rc<GgufWeights<S>>,
}

/// model.safetensors of a [`GgufFiles`] (shared by every opening of it).
pub struct GgufWeights<S> {
    view: HfView,
    src: S,
    /// The last unit converted.
    last: RefCell<Option<(Unit, Rc<Vec<u8>>)>>,
}

/// One file of a [`GgufFiles`].
pub enum GgufFile<S> {
    /// config.json, the tokenizer files, generation_config.json.
    Json(MemoryFile),
    /// model.safetensors.
    Weights(Rc<GgufWeights<S>>),
}

impl<S: ByteSource> GgufFiles<S> {
    /// Read `src`'s header, metadata and tensor infos and plan the conversion (everything is
    /// checked here: a GGUF the importer cannot convert is refused before anything is stored).
    pub async fn open(src: S) -> Result<GgufFiles<S>> {
        GgufFiles::open_with(src, FIRST_READ, UNIT_BYTES).await
    }

    /// [`GgufFiles::open`] with the first read's size and the conversion unit chosen (tests).
    pub async fn open_with(src: S, first_read: usize, unit_bytes: usize) -> Result<GgufFiles<S>> {
        let name = src.describe();
        let len = src.size().await?;
        let mut n = (first_read.max(64) as u64).min(len) as usize;
        let g = loop {
            let prefix = src.read(0, n).await?;
            match Gguf::parse_prefix(&prefix, len).map_err(|e| Error::msg(format!("{name}: {e}")))? {
                Some(g) => break g,
                None if (n as u64) < len && n < MAX_GGUF_HEADER => {
                    n = (n * 2).min(MAX_GGUF_HEADER).min(len as usize);
                }
                None => {
                    return Err(Error::msg(format!(
                        "{name}: its header, metadata and tensor infos take more than {} MiB",
                        MAX_GGUF_HEADER >> 20
                    )))
                }
            }
        };
        let view = HfView::new(g, unit_bytes).map_err(|e| Error::msg(format!("{name}: {e}")))?;
        Ok(GgufFiles { inner: Rc::new(GgufWeights { view, src, last: RefCell::new(None) }) })
    }

    /// What the conversion will make.
    pub fn view(&self) -> &HfView {
        &self.inner.view
    }
}

impl<S: ByteSource> FileSet for GgufFiles<S> {
    type Source = GgufFile<S>;
    async fn open(&self, name: &str) -> Result<Option<GgufFile<S>>> {
        if name == SINGLE_FILE {
            return Ok(Some(GgufFile::Weights(self.inner.clone())));
        }
        let json = self.inner.view.json_files().iter().find(|(n, _)| *n == name);
        Ok(json.map(|(n, bytes)| {
            GgufFile::Json(MemoryFile { name: n.to_string(), bytes: std::sync::Arc::new(bytes.clone()) })
        }))
    }
}

impl<S: ByteSource> GgufWeights<S> {
    /// `unit` in bf16: the last one again, or read and converted.
    async fn unit(&self, unit: Unit) -> Result<Rc<Vec<u8>>> {
        if let Some((u, bytes)) = self.last.borrow().as_ref() {
            if *u == unit {
                return Ok(bytes.clone());
            }
        }
        // Free the last unit before making the next (it is not needed again: reads go forward).
        self.last.borrow_mut().take();
        let (offset, len) = self.view.source_range(unit);
        let raw = self.src.read(offset, len).await?;
        let bytes =
            Rc::new(self.view.convert(unit, &raw).map_err(|e| Error::msg(format!("{}: {e}", self.src.describe())))?);
        *self.last.borrow_mut() = Some((unit, bytes.clone()));
        Ok(bytes)
    }
}

impl<S: ByteSource> ByteSource for GgufFile<S> {
    fn describe(&self) -> String {
        match self {
            GgufFile::Json(f) => f.describe(),
            GgufFile::Weights(inner) => format!("{} (as {SINGLE_FILE})", inner.src.describe()),
        }
    }

    async fn size(&self) -> Result<u64> {
        match self {
            GgufFile::Json(f) => f.size().await,
            GgufFile::Weights(inner) => Ok(inner.view.safetensors_len()),
        }
    }

    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        let inner = match self {
            GgufFile::Json(f) => return f.read(start, len).await,
            GgufFile::Weights(inner) => inner,
        };
        let view = &inner.view;
        let end = start.checked_add(len as u64).filter(|&e| e <= view.safetensors_len()).ok_or_else(|| {
            Error::msg(format!(
                "{}: bytes {start}..+{len} lie beyond its end ({} bytes)",
                self.describe(),
                view.safetensors_len()
            ))
        })?;
        let mut out = Vec::with_capacity(len);
        let head = view.head();
        if start < head.len() as u64 {
            out.extend_from_slice(&head[start as usize..end.min(head.len() as u64) as usize]);
        }
        for unit in view.units(start, end) {
            let bytes = inner.unit(unit).await?;
            let (u0, u1) = view.unit_range(unit);
            let (a, b) = (start.max(u0), end.min(u1));
            out.extend_from_slice(&bytes[(a - u0) as usize..(b - u0) as usize]);
        }
        debug_assert_eq!(out.len(), len);
        Ok(out)
    }
}
