//! The types every layer shares, with no GPU and no I/O: errors ([`error`]), config.json
//! resolved ([`config`]), how weights lie in memory ([`dtype`]) and tensors on the host
//! ([`host`]), the checkpoint's and PEFT's names for everything ([`names`]), the seeded
//! generator ([`rng`]) and byte helpers ([`bytes`]). Each is made in one place here.

pub mod bytes;
pub mod config;
pub mod dtype;
pub mod error;
pub mod host;
pub mod names;
pub mod rng;

/// Label value that takes no loss (PyTorch's `ignore_index`, as transformers uses it).
pub const IGNORE_INDEX: i32 = -100;
