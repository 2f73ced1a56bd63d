//! Decoding's q, k and v projections as one product ([`QkvPack`]): the three weights side by
//! side as one (Nq + 2·Nkv, C) matrix in their own dtype, their biases likewise, and their LoRA
//! terms as one of rank 3r (A stacked, B block-diagonal: row n of q's block holds B_q's row n in
//! columns [0, r) and zeros elsewhere, so its term sums exactly B_q's r products and adds zeros).
//! Each output row is the sum its own projection computes, in the same order: one dispatch
//! where decoding ran three, and one LoRA h product where it ran three (or one of three outputs).
//! It costs a copy of the three weights while the decoder lives, so only resident models build it.

use crate::base::error::Result;
use crate::base::names::Proj;
use crate::gpu::{Category, DType, Gpu, GpuError};
use crate::kernels::elementwise::copy_block;
use crate::model::lora::LoraPair;
use crate::model::weights::Linear;

/// One layer's q, k and v projections packed (see the module).
pub(super) struct QkvPack {
    /// W (Nq + 2·Nkv, C) and its bias, if the projections have biases
    pub linear: Linear,
    /// A (3r, C) stacked and B (Nq + 2·Nkv, 3r) block-diagonal, if any of the three has LoRA
    pub lora: Option<LoraPair>,
}

impl QkvPack {
    /// The pack of `lin` (q, k, v in that order) with their unmerged LoRA pairs; None where they
    /// cannot be packed (dtypes, column counts or ranks that differ, biases on some only), and
    /// where the GPU's memory budget has no room for the copy (decoding then runs them apart).
    pub(super) fn build(gpu: &Gpu, lin: [&Linear; 3], pairs: [Option<&LoraPair>; 3]) -> Result<Option<QkvPack>> {
        match Self::try_build(gpu, lin, pairs) {
            Err(GpuError::OverBudget { .. }) => Ok(None),
            r => Ok(r?),
        }
    }

    fn try_build(gpu: &Gpu, lin: [&Linear; 3], pairs: [Option<&LoraPair>; 3]) -> Result<Option<QkvPack>, GpuError> {
        let (dtype, c) = (lin[0].w.dtype, lin[0].w.cols());
        let rank = pairs.iter().flatten().map(|p| p.a.rows()).next();
        let same = lin.iter().all(|l| l.w.dtype == dtype && l.w.cols() == c && l.w.shape.len() == 2)
            && (lin.iter().all(|l| l.b.is_some()) || lin.iter().all(|l| l.b.is_none()))
            && pairs.iter().flatten().all(|p| Some(p.a.rows()) == rank && p.a.cols() == c);
        if !same {
            return Ok(None);
        }
        let rows: Vec<usize> = lin.iter().map(|l| l.w.rows()).collect();
        let n: usize = rows.iter().sum();
        let w = gpu.zeros(&[n, c], dtype, Category::Weights)?;
        // 16-bit and f32 rows are whole words; quantized matrices keep every row's codes first,
        // then every row's group parameters (kernels::quant), so each part goes after its kind.
        let words = dtype.row_words(c) as u64 * 4;
        let (mut code, mut param) = (0u64, n as u64 * words);
        for l in &lin {
            let (r, bytes) = (l.w.rows() as u64, Gpu::tensor_bytes(&l.w.shape, dtype));
            gpu.copy_region(&l.w, 0, &w, code, r * words);
            if dtype.group_size().is_some() {
                gpu.copy_region(&l.w, r * words, &w, param, bytes - r * words);
                param += bytes - r * words;
            }
            code += r * words;
        }
        let b = match lin[0].b {
            Some(_) => {
                let b = gpu.zeros(&[n], DType::F32, Category::Weights)?;
                let mut off = 0;
                for l in &lin {
                    let lb = l.b.as_ref().expect("checked above");
                    gpu.copy_region(lb, 0, &b, off, 4 * lb.numel() as u64);
                    off += 4 * lb.numel() as u64;
                }
                Some(b)
            }
            None => None,
        };
        let lora = match rank {
            Some(r) => {
                let a = gpu.zeros(&[3 * r, c], DType::F32, Category::Weights)?;
                let bd = gpu.zeros(&[n, 3 * r], DType::F32, Category::Weights)?;
                let mut row0 = 0;
                for (j, (pair, rows)) in pairs.iter().zip(&rows).enumerate() {
                    if let Some(p) = pair {
                        gpu.copy_region(&p.a, 0, &a, (4 * j * r * c) as u64, (4 * r * c) as u64);
                        copy_block(gpu, &p.b, &bd, row0, j * r);
                    }
                    row0 += rows;
                }
                Some(LoraPair { a, b: bd })
            }
            None => None,
        };
        Ok(Some(QkvPack { linear: Linear { w, b }, lora }))
    }
}

/// The projections a pack holds, in its order.
pub(super) const QKV: [Proj; 3] = [Proj::Q, Proj::K, Proj::V];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Tensor;
    use crate::gpu_test;
    use crate::kernels::testutil::Rng;
    use crate::model::lora_linear::lora_linear_forward_h;

    // The packed product equals the three products of q, k and v bit for bit, each with its own
    // LoRA term (k without one here) and bias, for 16-bit and quantized weights.
    gpu_test!(async fn packed_qkv_equals_the_three_products(gpu) {
        let (c, r, s) = (64, 4, 0.5f32);
        let rows = [24, 8, 8];
        for dtype in [DType::BF16, DType::Q4, DType::F32] {
            let mut rng = Rng::new(9);
            let mut up = |shape: &[usize], dt: DType| {
                let n: usize = shape.iter().product();
                gpu.upload_f32_as(&rng.vec(n, 1.0), shape, dt, Category::Weights).unwrap()
            };
            let lin: Vec<Linear> =
                rows.iter().map(|&n| Linear { w: up(&[n, c], dtype), b: Some(up(&[n], DType::F32)) }).collect();
            let pairs: Vec<Option<LoraPair>> = rows
                .iter()
                .enumerate()
                .map(|(j, &n)| (j != 1).then(|| LoraPair { a: up(&[r, c], DType::F32), b: up(&[n, r], DType::F32) }))
                .collect();
            let x = up(&[1, c], DType::F32);
            let lin3 = [&lin[0], &lin[1], &lin[2]];
            let pairs3 = [pairs[0].as_ref(), pairs[1].as_ref(), pairs[2].as_ref()];
            let pack = QkvPack::build(gpu, lin3, pairs3).unwrap().expect("packable");
            let lora = pack.lora.as_ref().expect("LoRA on q and v");
            let h = gpu.zeros(&[1, 3 * r], DType::F32, Category::Scratch).unwrap();
            crate::kernels::matmul::matmul_nt(gpu, &x, &lora.a, None, &h, 1.0, 0.0);
            let y = gpu.zeros(&[1, rows.iter().sum()], DType::F32, Category::Scratch).unwrap();
            lora_linear_forward_h(gpu, &x, &pack.linear, Some((lora, &h)), s, &y, 0.0);
            let got = gpu.read_f32(&y).await.unwrap();
            let mut want = Vec::new();
            for (l, p) in lin.iter().zip(&pairs) {
                let yj = gpu.zeros(&[1, l.w.rows()], DType::F32, Category::Scratch).unwrap();
                let hj: Option<Tensor> = p.as_ref().map(|p| {
                    let hj = gpu.zeros(&[1, r], DType::F32, Category::Scratch).unwrap();
                    crate::kernels::matmul::matmul_nt(gpu, &x, &p.a, None, &hj, 1.0, 0.0);
                    hj
                });
                lora_linear_forward_h(gpu, &x, l, p.as_ref().zip(hj.as_ref()), s, &yj, 0.0);
                want.extend(gpu.read_f32(&yj).await.unwrap());
            }
            let same = got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits());
            assert!(same, "{dtype:?}: packed {got:?}\n three {want:?}");
            // Without room in the memory budget there is no pack (decoding runs the three
            // products), no error, and nothing of a partial pack stays allocated.
            drop(pack);
            let live = gpu.alloc.stats().live_total;
            gpu.alloc.set_budget(Some(live + 64));
            let none = QkvPack::build(gpu, lin3, pairs3).expect("no error");
            gpu.alloc.set_budget(None);
            assert!(none.is_none(), "{dtype:?}: a pack past the budget");
            assert_eq!(gpu.alloc.stats().live_total, live, "{dtype:?}: a partial pack left allocated");
        }
    });
}
