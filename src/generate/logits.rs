//! The output head of a decode step: the last row's final norm and its logits over the output
//! table (chunk by chunk where the table is chunked), and reading them back.

use super::{act, view};
use crate::base::error::{Error, Result};
use crate::gpu::{Gpu, Tensor};
use crate::kernels::cross_entropy::LoadChunk;
use crate::kernels::elementwise::copy_rows;
use crate::kernels::matmul::matmul_nt;
use crate::kernels::rmsnorm::rmsnorm_forward;
use crate::model::Model;

/// Buffers of the last row's logits.
pub(super) struct LogitsBufs {
    last: Tensor,              // (1, C) last row of the final hidden states
    xn: Tensor,                // (1, C) after the final rmsnorm
    rstd: Tensor,              // (1)
    pub(super) logits: Tensor, // (1, V)
    /// (1, chunk_rows) one vocab chunk's product, when the table has several chunks and they
    /// cannot write into slices of `logits` (a chunk's bytes not a multiple of the device's
    /// storage offset alignment)
    part: Option<Tensor>,
}

impl LogitsBufs {
    pub(super) fn new(gpu: &Gpu, model: &Model) -> Result<LogitsBufs> {
        let c = model.cfg.hidden;
        let (chunks, chunk_rows) = model.output_chunking();
        let sliced = (4 * chunk_rows as u64) % gpu.storage_alignment() == 0;
        Ok(LogitsBufs {
            last: act(gpu, &[1, c])?,
            xn: act(gpu, &[1, c])?,
            rstd: act(gpu, &[1])?,
            logits: act(gpu, &[1, model.cfg.vocab])?,
            part: if chunks > 1 && !sliced { Some(act(gpu, &[1, chunk_rows])?) } else { None },
        })
    }

    /// logits (1, V) of the last row of x (n, C): final rmsnorm of that row, then the output
    /// table chunk by chunk (each chunk's (1, rows) product written into its slice of the
    /// logits, or copied into place where slices cannot be bound; a streamed model's chunks are
    /// uploaded, fetched first where the store needs it, one at a time).
    pub(super) async fn compute(&self, gpu: &Gpu, model: &Model, x: &Tensor) -> Result<()> {
        let cfg = &model.cfg;
        let last = if x.rows() == 1 {
            x
        } else {
            copy_rows(gpu, x, x.rows() - 1, &self.last, 0, 1);
            &self.last
        };
        rmsnorm_forward(gpu, last, &model.weights.norm, cfg.rms_norm_eps as f32, &self.xn, &self.rstd);
        let load: &LoadChunk = &|i| model.output_chunk(gpu, i);
        let table = model.vocab_table(load);
        if table.count() == 1 {
            matmul_nt(gpu, &self.xn, &table.get(0).await?, None, &self.logits, 1.0, 0.0);
            return Ok(());
        }
        let Some(part) = &self.part else {
            let mut v0 = 0;
            for i in 0..table.count() {
                let chunk = table.get(i).await?;
                let rows = chunk.rows();
                let out = self.logits.slice(4 * v0 as u64, 4 * rows as u64, &[1, rows], crate::gpu::DType::F32);
                matmul_nt(gpu, &self.xn, &chunk, None, &out, 1.0, 0.0);
                v0 += rows;
            }
            return Ok(());
        };
        let flat = view(&self.logits, &[cfg.vocab, 1]);
        let mut v0 = 0;
        for i in 0..table.count() {
            let chunk = table.get(i).await?;
            let rows = chunk.rows();
            matmul_nt(gpu, &self.xn, &chunk, None, &view(part, &[1, rows]), 1.0, 0.0);
            copy_rows(gpu, &view(part, &[rows, 1]), 0, &flat, v0, rows);
            v0 += rows;
        }
        Ok(())
    }
}

/// The logits read back, each finite.
pub(super) async fn read_logits(gpu: &Gpu, logits: &Tensor) -> Result<Vec<f32>> {
    let v = gpu.read_f32(logits).await?;
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(overflowed(i, v[i]));
    }
    Ok(v)
}

/// The error for logit i, which is v and not finite.
pub(super) fn overflowed(i: usize, v: f32) -> Error {
    Error::msg(format!("generate: logit {i} is {v} (the forward overflowed)"))
}
