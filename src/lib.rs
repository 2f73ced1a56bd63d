//! webtune: LoRA fine-tuning of Qwen2 and Llama models on WebGPU, natively and in
//! the browser, with exact hand-written gradients and the MeSP memory schedule.
//!
//! The modules are layers, listed here from the bottom up; a module uses only those above it
//! in this list (`tests/layering.rs` reads every `use crate::` and fails on an edge that
//! points the other way):
//!
//! ```text
//! platform            the native/wasm seam: clock, blocking, memory gauges, test stamping
//! base                errors, config, dtypes, host tensors, every name, the seeded RNG
//! formats             checkpoint, safetensors, PEFT, batch JSON, GGUF (bytes in and out)
//! data                tokenizer, chat templates, datasets
//! gpu                 device, accounted tensors, uploads, pipelines, dispatch, readback
//! kernels             one op per file, WGSL beside it, forward and backward
//! model               weights on the GPU, LoRA, the block and MeSP backward, the loss;
//!                     the weight-source seam (WeightSource, Fetch, LoadStep)
//! store               the chunk store (directory, memory, IndexedDB) implementing that seam
//! import              files, HTTP, Blobs, GGUF views into the store, resumably
//! train   generate    the trainer and optimizers; sampling with a KV cache
//! runtime bench       the engine the browser drives; the benchmarks
//! wasm    cli         the wasm-bindgen API; the native command line
//! ```

pub mod platform;

pub mod base;

pub mod formats;

pub mod data;

pub mod gpu;

pub mod kernels;

pub mod model;

pub mod store;

pub mod import;

pub mod generate;
pub mod train;

pub mod bench;
pub mod runtime;

#[cfg(target_arch = "wasm32")]
pub mod wasm;

#[cfg(all(test, target_arch = "wasm32"))]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);
