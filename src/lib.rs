//! webtune: LoRA fine-tuning of Qwen2 and Llama models on WebGPU, natively and in
//! the browser, with exact hand-written gradients and the MeSP memory schedule.

pub mod bench;
pub mod config;
pub mod data;
pub mod error;
pub mod formats;
pub mod generate;
pub mod gpu;
pub mod grad;
pub mod kernels;
pub mod model;
pub mod rng;
pub mod runtime;
pub mod store;
pub mod train;
#[cfg(target_arch = "wasm32")]
pub mod wasm;

#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
