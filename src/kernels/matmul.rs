//! General matrix products, register-blocked (8×8 outputs per invocation):
//!
//! - [`matmul_nt`]: C = α·A·Bᵀ + bias + β·C — x·Wᵀ against HF's [out, in] weights (forward),
//!   and the thin LoRA products h = x·Aᵀ and s·h·Bᵀ.
//! - [`matmul_nn`]: C = α·A·B + β·C — dy·W (input gradient of a frozen linear) and the LoRA
//!   backward products g = dy·B, s·g·A.
//! - [`matmul_tn`]: C = α·Aᵀ·B + β·C — LoRA weight gradients dB = s·dyᵀ·h and dA = s·gᵀ·x.
//!
//! B may be f32, packed bf16/f16, or blockwise quantized Q8/Q4 (`nt` and `nn` only), unpacked
//! or dequantized in the shader; arithmetic is f32.
//! Each kernel has a vectorised variant used when the contiguous dimensions are
//! multiples of 4 (8 for 16-bit rows in `nn`) and a scalar variant for any shape;
//! both are checked against the same f64 reference. Quantized rows are padded to whole groups,
//! so their B loads are always vectorised; `nt` walks K group by group and reads each group's
//! (scale, offset) once per group.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::quant::{wgsl_codes4, wgsl_codes8};
use crate::kernels::{render, unpack_fns};

const NT: &str = include_str!("matmul_nt.wgsl");
const NN: &str = include_str!("matmul_nn.wgsl");
const TN: &str = include_str!("matmul_tn.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    m: u32,
    n: u32,
    k: u32,
    ldb: u32,
    alpha: f32,
    beta: f32,
    has_bias: u32,
    /// quantized B: word offset of the group parameters (rows · ldb)
    qoff: u32,
}

/// `fn load_a4(m, k) -> vec4<f32>`: 4 values of row m of a row-major f32 matrix `arr`
/// (rows `rows`, row length `len`), zero past the row's end.
fn load4_f32(fname: &str, arr: &str, rows: &str, len: &str, stride: &str, aligned: bool) -> (String, &'static str) {
    if aligned {
        (
            format!("fn {fname}(r: u32, k: u32) -> vec4<f32> {{ return {arr}[(min(r, {rows} - 1u) * {stride} + k) / 4u]; }}\n"),
            "vec4<f32>",
        )
    } else {
        (
            format!(
                "fn {fname}(r: u32, k: u32) -> vec4<f32> {{
    let base = min(r, {rows} - 1u) * {stride};
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {{ if (k + j < {len}) {{ v[j] = {arr}[base + k + j]; }} }}
    return v;
}}\n"
            ),
            "f32",
        )
    }
}

/// `fn load_b4(n, k) -> vec4<f32>` for packed 16-bit rows.
fn load4_packed(aligned: bool) -> (String, &'static str) {
    if aligned {
        (
            "fn load_b4(r: u32, k: u32) -> vec4<f32> {
    let w = b[(min(r, p.N - 1u) * p.ldb + k / 2u) / 2u];
    return vec4<f32>(unpack2(w.x), unpack2(w.y));
}\n"
            .into(),
            "vec2<u32>",
        )
    } else {
        (
            "fn load_b4(r: u32, k: u32) -> vec4<f32> {
    let base = min(r, p.N - 1u) * p.ldb + k / 2u;
    var lo = vec2<f32>(0.0); var hi = vec2<f32>(0.0);
    if (k / 2u < p.ldb) { lo = unpack2(b[base]); }
    if (k / 2u + 1u < p.ldb) { hi = unpack2(b[base + 1u]); }
    return vec4<f32>(lo, hi);
}\n"
            .into(),
            "u32",
        )
    }
}

/// `fn NAME(row, c0, &lo, &hi)`: 8 contiguous values of row `row` starting at column c0 of a
/// row-major matrix `arr` with `len` columns (values past the row are unspecified but finite
/// or unused: callers never store them).
fn load8(fname: &str, arr: &str, len: &str, stride: &str, dtype: DType, aligned: bool) -> (String, &'static str) {
    let sig = format!("fn {fname}(row: u32, c0: u32, lo: ptr<function, vec4<f32>>, hi: ptr<function, vec4<f32>>)");
    match (dtype, aligned) {
        (DType::F32, true) => (
            format!("{sig} {{ let i = (row * {stride} + c0) / 4u; *lo = {arr}[i]; if (c0 + 4u < {len}) {{ *hi = {arr}[i + 1u]; }} else {{ *hi = vec4<f32>(0.0); }} }}\n"),
            "vec4<f32>",
        ),
        (DType::F32, false) => (
            format!(
                "{sig} {{
    var v: array<f32, 8>;
    for (var j = 0u; j < 8u; j++) {{ if (c0 + j < {len}) {{ v[j] = {arr}[row * {stride} + c0 + j]; }} }}
    *lo = vec4<f32>(v[0], v[1], v[2], v[3]); *hi = vec4<f32>(v[4], v[5], v[6], v[7]);
}}\n"
            ),
            "f32",
        ),
        (DType::Q8 | DType::Q4, _) => {
            // 8 values lie in one group (32 and 64 are multiples of 8); rows are padded to whole groups.
            let (lo, hi) = wgsl_codes8(dtype, arr, "base", "c0");
            let gs = dtype.group_size().unwrap_or(1);
            (
                format!(
                    "{sig} {{
    let base = row * {stride};
    let s = qparams({arr}[p.qoff + row * ({stride} / 8u) + c0 / {gs}u]);
    *lo = s.x * {lo} + s.y; *hi = s.x * {hi} + s.y;
}}\n"
                ),
                "u32",
            )
        }
        (_, true) => (
            format!("{sig} {{ let w = {arr}[(row * {stride} + c0 / 2u) / 4u]; *lo = vec4<f32>(unpack2(w.x), unpack2(w.y)); *hi = vec4<f32>(unpack2(w.z), unpack2(w.w)); }}\n"),
            "vec4<u32>",
        ),
        (_, false) => (
            format!(
                "{sig} {{
    var v: array<vec2<f32>, 4>;
    for (var j = 0u; j < 4u; j++) {{ if (c0 / 2u + j < {stride}) {{ v[j] = unpack2({arr}[row * {stride} + c0 / 2u + j]); }} }}
    *lo = vec4<f32>(v[0], v[1]); *hi = vec4<f32>(v[2], v[3]);
}}\n"
            ),
            "u32",
        ),
    }
}

/// `var acc0..acc15: vec4<f32>`: row i of the 8×8 block is (acc{2i}, acc{2i+1}). Named
/// variables, not an array, so the compiler keeps them in registers.
fn acc_decl() -> String {
    (0..16).map(|i| format!("    var acc{i} = vec4<f32>(0.0);\n")).collect()
}

fn store_rows() -> String {
    (0..8).map(|i| format!("    store_row(m0 + {i}u, n0, acc{}, acc{});\n", 2 * i, 2 * i + 1)).collect()
}

/// NT inner step: 8 rows of A and 8 rows of B, 4 values each; 64 dot products.
/// `load_b(j)` is the WGSL expression for the 4 values of B's row n0 + j.
fn body_nt(load_b: impl Fn(usize) -> String) -> String {
    let mut s = String::new();
    for i in 0..8 {
        s += &format!("        let a{i} = load_a4(m0 + {i}u, k);\n");
    }
    for j in 0..8 {
        s += &format!("        let b{j} = {};\n", load_b(j));
    }
    for i in 0..8 {
        s += &format!(
            "        acc{} += vec4<f32>(dot(a{i}, b0), dot(a{i}, b1), dot(a{i}, b2), dot(a{i}, b3));\n        acc{} += vec4<f32>(dot(a{i}, b4), dot(a{i}, b5), dot(a{i}, b6), dot(a{i}, b7));\n",
            2 * i,
            2 * i + 1
        );
    }
    s
}

/// NT main loop over K. Unquantized B: steps of 4 with `load_b4`. Quantized B: group by
/// group, reading the 8 rows' (scale, offset) once per group, then steps of 4 within it.
fn loop_nt(dtype: DType) -> String {
    let Some(gs) = dtype.group_size() else {
        return format!(
            "    for (var k = 0u; k < p.K; k += 4u) {{\n{}    }}\n",
            body_nt(|j| format!("load_b4(n0 + {j}u, k)"))
        );
    };
    let mut s = String::from("    let groups = p.ldb / 8u;\n");
    for j in 0..8 {
        // Rows past N are clamped (their results are never stored).
        s += &format!("    let r{j} = min(n0 + {j}u, p.N - 1u);\n");
    }
    s += "    for (var g = 0u; g < groups; g++) {\n";
    for j in 0..8 {
        s += &format!("        let s{j} = qparams(b[p.qoff + r{j} * groups + g]);\n");
    }
    s += &format!(
        "        let kend = min(g * {gs}u + {gs}u, p.K);\n        for (var k = g * {gs}u; k < kend; k += 4u) {{\n"
    );
    // A is zero past K, so the pad codes of the last group add nothing.
    let body = body_nt(|j| format!("s{j}.x * {} + s{j}.y", wgsl_codes4(dtype, "b", &format!("r{j} * p.ldb"), "k")));
    s += &body.lines().map(|l| format!("    {l}\n")).collect::<String>();
    s += "        }\n    }\n";
    s
}

/// NN inner step: 8 rows of A (4 values each) times 4 rows of B (8 values each).
fn body_nn() -> String {
    let mut s = String::new();
    for i in 0..8 {
        s += &format!("        let a{i} = load_a4(m0 + {i}u, k);\n");
    }
    s += "        var blo: vec4<f32>; var bhi: vec4<f32>;\n";
    for (kk, comp) in ["x", "y", "z", "w"].iter().enumerate() {
        // A is zero past K, so a clamped row of B adds nothing.
        s += &format!("        load_b8(min(k + {kk}u, p.K - 1u), n0, &blo, &bhi);\n");
        for i in 0..8 {
            s += &format!("        acc{} += a{i}.{comp} * blo; acc{} += a{i}.{comp} * bhi;\n", 2 * i, 2 * i + 1);
        }
    }
    s
}

/// TN inner step: outer product of 8 values of row k of A and 8 of row k of B.
fn body_tn() -> String {
    let mut s = String::from(
        "        var alo: vec4<f32>; var ahi: vec4<f32>; var blo: vec4<f32>; var bhi: vec4<f32>;\n        load_a8(k, m0, &alo, &ahi);\n        load_b8(k, n0, &blo, &bhi);\n",
    );
    for i in 0..8 {
        let (v, comp) = if i < 4 { ("alo", ["x", "y", "z", "w"][i]) } else { ("ahi", ["x", "y", "z", "w"][i - 4]) };
        s += &format!("        acc{} += {v}.{comp} * blo; acc{} += {v}.{comp} * bhi;\n", 2 * i, 2 * i + 1);
    }
    s
}

fn check(what: &str, ok: bool, detail: impl FnOnce() -> String) {
    assert!(ok, "{what}: {}", detail());
}

/// C (M, N) = α · A (M, K) · Bᵀ + bias + β · C, with B (N, K) of any weight dtype (Q8/Q4
/// quantized along K).
pub fn matmul_nt(gpu: &Gpu, a: &Tensor, b: &Tensor, bias: Option<&Tensor>, c: &Tensor, alpha: f32, beta: f32) {
    let (m, k, n) = (a.rows(), a.cols(), b.rows());
    check("matmul_nt", b.cols() == k && c.rows() == m && c.cols() == n && a.dtype == DType::F32, || {
        format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape)
    });
    if m == 0 || n == 0 {
        return;
    }
    let a_vec = k % 4 == 0;
    let b_vec = k % 4 == 0 || b.dtype.group_size().is_some();
    let key = format!("matmul_nt/{}/{a_vec}/{b_vec}", b.dtype.name());
    let pipeline = gpu.pipeline(&key, || {
        let (la, ae) = load4_f32("load_a4", "a", "p.M", "p.K", "p.K", a_vec);
        let (lb, be) = match b.dtype {
            DType::F32 => load4_f32("load_b4", "b", "p.N", "p.K", "p.ldb", b_vec),
            DType::Q8 | DType::Q4 => (String::new(), "u32"),
            DType::BF16 | DType::F16 => load4_packed(b_vec),
        };
        render(
            NT,
            &[
                ("A_ELEM", ae.into()),
                ("B_ELEM", be.into()),
                ("UNPACK", unpack_fns(b.dtype).into()),
                ("LOAD_A", la),
                ("LOAD_B", lb),
                ("ACC_DECL", acc_decl()),
                ("LOOP", loop_nt(b.dtype)),
                ("STORE", store_rows()),
            ],
        )
    });
    let ldb = b.dtype.row_words(k);
    let p = Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        ldb: ldb as u32,
        alpha,
        beta,
        has_bias: bias.is_some() as u32,
        qoff: (n * ldb) as u32,
    };
    let bias = bias.unwrap_or(gpu.dummy());
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[a, b, bias, c], grid(m, n));
}

/// C (M, N) = α · A (M, K) · B (K, N) + β · C, with B of any weight dtype (Q8/Q4 quantized
/// along N, i.e. a (K, N) matrix quantized by its own rows).
pub fn matmul_nn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32) {
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    check("matmul_nn", b.rows() == k && c.rows() == m && c.cols() == n && a.dtype == DType::F32, || {
        format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape)
    });
    if m == 0 || n == 0 {
        return;
    }
    let a_vec = k % 4 == 0;
    let b_vec = match b.dtype {
        DType::F32 => n % 4 == 0,
        DType::BF16 | DType::F16 => n % 8 == 0,
        DType::Q8 | DType::Q4 => true, // rows padded to whole groups
    };
    let key = format!("matmul_nn/{}/{a_vec}/{b_vec}", b.dtype.name());
    let pipeline = gpu.pipeline(&key, || {
        let (la, ae) = load4_f32("load_a4", "a", "p.M", "p.K", "p.K", a_vec);
        let (lb, be) = load8("load_b8", "b", "p.N", "p.ldb", b.dtype, b_vec);
        render(
            NN,
            &[
                ("A_ELEM", ae.into()),
                ("B_ELEM", be.into()),
                ("UNPACK", unpack_fns(b.dtype).into()),
                ("LOAD_A", la),
                ("LOAD_B8", lb),
                ("ACC_DECL", acc_decl()),
                ("BODY", body_nn()),
                ("STORE", store_rows()),
            ],
        )
    });
    let ldb = b.dtype.row_words(n);
    let p = Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        ldb: ldb as u32,
        alpha,
        beta,
        has_bias: 0,
        qoff: (k * ldb) as u32,
    };
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[a, b, c], grid(m, n));
}

/// C (M, N) = α · A (K, M)ᵀ · B (K, N) + β · C, all f32.
pub fn matmul_tn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32) {
    let (k, m, n) = (a.rows(), a.cols(), b.cols());
    check(
        "matmul_tn",
        b.rows() == k && c.rows() == m && c.cols() == n && a.dtype == DType::F32 && b.dtype == DType::F32,
        || format!("A {:?} B {:?} C {:?}", a.shape, b.shape, c.shape),
    );
    if m == 0 || n == 0 {
        return;
    }
    let a_vec = m % 4 == 0;
    let b_vec = n % 4 == 0;
    let key = format!("matmul_tn/{a_vec}/{b_vec}");
    let pipeline = gpu.pipeline(&key, || {
        let (la, ae) = load8("load_a8", "a", "p.M", "p.M", DType::F32, a_vec);
        let (lb, be) = load8("load_b8", "b", "p.N", "p.N", DType::F32, b_vec);
        render(
            TN,
            &[
                ("A_ELEM", ae.into()),
                ("B_ELEM", be.into()),
                ("LOAD_A8", la),
                ("LOAD_B8", lb),
                ("ACC_DECL", acc_decl()),
                ("BODY", body_tn()),
                ("STORE", store_rows()),
            ],
        )
    });
    let p = Params { m: m as u32, n: n as u32, k: k as u32, ldb: 0, alpha, beta, has_bias: 0, qoff: 0 };
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[a, b, c], grid(m, n));
}

fn grid(m: usize, n: usize) -> (u32, u32, u32) {
    ((n.div_ceil(64)) as u32, (m.div_ceil(64)) as u32, 1)
}

/// f64 references (row-major), used by the tests and benchmarks.
pub mod reference {
    /// C (M, N) = A (M, K) · B (N, K)ᵀ
    pub fn nt(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                c[i * n + j] = (0..k).map(|t| a[i * k + t] * b[j * k + t]).sum();
            }
        }
        c
    }
    /// C (M, N) = A (M, K) · B (K, N)
    pub fn nn(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for t in 0..k {
                let av = a[i * k + t];
                for j in 0..n {
                    c[i * n + j] += av * b[t * n + j];
                }
            }
        }
        c
    }
    /// C (M, N) = A (K, M)ᵀ · B (K, N)
    pub fn tn(a: &[f64], b: &[f64], k: usize, m: usize, n: usize) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for t in 0..k {
            for i in 0..m {
                let av = a[t * m + i];
                for j in 0..n {
                    c[i * n + j] += av * b[t * n + j];
                }
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::quant;
    use crate::kernels::testutil::{assert_close, round_to, Rng};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// The values a (rows, cols) matrix stands for once uploaded as `dtype`.
    fn as_stored(v: &[f32], rows: usize, cols: usize, dtype: DType) -> Vec<f32> {
        match dtype {
            DType::Q8 | DType::Q4 => quant::dequantize(&quant::quantize(v, rows, cols, dtype), rows, cols, dtype),
            _ => v.iter().map(|&x| round_to(dtype, x)).collect(),
        }
    }

    async fn check_nt(gpu: &Gpu, m: usize, k: usize, n: usize, dtype: DType, bias: bool, beta: f32) {
        let mut rng = Rng::new((m * 1000 + k * 10 + n) as u64);
        let a = rng.vec(m * k, 1.0);
        let b0 = rng.vec(n * k, 1.0);
        let b = as_stored(&b0, n, k, dtype);
        let bi = rng.vec(n, 1.0);
        let c0 = rng.vec(m * n, 1.0);
        let ta = gpu.upload_f32(&a, &[m, k], Category::Activations).unwrap();
        let tb = gpu.upload_f32_as(&b0, &[n, k], dtype, Category::Weights).unwrap();
        let tbias = gpu.upload_f32(&bi, &[n], Category::Weights).unwrap();
        let tc = gpu.upload_f32(&c0, &[m, n], Category::Activations).unwrap();
        let alpha = 0.75;
        matmul_nt(gpu, &ta, &tb, bias.then_some(&tbias), &tc, alpha, beta);
        let got = gpu.read_f32(&tc).await.unwrap();
        let mut want = reference::nt(&f64s(&a), &f64s(&b), m, k, n);
        for i in 0..m {
            for j in 0..n {
                let w = &mut want[i * n + j];
                *w = alpha as f64 * *w + beta as f64 * c0[i * n + j] as f64 + if bias { bi[j] as f64 } else { 0.0 };
            }
        }
        assert_close(&format!("nt {m}x{k}x{n} {dtype:?}"), &got, &want, 1e-4, 1e-4);
    }

    async fn check_nn(gpu: &Gpu, m: usize, k: usize, n: usize, dtype: DType, beta: f32) {
        let mut rng = Rng::new((m * 7 + k * 100 + n) as u64);
        let a = rng.vec(m * k, 1.0);
        let b0 = rng.vec(k * n, 1.0);
        let b = as_stored(&b0, k, n, dtype);
        let c0 = rng.vec(m * n, 1.0);
        let ta = gpu.upload_f32(&a, &[m, k], Category::Activations).unwrap();
        let tb = gpu.upload_f32_as(&b0, &[k, n], dtype, Category::Weights).unwrap();
        let tc = gpu.upload_f32(&c0, &[m, n], Category::Activations).unwrap();
        matmul_nn(gpu, &ta, &tb, &tc, 1.5, beta);
        let got = gpu.read_f32(&tc).await.unwrap();
        let mut want = reference::nn(&f64s(&a), &f64s(&b), m, k, n);
        for (w, c) in want.iter_mut().zip(&c0) {
            *w = 1.5 * *w + beta as f64 * *c as f64;
        }
        assert_close(&format!("nn {m}x{k}x{n} {dtype:?}"), &got, &want, 1e-4, 1e-4);
    }

    async fn check_tn(gpu: &Gpu, k: usize, m: usize, n: usize, beta: f32) {
        let mut rng = Rng::new((m * 3 + k * 17 + n) as u64);
        let a = rng.vec(k * m, 1.0);
        let b = rng.vec(k * n, 1.0);
        let c0 = rng.vec(m * n, 1.0);
        let ta = gpu.upload_f32(&a, &[k, m], Category::Activations).unwrap();
        let tb = gpu.upload_f32(&b, &[k, n], Category::Activations).unwrap();
        let tc = gpu.upload_f32(&c0, &[m, n], Category::Grads).unwrap();
        matmul_tn(gpu, &ta, &tb, &tc, -0.5, beta);
        let got = gpu.read_f32(&tc).await.unwrap();
        let mut want = reference::tn(&f64s(&a), &f64s(&b), k, m, n);
        for (w, c) in want.iter_mut().zip(&c0) {
            *w = -0.5 * *w + beta as f64 * *c as f64;
        }
        assert_close(&format!("tn {k}x{m}x{n}"), &got, &want, 1e-4, 1e-4);
    }

    gpu_test!(async fn matmul_nt_odd_shapes(gpu) {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            check_nt(gpu, 37, 53, 29, dtype, true, 0.0).await;
            check_nt(gpu, 3, 7, 5, dtype, false, 1.0).await;
        }
    });

    gpu_test!(async fn matmul_nt_vector_shapes(gpu) {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            check_nt(gpu, 37, 52, 44, dtype, true, 0.5).await;
            check_nt(gpu, 70, 68, 9, dtype, false, 0.0).await;
        }
    });

    gpu_test!(async fn matmul_nn_shapes(gpu) {
        for dtype in [DType::F32, DType::BF16, DType::F16] {
            check_nn(gpu, 37, 53, 29, dtype, 0.0).await;
            check_nn(gpu, 37, 52, 44, dtype, 1.0).await;
            check_nn(gpu, 19, 44, 72, dtype, 0.0).await;
            check_nn(gpu, 5, 3, 7, dtype, 0.0).await;
        }
    });

    // Quantized B: K (nt) or N (nn) not a multiple of the group, of 8 or of 4; several groups
    // with a partial last one; exactly two Q4 groups; one tiny case.
    gpu_test!(async fn matmul_nt_quantized(gpu) {
        for dtype in [DType::Q8, DType::Q4] {
            check_nt(gpu, 37, 53, 29, dtype, true, 0.0).await;
            check_nt(gpu, 37, 128, 72, dtype, false, 0.5).await;
            check_nt(gpu, 19, 100, 44, dtype, true, 1.0).await;
            check_nt(gpu, 70, 70, 9, dtype, false, 0.0).await;
            check_nt(gpu, 3, 7, 5, dtype, false, 1.0).await;
        }
    });

    gpu_test!(async fn matmul_nn_quantized(gpu) {
        for dtype in [DType::Q8, DType::Q4] {
            check_nn(gpu, 37, 53, 29, dtype, 0.0).await;
            check_nn(gpu, 37, 72, 128, dtype, 1.0).await;
            check_nn(gpu, 19, 44, 100, dtype, 0.0).await;
            check_nn(gpu, 9, 70, 70, dtype, 0.5).await;
            check_nn(gpu, 5, 3, 7, dtype, 0.0).await;
        }
    });

    gpu_test!(async fn matmul_tn_shapes(gpu) {
        check_tn(gpu, 37, 29, 53, 0.0).await;
        check_tn(gpu, 37, 44, 12, 1.0).await;
        check_tn(gpu, 5, 3, 9, 1.0).await;
    });
}

/// Timing of `nt` and `nn` with BF16, Q8 and Q4 B at the Qwen2.5-0.5B MLP shapes, runs of all
/// variants interleaved so that a shared machine's load hits them alike; best of 7:
/// `cargo test --lib kernels::matmul::bench -- --ignored --nocapture`.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod bench {
    use super::*;
    use crate::gpu::platform::{block_on, now_ms};
    use crate::gpu::Category;
    use crate::kernels::testutil::{test_gpu, Rng};

    #[test]
    #[ignore]
    fn matmul_weight_dtypes_gflops() {
        block_on(async {
            let gpu = &test_gpu().await;
            let mut rng = Rng::new(1);
            // (label, flops, A, B, C, nt?)
            let mut cases = Vec::new();
            for (m, k, n) in [(256, 896, 4864), (256, 4864, 896)] {
                let a = gpu.upload_f32(&rng.vec(m * k, 1.0), &[m, k], Category::Activations).unwrap();
                let c = gpu.zeros(&[m, n], DType::F32, Category::Activations).unwrap();
                let w = rng.vec(n * k, 0.05);
                for dtype in [DType::BF16, DType::Q8, DType::Q4] {
                    for nt in [true, false] {
                        let shape = if nt { [n, k] } else { [k, n] };
                        let b = gpu.upload_f32_as(&w, &shape, dtype, Category::Weights).unwrap();
                        let label = format!("{} {m}x{k}x{n} {:>4}", if nt { "nt" } else { "nn" }, dtype.name());
                        cases.push((label, 2.0 * (m * k * n) as f64, a.clone(), b, c.clone(), nt));
                    }
                }
            }
            let run = |(_, _, a, b, c, nt): &(String, f64, Tensor, Tensor, Tensor, bool)| {
                if *nt {
                    matmul_nt(gpu, a, b, None, c, 1.0, 0.0)
                } else {
                    matmul_nn(gpu, a, b, c, 1.0, 0.0)
                }
            };
            let mut best = vec![f64::INFINITY; cases.len()];
            for round in 0..8 {
                for (i, case) in cases.iter().enumerate() {
                    gpu.sync().await.unwrap();
                    let t0 = now_ms();
                    run(case);
                    gpu.sync().await.unwrap();
                    if round > 0 {
                        best[i] = best[i].min(now_ms() - t0); // round 0 compiles and warms up
                    }
                }
            }
            for ((label, flops, ..), ms) in cases.iter().zip(&best) {
                println!("{label}: {ms:8.1} ms  {:6.1} GFLOP/s (best of 7)", flops / ms / 1e6);
            }
        })
    }
}
