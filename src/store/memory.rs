//! [`MemoryStore`]: blobs in memory (tests, benchmarks, and the staging of an async store).

use super::{check_key, missing, ChunkStore};
use crate::base::error::{Error, Result};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Blobs in memory (tests, and the browser before IndexedDB).
#[derive(Default)]
pub struct MemoryStore {
    map: Mutex<BTreeMap<String, Vec<u8>>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, BTreeMap<String, Vec<u8>>>> {
        self.map.lock().map_err(|_| Error::msg("memory store: lock poisoned by a panic"))
    }
}

impl ChunkStore for MemoryStore {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        check_key(key)?;
        self.lock()?.insert(key.to_string(), bytes.to_vec());
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.lock()?.get(key).cloned().ok_or_else(|| missing(key))
    }
    fn read_with(&self, key: &str, f: &mut dyn FnMut(&[u8])) -> Result<()> {
        f(self.lock()?.get(key).ok_or_else(|| missing(key))?);
        Ok(())
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.lock()?.remove(key);
        Ok(())
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self
            .lock()?
            .range(prefix.to_string()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(prefix))
            .cloned()
            .collect())
    }
}
