//! Blockwise quantized frozen weights (`DType::Q8`, `DType::Q4`), MLX style: each group of a
//! row holds unsigned codes q and one (scale, offset) pair, and the weight it stands for is
//! w = scale·q + offset. Here: the host-side quantizer and dequantizer, the upload, and the WGSL
//! decoders that matmul (B operand) and embedding use to dequantize on load.
//!
//! Layout of a (rows, cols) tensor, one buffer of u32 words:
//! - codes, row-major: every row padded to G = ceil(cols / group) whole groups, 8 words per group
//!   (row stride `DType::row_words(cols)` = 8·G words).
//!   Q8: group 32, element k of a row in byte k%4 of word k/4.
//!   Q4: group 64, element k of a row in nibble k%8 of word k/8 (bits 4·(k%8)..).
//!   Pad codes are 0; kernels never store results computed from them.
//! - then rows·G words of group parameters: word r·G + g holds (scale, offset) of group g of row
//!   r as two f16, scale in the low half (WGSL `unpack2x16float`).
//!
//! Quantization is asymmetric min/max per group: offset = the group's minimum rounded down to
//! f16, scale = (max − offset)/levels rounded up to f16 (levels 255 or 15), so every value
//! lies in [offset, offset + levels·scale] and is within scale/2 of its dequantized value.
//! Scale and offset are kept normal f16 or zero (never subnormal: some GPUs flush those), so
//! scale ≥ 2⁻¹⁴ unless the group is constant. Values beyond f16's range saturate.
//!
//! Dequantization is `scale * (q as f32) + offset` in f32. scale·q is exact in f32 (11 × 8
//! significant bits), so the GPU (fused or not) and [`dequantize`] agree bit for bit: the
//! quantized model is `dequantize(quantize(w))`, and CPU references use exactly that.

use crate::gpu::{Category, DType, Gpu, GpuError, Tensor};

/// WGSL decoders shared by the kernels that read Q8/Q4 weights (returned by
/// `kernels::unpack_fns` for those dtypes):
/// - `qparams(w) -> vec2<f32>`: (scale, offset) of a group from its parameter word;
/// - `q8x4(w) -> vec4<f32>`: the 4 byte codes of a word, element 0 in the low byte;
/// - `q4x4(w) -> vec4<f32>`: the 4 low nibbles of a word (shift right by 16 for the other 4).
pub const WGSL_FNS: &str = "fn qparams(w: u32) -> vec2<f32> { return unpack2x16float(w); }
fn q8x4(w: u32) -> vec4<f32> { return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xffu)); }
fn q4x4(w: u32) -> vec4<f32> { return vec4<f32>((vec4<u32>(w) >> vec4<u32>(0u, 4u, 8u, 12u)) & vec4<u32>(0xfu)); }
";

/// WGSL expression for the codes (as vec4<f32>, before scale and offset) of the 4 elements
/// k..k+3 (k % 4 == 0) of a row whose codes start at word `base` of array `arr`.
pub fn wgsl_codes4(dtype: DType, arr: &str, base: &str, k: &str) -> String {
    match dtype {
        DType::Q8 => format!("q8x4({arr}[{base} + {k} / 4u])"),
        DType::Q4 => format!("q4x4({arr}[{base} + {k} / 8u] >> (({k} & 4u) * 4u))"),
        _ => panic!("wgsl_codes4: {dtype:?} is not quantized"),
    }
}

/// WGSL expressions for the codes of the 8 elements k..k+7 (k % 8 == 0), as two vec4<f32>.
pub fn wgsl_codes8(dtype: DType, arr: &str, base: &str, k: &str) -> (String, String) {
    match dtype {
        DType::Q8 => (format!("q8x4({arr}[{base} + {k} / 4u])"), format!("q8x4({arr}[{base} + {k} / 4u + 1u])")),
        DType::Q4 => (format!("q4x4({arr}[{base} + {k} / 8u])"), format!("q4x4({arr}[{base} + {k} / 8u] >> 16u)")),
        _ => panic!("wgsl_codes8: {dtype:?} is not quantized"),
    }
}

/// Largest code: 255 for Q8, 15 for Q4.
pub fn levels(dtype: DType) -> u32 {
    match dtype {
        DType::Q8 => 255,
        DType::Q4 => 15,
        _ => panic!("levels: {dtype:?} is not quantized"),
    }
}

fn group_of(dtype: DType) -> usize {
    match dtype.group_size() {
        Some(g) => g,
        None => panic!("quant: {dtype:?} is not a quantized dtype (want Q8 or Q4)"),
    }
}

/// Smallest positive normal f16, 2⁻¹⁴.
const F16_MIN_NORMAL: f32 = 6.103_515_6e-5;

/// The largest f16 ≤ x that is zero or normal (saturating at ±65504).
fn f16_floor(x: f32) -> half::f16 {
    let x = x.clamp(-65504.0, 65504.0);
    let mut h = half::f16::from_f32(x);
    if h.to_f32() > x {
        let b = h.to_bits();
        h = half::f16::from_bits(match b {
            0x0000 | 0x8000 => 0x8001,
            b if b & 0x8000 == 0 => b - 1,
            b => b + 1,
        });
    }
    let v = h.to_f32();
    if v != 0.0 && v.abs() < F16_MIN_NORMAL {
        h = if v > 0.0 { half::f16::ZERO } else { half::f16::from_f32(-F16_MIN_NORMAL) };
    }
    h
}

/// The smallest f16 ≥ x ≥ 0 that is zero or normal (saturating at 65504).
fn f16_ceil(x: f32) -> half::f16 {
    if x <= 0.0 || x.is_nan() {
        return half::f16::ZERO;
    }
    let x = x.min(65504.0);
    let mut h = half::f16::from_f32(x);
    if h.to_f32() < x {
        h = half::f16::from_bits(h.to_bits() + 1);
    }
    if h.to_f32() < F16_MIN_NORMAL {
        h = half::f16::from_f32(F16_MIN_NORMAL);
    }
    h
}

/// (scale, offset) for a group's values, as f16.
fn group_params(vals: &[f32], levels: u32) -> (half::f16, half::f16) {
    let (mut lo, mut hi) = (f32::INFINITY, f32::NEG_INFINITY);
    for &v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return (half::f16::ZERO, half::f16::ZERO); // empty or all NaN
    }
    let offset = f16_floor(lo);
    let range = hi.clamp(-65504.0, 65504.0) as f64 - offset.to_f64();
    let mut scale = f16_ceil((range / levels as f64) as f32);
    // The f32 division may round down: make sure offset + levels·scale still reaches hi.
    while (scale.to_f64() * levels as f64) < range && scale.to_f32() < 65504.0 {
        scale = half::f16::from_bits(scale.to_bits() + 1);
    }
    (scale, offset)
}

/// Quantize a row-major (rows, cols) f32 matrix into the Q8/Q4 layout described above
/// (codes, then group parameters), as u32 words.
pub fn quantize(values: &[f32], rows: usize, cols: usize, dtype: DType) -> Vec<u32> {
    assert_eq!(values.len(), rows * cols, "quantize: {} values for ({rows}, {cols})", values.len());
    let (gs, levels) = (group_of(dtype), levels(dtype));
    let groups = cols.div_ceil(gs);
    let stride = dtype.row_words(cols);
    let bits = 32 / (gs / 8); // bits per code: 8 for Q8 (32 per 8 words), 4 for Q4
    let mut words = vec![0u32; rows * (stride + groups)];
    let (codes, params) = words.split_at_mut(rows * stride);
    for r in 0..rows {
        let row = &values[r * cols..(r + 1) * cols];
        for g in 0..groups {
            let part = &row[g * gs..((g + 1) * gs).min(cols)];
            let (scale, offset) = group_params(part, levels);
            params[r * groups + g] = scale.to_bits() as u32 | (offset.to_bits() as u32) << 16;
            let (s, o) = (scale.to_f64(), offset.to_f64());
            for (j, &v) in part.iter().enumerate() {
                let q = if s > 0.0 { ((v as f64 - o) / s).round().clamp(0.0, levels as f64) as u32 } else { 0 };
                let k = g * gs + j;
                let per_word = 32 / bits;
                codes[r * stride + k / per_word] |= q << (bits * (k % per_word));
            }
        }
    }
    words
}

/// The f32 values a Q8/Q4 matrix stands for (row-major (rows, cols)): scale·q + offset,
/// computed in f32 exactly as the kernels do.
pub fn dequantize(words: &[u32], rows: usize, cols: usize, dtype: DType) -> Vec<f32> {
    let gs = group_of(dtype);
    let groups = cols.div_ceil(gs);
    let stride = dtype.row_words(cols);
    assert_eq!(
        words.len(),
        rows * (stride + groups),
        "dequantize: {} words for ({rows}, {cols}) {dtype:?}",
        words.len()
    );
    let bits = 32 / (gs / 8);
    let per_word = 32 / bits;
    let mask = (1u32 << bits) - 1;
    let (codes, params) = words.split_at(rows * stride);
    let mut out = Vec::with_capacity(rows * cols);
    for r in 0..rows {
        for k in 0..cols {
            let p = params[r * groups + k / gs];
            let scale = half::f16::from_bits(p as u16).to_f32();
            let offset = half::f16::from_bits((p >> 16) as u16).to_f32();
            let q = (codes[r * stride + k / per_word] >> (bits * (k % per_word))) & mask;
            out.push(scale * q as f32 + offset);
        }
    }
    out
}

/// Quantize f32 values of shape (…, cols) along their rows and upload them as a Q8/Q4 tensor.
pub fn upload_quantized(
    gpu: &Gpu,
    values: &[f32],
    shape: &[usize],
    dtype: DType,
    cat: Category,
) -> Result<Tensor, GpuError> {
    let cols = *shape.last().unwrap_or(&1);
    let rows = values.len().checked_div(cols).unwrap_or(0);
    let words = quantize(values, rows, cols, dtype);
    gpu.upload_bytes(bytemuck::cast_slice(&words), shape, dtype, cat)
}

#[cfg(test)]
mod tests {
    #[cfg(target_arch = "wasm32")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use crate::gpu_test;
    use crate::kernels::testutil::Rng;

    /// Every value within scale/2 of its dequantized value; parameters normal f16 or zero.
    fn check_roundtrip(values: &[f32], rows: usize, cols: usize, dtype: DType) {
        let words = quantize(values, rows, cols, dtype);
        let gs = dtype.group_size().unwrap();
        let groups = cols.div_ceil(gs);
        assert_eq!(words.len() * 4, crate::gpu::Gpu::tensor_bytes(&[rows, cols], dtype) as usize);
        let deq = dequantize(&words, rows, cols, dtype);
        let params = &words[rows * dtype.row_words(cols)..];
        for r in 0..rows {
            for g in 0..groups {
                let p = params[r * groups + g];
                for h in [p as u16, (p >> 16) as u16] {
                    let v = half::f16::from_bits(h);
                    assert!(v.is_finite() && (v.to_f32() == 0.0 || v.is_normal()), "{dtype:?} param {h:#06x}");
                }
                let scale = half::f16::from_bits(p as u16).to_f32();
                for k in g * gs..((g + 1) * gs).min(cols) {
                    let (v, d) = (values[r * cols + k], deq[r * cols + k]);
                    let err = (v - d).abs();
                    assert!(
                        err <= scale * 0.5 * (1.0 + 1e-6) + 1e-7 * v.abs(),
                        "{dtype:?} ({rows}, {cols}) at ({r}, {k}): {v} -> {d}, scale {scale}"
                    );
                }
            }
        }
    }

    #[test]
    fn quant_roundtrip_within_half_step() {
        let mut rng = Rng::new(7);
        for dtype in [DType::Q8, DType::Q4] {
            for (rows, cols) in [(37, 53), (5, 128), (3, 1), (2, 200), (1, 64)] {
                check_roundtrip(&rng.vec(rows * cols, 1.0), rows, cols, dtype);
            }
            // Tiny ranges (subnormal-sized scales), constant groups, large offsets, huge values.
            let tiny: Vec<f32> = rng.vec(4 * 70, 1e-6);
            check_roundtrip(&tiny, 4, 70, dtype);
            check_roundtrip(&vec![0.3; 3 * 70], 3, 70, dtype);
            check_roundtrip(&vec![0.0; 70], 1, 70, dtype);
            let shifted: Vec<f32> = rng.vec(2 * 100, 0.01).into_iter().map(|v| v - 7.3).collect();
            check_roundtrip(&shifted, 2, 100, dtype);
            let big: Vec<f32> = rng.vec(2 * 40, 3e4);
            check_roundtrip(&big, 2, 40, dtype);
        }
    }

    #[test]
    fn quant_layout_small_case() {
        // One row, Q4: values 0..15 at scale 1 and offset 0 give codes equal to the values.
        let v: Vec<f32> = (0..16).map(|i| i as f32).collect();
        let w = quantize(&v, 1, 16, DType::Q4);
        assert_eq!(w.len(), 8 + 1);
        assert_eq!(w[0], 0x7654_3210);
        assert_eq!(w[1], 0xfedc_ba98);
        assert!(w[2..8].iter().all(|&x| x == 0), "pad codes are 0");
        assert_eq!(w[8], half::f16::ONE.to_bits() as u32);
        // Q8: codes c at scale 0.5 and offset -10 (the first group holds 0 and 255, so its
        // parameters are exactly those); a second, partial group.
        let c: Vec<u32> = (0..40).map(|i| if i == 31 { 255 } else { (i * 37) % 256 }).collect();
        let v: Vec<f32> = c.iter().map(|&q| 0.5 * q as f32 - 10.0).collect();
        let w = quantize(&v, 1, 40, DType::Q8);
        assert_eq!(w.len(), 16 + 2);
        assert_eq!(
            w[16],
            (half::f16::from_f32(-10.0).to_bits() as u32) << 16 | half::f16::from_f32(0.5).to_bits() as u32
        );
        for (k, &q) in c[..32].iter().enumerate() {
            assert_eq!((w[k / 4] >> (8 * (k % 4))) & 0xff, q, "code {k}");
        }
        let d = dequantize(&w, 1, 40, DType::Q8);
        assert_eq!(&d[..32], &v[..32]);
        assert!(w[10..16].iter().all(|&x| x == 0), "pad codes are 0");
    }

    gpu_test!(async fn quant_upload_matches_layout(gpu) {
        let mut rng = Rng::new(3);
        for dtype in [DType::Q8, DType::Q4] {
            let (rows, cols) = (7, 75);
            let v = rng.vec(rows * cols, 2.0);
            let t = gpu.upload_f32_as(&v, &[rows, cols], dtype, Category::Weights).unwrap();
            assert_eq!((t.dtype, t.bytes()), (dtype, Gpu::tensor_bytes(&[rows, cols], dtype)));
            let bytes = gpu.read_bytes(&t).await.unwrap();
            let words: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
            assert_eq!(words, quantize(&v, rows, cols, dtype));
        }
    });
}
