//! Tensors in host memory as read from a safetensors file: f32, or 16-bit bit
//! patterns (bf16, f16) kept as stored so they can be uploaded packed.

use crate::base::dtype::DType;

/// Element data; 16-bit types hold the raw bit patterns.
#[derive(Clone, Debug, PartialEq)]
pub enum HostData {
    F32(Vec<f32>),
    BF16(Vec<u16>),
    F16(Vec<u16>),
}

/// A tensor in host memory: shape in PyTorch order, row-major data.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    pub shape: Vec<usize>,
    pub data: HostData,
}

/// The exponent bits of each float dtype, in its little-endian bits: an element whose exponent
/// bits are all ones is NaN or ±∞ (the import's check and [`HostTensor::first_non_finite`]).
pub const F32_EXP: u32 = 0x7f80_0000;
pub const BF16_EXP: u16 = 0x7f80;
pub const F16_EXP: u16 = 0x7c00;

impl HostTensor {
    /// Index of the first NaN or ±∞ (an exponent of all ones), if any.
    pub fn first_non_finite(&self) -> Option<usize> {
        match &self.data {
            HostData::F32(v) => v.iter().position(|x| !x.is_finite()),
            HostData::BF16(v) => v.iter().position(|&b| b & BF16_EXP == BF16_EXP),
            HostData::F16(v) => v.iter().position(|&b| b & F16_EXP == F16_EXP),
        }
    }

    /// An f32 tensor (the caller keeps `data.len() == shape.product()`).
    pub fn from_f32(shape: &[usize], data: Vec<f32>) -> HostTensor {
        debug_assert_eq!(shape.iter().product::<usize>(), data.len());
        HostTensor { shape: shape.to_vec(), data: HostData::F32(data) }
    }

    pub fn dtype(&self) -> DType {
        match self.data {
            HostData::F32(_) => DType::F32,
            HostData::BF16(_) => DType::BF16,
            HostData::F16(_) => DType::F16,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The values widened (or copied) to f32.
    pub fn to_f32(&self) -> Vec<f32> {
        match &self.data {
            HostData::F32(v) => v.clone(),
            HostData::BF16(b) => b.iter().map(|&x| half::bf16::from_bits(x).to_f32()).collect(),
            HostData::F16(b) => b.iter().map(|&x| half::f16::from_bits(x).to_f32()).collect(),
        }
    }

    /// The same tensor as f32 (no copy when it already is).
    pub fn into_f32(self) -> HostTensor {
        match self.data {
            HostData::F32(_) => self,
            _ => HostTensor { data: HostData::F32(self.to_f32()), shape: self.shape },
        }
    }
}
