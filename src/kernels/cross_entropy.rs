//! lm_head + cross-entropy, forward and backward, without ever materialising the (N, V) logits.
//!
//! The vocab table E (V, C) comes split by rows into chunks (the weight store's own chunks; a tied
//! model passes the embedding's). Positions are taken in token chunks of at most `token_chunk` rows.
//! For each (token chunk, vocab chunk) pair the logits block x_chunk·E_chunkᵀ is made with
//! [`matmul_nt`] into one scratch of at most `token_chunk × chunk_rows` floats, then an online
//! log-sum-exp folds the block into each row's running (max, sum) and picks the target's logit;
//! after the last vocab chunk it writes lse and the row's loss term, and one small kernel sums
//! the terms into `loss[0]` ([`lm_head_ce_forward`]).
//!
//! The backward comes in the same pass ([`lm_head_ce_forward_backward`]), as flash attention
//! makes its output: dx = (softmax − onehot(target))·E·inv_count = (Σ_v exp(l_v − max)·E_v / sum
//! − E[target])·inv_count, so the log-sum-exp kernel leaves p = exp(l − max) in the block (with
//! the running max), [`matmul_nn`] adds p·E_chunk to a running (tokens, C) sum after rescaling
//! its rows by exp(old max − new max), each target's row of E is gathered from the chunk that
//! holds it, and after the last chunk one kernel divides by the sum and subtracts. Each logits
//! block is made once, not again for the backward (and a streamed table is read once per step,
//! not twice).
//!
//! Sizes: with the defaults ([`DEFAULT_CHUNK_ROWS`] = 8192, [`DEFAULT_TOKEN_CHUNK`] = 1024) the
//! logits scratch is at most 32 MiB, under every device's 128 MiB binding limit, and N ≤ 1024 takes
//! one token chunk (x and dx are then used in place, with no row copies). `token_chunk` is an upper
//! bound: it is lowered if the scratch would not fit one storage binding.

use crate::gpu::{Category, DType, Gpu, GpuError, Tensor};
use crate::kernels::embedding::embedding_chunk;
use crate::kernels::matmul::{matmul_nn, matmul_nt};
use crate::kernels::render;
use futures_util::future::LocalBoxFuture;

const LSE: &str = include_str!("cross_entropy_lse.wgsl");
const SUM: &str = include_str!("cross_entropy_sum.wgsl");
const DX: &str = include_str!("cross_entropy_dx.wgsl");
const ROWS: &str = include_str!("cross_entropy_rows.wgsl");

/// Rows per vocab chunk the weight store should cut the output table into.
pub const DEFAULT_CHUNK_ROWS: usize = 8192;
/// Default bound on tokens per chunk: N ≤ 1024 runs as one chunk, scratch ≤ 1024 × 8192 f32.
pub const DEFAULT_TOKEN_CHUNK: usize = 1024;

/// The output table split by rows (vocab) into chunks: each (rows_i, C), dtype F32/BF16/F16 (packed
/// like matmul's B); every chunk but the last has `chunk_rows` rows. (Tied models pass the
/// embedding's chunks.) The vocab chunking of the loss follows these chunks.
pub struct VocabTable<'a> {
    pub chunks: TableChunks<'a>,
    pub chunk_rows: usize,
    pub vocab: usize,
}

/// A loader of one vocab chunk; async because a streamed table may first have to fetch the
/// chunk's bytes from an async store (IndexedDB).
pub type LoadChunk<'a> = dyn Fn(usize) -> LocalBoxFuture<'a, Result<Tensor, GpuError>> + 'a;

/// Where the chunks come from: resident tensors, or a loader called once per chunk and pass
/// (streamed weights: only the chunk in use is on the GPU).
#[derive(Clone, Copy)]
pub enum TableChunks<'a> {
    Resident(&'a [Tensor]),
    Streamed { count: usize, load: &'a LoadChunk<'a> },
}

impl<'a> From<&'a [Tensor]> for TableChunks<'a> {
    fn from(t: &'a [Tensor]) -> Self {
        TableChunks::Resident(t)
    }
}

impl<'a> From<&'a Vec<Tensor>> for TableChunks<'a> {
    fn from(t: &'a Vec<Tensor>) -> Self {
        TableChunks::Resident(t)
    }
}

impl VocabTable<'_> {
    /// Number of vocab chunks.
    pub fn count(&self) -> usize {
        match self.chunks {
            TableChunks::Resident(t) => t.len(),
            TableChunks::Streamed { count, .. } => count,
        }
    }
    /// Chunk i (loaded now when streamed).
    pub async fn get(&self, i: usize) -> Result<Tensor, GpuError> {
        match self.chunks {
            TableChunks::Resident(t) => Ok(t[i].clone()),
            TableChunks::Streamed { load, .. } => load(i).await,
        }
    }
    /// Rows of chunk i, known without loading it.
    fn rows_of(&self, i: usize) -> usize {
        self.chunk_rows.min(self.vocab - i * self.chunk_rows)
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct LseParams {
    rows: u32,
    cols: u32,
    col0: u32,
    row0: u32,
    vocab: u32,
    first: u32,
    last: u32,
    inv_count: f32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct DxParams {
    n: u32,
    cols: u32,
    row0: u32,
    vocab: u32,
    inv_count: f32,
    finish: u32,
    _p0: u32,
    _p1: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct RowsParams {
    n: u32,
    src_off: u32,
    dst_off: u32,
    beta: f32,
}

/// Shapes shared by forward and backward.
struct Plan {
    n: usize,
    c: usize,
    /// Rows per token chunk (≤ n).
    tc: usize,
    /// Rows of the largest vocab chunk.
    max_rows: usize,
}

fn plan(gpu: &Gpu, x: &Tensor, table: &VocabTable, targets: &Tensor, lse: &Tensor, token_chunk: usize) -> Plan {
    let (n, c) = (x.rows(), x.cols());
    assert!(x.dtype == DType::F32, "lm_head_ce: x must be f32, got {:?}", x.dtype);
    assert!(targets.numel() == n, "lm_head_ce: targets {:?} for x {:?}", targets.shape, x.shape);
    assert!(lse.numel() == n && lse.dtype == DType::F32, "lm_head_ce: lse {:?} for x {:?}", lse.shape, x.shape);
    assert!(table.count() > 0 && table.chunk_rows > 0, "lm_head_ce: empty vocab table");
    assert!(
        table.count() == table.vocab.div_ceil(table.chunk_rows),
        "lm_head_ce: {} chunks of {} rows for vocab {}",
        table.count(),
        table.chunk_rows,
        table.vocab
    );
    if let TableChunks::Resident(chunks) = table.chunks {
        for (i, e) in chunks.iter().enumerate() {
            assert!(
                e.cols() == c && e.rows() == table.rows_of(i),
                "lm_head_ce: vocab chunk {i} {:?} (chunk_rows {}, C {c})",
                e.shape,
                table.chunk_rows
            );
        }
    }
    assert!(table.vocab < i32::MAX as usize, "lm_head_ce: vocab {} too large", table.vocab);
    let max_rows = table.chunk_rows.min(table.vocab);
    // Lower the token chunk until its logits block fits one storage binding.
    let fit = (gpu.max_binding() as usize / (4 * max_rows)).max(1);
    let tc = token_chunk.max(1).min(n.max(1)).min(fit);
    Plan { n, c, tc, max_rows }
}

/// The same buffer seen with another shape (the buffer must be large enough).
fn view(t: &Tensor, shape: &[usize]) -> Tensor {
    let mut v = t.clone();
    v.shape = shape.to_vec();
    v
}

/// Per position lse = logsumexp(x·Eᵀ) and loss[0] = Σ over non-ignored positions of
/// (lse − logit[target])·inv_count, with the full (N, V) logits never existing.
///
/// - x: (N, C) f32, the final normed hidden states of all N = B·T positions.
/// - targets: (N) i32 (uploaded with `gpu.upload_u32` of the bit pattern), already shifted; ids
///   outside [0, V) (−100, or unvalidated ones) are ignored.
/// - inv_count: 1 / number of non-ignored positions, from the caller (pass 0 when there are none).
/// - lse: (N) f32, written. loss: (1) f32, written.
/// - token_chunk: upper bound on tokens per chunk ([`DEFAULT_TOKEN_CHUNK`]); the logits scratch
///   is at most token_chunk × chunk_rows floats.
///
/// Errors only when a scratch buffer cannot be made; shape mismatches panic (caller bugs).
#[allow(clippy::too_many_arguments)]
pub async fn lm_head_ce_forward(
    gpu: &Gpu,
    x: &Tensor,
    table: &VocabTable<'_>,
    targets: &Tensor,
    inv_count: f32,
    lse: &Tensor,
    loss: &Tensor,
    token_chunk: usize,
) -> Result<(), GpuError> {
    one_pass(gpu, x, table, targets, inv_count, lse, loss, None, token_chunk).await
}

/// [`lm_head_ce_forward`] (the same lse and loss, bit for bit) and, in the same pass over the
/// table, dx = beta·dx + dlogits·E with dlogits = (softmax − onehot(target))·inv_count (0 for
/// ignored rows); dx: (N, C) f32 (not read when beta = 0).
#[allow(clippy::too_many_arguments)]
pub async fn lm_head_ce_forward_backward(
    gpu: &Gpu,
    x: &Tensor,
    table: &VocabTable<'_>,
    targets: &Tensor,
    inv_count: f32,
    lse: &Tensor,
    loss: &Tensor,
    dx: &Tensor,
    beta: f32,
    token_chunk: usize,
) -> Result<(), GpuError> {
    one_pass(gpu, x, table, targets, inv_count, lse, loss, Some((dx, beta)), token_chunk).await
}

#[allow(clippy::too_many_arguments)]
async fn one_pass(
    gpu: &Gpu,
    x: &Tensor,
    table: &VocabTable<'_>,
    targets: &Tensor,
    inv_count: f32,
    lse: &Tensor,
    loss: &Tensor,
    dx: Option<(&Tensor, f32)>,
    token_chunk: usize,
) -> Result<(), GpuError> {
    let pl = plan(gpu, x, table, targets, lse, token_chunk);
    assert!(loss.numel() >= 1 && loss.dtype == DType::F32, "lm_head_ce: loss {:?}", loss.shape);
    if let Some((dx, _)) = dx {
        assert!(
            dx.dtype == DType::F32 && dx.rows() == pl.n && dx.cols() == pl.c,
            "lm_head_ce: dx {:?} for x {:?}",
            dx.shape,
            x.shape
        );
    }
    if pl.n == 0 {
        gpu.write_f32(loss, &[0.0]);
        return Ok(());
    }
    let logits = gpu.zeros(&[pl.tc, pl.max_rows], DType::F32, Category::Scratch)?; // (tc, chunk_rows)
    let state = gpu.zeros(&[pl.tc, 4], DType::F32, Category::Scratch)?; // (tc, 4): max, sum, target logit
    let factor = gpu.zeros(&[pl.tc], DType::F32, Category::Scratch)?; // (tc): rescale of the running Σ p·E
    let row_loss = gpu.zeros(&[pl.n], DType::F32, Category::Scratch)?; // (N)
    let chunked = pl.tc < pl.n;
    let xbuf = if chunked { Some(gpu.zeros(&[pl.tc, pl.c], DType::F32, Category::Scratch)?) } else { None };
    // The backward's running sum: dx itself when there is one token chunk and nothing to add to,
    // else a (tc, C) scratch added into dx after each token chunk; and E[target] (tc, C).
    let (acc_buf, et) = match dx {
        Some((_, beta)) => {
            let acc = if chunked || beta != 0.0 {
                Some(gpu.zeros(&[pl.tc, pl.c], DType::F32, Category::Scratch)?)
            } else {
                None
            };
            (acc, Some(gpu.zeros(&[pl.tc, pl.c], DType::F32, Category::Scratch)?))
        }
        None => (None, None),
    };
    let pipeline = gpu.pipeline("cross_entropy_lse", || LSE.to_string());
    let w = if pl.c % 4 == 0 { 4 } else { 1 };
    let dx_pipeline = gpu.pipeline(&format!("cross_entropy_dx/{w}"), || {
        render(DX, &[("ELEM", if w == 4 { "vec4<f32>" } else { "f32" }.into())])
    });
    let last = table.count() - 1;
    for t0 in (0..pl.n).step_by(pl.tc) {
        let nt = pl.tc.min(pl.n - t0);
        let xc = token_rows(gpu, x, xbuf.as_ref(), t0, nt, pl.c);
        let acc = dx.map(|(dx, _)| match &acc_buf {
            Some(b) => view(b, &[nt, pl.c]),
            None => view(dx, &[pl.n, pl.c]),
        });
        let et = et.as_ref().map(|e| view(e, &[nt, pl.c]));
        let dx_step = |acc: &Tensor, et: &Tensor, finish: bool| {
            let p = DxParams {
                n: (nt * pl.c / w) as u32,
                cols: (pl.c / w) as u32,
                row0: t0 as u32,
                vocab: table.vocab as u32,
                inv_count,
                finish: finish as u32,
                _p0: 0,
                _p1: 0,
            };
            let groups = crate::gpu::groups((nt * pl.c / w).div_ceil(64) as u32);
            gpu.dispatch(&dx_pipeline, bytemuck::bytes_of(&p), &[acc, &factor, &state, targets, et], groups);
        };
        let mut v0 = 0;
        for i in 0..table.count() {
            let e = table.get(i).await?;
            let e = &e;
            let rv = e.rows();
            let block = view(&logits, &[nt, rv]);
            matmul_nt(gpu, &xc, e, None, &block, 1.0, 0.0);
            let p = LseParams {
                rows: nt as u32,
                cols: rv as u32,
                col0: v0 as u32,
                row0: t0 as u32,
                vocab: table.vocab as u32,
                first: (i == 0) as u32,
                last: (i == last) as u32,
                inv_count,
            };
            gpu.dispatch(
                &pipeline,
                bytemuck::bytes_of(&p),
                &[&block, targets, &state, lse, &row_loss, &factor],
                crate::gpu::groups(nt as u32),
            );
            if let (Some(acc), Some(et)) = (&acc, &et) {
                if i > 0 {
                    dx_step(acc, et, false);
                }
                embedding_chunk(gpu, e, v0, i == last, targets, t0, et);
                matmul_nn(gpu, &block, e, acc, 1.0, if i == 0 { 0.0 } else { 1.0 });
            }
            v0 += rv;
        }
        if let (Some(acc), Some(et), Some((dx, beta))) = (&acc, &et, dx) {
            dx_step(acc, et, true);
            if acc_buf.is_some() {
                copy_rows(gpu, acc, 0, dx, t0, nt, pl.c, beta);
            }
        }
    }
    let pipeline = gpu.pipeline("cross_entropy_sum", || SUM.to_string());
    let p = [pl.n as u32, 0, 0, 0];
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[&row_loss, loss], (1, 1, 1));
    Ok(())
}

/// x rows t0..t0+nt as an (nt, C) tensor: x itself when there is one token chunk, else a copy
/// into `buf`.
fn token_rows(gpu: &Gpu, x: &Tensor, buf: Option<&Tensor>, t0: usize, nt: usize, c: usize) -> Tensor {
    match buf {
        Some(b) => {
            let v = view(b, &[nt, c]);
            copy_rows(gpu, x, t0, &v, 0, nt, c, 0.0);
            v
        }
        None => view(x, &[nt, c]),
    }
}

/// dst rows dst_row0.. = src rows src_row0.. + beta·dst (rows × C, f32; dst not read when beta = 0).
#[allow(clippy::too_many_arguments)]
fn copy_rows(
    gpu: &Gpu,
    src: &Tensor,
    src_row0: usize,
    dst: &Tensor,
    dst_row0: usize,
    rows: usize,
    c: usize,
    beta: f32,
) {
    let w = if c % 4 == 0 { 4 } else { 1 };
    let key = format!("cross_entropy_rows/{w}");
    let pipeline = gpu.pipeline(&key, || render(ROWS, &[("ELEM", if w == 4 { "vec4<f32>" } else { "f32" }.into())]));
    let p = RowsParams {
        n: (rows * c / w) as u32,
        src_off: (src_row0 * c / w) as u32,
        dst_off: (dst_row0 * c / w) as u32,
        beta,
    };
    let groups = (rows * c / w).div_ceil(4 * 64) as u32;
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[src, dst], (groups, 1, 1));
}

/// f64 references with the full logits, used by the tests.
pub mod reference {
    use crate::kernels::matmul::reference::{nn, nt};

    /// Whether a target id is counted (ids outside [0, V) are ignored).
    pub fn counted(t: i32, vocab: usize) -> bool {
        t >= 0 && (t as usize) < vocab
    }

    /// lse (N) and loss = Σ_counted (lse − logit[target])·inv_count, for logits = x (N, C) · E (V, C)ᵀ.
    pub fn forward(
        x: &[f64],
        e: &[f64],
        targets: &[i32],
        n: usize,
        c: usize,
        v: usize,
        inv_count: f64,
    ) -> (Vec<f64>, f64) {
        let logits = nt(x, e, n, c, v);
        let mut lse = vec![0.0; n];
        let mut loss = 0.0;
        for i in 0..n {
            let row = &logits[i * v..(i + 1) * v];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            lse[i] = m + row.iter().map(|l| (l - m).exp()).sum::<f64>().ln();
            if counted(targets[i], v) {
                loss += (lse[i] - row[targets[i] as usize]) * inv_count;
            }
        }
        (lse, loss)
    }

    /// dx (N, C) = dlogits · E with dlogits = (softmax − onehot(target))·inv_count, 0 for ignored rows.
    pub fn backward(x: &[f64], e: &[f64], targets: &[i32], n: usize, c: usize, v: usize, inv_count: f64) -> Vec<f64> {
        let (lse, _) = forward(x, e, targets, n, c, v, inv_count);
        let mut g = nt(x, e, n, c, v);
        for i in 0..n {
            for j in 0..v {
                let k = i * v + j;
                g[k] = if counted(targets[i], v) {
                    ((g[k] - lse[i]).exp() - if j as i32 == targets[i] { 1.0 } else { 0.0 }) * inv_count
                } else {
                    0.0
                };
            }
        }
        nn(&g, e, n, v, c)
    }
}

#[cfg(test)]
#[path = "cross_entropy_tests.rs"]
mod tests;
