//! Helpers shared by kernel tests: f64 reference comparisons, rounding as the GPU stores a
//! value, the test device and `gpu_test!`, which stamps a GPU test for both runtimes.

pub use crate::base::rng::Rng;

/// ‖a − b‖ / ‖b‖ (with b the reference); 0 when both are zero.
pub fn rel_err(a: &[f32], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "length mismatch");
    let mut num = 0.0;
    let mut den = 0.0;
    for (x, y) in a.iter().zip(b) {
        num += (*x as f64 - y) * (*x as f64 - y);
        den += y * y;
    }
    if den == 0.0 {
        num.sqrt()
    } else {
        (num / den).sqrt()
    }
}

/// Panic with the largest difference and the first index where `|a-b| > atol + rtol·|b|`.
/// (The negated comparisons are deliberate: a NaN difference fails them.)
#[allow(clippy::neg_cmp_op_on_partial_ord)]
pub fn assert_close(what: &str, a: &[f32], b: &[f64], atol: f64, rtol: f64) {
    assert_eq!(a.len(), b.len(), "{what}: length {} vs reference {}", a.len(), b.len());
    let mut first = None;
    let mut worst = (0usize, 0.0f64);
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let d = (*x as f64 - y).abs();
        if !(d <= atol + rtol * y.abs()) {
            first.get_or_insert(i);
        }
        if !(d <= worst.1) {
            worst = (i, d);
        }
    }
    if let Some(i) = first {
        panic!(
            "{what}: first mismatch at {i}: got {} want {}; largest |diff| {} at {} (got {} want {}); rel err {:.3e}",
            a[i],
            b[i],
            worst.1,
            worst.0,
            a[worst.0],
            b[worst.0],
            rel_err(a, b)
        );
    }
}

/// Round through a 16-bit dtype as the GPU will see the value.
pub fn round_to(dtype: crate::base::dtype::DType, v: f32) -> f32 {
    match dtype {
        crate::base::dtype::DType::F32 => v,
        crate::base::dtype::DType::BF16 => half::bf16::from_f32(v).to_f32(),
        crate::base::dtype::DType::F16 => half::f16::from_f32(v).to_f32(),
        crate::base::dtype::DType::Q8 | crate::base::dtype::DType::Q4 => {
            panic!("round_to: a quantized value depends on its group; use kernels::quant::dequantize(quantize(..))")
        }
    }
}

/// A GPU for tests. Natively every test makes its own device (lavapipe is cheap to open).
pub async fn test_gpu() -> crate::gpu::Gpu {
    match crate::gpu::Gpu::new().await {
        Ok(g) => g,
        Err(e) => panic!("tests need a GPU adapter (lavapipe natively, WebGPU in Chromium): {e}"),
    }
}

/// The GPU of a test that leaves the device as it found it (choices put back, nothing kept
/// alive): in the browser one device per test binary (wasm tests run one at a time in one
/// page), so each shader is compiled once per binary instead of once per test (compiling on
/// SwiftShader is a large part of what the browser tests cost); natively a device per test, as
/// [`test_gpu`].
#[cfg(target_arch = "wasm32")]
pub async fn shared_test_gpu() -> std::rc::Rc<crate::gpu::Gpu> {
    use std::cell::RefCell;
    use std::rc::Rc;
    thread_local! {
        static SHARED: RefCell<Option<Rc<crate::gpu::Gpu>>> = const { RefCell::new(None) };
    }
    if let Some(g) = SHARED.with(|s| s.borrow().clone()) {
        return g;
    }
    let g = Rc::new(test_gpu().await);
    SHARED.with(|s| *s.borrow_mut() = Some(g.clone()));
    g
}

/// See the wasm32 [`shared_test_gpu`]: natively a device per test, as [`test_gpu`].
#[cfg(not(target_arch = "wasm32"))]
pub async fn shared_test_gpu() -> std::rc::Rc<crate::gpu::Gpu> {
    std::rc::Rc::new(test_gpu().await)
}

/// Write an async GPU test once; it runs natively under `cargo test` (a device on lavapipe
/// per test) and in the browser under `wasm-pack test` (WebGPU; the tests of a binary share one
/// device, [`shared_test_gpu`], so a test puts back any kernel choice it makes: the library's
/// tests went from 221 to 146 s in headless Chromium).
///
/// ```text
/// gpu_test!(async fn my_test(gpu) { ... });
/// ```
#[macro_export]
macro_rules! gpu_test {
    (async fn $name:ident($gpu:ident) $body:block) => {
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            $crate::platform::block_on(async {
                let $gpu = $crate::kernels::testutil::test_gpu().await;
                let $gpu = &$gpu;
                $body
            })
        }
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            let $gpu = $crate::kernels::testutil::shared_test_gpu().await;
            let $gpu: &$crate::gpu::Gpu = &$gpu;
            $body
        }
    };
}
