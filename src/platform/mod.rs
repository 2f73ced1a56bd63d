//! The native/wasm seam, and the only module whose code differs between the two: the clock,
//! driving futures and the device's map callbacks, which GPU backends to ask for, the process's
//! memory gauges, durable file writes, and the attribute that stamps a test for both runtimes.
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

/// Write an async GPU test once; it runs natively under `cargo test` (a device on lavapipe)
/// and in the browser under `wasm-pack test` (WebGPU).
///
/// ```ignore
/// gpu_test!(async fn my_test(gpu) { ... });
/// ```
#[macro_export]
macro_rules! gpu_test {
    (async fn $name:ident($gpu:ident) $body:block) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            $crate::platform::block_on(async {
                let $gpu = $crate::kernels::testutil::test_gpu().await;
                let $gpu = &$gpu;
                $body
            })
        }
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            let $gpu = $crate::kernels::testutil::test_gpu().await;
            let $gpu = &$gpu;
            $body
        }
    };
}
