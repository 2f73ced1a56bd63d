//! Causal grouped-query attention, flash style: nothing of size T×T is ever stored.
//!
//! - [`attention_forward`]: o = softmax(q·kᵀ/√D + mask)·v per (batch, query head), where query
//!   head h reads kv head h / (Hq/Hkv); also writes each query row's log-sum-exp.
//! - [`attention_backward`]: dq, dk, dv from dO, recomputing the probabilities key by key from
//!   q, k and the saved lse (three dispatches: delta = rowsum(dO∘O), dq, then dk/dv).
//!
//! Forward saves only lse (B·Hq·T floats) for backward: with it, P = exp(s − lse) is exact
//! without a second softmax pass, and backward needs O(B·Hq·T) scratch.
//!
//! Each WGSL kernel is instantiated for one head size D (vec4 loads when D % 4 == 0, scalar
//! otherwise), a number of rows per invocation and a workgroup size, all in the pipeline cache
//! key; its loops over rows and over D are unrolled by [`unroll`] before compilation. The
//! forward, dq and dk/dv templates each make two kernels ([`sections`]): untiled, and with
//! workgroup-memory tiles for GPUs; a row's arithmetic is written once and shared by both.

use crate::gpu::Kernel;
use crate::gpu::{groups, Category, DType, Gpu, GpuError, Tensor};
use crate::kernels::{render, sections};
use std::sync::Arc;

const FWD: &str = include_str!("attention_fwd.wgsl");
const BWD_DELTA: &str = include_str!("attention_bwd_delta.wgsl");
const BWD_DQ: &str = include_str!("attention_bwd_dq.wgsl");
const BWD_DKDV: &str = include_str!("attention_bwd_dkdv.wgsl");
/// Parts of FWD and BWD_DQ: the query rows an invocation takes, and the walk over their keys.
const ROWS: &str = include_str!("attention_rows.wgsl");
const KEYS: &str = include_str!("attention_keys.wgsl");

/// How the kernels split the work: rows per invocation (query rows in the forward and dq
/// kernels, key rows in the dk/dv kernel), invocations per workgroup, and whether the rows a
/// workgroup streams (keys in the forward and dq, query rows in dk/dv) pass through
/// workgroup-memory tiles of at most `tile` rows (0: each invocation reads them from storage).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    pub fwd: usize,
    pub dq: usize,
    pub dkdv: usize,
    pub wg: usize,
    pub tile: usize,
}

impl Tuning {
    /// "r8.8.4w16": rows per invocation of the forward, dq and dk/dv kernels, and the workgroup;
    /// "r1.1.1w64t32" with tiles of at most 32 rows.
    pub fn name(self) -> String {
        let tile = if self.tile > 0 { format!("t{}", self.tile) } else { String::new() };
        format!("r{}.{}.{}w{}{tile}", self.fwd, self.dq, self.dkdv, self.wg)
    }
    pub fn parse(s: &str) -> Option<Tuning> {
        VARIANTS.into_iter().find(|t| t.name() == s)
    }
}

/// The key of attention's variant in the device's kernel choices.
pub const CHOICE: &str = "attention";

/// The tunings offered to the autotune: [`TUNING`] (the reference, for CPU emulators), one
/// row per invocation in small and larger workgroups, which gives a GPU 4–8 times the
/// invocations to spread over its cores, and the same with workgroup-memory tiles (a GPU's
/// invocations then share each k, v, q and dO row they load; a CPU adapter gains nothing from
/// that, so [`candidates`] leaves them out there). The arithmetic of a row does not depend on
/// the tuning, so all give the same results.
pub const VARIANTS: [Tuning; 6] = [
    TUNING,
    Tuning { fwd: 1, dq: 1, dkdv: 1, wg: 16, tile: 0 },
    Tuning { fwd: 1, dq: 1, dkdv: 1, wg: 64, tile: 0 },
    Tuning { fwd: 2, dq: 2, dkdv: 1, wg: 32, tile: 0 },
    Tuning { fwd: 1, dq: 1, dkdv: 1, wg: 64, tile: 32 },
    Tuning { fwd: 2, dq: 2, dkdv: 2, wg: 32, tile: 32 },
];

/// The tunings the autotune times on this device: every one of [`VARIANTS`], but on a CPU
/// adapter (lavapipe, SwiftShader) not the tiled ones, whose loads from workgroup memory cost
/// there what loads from storage cost (the tests still run them everywhere).
pub fn candidates(gpu: &Gpu) -> Vec<Tuning> {
    VARIANTS.into_iter().filter(|t| t.tile == 0 || !gpu.info.cpu).collect()
}

/// The tuning this device runs.
pub fn tuning_of(gpu: &Gpu) -> Tuning {
    gpu.choice(CHOICE).and_then(|s| Tuning::parse(&s)).unwrap_or(TUNING)
}

/// Measured on lavapipe (see `attention_bench`): 8 rows per invocation reuse each loaded k, v,
/// q or dO vector 8 times (1 row is ~4x slower, 16 no faster); the dk/dv kernel is as fast with
/// 4 and then has twice the invocations (B·Hkv·T/4), and 16-invocation workgroups leave
/// lavapipe's threads enough workgroups to share. Real GPUs would want fewer rows (each
/// invocation holds 3-4 × rows × D floats) or workgroup-memory tiles: not measured yet.
const TUNING: Tuning = Tuning { fwd: 8, dq: 8, dkdv: 4, wg: 16, tile: 0 };

/// Sizes of one attention call. q holds `heads` heads and k, v hold `kv_heads`, each of `head_dim`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttnShape {
    pub batch: usize,
    pub seq: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl AttnShape {
    fn check(&self) {
        assert!(
            self.kv_heads > 0 && self.head_dim > 0 && self.heads % self.kv_heads == 0,
            "attention: heads {} must be a positive multiple of kv_heads {} and head_dim {} positive",
            self.heads,
            self.kv_heads,
            self.head_dim
        );
    }
    fn q_len(&self) -> usize {
        self.batch * self.seq * self.heads * self.head_dim
    }
    fn kv_len(&self) -> usize {
        self.batch * self.seq * self.kv_heads * self.head_dim
    }
    fn rows(&self) -> usize {
        self.batch * self.heads * self.seq
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    b: u32,
    t: u32,
    h: u32,
    hkv: u32,
    g: u32,
    has_mask: u32,
    scale: f32,
    nblk: u32,
}

fn params(s: &AttnShape, has_mask: bool, rows: usize) -> Params {
    Params {
        b: s.batch as u32,
        t: s.seq as u32,
        h: s.heads as u32,
        hkv: s.kv_heads as u32,
        g: (s.heads / s.kv_heads) as u32,
        has_mask: has_mask as u32,
        scale: 1.0 / (s.head_dim as f32).sqrt(),
        nblk: s.seq.div_ceil(rows) as u32,
    }
}

/// Render one kernel for head size `d`, `rows` rows per invocation and `wg` invocations per
/// workgroup, with `tile` rows per workgroup-memory tile (0: the untiled kernel).
fn pipeline(gpu: &Gpu, name: &str, src: &'static str, d: usize, rows: usize, wg: usize, tile: usize) -> Arc<Kernel> {
    let vec = d % 4 == 0;
    let key = if tile > 0 {
        format!("attention_{name}_tiled/{d}/{rows}/{wg}/t{tile}")
    } else {
        format!("attention_{name}/{d}/{rows}/{wg}")
    };
    gpu.pipeline(&key, || {
        let n = if vec { d / 4 } else { d };
        let (ks, vs, qs, gs) = if tile > 0 { ("kt", "vt", "qt", "gt") } else { ("k", "v", "q", "d_o") };
        unroll(&render(
            &kernel_of(src, tile > 0),
            &[
                ("KS", ks.into()),
                ("VS", vs.into()),
                ("QS", qs.into()),
                ("GS", gs.into()),
                ("V", if vec { "vec4<f32>" } else { "f32" }.into()),
                ("DOT", if vec { "return dot(a, b);" } else { "return a * b;" }.into()),
                ("N", n.to_string()),
                ("R", rows.to_string()),
                ("RN", (rows * n).to_string()),
                ("WG", wg.to_string()),
                ("TK", tile.to_string()),
                ("TKN", (tile * n).to_string()),
            ],
        ))
    })
}

/// The untiled or the tiled kernel of a template (its `//#tiled` or `//#untiled` sections,
/// [`sections`]), its shared parts put in.
fn kernel_of(src: &str, tiled: bool) -> String {
    let on = if tiled { "tiled" } else { "untiled" };
    sections(&render(src, &[("ROWS", ROWS.into()), ("KEYS", KEYS.into())]), &[on])
}

/// Expand every loop written `for (var x = 0u; x < Ku; x++) { // unroll` (K a literal) into K
/// scoped copies of its body with `x` replaced by the literal, so that per-invocation arrays are
/// indexed by constants: compilers then keep them in registers, where dynamic indexing would
/// make lavapipe gather and scatter lane by lane. Bodies must not `break` or `continue`.
fn unroll(src: &str) -> String {
    const MARK: &str = "{ // unroll";
    let mut s = src.to_string();
    while let Some(mark) = s.find(MARK) {
        let start = s[..mark].rfind("for (").unwrap_or_else(|| panic!("unroll: no loop before mark at {mark}"));
        let header = &s[start..mark];
        // header: "for (var x = 0u; x < 16u; x++) "
        let var = header["for (var ".len()..].split_whitespace().next().unwrap_or_default().to_string();
        let count: usize = header
            .split(';')
            .nth(1)
            .and_then(|c| c.split('<').nth(1))
            .and_then(|c| c.trim().trim_end_matches('u').parse().ok())
            .unwrap_or_else(|| panic!("unroll: loop header {header:?} has no literal bound"));
        let open = mark; // the '{' of the body
        let mut depth = 0;
        let mut close = open;
        for (i, ch) in s[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        assert!(close > open, "unroll: unbalanced braces after {header:?}");
        let body = &s[open + MARK.len()..close];
        let mut out = String::new();
        for i in 0..count {
            out.push('{');
            out.push_str(&replace_ident(body, &var, &format!("{i}u")));
            out.push('}');
        }
        s.replace_range(start..=close, &out);
    }
    s
}

/// Replace whole-identifier occurrences of `name` in `src`.
fn replace_ident(src: &str, name: &str, with: &str) -> String {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let mut out = String::with_capacity(src.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        out.push_str(if word == name { with } else { word });
        word.clear();
    };
    let mut prev_dot = false;
    for c in src.chars() {
        if is_ident(c) {
            word.push(c);
            continue;
        }
        // A member after '.' (a swizzle or field) is never the loop variable.
        if prev_dot && !word.is_empty() {
            out.push_str(&word);
            word.clear();
        } else {
            flush(&mut word, &mut out);
        }
        out.push(c);
        prev_dot = c == '.';
    }
    flush(&mut word, &mut out);
    out
}

fn check_tensors(what: &str, s: &AttnShape, f32s: &[(&str, &Tensor, usize)], mask: Option<&Tensor>) {
    s.check();
    for (name, t, len) in f32s {
        assert!(
            t.numel() == *len && t.dtype == DType::F32,
            "{what}: {name} {:?} {:?} does not hold {len} f32 for {s:?}",
            t.shape,
            t.dtype
        );
    }
    if let Some(m) = mask {
        assert!(m.numel() == s.batch * s.seq, "{what}: mask {:?} is not (B*T) for {s:?}", m.shape);
    }
}

/// Causal GQA attention forward.
///
/// q: (B*T, Hq*D), k, v: (B*T, Hkv*D), f32, RoPE already applied. mask: optional (B*T) u32,
/// 1 = real token, 0 = padding. Query i of batch row b attends key j iff j <= i and
/// mask[b*T+j] != 0; softmax scale 1/√D. Writes o: (B*T, Hq*D) and lse: (B, Hq, T), the
/// log-sum-exp of each row's scaled scores. A row with no visible key gets o = 0 and lse = 0.
#[allow(clippy::too_many_arguments)]
pub fn attention_forward(
    gpu: &Gpu,
    s: &AttnShape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    o: &Tensor,
    lse: &Tensor,
) {
    forward_with(gpu, s, q, k, v, mask, o, lse, tuning_of(gpu))
}

#[allow(clippy::too_many_arguments)]
fn forward_with(
    gpu: &Gpu,
    s: &AttnShape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    o: &Tensor,
    lse: &Tensor,
    t: Tuning,
) {
    check_tensors(
        "attention_forward",
        s,
        &[("q", q, s.q_len()), ("k", k, s.kv_len()), ("v", v, s.kv_len()), ("o", o, s.q_len()), ("lse", lse, s.rows())],
        mask,
    );
    if s.rows() == 0 {
        return;
    }
    let p = params(s, mask.is_some(), t.fwd);
    let tile = tile_rows(gpu, t, s.head_dim, 0);
    let pl = pipeline(gpu, "fwd", FWD, s.head_dim, t.fwd, t.wg, tile);
    let mask = mask.unwrap_or(gpu.dummy());
    let w = workgroups(s.batch * s.heads, p.nblk as usize, t.wg, tile);
    gpu.dispatch_flops(&pl, bytemuck::bytes_of(&p), &[q, k, v, mask, o, lse], w, pair_flops(s, 4));
}

/// Rows per workgroup-memory tile for tuning `t` at head size `d`: none for an untiled tuning,
/// else the most (a power of two, up to `t.tile`) whose two head rows (k and v, or q and dO)
/// and `extra` bytes each fit the device's workgroup memory; none (the untiled kernel) where
/// not even one row fits.
fn tile_rows(gpu: &Gpu, t: Tuning, d: usize, extra: usize) -> usize {
    let fit = gpu.info.max_compute_workgroup_storage_size as usize / (2 * d * 4 + extra);
    if t.tile == 0 || fit == 0 {
        return 0;
    }
    let mut rows = t.tile.next_power_of_two();
    while rows > 1 && rows > fit {
        rows /= 2;
    }
    rows
}

/// Workgroups for `heads` (batch, head) pairs of `nblk` blocks each: `wg` blocks per
/// workgroup, which the tiled kernels keep within one (batch, head) (they share its rows).
fn workgroups(heads: usize, nblk: usize, wg: usize, tile: usize) -> (u32, u32, u32) {
    if tile > 0 {
        groups((heads * nblk.div_ceil(wg)) as u32)
    } else {
        groups((heads * nblk).div_ceil(wg) as u32)
    }
}

/// Work of a pass over the causal (query, key) pairs, B·Hq·T(T+1)/2 of them, at `per_d`·D
/// floating-point operations each (forward 4: q·k and p·v; dq 6 and dk/dv 8 with the
/// recomputed scores): for profiles.
fn pair_flops(s: &AttnShape, per_d: u64) -> u64 {
    (s.batch * s.heads * s.seq * (s.seq + 1) / 2) as u64 * per_d * s.head_dim as u64
}

/// Backward of [`attention_forward`], given dO: (B*T, Hq*D) and the forward's o and lse.
///
/// Writes (overwrites) dq: (B*T, Hq*D), dk, dv: (B*T, Hkv*D); dk and dv of a kv head sum over
/// the Hq/Hkv query heads of its group. Rows with no visible key get zero gradients, and so
/// do padding keys. Scratch: (lse, delta) pairs, (B, Hq, T, 2) f32, dropped on return.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    gpu: &Gpu,
    s: &AttnShape,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    o: &Tensor,
    d_o: &Tensor,
    lse: &Tensor,
    mask: Option<&Tensor>,
    dq: &Tensor,
    dk: &Tensor,
    dv: &Tensor,
) -> Result<(), GpuError> {
    let (ql, kl) = (s.q_len(), s.kv_len());
    check_tensors(
        "attention_backward",
        s,
        &[
            ("q", q, ql),
            ("k", k, kl),
            ("v", v, kl),
            ("o", o, ql),
            ("dO", d_o, ql),
            ("lse", lse, s.rows()),
            ("dq", dq, ql),
            ("dk", dk, kl),
            ("dv", dv, kl),
        ],
        mask,
    );
    if s.rows() == 0 {
        return Ok(());
    }
    backward_with(gpu, s, [q, k, v, o, d_o, lse], mask, [dq, dk, dv], tuning_of(gpu))
}

/// The three steps of the backward from [q, k, v, o, dO, lse] into [dq, dk, dv].
fn backward_with(
    gpu: &Gpu,
    s: &AttnShape,
    x: [&Tensor; 6],
    mask: Option<&Tensor>,
    [dq, dk, dv]: [&Tensor; 3],
    t: Tuning,
) -> Result<(), GpuError> {
    let [q, k, v, o, d_o, lse] = x;
    let stats = backward_stats(gpu, s, o, d_o, lse, t)?;
    backward_dq(gpu, s, [q, k, v, d_o, &stats], mask, dq, t);
    backward_dkdv(gpu, s, [q, k, v, d_o, &stats], mask, dk, dv, t);
    Ok(())
}

/// Step 1: (lse, delta = rowsum(dO ∘ O)) per query row, (B, Hq, T, 2), as scratch.
fn backward_stats(
    gpu: &Gpu,
    s: &AttnShape,
    o: &Tensor,
    d_o: &Tensor,
    lse: &Tensor,
    t: Tuning,
) -> Result<Tensor, GpuError> {
    let stats = gpu.zeros(&[s.rows(), 2], DType::F32, Category::Scratch)?;
    let p = params(s, false, 1);
    let pl = pipeline(gpu, "bwd_delta", BWD_DELTA, s.head_dim, 1, t.wg, 0);
    gpu.dispatch(&pl, bytemuck::bytes_of(&p), &[o, d_o, lse, &stats], groups(s.rows().div_ceil(t.wg) as u32));
    Ok(stats)
}

/// Step 2: dq from [q, k, v, dO, stats].
fn backward_dq(gpu: &Gpu, s: &AttnShape, x: [&Tensor; 5], mask: Option<&Tensor>, dq: &Tensor, t: Tuning) {
    let p = params(s, mask.is_some(), t.dq);
    let tile = tile_rows(gpu, t, s.head_dim, 0);
    let pl = pipeline(gpu, "bwd_dq", BWD_DQ, s.head_dim, t.dq, t.wg, tile);
    let [q, k, v, d_o, stats] = x;
    let mask = mask.unwrap_or(gpu.dummy());
    let w = workgroups(s.batch * s.heads, p.nblk as usize, t.wg, tile);
    gpu.dispatch_flops(&pl, bytemuck::bytes_of(&p), &[q, k, v, d_o, stats, mask, dq], w, pair_flops(s, 6));
}

/// Step 3: dk, dv from [q, k, v, dO, stats].
#[allow(clippy::too_many_arguments)]
fn backward_dkdv(
    gpu: &Gpu,
    s: &AttnShape,
    x: [&Tensor; 5],
    mask: Option<&Tensor>,
    dk: &Tensor,
    dv: &Tensor,
    t: Tuning,
) {
    let p = params(s, mask.is_some(), t.dkdv);
    // A tile row: q and dO, and the (lse, delta) pair.
    let tile = tile_rows(gpu, t, s.head_dim, 8);
    let pl = pipeline(gpu, "bwd_dkdv", BWD_DKDV, s.head_dim, t.dkdv, t.wg, tile);
    let [q, k, v, d_o, stats] = x;
    let mask = mask.unwrap_or(gpu.dummy());
    let w = workgroups(s.batch * s.kv_heads, p.nblk as usize, t.wg, tile);
    gpu.dispatch_flops(&pl, bytemuck::bytes_of(&p), &[q, k, v, d_o, stats, mask, dk, dv], w, pair_flops(s, 8));
}

/// Time every tuning of [`candidates`] on a forward and a backward at shape `s` (random inputs),
/// after checking that it gives the reference tuning's results, and run the fastest on this
/// device from now on.
pub async fn choose(gpu: &Gpu, s: &AttnShape, reps: usize) -> Result<Vec<crate::kernels::tune::Measured>, GpuError> {
    use crate::kernels::tune::{gpu_time, Measured};
    let mut rng = crate::base::rng::Rng::new(0xa77e);
    let up = |rng: &mut crate::base::rng::Rng, n: usize, shape: &[usize]| {
        gpu.upload_f32(&rng.vec(n, 1.0), shape, Category::Scratch)
    };
    let n = s.batch * s.seq;
    let (qd, kd) = (s.heads * s.head_dim, s.kv_heads * s.head_dim);
    let (q, k, v, d_o) = (
        up(&mut rng, n * qd, &[n, qd])?,
        up(&mut rng, n * kd, &[n, kd])?,
        up(&mut rng, n * kd, &[n, kd])?,
        up(&mut rng, n * qd, &[n, qd])?,
    );
    let zeros = |shape: &[usize]| gpu.zeros(shape, DType::F32, Category::Scratch);
    let (o, lse, dq, dk, dv) =
        (zeros(&[n, qd])?, zeros(&[s.rows()])?, zeros(&[n, qd])?, zeros(&[n, kd])?, zeros(&[n, kd])?);
    let mut reference: Option<Vec<Vec<f32>>> = None;
    let mut out = Vec::new();
    for t in candidates(gpu) {
        let mut failed = None;
        let mut run = || {
            forward_with(gpu, s, &q, &k, &v, None, &o, &lse, t);
            if let Err(e) = backward_with(gpu, s, [&q, &k, &v, &o, &d_o, &lse], None, [&dq, &dk, &dv], t) {
                failed = Some(e);
            }
        };
        run();
        let mut got = Vec::new();
        for x in [&o, &lse, &dq, &dk, &dv] {
            got.push(gpu.read_f32(x).await?);
        }
        let agrees = match &reference {
            None => true,
            Some(r) => r.iter().zip(&got).all(|(r, g)| crate::kernels::tune::agree(r, g)),
        };
        if reference.is_none() {
            reference = Some(got);
        }
        let ms = if agrees {
            gpu_time(gpu, reps, &mut run).await.map_err(|e| GpuError::Readback(e.to_string()))?
        } else {
            0.0
        };
        if let Some(e) = failed {
            return Err(e);
        }
        out.push(Measured { family: CHOICE.into(), variant: t.name(), ms, agrees, chosen: false });
    }
    if let Some(best) = crate::kernels::tune::mark_fastest(&mut out) {
        let t = Tuning::parse(&best).unwrap_or(TUNING);
        gpu.set_choice(CHOICE, (t != TUNING).then(|| t.name()));
    }
    Ok(out)
}

/// f64 references that materialise the T×T probabilities (tests and benchmarks only).
/// Layouts as in the launchers; `mask` is (B*T) with 0 = padding.
#[path = "attention_reference.rs"]
pub mod reference;

#[cfg(test)]
#[path = "attention_tests.rs"]
mod tests;
