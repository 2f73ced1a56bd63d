//! Two `tn` products in one dispatch: LoRA's weight gradients of one projection, dA = s·gᵀ·x
//! (r, in) and dB = s·dyᵀ·h (out, r), which the backward used to launch one after the other
//! (two of the thin dispatches a GPU pays a launch and a barrier for: 420 a SmolLM2 step).
//! The workgroups of one dispatch are split between the two: the first `g0` run product 0,
//! the rest product 1, each with its own bindings and shape and the loop of the kernel that
//! runs it alone (the register-blocked one, [`super::blocked`], or the split-K one,
//! [`super::thin`]), so each result equals its own product's bit for bit.

use super::blocked::{acc_decl, body_tn, grid, lanes, load8, store_row_fn, store_rows};
use super::thin::{tn_bindings, tn_job, tn_part};
use super::{flops, thin};
use crate::gpu::{groups, DType, Gpu, Tensor};

/// The uniform of a pair: each product's M and N, its workgroups along N (`gx`) and product
/// 0's workgroups in all (`g0`); the shared contraction length, α and β.
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct PairParams {
    m0: u32,
    n0: u32,
    gx0: u32,
    g0: u32,
    m1: u32,
    n1: u32,
    gx1: u32,
    k: u32,
    alpha: f32,
    beta: f32,
    _p: [u32; 2],
}

const PAIR_PARAMS: &str = "struct Pair {\n    M0: u32, N0: u32, gx0: u32, g0: u32,\n    M1: u32, N1: u32, gx1: u32, K: u32,\n    alpha: f32, beta: f32, _p0: u32, _p1: u32,\n}\n@group(0) @binding(0) var<uniform> p: Pair;\n";

/// One `tn` job: C (M, N) = α · A (K, M)ᵀ · B (K, N) + β · C.
pub type TnJob<'a> = (&'a Tensor, &'a Tensor, &'a Tensor);

/// (K, M, N) of a job.
fn dims((a, b, _): TnJob) -> (usize, usize, usize) {
    (a.rows(), a.cols(), b.cols())
}

/// A job's invocations (along N, along M) in a workgroup of `w`: its own [`lanes`] when they
/// make `w`; a thin product's stretched along its long side otherwise (every invocation
/// computes the same 8×8 block of C either way); None for a wide product's other than `w`.
fn lanes_in(m: usize, n: usize, w: usize) -> Option<(usize, usize)> {
    let (wx, wy) = lanes(m, n);
    match (wx * wy == w, m <= 8, n <= 8) {
        (true, _, _) => Some((wx, wy)),
        (false, false, true) => Some((1, w)),
        (false, true, false) => Some((w, 1)),
        _ => None,
    }
}

/// Both jobs with the register-blocked kernel's loop in one dispatch; false (nothing done)
/// where their contraction lengths or workgroup shapes do not fit one kernel.
pub(super) fn blocked_tn_pair(gpu: &Gpu, jobs: [TnJob; 2], alpha: f32, beta: f32) -> bool {
    let d = jobs.map(dims);
    let w = d
        .iter()
        .map(|&(_, m, n)| {
            let (wx, wy) = lanes(m, n);
            wx * wy
        })
        .max()
        .unwrap_or(64);
    let (Some(l0), Some(l1)) = (lanes_in(d[0].1, d[0].2, w), lanes_in(d[1].1, d[1].2, w)) else {
        return false;
    };
    if d[0].0 != d[1].0 {
        return false;
    }
    let lanes = [l0, l1];
    let vecs = d.map(|(_, m, n)| (m % 4 == 0, n % 4 == 0));
    let key = format!(
        "matmul_tn/blocked_pair/{}x{}/{}/{}/{}x{}/{}/{}",
        l0.0, l0.1, vecs[0].0, vecs[0].1, l1.0, l1.1, vecs[1].0, vecs[1].1
    );
    let pipeline = gpu.pipeline(&key, || blocked_source(lanes, vecs));
    let g = [0, 1].map(|j| grid(d[j].1, d[j].2, lanes[j].0, lanes[j].1, 8));
    let count = |j: usize| g[j].0 * g[j].1;
    let p = PairParams {
        m0: d[0].1 as u32,
        n0: d[0].2 as u32,
        gx0: g[0].0,
        g0: count(0),
        m1: d[1].1 as u32,
        n1: d[1].2 as u32,
        gx1: g[1].0,
        k: d[0].0 as u32,
        alpha,
        beta,
        ..PairParams::default()
    };
    dispatch(gpu, &pipeline, &p, jobs, count(0) + count(1));
    true
}

/// Both jobs with the split-K kernel ([`thin::run_tn`]) in one dispatch; false (nothing done)
/// where their contraction lengths differ.
pub(super) fn thin_tn_pair(gpu: &Gpu, jobs: [TnJob; 2], alpha: f32, beta: f32) -> bool {
    let d = jobs.map(dims);
    if d[0].0 != d[1].0 {
        return false;
    }
    // As run_tn: D = Xᵀ·Y with Y the narrow side (C itself, or Cᵀ with `trans`).
    let trans = d.map(|(_, m, n)| m < n);
    let sides = d.map(|(_, m, n)| (m.max(n), m.min(n)));
    let key = format!("matmul_tn/thin_pair/{}/{}", trans[0], trans[1]);
    let pipeline = gpu.pipeline(&key, || thin_source(trans));
    let x_y = |j: usize| {
        let (a, b, c) = jobs[j];
        if trans[j] {
            (b, a, c)
        } else {
            (a, b, c)
        }
    };
    let g0 = sides[0].0.div_ceil(8) as u32;
    let p = PairParams {
        m0: sides[0].0 as u32,
        n0: sides[0].1 as u32,
        g0,
        m1: sides[1].0 as u32,
        n1: sides[1].1 as u32,
        k: d[0].0 as u32,
        alpha,
        beta,
        ..PairParams::default()
    };
    dispatch(gpu, &pipeline, &p, [x_y(0), x_y(1)], g0 + sides[1].0.div_ceil(8) as u32);
    true
}

fn dispatch(gpu: &Gpu, pipeline: &crate::gpu::Kernel, p: &PairParams, jobs: [TnJob; 2], workgroups: u32) {
    let [(a0, b0, c0), (a1, b1, c1)] = jobs;
    let f = jobs.map(|j| {
        let (k, m, n) = dims(j);
        flops(m, n, k)
    });
    gpu.dispatch_flops(pipeline, bytemuck::bytes_of(p), &[a0, b0, c0, a1, b1, c1], groups(workgroups), f[0] + f[1]);
}

/// The register-blocked pair: each job's bindings (A_j, B_j, C_j at 1 + 3j..), loads and
/// store renamed by j, and its branch [`super::blocked::tn`]'s loop for its workgroup's block.
fn blocked_source(lanes: [(usize, usize); 2], vecs: [(bool, bool); 2]) -> String {
    let w = lanes[0].0 * lanes[0].1;
    let mut s = format!(
        "// C_j = alpha · A_jᵀ · B_j + beta · C_j for j = 0, 1: the register-blocked tn loop, the job by workgroup.\n{PAIR_PARAMS}"
    );
    let mut branches = String::new();
    for (j, (&(wx, wy), &(av, bv))) in lanes.iter().zip(&vecs).enumerate() {
        let (m, n) = (format!("p.M{j}"), format!("p.N{j}"));
        let (la, ae) = load8(&format!("load_a8_{j}"), &format!("a{j}"), &m, &m, DType::F32, av);
        let (lb, be) = load8(&format!("load_b8_{j}"), &format!("b{j}"), &n, &n, DType::F32, bv);
        s += &format!(
            "@group(0) @binding({}) var<storage, read> a{j}: array<{ae}>;   // A_{j}: (K, M{j})\n\
             @group(0) @binding({}) var<storage, read> b{j}: array<{be}>;   // B_{j}: (K, N{j})\n\
             @group(0) @binding({}) var<storage, read_write> c{j}: array<f32>;   // C_{j}: (M{j}, N{j})\n{la}{lb}",
            1 + 3 * j,
            2 + 3 * j,
            3 + 3 * j
        );
        s += &store_row_fn(&format!("store_row_{j}"), &format!("c{j}"), &m, &n, true);
        let rename = |t: String| {
            t.replace("load_a8(", &format!("load_a8_{j}("))
                .replace("load_b8(", &format!("load_b8_{j}("))
                .replace("store_row(", &format!("store_row_{j}("))
        };
        let open =
            if j == 0 { "    if (l < p.g0) {\n        let lj = l;\n" } else { "    {\n        let lj = l - p.g0;\n" };
        branches += &format!(
            "{open}        let gid = vec2<u32>((lj % p.gx{j}) * {wx}u + li % {wx}u, (lj / p.gx{j}) * {wy}u + li / {wx}u);\n        let m0 = gid.y * 8u;\n        let n0 = gid.x * 8u;\n        if (m0 >= {m} || n0 >= {n}) {{ return; }}\n{}        for (var k = 0u; k < p.K; k++) {{\n{}        }}\n{}        return;\n    }}\n",
            acc_decl(8),
            rename(body_tn()),
            rename(store_rows(8))
        );
    }
    s + &format!(
        "@compute @workgroup_size({w})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{\n    let l = wid.x + wid.y * nwg.x;\n{branches}}}\n"
    )
}

/// The split-K pair: each job's bindings (X_j, Y_j, C_j at 1 + 3j..) and [`thin`]'s work for
/// its workgroup's 8 rows of D; the workgroup memory is shared (a workgroup runs one job).
fn thin_source(trans: [bool; 2]) -> String {
    let mut s = format!("// C_j = alpha · A_jᵀ · B_j + beta · C_j for j = 0, 1: the split-K tn kernel, the job by workgroup.\n{PAIR_PARAMS}");
    s += &tn_bindings("0", 1);
    s += &tn_bindings("1", 4);
    s += &tn_part();
    s += &format!(
        "@compute @workgroup_size({})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{\n    let l = wid.x + wid.y * nwg.x;\n",
        thin::WG
    );
    s += "    if (l < p.g0) {\n        let p0 = l * 8u;\n";
    s += &tn_job(trans[0], "0", "p.M0", "p.N0");
    s += "        return;\n    }\n    let p0 = (l - p.g0) * 8u;\n";
    s + &tn_job(trans[1], "1", "p.M1", "p.N1") + "}\n"
}

#[cfg(test)]
mod tests {
    use super::super::{matmul_tn, matmul_tn_pair, SPLIT_K, THIN_CHOICE};
    use crate::gpu::{Category, Tensor};
    use crate::gpu_test;
    use crate::kernels::testutil::Rng;

    // LoRA's dA = α·gᵀ·x (r, in) and dB = α·dyᵀ·h (out, r) of one projection in one dispatch,
    // each equal bit for bit to its product run alone, with the register-blocked kernels and
    // with the split-K ones: SmolLM2's q and down shapes (down's dA takes workgroups of 16, its
    // dB of 8), odd shapes, rank 16 (no thin side), β 0, 0.5 and 1; a dB of (8, 8) is no
    // split-K product, so with split-K that projection takes two dispatches.
    gpu_test!(async fn tn_pairs_equal_their_products_alone(gpu) {
        let mut rng = Rng::new(61);
        // (tokens, r, in, out, β, dispatches with the register-blocked kernels, with split-K)
        let cases = [
            (256, 8, 576, 576, 1.0, 1, 1),
            (256, 8, 1536, 576, 1.0, 1, 1),
            (37, 5, 53, 100, 0.0, 1, 1),
            (40, 16, 96, 72, 1.0, 1, 1),
            (20, 8, 30, 12, 0.5, 1, 1),
            (24, 8, 40, 8, 1.0, 1, 2),
        ];
        for split in [false, true] {
            gpu.set_choice(THIN_CHOICE, split.then(|| SPLIT_K.into()));
            for (n, r, din, dout, beta, blocked_calls, split_calls) in cases {
                let mut up = |rows: usize, cols: usize| {
                    gpu.upload_f32(&rng.vec(rows * cols, 1.0), &[rows, cols], Category::Scratch).unwrap()
                };
                let (g, x, dy, h) = (up(n, r), up(n, din), up(n, dout), up(n, r));
                let (da, db) = (up(r, din), up(dout, r));
                let copy = |t: &Tensor| {
                    let c = gpu.zeros(&t.shape, t.dtype, Category::Scratch).unwrap();
                    gpu.copy(t, &c);
                    c
                };
                let (da1, db1) = (copy(&da), copy(&db));
                gpu.profile_start();
                matmul_tn_pair(gpu, [(&g, &x, &da), (&dy, &h, &db)], 0.7, beta);
                let calls = gpu.profile_take().await.unwrap().map_or(0, |p| p.calls());
                matmul_tn(gpu, &g, &x, &da1, 0.7, beta);
                matmul_tn(gpu, &dy, &h, &db1, 0.7, beta);
                let what = format!("split-K {split}, tokens {n} r {r} in {din} out {dout} β {beta}");
                assert_eq!(calls, if split { split_calls } else { blocked_calls }, "{what}: dispatches");
                for (name, pair, alone) in [("dA", &da, &da1), ("dB", &db, &db1)] {
                    let (pair, alone) = (gpu.read_f32(pair).await.unwrap(), gpu.read_f32(alone).await.unwrap());
                    assert!(pair.iter().any(|&v| v != 0.0), "{what}: {name} computed");
                    assert_eq!(pair, alone, "{what}: {name} in the pair");
                }
            }
        }
        gpu.set_choice(THIN_CHOICE, None);
    });
}
