//! How this device computes its products, chosen by measurement when a model is loaded
//! ([`crate::kernels::tune`]): the big products' [`Variant`] ([`choose`]), the thin LoRA
//! products' kernel ([`choose_thin`]) and the one-row (decoding) kernel ([`choose_gemv`]).
//! Each candidate is first checked against the register-blocked kernels on small awkward
//! shapes, then timed at the model's own shapes; the fastest that agrees runs from then on.

use super::gemv::{self, Gemv};
use super::{blocked, matmul_nn_with, matmul_nt_with, shared, thin, tiled, Fused, Variant};
use crate::base::error::Result;
use crate::base::rng::Rng;
use crate::gpu::{Category, DType, Gpu};
use crate::kernels::tune::{agree, agree_within, gpu_time, mark_fastest, Measured};

/// The key of the products' variant in the device's kernel choices.
pub const CHOICE: &str = "matmul";

/// Every family's reference, the register-blocked kernels, by name.
pub const BLOCKED: &str = "blocked";

/// The subgroup size of this device, where it has subgroups of one known size (what the
/// subgroup kernels are written for).
fn fixed_subgroup(gpu: &Gpu) -> Option<usize> {
    let (lo, hi) = (gpu.info.subgroup_min_size, gpu.info.subgroup_max_size);
    (gpu.info.subgroups && lo == hi && (4..=128).contains(&lo)).then_some(lo as usize)
}

/// The key of the thin LoRA products' kernel in the device's kernel choices: "split-k"
/// ([`thin`]'s kernels, K split over a workgroup) or absent, the register-blocked kernels.
pub const THIN_CHOICE: &str = "thin";

/// [`THIN_CHOICE`]'s one alternative to the register-blocked kernels.
pub const SPLIT_K: &str = "split-k";

/// The key of the one-row product's kernel (decoding) in the device's kernel choices: a
/// [`Gemv`] by name ("subgroup/sg{SG}/rb{RB}": a subgroup of SG lanes per 8 outputs, K split
/// over it, RB blocks of 8 per workgroup; "rows/r{R}": an invocation per R rows of W) or
/// absent, the register-blocked kernel.
pub const GEMV_CHOICE: &str = "gemv";

/// The one-row kernel the device chose, if it chose one.
pub(super) fn gemv_choice(gpu: &Gpu) -> Option<Gemv> {
    Gemv::parse(&gpu.choice(GEMV_CHOICE)?)
}

/// The one-row kernels this device can run: [`gemv::ROWS`]'s on every device; where it has
/// subgroups of one known size (as the subgroup-shared variant needs), the subgroup kernel
/// with one block of 8 rows per workgroup (many workgroups, for GPUs) or eight (fewer, for
/// CPU adapters).
pub(super) fn gemv_candidates(gpu: &Gpu) -> Vec<Gemv> {
    let mut out: Vec<Gemv> = gemv::ROWS.into_iter().map(Gemv::Rows).collect();
    if let Some(sg) = fixed_subgroup(gpu) {
        out.extend([1, 8].into_iter().map(|rb| Gemv::Subgroup { sg, rb }));
    }
    out
}

/// The names of the one-row kernels this device can run besides the register-blocked one (what
/// `webtune bench kernels` times).
pub fn gemv_variants(gpu: &Gpu) -> Vec<String> {
    gemv_candidates(gpu).into_iter().map(Gemv::name).collect()
}

/// Whether `name` is a one-row kernel this device can run (a cached choice still valid).
pub fn gemv_runnable(gpu: &Gpu, name: &str) -> bool {
    Gemv::parse(name).is_some_and(|c| gemv_candidates(gpu).contains(&c))
}

/// Whether this device computes the thin LoRA products with the split-K kernels.
pub(super) fn split_k(gpu: &Gpu) -> bool {
    gpu.choice(THIN_CHOICE).is_some_and(|s| s == SPLIT_K)
}

/// The variants the autotune times on this device: every one it can run ([`runnable`]), except
/// the workgroup-memory tiles on a CPU adapter (lavapipe, SwiftShader), where they are 5–10
/// times slower than the register-blocked kernel and timing them would only slow every load.
pub fn candidates(gpu: &Gpu) -> Vec<Variant> {
    let mut out = runnable(gpu);
    if gpu.info.cpu {
        out.retain(|v| !matches!(v, Variant::Tiled(_)));
    }
    // Asked for, f16 products are timed on every adapter (on a CPU one they lose).
    if gpu.f16_products() {
        out.extend(runnable_f16(gpu));
    }
    out
}

/// The variants that multiply in f16 this device can run ([`tiled::Tile::all_half`]; none
/// without shader-f16): the autotune's candidates only where the run asked for f16 products
/// ([`Gpu::set_f16_products`]); tests check them against the references at f16's precision.
pub fn runnable_f16(gpu: &Gpu) -> Vec<Variant> {
    if !gpu.info.shader_f16 {
        return Vec::new();
    }
    tiled::Tile::all_half().into_iter().filter(|&t| tiled::fits(gpu, t)).map(Variant::Tiled).collect()
}

/// Every variant this device can run for `nt` and `nn`, the register-blocked first, then its
/// 16-row form (the tests check each against the references).
pub fn runnable(gpu: &Gpu) -> Vec<Variant> {
    let mut out = vec![Variant::Blocked, Variant::Blocked16];
    if let Some(sg) = fixed_subgroup(gpu) {
        for rows in [16, 8] {
            out.push(Variant::Shared { sg, shape: shared::Shape { rows, ..shared::Shape::DEFAULT } });
        }
    }
    out.extend(tiled::Tile::ALL.into_iter().filter(|&t| tiled::fits(gpu, t)).map(Variant::Tiled));
    out
}

/// Whether `v` computes what the register-blocked kernels compute on this device, on small
/// random products of awkward shapes with B of `dtype`: `nt` (with bias, α and β) and `nn`,
/// K aligned and not. Results must agree to f32 rounding (1e-5 relative), or f16's for
/// a variant that multiplies in f16 ([`Variant::half`]): 1e-2, its partial sums of 16 products
/// being f16.
pub async fn agrees(gpu: &Gpu, v: Variant, dtype: DType) -> Result<bool> {
    let mut rng = Rng::new(0x6d6d);
    for (m, k, n) in [(37, 72, 29), (19, 100, 44), (21, 50, 30)] {
        let a = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Scratch)?;
        let bias = gpu.upload_f32(&rng.vec(n, 1.0), &[n], Category::Scratch)?;
        let c0 = rng.vec(m * n, 1.0);
        let w = rng.vec(n * k, 1.0);
        let bt = gpu.upload_f32_as(&w, &[n, k], dtype, Category::Scratch)?;
        let bn = gpu.upload_f32_as(&w, &[k, n], dtype, Category::Scratch)?;
        let an = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Scratch)?;
        let mut outs = Vec::new();
        for variant in [Variant::Blocked, v] {
            let ct = gpu.upload_f32(&c0, &[m, n], Category::Scratch)?;
            matmul_nt_with(gpu, variant, &a, &bt, Some(&bias), &ct, 0.75, 0.5, None);
            let cn = gpu.upload_f32(&c0, &[m, n], Category::Scratch)?;
            matmul_nn_with(gpu, variant, &an, &bn, &cn, 1.5, 1.0, None);
            outs.push((gpu.read_f32(&ct).await?, gpu.read_f32(&cn).await?));
        }
        let tol = if v.half() { 1e-2 } else { 1e-5 };
        if !agree_within(&outs[0].0, &outs[1].0, tol) || !agree_within(&outs[0].1, &outs[1].1, tol) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Time every candidate that agrees with the register-blocked kernels ([`agrees`]) on `nt` and
/// `nn` at `shapes` — (M, K, N): x (M, K) · W (N, K)ᵀ and dy (M, N) · W, W of `dtype` — best
/// of `reps` after a warm-up, and run the fastest on this device from now on. With one
/// candidate (no subgroups) nothing is timed.
pub async fn choose(gpu: &Gpu, shapes: &[(usize, usize, usize)], dtype: DType, reps: usize) -> Result<Vec<Measured>> {
    let cands = candidates(gpu);
    if cands.len() == 1 {
        gpu.set_choice(CHOICE, None);
        return Ok(Vec::new());
    }
    let mut rng = Rng::new(0x7e57);
    let mut inputs = Vec::new();
    for &(m, k, n) in shapes {
        let x = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Scratch)?;
        let dy = gpu.upload_f32(&rng.vec(m * n, 1.0), &[m, n], Category::Scratch)?;
        let w = gpu.upload_f32_as(&rng.vec(n * k, 0.05), &[n, k], dtype, Category::Scratch)?;
        let y = gpu.zeros(&[m, n], DType::F32, Category::Scratch)?;
        let dx = gpu.zeros(&[m, k], DType::F32, Category::Scratch)?;
        inputs.push((x, dy, w, y, dx));
    }
    let run = |v: Variant| {
        for (x, dy, w, y, dx) in &inputs {
            matmul_nt_with(gpu, v, x, w, None, y, 1.0, 0.0, None);
            matmul_nn_with(gpu, v, dy, w, dx, 1.0, 0.0, None);
        }
    };
    let mut out = Vec::new();
    for v in cands {
        if v != Variant::Blocked && !agrees(gpu, v, dtype).await? {
            out.push(Measured { family: CHOICE.into(), variant: v.name(), ms: 0.0, agrees: false, chosen: false });
            continue;
        }
        let ms = gpu_time(gpu, reps, || run(v)).await?;
        out.push(Measured { family: CHOICE.into(), variant: v.name(), ms, agrees: true, chosen: false });
    }
    if let Some(best) = mark_fastest(&mut out) {
        let v = Variant::parse(&best).unwrap_or(Variant::Blocked);
        gpu.set_choice(CHOICE, (v != Variant::Blocked).then(|| v.name()));
    }
    Ok(out)
}

/// Choose how the thin LoRA products run on this device ([`THIN_CHOICE`]): the register-
/// blocked kernels or `thin`'s split-K ones, the latter checked against the former on small
/// awkward shapes, both timed at rank `r` over `tokens` rows for each of `dims` (the model's
/// hidden and intermediate sizes): h = x·Aᵀ, g = dy·B, dB = dyᵀ·h and dA = gᵀ·x.
pub async fn choose_thin(gpu: &Gpu, tokens: usize, dims: &[usize], r: usize, reps: usize) -> Result<Vec<Measured>> {
    let mut rng = Rng::new(0x7417);
    let up = |rng: &mut Rng, shape: &[usize]| {
        gpu.upload_f32(&rng.vec(shape.iter().product(), 1.0), shape, Category::Scratch)
    };
    // Agreement: nt, nn and both orientations of tn at shapes off every multiple.
    let mut agrees = true;
    for (m, k, n) in [(37, 300, 8), (13, 257, 5)] {
        let (a, bt, bn, c0) =
            (up(&mut rng, &[m, k])?, up(&mut rng, &[n, k])?, up(&mut rng, &[k, n])?, rng.vec(m * n, 1.0));
        let (at, cr) = (up(&mut rng, &[k, m])?, rng.vec(n * m, 1.0));
        let mut outs = Vec::new();
        for split in [false, true] {
            let ct = gpu.upload_f32(&c0, &[m, n], Category::Scratch)?;
            let cn = gpu.upload_f32(&c0, &[m, n], Category::Scratch)?;
            let c1 = gpu.upload_f32(&c0, &[m, n], Category::Scratch)?;
            let c2 = gpu.upload_f32(&cr, &[n, m], Category::Scratch)?;
            if split {
                thin::run(gpu, true, &a, &bt, None, &ct, 0.75, 0.5);
                thin::run(gpu, false, &a, &bn, None, &cn, 1.5, 1.0);
                thin::run_tn(gpu, &at, &bn, &c1, -0.5, 1.0);
                thin::run_tn(gpu, &bn, &at, &c2, 2.0, 0.0);
            } else {
                blocked::nt(gpu, &a, &bt, None, &ct, 0.75, 0.5, None);
                blocked::nn(gpu, &a, &bn, &cn, 1.5, 1.0, None);
                blocked::tn(gpu, &at, &bn, &c1, -0.5, 1.0);
                blocked::tn(gpu, &bn, &at, &c2, 2.0, 0.0);
            }
            let mut v = Vec::new();
            for c in [&ct, &cn, &c1, &c2] {
                v.extend(gpu.read_f32(c).await?);
            }
            outs.push(v);
        }
        agrees &= agree(&outs[0], &outs[1]);
    }
    let mut inputs = Vec::new();
    for &d in dims {
        // x (tokens, d), A (r, d), dy (tokens, d), B (d, r) as the nn's (K, N), h and g (tokens, r).
        let (x, a, b, hg) =
            (up(&mut rng, &[tokens, d])?, up(&mut rng, &[r, d])?, up(&mut rng, &[d, r])?, up(&mut rng, &[tokens, r])?);
        let (out_r, grad_b, grad_a) = (
            gpu.zeros(&[tokens, r], DType::F32, Category::Scratch)?,
            gpu.zeros(&[d, r], DType::F32, Category::Scratch)?,
            gpu.zeros(&[r, d], DType::F32, Category::Scratch)?,
        );
        inputs.push((x, a, b, hg, out_r, grad_b, grad_a));
    }
    let run = |split: bool| {
        for (x, a, b, hg, out_r, grad_b, grad_a) in &inputs {
            if split {
                thin::run(gpu, true, x, a, None, out_r, 1.0, 0.0);
                thin::run(gpu, false, x, b, None, out_r, 1.0, 0.0);
                thin::run_tn(gpu, x, hg, grad_b, 1.0, 1.0);
                thin::run_tn(gpu, hg, x, grad_a, 1.0, 1.0);
            } else {
                blocked::nt(gpu, x, a, None, out_r, 1.0, 0.0, None);
                blocked::nn(gpu, x, b, out_r, 1.0, 0.0, None);
                blocked::tn(gpu, x, hg, grad_b, 1.0, 1.0);
                blocked::tn(gpu, hg, x, grad_a, 1.0, 1.0);
            }
        }
    };
    let mut out = Vec::new();
    for (name, split) in [(BLOCKED, false), (SPLIT_K, true)] {
        let ok = !split || agrees;
        let ms = if ok { gpu_time(gpu, reps, || run(split)).await? } else { 0.0 };
        out.push(Measured { family: THIN_CHOICE.into(), variant: name.into(), ms, agrees: ok, chosen: false });
    }
    let best = mark_fastest(&mut out);
    gpu.set_choice(THIN_CHOICE, best.filter(|b| b == SPLIT_K));
    Ok(out)
}

/// Weights one timed pass of [`choose_gemv`] reads: more than a CPU's last-level cache or a
/// GPU's L2 (H100: 50 MB). A one-row kernel that wins with its weight in cache can lose by 2×
/// streaming it, as decoding does (lavapipe's subgroup kernel: 8.6 → 3.1 GB/s at 8192×576 bf16,
/// where the register-blocked one keeps 6.5).
const STREAM_BYTES: usize = 64 << 20;

/// Choose how one-row products (decoding) run on this device ([`GEMV_CHOICE`]): the
/// register-blocked kernel or one of [`gemv_candidates`] that takes `dtype` weights at every
/// shape (the rows kernels; the subgroup kernel where the device has subgroups of one size),
/// each checked against the register-blocked one on awkward shapes with `dtype` weights (with
/// bias, β and a fused LoRA term), all timed at one token through W (n, k) for each (k, n)
/// of `shapes`, each weight read from memory, not from cache ([`STREAM_BYTES`]).
pub async fn choose_gemv(gpu: &Gpu, shapes: &[(usize, usize)], dtype: DType, reps: usize) -> Result<Vec<Measured>> {
    // Kernels that do not take these weights would only time the register-blocked one again.
    let cands: Vec<Gemv> =
        gemv_candidates(gpu).into_iter().filter(|g| shapes.iter().all(|&(k, _)| g.takes(dtype, k))).collect();
    if cands.is_empty() {
        gpu.set_choice(GEMV_CHOICE, None);
        return Ok(Vec::new());
    }
    let mut rng = Rng::new(0x6e77);
    let up = |rng: &mut Rng, n: usize, shape: &[usize]| gpu.upload_f32(&rng.vec(n, 1.0), shape, Category::Scratch);
    // Agreement with the register-blocked kernel, per candidate.
    let mut checks = Vec::new();
    for (k, n, rank) in [(53, 29, 0), (100, 44, 8), (64, 600, 5), (576, 8, 0), (52, 70, 8)] {
        let x = up(&mut rng, k, &[1, k])?;
        let w = gpu.upload_f32_as(&rng.vec(n * k, 1.0), &[n, k], dtype, Category::Scratch)?;
        let bias = up(&mut rng, n, &[n])?;
        let (h, lb) =
            (up(&mut rng, rank.max(1), &[1, rank.max(1)])?, up(&mut rng, n * rank.max(1), &[n, rank.max(1)])?);
        checks.push((x, w, bias, h, lb, rank, rng.vec(n, 1.0)));
    }
    // The outputs of kernel `c` (None: the register-blocked one) on the checks, not yet read.
    let run_check = |c: Option<Gemv>| -> Result<Vec<crate::gpu::Tensor>> {
        let mut outs = Vec::new();
        for (x, w, bias, h, lb, rank, c0) in &checks {
            let fused = (*rank > 0).then_some(Fused { left: h, right: lb, scale: 2.0 });
            let y = gpu.upload_f32(c0, &[1, c0.len()], Category::Scratch)?;
            gemv::run(gpu, c, x, w, Some(bias), &y, 0.75, 0.5, fused);
            outs.push(y);
        }
        Ok(outs)
    };
    let mut reference = Vec::new();
    for y in run_check(None)? {
        reference.push(gpu.read_f32(&y).await?);
    }
    // Each timed pass streams its weights from memory, as decoding does: enough copies of each
    // shape's weight that one pass reads more than any cache holds.
    let bytes: usize = shapes.iter().map(|&(k, n)| n * dtype.row_bytes(k)).sum();
    let copies = STREAM_BYTES.div_ceil(bytes.max(1)).clamp(1, 32);
    let mut inputs = Vec::new();
    for &(k, n) in shapes {
        let x = up(&mut rng, k, &[1, k])?;
        let y = gpu.zeros(&[1, n], DType::F32, Category::Scratch)?;
        let host = rng.vec(n * k, 0.05);
        for _ in 0..copies {
            let w = gpu.upload_f32_as(&host, &[n, k], dtype, Category::Scratch)?;
            inputs.push((x.clone(), w, y.clone()));
        }
    }
    let run = |c: Option<Gemv>| {
        for (x, w, y) in &inputs {
            gemv::run(gpu, c, x, w, None, y, 1.0, 0.0, None);
        }
    };
    let mut out = Vec::new();
    for c in std::iter::once(None).chain(cands.into_iter().map(Some)) {
        let mut agrees = true;
        if c.is_some() {
            for (y, want) in run_check(c)?.iter().zip(&reference) {
                agrees &= agree(&gpu.read_f32(y).await?, want);
            }
        }
        let ms = if agrees { gpu_time(gpu, reps, || run(c)).await? } else { 0.0 };
        let variant = c.map_or_else(|| BLOCKED.to_string(), Gemv::name);
        out.push(Measured { family: GEMV_CHOICE.into(), variant, ms, agrees, chosen: false });
    }
    let best = mark_fastest(&mut out);
    gpu.set_choice(GEMV_CHOICE, best.as_deref().and_then(Gemv::parse).map(Gemv::name));
    Ok(out)
}
