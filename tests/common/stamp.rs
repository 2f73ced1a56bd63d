//! Writing a test once for both runtimes: natively under `cargo test`, in headless Chromium
//! under `wasm-pack test`. The `cfg(target_arch)` lines this takes live here, not in the tests.
//!
//! - [`test`]: the sync test attribute; a test file writes `use common::test;` and `#[test]`.
//! - [`both!`]: `both!(name, body())` stamps an async test; `body()` is a future, blocked on
//!   natively and awaited in the browser.
//! - [`log!`]: `println!` natively, the browser console (shown by wasm-bindgen-test) in Chromium.
//! - [`IN_BROWSER`]: for a test that does a little less, or checks a little more, in the browser.

/// Whether this is the browser build (wasm32).
pub const IN_BROWSER: bool = cfg!(target_arch = "wasm32");

/// `#[test]` natively and `#[wasm_bindgen_test]` in the browser.
#[cfg(not(target_arch = "wasm32"))]
pub use core::prelude::v1::test;
#[cfg(target_arch = "wasm32")]
pub use wasm_bindgen_test::wasm_bindgen_test as test;

/// `both!(name, future)`: a test `name` that blocks on `future` natively (pollster) and awaits
/// it as an async `wasm_bindgen_test` in the browser.
#[allow(unused_macros)] // a test file takes the ones it needs
macro_rules! both {
    ($name:ident, $body:expr) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[::core::prelude::v1::test]
        fn $name() {
            ::webtune::platform::block_on($body)
        }
        #[cfg(target_arch = "wasm32")]
        #[::wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            $body.await
        }
    };
}

/// `println!` natively; the browser console (shown by wasm-bindgen-test) in Chromium.
#[allow(unused_macros)]
macro_rules! log {
    ($($t:tt)*) => {{
        #[cfg(target_arch = "wasm32")]
        ::wasm_bindgen_test::console_log!($($t)*);
        #[cfg(not(target_arch = "wasm32"))]
        ::std::println!($($t)*);
    }};
}

#[allow(unused_imports)] // a test file takes the ones it needs
pub(crate) use {both, log};
