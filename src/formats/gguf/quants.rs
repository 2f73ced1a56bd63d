//! GGML tensor types and the dequantizers of the ones the importer reads: F32, F16, BF16, Q8_0,
//! Q4_0, Q4_1, Q4_K, Q5_K, Q6_K, each the f32 arithmetic of gguf-py's `quants.py` in the same
//! order (scale × code, then ± min; no fused multiply-add), so results are bit-identical to it.
//!
//! Block layouts (bytes; "f16" is a little-endian IEEE half):
//! - Q8_0 (32 values, 34 B): d f16, q i8 × 32; x = d·q
//! - Q4_0 (32, 18 B): d f16, 16 bytes of nibbles (low nibbles are values 0..16, high 16..32); x = d·(q − 8)
//! - Q4_1 (32, 20 B): d f16, m f16, nibbles as Q4_0; x = d·q + m
//! - Q4_K (256, 144 B): d f16, dmin f16, 12 bytes of eight 6-bit (scale, min) pairs, 128 bytes of
//!   nibbles (chunk i of 32 bytes: low nibbles are sub-block 2i, high 2i+1); x = (d·sc)·q − dmin·mn
//! - Q5_K (256, 176 B): as Q4_K plus qh (32 B) after the scales: bit j of qh[l] is bit 4 of value l
//!   of sub-block j
//! - Q6_K (256, 210 B): ql (128 B), qh (64 B), scales i8 × 16, d f16; q = ql | qh << 4 − 32 (layout
//!   in [`q6_k`]); x = (d·scale[e / 16])·q

use super::{invalid, unsupported, GgufError};

/// A GGML tensor type: id as stored in GGUF, block length in values and bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GgmlType {
    pub id: u32,
    pub name: &'static str,
    /// values per block
    pub block: u64,
    /// bytes per block
    pub block_bytes: u64,
}

const fn t(id: u32, name: &'static str, block: u64, block_bytes: u64) -> GgmlType {
    GgmlType { id, name, block, block_bytes }
}

/// Every type GGUF knows (gguf-py's GGML_QUANT_SIZES), so any file's tensor sizes can be checked;
/// [`GgmlType::dequantizable`] says which ones [`dequantize`] reads.
const TYPES: [GgmlType; 34] = [
    t(0, "F32", 1, 4),
    t(1, "F16", 1, 2),
    t(2, "Q4_0", 32, 18),
    t(3, "Q4_1", 32, 20),
    t(6, "Q5_0", 32, 22),
    t(7, "Q5_1", 32, 24),
    t(8, "Q8_0", 32, 34),
    t(9, "Q8_1", 32, 40),
    t(10, "Q2_K", 256, 84),
    t(11, "Q3_K", 256, 110),
    t(12, "Q4_K", 256, 144),
    t(13, "Q5_K", 256, 176),
    t(14, "Q6_K", 256, 210),
    t(15, "Q8_K", 256, 292),
    t(16, "IQ2_XXS", 256, 66),
    t(17, "IQ2_XS", 256, 74),
    t(18, "IQ3_XXS", 256, 98),
    t(19, "IQ1_S", 256, 50),
    t(20, "IQ4_NL", 32, 18),
    t(21, "IQ3_S", 256, 110),
    t(22, "IQ2_S", 256, 82),
    t(23, "IQ4_XS", 256, 136),
    t(24, "I8", 1, 1),
    t(25, "I16", 1, 2),
    t(26, "I32", 1, 4),
    t(27, "I64", 1, 8),
    t(28, "F64", 1, 8),
    t(29, "IQ1_M", 256, 56),
    t(30, "BF16", 1, 2),
    t(34, "TQ1_0", 256, 54),
    t(35, "TQ2_0", 256, 66),
    t(39, "MXFP4", 32, 17),
    t(40, "NVFP4", 64, 36),
    t(41, "Q1_0", 128, 18),
];

impl GgmlType {
    pub fn from_id(id: u32) -> Option<GgmlType> {
        TYPES.iter().copied().find(|t| t.id == id)
    }

    pub fn from_name(name: &str) -> Option<GgmlType> {
        TYPES.iter().copied().find(|t| t.name == name)
    }

    /// Whether [`dequantize`] reads this type.
    pub fn dequantizable(self) -> bool {
        matches!(self.name, "F32" | "F16" | "BF16" | "Q8_0" | "Q4_0" | "Q4_1" | "Q4_K" | "Q5_K" | "Q6_K")
    }
}

fn f16(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// Dequantize `n` values of type `ty` from `bytes` (exactly n / block blocks) into f32.
pub fn dequantize(ty: GgmlType, bytes: &[u8], n: usize) -> Result<Vec<f32>, GgufError> {
    if !ty.dequantizable() {
        return Err(unsupported(format!(
            "tensor type {} is not supported (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K are)",
            ty.name
        )));
    }
    let (block, block_bytes) = (ty.block as usize, ty.block_bytes as usize);
    if n % block != 0 || bytes.len() != n / block * block_bytes {
        return Err(invalid(format!(
            "{}: {} bytes do not hold {n} values ({block_bytes} bytes per {block})",
            ty.name,
            bytes.len()
        )));
    }
    let mut out = vec![0f32; n];
    let blocks = bytes.chunks_exact(block_bytes).zip(out.chunks_exact_mut(block));
    match ty.name {
        "F32" => blocks.for_each(|(b, o)| o[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        "F16" => blocks.for_each(|(b, o)| o[0] = f16(b)),
        "BF16" => blocks.for_each(|(b, o)| o[0] = f32::from_bits(u32::from(u16::from_le_bytes([b[0], b[1]])) << 16)),
        "Q8_0" => blocks.for_each(|(b, o)| q8_0(b, o)),
        "Q4_0" => blocks.for_each(|(b, o)| q4_0(b, o)),
        "Q4_1" => blocks.for_each(|(b, o)| q4_1(b, o)),
        "Q4_K" => blocks.for_each(|(b, o)| q4_k(b, o)),
        "Q5_K" => blocks.for_each(|(b, o)| q5_k(b, o)),
        "Q6_K" => blocks.for_each(|(b, o)| q6_k(b, o)),
        _ => unreachable!("dequantizable() lists exactly the types matched here"),
    }
    Ok(out)
}

/// b: 34 bytes; out: 32 values
fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = f16(b);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = d * f32::from(q as i8);
    }
}

/// b: 18 bytes; out: 32 values
fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = f16(b);
    for (j, &q) in b[2..18].iter().enumerate() {
        out[j] = d * f32::from((q & 15) as i8 - 8);
        out[j + 16] = d * f32::from((q >> 4) as i8 - 8);
    }
}

/// b: 20 bytes; out: 32 values
fn q4_1(b: &[u8], out: &mut [f32]) {
    let (d, m) = (f16(b), f16(&b[2..]));
    for (j, &q) in b[4..20].iter().enumerate() {
        out[j] = d * f32::from(q & 15) + m;
        out[j + 16] = d * f32::from(q >> 4) + m;
    }
}

/// The eight 6-bit (scale, min) pairs of a Q4_K/Q5_K block's 12 scale bytes.
fn scales_mins_k4(s: &[u8]) -> ([u8; 8], [u8; 8]) {
    let (mut sc, mut mn) = ([0u8; 8], [0u8; 8]);
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 15) | ((s[j] >> 2) & 0x30);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 2) & 0x30);
    }
    (sc, mn)
}

/// b: 144 bytes; out: 256 values
fn q4_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16(b), f16(&b[2..]));
    let (sc, mn) = scales_mins_k4(&b[4..16]);
    let qs = &b[16..144];
    for j in 0..8 {
        let (dl, ml) = (d * f32::from(sc[j]), dmin * f32::from(mn[j]));
        let (chunk, shift) = (&qs[(j / 2) * 32..(j / 2) * 32 + 32], 4 * (j % 2));
        for (l, &q) in chunk.iter().enumerate() {
            out[j * 32 + l] = dl * f32::from((q >> shift) & 15) - ml;
        }
    }
}

/// b: 176 bytes; out: 256 values
fn q5_k(b: &[u8], out: &mut [f32]) {
    let (d, dmin) = (f16(b), f16(&b[2..]));
    let (sc, mn) = scales_mins_k4(&b[4..16]);
    let (qh, qs) = (&b[16..48], &b[48..176]);
    for j in 0..8 {
        let (dl, ml) = (d * f32::from(sc[j]), dmin * f32::from(mn[j]));
        let (chunk, shift) = (&qs[(j / 2) * 32..(j / 2) * 32 + 32], 4 * (j % 2));
        for (l, &q) in chunk.iter().enumerate() {
            let q = ((q >> shift) & 15) | (((qh[l] >> j) & 1) << 4);
            out[j * 32 + l] = dl * f32::from(q) - ml;
        }
    }
}

/// b: 210 bytes; out: 256 values. Value e lies in half h = e / 128 at r = e % 128: its low four bits
/// are nibble r / 64 of ql[64h + r % 64], its high two bits are bit pair r / 32 of qh[32h + r % 32].
fn q6_k(b: &[u8], out: &mut [f32]) {
    let (ql, qh, scales, d) = (&b[..128], &b[128..192], &b[192..208], f16(&b[208..]));
    for (e, o) in out.iter_mut().enumerate() {
        let (h, r) = (e / 128, e % 128);
        let lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 15;
        let hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        let q = (lo | (hi << 4)) as i8 - 32;
        *o = (d * f32::from(scales[e / 16] as i8)) * f32::from(q);
    }
}
