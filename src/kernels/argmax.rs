//! Greedy decoding's argmax on the GPU: the next token's id is written where the next forward's
//! embedding reads it, so generation records token t + 1 while token t is still computing and
//! reads each id back one forward later (`generate`), instead of waiting for the logits and
//! leaving the GPU idle while the host picks. The result equals the host's argmax (`generate`'s) on
//! the same logits (the first of equal maxima), and a value that is not finite is reported, as
//! reading the logits back did.

use crate::gpu::{DType, Gpu, Tensor};

const SRC: &str = include_str!("argmax.wgsl");

/// `pick`'s length in u32 words: the id, the first non-finite index (or none), its bits.
pub const PICK_WORDS: usize = 3;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    _p: [u32; 3],
}

/// pick (3 u32) = (argmax of x, first index of a non-finite value or u32::MAX, its bits), x f32
/// of any shape (its elements in order: one row of logits).
pub fn argmax_pick(gpu: &Gpu, x: &Tensor, pick: &Tensor) {
    assert!(
        x.dtype == DType::F32 && x.numel() > 0 && pick.numel() >= PICK_WORDS && pick.dtype == DType::F32,
        "argmax_pick: x {:?} {:?}, pick {:?} (want x f32, not empty; pick {PICK_WORDS} words)",
        x.shape,
        x.dtype,
        pick.shape
    );
    let pipe = gpu.pipeline("argmax", || SRC.to_string());
    let p = Params { n: x.numel() as u32, _p: [0; 3] };
    gpu.dispatch(&pipe, bytemuck::bytes_of(&p), &[x, pick], (1, 1, 1));
}

/// What a pick read back says: the id, or the first value that is not finite (index, value).
pub fn read_pick(bytes: &[u8]) -> Result<u32, (usize, f32)> {
    let w: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes[..4 * PICK_WORDS]);
    if w[1] != u32::MAX {
        return Err((w[1] as usize, f32::from_bits(w[2])));
    }
    Ok(w[0])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::testutil::Rng;

    /// The host's greedy choice (`generate::argmax`): the first of equal maxima.
    fn host_argmax(x: &[f32]) -> u32 {
        (0..x.len()).fold(0, |b, i| if x[i] > x[b] { i } else { b }) as u32
    }

    async fn pick_of(gpu: &Gpu, x: &[f32]) -> Result<u32, (usize, f32)> {
        let tx = gpu.upload_f32(x, &[1, x.len()], Category::Activations).unwrap();
        let pick = gpu.zeros(&[PICK_WORDS], DType::F32, Category::Activations).unwrap();
        argmax_pick(gpu, &tx, &pick);
        read_pick(&gpu.read_bytes(&pick).await.unwrap())
    }

    gpu_test!(async fn argmax_pick_is_the_hosts_argmax(gpu) {
        let mut rng = Rng::new(5);
        for n in [1usize, 7, 255, 256, 257, 1000, 49152] {
            let mut x = rng.vec(n, 3.0);
            assert_eq!(pick_of(gpu, &x).await, Ok(host_argmax(&x)), "n {n}");
            // Ties: the first of equal maxima, wherever the invocations' strides put them.
            let m = x.iter().cloned().fold(f32::MIN, f32::max) + 1.0;
            for i in [n - 1, n / 2, n / 3, (n / 3) * 2 + 1].into_iter().filter(|&i| i < n) {
                x[i] = m;
            }
            assert_eq!(pick_of(gpu, &x).await, Ok(host_argmax(&x)), "n {n}, ties");
        }
        // All equal (and -0.0 equal to 0.0): index 0.
        assert_eq!(pick_of(gpu, &[0.0, -0.0, 0.0]).await, Ok(0));
        assert_eq!(pick_of(gpu, &[-5.0; 600]).await, Ok(0));
        // The first value that is not finite is reported, with its value.
        let mut x = rng.vec(3000, 1.0);
        x[2999] = f32::NAN;
        x[777] = f32::INFINITY;
        x[1500] = f32::NEG_INFINITY;
        assert_eq!(pick_of(gpu, &x).await, Err((777, f32::INFINITY)));
        x[777] = 0.5;
        assert_eq!(pick_of(gpu, &x).await, Err((1500, f32::NEG_INFINITY)));
        x[1500] = 0.5;
        let got = pick_of(gpu, &x).await;
        assert!(matches!(got, Err((2999, v)) if v.is_nan()), "{got:?}");
    });
}
