//! Training: the run's configuration, the trainer (batches, accumulation, checkpoints that
//! resume exactly), the optimizers over a LoRA set (AdamW, SGD) with global-norm gradient
//! clipping, and the learning-rate schedules of transformers.

pub mod checkpoint;
pub mod config;
pub mod grad;
pub mod mezo;
pub mod optimizer;
pub mod schedule;
pub mod trainer;
