//! One row of A (decoding a token): y (1, N) = α · x (1, K) · Wᵀ + bias + β · y, W (N, K) of
//! any weight dtype, with the fused LoRA term where given, by one of the kernels of [`Gemv`]
//! ([`run`]): the rows kernels ([`rows`]) or the subgroup kernel here. The register-blocked
//! kernel gives each invocation 8 outputs and the whole of K, so its lanes read 8 rows of W
//! that lie K apart; here a workgroup is one subgroup that takes 8 rows of W and splits K among its
//! lanes (lane l reads values 8l..8l+8 of each row, then 8·SG on), so a subgroup's loads are
//! one contiguous run of each row, and the 8 sums are added across the subgroup with
//! `subgroupAdd` (on a CPU adapter: within one vector register). A workgroup takes `rb` such
//! blocks in turn. Needs subgroups of one known size; chosen per device, `rb` included, by
//! [`choose_gemv`](super::choose_gemv).

mod rows;

use super::blocked::load8;
use super::lora::{self, Fused};
use super::Params;
use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::unpack_fns;
use rows::{nt_rows, rows_take};
pub(super) use rows::{swiglu_rows, swiglu_takes};

/// Whether the kernel takes a product of these rows.
pub(super) fn takes(m: usize) -> bool {
    m == 1
}

/// A one-row kernel ([`super::choose_gemv`] picks one per device; the register-blocked kernel
/// is the reference, and the fallback where a kernel does not take the product).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Gemv {
    /// [`nt`]: a subgroup of `sg` lanes per 8 rows of W, `rb` such blocks per workgroup.
    Subgroup { sg: usize, rb: usize },
    /// [`nt_rows`]: an invocation per this many rows of W (no subgroups).
    Rows(usize),
}

/// The row counts [`nt_rows`](rows) is built for.
pub(super) const ROWS: [usize; 2] = [8, 16];

impl Gemv {
    /// "subgroup/sg{SG}/rb{RB}" or "rows/r{R}".
    pub(super) fn name(self) -> String {
        match self {
            Gemv::Subgroup { sg, rb } => format!("subgroup/sg{sg}/rb{rb}"),
            Gemv::Rows(r) => format!("rows/r{r}"),
        }
    }

    pub(super) fn parse(s: &str) -> Option<Gemv> {
        if let Some(r) = s.strip_prefix("rows/r") {
            let r = r.parse().ok()?;
            return ROWS.contains(&r).then_some(Gemv::Rows(r));
        }
        let (sg, rb) = s.strip_prefix("subgroup/sg")?.split_once("/rb")?;
        let (sg, rb) = (sg.parse().ok()?, rb.parse().ok()?);
        (sg > 0 && rb > 0).then_some(Gemv::Subgroup { sg, rb })
    }

    /// Whether this kernel computes one-row products with W of `dtype` and K columns itself
    /// (where it does not, [`run`] falls back to the register-blocked kernel).
    pub(super) fn takes(self, dtype: DType, k: usize) -> bool {
        match self {
            Gemv::Subgroup { .. } => true,
            Gemv::Rows(_) => rows_take(dtype, k),
        }
    }
}

/// y (1, N) = α · x (1, K) · Wᵀ + bias + β · y (+ the fused LoRA term) with kernel `g` where it
/// takes the product, else (and for None) with the register-blocked kernel.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    gpu: &Gpu,
    g: Option<Gemv>,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
) {
    match g {
        Some(Gemv::Subgroup { sg, rb }) => nt(gpu, a, b, bias, c, alpha, beta, fused, sg, rb),
        Some(Gemv::Rows(r)) if rows_take(b.dtype, a.cols()) => nt_rows(gpu, a, b, bias, c, alpha, beta, fused, r),
        _ => super::blocked::nt(gpu, a, b, bias, c, alpha, beta, fused),
    }
}

/// The WGSL of [`Params`], as the kernels here bind it.
pub(super) const PARAMS: &str = "struct Params {
    M: u32, N: u32, K: u32,
    ldb: u32,      // W row stride in storage words
    alpha: f32, beta: f32,
    has_bias: u32,
    qoff: u32,     // quantized W: word offset of the (scale, offset) words, N · ldb
    rank: u32,     // fused LoRA: r
    ls: f32,       // fused LoRA: s / alpha
    _q0: u32, _q1: u32,
}
";

/// The K loop over a subgroup's 8 rows from n0: each lane dots its runs of 8 columns of x with
/// the 8 rows (`load_w8(ARGS row, k, ..)`, `args` the arguments before the row), the subgroup
/// sums them: acc0, acc1 end holding rows n0..n0+8 on every lane.
fn k_loop(sg: usize, args: &str) -> String {
    let step = 8 * sg;
    let mut s = format!(
        "    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    // The same trip count on every lane (subgroupAdd below wants uniform control flow).
    let steps = (p.K + {step}u - 1u) / {step}u;
    for (var i = 0u; i < steps; i++) {{
        let k = i * {step}u + lane * 8u;
        if (k < p.K) {{
            var xlo: vec4<f32>; var xhi: vec4<f32>;
            load_x8(0u, k, &xlo, &xhi);
"
    );
    for j in 0..8 {
        s += &format!(
            "            var w{j}lo: vec4<f32>; var w{j}hi: vec4<f32>;\n            load_w8({args}min(n0 + {j}u, p.N - 1u), k, &w{j}lo, &w{j}hi);\n"
        );
    }
    s += "            acc0 += vec4<f32>(dot(xlo, w0lo) + dot(xhi, w0hi), dot(xlo, w1lo) + dot(xhi, w1hi), dot(xlo, w2lo) + dot(xhi, w2hi), dot(xlo, w3lo) + dot(xhi, w3hi));\n";
    s += "            acc1 += vec4<f32>(dot(xlo, w4lo) + dot(xhi, w4hi), dot(xlo, w5lo) + dot(xhi, w5hi), dot(xlo, w6lo) + dot(xhi, w6hi), dot(xlo, w7lo) + dot(xhi, w7hi));\n";
    s += "        }\n    }\n    acc0 = subgroupAdd(acc0);\n    acc1 = subgroupAdd(acc1);\n";
    s
}

fn source(dtype: DType, k_vec: bool, w_vec: bool, fused: bool, sg: usize, rb: usize) -> String {
    let (lx, ae) = load8("load_x8", "a", "p.K", "p.K", DType::F32, k_vec);
    let (lw, be) = load8("load_w8", "b", "p.K", "p.ldb", dtype, w_vec);
    let mut s = format!(
        "// y (1, N) = alpha · x (1, K) · Wᵀ + bias + beta · y: a subgroup per 8 rows of W, K split over its lanes.
{PARAMS}@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{ae}>;      // x: (1, K) f32
@group(0) @binding(2) var<storage, read> b: array<{be}>;      // W: (N, K) f32, packed 16-bit, or Q8/Q4 words
@group(0) @binding(3) var<storage, read> bias: array<f32>;   // bias: (N), read only if has_bias
@group(0) @binding(4) var<storage, read_write> c: array<f32>; // y: (1, N)
{}
{}
{lx}
{lw}
@compute @workgroup_size({sg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {{
    for (var rb = 0u; rb < {rb}u; rb++) {{
    let n0 = ((wid.x + wid.y * nwg.x) * {rb}u + rb) * 8u;
    if (n0 >= p.N) {{ break; }}
    let m0 = 0u;
",
        if fused { lora::NT_BINDINGS } else { "" },
        unpack_fns(dtype),
        rb = rb,
    );
    s += &k_loop(sg, "");
    // The fused term of row n is added by the lane that stores it, not by every lane for all 8
    // rows.
    s += &format!(
        "    let v = array<f32, 8>(acc0.x, acc0.y, acc0.z, acc0.w, acc1.x, acc1.y, acc1.z, acc1.w);
    for (var j = lane; j < 8u; j += {sg}u) {{
{}    }}
    }}
}}
",
        store(fused)
    );
    s
}

/// The WGSL that adds row n's fused LoRA term, ls · h · B[n]ᵀ, to `acc`, its factors read by the
/// loaders `h4` and `b4` (`lora_h4`, `lora_b4`, or a second term's).
fn lora_term(h4: &str, b4: &str) -> String {
    format!("            for (var t = 0u; t < p.rank; t += 4u) {{ acc += dot(p.ls * {h4}(0u, t), {b4}(n, t)); }}\n")
}

/// The WGSL that stores row n0 + j of y from its sum `v[j]`: the fused LoRA term (the same
/// sum, in the same order, as `lora::nt_epilogue` adds into a register-blocked kernel's
/// accumulators), α, the bias and β · y.
fn store(fused: bool) -> String {
    let lora_term = if fused { lora_term("lora_h4", "lora_b4") } else { String::new() };
    format!(
        "        let n = n0 + j;
        if (n < p.N) {{
            var acc = v[j];
{lora_term}            var r = p.alpha * acc;
            if (p.has_bias != 0u) {{ r += bias[n]; }}
            if (p.beta != 0.0) {{ r += p.beta * c[n]; }}
            c[n] = r;
        }}
"
    )
}

/// The [`Params`] of a one-row product y (1, N) over K with W of `dtype`.
fn params(n: usize, k: usize, dtype: DType, alpha: f32, beta: f32, has_bias: bool, fused: Option<Fused>) -> Params {
    let ldb = dtype.row_words(k);
    Params {
        m: 1,
        n: n as u32,
        k: k as u32,
        ldb: ldb as u32,
        alpha,
        beta,
        has_bias: has_bias as u32,
        qoff: (n * ldb) as u32,
        ..Params::default()
    }
    .with_lora(fused)
}

/// y (1, N) = α · x (1, K) · Wᵀ + bias + β · y (+ the fused LoRA term), with subgroups of `sg`
/// lanes, each taking `rb` blocks of 8 rows of W one after the other (fewer, longer workgroups:
/// on a CPU adapter each costs a fixed overhead; a GPU wants many).
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
    sg: usize,
    rb: usize,
) {
    let (k, n) = (a.cols(), b.rows());
    let k_vec = k % 4 == 0;
    // load8's vector forms read whole vec4s of a row: f32 rows of a multiple of 4, 16-bit rows
    // of a multiple of 8 values; quantized rows are padded to whole groups.
    let w_vec = match b.dtype {
        DType::F32 => k % 4 == 0,
        DType::BF16 | DType::F16 => k % 8 == 0,
        DType::Q8 | DType::Q4 => true,
    };
    let key =
        format!("matmul_nt/gemv/sg{sg}/rb{rb}/{}/{k_vec}/{w_vec}{}", b.dtype.name(), super::blocked::lora_key(fused));
    let pipeline = gpu.pipeline(&key, || source(b.dtype, k_vec, w_vec, fused.is_some(), sg, rb));
    let p = params(n, k, b.dtype, alpha, beta, bias.is_some(), fused);
    let bias = bias.unwrap_or(gpu.dummy());
    let w = crate::gpu::groups(n.div_ceil(8 * rb) as u32);
    lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &[a, b, bias, c], fused, w, (1, n, k));
}

/// Most products [`nt_many`] takes in one dispatch (two bindings each, beside x: 7 storage
/// bindings, within WebGPU's default 8 per stage).
pub(super) const MANY: usize = 3;

fn source_many(count: usize, k_vec: bool, sg: usize) -> String {
    let (lx, ae) = load8("load_x8", "a", "p.K", "p.K", DType::F32, k_vec);
    let mut s = format!(
        "// h_j (1, N) = x (1, K) · A_jᵀ for j < {count}, A_j (N, K) f32: a subgroup per 8 rows of one A_j, K split over its lanes.
{PARAMS}@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{ae}>;      // x: (1, K)
{lx}"
    );
    let mut pick = String::new();
    for j in 0..count {
        let (lw, we) = load8(&format!("load_w8_{j}"), &format!("w{j}"), "p.K", "p.K", DType::F32, k_vec);
        s += &format!("@group(0) @binding({}) var<storage, read> w{j}: array<{we}>;   // A_{j}: (N, K)\n", 2 + j);
        s += &format!(
            "@group(0) @binding({}) var<storage, read_write> h{j}: array<f32>;   // h_{j}: (1, N)\n",
            2 + count + j
        );
        s += &lw;
        pick += &format!("    if (j == {j}u) {{ load_w8_{j}(row, c0, lo, hi); }}\n");
    }
    s += &format!(
        "fn load_w8(j: u32, row: u32, c0: u32, lo: ptr<function, vec4<f32>>, hi: ptr<function, vec4<f32>>) {{\n{pick}}}\n"
    );
    s += &format!(
        "@compute @workgroup_size({sg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(subgroup_invocation_id) lane: u32) {{
    let blocks = (p.N + 7u) / 8u;
    let j = wid.x / blocks;
    let n0 = (wid.x % blocks) * 8u;
"
    );
    s += &k_loop(sg, "j, ");
    s += "    let v = array<f32, 8>(acc0.x, acc0.y, acc0.z, acc0.w, acc1.x, acc1.y, acc1.z, acc1.w);\n";
    s += &format!("    for (var r = lane; r < 8u; r += {sg}u) {{\n        let n = n0 + r;\n        if (n < p.N) {{\n");
    for j in 0..count {
        s += &format!("            if (j == {j}u) {{ h{j}[n] = v[r]; }}\n");
    }
    s += "        }\n    }\n}\n";
    s
}

/// h_j (1, N) = x (1, K) · A_jᵀ for every (A_j, h_j) of `pairs` (2 or 3 of them, A_j f32 of
/// one shape): the LoRA down-products of the projections that read one input (q, k, v; gate,
/// up) in one dispatch. Each h_j equals `nt`'s h_j bit for bit: the same blocks, the same
/// order of sums.
pub(super) fn nt_many(gpu: &Gpu, x: &Tensor, pairs: &[(&Tensor, &Tensor)], sg: usize) {
    let (k, n) = (x.cols(), pairs[0].0.rows());
    let k_vec = k % 4 == 0;
    let count = pairs.len();
    let key = format!("matmul_nt/gemv_many/{count}/sg{sg}/{k_vec}");
    let pipeline = gpu.pipeline(&key, || source_many(count, k_vec, sg));
    let p = Params { m: 1, n: n as u32, k: k as u32, ldb: k as u32, alpha: 1.0, ..Params::default() };
    let mut bindings: Vec<&Tensor> = vec![x];
    bindings.extend(pairs.iter().map(|(a, _)| *a));
    bindings.extend(pairs.iter().map(|(_, h)| *h));
    let flops = super::flops(1, n * count, k);
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &bindings, ((count * n.div_ceil(8)) as u32, 1, 1), flops);
}
