//! Files read by byte ranges ([`ByteSource`], [`FileSet`]): a File or Blob or an HTTP server
//! answering Range requests in the browser (`super::web`), memory and the file system
//! natively, so that an import never holds a whole file in memory and can resume where it
//! stopped. These traits use `async fn` (not object safe): code over them is generic.

use crate::base::error::{Error, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// One file read by byte ranges.
#[allow(async_fn_in_trait)]
pub trait ByteSource {
    /// What to call it in messages: the file name or the URL.
    fn describe(&self) -> String;
    /// Its size in bytes.
    async fn size(&self) -> Result<u64>;
    /// Exactly the bytes `start .. start + len`; an error naming the source when they
    /// cannot be read (a short read is an error).
    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>>;
}

/// The files of one model, by name ("config.json", "model.safetensors",
/// "model-00001-of-00002.safetensors", ...).
#[allow(async_fn_in_trait)]
pub trait FileSet {
    type Source: ByteSource;
    /// The file `name`, or None when the model has no such file (a 404 for a server).
    async fn open(&self, name: &str) -> Result<Option<Self::Source>>;
}

/// Read a whole (small) file.
pub async fn read_all<S: ByteSource>(src: &S) -> Result<Vec<u8>> {
    let n = src.size().await?;
    let n = usize::try_from(n).map_err(|_| Error::msg(format!("{}: {n} bytes is too large", src.describe())))?;
    src.read(0, n).await
}

/// Files in memory (tests; and bytes the page already holds).
#[derive(Clone, Default)]
pub struct MemoryFiles {
    pub files: HashMap<String, Arc<Vec<u8>>>,
}

impl MemoryFiles {
    pub fn new(files: HashMap<String, Vec<u8>>) -> MemoryFiles {
        MemoryFiles { files: files.into_iter().map(|(k, v)| (k, Arc::new(v))).collect() }
    }
}

/// One file of a [`MemoryFiles`].
#[derive(Clone)]
pub struct MemoryFile {
    pub name: String,
    pub bytes: Arc<Vec<u8>>,
}

impl ByteSource for MemoryFile {
    fn describe(&self) -> String {
        self.name.clone()
    }
    async fn size(&self) -> Result<u64> {
        Ok(self.bytes.len() as u64)
    }
    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        let s = usize::try_from(start).ok();
        s.and_then(|s| self.bytes.get(s..s.checked_add(len)?)).map(|b| b.to_vec()).ok_or_else(|| {
            Error::msg(format!(
                "{}: bytes {start}..{} lie beyond its end ({} bytes)",
                self.name,
                start.saturating_add(len as u64),
                self.bytes.len()
            ))
        })
    }
}

impl FileSet for MemoryFiles {
    type Source = MemoryFile;
    async fn open(&self, name: &str) -> Result<Option<MemoryFile>> {
        Ok(self.files.get(name).map(|b| MemoryFile { name: name.to_string(), bytes: b.clone() }))
    }
}

/// The files of a model directory (native).
#[cfg(not(target_arch = "wasm32"))]
pub struct DirFiles {
    pub dir: std::path::PathBuf,
}

/// One file of a [`DirFiles`].
#[cfg(not(target_arch = "wasm32"))]
pub struct DirFile {
    pub path: std::path::PathBuf,
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for DirFile {
    fn describe(&self) -> String {
        self.path.display().to_string()
    }
    async fn size(&self) -> Result<u64> {
        let m = std::fs::metadata(&self.path).map_err(|e| Error::msg(format!("{}: {e}", self.describe())))?;
        Ok(m.len())
    }
    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let err = |e: std::io::Error| Error::msg(format!("{}: bytes {start}..+{len}: {e}", self.describe()));
        let mut f = std::fs::File::open(&self.path).map_err(err)?;
        f.seek(SeekFrom::Start(start)).map_err(err)?;
        let mut buf = vec![0u8; len];
        f.read_exact(&mut buf).map_err(err)?;
        Ok(buf)
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl FileSet for DirFiles {
    type Source = DirFile;
    async fn open(&self, name: &str) -> Result<Option<DirFile>> {
        let path = self.dir.join(name);
        Ok(path.is_file().then_some(DirFile { path }))
    }
}
