//! Benchmarks: `webtune bench kernels` (single kernels at real shapes) and `webtune bench`
//! (training steps of each memory schedule, peak memory by category).

pub mod kernels;
pub mod train;

pub use kernels::{bench_matmuls, bench_ops, KernelTiming};
