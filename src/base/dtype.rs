//! How a frozen weight's elements lie in memory ([`DType`]): f32; bf16 and f16 two per u32
//! (rows padded to even length); and blockwise quantized Q8 and Q4, MLX style: each group of a
//! row holds unsigned codes q and one (scale, offset) pair, and the weight it stands for is
//! w = scale·q + offset. Here: the dtype's sizes, the host-side quantizer and dequantizer, and
//! [`pack_f32`], which lays f32 values out as a dtype expects (what an upload writes). The WGSL
//! decoders that read these layouts are in `kernels::quant`.
//!
//! Quantized layout of a (rows, cols) tensor, one buffer of u32 words:
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

/// Element type of a tensor as it lies in its GPU buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// bfloat16, two per u32 (element 2i in the low half), rows padded to an even length.
    BF16,
    /// IEEE half, two per u32 like BF16; unpacked with `unpack2x16float`.
    F16,
    /// Blockwise 8-bit, groups of 32 along a row, w = scale·q + offset (q in 0..=255); codes
    /// then per-group (scale, offset) f16 pairs in one buffer (layout: `kernels::quant`).
    Q8,
    /// Blockwise 4-bit, groups of 64 along a row, w = scale·q + offset (q in 0..=15); layout as Q8.
    Q4,
}

impl DType {
    /// Short name, used in pipeline cache keys.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::Q8 => "q8",
            DType::Q4 => "q4",
        }
    }
    /// Elements per quantization group (a row is padded to whole groups); None when not quantized.
    pub fn group_size(self) -> Option<usize> {
        match self {
            DType::Q8 => Some(32),
            DType::Q4 => Some(64),
            DType::F32 | DType::BF16 | DType::F16 => None,
        }
    }
    /// Stored row length in elements: 16-bit rows are padded to an even count
    /// so every row starts on a u32; quantized rows to whole groups.
    pub fn padded_row(self, cols: usize) -> usize {
        match self {
            DType::F32 => cols,
            DType::BF16 | DType::F16 => cols + (cols & 1),
            DType::Q8 | DType::Q4 => cols.div_ceil(self.group_size().unwrap_or(1)) * self.group_size().unwrap_or(1),
        }
    }
    /// Storage bytes per element, rounded up to whole bytes (Q8 and Q4 say 1: size
    /// buffers with [`DType::row_bytes`], which also counts the group parameters).
    pub fn bytes_per_element(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
            DType::Q8 | DType::Q4 => 1,
        }
    }
    /// u32 words of one row's element data (the codes, for quantized types): the row stride.
    pub fn row_words(self, cols: usize) -> usize {
        match self {
            DType::F32 => cols,
            DType::BF16 | DType::F16 => cols.div_ceil(2),
            // 32 one-byte or 64 four-bit codes: 8 words per group either way.
            DType::Q8 | DType::Q4 => self.padded_row(cols) / self.group_size().unwrap_or(1) * 8,
        }
    }
    /// Bytes one row occupies: its element words, plus one (scale, offset) word per group.
    pub fn row_bytes(self, cols: usize) -> usize {
        let params = match self.group_size() {
            Some(g) => cols.div_ceil(g),
            None => 0,
        };
        4 * (self.row_words(cols) + params)
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
    let per_word = 32 / bits;
    let mut words = vec![0u32; rows * (stride + groups)];
    let (codes, params) = words.split_at_mut(rows * stride);
    for r in 0..rows {
        let row = &values[r * cols..(r + 1) * cols];
        let row_codes = &mut codes[r * stride..(r + 1) * stride];
        for g in 0..groups {
            let part = &row[g * gs..((g + 1) * gs).min(cols)];
            let (scale, offset) = group_params(part, levels);
            params[r * groups + g] = scale.to_bits() as u32 | (offset.to_bits() as u32) << 16;
            let (s, o) = (scale.to_f64(), offset.to_f64());
            if s > 0.0 {
                let inv = 1.0 / s;
                for (w, vals) in part.chunks(per_word).enumerate() {
                    let mut word = 0u32;
                    for (j, &v) in vals.iter().enumerate() {
                        word |= code(v, o, s, inv, levels) << (bits * j);
                    }
                    row_codes[g * gs / per_word + w] = word;
                }
            }
        }
    }
    words
}

/// The code of v in a group of offset o and scale s > 0 (inv = 1/s): round((v − o) / s) in f64,
/// clamped to 0..=levels. Multiplying by inv is what makes quantizing fast; it is within a few
/// f64 ulps of the quotient, so it rounds the same way unless that lies next to a half, where
/// the division decides: the codes are exactly those of the division.
#[inline]
fn code(v: f32, o: f64, s: f64, inv: f64, levels: u32) -> u32 {
    let a = v as f64 - o;
    // round(y) = floor(y + 0.5) for y ≥ 0 (a < 0 and NaN saturate to 0 below, as clamped).
    let t = a * inv + 0.5;
    let q = t as u32;
    let f = t - q as f64;
    if !(1e-9..=1.0 - 1e-9).contains(&f) && t < 1e9 {
        return ((a / s).round().clamp(0.0, levels as f64)) as u32;
    }
    q.min(levels)
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

/// f32 values of shape (…, cols) laid out as `dtype` stores them: f32 as is, bf16/f16 rounded
/// and packed two per u32 with rows padded to even length, Q8/Q4 quantized along rows.
pub fn pack_f32(data: &[f32], shape: &[usize], dtype: DType) -> Vec<u8> {
    let cols = *shape.last().unwrap_or(&1);
    match dtype {
        DType::F32 => bytemuck::cast_slice(data).to_vec(),
        DType::Q8 | DType::Q4 => {
            let rows = data.len().checked_div(cols).unwrap_or(0);
            bytemuck::cast_slice(&quantize(data, rows, cols, dtype)).to_vec()
        }
        DType::BF16 | DType::F16 => {
            let bits: Vec<u16> = data
                .iter()
                .map(|&v| match dtype {
                    DType::BF16 => half::bf16::from_f32(v).to_bits(),
                    _ => half::f16::from_f32(v).to_bits(),
                })
                .collect();
            pad_u16_rows(&bits, cols)
        }
    }
}

/// 16-bit words (bf16 or f16 bit patterns) of rows of `cols`, each row padded to even length,
/// as bytes.
pub fn pad_u16_rows(bits: &[u16], cols: usize) -> Vec<u8> {
    if cols % 2 == 0 {
        return bytemuck::cast_slice(bits).to_vec();
    }
    let mut padded = Vec::with_capacity(bits.len() + bits.len() / cols.max(1));
    for row in bits.chunks(cols.max(1)) {
        padded.extend_from_slice(row);
        padded.push(0);
    }
    bytemuck::cast_slice(&padded).to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::rng::Rng;
    use crate::platform::test;

    /// Every value within scale/2 of its dequantized value; parameters normal f16 or zero.
    fn check_roundtrip(values: &[f32], rows: usize, cols: usize, dtype: DType) {
        let words = quantize(values, rows, cols, dtype);
        let gs = dtype.group_size().unwrap();
        let groups = cols.div_ceil(gs);
        assert_eq!(words.len() * 4, dtype.row_bytes(cols) * rows);
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

    /// quantize as written before it multiplied by the reciprocal: a division per value.
    fn by_division(values: &[f32], rows: usize, cols: usize, dtype: DType) -> Vec<u32> {
        let (gs, levels) = (group_of(dtype), levels(dtype));
        let groups = cols.div_ceil(gs);
        let stride = dtype.row_words(cols);
        let bits = 32 / (gs / 8);
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

    /// The codes are the division's, at halves too (values on a grid of eighths land on them),
    /// and with NaN, infinities, constant groups and ragged last groups.
    #[test]
    fn quantize_by_reciprocal_equals_the_division() {
        let mut rng = Rng::new(5);
        for dtype in [DType::Q4, DType::Q8] {
            let (rows, cols) = (97, 200);
            let mut v = rng.vec(rows * cols, 3.0);
            for (i, x) in v.iter_mut().enumerate() {
                match i % 7 {
                    0 | 3 => *x = (*x * 8.0).round() / 8.0 + 0.0625,
                    5 if i % 1000 == 5 => *x = [f32::NAN, f32::INFINITY, -f32::INFINITY, 1e30][i / 1000 % 4],
                    _ => {}
                }
            }
            v[..cols].fill(0.25); // a constant row
            let want = by_division(&v, rows, cols, dtype);
            assert_eq!(quantize(&v, rows, cols, dtype), want, "{dtype:?}");
        }
    }
}
