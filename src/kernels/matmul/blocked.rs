//! The register-blocked products: each invocation computes an 8×8 block of C, reading its A
//! and B runs straight from storage (no workgroup memory, no subgroups), so they run on every
//! adapter; the reference the other variants are checked against.

use super::lora::{self, Fused};
use super::{flops, Params};
use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::quant::{wgsl_codes4, wgsl_codes8};
use crate::kernels::{render, unpack_fns};

const NT: &str = include_str!("blocked_nt.wgsl");
const NN: &str = include_str!("blocked_nn.wgsl");
const TN: &str = include_str!("blocked_tn.wgsl");

/// `fn load_a4(m, k) -> vec4<f32>`: 4 values of row m of a row-major f32 matrix `arr`
/// (rows `rows`, row length `len`), zero past the row's end.
pub(super) fn load4_f32(
    fname: &str,
    arr: &str,
    rows: &str,
    len: &str,
    stride: &str,
    aligned: bool,
) -> (String, &'static str) {
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
pub(super) fn load4_packed(aligned: bool) -> (String, &'static str) {
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
pub(super) fn load8(
    fname: &str,
    arr: &str,
    len: &str,
    stride: &str,
    dtype: DType,
    aligned: bool,
) -> (String, &'static str) {
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

/// `var acc0..acc{2·rows−1}: vec4<f32>`: row i of the rows×8 block is (acc{2i}, acc{2i+1}).
/// Named variables, not an array, so the compiler keeps them in registers.
pub(super) fn acc_decl(rows: usize) -> String {
    (0..2 * rows).map(|i| format!("    var acc{i} = vec4<f32>(0.0);\n")).collect()
}

/// `fn NAME(m, n0, lo, hi)`: store 8 values of row m of C from column n0 into `c` (an (M, N)
/// array; M and N the WGSL expressions `m_len` and `n_len`) as α·v, plus β·C where `beta` and
/// β ≠ 0, skipping what lies past M or N: the store of the generated batched and paired kernels.
pub(super) fn store_row_fn(name: &str, c: &str, m_len: &str, n_len: &str, beta: bool) -> String {
    let add = if beta { format!("\n        if (p.beta != 0.0) {{ r += p.beta * {c}[idx]; }}") } else { String::new() };
    format!(
        "fn {name}(m: u32, n0: u32, lo: vec4<f32>, hi: vec4<f32>) {{
    if (m >= {m_len}) {{ return; }}
    let v = array<f32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    for (var j = 0u; j < 8u; j++) {{
        let n = n0 + j;
        if (n >= {n_len}) {{ return; }}
        var r = p.alpha * v[j];
        let idx = m * {n_len} + n;{add}
        {c}[idx] = r;
    }}
}}\n"
    )
}

pub(super) fn store_rows(rows: usize) -> String {
    (0..rows).map(|i| format!("    store_row(m0 + {i}u, n0, acc{}, acc{});\n", 2 * i, 2 * i + 1)).collect()
}

/// `let a0..a{rows−1}`: the 4 values at k of A's rows m0.. read by this invocation itself.
pub(super) fn own_a_rows(rows: usize) -> String {
    (0..rows).map(|i| format!("        let a{i} = load_a4(m0 + {i}u, k);\n")).collect()
}

/// NT inner step: `rows` rows of A (declared by `a_rows`) and 8 rows of B, 4 values each.
/// `load_b(j)` is the WGSL expression for the 4 values of B's row n0 + j.
pub(super) fn body_nt(rows: usize, a_rows: &str, load_b: impl Fn(usize) -> String) -> String {
    let mut s = a_rows.to_string();
    for j in 0..8 {
        s += &format!("        let b{j} = {};\n", load_b(j));
    }
    for i in 0..rows {
        s += &format!(
            "        acc{} += vec4<f32>(dot(a{i}, b0), dot(a{i}, b1), dot(a{i}, b2), dot(a{i}, b3));\n        acc{} += vec4<f32>(dot(a{i}, b4), dot(a{i}, b5), dot(a{i}, b6), dot(a{i}, b7));\n",
            2 * i,
            2 * i + 1
        );
    }
    s
}

/// NT main loop over K, for `rows` rows of A declared per step by `a_rows`. Unquantized B:
/// steps of 4 with `load_b4`. Quantized B: group by group, reading the 8 rows' (scale, offset)
/// once per group, then steps of 4 within it.
pub(super) fn loop_nt(dtype: DType, rows: usize, a_rows: &str) -> String {
    let Some(gs) = dtype.group_size() else {
        return format!(
            "    for (var k = 0u; k < p.K; k += 4u) {{\n{}    }}\n",
            body_nt(rows, a_rows, |j| format!("load_b4(n0 + {j}u, k)"))
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
    let body = body_nt(rows, a_rows, |j| {
        format!("s{j}.x * {} + s{j}.y", wgsl_codes4(dtype, "b", &format!("r{j} * p.ldb"), "k"))
    });
    s += &body.lines().map(|l| format!("    {l}\n")).collect::<String>();
    s += "        }\n    }\n";
    s
}

/// NN inner step: `rows` rows of A (4 values each, declared by `a_rows`) times 4 rows of B
/// (8 values each). The 4 products of each output are summed before they meet its accumulator
/// (as `dot` sums them in the NT step), so each accumulator is read and written once per step,
/// not once per k: on a CPU adapter, where the accumulators live in memory, that is the
/// difference (lavapipe, bf16 at Qwen2.5-0.5B's shapes: 40–45 → 57–58 GFLOP/s).
pub(super) fn body_nn(rows: usize, a_rows: &str) -> String {
    let mut s = a_rows.to_string();
    for kk in 0..4 {
        // A is zero past K, so a clamped row of B adds nothing.
        s += &format!("        var blo{kk}: vec4<f32>; var bhi{kk}: vec4<f32>;\n");
        s += &format!("        load_b8(min(k + {kk}u, p.K - 1u), n0, &blo{kk}, &bhi{kk});\n");
    }
    for i in 0..rows {
        for (acc, half) in [(2 * i, "blo"), (2 * i + 1, "bhi")] {
            s += &format!(
                "        acc{acc} += a{i}.x * {half}0 + a{i}.y * {half}1 + a{i}.z * {half}2 + a{i}.w * {half}3;\n"
            );
        }
    }
    s
}

/// TN inner step: outer product of 8 values of row k of A and 8 of row k of B.
pub(super) fn body_tn() -> String {
    let mut s = String::from(
        "        var alo: vec4<f32>; var ahi: vec4<f32>; var blo: vec4<f32>; var bhi: vec4<f32>;\n        load_a8(k, m0, &alo, &ahi);\n        load_b8(k, n0, &blo, &bhi);\n",
    );
    for i in 0..8 {
        let (v, comp) = if i < 4 { ("alo", ["x", "y", "z", "w"][i]) } else { ("ahi", ["x", "y", "z", "w"][i - 4]) };
        s += &format!("        acc{} += {v}.{comp} * blo; acc{} += {v}.{comp} * bhi;\n", 2 * i, 2 * i + 1);
    }
    s
}

/// C (M, N) = α · A (M, K) · Bᵀ + bias + β · C, with B (N, K) of any weight dtype (Q8/Q4
/// quantized along K).
#[allow(clippy::too_many_arguments)]
pub(super) fn nt(
    gpu: &Gpu,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
) {
    nt_rows(gpu, a, b, bias, c, alpha, beta, fused, 8)
}

/// [`nt`] with up to `most` rows of C per invocation ([`super::Variant::Blocked16`]: 16).
#[allow(clippy::too_many_arguments)]
pub(super) fn nt_rows(
    gpu: &Gpu,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
    most: usize,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.rows());
    let a_vec = k % 4 == 0;
    let b_vec = k % 4 == 0 || b.dtype.group_size().is_some();
    let (wx, wy) = lanes(m, n);
    let rows = block_rows(m, most);
    let key = format!("matmul_nt/blocked{wx}x{wy}r{rows}/{}/{a_vec}/{b_vec}{}", b.dtype.name(), lora_key(fused));
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
                ("WG_X", wx.to_string()),
                ("WG_Y", wy.to_string()),
                ("ROWS", rows.to_string()),
                ("ACC_DECL", acc_decl(rows)),
                ("LOOP", loop_nt(b.dtype, rows, &own_a_rows(rows))),
                ("LORA_BINDINGS", if fused.is_some() { lora::NT_BINDINGS.into() } else { String::new() }),
                ("LORA", if fused.is_some() { lora::nt_epilogue(rows, None) } else { String::new() }),
                ("STORE", store_rows(rows)),
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
        ..Params::default()
    }
    .with_lora(fused);
    let bias = bias.unwrap_or(gpu.dummy());
    let w = grid(m, n, wx, wy, rows);
    lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &[a, b, bias, c], fused, w, (m, n, k));
}

/// C (M, N) = α · A (M, K) · B (K, N) + β · C, with B of any weight dtype (Q8/Q4 quantized
/// along N, i.e. a (K, N) matrix quantized by its own rows).
pub(super) fn nn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32, fused: Option<Fused>) {
    nn_rows(gpu, a, b, c, alpha, beta, fused, 8)
}

/// [`nn`] with up to `most` rows of C per invocation ([`super::Variant::Blocked16`]: 16).
#[allow(clippy::too_many_arguments)]
pub(super) fn nn_rows(
    gpu: &Gpu,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
    most: usize,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    let a_vec = k % 4 == 0;
    let b_vec = match b.dtype {
        DType::F32 => n % 4 == 0,
        DType::BF16 | DType::F16 => n % 8 == 0,
        DType::Q8 | DType::Q4 => true, // rows padded to whole groups
    };
    let (wx, wy) = lanes(m, n);
    let rows = block_rows(m, most);
    let key = format!("matmul_nn/blocked{wx}x{wy}r{rows}/{}/{a_vec}/{b_vec}{}", b.dtype.name(), lora_key(fused));
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
                ("WG_X", wx.to_string()),
                ("WG_Y", wy.to_string()),
                ("ROWS", rows.to_string()),
                ("ACC_DECL", acc_decl(rows)),
                ("BODY", body_nn(rows, &own_a_rows(rows))),
                ("LORA_BINDINGS", if fused.is_some() { lora::NN_BINDINGS.into() } else { String::new() }),
                ("LORA", if fused.is_some() { lora::nn_epilogue(rows, None) } else { String::new() }),
                ("STORE", store_rows(rows)),
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
        ..Params::default()
    }
    .with_lora(fused);
    let w = grid(m, n, wx, wy, rows);
    lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &[a, b, c], fused, w, (m, n, k));
}

/// C (M, N) = α · A (K, M)ᵀ · B (K, N) + β · C, all f32.
pub(super) fn tn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32) {
    let (k, m, n) = (a.rows(), a.cols(), b.cols());
    let a_vec = m % 4 == 0;
    let b_vec = n % 4 == 0;
    let (wx, wy) = lanes(m, n);
    let key = format!("matmul_tn/blocked{wx}x{wy}/{a_vec}/{b_vec}");
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
                ("WG_X", wx.to_string()),
                ("WG_Y", wy.to_string()),
                ("ACC_DECL", acc_decl(8)),
                ("BODY", body_tn()),
                ("STORE", store_rows(8)),
            ],
        )
    });
    let p = Params { m: m as u32, n: n as u32, k: k as u32, alpha, beta, ..Params::default() };
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &[a, b, c], grid(m, n, wx, wy, 8), flops(m, n, k));
}

/// The part of a pipeline key that says whether a LoRA term is fused in.
pub(super) fn lora_key(fused: Option<Fused>) -> &'static str {
    if fused.is_some() {
        "/lora"
    } else {
        ""
    }
}

/// The workgroup's invocations along N and M: 8 × 8, or all along the one dimension that has more
/// than 8 (one 8-wide block) outputs — the thin LoRA products (N or M = r ≤ 8) would otherwise
/// leave 7 of every 8 invocations without work. Thin products along M (h = x·Aᵀ, g = dy·B: N = r)
/// take workgroups of 8, one SIMD vector of a CPU adapter: a (256, 8) product is 32 invocations,
/// which as one workgroup of 64 ran on one of lavapipe's threads while the other idled (4
/// workgroups of 8: 1.6–2× faster; 16, 32 or 64 no faster than 64). A few rows of A (decoding) with
/// a modest N take workgroups of 8 to 64 invocations along N, so that there are at least 16 of
/// them: one token's q_proj (N = 576) is 72 invocations, which as 64 + 8 would keep one core of a
/// CPU adapter busy while the other idles, and one SM of a GPU out of a hundred. Otherwise 8 × 8,
/// or fewer along M where that computes fewer rows past M (an MLP chunk).
pub(super) fn lanes(m: usize, n: usize) -> (usize, usize) {
    match (m <= 8, n <= 8) {
        (false, true) => (1, 8),
        (true, false) => ((n.div_ceil(8) / 16).clamp(8, 64).next_power_of_two(), 1),
        (true, true) => (8, 8),
        (false, false) => {
            let wy = super::arrange(m, n, 8, 8, 64, 8);
            (64 / wy, wy)
        }
    }
}

/// Rows of C per invocation: `most` (8; 16 for [`super::Variant::Blocked16`]), or the fewest
/// power of two that covers M when M is smaller (decoding a token or a few: every row an
/// invocation computes is a real one).
fn block_rows(m: usize, most: usize) -> usize {
    m.clamp(1, most).next_power_of_two()
}

/// Workgroups of `wx` × `wy` invocations, each a `rows`×8 block of C.
pub(super) fn grid(m: usize, n: usize, wx: usize, wy: usize, rows: usize) -> (u32, u32, u32) {
    (n.div_ceil(8 * wx) as u32, m.div_ceil(rows * wy) as u32, 1)
}

/// The WGSL of a batched thin `nt` (h_j = x·A_jᵀ for `count` pairs, f32): x at binding 1, the
/// A_j after it, then the h_j; `head` opens `main` and sets j (the pair), m0 and n0, and each
/// pair's branch is [`nt`]'s own loop and store for `rows` rows, with its own A_j and h_j (so
/// each h_j equals its own product's bit for bit).
fn many_source(count: usize, vec: bool, rows: usize, head: &str) -> String {
    let (la, ae) = load4_f32("load_a4", "a", "p.M", "p.K", "p.K", vec);
    let mut s = format!(
        "// h_j (M, N) = x (M, K) · A_jᵀ for each j: the register-blocked loop, A_j and h_j by workgroup.\n{}@group(0) @binding(0) var<uniform> p: Params;\n",
        super::gemv::PARAMS
    );
    s += &format!("@group(0) @binding(1) var<storage, read> a: array<{ae}>;   // x: (M, K)\n{la}");
    let mut branches = String::new();
    for j in 0..count {
        let (lb, be) = load4_f32(&format!("load_b4_{j}"), &format!("b{j}"), "p.N", "p.K", "p.ldb", vec);
        s += &format!("@group(0) @binding({}) var<storage, read> b{j}: array<{be}>;   // A_{j}: (N, K)\n", 2 + j);
        s += &format!(
            "@group(0) @binding({}) var<storage, read_write> c{j}: array<f32>;   // h_{j}: (M, N)\n",
            2 + count + j
        );
        let body = loop_nt(DType::F32, rows, &own_a_rows(rows)) + &store_rows(rows);
        s += &lb;
        s += &store_row_fn(&format!("store_row_{j}"), &format!("c{j}"), "p.M", "p.N", false);
        let rename =
            |t: &str| t.replace("load_b4", &format!("load_b4_{j}")).replace("store_row", &format!("store_row_{j}"));
        branches += &format!("    if (j == {j}u) {{\n{}    }}\n", rename(&body));
    }
    s + head + &acc_decl(rows) + &branches + "}\n"
}

/// Dispatch a batched thin `nt` ([`many_source`]) over `groups` workgroups.
fn many_dispatch(
    gpu: &Gpu,
    key: &str,
    source: impl FnOnce() -> String,
    x: &Tensor,
    pairs: &[(&Tensor, &Tensor)],
    groups: (u32, u32, u32),
) {
    let (m, k, n) = (x.rows(), x.cols(), pairs[0].0.rows());
    let pipeline = gpu.pipeline(key, source);
    let p = Params { m: m as u32, n: n as u32, k: k as u32, ldb: k as u32, alpha: 1.0, ..Params::default() };
    let mut bindings: Vec<&Tensor> = vec![x];
    bindings.extend(pairs.iter().map(|(a, _)| *a));
    bindings.extend(pairs.iter().map(|(_, h)| *h));
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &bindings, groups, flops(m, n * pairs.len(), k));
}

/// h_j (1, N) = x (1, K) · A_jᵀ for every (A_j, h_j) of `pairs` (up to [`super::gemv::MANY`],
/// A_j f32 of one shape): the LoRA down-products of the projections that read one input (q, k,
/// v; gate, up) in one dispatch, as decoding runs them. A workgroup of one invocation per
/// 8-block of one h_j, running [`nt`]'s own loop for one row (so each h_j equals its own
/// product's bit for bit); one workgroup per block, so a CPU adapter spreads them over its
/// threads. Decoding's h products are small: their dispatches, not their arithmetic, cost
/// (210 a token for SmolLM2 with LoRA on all seven projections).
pub(super) fn nt_many(gpu: &Gpu, x: &Tensor, pairs: &[(&Tensor, &Tensor)]) {
    let (k, n, count) = (x.cols(), pairs[0].0.rows(), pairs.len());
    let vec = k % 4 == 0;
    let head = "@compute @workgroup_size(1)\nfn main(@builtin(workgroup_id) wid: vec3<u32>) {\n    let blocks = (p.N + 7u) / 8u;\n    let j = wid.x / blocks;\n    let n0 = (wid.x % blocks) * 8u;\n    let m0 = 0u;\n";
    let key = format!("matmul_nt/blocked_many/{count}/{vec}");
    many_dispatch(gpu, &key, || many_source(count, vec, 1, head), x, pairs, ((count * n.div_ceil(8)) as u32, 1, 1));
}

/// h_j (M, N) = x (M, K) · A_jᵀ for every (A_j, h_j) of `pairs` (up to [`super::gemv::MANY`],
/// A_j f32 of one shape, N ≤ 8: LoRA's rank), M more than a few rows: the LoRA down-products of
/// the projections that read one input (q, k, v; gate, up) in one dispatch, as a training
/// step's forward runs them. Each h_j is [`nt`]'s thin product bit for bit: the same
/// workgroups of 8 invocations along M, the same 8-row blocks and loop, with its own A_j and h_j
/// chosen by the workgroup.
pub(super) fn nt_many_rows(gpu: &Gpu, x: &Tensor, pairs: &[(&Tensor, &Tensor)]) {
    let (m, k, n, count) = (x.rows(), x.cols(), pairs[0].0.rows(), pairs.len());
    debug_assert!(n <= 8 && m > 8, "nt_many_rows: {m}×{n}");
    let vec = k % 4 == 0;
    let (wx, wy) = lanes(m, n);
    let rows = block_rows(m, 8);
    let head = format!(
        "@compute @workgroup_size({wx} * {wy})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {{\n    let blocks = (p.N + {bw}u - 1u) / {bw}u;\n    let j = wid.x / blocks;\n    let gid = vec2<u32>((wid.x % blocks) * {wx}u + li % {wx}u, wid.y * {wy}u + li / {wx}u);\n    let m0 = gid.y * {rows}u;\n    let n0 = gid.x * 8u;\n    if (m0 >= p.M || n0 >= p.N) {{ return; }}\n",
        bw = 8 * wx
    );
    let key = format!("matmul_nt/blocked_many_rows{wx}x{wy}r{rows}/{count}/{vec}");
    let (gx, gy, _) = grid(m, n, wx, wy, rows);
    many_dispatch(gpu, &key, || many_source(count, vec, rows, &head), x, pairs, (gx * count as u32, gy, 1));
}
