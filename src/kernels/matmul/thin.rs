//! Thin products with a long contraction: C (M, N) for N ≤ 8 (LoRA's h = x·Aᵀ, `nt`, and
//! g = dy·B, `nn`, with N = r and K = in or out, up to thousands). One 8×8 block per invocation
//! would give a whole (256, 8) product 32 invocations; here a workgroup of 64 takes 4 rows of
//! C and splits K among its invocations (invocation t reads k = 4t, 4t + 256, …), then sums the
//! 64 partial blocks in workgroup memory: M / 4 workgroups, every invocation busy. B is f32
//! (LoRA's factors). The sum over K runs in another order than the register-blocked kernel's,
//! so results agree to f32 rounding.
//!
//! LoRA's weight gradients dB = s·dyᵀ·h (out, r) and dA = s·gᵀ·x (r, in) are `tn` products
//! with the contraction over tokens: one side of C is r, the other out or in. The register-
//! blocked kernel gives a (896, 8) gradient 112 invocations, each looping over every token;
//! [`run_tn`] gives 8 of the wide side to a workgroup of 64 that splits the tokens, as above.

use super::{flops, Params};
use crate::gpu::{DType, Gpu, Tensor};

/// Rows of C per workgroup.
const ROWS: usize = 4;
/// Invocations per workgroup (the K split).
pub(super) const WG: usize = 64;

/// Whether the thin kernel takes a product of this shape and B dtype.
pub(super) fn takes(m: usize, k: usize, n: usize, b: DType) -> bool {
    n <= 8 && m > 8 && k >= 256 && b == DType::F32
}

fn source(nt: bool, aligned: bool) -> String {
    let mut s = String::from(
        "struct Params {\n    M: u32, N: u32, K: u32,\n    ldb: u32,\n    alpha: f32, beta: f32,\n    has_bias: u32,\n    qoff: u32,\n    rank: u32,\n    ls: f32,\n    _q0: u32, _q1: u32,\n}\n\
         @group(0) @binding(0) var<uniform> p: Params;\n\
         @group(0) @binding(1) var<storage, read> a: array<f32>;      // A: (M, K)\n",
    );
    if nt {
        s += "@group(0) @binding(2) var<storage, read> b: array<f32>;      // B: (N, K), N ≤ 8\n\
              @group(0) @binding(3) var<storage, read> bias: array<f32>;   // bias: (N), read only if has_bias\n\
              @group(0) @binding(4) var<storage, read_write> c: array<f32>; // C: (M, N)\n";
    } else {
        s += "@group(0) @binding(2) var<storage, read> b: array<f32>;      // B: (K, N), N ≤ 8\n\
              @group(0) @binding(3) var<storage, read_write> c: array<f32>; // C: (M, N)\n";
    }
    s += &format!(
        "var<workgroup> part: array<f32, {}>;   // part[t][i][j]: invocation t's sum for C[m0 + i][j]\n",
        WG * ROWS * 8
    );
    // A's 4 values at (row r, k), zero past K (and for clamped rows: never stored).
    if aligned {
        s += "fn load_a4(r: u32, k: u32) -> vec4<f32> { let i = min(r, p.M - 1u) * p.K + k; return vec4<f32>(a[i], a[i + 1u], a[i + 2u], a[i + 3u]); }\n";
    } else {
        s += "fn load_a4(r: u32, k: u32) -> vec4<f32> { let base = min(r, p.M - 1u) * p.K; var v = vec4<f32>(0.0); for (var j = 0u; j < 4u; j++) { if (k + j < p.K) { v[j] = a[base + k + j]; } } return v; }\n";
    }
    if nt {
        s += "fn load_b4(n: u32, k: u32) -> vec4<f32> { var v = vec4<f32>(0.0); if (n >= p.N) { return v; } for (var j = 0u; j < 4u; j++) { if (k + j < p.K) { v[j] = b[n * p.K + k + j]; } } return v; }\n";
    } else {
        // Row k of B as two vec4s (columns 0–3 and 4–7), indices clamped instead of branched
        // on: past K, A's values are zero; columns past N are summed but never stored. (One
        // scalar load with its own branch per value, 32 per K step, made a shader that took
        // SwiftShader's compiler down with Chromium's GPU process.)
        s += "fn load_b8(k: u32) -> array<vec4<f32>, 2> {\n    let r = min(k, p.K - 1u) * p.N; let l = p.N - 1u;\n    return array<vec4<f32>, 2>(\n        vec4<f32>(b[r], b[r + min(1u, l)], b[r + min(2u, l)], b[r + min(3u, l)]),\n        vec4<f32>(b[r + min(4u, l)], b[r + min(5u, l)], b[r + min(6u, l)], b[r + min(7u, l)]));\n}\n";
    }
    s += &format!(
        "@compute @workgroup_size({WG})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{\n    let m0 = (wid.x + wid.y * nwg.x) * {ROWS}u;\n"
    );
    if nt {
        for i in 0..ROWS {
            for j in 0..8 {
                s += &format!("    var s{i}_{j} = 0.0;\n");
            }
        }
    } else {
        // s{i}_{h}: row i of the block, columns 4h..4h+3.
        for i in 0..ROWS {
            s += &format!("    var s{i}_0 = vec4<f32>(0.0);\n    var s{i}_1 = vec4<f32>(0.0);\n");
        }
    }
    s += &format!("    for (var k = t * 4u; k < p.K; k += {}u) {{\n", 4 * WG);
    for i in 0..ROWS {
        s += &format!("        let a{i} = load_a4(m0 + {i}u, k);\n");
    }
    if nt {
        for j in 0..8 {
            s += &format!("        let b{j} = load_b4({j}u, k);\n");
        }
        for i in 0..ROWS {
            for j in 0..8 {
                s += &format!("        s{i}_{j} += dot(a{i}, b{j});\n");
            }
        }
    } else {
        for q in 0..4 {
            s += &format!("        let b{q} = load_b8(k + {q}u);\n");
            for i in 0..ROWS {
                s += &format!("        s{i}_0 += a{i}[{q}] * b{q}[0];\n        s{i}_1 += a{i}[{q}] * b{q}[1];\n");
            }
        }
    }
    s += "    }\n";
    for i in 0..ROWS {
        for j in 0..8 {
            let v = if nt { format!("s{i}_{j}") } else { format!("s{i}_{}[{}]", j / 4, j % 4) };
            s += &format!("    part[t * {}u + {}u] = {v};\n", ROWS * 8, i * 8 + j);
        }
    }
    s += "    workgroupBarrier();\n";
    s += &format!(
        "    if (t < {}u) {{\n        let i = t / 8u; let j = t % 8u; let m = m0 + i;\n        var sum = 0.0;\n        for (var u = 0u; u < {WG}u; u++) {{ sum += part[u * {}u + t]; }}\n        if (m < p.M && j < p.N) {{\n            var r = p.alpha * sum;\n",
        ROWS * 8,
        ROWS * 8
    );
    if nt {
        s += "            if (p.has_bias != 0u) { r += bias[j]; }\n";
    }
    s += "            let idx = m * p.N + j;\n            if (p.beta != 0.0) { r += p.beta * c[idx]; }\n            c[idx] = r;\n        }\n    }\n}\n";
    s
}

/// Whether the thin `tn` kernel takes C (M, N) = Aᵀ (M, K) · B (K, N): one side of C at
/// most 8, the other longer.
pub(super) fn takes_tn(m: usize, k: usize, n: usize) -> bool {
    m.min(n) <= 8 && m.max(n) > 8 && k >= 16
}

/// The `tn` kernel: D (P, Q) = Xᵀ·Y for X (K, P) and Y (K, Q ≤ 8), stored as C = D or, with
/// `trans`, C = Dᵀ (when C's short side is its rows). Workgroup w takes D's rows 8w..8w+8;
/// invocation t the tokens k ≡ t (mod 64); the 64 partial 8×8 blocks are summed in
/// workgroup memory. Loads clamp their indices instead of branching: columns past P or Q are
/// computed from repeated values and never stored.
fn source_tn(trans: bool) -> String {
    let mut s = String::from(
        "struct Params {\n    M: u32, N: u32, K: u32,\n    ldb: u32,\n    alpha: f32, beta: f32,\n    has_bias: u32,\n    qoff: u32,\n    rank: u32,\n    ls: f32,\n    _q0: u32, _q1: u32,\n}\n\
         // here M = P (the wide side of D), N = Q (its narrow side, ≤ 8)\n\
         @group(0) @binding(0) var<uniform> p: Params;\n",
    );
    s += &tn_bindings("", 1);
    s += &tn_part();
    s += &format!(
        "@compute @workgroup_size({WG})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {{\n    let p0 = (wid.x + wid.y * nwg.x) * 8u;\n"
    );
    s + &tn_job(trans, "", "p.M", "p.N") + "}\n"
}

/// The bindings of one `tn` product, X, Y and C (names suffixed `j`), from binding `first` on.
pub(super) fn tn_bindings(j: &str, first: usize) -> String {
    format!(
        "@group(0) @binding({first}) var<storage, read> x{j}: array<f32>;      // X: (K, P)\n\
         @group(0) @binding({}) var<storage, read> y{j}: array<f32>;      // Y: (K, Q)\n\
         @group(0) @binding({}) var<storage, read_write> c{j}: array<f32>; // C: D (P, Q) or Dᵀ (Q, P)\n",
        first + 1,
        first + 2
    )
}

/// The workgroup memory of the `tn` kernel: every invocation's partial 8×8 block.
pub(super) fn tn_part() -> String {
    format!("var<workgroup> part: array<f32, {}>;   // part[t][i][j]: invocation t's sum for D[p0 + i][j]\n", WG * 64)
}

/// The `tn` kernel's work for D's rows p0..p0 + 8 (`p0` and invocation `t` set before it):
/// X{j}, Y{j} and C{j} with P = `m`, Q = `n` (WGSL expressions), α, β and K from `p`.
pub(super) fn tn_job(trans: bool, j: &str, m: &str, n: &str) -> String {
    let mut s = format!("    let lp = {m} - 1u; let lq = {n} - 1u;\n");
    for i in 0..8 {
        s += &format!("    var s{i}_0 = vec4<f32>(0.0);\n    var s{i}_1 = vec4<f32>(0.0);\n");
    }
    s += &format!("    for (var k = t; k < p.K; k += {WG}u) {{\n        let rx = k * {m}; let ry = k * {n};\n");
    s += &format!("        let ylo = vec4<f32>(y{j}[ry], y{j}[ry + min(1u, lq)], y{j}[ry + min(2u, lq)], y{j}[ry + min(3u, lq)]);\n");
    s += &format!("        let yhi = vec4<f32>(y{j}[ry + min(4u, lq)], y{j}[ry + min(5u, lq)], y{j}[ry + min(6u, lq)], y{j}[ry + min(7u, lq)]);\n");
    for i in 0..8 {
        s += &format!(
            "        let xv{i} = x{j}[rx + min(p0 + {i}u, lp)];\n        s{i}_0 += xv{i} * ylo; s{i}_1 += xv{i} * yhi;\n"
        );
    }
    s += "    }\n";
    for i in 0..8 {
        for jj in 0..8 {
            s += &format!("    part[t * 64u + {}u] = s{i}_{}[{}];\n", i * 8 + jj, jj / 4, jj % 4);
        }
    }
    s += "    workgroupBarrier();\n";
    s += &format!(
        "    let i = t / 8u; let j = t % 8u; let m = p0 + i;\n    var sum = 0.0;\n    for (var u = 0u; u < {WG}u; u++) {{ sum += part[u * 64u + t]; }}\n    if (m < {m} && j < {n}) {{\n"
    );
    s += &if trans { format!("        let idx = j * {m} + m;\n") } else { format!("        let idx = m * {n} + j;\n") };
    s += &format!("        var r = p.alpha * sum;\n        if (p.beta != 0.0) {{ r += p.beta * c{j}[idx]; }}\n        c{j}[idx] = r;\n    }}\n");
    s
}

/// C (M, N) = α · A (K, M)ᵀ · B (K, N) + β · C, f32, for a C with one side ≤ 8 ([`takes_tn`]).
pub(super) fn run_tn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32) {
    let (k, m, n) = (a.rows(), a.cols(), b.cols());
    // D = Xᵀ·Y with Y the narrow side: C itself when N is narrow, Cᵀ = Bᵀ·A when M is.
    let trans = m < n;
    let (x, y, wide, narrow) = if trans { (b, a, n, m) } else { (a, b, m, n) };
    let key = format!("matmul_tn/thin/{}", if trans { "t" } else { "n" });
    let pipeline = gpu.pipeline(&key, || source_tn(trans));
    let p = Params { m: wide as u32, n: narrow as u32, k: k as u32, alpha, beta, ..Params::default() };
    let w = crate::gpu::groups(wide.div_ceil(8) as u32);
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &[x, y, c], w, flops(m, n, k));
}

/// C (M, N) = α · A · Bᵀ + bias + β · C, B (N, K) f32 with N ≤ 8; or (`nt` false)
/// C = α · A · B + β · C, B (K, N) f32.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    gpu: &Gpu,
    nt: bool,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
) {
    let (m, k) = (a.rows(), a.cols());
    let n = if nt { b.rows() } else { b.cols() };
    let aligned = k % 4 == 0;
    let key = format!("matmul_{}/thin/{aligned}", if nt { "nt" } else { "nn" });
    let pipeline = gpu.pipeline(&key, || source(nt, aligned));
    let p = Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        ldb: k as u32,
        alpha,
        beta,
        has_bias: bias.is_some() as u32,
        ..Params::default()
    };
    let w = crate::gpu::groups(m.div_ceil(ROWS) as u32);
    if nt {
        let bias = bias.unwrap_or(gpu.dummy());
        gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &[a, b, bias, c], w, flops(m, n, k));
    } else {
        gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &[a, b, c], w, flops(m, n, k));
    }
}
