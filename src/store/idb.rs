//! IndexedDB as an [`AsyncChunkStore`] (wasm32 only): one database per store, one
//! object store ("blobs") whose keys are the chunk keys and whose values are
//! `Uint8Array`s. Works in a Window and in a Worker (IndexedDB is taken from the global
//! scope, whichever it is).
//!
//! Every operation is one request in its own transaction. A write (put, delete)
//! resolves only when its transaction completes (`oncomplete`), so what it wrote is
//! committed when the promise resolves. (With the browser's default durability, which
//! Chrome may treat as "relaxed", a commit survives a crash of the tab or browser but
//! perhaps not a power cut; the chunk checksums in the manifest catch such a loss.)
//!
//! Requests and transactions become futures through a `js_sys::Promise` whose resolve
//! and reject functions are the event handlers: no Rust closure per request. The only
//! Rust closures are the upgrade handler of [`IdbStore::open`] (dropped when the open
//! finishes) and the store's `versionchange` handler (dropped with the store).
//!
//! Also here: [`storage_estimate`], [`persisted`] and [`request_persist`] (the
//! origin's quota and whether its storage is persistent), and [`Scope`], the global
//! scope (Window or Worker) that `web_files` fetches and sleeps through.

use super::{check_key, AsyncChunkStore};
use crate::base::bytes::human_bytes;
use crate::base::error::{Error, Result};
use js_sys::{ArrayBuffer, Promise, Reflect, Uint8Array};
use wasm_bindgen::closure::Closure;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;
use web_sys::{
    Event, IdbDatabase, IdbFactory, IdbKeyRange, IdbObjectStore, IdbOpenDbRequest, IdbRequest, IdbTransaction,
    IdbTransactionMode, StorageEstimate, StorageManager, Window, WorkerGlobalScope,
};

/// The one object store of every database an [`IdbStore`] opens.
pub const OBJECT_STORE: &str = "blobs";

/// The global scope this code runs in: a page (Window) or a worker.
pub(crate) enum Scope {
    Window(Window),
    Worker(WorkerGlobalScope),
}

impl Scope {
    /// The current global scope; an error in any other (a worklet, Node.js).
    pub(crate) fn current() -> Result<Scope> {
        let global = js_sys::global();
        if let Some(w) = global.dyn_ref::<Window>() {
            Ok(Scope::Window(w.clone()))
        } else if let Some(w) = global.dyn_ref::<WorkerGlobalScope>() {
            Ok(Scope::Worker(w.clone()))
        } else {
            Err(Error::msg("this JavaScript global scope is neither a Window nor a Worker"))
        }
    }

    /// `indexedDB`, or an error saying it is missing.
    fn indexed_db(&self) -> Result<IdbFactory> {
        let factory = match self {
            Scope::Window(w) => w.indexed_db(),
            Scope::Worker(w) => w.indexed_db(),
        };
        match factory {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Err(Error::msg(
                "IndexedDB is not available here (a private window, or storage disabled for this site?)",
            )),
            Err(e) => Err(Error::msg(format!("IndexedDB is not available here: {}", js_error(&e)))),
        }
    }

    /// `navigator.storage`, or an error saying it is missing.
    fn storage(&self) -> Result<StorageManager> {
        let storage = match self {
            Scope::Window(w) => w.navigator().storage(),
            Scope::Worker(w) => w.navigator().storage(),
        };
        if storage.is_undefined() || storage.is_null() {
            return Err(Error::msg(
                "navigator.storage is not available here (it needs a secure context: https or localhost)",
            ));
        }
        Ok(storage)
    }

    /// `fetch(request)`.
    pub(crate) fn fetch(&self, request: &web_sys::Request) -> Promise {
        match self {
            Scope::Window(w) => w.fetch_with_request(request),
            Scope::Worker(w) => w.fetch_with_request(request),
        }
    }

    /// Resolve after `ms` milliseconds (setTimeout).
    pub(crate) async fn sleep(&self, ms: i32) {
        let promise = Promise::new(&mut |resolve, _reject| {
            let timer = match self {
                Scope::Window(w) => w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms),
                Scope::Worker(w) => w.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, ms),
            };
            if timer.is_err() {
                // No timer: do not wait at all rather than forever.
                let _ = resolve.call0(&JsValue::UNDEFINED);
            }
        });
        let _ = JsFuture::from(promise).await;
    }
}

/// A JavaScript exception as text: "Name: message" for an Error or DOMException.
pub(crate) fn js_error(e: &JsValue) -> String {
    if let Some(s) = e.as_string() {
        return s;
    }
    let field = |name: &str| Reflect::get(e, &JsValue::from_str(name)).ok().and_then(|v| v.as_string());
    match (field("name"), field("message")) {
        (Some(n), Some(m)) if !m.is_empty() => format!("{n}: {m}"),
        (Some(n), _) => n,
        (None, Some(m)) => m,
        (None, None) => format!("{e:?}"),
    }
}

/// The `name` of a DOMException (or any error object).
fn js_error_name(e: &JsValue) -> Option<String> {
    Reflect::get(e, &JsValue::from_str("name")).ok().and_then(|v| v.as_string())
}

/// The message for a write refused because the origin's quota is full.
fn quota_message(db: &str, key: &str, bytes: usize, estimate: Option<(u64, u64)>) -> String {
    let mut msg = format!(
        "IndexedDB {db}: writing {key} ({}) failed: the browser's storage quota for this site is full",
        human_bytes(bytes as u64)
    );
    if let Some((usage, quota)) = estimate {
        msg += &format!(
            " ({} used of {}, {} available)",
            human_bytes(usage),
            human_bytes(quota),
            human_bytes(quota.saturating_sub(usage))
        );
    }
    msg += "; free space (delete stored models, or other sites' data) or ask for persistent storage";
    msg
}

/// Keys as in [`ChunkStore`](super::ChunkStore): '/'-separated non-empty
/// segments, not "." or "..", no '\\' or NUL, not ending in ".tmp".
/// Wait for an IndexedDB request to finish: its result, or the DOMException it failed
/// with. The promise's resolve and reject functions are the request's handlers.
async fn request_done(req: &IdbRequest) -> std::result::Result<JsValue, JsValue> {
    let promise = Promise::new(&mut |resolve, reject| {
        req.set_onsuccess(Some(&resolve));
        req.set_onerror(Some(&reject));
    });
    let outcome = JsFuture::from(promise).await;
    req.set_onsuccess(None);
    req.set_onerror(None);
    match outcome {
        Ok(_) => req.result(),
        Err(event) => Err(req.error().ok().flatten().map(JsValue::from).unwrap_or(event)),
    }
}

/// Wait for a transaction to complete; the DOMException it aborted with otherwise.
async fn transaction_done(tx: &IdbTransaction) -> std::result::Result<(), JsValue> {
    let promise = Promise::new(&mut |resolve, reject| {
        tx.set_oncomplete(Some(&resolve));
        // A failed request aborts the transaction (nothing here prevents that), and
        // the abort carries the request's error in `tx.error`.
        tx.set_onabort(Some(&reject));
    });
    let outcome = JsFuture::from(promise).await;
    tx.set_oncomplete(None);
    tx.set_onabort(None);
    match outcome {
        Ok(_) => Ok(()),
        Err(event) => Err(tx.error().map(JsValue::from).unwrap_or(event)),
    }
}

/// The bytes of a stored value: a Uint8Array (what [`IdbStore`] writes) or an ArrayBuffer.
fn value_bytes(db: &str, key: &str, value: &JsValue) -> Result<Vec<u8>> {
    if let Some(a) = value.dyn_ref::<Uint8Array>() {
        Ok(a.to_vec())
    } else if let Some(b) = value.dyn_ref::<ArrayBuffer>() {
        Ok(Uint8Array::new(b).to_vec())
    } else {
        Err(Error::msg(format!("IndexedDB {db}: {key}: the stored value is not bytes (Uint8Array or ArrayBuffer)")))
    }
}

/// Clears the upgrade handler of an open request when the open is over (or its
/// future is dropped), before the closure it points to is freed.
struct UpgradeHandler {
    req: IdbOpenDbRequest,
    _closure: Closure<dyn FnMut(Event)>,
}

impl Drop for UpgradeHandler {
    fn drop(&mut self) {
        self.req.set_onupgradeneeded(None);
    }
}

/// Open `name` (at `version`, or the current one), creating the object store
/// [`OBJECT_STORE`] in an upgrade when it is missing.
async fn open_db(factory: &IdbFactory, name: &str, version: Option<u32>) -> Result<IdbDatabase> {
    let fail = |e: &JsValue| Error::msg(format!("IndexedDB {name}: cannot open the database: {}", js_error(e)));
    let req = match version {
        Some(v) => factory.open_with_u32(name, v),
        None => factory.open(name),
    }
    .map_err(|e| fail(&e))?;
    let upgrade_req = req.clone();
    let closure = Closure::<dyn FnMut(Event)>::new(move |_event: Event| {
        let created = upgrade_req.result().and_then(|db| {
            let db: IdbDatabase = db.unchecked_into();
            if db.object_store_names().contains(OBJECT_STORE) {
                Ok(())
            } else {
                db.create_object_store(OBJECT_STORE).map(|_| ())
            }
        });
        if created.is_err() {
            // Abort the upgrade: the open then fails with an AbortError.
            if let Some(tx) = upgrade_req.transaction() {
                let _ = tx.abort();
            }
        }
    });
    req.set_onupgradeneeded(Some(closure.as_ref().unchecked_ref()));
    let _handler = UpgradeHandler { req: req.clone(), _closure: closure };
    let db = request_done(&req).await.map_err(|e| fail(&e))?;
    db.dyn_into::<IdbDatabase>().map_err(|v| fail(&v))
}

/// A chunk store in one IndexedDB database (see the module doc).
pub struct IdbStore {
    name: String,
    db: IdbDatabase,
    /// Closes the connection when another one wants to upgrade or delete the database,
    /// so that this store never blocks it (its later operations then fail).
    _on_versionchange: Closure<dyn FnMut(Event)>,
}

impl std::fmt::Debug for IdbStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IdbStore").field("name", &self.name).finish()
    }
}

impl IdbStore {
    /// Open (or create) the database `db_name` with its object store "blobs".
    /// An error when this scope has no IndexedDB or the browser refuses it.
    pub async fn open(db_name: &str) -> Result<IdbStore> {
        let factory = Scope::current()?.indexed_db()?;
        let mut db = open_db(&factory, db_name, None).await?;
        if !db.object_store_names().contains(OBJECT_STORE) {
            // A database of that name without our object store: add it in an upgrade.
            let version = db.version() as u32 + 1;
            db.close();
            db = open_db(&factory, db_name, Some(version)).await?;
            if !db.object_store_names().contains(OBJECT_STORE) {
                db.close();
                return Err(Error::msg(format!(
                    "IndexedDB {db_name}: the database has no object store \"{OBJECT_STORE}\" and none could be created"
                )));
            }
        }
        let closing = db.clone();
        let on_versionchange = Closure::<dyn FnMut(Event)>::new(move |_event: Event| closing.close());
        db.set_onversionchange(Some(on_versionchange.as_ref().unchecked_ref()));
        Ok(IdbStore { name: db_name.to_string(), db, _on_versionchange: on_versionchange })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Close the connection (also done on drop); transactions under way finish first.
    pub fn close(&self) {
        self.db.close();
    }

    /// Delete the database `db_name` and everything in it. Open [`IdbStore`]s of it
    /// close themselves; another page holding it open without closing makes this wait.
    pub async fn delete_database(db_name: &str) -> Result<()> {
        let factory = Scope::current()?.indexed_db()?;
        let fail =
            |e: &JsValue| Error::msg(format!("IndexedDB {db_name}: cannot delete the database: {}", js_error(e)));
        let req = factory.delete_database(db_name).map_err(|e| fail(&e))?;
        request_done(&req).await.map_err(|e| fail(&e))?;
        Ok(())
    }

    fn fail(&self, what: &str, key: &str, e: &JsValue) -> Error {
        Error::msg(format!("IndexedDB {}: {what} {key}: {}", self.name, js_error(e)))
    }

    /// The object store in a new transaction.
    fn object_store(
        &self,
        mode: IdbTransactionMode,
        what: &str,
        key: &str,
    ) -> Result<(IdbTransaction, IdbObjectStore)> {
        let tx = self.db.transaction_with_str_and_mode(OBJECT_STORE, mode).map_err(|e| self.fail(what, key, &e))?;
        let store = tx.object_store(OBJECT_STORE).map_err(|e| self.fail(what, key, &e))?;
        Ok((tx, store))
    }

    /// Read `key` in one request: None when it is missing.
    async fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let (_tx, store) = self.object_store(IdbTransactionMode::Readonly, "reading", key)?;
        let req = store.get(&JsValue::from_str(key)).map_err(|e| self.fail("reading", key, &e))?;
        let value = request_done(&req).await.map_err(|e| self.fail("reading", key, &e))?;
        if value.is_undefined() {
            return Ok(None);
        }
        value_bytes(&self.name, key, &value).map(Some)
    }
}

impl Drop for IdbStore {
    fn drop(&mut self) {
        self.db.set_onversionchange(None);
        self.db.close();
    }
}

impl AsyncChunkStore for IdbStore {
    async fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        check_key(key)?;
        let (tx, store) = self.object_store(IdbTransactionMode::Readwrite, "writing", key)?;
        let value = Uint8Array::new_with_length(bytes.len() as u32);
        value.copy_from(bytes);
        let req = store.put_with_key(&value, &JsValue::from_str(key));
        drop(value);
        if let Err(e) = req {
            let _ = tx.abort();
            return Err(self.write_error(key, bytes.len(), &e).await);
        }
        match transaction_done(&tx).await {
            Ok(()) => Ok(()),
            Err(e) => Err(self.write_error(key, bytes.len(), &e).await),
        }
    }

    async fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.read(key).await?.ok_or_else(|| Error::msg(format!("chunk store: {key}: not found")))
    }

    async fn get_opt(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.read(key).await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let (tx, store) = self.object_store(IdbTransactionMode::Readwrite, "deleting", key)?;
        store.delete(&JsValue::from_str(key)).map_err(|e| self.fail("deleting", key, &e))?;
        transaction_done(&tx).await.map_err(|e| self.fail("deleting", key, &e))
    }

    async fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        let what = "listing keys under";
        let (_tx, store) = self.object_store(IdbTransactionMode::Readonly, what, prefix)?;
        let req = if prefix.is_empty() {
            store.get_all_keys()
        } else {
            let upper = format!("{prefix}\u{ffff}");
            let range = IdbKeyRange::bound(&JsValue::from_str(prefix), &JsValue::from_str(&upper))
                .map_err(|e| self.fail(what, prefix, &e))?;
            store.get_all_keys_with_key(&range)
        }
        .map_err(|e| self.fail(what, prefix, &e))?;
        let found = request_done(&req).await.map_err(|e| self.fail(what, prefix, &e))?;
        let found: js_sys::Array = found.dyn_into().map_err(|v| self.fail(what, prefix, &v))?;
        let mut keys: Vec<String> =
            found.iter().filter_map(|k| k.as_string()).filter(|k| k.starts_with(prefix)).collect();
        // IndexedDB orders by UTF-16 code units; the trait's order is Rust's (code points).
        keys.sort();
        Ok(keys)
    }
}

impl IdbStore {
    /// The error for a failed write of `bytes` bytes to `key`: a full quota says so,
    /// with the origin's usage and quota where the browser tells them.
    async fn write_error(&self, key: &str, bytes: usize, e: &JsValue) -> Error {
        if js_error_name(e).as_deref() == Some("QuotaExceededError") {
            let estimate = storage_estimate().await.ok();
            Error::msg(quota_message(&self.name, key, bytes, estimate))
        } else {
            self.fail("writing", key, e)
        }
    }
}

/// How much this origin stores and may store, in bytes: `(usage, quota)` from
/// `navigator.storage.estimate()` (Window or Worker).
pub async fn storage_estimate() -> Result<(u64, u64)> {
    let storage = Scope::current()?.storage()?;
    let fail = |e: &JsValue| Error::msg(format!("navigator.storage.estimate() failed: {}", js_error(e)));
    let promise = storage.estimate().map_err(|e| fail(&e))?;
    let estimate: StorageEstimate = JsFuture::from(promise).await.map_err(|e| fail(&e))?.unchecked_into();
    let bytes = |v: Option<f64>| v.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(0.0) as u64;
    Ok((bytes(estimate.get_usage()), bytes(estimate.get_quota())))
}

/// Whether this origin's storage is persistent (`navigator.storage.persisted()`;
/// false where the browser has no such call).
pub async fn persisted() -> Result<bool> {
    let storage = Scope::current()?.storage()?;
    if !has_method(&storage, "persisted") {
        return Ok(false);
    }
    let fail = |e: &JsValue| Error::msg(format!("navigator.storage.persisted() failed: {}", js_error(e)));
    let promise = storage.persisted().map_err(|e| fail(&e))?;
    Ok(JsFuture::from(promise).await.map_err(|e| fail(&e))?.as_bool().unwrap_or(false))
}

/// Ask for persistent storage (`navigator.storage.persist()`), so that the browser
/// does not evict stored models under storage pressure; whether it is granted. In a
/// worker, where `persist()` does not exist, whether storage already is persistent.
pub async fn request_persist() -> Result<bool> {
    let storage = Scope::current()?.storage()?;
    if !has_method(&storage, "persist") {
        return persisted().await;
    }
    let fail = |e: &JsValue| Error::msg(format!("navigator.storage.persist() failed: {}", js_error(e)));
    let promise = storage.persist().map_err(|e| fail(&e))?;
    Ok(JsFuture::from(promise).await.map_err(|e| fail(&e))?.as_bool().unwrap_or(false))
}

/// Whether `obj[name]` is a function.
fn has_method(obj: &JsValue, name: &str) -> bool {
    Reflect::get(obj, &JsValue::from_str(name)).map(|f| f.is_function()).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_bindgen_test::wasm_bindgen_test;

    /// A database name no other test (or earlier run) uses.
    fn unique_name(test: &str) -> String {
        format!("webtune-test-{test}-{}-{}", js_sys::Date::now(), (js_sys::Math::random() * 1e9) as u64)
    }

    fn pattern(n: usize, seed: u32) -> Vec<u8> {
        let mut x = seed.wrapping_mul(2654435761).wrapping_add(1);
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect()
    }

    #[wasm_bindgen_test]
    async fn put_get_delete_keys() {
        let name = unique_name("basic");
        let store = IdbStore::open(&name).await.expect("open");
        assert_eq!(store.name(), name);
        assert!(store.keys("").await.expect("keys").is_empty());
        for (i, key) in ["m/a/1", "m/a/2", "m/b/1", "n/x", "m/a10"].iter().enumerate() {
            store.put(key, &pattern(100 + i, i as u32)).await.expect("put");
        }
        assert_eq!(store.get("m/a/2").await.expect("get"), pattern(101, 1));
        assert_eq!(store.keys("m/a/").await.expect("keys"), ["m/a/1", "m/a/2"]);
        assert_eq!(store.keys("m/a").await.expect("keys"), ["m/a/1", "m/a/2", "m/a10"]);
        assert_eq!(store.keys("m/").await.expect("keys"), ["m/a/1", "m/a/2", "m/a10", "m/b/1"]);
        assert_eq!(store.keys("").await.expect("keys").len(), 5);
        assert!(store.keys("zz").await.expect("keys").is_empty());
        // Replace, then an empty value.
        store.put("m/a/1", b"new").await.expect("put");
        assert_eq!(store.get("m/a/1").await.expect("get"), b"new");
        store.put("m/empty", b"").await.expect("put");
        assert_eq!(store.get("m/empty").await.expect("get"), Vec::<u8>::new());
        store.delete("m/a/1").await.expect("delete");
        store.delete("m/a/1").await.expect("deleting a missing key is fine");
        assert_eq!(store.keys("m/a/").await.expect("keys"), ["m/a/2"]);
        let bad = store.put("m/../x", b"x").await.expect_err("bad key");
        assert!(bad.to_string().contains("not a valid key"), "{bad}");
        let bad = store.put("m/x.tmp", b"x").await.expect_err("bad key");
        assert!(bad.to_string().contains("m/x.tmp"), "{bad}");
        drop(store);
        IdbStore::delete_database(&name).await.expect("delete database");
    }

    #[wasm_bindgen_test]
    async fn missing_key_and_get_opt() {
        let name = unique_name("missing");
        let store = IdbStore::open(&name).await.expect("open");
        let err = store.get("model/chunk-7").await.expect_err("missing key");
        assert_eq!(err.to_string(), "chunk store: model/chunk-7: not found");
        assert_eq!(store.get_opt("model/chunk-7").await.expect("get_opt"), None);
        store.put("model/chunk-7", b"seven").await.expect("put");
        assert_eq!(store.get_opt("model/chunk-7").await.expect("get_opt"), Some(b"seven".to_vec()));
        // A prefix of a stored key is not that key.
        assert_eq!(store.get_opt("model/chunk-").await.expect("get_opt"), None);
        drop(store);
        IdbStore::delete_database(&name).await.expect("delete database");
    }

    #[wasm_bindgen_test]
    async fn big_blob_round_trip() {
        let name = unique_name("big");
        let store = IdbStore::open(&name).await.expect("open");
        let big = pattern(33 << 20, 7);
        store.put("model/big", &big).await.expect("put 33 MiB");
        let back = store.get("model/big").await.expect("get 33 MiB");
        assert_eq!(back.len(), big.len());
        assert!(back == big, "33 MiB blob came back different");
        drop(store);
        IdbStore::delete_database(&name).await.expect("delete database");
    }

    #[wasm_bindgen_test]
    async fn survives_reopen() {
        let name = unique_name("reopen");
        {
            let store = IdbStore::open(&name).await.expect("open");
            store.put("a/manifest.json", b"{\"v\":1}").await.expect("put");
            store.put("a/c/0", &pattern(5000, 3)).await.expect("put");
            store.close();
        }
        let store = IdbStore::open(&name).await.expect("reopen");
        assert_eq!(store.keys("a/").await.expect("keys"), ["a/c/0", "a/manifest.json"]);
        assert_eq!(store.get("a/c/0").await.expect("get"), pattern(5000, 3));
        assert_eq!(store.get("a/manifest.json").await.expect("get"), b"{\"v\":1}");
        drop(store);
        IdbStore::delete_database(&name).await.expect("delete database");
        let store = IdbStore::open(&name).await.expect("open after delete");
        assert!(store.keys("").await.expect("keys").is_empty(), "deleted database still holds keys");
        drop(store);
        IdbStore::delete_database(&name).await.expect("delete database");
    }

    #[wasm_bindgen_test]
    async fn deleting_an_open_database_closes_the_store() {
        let name = unique_name("versionchange");
        let store = IdbStore::open(&name).await.expect("open");
        store.put("k", b"v").await.expect("put");
        // Would wait forever if the open store did not close on versionchange.
        IdbStore::delete_database(&name).await.expect("delete database");
        let err = store.get("k").await.expect_err("closed store");
        assert!(err.to_string().contains(&name), "{err}");
    }

    #[wasm_bindgen_test]
    async fn storage_estimate_and_persist() {
        let (usage, quota) = storage_estimate().await.expect("estimate");
        assert!(quota > 0, "quota {quota}");
        assert!(usage <= quota, "usage {usage} > quota {quota}");
        // Headless Chromium may grant or refuse; both calls must answer.
        let granted = request_persist().await.expect("persist");
        let now = persisted().await.expect("persisted");
        assert!(!granted || now, "persist() granted but persisted() is false");
    }

    #[wasm_bindgen_test]
    fn quota_message_names_the_sizes() {
        let msg = quota_message("db", "m/c/3", 32 << 20, Some((900 << 20, 1 << 30)));
        assert!(msg.contains("m/c/3"), "{msg}");
        assert!(msg.contains("quota"), "{msg}");
        assert!(msg.contains("32.0 MiB (33554432 bytes)"), "{msg}");
        assert!(msg.contains("900.0 MiB"), "{msg}");
        assert!(msg.contains("124.0 MiB"), "{msg}");
        let msg = quota_message("db", "k", 10, None);
        assert!(msg.contains("10 bytes"), "{msg}");
    }
}
