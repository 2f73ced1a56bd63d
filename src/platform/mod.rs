//! The native/wasm seam, and the only module whose code differs between the two: the clock,
//! driving futures and the device's map callbacks, which GPU backends to ask for, the process's
//! memory gauges, durable file writes, and the attribute that stamps a sync test for both runtimes
//! (GPU tests are stamped by `gpu_test!`, which lives with the kernels' test device).
//! `native.rs` and `web.rs` implement the same functions with the same signatures; exactly one of
//! them is compiled. Elsewhere `cfg(target_arch)` only marks a whole item that exists on one
//! side alone (the CLI, the directory store, IndexedDB, the wasm API), which
//! `tests/layering.rs` checks.

#[cfg(not(target_arch = "wasm32"))]
mod native;
#[cfg(not(target_arch = "wasm32"))]
pub use native::*;

#[cfg(target_arch = "wasm32")]
mod web;
#[cfg(target_arch = "wasm32")]
pub use web::*;

/// `#[test]` natively and `#[wasm_bindgen_test]` in the browser: a sync test module writes
/// `use crate::platform::test;` and its `#[test]` functions run under both `cargo test` and
/// `wasm-pack test`.
#[cfg(all(test, not(target_arch = "wasm32")))]
pub use core::prelude::v1::test;
#[cfg(all(test, target_arch = "wasm32"))]
pub use wasm_bindgen_test::wasm_bindgen_test as test;
