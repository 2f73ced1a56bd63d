//! [`DirStore`]: the weight store as a directory (native only), one file per key.

use super::{check_key, missing, ChunkStore};
use crate::base::error::{CheckpointError, Error, Result};

/// One file per key under `root` ("a/b" is `root/a/b`), each written atomically
/// (to `<file>.tmp`, then renamed).
pub struct DirStore {
    pub root: std::path::PathBuf,
}

impl DirStore {
    /// A store under `root` (created on the first write).
    pub fn new(root: impl Into<std::path::PathBuf>) -> DirStore {
        DirStore { root: root.into() }
    }
    fn path(&self, key: &str) -> Result<std::path::PathBuf> {
        check_key(key)?;
        Ok(key.split('/').fold(self.root.clone(), |p, s| p.join(s)))
    }
    fn walk(&self, dir: &std::path::Path, prefix: &str, out: &mut Vec<String>) -> Result<()> {
        for entry in std::fs::read_dir(dir).map_err(|e| io(dir, e))? {
            let path = entry.map_err(|e| io(dir, e))?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
            let key = if prefix.is_empty() { name.to_string() } else { format!("{prefix}/{name}") };
            if path.is_dir() {
                self.walk(&path, &key, out)?;
            } else if !name.ends_with(".tmp") {
                out.push(key);
            }
        }
        Ok(())
    }
}

fn io(path: &std::path::Path, source: std::io::Error) -> Error {
    CheckpointError::Io { path: path.display().to_string(), source }.into()
}

impl ChunkStore for DirStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        use std::io::Write;
        let path = self.path(key)?;
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let mut f = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        f.write_all(bytes).and_then(|_| f.sync_all()).map_err(|e| io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io(&path, e))
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let path = self.path(key)?;
        std::fs::read(&path)
            .map_err(|e| if e.kind() == std::io::ErrorKind::NotFound { missing(key) } else { io(&path, e) })
    }
    fn delete(&self, key: &str) -> Result<()> {
        let path = self.path(key)?;
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&path, e)),
            _ => {}
        }
        // Remove directories left empty, up to the root.
        let mut dir = path.parent();
        while let Some(d) = dir.filter(|d| *d != self.root.as_path() && d.is_dir()) {
            if std::fs::read_dir(d).map_err(|e| io(d, e))?.next().is_some() {
                break;
            }
            std::fs::remove_dir(d).map_err(|e| io(d, e))?;
            dir = d.parent();
        }
        Ok(())
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let mut out = Vec::new();
        if self.root.is_dir() {
            self.walk(&self.root, "", &mut out)?;
        }
        out.retain(|k| k.starts_with(prefix));
        out.sort();
        Ok(out)
    }
}
