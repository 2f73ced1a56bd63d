//! What the integration tests share (tests/integration.rs makes them one crate with this module
//! in it; tests/soak.rs and tests/gguf_import_memory.rs, crates of their own, include it with
//! `mod common;`), each taking the parts it needs:
//!
//! - [`stamp`]: a test written once for both runtimes: the sync [`test`] attribute, the async
//!   [`both!`] stamper, [`log!`] and [`IN_BROWSER`]; and, below, the one
//!   `wasm_bindgen_test_configure!` per test crate, which makes `wasm-pack test` run it in the
//!   browser;
//! - [`fixtures`]: the committed PyTorch + PEFT fixtures of tests/fixtures;
//! - [`tiny_model`]: a tiny random LlamaForCausalLM with the SmolLM2 tokenizer, built in Rust
//!   (seeded), as files in memory or (natively) in a temporary directory for `webtune --model`;
//!   the CLI's `webtune tiny-model` includes this file (or tiny_model.rs alone) for it;
//! - the values the native run hands to the browser run (scripts/test.sh), and [`TempDir`].

#![allow(dead_code)] // each test file uses its own part

pub mod fixtures;
mod stamp;
mod tiny_model;

#[allow(unused_imports)] // a test file takes the ones it needs
pub(crate) use stamp::{both, log, test, IN_BROWSER};
#[allow(unused_imports)]
pub use tiny_model::*;

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

/// FNV-1a of a list of token ids, as a number that survives an f64 round trip (< 2^53): lets
/// the browser run compare its tokenization with the native one through WEBTUNE_NATIVE_LOSSES.
pub fn ids_hash(ids: &[u32]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for &id in ids {
        for b in id.to_le_bytes() {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h & ((1u64 << 52) - 1)
}

/// Values handed over by scripts/test.sh from the native run ("name=value,..."), read at
/// compile time so the browser run can compare with them.
pub fn native_value(name: &str) -> Option<f64> {
    option_env!("WEBTUNE_NATIVE_LOSSES")?
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| k.trim() == name)
        .and_then(|(_, v)| v.trim().parse().ok())
}

/// Natively: hand a value to the browser run. It prints `{tag} name=value` (for a person
/// running the test with --nocapture) and, where `WEBTUNE_NATIVE_LOSSES_OUT` names a file (as
/// scripts/test.sh does), appends `name=value` to it, so the browser build can get them from
/// the native run of the whole suite instead of running these tests again.
pub fn hand_over_native(tag: &str, name: &str, value: impl std::fmt::Display) {
    println!("{tag} {name}={value}");
    if let Ok(path) = std::env::var("WEBTUNE_NATIVE_LOSSES_OUT") {
        use std::io::Write;
        let line = format!("{name}={value}\n");
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .unwrap_or_else(|e| panic!("WEBTUNE_NATIVE_LOSSES_OUT {path}: {e}"));
        // One write per line: the tests run in threads and append to the same file.
        file.write_all(line.as_bytes()).unwrap_or_else(|e| panic!("WEBTUNE_NATIVE_LOSSES_OUT {path}: {e}"));
    }
}

/// A directory under the system temp dir with a unique name, removed (with its contents) on drop.
#[cfg(not(target_arch = "wasm32"))]
pub struct TempDir(pub std::path::PathBuf);

#[cfg(not(target_arch = "wasm32"))]
impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
        let name =
            format!("webtune-test-{tag}-{}-{}-{nanos}", std::process::id(), COUNTER.fetch_add(1, Ordering::Relaxed));
        let path = std::env::temp_dir().join(name);
        std::fs::create_dir_all(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        TempDir(path)
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }

    pub fn join(&self, p: &str) -> std::path::PathBuf {
        self.0.join(p)
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0); // best effort: a leftover temp dir is harmless
    }
}

/// The tiny model written to a fresh temporary directory.
#[cfg(not(target_arch = "wasm32"))]
pub fn tiny_model_dir(seed: u64) -> TempDir {
    let dir = TempDir::new("model");
    for (name, bytes) in tiny_model_files(seed) {
        let p = dir.join(&name);
        std::fs::write(&p, bytes).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    }
    dir
}
