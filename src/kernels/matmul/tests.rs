//! Every variant against the f64 reference, at awkward shapes and every weight dtype.

use super::choose::{gemv_candidates, gemv_choice};
use super::gemv::Gemv;
use super::*;
use crate::gpu::Category;
use crate::gpu_test;
use crate::kernels::testutil::{assert_close, round_to, Rng};

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The values a (rows, cols) matrix stands for once uploaded as `dtype`.
fn as_stored(v: &[f32], rows: usize, cols: usize, dtype: DType) -> Vec<f32> {
    match dtype {
        DType::Q8 | DType::Q4 => {
            crate::base::dtype::dequantize(&crate::base::dtype::quantize(v, rows, cols, dtype), rows, cols, dtype)
        }
        _ => v.iter().map(|&x| round_to(dtype, x)).collect(),
    }
}

/// The variants checked here: natively every one the device can run; in the browser (where
/// SwiftShader compiles each pipeline slowly: these tests took 130 of the library's 171 s
/// there with six variants) one of each kernel family, the register-blocked (8 rows), the
/// subgroup-shared (16 rows, where the device has subgroups) and one tile shape. The WGSL is
/// the same on both sides, so the native run checks the other shapes' arithmetic; the
/// browser's checks Tint and Chromium, and tests/grad_fixtures.rs still runs every variant on
/// a model's gradients in Chromium.
fn tested(gpu: &Gpu) -> Vec<Variant> {
    let all = runnable(gpu);
    if crate::platform::BROWSER {
        let keep = |v: &Variant| match v {
            Variant::Blocked => true,
            Variant::Shared { shape, .. } => shape.rows == 16,
            Variant::Tiled(t) => *t == tiled::Tile::ALL[3],
            _ => false,
        };
        return all.into_iter().filter(keep).collect();
    }
    all
}

/// `nt` with every variant [`tested`] here.
async fn check_nt(gpu: &Gpu, m: usize, k: usize, n: usize, dtype: DType, bias: bool, beta: f32) {
    for v in tested(gpu) {
        for rank in [0, 8, 5] {
            check_nt_with(gpu, v, m, k, n, dtype, bias, beta, rank).await;
        }
    }
}

/// With `rank` > 0, a fused LoRA term s·h·Bᵀ (h: (m, rank), B: (n, rank)) rides along.
#[allow(clippy::too_many_arguments)]
async fn check_nt_with(
    gpu: &Gpu,
    v: Variant,
    m: usize,
    k: usize,
    n: usize,
    dtype: DType,
    bias: bool,
    beta: f32,
    rank: usize,
) {
    let mut rng = Rng::new((m * 1000 + k * 10 + n) as u64);
    let a = rng.vec(m * k, 1.0);
    let b0 = rng.vec(n * k, 1.0);
    let b = as_stored(&b0, n, k, dtype);
    let bi = rng.vec(n, 1.0);
    let c0 = rng.vec(m * n, 1.0);
    let ta = gpu.upload_f32(&a, &[m, k], Category::Activations).unwrap();
    let tb = gpu.upload_f32_as(&b0, &[n, k], dtype, Category::Weights).unwrap();
    let tbias = gpu.upload_f32(&bi, &[n], Category::Weights).unwrap();
    let tc = gpu.upload_f32(&c0, &[m, n], Category::Activations).unwrap();
    let alpha = 0.75;
    let r1 = rank.max(1); // rank 0: no LoRA term (the tensors are unused)
    let (h, lb, s) = (rng.vec(m * r1, 1.0), rng.vec(n * r1, 1.0), 2.5f32);
    let th = gpu.upload_f32(&h, &[m, r1], Category::Activations).unwrap();
    let tlb = gpu.upload_f32(&lb, &[n, r1], Category::Lora).unwrap();
    let fused = (rank > 0).then_some(Fused { left: &th, right: &tlb, scale: s });
    matmul_nt_with(gpu, v, &ta, &tb, bias.then_some(&tbias), &tc, alpha, beta, fused);
    let got = gpu.read_f32(&tc).await.unwrap();
    let mut want = reference::nt(&f64s(&a), &f64s(&b), m, k, n);
    if rank > 0 {
        let lora = reference::nt(&f64s(&h), &f64s(&lb), m, rank, n);
        for (w, l) in want.iter_mut().zip(&lora) {
            *w += s as f64 / alpha as f64 * l;
        }
    }
    for i in 0..m {
        for j in 0..n {
            let w = &mut want[i * n + j];
            *w = alpha as f64 * *w + beta as f64 * c0[i * n + j] as f64 + if bias { bi[j] as f64 } else { 0.0 };
        }
    }
    let what = format!("nt {} {m}x{k}x{n} {dtype:?} rank {rank}", v.name());
    if v.half() {
        let mag = reference::nt(&abs64(&a), &abs64(&b), m, k, n);
        return assert_close_f16(&what, &got, &want, &mag, alpha as f64);
    }
    assert_close(&what, &got, &want, 1e-4, 1e-4);
}

fn abs64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x.abs() as f64).collect()
}

/// A variant that multiplies in f16 ([`Variant::half`]): each output within f16's rounding of
/// its products, 2⁻⁹ · |α| · Σₖ |a_k · b_k| (`mag` holds the sums), of the f64 reference, besides
/// f32's 1e-4.
fn assert_close_f16(what: &str, got: &[f32], want: &[f64], mag: &[f64], alpha: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, ((g, w), s)) in got.iter().zip(want).zip(mag).enumerate() {
        let bound = 1e-4 + 1e-4 * w.abs() + alpha.abs() * s / 512.0;
        let d = (*g as f64 - w).abs();
        assert!(d <= bound, "{what}: element {i}: {g} vs {w} (|difference| {d:.3e} > {bound:.3e})");
    }
}

/// `nn` with every variant [`tested`] here.
async fn check_nn(gpu: &Gpu, m: usize, k: usize, n: usize, dtype: DType, beta: f32) {
    for v in tested(gpu) {
        for rank in [0, 8, 5] {
            check_nn_with(gpu, v, m, k, n, dtype, beta, rank).await;
        }
    }
}

/// With `rank` > 0, a fused LoRA term s·g·A (g: (m, rank), A: (rank, n)) rides along.
#[allow(clippy::too_many_arguments)]
async fn check_nn_with(gpu: &Gpu, v: Variant, m: usize, k: usize, n: usize, dtype: DType, beta: f32, rank: usize) {
    let mut rng = Rng::new((m * 7 + k * 100 + n) as u64);
    let a = rng.vec(m * k, 1.0);
    let b0 = rng.vec(k * n, 1.0);
    let b = as_stored(&b0, k, n, dtype);
    let c0 = rng.vec(m * n, 1.0);
    let ta = gpu.upload_f32(&a, &[m, k], Category::Activations).unwrap();
    let tb = gpu.upload_f32_as(&b0, &[k, n], dtype, Category::Weights).unwrap();
    let tc = gpu.upload_f32(&c0, &[m, n], Category::Activations).unwrap();
    let r1 = rank.max(1); // rank 0: no LoRA term (the tensors are unused)
    let (g, la, s) = (rng.vec(m * r1, 1.0), rng.vec(r1 * n, 1.0), 0.5f32);
    let tg = gpu.upload_f32(&g, &[m, r1], Category::Activations).unwrap();
    let tla = gpu.upload_f32(&la, &[r1, n], Category::Lora).unwrap();
    let fused = (rank > 0).then_some(Fused { left: &tg, right: &tla, scale: s });
    matmul_nn_with(gpu, v, &ta, &tb, &tc, 1.5, beta, fused);
    let got = gpu.read_f32(&tc).await.unwrap();
    let mut want = reference::nn(&f64s(&a), &f64s(&b), m, k, n);
    let lora = if rank > 0 { reference::nn(&f64s(&g), &f64s(&la), m, rank, n) } else { vec![0.0; m * n] };
    for ((w, c), l) in want.iter_mut().zip(&c0).zip(&lora) {
        *w = 1.5 * *w + beta as f64 * *c as f64 + s as f64 * l;
    }
    let what = format!("nn {} {m}x{k}x{n} {dtype:?} rank {rank}", v.name());
    if v.half() {
        let mag = reference::nn(&abs64(&a), &abs64(&b), m, k, n);
        return assert_close_f16(&what, &got, &want, &mag, 1.5);
    }
    assert_close(&what, &got, &want, 1e-4, 1e-4);
}

async fn check_tn(gpu: &Gpu, k: usize, m: usize, n: usize, beta: f32) {
    let mut rng = Rng::new((m * 3 + k * 17 + n) as u64);
    let a = rng.vec(k * m, 1.0);
    let b = rng.vec(k * n, 1.0);
    let c0 = rng.vec(m * n, 1.0);
    let ta = gpu.upload_f32(&a, &[k, m], Category::Activations).unwrap();
    let tb = gpu.upload_f32(&b, &[k, n], Category::Activations).unwrap();
    let tc = gpu.upload_f32(&c0, &[m, n], Category::Grads).unwrap();
    matmul_tn(gpu, &ta, &tb, &tc, -0.5, beta);
    let got = gpu.read_f32(&tc).await.unwrap();
    let mut want = reference::tn(&f64s(&a), &f64s(&b), k, m, n);
    for (w, c) in want.iter_mut().zip(&c0) {
        *w = -0.5 * *w + beta as f64 * *c as f64;
    }
    assert_close(&format!("tn {k}x{m}x{n}"), &got, &want, 1e-4, 1e-4);
}

gpu_test!(async fn matmul_nt_odd_shapes(gpu) {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        check_nt(gpu, 37, 53, 29, dtype, true, 0.0).await;
        check_nt(gpu, 3, 7, 5, dtype, false, 1.0).await;
        // Decoding: one token, two.
        check_nt(gpu, 1, 53, 29, dtype, true, 0.0).await;
        check_nt(gpu, 2, 52, 70, dtype, false, 1.0).await;
        // LoRA's thin products: N = r, K long (split over a workgroup for f32 B).
        check_nt(gpu, 37, 300, 8, dtype, true, 0.5).await;
        check_nt(gpu, 13, 257, 5, dtype, false, 0.0).await;
        // Few rows, many columns: workgroups arranged along N.
        check_nt(gpu, 13, 64, 600, dtype, true, 0.5).await;
    }
});

gpu_test!(async fn matmul_nt_vector_shapes(gpu) {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        check_nt(gpu, 37, 52, 44, dtype, true, 0.5).await;
        check_nt(gpu, 70, 68, 9, dtype, false, 0.0).await;
    }
});

gpu_test!(async fn matmul_nn_shapes(gpu) {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        check_nn(gpu, 37, 53, 29, dtype, 0.0).await;
        check_nn(gpu, 37, 52, 44, dtype, 1.0).await;
        check_nn(gpu, 19, 44, 72, dtype, 0.0).await;
        check_nn(gpu, 5, 3, 7, dtype, 0.0).await;
        check_nn(gpu, 1, 44, 72, dtype, 1.0).await;
        check_nn(gpu, 37, 300, 8, dtype, 1.0).await;
        check_nn(gpu, 13, 258, 3, dtype, 0.0).await;
    }
});

// Quantized B: K (nt) or N (nn) not a multiple of the group, of 8 or of 4; several groups
// with a partial last one; exactly two Q4 groups; one tiny case.
gpu_test!(async fn matmul_nt_quantized(gpu) {
    for dtype in [DType::Q8, DType::Q4] {
        check_nt(gpu, 37, 53, 29, dtype, true, 0.0).await;
        check_nt(gpu, 37, 128, 72, dtype, false, 0.5).await;
        check_nt(gpu, 19, 100, 44, dtype, true, 1.0).await;
        check_nt(gpu, 70, 70, 9, dtype, false, 0.0).await;
        check_nt(gpu, 3, 7, 5, dtype, false, 1.0).await;
    }
});

gpu_test!(async fn matmul_nn_quantized(gpu) {
    for dtype in [DType::Q8, DType::Q4] {
        check_nn(gpu, 37, 53, 29, dtype, 0.0).await;
        check_nn(gpu, 37, 72, 128, dtype, 1.0).await;
        check_nn(gpu, 19, 44, 100, dtype, 0.0).await;
        check_nn(gpu, 9, 70, 70, dtype, 0.5).await;
        check_nn(gpu, 5, 3, 7, dtype, 0.0).await;
        check_nn(gpu, 21, 64, 600, dtype, 1.0).await;
    }
});

#[test]
fn workgroups_arranged_to_waste_least() {
    // Eight 16-row subgroups of 64 columns: a Qwen2.5-0.5B MLP chunk of 42 tokens takes all
    // eight along N (48 rows computed, not 128); 256 tokens keep them along M.
    assert_eq!(arrange(42, 4864, 16, 64, 8, 8), 1);
    assert_eq!(arrange(107, 4864, 16, 64, 8, 8), 1);
    assert_eq!(arrange(256, 4864, 16, 64, 8, 8), 8);
    assert_eq!(arrange(256, 128, 16, 64, 8, 8), 8);
    assert_eq!(arrange(19, 72, 16, 64, 8, 8), 4);
    // The register-blocked kernel's 64 invocations: at most 8 along M.
    assert_eq!(arrange(256, 896, 8, 8, 64, 8), 8);
    assert_eq!(arrange(13, 600, 8, 8, 64, 8), 2);
}

gpu_test!(async fn matmul_tn_shapes(gpu) {
    check_tn(gpu, 37, 29, 53, 0.0).await;
    check_tn(gpu, 37, 44, 12, 1.0).await;
    check_tn(gpu, 5, 3, 9, 1.0).await;
    // LoRA's weight gradients (split over tokens): dB (out, r) and dA (r, in), r = 8 or not,
    // sides not multiples of 8, tokens fewer and more than a workgroup.
    check_tn(gpu, 37, 300, 8, 1.0).await;
    check_tn(gpu, 130, 29, 5, 0.0).await;
    check_tn(gpu, 37, 8, 300, 0.5).await;
    check_tn(gpu, 200, 3, 77, 1.0).await;
    check_tn(gpu, 16, 9, 8, 0.0).await;
});

gpu_test!(async fn matmul_variants_agree_and_names_round_trip(gpu) {
    for v in runnable(gpu) {
        assert_eq!(Variant::parse(&v.name()), Some(v), "{}", v.name());
    }
    for v in tested(gpu) {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::Q8, DType::Q4] {
            assert!(agrees(gpu, v, dtype).await.expect("runs"), "{} disagrees on {dtype:?}", v.name());
        }
    }
    assert_eq!(Variant::parse("shared12x8/8/sg8"), None);
    assert_eq!(Variant::parse("tiled"), None);
});

// The variants that multiply in f16 (where the device has shader-f16: lavapipe natively;
// SwiftShader in Chromium has none): every tile shape, every weight dtype, awkward shapes,
// bias, β and fused LoRA terms, within f16's rounding of the f64 reference; the load-time
// check passes them.
gpu_test!(async fn matmul_f16_tiles(gpu) {
    let vs = runnable_f16(gpu);
    if vs.is_empty() {
        assert!(!gpu.info.shader_f16 || crate::platform::BROWSER, "shader-f16 but no f16 tile fits");
        println!("no shader-f16 on this adapter: the f16 tiles are not offered, nothing to check");
        return;
    }
    assert_eq!(vs.len(), tiled::Tile::ALL.len());
    // Every dtype for one shape, two for the others (each pipeline compiles in ~0.1 s here).
    for (j, v) in vs.into_iter().enumerate() {
        assert!(v.half() && !runnable(gpu).contains(&v));
        assert_eq!(Variant::parse(&v.name()), Some(v), "{}", v.name());
        let all = [DType::F32, DType::BF16, DType::F16, DType::Q8, DType::Q4];
        for dtype in if j == 0 { &all[..] } else { &[DType::BF16, DType::Q4] } {
            let dtype = *dtype;
            check_nt_with(gpu, v, 37, 53, 29, dtype, true, 0.5, 5).await;
            check_nt_with(gpu, v, 19, 100, 44, dtype, false, 0.0, 0).await;
            check_nn_with(gpu, v, 37, 53, 29, dtype, 1.0, 8).await;
            check_nn_with(gpu, v, 21, 64, 600, dtype, 0.0, 0).await;
            assert!(agrees(gpu, v, dtype).await.expect("runs"), "{} disagrees on {dtype:?}", v.name());
        }
    }
});

// f16's range is 6e-8 … 65504: the f16 tiles scale each row of A by a power of two, so
// gradients of 1e-9 do not flush to zero and an activation of 3e4 does not overflow (without
// the scaling both fail this test).
gpu_test!(async fn matmul_f16_tiles_keep_their_range(gpu) {
    let Some(&v) = runnable_f16(gpu).first() else {
        println!("no shader-f16 on this adapter: nothing to check");
        return;
    };
    let (m, k, n) = (40, 96, 72);
    let mut rng = Rng::new(0xf16);
    let b = rng.vec(n * k, 1.0);
    let tb = gpu.upload_f32(&b, &[n, k], Category::Weights).unwrap();
    let tbn = gpu.upload_f32(&b, &[k, n], Category::Weights).unwrap();
    for (scale, outlier) in [(1e-9f32, None), (1.0, Some(3e4f32)), (1e3, None)] {
        let mut a: Vec<f32> = rng.vec(m * k, scale);
        if let Some(o) = outlier {
            for r in 0..m {
                a[r * k + (r * 7) % k] = o;
            }
        }
        let ta = gpu.upload_f32(&a, &[m, k], Category::Activations).unwrap();
        let (tc, tcn) = (gpu.zeros(&[m, n], DType::F32, Category::Activations).unwrap(), gpu.zeros(&[m, n], DType::F32, Category::Activations).unwrap());
        matmul_nt_with(gpu, v, &ta, &tb, None, &tc, 1.0, 0.0, None);
        matmul_nn_with(gpu, v, &ta, &tbn, &tcn, 1.0, 0.0, None);
        let what = format!("{} with A of scale {scale:e} (outlier {outlier:?})", v.name());
        let (a64, aabs, b64, babs) = (f64s(&a), abs64(&a), f64s(&b), abs64(&b));
        // Relative to the products' size: 1e-4 absolute would pass anything at scale 1e-9.
        let rel = |got: &[f32], want: Vec<f64>, mag: Vec<f64>| {
            got.iter().zip(&want).zip(&mag).map(|((g, w), s)| (*g as f64 - w).abs() / s).fold(0.0, f64::max)
        };
        let e = rel(&gpu.read_f32(&tc).await.unwrap(), reference::nt(&a64, &b64, m, k, n), reference::nt(&aabs, &babs, m, k, n));
        let en =
            rel(&gpu.read_f32(&tcn).await.unwrap(), reference::nn(&a64, &b64, m, k, n), reference::nn(&aabs, &babs, m, k, n));
        assert!(e <= 1.0 / 512.0 && en <= 1.0 / 512.0, "{what}: error over Σ|a·b| {e:.3e} (nt), {en:.3e} (nn)");
    }
});

// The split-K kernels for LoRA's thin products, as a device that chose them runs them
// (f32 B only: the LoRA factors): K long and not a multiple of 4 or of the split; r = 8 or less.
gpu_test!(async fn thin_split_k_kernels(gpu) {
    gpu.set_choice(THIN_CHOICE, Some(SPLIT_K.into()));
    for (m, k, n) in [(37, 300, 8), (13, 257, 5), (70, 1030, 8)] {
        check_nt_with(gpu, Variant::Blocked, m, k, n, DType::F32, true, 0.5, 0).await;
        check_nt_with(gpu, Variant::Blocked, m, k, n, DType::F32, false, 0.0, 0).await;
        check_nn_with(gpu, Variant::Blocked, m, k, n, DType::F32, 1.0, 0).await;
    }
    check_tn(gpu, 37, 300, 8, 1.0).await;
    check_tn(gpu, 130, 29, 5, 0.0).await;
    check_tn(gpu, 37, 8, 300, 0.5).await;
    check_tn(gpu, 200, 3, 77, 1.0).await;
});

gpu_test!(async fn thin_choice_is_the_faster_agreeing_kernel(gpu) {
    let measured = choose_thin(gpu, 40, &[96, 200], 8, 1).await.expect("runs");
    assert_eq!(measured.len(), 2);
    assert!(measured.iter().all(|m| m.agrees && m.ms > 0.0), "{measured:?}");
    let chosen: Vec<_> = measured.iter().filter(|m| m.chosen).collect();
    assert_eq!(chosen.len(), 1);
    let fastest = measured.iter().min_by(|a, b| a.ms.total_cmp(&b.ms)).unwrap();
    assert_eq!(chosen[0].variant, fastest.variant);
    let split = gpu.choice(THIN_CHOICE).is_some();
    assert_eq!(split, chosen[0].variant == SPLIT_K);
});

// The one-row (decoding) kernels, as a device that chose one runs it: every weight dtype, K
// and N off every multiple (and K a multiple of 8, 32 and 64, which the rows kernel wants for
// 16-bit, Q8 and Q4 weights), with bias, β
// and a fused LoRA term; N = r (LoRA's h). Devices without subgroups of one size (SwiftShader)
// have only the rows kernels to check.
gpu_test!(async fn gemv_kernels(gpu) {
    let cands = gemv_candidates(gpu);
    assert!(cands.contains(&Gemv::Rows(8)) && cands.contains(&Gemv::Rows(16)));
    for c in cands {
        gpu.set_choice(GEMV_CHOICE, Some(c.name()));
        assert_eq!(gemv_choice(gpu), Some(c));
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::Q8, DType::Q4] {
            for (k, n, bias, beta) in
                [(53, 29, true, 0.0), (52, 70, false, 1.0), (300, 8, true, 0.5), (136, 600, true, 1.0), (96, 37, false, 0.5), (192, 45, true, 1.0)]
            {
                for rank in [0, 8, 5] {
                    check_nt_with(gpu, Variant::Blocked, 1, k, n, dtype, bias, beta, rank).await;
                }
            }
        }
    }
    gpu.set_choice(GEMV_CHOICE, None);
});

gpu_test!(async fn gemv_choice_is_the_faster_agreeing_kernel(gpu) {
    let measured = choose_gemv(gpu, &[(96, 200), (200, 96)], DType::BF16, 1).await.expect("runs");
    let cands = gemv_candidates(gpu);
    if cands.is_empty() {
        assert!(measured.is_empty() && gpu.choice(GEMV_CHOICE).is_none());
        return;
    }
    assert_eq!(measured.len(), cands.len() + 1);
    assert!(measured.iter().all(|m| m.agrees && m.ms > 0.0), "{measured:?}");
    let fastest = measured.iter().min_by(|a, b| a.ms.total_cmp(&b.ms)).unwrap();
    assert!(fastest.chosen && measured.iter().filter(|m| m.chosen).count() == 1, "{measured:?}");
    assert_eq!(gpu.choice(GEMV_CHOICE), (fastest.variant != "blocked").then(|| fastest.variant.clone()));
    assert!(gemv_runnable(gpu, &fastest.variant) || fastest.variant == "blocked");
    assert_eq!(Gemv::parse("subgroup/sg8/rb0"), None);
    assert_eq!(Gemv::parse("rows/r16"), Some(Gemv::Rows(16)));
    assert_eq!(Gemv::parse("rows/r7"), None);
    gpu.set_choice(GEMV_CHOICE, None);
});

// LoRA's down-products of the projections that share one input, computed together as decoding
// does: each h_j equals its own product's bit for bit, with each one-row kernel chosen and with
// none (3 in a dispatch, a fourth alone); K off every multiple; r 8 and 5.
gpu_test!(async fn batched_lora_down_products_equal_their_own(gpu) {
    let mut rng = Rng::new(41);
    let choices: Vec<Option<String>> =
        std::iter::once(None).chain(gemv_candidates(gpu).into_iter().map(|c| Some(c.name()))).collect();
    for choice in choices {
        gpu.set_choice(GEMV_CHOICE, choice.clone());
        for (k, r, count) in [(53, 8, 3usize), (576, 8, 2), (300, 5, 4)] {
            let x = gpu.upload_f32(&rng.vec(k, 1.0), &[1, k], Category::Scratch).unwrap();
            let a: Vec<Tensor> =
                (0..count).map(|_| gpu.upload_f32(&rng.vec(r * k, 1.0), &[r, k], Category::Scratch).unwrap()).collect();
            let zeros = || gpu.zeros(&[1, r], DType::F32, Category::Scratch).unwrap();
            let (many, own): (Vec<Tensor>, Vec<Tensor>) = (0..count).map(|_| (zeros(), zeros())).unzip();
            let pairs: Vec<(&Tensor, &Tensor)> = a.iter().zip(&many).collect();
            gpu.profile_start();
            matmul_nt_many(gpu, &x, &pairs);
            // Up to three products a dispatch, whichever kernel the device chose.
            let calls = gpu.profile_take().await.unwrap().map_or(0, |p| p.calls());
            assert_eq!(calls as usize, count.div_ceil(3), "{choice:?} k {k} r {r}: {calls} dispatches for {count}");
            for (a, h) in a.iter().zip(&own) {
                matmul_nt(gpu, &x, a, None, h, 1.0, 0.0);
            }
            for (j, (m, o)) in many.iter().zip(&own).enumerate() {
                let (m, o) = (gpu.read_f32(m).await.unwrap(), gpu.read_f32(o).await.unwrap());
                assert!(m.iter().zip(&o).all(|(p, q)| p.to_bits() == q.to_bits()), "{choice:?} k {k} r {r} h_{j}: {m:?} vs {o:?}");
                assert!(o.iter().any(|&v| v != 0.0));
            }
        }
        // Rank 0 (`bench decode --rank 0`): nothing to compute, no dispatch.
        let x = gpu.upload_f32(&rng.vec(64, 1.0), &[1, 64], Category::Scratch).unwrap();
        let a = gpu.zeros(&[0, 64], DType::F32, Category::Scratch).unwrap();
        let h = gpu.zeros(&[1, 0], DType::F32, Category::Scratch).unwrap();
        gpu.profile_start();
        matmul_nt_many(gpu, &x, &[(&a, &h), (&a, &h), (&a, &h)]);
        let calls = gpu.profile_take().await.unwrap().map_or(0, |p| p.calls());
        assert_eq!(calls, 0, "{choice:?}: rank 0");
    }
    gpu.set_choice(GEMV_CHOICE, None);
});

// The same for a training step's rows (M from 9 to 300, off every multiple; K off 4 too; r 8,
// 5 and 3): up to three in a dispatch, each h_j its own thin product bit for bit.
gpu_test!(async fn batched_lora_down_products_of_many_rows_equal_their_own(gpu) {
    let mut rng = Rng::new(43);
    for (m, k, r, count) in [(256, 576, 8, 3usize), (37, 53, 5, 2), (300, 64, 8, 4), (9, 100, 3, 3)] {
        let x = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Scratch).unwrap();
        let a: Vec<Tensor> =
            (0..count).map(|_| gpu.upload_f32(&rng.vec(r * k, 1.0), &[r, k], Category::Scratch).unwrap()).collect();
        let zeros = || gpu.zeros(&[m, r], DType::F32, Category::Scratch).unwrap();
        let (many, own): (Vec<Tensor>, Vec<Tensor>) = (0..count).map(|_| (zeros(), zeros())).unzip();
        let pairs: Vec<(&Tensor, &Tensor)> = a.iter().zip(&many).collect();
        gpu.profile_start();
        matmul_nt_many(gpu, &x, &pairs);
        let calls = gpu.profile_take().await.unwrap().map_or(0, |p| p.calls());
        assert_eq!(calls as usize, count.div_ceil(3), "m {m} k {k} r {r}: {calls} dispatches for {count}");
        for (a, h) in a.iter().zip(&own) {
            matmul_nt(gpu, &x, a, None, h, 1.0, 0.0);
        }
        for (j, (mv, o)) in many.iter().zip(&own).enumerate() {
            let (mv, o) = (gpu.read_f32(mv).await.unwrap(), gpu.read_f32(o).await.unwrap());
            assert!(mv.iter().zip(&o).all(|(p, q)| p.to_bits() == q.to_bits()), "m {m} k {k} r {r} h_{j} differs");
            assert!(o.iter().filter(|&&v| v != 0.0).count() > o.len() / 2);
        }
    }
});

// Decoding's MLP in one dispatch: m = silu(gate) · up equals the two one-row products (with
// their LoRA terms) and swiglu_forward bit for bit, for each rows kernel and weight dtype it
// takes, r 0, 8 and 5; where the choice or the shape is not the rows kernel's, nothing is done.
gpu_test!(async fn gate_up_swiglu_row_equals_its_three_dispatches(gpu) {
    use crate::kernels::swiglu::swiglu_forward;
    let mut rng = Rng::new(77);
    let up = |rng: &mut Rng, n: usize, shape: &[usize]| gpu.upload_f32(&rng.vec(n, 1.0), shape, Category::Scratch).unwrap();
    for choice in gemv_candidates(gpu).into_iter().filter(|g| matches!(g, Gemv::Rows(_))) {
        gpu.set_choice(GEMV_CHOICE, Some(choice.name()));
        for dtype in [DType::BF16, DType::F16, DType::Q8, DType::Q4] {
            for (k, n, rank) in [(128, 37, 0), (192, 100, 8), (64, 9, 5)] {
                let x = up(&mut rng, k, &[1, k]);
                let w: Vec<Tensor> = (0..2)
                    .map(|_| gpu.upload_f32_as(&rng.vec(n * k, 0.5), &[n, k], dtype, Category::Scratch).unwrap())
                    .collect();
                let hb: Vec<(Tensor, Tensor)> =
                    (0..2).map(|_| (up(&mut rng, rank.max(1), &[1, rank.max(1)]), up(&mut rng, n * rank.max(1), &[n, rank.max(1)]))).collect();
                let fused = |i: usize| (rank > 0).then(|| Fused { left: &hb[i].0, right: &hb[i].1, scale: 1.5 });
                let zeros = || gpu.zeros(&[1, n], DType::F32, Category::Scratch).unwrap();
                let (g, u, want, got) = (zeros(), zeros(), zeros(), zeros());
                matmul_nt_with(gpu, Variant::Blocked, &x, &w[0], None, &g, 1.0, 0.0, fused(0));
                matmul_nt_with(gpu, Variant::Blocked, &x, &w[1], None, &u, 1.0, 0.0, fused(1));
                swiglu_forward(gpu, &g, &u, &want);
                assert!(gate_up_swiglu_row(gpu, &x, (&w[0], fused(0)), (&w[1], fused(1)), &got), "{choice:?} {dtype:?}");
                let (want, got) = (gpu.read_f32(&want).await.unwrap(), gpu.read_f32(&got).await.unwrap());
                assert!(
                    want.iter().zip(&got).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{choice:?} {dtype:?} k {k} n {n} r {rank}: {got:?} vs {want:?}"
                );
                assert!(want.iter().any(|&v| v != 0.0));
            }
        }
        // K off the rows kernel's multiples, f32 weights: not taken.
        let x = up(&mut rng, 52, &[1, 52]);
        let w = gpu.upload_f32_as(&rng.vec(8 * 52, 1.0), &[8, 52], DType::BF16, Category::Scratch).unwrap();
        let m = gpu.zeros(&[1, 8], DType::F32, Category::Scratch).unwrap();
        assert!(!gate_up_swiglu_row(gpu, &x, (&w, None), (&w, None), &m));
        let x = up(&mut rng, 64, &[1, 64]);
        let w = up(&mut rng, 8 * 64, &[8, 64]);
        assert!(!gate_up_swiglu_row(gpu, &x, (&w, None), (&w, None), &m));
    }
    let x = up(&mut rng, 64, &[1, 64]);
    let w = gpu.upload_f32_as(&rng.vec(8 * 64, 1.0), &[8, 64], DType::BF16, Category::Scratch).unwrap();
    let m = gpu.zeros(&[1, 8], DType::F32, Category::Scratch).unwrap();
    gpu.set_choice(GEMV_CHOICE, None);
    assert!(!gate_up_swiglu_row(gpu, &x, (&w, None), (&w, None), &m));
});

// The patched wgpu (vendor/) asks browsers for subgroups, which SwiftShader in the tests'
// Chromium has (4 lanes), so the subgroup variants run and are tested there; a wgpu without the
// mapping would drop them silently. (Natively this checks nothing: lavapipe's subgroups come
// through wgpu-core.)
gpu_test!(async fn browser_device_gets_subgroups(gpu) {
    if crate::platform::BROWSER && gpu.info.cpu {
        assert!(gpu.info.subgroups, "SwiftShader lists subgroups but the device did not get them: {:?}", gpu.info);
        assert!(runnable(gpu).iter().any(|v| matches!(v, Variant::Shared { .. })), "{:?}", gpu.info);
    }
});
