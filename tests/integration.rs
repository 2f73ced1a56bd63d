//! One test binary for the integration tests: each tests/*.rs listed here is a module of it,
//! so the crate (wgpu, naga, tokenizers, ...) is linked once instead of once per file, natively
//! and for the browser, where each binary also costs a wasm-bindgen pass and a Chromium start;
//! in Chromium its GPU tests can share one device (`shared_test_gpu`), so each shader is
//! compiled once for all of them. A test's name is `file::test` (`cargo test --test
//! integration grad_fixtures::`).
//!
//! Two files stay binaries of their own (Cargo.toml): tests/soak.rs, which checks that the
//! process's memory does not grow while it runs, and tests/gguf_import_memory.rs, which counts
//! every heap allocation of its process: other tests running beside them would move both.

#[path = "common/mod.rs"]
mod common;

#[path = "bench_cli.rs"]
mod bench_cli;
#[path = "chunk_store.rs"]
mod chunk_store;
#[path = "fuzz_corpus.rs"]
mod fuzz_corpus;
#[path = "generate.rs"]
mod generate;
#[path = "gguf_smollm2.rs"]
mod gguf_smollm2;
#[path = "grad_fixtures.rs"]
mod grad_fixtures;
#[path = "layering.rs"]
mod layering;
#[path = "memory.rs"]
mod memory;
#[path = "mezo.rs"]
mod mezo;
#[path = "runtime.rs"]
mod runtime;
#[path = "train_browser.rs"]
mod train_browser;
#[path = "train_cli.rs"]
mod train_cli;
