//! General matrix products:
//!
//! - [`matmul_nt`]: C = α·A·Bᵀ + bias + β·C — x·Wᵀ against HF's [out, in] weights (forward),
//!   and the thin LoRA products h = x·Aᵀ and s·h·Bᵀ.
//! - [`matmul_nn`]: C = α·A·B + β·C — dy·W (input gradient of a frozen linear) and the LoRA
//!   backward products g = dy·B, s·g·A.
//! - [`matmul_tn`]: C = α·Aᵀ·B + β·C — LoRA weight gradients dB = s·dyᵀ·h and dA = s·gᵀ·x.
//!
//! B may be f32, packed bf16/f16, or blockwise quantized Q8/Q4 (`nt` and `nn` only), unpacked
//! or dequantized in the shader; arithmetic is f32. Each product has a vectorised form used
//! when the contiguous dimensions are multiples of 4 (8 for 16-bit rows in `nn`) and a scalar
//! form for any shape; quantized rows are padded to whole groups, so their B loads are always
//! vectorised, and `nt` walks K group by group, reading each group's (scale, offset) once.
//!
//! Variants ([`Variant`]), all checked against the same f64 reference:
//! - [`blocked`]: 8×8 outputs per invocation, loads straight from storage; runs everywhere
//!   and is the reference the others are checked against on the device before use.
//! - [`shared`]: subgroup-shared rows of A (needs subgroups): 2–2.6× on CPU emulators.
//! - [`tiled`]: workgroup-memory tiles with register blocking: the shape GPUs want.
//!
//! Thin products (M or N ≤ 8: LoRA's h = x·Aᵀ, g = dy·B and its weight gradients) take the
//! register-blocked kernel with all its invocations along the long side, whatever the variant,
//! or, where the device chose them ([`THIN_CHOICE`], by [`choose_thin`]), `thin`'s split-K
//! kernels: a (256, 8) product is 32 invocations, one workgroup for a GPU of a hundred cores,
//! while on a CPU adapter the split costs more in partial sums than it gains (2–5× slower on
//! lavapipe).
//!
//! Which one runs is the device's choice ([`Gpu::choice`] under [`CHOICE`]), made by
//! [`choose`] when a model is loaded; without a choice (or with `WEBTUNE_KERNELS=reference`)
//! the register-blocked kernels run.

mod blocked;
mod choose;
mod gemv;
pub mod lora;
mod pair;
pub mod shared;
mod thin;
pub mod tiled;

pub use choose::{
    agrees, candidates, choose, choose_gemv, choose_thin, gemv_runnable, gemv_variants, runnable, runnable_f16,
};
pub use choose::{BLOCKED, CHOICE, GEMV_CHOICE, SPLIT_K, THIN_CHOICE};
pub use lora::Fused;

use crate::gpu::{DType, Gpu, Tensor};
use choose::{gemv_choice, split_k};

#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    ldb: u32,
    alpha: f32,
    beta: f32,
    has_bias: u32,
    /// quantized B: word offset of the group parameters (rows · ldb)
    qoff: u32,
    /// fused LoRA: its rank (0: none) and s / α
    rank: u32,
    ls: f32,
    /// subgroup-shared variant: its workgroup's subgroups along M (the rest lie along N)
    sub_m: u32,
    _q: u32,
}

impl Params {
    /// The fused LoRA fields for `lora` at scale α.
    fn with_lora(mut self, lora: Option<Fused>) -> Params {
        if let Some(l) = lora {
            self.rank = l.rank() as u32;
            self.ls = if self.alpha != 0.0 { l.scale / self.alpha } else { 0.0 };
        }
        self
    }
}

/// How `nt` and `nn` are computed on this device (`tn`, whose contraction runs over tokens,
/// is always register-blocked).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Variant {
    Blocked,
    /// The register-blocked kernels with 16 rows of C per invocation instead of 8 (each output
    /// summed as [`Variant::Blocked`] sums it: the same results, bit for bit; more reuse of each
    /// load, more registers).
    Blocked16,
    /// Subgroup-shared A rows, with subgroups of this many invocations.
    Shared {
        sg: usize,
        shape: shared::Shape,
    },
    /// Workgroup-memory tiles.
    Tiled(tiled::Tile),
}

impl Variant {
    pub fn name(self) -> String {
        match self {
            Variant::Blocked => "blocked".into(),
            Variant::Blocked16 => "blocked16".into(),
            Variant::Shared { sg, shape } => format!("{}/sg{sg}", shape.name()),
            Variant::Tiled(t) => t.name(),
        }
    }

    /// Whether it multiplies in f16 ([`tiled::Tile::half`]): its results agree with the others
    /// to f16 rounding, not f32's.
    pub fn half(self) -> bool {
        matches!(self, Variant::Tiled(t) if t.half)
    }

    /// The variant a name stands for ([`Variant::name`]).
    pub fn parse(s: &str) -> Option<Variant> {
        match s {
            "blocked" => return Some(Variant::Blocked),
            "blocked16" => return Some(Variant::Blocked16),
            _ => {}
        }
        if let Some(t) = tiled::Tile::parse(s) {
            return Some(Variant::Tiled(t));
        }
        // "shared16x8/8/sg8"
        let rest = s.strip_prefix("shared")?;
        let (rows, rest) = rest.split_once("x8/")?;
        let (subgroups, sg) = rest.split_once("/sg")?;
        let shape = shared::Shape { rows: rows.parse().ok()?, subgroups: subgroups.parse().ok()? };
        (shape.rows % 8 == 0 && shape.rows > 0 && shape.subgroups > 0)
            .then_some(Variant::Shared { sg: sg.parse().ok()?, shape })
    }

    /// The variant this device runs.
    pub fn of(gpu: &Gpu) -> Variant {
        gpu.choice(CHOICE).and_then(|s| Variant::parse(&s)).unwrap_or(Variant::Blocked)
    }
}

fn check(what: &str, ok: bool, detail: impl FnOnce() -> String) {
    assert!(ok, "{what}: {}", detail());
}

/// C (M, N) = α · A (M, K) · Bᵀ + bias + β · C, with B (N, K) of any weight dtype (Q8/Q4
/// quantized along K).
pub fn matmul_nt(gpu: &Gpu, a: &Tensor, b: &Tensor, bias: Option<&Tensor>, c: &Tensor, alpha: f32, beta: f32) {
    matmul_nt_with(gpu, Variant::of(gpu), a, b, bias, c, alpha, beta, None)
}

/// y (M, N) = x (M, K) · Wᵀ + bias + s · h (M, r) · Bᵀ with W (N, K) frozen of any weight
/// dtype and LoRA's B (N, r): the forward of a LoRA linear in one pass over y (`lora.left` = h,
/// `lora.right` = B, `lora.scale` = s).
pub fn matmul_nt_lora(gpu: &Gpu, x: &Tensor, w: &Tensor, bias: Option<&Tensor>, y: &Tensor, lora: Fused) {
    matmul_nt_with(gpu, Variant::of(gpu), x, w, bias, y, 1.0, 0.0, Some(lora))
}

/// [`matmul_nt`] with the variant given, and a fused LoRA term when `lora` is some.
#[allow(clippy::too_many_arguments)]
pub fn matmul_nt_with(
    gpu: &Gpu,
    v: Variant,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    lora: Option<Fused>,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.rows());
    check("matmul_nt", b.cols() == k && c.rows() == m && c.cols() == n && a.dtype == DType::F32, || {
        format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape)
    });
    if let Some(l) = lora {
        check("matmul_nt LoRA", l.left.rows() == m && l.right.rows() == n && l.right.cols() == l.rank(), || {
            format!("h {:?} B {:?} for C {:?}", l.left.shape, l.right.shape, c.shape)
        });
    }
    if m == 0 || n == 0 {
        return;
    }
    // Decoding's one row: the one-row kernel the device chose, where it takes these weights.
    if let Some(g) = gemv::takes(m).then(|| gemv_choice(gpu)).flatten().filter(|g| g.takes(b.dtype, k)) {
        return gemv::run(gpu, Some(g), a, b, bias, c, alpha, beta, lora);
    }
    match v {
        // LoRA's h = x·Aᵀ: N = r, a long K split over a workgroup.
        _ if lora.is_none() && thin::takes(m, k, n, b.dtype) && split_k(gpu) => {
            thin::run(gpu, true, a, b, bias, c, alpha, beta)
        }
        // A thin product (LoRA's rank as M or N) has too few blocks for subgroups to share.
        _ if m <= 8 || n <= 8 => blocked::nt(gpu, a, b, bias, c, alpha, beta, lora),
        Variant::Blocked => blocked::nt(gpu, a, b, bias, c, alpha, beta, lora),
        Variant::Blocked16 => blocked::nt_rows(gpu, a, b, bias, c, alpha, beta, lora, 16),
        Variant::Shared { sg, shape } => shared::nt(gpu, a, b, bias, c, alpha, beta, lora, sg, shape),
        Variant::Tiled(t) => tiled::nt(gpu, a, b, bias, c, alpha, beta, lora, t),
    }
}

/// m (1, F) = silu(x·W_gateᵀ + s·h_g·B_gᵀ) · (x·W_upᵀ + s·h_u·B_uᵀ) in one dispatch, equal bit
/// for bit to the two products and `swiglu_forward`, where x is one row (decoding's MLP), the
/// device chose the rows one-row kernel and it takes these weights; returns false, having done
/// nothing, otherwise. Each of `gate`, `up`: (W, its fused LoRA term).
pub fn gate_up_swiglu_row(
    gpu: &Gpu,
    x: &Tensor,
    gate: (&Tensor, Option<Fused>),
    up: (&Tensor, Option<Fused>),
    m: &Tensor,
) -> bool {
    // swiglu_takes checks that x is one row.
    let Some(gemv::Gemv::Rows(r)) = gemv_choice(gpu) else {
        return false;
    };
    if !gemv::swiglu_takes(gpu, x, gate, up) {
        return false;
    }
    check("gate_up_swiglu_row", gate.0.cols() == x.cols() && m.shape == [1, gate.0.rows()], || {
        format!("x {:?} W {:?} m {:?}", x.shape, gate.0.shape, m.shape)
    });
    // Two weights' rows per invocation: half the rows of the one-row kernel chosen.
    gemv::swiglu_rows(gpu, x, gate, up, m, (r / 2).max(4));
    true
}

/// h_j = x·A_jᵀ for each (A_j, h_j) of `pairs`: LoRA's down-products of the projections that
/// read one input (q, k, v; gate, up). Where the A_j are f32 of one shape, one dispatch takes up
/// to three of them, each h_j bit-identical to its own product's: for one row (decoding) the
/// subgroup kernel's where the device chose it, else the register-blocked kernel's; for a
/// training step's rows (rank ≤ 8) the register-blocked thin product's, unless the device
/// chose split-K for those. Otherwise each is its own [`matmul_nt`].
pub fn matmul_nt_many(gpu: &Gpu, x: &Tensor, pairs: &[(&Tensor, &Tensor)]) {
    // Rank 0 (or no rows) has nothing to compute: each product's own call returns at once.
    let batched = pairs.len() > 1
        && x.rows() > 0
        && pairs[0].0.rows() > 0
        && x.dtype == DType::F32
        && pairs.iter().all(|(a, h)| {
            a.dtype == DType::F32
                && a.shape == pairs[0].0.shape
                && a.cols() == x.cols()
                && h.shape == [x.rows(), a.rows()]
        });
    match gemv::takes(x.rows()).then(|| gemv_choice(gpu)).flatten() {
        Some(gemv::Gemv::Subgroup { sg, .. }) if batched => {
            for chunk in pairs.chunks(gemv::MANY) {
                match chunk {
                    [(a, h)] => matmul_nt(gpu, x, a, None, h, 1.0, 0.0),
                    _ => gemv::nt_many(gpu, x, chunk, sg),
                }
            }
        }
        _ if batched && gemv::takes(x.rows()) => {
            for chunk in pairs.chunks(gemv::MANY) {
                blocked::nt_many(gpu, x, chunk);
            }
        }
        // A training step's rows: where each would be the register-blocked thin product.
        _ if batched && x.rows() > 8 && pairs[0].0.rows() <= 8 && !split_k(gpu) => {
            for chunk in pairs.chunks(gemv::MANY) {
                match chunk {
                    [(a, h)] => matmul_nt(gpu, x, a, None, h, 1.0, 0.0),
                    _ => blocked::nt_many_rows(gpu, x, chunk),
                }
            }
        }
        _ => {
            for (a, h) in pairs {
                matmul_nt(gpu, x, a, None, h, 1.0, 0.0);
            }
        }
    }
}

/// C (M, N) = α · A (M, K) · B (K, N) + β · C, with B of any weight dtype (Q8/Q4 quantized
/// along N, i.e. a (K, N) matrix quantized by its own rows).
pub fn matmul_nn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32) {
    matmul_nn_with(gpu, Variant::of(gpu), a, b, c, alpha, beta, None)
}

/// dx (M, N) = β · dx + dy (M, K) · W + s · g (M, r) · A with W (K, N) frozen of any weight
/// dtype and LoRA's A (r, N): the input gradient of a LoRA linear in one pass over dx
/// (`lora.left` = g = dy·B, `lora.right` = A, `lora.scale` = s).
pub fn matmul_nn_lora(gpu: &Gpu, dy: &Tensor, w: &Tensor, dx: &Tensor, beta: f32, lora: Fused) {
    matmul_nn_with(gpu, Variant::of(gpu), dy, w, dx, 1.0, beta, Some(lora))
}

/// [`matmul_nn`] with the variant given, and a fused LoRA term when `lora` is some.
#[allow(clippy::too_many_arguments)]
pub fn matmul_nn_with(
    gpu: &Gpu,
    v: Variant,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    lora: Option<Fused>,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    check("matmul_nn", b.rows() == k && c.rows() == m && c.cols() == n && a.dtype == DType::F32, || {
        format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape)
    });
    if let Some(l) = lora {
        check("matmul_nn LoRA", l.left.rows() == m && l.right.cols() == n && l.right.rows() == l.rank(), || {
            format!("g {:?} A {:?} for C {:?}", l.left.shape, l.right.shape, c.shape)
        });
    }
    if m == 0 || n == 0 {
        return;
    }
    match v {
        // LoRA's g = dy·B: N = r, a long K split over a workgroup.
        _ if lora.is_none() && thin::takes(m, k, n, b.dtype) && split_k(gpu) => {
            thin::run(gpu, false, a, b, None, c, alpha, beta)
        }
        _ if m <= 8 || n <= 8 => blocked::nn(gpu, a, b, c, alpha, beta, lora),
        Variant::Blocked => blocked::nn(gpu, a, b, c, alpha, beta, lora),
        Variant::Blocked16 => blocked::nn_rows(gpu, a, b, c, alpha, beta, lora, 16),
        Variant::Shared { sg, shape } => shared::nn(gpu, a, b, c, alpha, beta, lora, sg, shape),
        Variant::Tiled(t) => tiled::nn(gpu, a, b, c, alpha, beta, lora, t),
    }
}

/// C (M, N) = α · A (K, M)ᵀ · B (K, N) + β · C, all f32.
pub fn matmul_tn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32) {
    let (k, m, n) = (a.rows(), a.cols(), b.cols());
    check(
        "matmul_tn",
        b.rows() == k && c.rows() == m && c.cols() == n && a.dtype == DType::F32 && b.dtype == DType::F32,
        || format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape),
    );
    if m == 0 || n == 0 {
        return;
    }
    if thin::takes_tn(m, k, n) && split_k(gpu) {
        return thin::run_tn(gpu, a, b, c, alpha, beta);
    }
    blocked::tn(gpu, a, b, c, alpha, beta)
}

/// Two `tn` products, C_j = α · A_jᵀ · B_j + β · C_j for the (A_j, B_j, C_j) of `jobs` (as
/// [`matmul_tn`] computes each, bit for bit), in one dispatch where both take the same kernel
/// (the register-blocked or the split-K one) over the same K: LoRA's dA = s·gᵀ·x and
/// dB = s·dyᵀ·h of one projection (both contract over tokens). Otherwise one after the other.
pub fn matmul_tn_pair(gpu: &Gpu, jobs: [(&Tensor, &Tensor, &Tensor); 2], alpha: f32, beta: f32) {
    let thin = |(a, b, _): (&Tensor, &Tensor, &Tensor)| thin::takes_tn(a.cols(), a.rows(), b.cols());
    let ok = jobs.iter().all(|&(a, b, c)| {
        check(
            "matmul_tn_pair",
            b.rows() == a.rows()
                && c.rows() == a.cols()
                && c.cols() == b.cols()
                && a.dtype == DType::F32
                && b.dtype == DType::F32,
            || format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape),
        );
        a.cols() > 0 && b.cols() > 0
    });
    let paired = ok
        && match (thin(jobs[0]) && split_k(gpu), thin(jobs[1]) && split_k(gpu)) {
            (true, true) => pair::thin_tn_pair(gpu, jobs, alpha, beta),
            (false, false) => pair::blocked_tn_pair(gpu, jobs, alpha, beta),
            _ => false,
        };
    if !paired {
        for (a, b, c) in jobs {
            matmul_tn(gpu, a, b, c, alpha, beta);
        }
    }
}

/// How a workgroup of `r` equal blocks (each `bm` rows × `bn` columns of C) is arranged: the
/// number along M (a power of two dividing `r`, at most `most`; the rest along N) that
/// computes the fewest outputs past the edges of an (m, n) product, the most along M on a tie.
/// MeSP's MLP runs in chunks of ~107 tokens at Qwen2.5-0.5B's shape, and a last chunk of 42:
/// with all eight 16-row subgroups along M, one 256-token step's chunks computed 384 rows.
fn arrange(m: usize, n: usize, bm: usize, bn: usize, r: usize, most: usize) -> usize {
    let cost = |rm: usize| {
        let rn = r / rm;
        m.div_ceil(bm * rm) * bm * rm * n.div_ceil(bn * rn) * bn * rn
    };
    (0..=r.trailing_zeros())
        .map(|i| 1usize << i)
        .filter(|&rm| r % rm == 0 && rm <= most.max(1))
        .rev()
        .min_by_key(|&rm| cost(rm))
        .unwrap_or(1)
}

/// 2·M·N·K: one multiply and one add per term.
fn flops(m: usize, n: usize, k: usize) -> u64 {
    2 * (m * n * k) as u64
}

/// f64 references (row-major), used by the tests and benchmarks.
pub mod reference {
    /// C (M, N) = A (M, K) · B (N, K)ᵀ
    pub fn nt(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|t| a[i * k + t] * b[j * k + t]).sum();
            }
        }
        c
    }
    /// C (M, N) = A (M, K) · B (K, N)
    pub fn nn(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for t in 0..k {
                let av = a[i * k + t];
                for j in 0..n {
                    c[i * n + j] += av * b[t * n + j];
                }
            }
        }
        c
    }
    /// C (M, N) = A (K, M)ᵀ · B (K, N)
    pub fn tn(a: &[f64], b: &[f64], k: usize, m: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for t in 0..k {
            for i in 0..m {
                let av = a[t * m + i];
                for j in 0..n {
                    c[i * n + j] += av * b[t * n + j];
                }
            }
        }
        c
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "bench.rs"]
mod bench;
