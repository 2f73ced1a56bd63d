//! Tests of cross_entropy.rs.

use super::*;
use crate::gpu_test;
use crate::kernels::testutil::{assert_close, rel_err, round_to, Rng};

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// A case: x (N, C), E (V, C) rounded to `dtype`, targets with ignored and out-of-range ids.
struct Case {
    n: usize,
    c: usize,
    v: usize,
    x: Vec<f32>,
    e: Vec<f32>,
    targets: Vec<i32>,
    inv_count: f32,
}

impl Case {
    fn new(n: usize, c: usize, v: usize, dtype: DType, seed: u64) -> Case {
        let mut rng = Rng::new(seed);
        let x = rng.vec(n * c, 1.0);
        let e: Vec<f32> = rng.vec(v * c, 1.0).into_iter().map(|w| round_to(dtype, w)).collect();
        let mut targets: Vec<i32> = (0..n).map(|_| rng.below(v as u64) as i32).collect();
        // Ignored rows (-100, and an id past V that the caller failed to validate), ids on chunk edges.
        let specials = [-100, 0, (v - 1) as i32, v as i32 + 5, 39, 40, -100];
        for (i, t) in specials.iter().enumerate() {
            if 3 * i < n {
                targets[3 * i] = (*t).min(v as i32 + 5);
            }
        }
        let count = targets.iter().filter(|&&t| reference::counted(t, v)).count();
        let inv_count = if count == 0 { 0.0 } else { 1.0 / count as f32 };
        Case { n, c, v, x, e, targets, inv_count }
    }

    /// (lse, loss, dx) from the f64 reference.
    fn reference(&self) -> (Vec<f64>, f64, Vec<f64>) {
        let (x, e, ic) = (f64s(&self.x), f64s(&self.e), self.inv_count as f64);
        let (lse, loss) = reference::forward(&x, &e, &self.targets, self.n, self.c, self.v, ic);
        let dx = reference::backward(&x, &e, &self.targets, self.n, self.c, self.v, ic);
        (lse, loss, dx)
    }
}

/// Upload the case's table as chunks of `chunk_rows` rows.
fn upload_table(gpu: &Gpu, case: &Case, chunk_rows: usize, dtype: DType) -> Vec<Tensor> {
    case.e
        .chunks(chunk_rows * case.c)
        .map(|rows| gpu.upload_f32_as(rows, &[rows.len() / case.c, case.c], dtype, Category::Weights).unwrap())
        .collect()
}

fn upload_targets(gpu: &Gpu, targets: &[i32]) -> Tensor {
    let bits: Vec<u32> = targets.iter().map(|&t| t as u32).collect();
    gpu.upload_u32(&bits, &[targets.len()], Category::Activations).unwrap()
}

/// Run the forward alone, then forward and backward in one pass with `beta` onto `dx0`
/// (checking that it gives the forward's lse and loss bit for bit); return (lse, loss, dx).
async fn run(
    gpu: &Gpu,
    case: &Case,
    chunk_rows: usize,
    dtype: DType,
    token_chunk: usize,
    dx0: &[f32],
    beta: f32,
) -> (Vec<f32>, f32, Vec<f32>) {
    let chunks = upload_table(gpu, case, chunk_rows, dtype);
    let table = VocabTable { chunks: (&chunks).into(), chunk_rows, vocab: case.v };
    let x = gpu.upload_f32(&case.x, &[case.n, case.c], Category::Activations).unwrap();
    let targets = upload_targets(gpu, &case.targets);
    let lse = gpu.upload_f32(&vec![f32::NAN; case.n], &[case.n], Category::Activations).unwrap();
    let loss = gpu.upload_f32(&[f32::NAN], &[1], Category::Activations).unwrap();
    let dx = gpu.upload_f32(dx0, &[case.n, case.c], Category::Activations).unwrap();
    lm_head_ce_forward(gpu, &x, &table, &targets, case.inv_count, &lse, &loss, token_chunk).await.unwrap();
    let lse1 = gpu.read_f32(&lse).await.unwrap();
    let loss1 = gpu.read_f32(&loss).await.unwrap()[0];
    gpu.write_f32(&lse, &vec![f32::NAN; case.n]);
    gpu.write_f32(&loss, &[f32::NAN]);
    lm_head_ce_forward_backward(gpu, &x, &table, &targets, case.inv_count, &lse, &loss, &dx, beta, token_chunk)
        .await
        .unwrap();
    let lse = gpu.read_f32(&lse).await.unwrap();
    let loss = gpu.read_f32(&loss).await.unwrap()[0];
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&lse), bits(&lse1), "lse of the one pass and of the forward alone");
    assert_eq!(loss.to_bits(), loss1.to_bits(), "loss of the one pass and of the forward alone");
    let dx = gpu.read_f32(&dx).await.unwrap();
    (lse, loss, dx)
}

/// Compare against the reference; `dx0` is the incoming dx (NaN with beta = 0 checks it is not read).
async fn check(gpu: &Gpu, case: &Case, chunk_rows: usize, dtype: DType, token_chunk: usize, beta: f32, dx0: &[f32]) {
    let what =
        format!("N={} C={} V={} chunk={chunk_rows} tokens={token_chunk} {dtype:?} beta={beta}", case.n, case.c, case.v);
    let (lse, loss, dx) = run(gpu, case, chunk_rows, dtype, token_chunk, dx0, beta).await;
    let (want_lse, want_loss, mut want_dx) = case.reference();
    for (w, d) in want_dx.iter_mut().zip(dx0) {
        if beta != 0.0 {
            *w += beta as f64 * *d as f64;
        }
    }
    assert_close(&format!("lse {what}"), &lse, &want_lse, 1e-5, 1e-5);
    assert_close(&format!("loss {what}"), &[loss], &[want_loss], 1e-6, 1e-5);
    let scale = want_dx.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert_close(&format!("dx {what}"), &dx, &want_dx, 1e-5 * scale, 1e-4);
    let re = rel_err(&dx, &want_dx);
    assert!(re < 2e-5, "dx {what}: relative error {re:.3e}");
    // Ignored rows get exactly zero gradient (with beta = 0).
    if beta == 0.0 {
        for (i, &t) in case.targets.iter().enumerate() {
            if !reference::counted(t, case.v) {
                assert!(
                    dx[i * case.c..(i + 1) * case.c].iter().all(|&g| g == 0.0),
                    "dx {what}: ignored row {i} not zero"
                );
            }
        }
    }
}

gpu_test!(async fn lm_head_ce_matches_reference(gpu) {
    for dtype in [DType::F32, DType::BF16, DType::F16] {
        let case = Case::new(37, 29, 101, dtype, 11);
        let nan = vec![f32::NAN; case.n * case.c];
        // Token chunks of 16 (16, 16, 5: row copies) and one chunk of all 37 (x and dx in place).
        check(gpu, &case, 40, dtype, 16, 0.0, &nan).await;
        check(gpu, &case, 40, dtype, 64, 0.0, &nan).await;
    }
    // C a multiple of 4 (vector row copies), one vocab chunk, token chunks of 1.
    let case = Case::new(9, 12, 41, DType::BF16, 5);
    let nan = vec![f32::NAN; case.n * case.c];
    check(gpu, &case, 64, DType::BF16, 1, 0.0, &nan).await;
    check(gpu, &case, 8, DType::BF16, 4, 0.0, &nan).await;
});

gpu_test!(async fn lm_head_ce_backward_accumulates(gpu) {
    let case = Case::new(37, 29, 101, DType::BF16, 23);
    let dx0 = Rng::new(99).vec(case.n * case.c, 0.01);
    for token_chunk in [16, 1024] {
        check(gpu, &case, 40, DType::BF16, token_chunk, 1.0, &dx0).await;
        check(gpu, &case, 40, DType::BF16, token_chunk, 0.5, &dx0).await;
    }
});

gpu_test!(async fn lm_head_ce_finite_differences(gpu) {
    // Tiny fixed case: N=4, C=5, V=7 in chunks of 3 (3, 3, 1), token chunks of 3 (3, 1).
    let mut case = Case::new(4, 5, 7, DType::F32, 3);
    case.targets = vec![2, -100, 6, 3];
    case.inv_count = 1.0 / 3.0;
    let (x, e, ic) = (f64s(&case.x), f64s(&case.e), case.inv_count as f64);
    let loss_at = |x: &[f64]| reference::forward(x, &e, &case.targets, case.n, case.c, case.v, ic).1;
    let h = 1e-5;
    let fd: Vec<f64> = (0..x.len())
        .map(|i| {
            let (mut xp, mut xm) = (x.clone(), x.clone());
            xp[i] += h;
            xm[i] -= h;
            (loss_at(&xp) - loss_at(&xm)) / (2.0 * h)
        })
        .collect();
    let want = reference::backward(&x, &e, &case.targets, case.n, case.c, case.v, ic);
    let want32: Vec<f32> = want.iter().map(|&v| v as f32).collect();
    assert_close("reference dx vs finite differences", &want32, &fd, 1e-7, 1e-6);
    let (_, _, dx) = run(gpu, &case, 3, DType::F32, 3, &[0.0; 20], 0.0).await;
    assert_close("dx vs finite differences", &dx, &fd, 1e-6, 1e-5);
});

/// forward, and forward + backward, at SmolLM2-135M's lm_head: N=256, C=576, V=49152 bf16 in chunks of 8192.
#[cfg(not(target_arch = "wasm32"))]
#[test]
#[ignore]
fn bench_lm_head_ce_smollm() {
    use crate::platform::{block_on, now_ms};
    block_on(async {
        let gpu = &crate::kernels::testutil::test_gpu().await;
        let (n, c, v, rows) = (256, 576, 49152, DEFAULT_CHUNK_ROWS);
        let mut rng = Rng::new(1);
        let chunks: Vec<Tensor> = (0..v / rows)
            .map(|_| gpu.upload_f32_as(&rng.vec(rows * c, 0.05), &[rows, c], DType::BF16, Category::Weights).unwrap())
            .collect();
        let table = VocabTable { chunks: (&chunks).into(), chunk_rows: rows, vocab: v };
        let x = gpu.upload_f32(&rng.vec(n * c, 1.0), &[n, c], Category::Activations).unwrap();
        let t: Vec<i32> = (0..n).map(|i| if i % 17 == 0 { -100 } else { rng.below(v as u64) as i32 }).collect();
        let targets = upload_targets(gpu, &t);
        let inv = 1.0 / t.iter().filter(|&&t| t >= 0).count() as f32;
        let lse = gpu.zeros(&[n], DType::F32, Category::Activations).unwrap();
        let loss = gpu.zeros(&[1], DType::F32, Category::Activations).unwrap();
        let dx = gpu.zeros(&[n, c], DType::F32, Category::Activations).unwrap();
        for round in 0..3 {
            gpu.sync().await.unwrap();
            let t0 = now_ms();
            lm_head_ce_forward(gpu, &x, &table, &targets, inv, &lse, &loss, DEFAULT_TOKEN_CHUNK).await.unwrap();
            gpu.sync().await.unwrap();
            let t1 = now_ms();
            lm_head_ce_forward_backward(gpu, &x, &table, &targets, inv, &lse, &loss, &dx, 0.0, DEFAULT_TOKEN_CHUNK)
                .await
                .unwrap();
            gpu.sync().await.unwrap();
            let t2 = now_ms();
            let l = gpu.read_f32(&loss).await.unwrap()[0];
            println!("round {round}: forward {:.0} ms, forward + backward {:.0} ms (loss {l:.4})", t1 - t0, t2 - t1,);
        }
        // The matmuls alone, to see what the loss kernels add.
        let block = gpu.zeros(&[n, rows], DType::F32, Category::Scratch).unwrap();
        gpu.sync().await.unwrap();
        let t0 = now_ms();
        for e in &chunks {
            matmul_nt(gpu, &x, e, None, &block, 1.0, 0.0);
        }
        gpu.sync().await.unwrap();
        let t1 = now_ms();
        for e in &chunks {
            matmul_nn(gpu, &block, e, &dx, 1.0, 1.0);
        }
        gpu.sync().await.unwrap();
        let t2 = now_ms();
        println!("matmuls alone: x·Eᵀ {:.0} ms, dlogits·E {:.0} ms ({})", t1 - t0, t2 - t1, gpu.info.adapter);
    });
}
