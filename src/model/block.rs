//! One decoder block: forward, and the MeSP backward.
//!
//! Forward (HF Qwen2/Llama):
//!   xn1 = rmsnorm(x); q,k,v = LoRA-linear(xn1); rope(q, k); o = attn(q, k, v)
//!   h = x + LoRA-linear_o(o); xn2 = rmsnorm(h); m = silu(gate(xn2)) · up(xn2); y = h + down(m)
//!
//! MeSP: during training only the block input x is kept (a checkpoint). The
//! backward recomputes the block forward from x, keeping the intermediates
//! ([`Saved`]), then walks back through them, dropping each as soon as its
//! last use is recorded. LoRA's h = x·Aᵀ is never kept from the step's forward: the
//! backward's recomputed forward makes it again (q, k and v's in one dispatch, gate and up's in
//! another: [`SharedH`]) and hands it to [`lora_linear_backward`] (r ≪ in makes that cheap);
//! down's, whose input m is only recomputed there, is made in its backward.

use crate::base::config::ModelConfig;
use crate::base::error::Result;
use crate::base::names::Proj;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::attention::{attention_backward, attention_forward, AttnShape};
use crate::kernels::elementwise::axpy;
use crate::kernels::rmsnorm::{rmsnorm_backward, rmsnorm_forward, rmsnorm_residual_forward};
use crate::kernels::rope::{rope_qk_backward, rope_qk_forward, RopeTable};
use crate::kernels::swiglu::{swiglu_backward, swiglu_forward};
use crate::model::lora::LoraPair;
use crate::model::lora_linear::{act, lora_linear_backward, SharedH};
use crate::model::weights::LayerWeights;

/// Everything a block needs besides its weights.
pub struct BlockCtx<'a> {
    pub cfg: &'a ModelConfig,
    pub attn: AttnShape,
    pub rope: &'a RopeTable,
    /// mask: (B*T) u32, 1 = token, 0 = padding; None when there is no padding
    pub mask: Option<&'a Tensor>,
    /// LoRA scale s = alpha / r
    pub scale: f32,
    /// MeSP's MLP backward runs over this many tokens at a time (0 = all at once), so the
    /// (tokens, intermediate) tensors it recomputes stay small at any sequence length.
    pub mlp_chunk_rows: usize,
}

impl BlockCtx<'_> {
    fn rows(&self) -> usize {
        self.attn.batch * self.attn.seq
    }
}

/// The intermediates of one block that its backward reads (all (N, ·) f32).
pub struct Saved {
    pub xn1: Tensor,   // (N, C) rmsnorm(x)
    pub rstd1: Tensor, // (N)
    pub q: Tensor,     // (N, Hq*D) after RoPE
    pub k: Tensor,     // (N, Hkv*D) after RoPE
    pub v: Tensor,     // (N, Hkv*D)
    pub o: Tensor,     // (N, Hq*D) attention output
    pub lse: Tensor,   // (B*Hq*T) attention log-sum-exp
    pub h: Tensor,     // (N, C) residual after attention
    pub xn2: Tensor,   // (N, C) rmsnorm(h)
    pub rstd2: Tensor, // (N)
    pub g: Tensor,     // (N, F) gate
    pub u: Tensor,     // (N, F) up
    pub m: Tensor,     // (N, F) silu(g)·u
    /// LoRA h = x·Aᵀ per projection (N, r), kept only by MeBP and full (autograd's choice).
    pub hs: Vec<Option<Tensor>>,
}

/// Which intermediates live how long: the three schedules the benchmark compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Mode {
    #[default]
    /// Block-input checkpoints; the backward recomputes the block, recomputes LoRA's h, and
    /// drops each intermediate after its last use.
    Mesp,
    /// The same checkpoints, but the recompute keeps h and every intermediate of the block
    /// until the block's backward ends (autograd's behaviour inside a checkpointed block).
    Mebp,
    /// No checkpointing: every block's intermediates (and h) are kept from forward to backward.
    Full,
}

impl std::str::FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mode, String> {
        match s.to_ascii_lowercase().as_str() {
            "mesp" => Ok(Mode::Mesp),
            "mebp" => Ok(Mode::Mebp),
            "full" => Ok(Mode::Full),
            _ => Err(format!("unknown mode {s:?} (mesp, mebp, full)")),
        }
    }
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Mesp => "mesp",
            Mode::Mebp => "mebp",
            Mode::Full => "full",
        }
    }
}

type LoraRow<'a> = Option<&'a [Option<LoraPair>]>;

/// y = block(x). With `keep`, also returns the intermediates for the backward
/// (with LoRA's h too when `keep_h`).
pub fn block_forward(
    gpu: &Gpu,
    ctx: &BlockCtx,
    w: &LayerWeights,
    lora: LoraRow,
    x: &Tensor,
    keep: bool,
) -> Result<(Tensor, Option<Saved>)> {
    block_forward_keep(gpu, ctx, w, lora, x, keep, false)
}

/// [`block_forward`] with the choice of keeping LoRA's h.
pub fn block_forward_keep(
    gpu: &Gpu,
    ctx: &BlockCtx,
    w: &LayerWeights,
    lora: LoraRow,
    x: &Tensor,
    keep: bool,
    keep_h: bool,
) -> Result<(Tensor, Option<Saved>)> {
    let mut hs: Vec<Option<Tensor>> = (0..7).map(|_| None).collect();
    let shared = SharedH::new(lora);
    let mut lin = |xin: &Tensor, p: Proj, y: &Tensor| -> Result<()> {
        hs[p as usize] = shared.forward(gpu, xin, w.linear(p), p, ctx.scale, y, keep && keep_h)?;
        Ok(())
    };
    let cfg = ctx.cfg;
    let (n, c, f) = (ctx.rows(), cfg.hidden, cfg.intermediate);

    let AttnHalf { xn1, rstd1, q, k, v, o, lse, h, xn2, rstd2 } = attn_half(gpu, ctx, w, &mut lin, x)?;
    let (g, u) = (act(gpu, &[n, f])?, act(gpu, &[n, f])?);
    lin(&xn2, Proj::Gate, &g)?;
    lin(&xn2, Proj::Up, &u)?;
    let m = act(gpu, &[n, f])?;
    swiglu_forward(gpu, &g, &u, &m);
    let y = act(gpu, &[n, c])?;
    lin(&m, Proj::Down, &y)?;
    axpy(gpu, 1.0, &h, &y);
    let saved = keep.then_some(Saved { xn1, rstd1, q, k, v, o, lse, h, xn2, rstd2, g, u, m, hs });
    Ok((y, saved))
}

/// y = block(x) keeping nothing: each intermediate is dropped after its last use and the MLP
/// runs over `ctx.mlp_chunk_rows` tokens at a time (0 = all at once), so the forward of a
/// checkpointed step never holds a whole (tokens, intermediate) tensor. Same values as
/// [`block_forward`] (every kernel computes a row the same way whatever the row count).
pub fn block_forward_lean(gpu: &Gpu, ctx: &BlockCtx, w: &LayerWeights, lora: LoraRow, x: &Tensor) -> Result<Tensor> {
    let cfg = ctx.cfg;
    let (n, c, f) = (ctx.rows(), cfg.hidden, cfg.intermediate);
    let (qd, kvd) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
    let eps = cfg.rms_norm_eps as f32;
    let shared = SharedH::new(lora);
    let lin =
        |xin: &Tensor, p: Proj, y: &Tensor| shared.forward(gpu, xin, w.linear(p), p, ctx.scale, y, false).map(drop);
    let (q, k, v) = (act(gpu, &[n, qd])?, act(gpu, &[n, kvd])?, act(gpu, &[n, kvd])?);
    {
        let xn1 = act(gpu, &[n, c])?;
        let rstd1 = act(gpu, &[n])?;
        rmsnorm_forward(gpu, x, &w.input_norm, eps, &xn1, &rstd1);
        lin(&xn1, Proj::Q, &q)?;
        lin(&xn1, Proj::K, &k)?;
        lin(&xn1, Proj::V, &v)?;
    }
    rope_qk_forward(gpu, &q, &k, cfg.heads, cfg.kv_heads, ctx.rope);
    let o = act(gpu, &[n, qd])?;
    {
        let lse = gpu.zeros(&[ctx.attn.batch * cfg.heads * ctx.attn.seq], DType::F32, Category::Activations)?;
        attention_forward(gpu, &ctx.attn, &q, &k, &v, ctx.mask, &o, &lse);
    }
    drop((q, k, v));
    let h = act(gpu, &[n, c])?;
    lin(&o, Proj::O, &h)?;
    drop(o);
    let rows = balanced_chunk_rows(n, ctx.mlp_chunk_rows);
    // The residual h += x: with the norm after it in one dispatch when the MLP is one chunk.
    let whole = rows >= n;
    if !whole {
        axpy(gpu, 1.0, x, &h);
    }
    // y = h + down(m), added into h itself (or into each chunk's copy of its rows of h, then
    // copied into y): h is not needed after the MLP.
    let y = if whole { None } else { Some(act(gpu, &[n, c])?) };
    let mut t0 = 0;
    while t0 < n {
        let r = rows.min(n - t0);
        let h_c = if r == n {
            None
        } else {
            let hc = act(gpu, &[r, c])?;
            crate::kernels::elementwise::copy_rows(gpu, &h, t0, &hc, 0, r);
            Some(hc)
        };
        let h_c = h_c.as_ref().unwrap_or(&h);
        let m = act(gpu, &[r, f])?;
        {
            let xn2 = act(gpu, &[r, c])?;
            let rstd2 = act(gpu, &[r])?;
            if whole {
                rmsnorm_residual_forward(gpu, h_c, x, &w.post_norm, eps, &xn2, &rstd2);
            } else {
                rmsnorm_forward(gpu, h_c, &w.post_norm, eps, &xn2, &rstd2);
            }
            let (g, u) = (act(gpu, &[r, f])?, act(gpu, &[r, f])?);
            lin(&xn2, Proj::Gate, &g)?;
            lin(&xn2, Proj::Up, &u)?;
            swiglu_forward(gpu, &g, &u, &m);
        }
        shared.forward_add(gpu, &m, w.linear(Proj::Down), Proj::Down, ctx.scale, h_c)?;
        drop(m);
        if let Some(y) = &y {
            crate::kernels::elementwise::copy_rows(gpu, h_c, 0, y, t0, r);
        }
        t0 += r;
    }
    Ok(y.unwrap_or(h))
}

/// Rows per chunk when `n` rows are split into chunks of at most `max` (0 = one chunk): as few
/// chunks as that allows, of equal size rounded up to the largest multiple of 32, 16 or 8 (the
/// products' row tiles) that still fits, so no chunk is a thin remainder and no tile runs past
/// a chunk's end (256 tokens with at most 107 rows a chunk: chunks of 96, 96 and 64 rows, not
/// 88, 88 and 80, which 16-row tiles computed as 96, 96 and 80).
fn balanced_chunk_rows(n: usize, max: usize) -> usize {
    if max == 0 || max >= n {
        return n.max(1);
    }
    let rows = n.div_ceil(n.div_ceil(max));
    [32, 16, 8].into_iter().map(|tile| rows.div_ceil(tile) * tile).find(|&t| t <= max).unwrap_or(rows)
}

/// The block's first half, kept for the backward: everything up to xn2 = rmsnorm(h).
struct AttnHalf {
    xn1: Tensor,
    rstd1: Tensor,
    q: Tensor,
    k: Tensor,
    v: Tensor,
    o: Tensor,
    lse: Tensor,
    h: Tensor,
    xn2: Tensor,
    rstd2: Tensor,
}

/// xn1 = rmsnorm(x); q, k, v; RoPE; attention; h = x + o_proj(o); xn2 = rmsnorm(h).
fn attn_half(
    gpu: &Gpu,
    ctx: &BlockCtx,
    w: &LayerWeights,
    lin: &mut dyn FnMut(&Tensor, Proj, &Tensor) -> Result<()>,
    x: &Tensor,
) -> Result<AttnHalf> {
    let cfg = ctx.cfg;
    let (n, c) = (ctx.rows(), cfg.hidden);
    let (qd, kvd) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
    let xn1 = act(gpu, &[n, c])?;
    let rstd1 = act(gpu, &[n])?;
    rmsnorm_forward(gpu, x, &w.input_norm, cfg.rms_norm_eps as f32, &xn1, &rstd1);
    let (q, k, v) = (act(gpu, &[n, qd])?, act(gpu, &[n, kvd])?, act(gpu, &[n, kvd])?);
    lin(&xn1, Proj::Q, &q)?;
    lin(&xn1, Proj::K, &k)?;
    lin(&xn1, Proj::V, &v)?;
    rope_qk_forward(gpu, &q, &k, cfg.heads, cfg.kv_heads, ctx.rope);
    let o = act(gpu, &[n, qd])?;
    let lse = gpu.zeros(&[ctx.attn.batch * cfg.heads * ctx.attn.seq], DType::F32, Category::Activations)?;
    attention_forward(gpu, &ctx.attn, &q, &k, &v, ctx.mask, &o, &lse);

    let h = act(gpu, &[n, c])?;
    lin(&o, Proj::O, &h)?;
    let xn2 = act(gpu, &[n, c])?;
    let rstd2 = act(gpu, &[n])?;
    // h += x, then xn2 = rmsnorm(h), in one dispatch.
    rmsnorm_residual_forward(gpu, &h, x, &w.post_norm, cfg.rms_norm_eps as f32, &xn2, &rstd2);
    Ok(AttnHalf { xn1, rstd1, q, k, v, o, lse, h, xn2, rstd2 })
}

/// Backward of one block: dx given dy (consumed: its buffer becomes dx). LoRA gradients are
/// accumulated (+=) into `grads`. `saved` brings the block's intermediates from the forward
/// (full mode); otherwise they are recomputed from the checkpoint `x` (MeSP, MeBP).
///
/// MeSP recomputes only the attention half (up to xn2) and then runs the MLP backward over
/// [`BlockCtx::mlp_chunk_rows`] tokens at a time, recomputing gate, up and their product per
/// chunk, so no (tokens, intermediate) tensor is ever whole; it drops each intermediate after
/// its last use. MeBP and full hold the whole block's intermediates (and LoRA's h) until the
/// block's backward ends, as autograd does.
#[allow(clippy::too_many_arguments)]
pub fn block_backward(
    gpu: &Gpu,
    ctx: &BlockCtx,
    mode: Mode,
    w: &LayerWeights,
    lora: &[Option<LoraPair>],
    grads: &[Option<LoraPair>],
    x: &Tensor,
    dy: Tensor,
    saved: Option<Saved>,
) -> Result<Tensor> {
    let cfg = ctx.cfg;
    let (n, c, f) = (ctx.rows(), cfg.hidden, cfg.intermediate);
    let (qd, kvd) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
    let s = ctx.scale;
    let both = |p: Proj| match (&lora[p as usize], &grads[p as usize]) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    // MeSP frees as it goes; MeBP and full keep everything until the block is done.
    let mut held: Vec<Tensor> = Vec::new();
    let mut release = |ts: Vec<Tensor>| {
        if mode != Mode::Mesp {
            held.extend(ts);
        }
    };
    let dxn2 = act(gpu, &[n, c])?;
    let (half, hs) = if mode == Mode::Mesp && saved.is_none() {
        // The recomputed forward's h of q, k, v and o serve their backward too (not computed a
        // third time): h is still never kept from the step's forward.
        let shared = SharedH::new(Some(lora));
        let mut hs: Vec<Option<Tensor>> = (0..7).map(|_| None).collect();
        let half = {
            let mut lin = |xin: &Tensor, p: Proj, y: &Tensor| -> Result<()> {
                hs[p as usize] = shared.forward(gpu, xin, w.linear(p), p, s, y, true)?;
                Ok(())
            };
            attn_half(gpu, ctx, w, &mut lin, x)?
        };
        mlp_backward_chunked(gpu, ctx, w, lora, grads, &half.xn2, &dy, &dxn2)?;
        (half, hs)
    } else {
        let saved = match saved {
            Some(sv) => sv,
            None => block_forward_keep(gpu, ctx, w, Some(lora), x, true, mode != Mode::Mesp)?
                .1
                .ok_or_else(|| crate::base::error::Error::msg("block_forward kept nothing"))?,
        };
        let Saved { xn1, rstd1, q, k, v, o, lse, h, xn2, rstd2, g, u, m, hs } = saved;
        let hp = |p: Proj| hs[p as usize].as_ref();
        // MLP: y = h + down(silu(g)·u)
        let dm = act(gpu, &[n, f])?;
        lora_linear_backward(gpu, &dy, &m, w.linear(Proj::Down), both(Proj::Down), s, &dm, 0.0, hp(Proj::Down))?;
        release(vec![m]);
        let (dg, du) = (act(gpu, &[n, f])?, act(gpu, &[n, f])?);
        swiglu_backward(gpu, &dm, &g, &u, &dg, &du);
        release(vec![dm, g, u]);
        lora_linear_backward(gpu, &dg, &xn2, w.linear(Proj::Gate), both(Proj::Gate), s, &dxn2, 0.0, hp(Proj::Gate))?;
        lora_linear_backward(gpu, &du, &xn2, w.linear(Proj::Up), both(Proj::Up), s, &dxn2, 1.0, hp(Proj::Up))?;
        release(vec![dg, du]);
        (AttnHalf { xn1, rstd1, q, k, v, o, lse, h, xn2, rstd2 }, hs)
    };
    let hp = |p: Proj| hs.get(p as usize).and_then(|h| h.as_ref());
    let AttnHalf { xn1, rstd1, q, k, v, o, lse, h, xn2, rstd2 } = half;
    release(vec![xn2]);
    let dh = dy; // dh = dy + rmsnorm'(dxn2)
    rmsnorm_backward(gpu, &dxn2, &h, &w.post_norm, &rstd2, &dh, 1.0);
    release(vec![dxn2, h, rstd2]);

    // Attention: h = x + o_proj(attn(rope(q), rope(k), v))
    let d_o = act(gpu, &[n, qd])?;
    lora_linear_backward(gpu, &dh, &o, w.linear(Proj::O), both(Proj::O), s, &d_o, 0.0, hp(Proj::O))?;
    let (dq, dk, dv) = (act(gpu, &[n, qd])?, act(gpu, &[n, kvd])?, act(gpu, &[n, kvd])?);
    attention_backward(gpu, &ctx.attn, &q, &k, &v, &o, &d_o, &lse, ctx.mask, &dq, &dk, &dv)?;
    release(vec![q, k, v, o, d_o, lse]);
    rope_qk_backward(gpu, &dq, &dk, cfg.heads, cfg.kv_heads, ctx.rope);
    let dxn1 = act(gpu, &[n, c])?;
    lora_linear_backward(gpu, &dq, &xn1, w.linear(Proj::Q), both(Proj::Q), s, &dxn1, 0.0, hp(Proj::Q))?;
    lora_linear_backward(gpu, &dk, &xn1, w.linear(Proj::K), both(Proj::K), s, &dxn1, 1.0, hp(Proj::K))?;
    lora_linear_backward(gpu, &dv, &xn1, w.linear(Proj::V), both(Proj::V), s, &dxn1, 1.0, hp(Proj::V))?;
    release(vec![dq, dk, dv, xn1]);
    let dx = dh; // dx = dh + rmsnorm'(dxn1)
    rmsnorm_backward(gpu, &dxn1, x, &w.input_norm, &rstd1, &dx, 1.0);
    drop(held);
    Ok(dx)
}

/// MeSP's MLP backward, `ctx.mlp_chunk_rows` tokens at a time: per chunk, recompute
/// g = gate(xn2), u = up(xn2), m = silu(g)·u, then dm = dy·W_down (+ LoRA), the SwiGLU backward
/// and dxn2 = dg·W_gate + du·W_up (+ LoRA), written into its rows of `dxn2`. LoRA gradients
/// are sums over tokens, so accumulating them chunk by chunk gives the same result.
#[allow(clippy::too_many_arguments)]
fn mlp_backward_chunked(
    gpu: &Gpu,
    ctx: &BlockCtx,
    w: &LayerWeights,
    lora: &[Option<LoraPair>],
    grads: &[Option<LoraPair>],
    xn2: &Tensor,
    dy: &Tensor,
    dxn2: &Tensor,
) -> Result<()> {
    let (n, c, f) = (ctx.rows(), ctx.cfg.hidden, ctx.cfg.intermediate);
    let s = ctx.scale;
    let both = |p: Proj| match (&lora[p as usize], &grads[p as usize]) {
        (Some(a), Some(b)) => Some((a, b)),
        _ => None,
    };
    let rows = balanced_chunk_rows(n, ctx.mlp_chunk_rows);
    let whole = rows == n;
    let (mut xc, mut dyc, mut dxc) = (None, None, None);
    let mut t0 = 0;
    while t0 < n {
        let r = rows.min(n - t0);
        // Views of this chunk's rows: the tensors themselves when there is one chunk.
        let (x_c, dy_c, dx_c) = if whole {
            (xn2, dy, dxn2)
        } else {
            if xc.as_ref().is_none_or(|t: &Tensor| t.rows() != r) {
                xc = Some(act(gpu, &[r, c])?);
                dyc = Some(act(gpu, &[r, c])?);
                dxc = Some(act(gpu, &[r, c])?);
            }
            let (a, b, d) = (xc.as_ref().unwrap_or(xn2), dyc.as_ref().unwrap_or(dy), dxc.as_ref().unwrap_or(dxn2));
            crate::kernels::elementwise::copy_rows(gpu, xn2, t0, a, 0, r);
            crate::kernels::elementwise::copy_rows(gpu, dy, t0, b, 0, r);
            (a, b, d)
        };
        // The chunk's recomputed h of gate and up serve their backward below too.
        let shared = SharedH::new(Some(lora));
        let lin = |p: Proj, y: &Tensor| shared.forward(gpu, x_c, w.linear(p), p, s, y, true);
        let (g, u) = (act(gpu, &[r, f])?, act(gpu, &[r, f])?);
        let h_gate = lin(Proj::Gate, &g)?;
        let h_up = lin(Proj::Up, &u)?;
        let m = act(gpu, &[r, f])?;
        swiglu_forward(gpu, &g, &u, &m);
        let dm = act(gpu, &[r, f])?;
        lora_linear_backward(gpu, dy_c, &m, w.linear(Proj::Down), both(Proj::Down), s, &dm, 0.0, None)?;
        drop(m);
        // dg and du overwrite g and u in place would need an aliasing kernel; two fresh buffers.
        let (dg, du) = (act(gpu, &[r, f])?, act(gpu, &[r, f])?);
        swiglu_backward(gpu, &dm, &g, &u, &dg, &du);
        drop((dm, g, u));
        lora_linear_backward(gpu, &dg, x_c, w.linear(Proj::Gate), both(Proj::Gate), s, dx_c, 0.0, h_gate.as_ref())?;
        drop(dg);
        lora_linear_backward(gpu, &du, x_c, w.linear(Proj::Up), both(Proj::Up), s, dx_c, 1.0, h_up.as_ref())?;
        drop(du);
        if !whole {
            crate::kernels::elementwise::copy_rows(gpu, dx_c, 0, dxn2, t0, r);
        }
        t0 += r;
    }
    Ok(())
}

#[cfg(test)]
mod chunk_tests {
    use super::balanced_chunk_rows;

    #[test]
    fn chunks_are_few_equal_and_tiled() {
        // (n, max) -> rows per chunk
        for (n, max, want) in [
            (256, 107, 96),
            (256, 0, 256),
            (256, 256, 256),
            (200, 107, 104),
            (256, 341, 256),
            (20, 7, 7),
            (5, 3, 3),
            (64, 8, 8),
        ] {
            let rows = balanced_chunk_rows(n, max);
            assert_eq!(rows, want, "n {n} max {max}");
            if max > 0 {
                assert!(rows <= max || max >= n, "n {n} max {max}: {rows} rows over the most");
                // no more chunks than the fewest chunks of at most `max` rows
                assert_eq!(n.div_ceil(rows), n.div_ceil(max.min(n)), "n {n} max {max}: chunk count");
            }
        }
    }
}
