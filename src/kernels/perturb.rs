//! [`perturb`]: p += α·z with z ~ N(0, 1) regenerated from (seed, stream, element index) by a
//! counter-based hash, so a perturbation (MeZO's) is never stored: applying it, undoing it and
//! stepping along it all regenerate the same z. [`z_host`] computes the same z on the host.
//!
//! The generator: the host mixes (seed, stream) with SplitMix64 into a 64-bit key; element
//! block b = i / 4 hashes (b, stream, key) twice through pcg4d (Jarzynski & Olano 2020) into four
//! u32 words, and two Box–Muller transforms make the four normals of the block. The log, sin and
//! cos of Box–Muller are written out with +, −, ·, / and sqrt (range reduction on the integers,
//! then short series), because WGSL leaves the built-ins' accuracy to the backend (SwiftShader's
//! are off by ~1e-4 relative). GPU z then equals `z_host` bit for bit on lavapipe and SwiftShader;
//! a backend that fuses multiply-adds differently may differ by a few ulps.

use crate::gpu::{DType, Gpu, Tensor};

const SRC: &str = include_str!("perturb.wgsl");

/// Elements one workgroup of `perturb.wgsl` covers: 64 invocations × 4 blocks × 4 elements.
const PER_GROUP: usize = 64 * 4 * 4;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    key_lo: u32,
    key_hi: u32,
    stream: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e3779b97f4a7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
    z ^ (z >> 31)
}

/// The 64-bit key of (seed, stream), as (low, high) words.
fn key(seed: u64, stream: u32) -> (u32, u32) {
    let k = splitmix64(splitmix64(seed) ^ stream as u64);
    (k as u32, (k >> 32) as u32)
}

/// p += α · z(seed, stream); p f32 of any shape. z ~ N(0, 1) elementwise, the same on every
/// backend up to f32 rounding (see the module docs); `perturb(α)` followed
/// by `perturb(−α)` with the same seed and stream restores p up to one rounding per step.
pub fn perturb(gpu: &Gpu, p: &Tensor, alpha: f32, seed: u64, stream: u32) {
    let n = p.numel();
    assert!(
        p.dtype == DType::F32 && n <= u32::MAX as usize,
        "perturb: p {:?} {:?} (want f32 with fewer than 2^32 elements)",
        p.shape,
        p.dtype
    );
    if n == 0 {
        return;
    }
    let pipeline = gpu.pipeline("perturb", || SRC.to_string());
    let (key_lo, key_hi) = key(seed, stream);
    let prm = Params { n: n as u32, alpha, key_lo, key_hi, stream, _p0: 0, _p1: 0, _p2: 0 };
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&prm), &[p], (n.div_ceil(PER_GROUP) as u32, 1, 1));
}

/// pcg4d, as in perturb.wgsl.
fn pcg4d(a: [u32; 4]) -> [u32; 4] {
    let mut v = a.map(|x| x.wrapping_mul(1664525).wrapping_add(1013904223));
    let mix = |v: &mut [u32; 4]| {
        v[0] = v[0].wrapping_add(v[1].wrapping_mul(v[3]));
        v[1] = v[1].wrapping_add(v[2].wrapping_mul(v[0]));
        v[2] = v[2].wrapping_add(v[0].wrapping_mul(v[1]));
        v[3] = v[3].wrapping_add(v[1].wrapping_mul(v[2]));
    };
    mix(&mut v);
    v = v.map(|x| x ^ (x >> 16));
    mix(&mut v);
    v
}

const SQRT2: f32 = std::f32::consts::SQRT_2;
const LN2: f32 = std::f32::consts::LN_2;
/// 2π / 2^24: one step of the angle.
const ANGLE_STEP: f32 = std::f32::consts::TAU / 16_777_216.0;

/// ln(k·2^-24) for 1 ≤ k ≤ 2^24, as in perturb.wgsl.
fn ln_u(k: u32) -> f32 {
    let mut e = 31 - k.leading_zeros();
    let mut f = f32::from_bits(((k << (23 - e.min(23))) & 0x7f_ffff) | 0x3f80_0000);
    if f > SQRT2 {
        f *= 0.5;
        e += 1;
    }
    let s = (f - 1.0) / (f + 1.0);
    let s2 = s * s;
    let poly = 1.0 + s2 * (0.33333334 + s2 * (0.2 + s2 * (0.14285715 + s2 * 0.11111111)));
    (e as i32 - 24) as f32 * LN2 + 2.0 * s * poly
}

/// (cos, sin) of 2π·j/2^24 for 0 ≤ j < 2^24, as in perturb.wgsl.
fn cos_sin_turn(j: u32) -> (f32, f32) {
    let o = j >> 21;
    let mut r = j & 0x1f_ffff;
    if o & 1 != 0 {
        r = 0x20_0000 - r;
    }
    let x = r as f32 * ANGLE_STEP;
    let x2 = x * x;
    let sn = x * (1.0 - x2 * (0.16666667 - x2 * (0.008333334 - x2 * (0.0001984127 - x2 * 2.7557319e-6))));
    let cs = 1.0 - x2 * (0.5 - x2 * (0.041666668 - x2 * (0.0013888889 - x2 * (2.4801588e-5 - x2 * 2.755732e-7))));
    let (mut c, mut s) = if ((o + 1) >> 1) & 1 != 0 { (sn, cs) } else { (cs, sn) };
    if ((o + 2) >> 2) & 1 != 0 {
        c = -c;
    }
    if o >= 4 {
        s = -s;
    }
    (c, s)
}

/// Box–Muller, as in perturb.wgsl, in f32.
fn box_muller(h1: u32, h2: u32) -> (f32, f32) {
    let r = (-2.0 * ln_u((h1 >> 8) + 1)).max(0.0).sqrt();
    let (c, s) = cos_sin_turn(h2 >> 8);
    (r * c, r * s)
}

/// z(seed, stream, i) for i in 0..n: the numbers [`perturb`] adds (times α) on the GPU.
pub fn z_host(seed: u64, stream: u32, n: usize) -> Vec<f32> {
    let (key_lo, key_hi) = key(seed, stream);
    let mut out = Vec::with_capacity(n.next_multiple_of(4));
    for b in 0..n.div_ceil(4) {
        let h = pcg4d(pcg4d([b as u32, stream, key_lo, key_hi]));
        let (z0, z1) = box_muller(h[0], h[1]);
        let (z2, z3) = box_muller(h[2], h[3]);
        out.extend([z0, z1, z2, z3]);
    }
    out.truncate(n);
    out
}

/// f64 reference.
pub mod reference {
    /// p + α·z
    pub fn perturb(p: &[f64], alpha: f64, z: &[f32]) -> Vec<f64> {
        p.iter().zip(z).map(|(p, z)| p + alpha * *z as f64).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, Rng};

    /// Awkward sizes, a vec4-aligned one, a tiny one, and one spanning many workgroups.
    const SIZES: [usize; 5] = [37 * 29, 53, 3, 44 * 52, 100_003];

    /// (mean, variance) in f64.
    fn moments(z: &[f32]) -> (f64, f64) {
        let n = z.len() as f64;
        let mean = z.iter().map(|&v| v as f64).sum::<f64>() / n;
        let var = z.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
        (mean, var)
    }

    fn corr(a: &[f32], b: &[f32]) -> f64 {
        let (ma, va) = moments(a);
        let (mb, vb) = moments(b);
        let c = a.iter().zip(b).map(|(&x, &y)| (x as f64 - ma) * (y as f64 - mb)).sum::<f64>() / a.len() as f64;
        c / (va * vb).sqrt()
    }

    // z itself (0 + 1·z is exact) against z_host: bit-identical on lavapipe and SwiftShader; the
    // tolerance leaves a few ulps for a backend that fuses the series' multiply-adds.
    gpu_test!(async fn perturb_z_matches_host(gpu) {
        for &n in SIZES.iter().chain(&[1_000_003]) {
            for (seed, stream) in [(0u64, 0u32), (7, 3), (u64::MAX - 5, 12_345)] {
                let t = gpu.zeros(&[n], DType::F32, Category::Scratch).unwrap();
                perturb(gpu, &t, 1.0, seed, stream);
                let got = gpu.read_f32(&t).await.unwrap();
                let want: Vec<f64> = z_host(seed, stream, n).iter().map(|&v| v as f64).collect();
                let worst = got.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
                println!("z n={n} seed={seed} stream={stream}: largest |gpu − host| {worst:.2e}");
                assert_close(&format!("z n={n} seed={seed} stream={stream}"), &got, &want, 1e-6, 1e-6);
            }
        }
    });

    // p + α·z against the f64 reference: the z tolerance times |α|, plus the rounding of p + α·z
    // (|p| ≤ 1: half an ulp is 6e-8).
    gpu_test!(async fn perturb_matches_host(gpu) {
        for &n in &SIZES {
            for (seed, stream, alpha) in [(0u64, 0u32, 1.0f32), (7, 3, -0.37), (u64::MAX - 5, 12_345, 1e-3)] {
                let mut rng = Rng::new(n as u64 ^ seed);
                let p = rng.vec(n, 1.0);
                let t = gpu.upload_f32(&p, &[n], Category::Lora).unwrap();
                perturb(gpu, &t, alpha, seed, stream);
                let got = gpu.read_f32(&t).await.unwrap();
                let p64: Vec<f64> = p.iter().map(|&v| v as f64).collect();
                let want = reference::perturb(&p64, alpha as f64, &z_host(seed, stream, n));
                let atol = 7e-6 * alpha.abs() as f64 + 1.2e-7;
                assert_close(&format!("perturb n={n} seed={seed} stream={stream}"), &got, &want, atol, 0.0);
            }
        }
    });

    // The hand-written log and sin/cos against f64 over their whole input ranges (strided).
    gpu_test!(async fn perturb_host_math_is_accurate(gpu) {
        let _ = gpu;
        let mut worst_ln = 0.0f64;
        for k in (1..=1u32 << 24).step_by(997).chain([1, 2, 3, (1 << 23) + 1, (1 << 24) - 1, 1 << 24]) {
            let want = (k as f64 / 16_777_216.0).ln();
            worst_ln = worst_ln.max((ln_u(k) as f64 - want).abs() / want.abs().max(1e-30));
        }
        let mut worst_cs = 0.0f64;
        for j in (0..1u32 << 24).step_by(991).chain([0, 1, 1 << 21, (1 << 22) - 1, (1 << 24) - 1]) {
            let t = std::f64::consts::TAU * j as f64 / 16_777_216.0;
            let (c, s) = cos_sin_turn(j);
            worst_cs = worst_cs.max((c as f64 - t.cos()).abs()).max((s as f64 - t.sin()).abs());
        }
        println!("ln_u: worst relative error {worst_ln:.2e}; cos/sin: worst absolute error {worst_cs:.2e}");
        assert!(worst_ln < 1e-6, "ln_u relative error {worst_ln:.3e}");
        assert!(worst_cs < 5e-7, "cos/sin absolute error {worst_cs:.3e}");
        assert_eq!(ln_u(1 << 24), 0.0);
    });

    // z is standard normal: over 1e5 samples the standard error of the mean is 3.2e-3 and of the
    // variance 4.5e-3, so ±0.02 and ±0.03 are > 6σ. Neighbours, other streams and other seeds are
    // uncorrelated (|ρ| < 0.02, > 6σ), and the tail beyond 3σ holds ≈ 0.27%.
    gpu_test!(async fn perturb_z_is_standard_normal(gpu) {
        let n = 100_000;
        let z_gpu = |seed: u64, stream: u32| async move {
            let t = gpu.zeros(&[n], DType::F32, Category::Scratch).unwrap();
            perturb(gpu, &t, 1.0, seed, stream);
            gpu.read_f32(&t).await.unwrap()
        };
        let z = z_gpu(42, 0).await;
        let (mean, var) = moments(&z);
        assert!(mean.abs() < 0.02, "mean {mean}");
        assert!((var - 1.0).abs() < 0.03, "variance {var}");
        let tail = z.iter().filter(|v| v.abs() > 3.0).count() as f64 / n as f64;
        assert!((tail - 0.0027).abs() < 0.001, "P(|z| > 3) = {tail}");
        for lag in [1, 2, 3, 4, 5, 8] {
            let r = corr(&z[..n - lag], &z[lag..]);
            assert!(r.abs() < 0.02, "lag-{lag} correlation {r}");
        }
        for (what, other) in [("stream 1", z_gpu(42, 1).await), ("seed 43", z_gpu(43, 0).await)] {
            let r = corr(&z, &other);
            assert!(r.abs() < 0.02, "correlation with {what}: {r}");
        }
        let r = corr(&z.iter().map(|v| v * v).collect::<Vec<_>>(), &z_gpu(43, 0).await.iter().map(|v| v * v).collect::<Vec<_>>());
        assert!(r.abs() < 0.02, "correlation of squares with seed 43: {r}");
    });

    // perturb(+α) then perturb(−α) regenerates the same z: p comes back to within the two
    // roundings of p ± α·z (|α·z| < 6·α, so ≤ ulp of max(|p|, 6α)).
    gpu_test!(async fn perturb_restores(gpu) {
        for &n in &SIZES {
            let mut rng = Rng::new(n as u64 + 1);
            let p = rng.vec(n, 0.5);
            let t = gpu.upload_f32(&p, &[n], Category::Lora).unwrap();
            perturb(gpu, &t, 1e-3, 9, 5);
            perturb(gpu, &t, -1e-3, 9, 5);
            let got = gpu.read_f32(&t).await.unwrap();
            let want: Vec<f64> = p.iter().map(|&v| v as f64).collect();
            assert_close(&format!("restore n={n}"), &got, &want, 1e-7, 0.0);
        }
        // Nothing to do for an empty tensor.
        let t = gpu.zeros(&[0], DType::F32, Category::Lora).unwrap();
        perturb(gpu, &t, 1.0, 1, 1);
    });
}
