//! [`AsyncChunkStore`]: the weight store with async operations, for the browser (IndexedDB,
//! whose every operation is a promise); any [`ChunkStore`] is one natively. The trait uses
//! `async fn` (not object safe): code over it is generic. Browser futures are not `Send`,
//! so neither are these.

use super::ChunkStore;
use crate::base::error::Result;

/// A key-value store of byte blobs with async operations. Keys as in [`ChunkStore`].
#[allow(async_fn_in_trait)]
pub trait AsyncChunkStore {
    /// Write (or replace) `key`.
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<()>;
    /// Read `key`; an error naming it when it is missing.
    async fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// Read `key`, or None when it is missing.
    async fn get_opt(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if self.keys(key).await?.iter().any(|k| k == key) {
            self.get(key).await.map(Some)
        } else {
            Ok(None)
        }
    }
    /// Remove `key` (nothing to do when it is missing).
    async fn delete(&self, key: &str) -> Result<()>;
    /// Every key that starts with `prefix`, sorted.
    async fn keys(&self, prefix: &str) -> Result<Vec<String>>;
}

impl<T: ChunkStore + ?Sized> AsyncChunkStore for T {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        ChunkStore::put(self, key, bytes)
    }
    async fn get(&self, key: &str) -> Result<Vec<u8>> {
        ChunkStore::get(self, key)
    }
    async fn delete(&self, key: &str) -> Result<()> {
        ChunkStore::delete(self, key)
    }
    async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        ChunkStore::keys(self, prefix)
    }
}
