//! Benchmarks: `webtune bench kernels` (single kernels at real shapes), `webtune bench`
//! (training steps of each memory schedule, peak memory by category) and `webtune bench
//! decode` (generation, tokens per second).

pub mod decode;
pub mod kernels;
pub mod train;

pub use kernels::{bench_matmuls, bench_ops, KernelTiming};
