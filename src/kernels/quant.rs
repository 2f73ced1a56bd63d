//! The WGSL decoders of blockwise quantized frozen weights (`DType::Q8`, `DType::Q4`; layout and
//! host-side quantizer in `base::dtype`) that matmul (B operand) and embedding use to dequantize
//! on load, and a test that an upload lays them out as the quantizer does.

use crate::base::dtype::DType;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::dtype::quantize;
    use crate::base::rng::Rng;
    use crate::gpu::{Category, Gpu};
    use crate::gpu_test;

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
