//! One row of A (decoding a token): y (1, N) = α · x (1, K) · Wᵀ + bias + β · y, W (N, K) of
//! any weight dtype, with the fused LoRA term where given. The register-blocked kernel gives
//! each invocation 8 outputs and the whole of K, so its lanes read 8 rows of W that lie K
//! apart; here a workgroup is one subgroup that takes 8 rows of W and splits K among its
//! lanes (lane l reads values 8l..8l+8 of each row, then 8·SG on), so a subgroup's loads are
//! one contiguous run of each row, and the 8 sums are added across the subgroup with
//! `subgroupAdd` (on a CPU adapter: within one vector register). A workgroup takes `rb` such
//! blocks in turn. Needs subgroups of one known size; chosen per device, `rb` included, by
//! [`choose_gemv`](super::choose_gemv).

use super::blocked::load8;
use super::lora::{self, Fused};
use super::Params;
use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::unpack_fns;

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

/// The row counts [`nt_rows`] is built for.
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
/// takes the product, else with the register-blocked kernel.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    gpu: &Gpu,
    g: Gemv,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
) {
    match g {
        Gemv::Subgroup { sg, rb } => nt(gpu, a, b, bias, c, alpha, beta, fused, sg, rb),
        Gemv::Rows(r) if rows_take(b.dtype, a.cols()) => nt_rows(gpu, a, b, bias, c, alpha, beta, fused, r),
        Gemv::Rows(_) => super::blocked::nt(gpu, a, b, bias, c, alpha, beta, fused),
    }
}

/// The WGSL of [`Params`], as the kernels here bind it.
const PARAMS: &str = "struct Params {
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

/// The WGSL that stores row n0 + j of y from its sum `v[j]`: the fused LoRA term (the same
/// sum, in the same order, as `lora::nt_epilogue` adds into a register-blocked kernel's
/// accumulators), α, the bias and β · y.
fn store(fused: bool) -> String {
    let lora_term = if fused {
        "            for (var t = 0u; t < p.rank; t += 4u) { acc += dot(p.ls * lora_h4(0u, t), lora_b4(n, t)); }\n"
    } else {
        ""
    };
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
    let ldb = b.dtype.row_words(k);
    let p = Params {
        m: 1,
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
    let w = crate::gpu::groups(n.div_ceil(8 * rb) as u32);
    lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &[a, b, bias, c], fused, w, (1, n, k));
}

/// Whether [`nt_rows`] takes a product with W of `dtype` and K columns: 16-bit rows of a
/// multiple of 8 values (whole `vec4<u32>` runs), quantized rows of whole groups (so x is
/// read only within K).
fn rows_take(dtype: DType, k: usize) -> bool {
    match dtype {
        DType::BF16 | DType::F16 => k % 8 == 0,
        DType::Q8 | DType::Q4 => k % dtype.group_size().unwrap_or(1) == 0,
        DType::F32 => false,
    }
}

/// The K loop of [`source_rows`] for `rows` rows (from n0) of each matrix of `mats`, (array,
/// word array, tag): its sums end in `acc{tag}{j}`. 16-bit W: a `vec4<u32>` load per row and
/// run of 8 values. Quantized W, group by group: a group's 8 code words are two `vec4<u32>`
/// loads per row and its (scale, offset) one word of the word array (the same buffer bound as
/// words), the group's x values loaded once for all rows. Row offsets are computed before the
/// loop (a compiler without loop-invariant code motion, as a browser's CPU adapter may have,
/// would recompute them every step).
fn rows_loop(dtype: DType, rows: usize, mats: &[(&str, &str, &str)]) -> String {
    let mut s = String::from("    let run = p.ldb / 4u;\n    let groups = p.ldb / 8u;\n");
    for &(_, _, t) in mats {
        for j in 0..rows {
            s += &format!(
                "    let r{t}{j} = min(n0 + {j}u, p.N - 1u);\n    let o{t}{j} = r{t}{j} * run;\n    var acc{t}{j} = 0.0;\n"
            );
        }
    }
    let Some(gs) = dtype.group_size() else {
        s += "    for (var i = 0u; i < run; i++) {\n        let xlo = a[2u * i];\n        let xhi = a[2u * i + 1u];\n";
        for &(arr, _, t) in mats {
            for j in 0..rows {
                s += &format!(
                    "        let w{t}{j} = {arr}[o{t}{j} + i];\n        acc{t}{j} += dot(xlo, vec4<f32>(unpack2(w{t}{j}.x), unpack2(w{t}{j}.y))) + dot(xhi, vec4<f32>(unpack2(w{t}{j}.z), unpack2(w{t}{j}.w)));\n"
                );
            }
        }
        s += "    }\n";
        return s;
    };
    // vec4s of x per group (Q4: 64 values, Q8: 32).
    let xv = gs / 4;
    s += "    for (var g = 0u; g < groups; g++) {\n";
    for i in 0..xv {
        s += &format!("        let x{i} = a[g * {xv}u + {i}u];\n");
    }
    for &(arr, qarr, t) in mats {
        for j in 0..rows {
            let v = format!("{t}{j}");
            s += &format!(
                "        let s{v} = qparams({qarr}[p.qoff + r{v} * groups + g]);\n        let ua{v} = {arr}[o{v} + 2u * g];\n        let ub{v} = {arr}[o{v} + 2u * g + 1u];\n"
            );
            let mut terms = Vec::new();
            for (w, c) in ["a", "b"].iter().flat_map(|h| ["x", "y", "z", "w"].map(move |c| (h, c))).enumerate() {
                let word = format!("u{}{v}.{}", c.0, c.1);
                if dtype == DType::Q4 {
                    terms.push(format!("dot(x{}, s{v}.x * q4x4({word}) + s{v}.y)", 2 * w));
                    terms.push(format!("dot(x{}, s{v}.x * q4x4({word} >> 16u) + s{v}.y)", 2 * w + 1));
                } else {
                    terms.push(format!("dot(x{w}, s{v}.x * q8x4({word}) + s{v}.y)"));
                }
            }
            s += &format!("        acc{v} += {};\n", terms.join(" + "));
        }
    }
    s += "    }\n";
    s
}

/// The header of a rows kernel: Params, its bindings, the decoders, the entry point up to n0.
fn rows_header(dtype: DType, comment: &str, bindings: &str, rows: usize, wg: usize) -> String {
    format!(
        "// {comment}: an invocation per {rows} rows of W, K in runs of 4 words.
{PARAMS}@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<vec4<f32>>;  // x: (1, K) f32
{bindings}
{}
@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
    let n0 = ((wid.x + wid.y * nwg.x) * {wg}u + li) * {rows}u;
    if (n0 >= p.N) {{ return; }}
",
        unpack_fns(dtype),
    )
}

fn source_rows(dtype: DType, fused: bool, rows: usize, wg: usize) -> String {
    // Quantized weights' (scale, offset) words: W's buffer again, as words, after the fused
    // term's bindings.
    let bq = if dtype.group_size().is_some() {
        format!("@group(0) @binding({}) var<storage, read> bq: array<u32>;\n", if fused { 7 } else { 5 })
    } else {
        String::new()
    };
    let bindings = format!(
        "@group(0) @binding(2) var<storage, read> b: array<vec4<u32>>;  // W: (N, K) packed 16-bit or Q8/Q4 codes, 4 words a run
@group(0) @binding(3) var<storage, read> bias: array<f32>;     // bias: (N), read only if has_bias
@group(0) @binding(4) var<storage, read_write> c: array<f32>;  // y: (1, N)
{}{bq}",
        if fused { lora::NT_BINDINGS } else { "" }
    );
    let mut s = rows_header(dtype, "y (1, N) = alpha · x (1, K) · Wᵀ + bias + beta · y", &bindings, rows, wg);
    s += &rows_loop(dtype, rows, &[("b", "bq", "")]);
    s += &format!("    var v: array<f32, {rows}>;\n");
    for j in 0..rows {
        s += &format!("    v[{j}] = acc{j};\n");
    }
    s += &format!("    for (var j = 0u; j < {rows}u; j++) {{\n{}    }}\n}}\n", store(fused));
    s
}

/// Bindings of the gate-and-up kernel: x, Wg, Wu, m, then (fused) the two LoRA terms, then
/// (quantized) Wg and Wu again as words.
fn source_swiglu(dtype: DType, fused: bool, rows: usize, wg: usize) -> String {
    let mut bindings = String::from(
        "@group(0) @binding(2) var<storage, read> b: array<vec4<u32>>;   // W_gate: (N, K) packed 16-bit or Q8/Q4 codes
@group(0) @binding(3) var<storage, read> bu: array<vec4<u32>>;  // W_up: (N, K), the same
@group(0) @binding(4) var<storage, read_write> c: array<f32>;   // m: (1, N)
",
    );
    let mut next = 5;
    if fused {
        bindings += lora::NT_BINDINGS;
        bindings += &lora::nt_bindings_second(7, "u");
        next = 9;
    }
    if dtype.group_size().is_some() {
        bindings += &format!(
            "@group(0) @binding({next}) var<storage, read> bq: array<u32>;\n@group(0) @binding({}) var<storage, read> bqu: array<u32>;\n",
            next + 1
        );
    }
    let mut s =
        rows_header(dtype, "m (1, N) = silu(x · W_gateᵀ) · (x · W_upᵀ), each with its LoRA term", &bindings, rows, wg);
    s += &rows_loop(dtype, rows, &[("b", "bq", ""), ("bu", "bqu", "u")]);
    s += &format!("    var v: array<f32, {rows}>;\n    var vu: array<f32, {rows}>;\n");
    for j in 0..rows {
        s += &format!("    v[{j}] = acc{j};\n    vu[{j}] = accu{j};\n");
    }
    // As the one-row products store gate and up (α = 1, no bias, β = 0), then as swiglu_forward.
    let lora = |h: &str, b: &str| {
        if fused {
            format!(
                "            for (var t = 0u; t < p.rank; t += 4u) {{ acc += dot(p.ls * {h}(0u, t), {b}(n, t)); }}\n"
            )
        } else {
            String::new()
        }
    };
    s += &format!(
        "    for (var j = 0u; j < {rows}u; j++) {{
        let n = n0 + j;
        if (n < p.N) {{
            var acc = v[j];
{}            let g = p.alpha * acc;
            acc = vu[j];
{}            let u = p.alpha * acc;
            let s = 1.0 / (1.0 + exp(-g));
            c[n] = g * s * u;
        }}
    }}
}}
",
        lora("lora_h4", "lora_b4"),
        lora("lora_h4u", "lora_b4u")
    );
    s
}

/// y (1, N) = α · x (1, K) · Wᵀ + bias + β · y (+ the fused LoRA term), each invocation `rows`
/// rows of W through the whole of K in runs of 8 values: one `vec4<u32>` load per row and run
/// where the register-blocked kernel makes two `vec2<u32>` loads and recomputes each row's
/// offset per run of 4 (lavapipe, SmolLM2's lm_head 8192×576 bf16 streamed: 10.6 against
/// 5.9 GB/s). No subgroups, so every adapter runs it. W 16-bit with K a multiple of 8, or
/// Q8/Q4 with K a multiple of its group (its groups one at a time).
#[allow(clippy::too_many_arguments)]
fn nt_rows(
    gpu: &Gpu,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
    rows: usize,
) {
    let (k, n) = (a.cols(), b.rows());
    debug_assert!(rows_take(b.dtype, k));
    let invocations = n.div_ceil(rows);
    let wg = (invocations / 16).clamp(8, 64).next_power_of_two();
    let key = format!("matmul_nt/gemv_rows/r{rows}/wg{wg}/{}{}", b.dtype.name(), super::blocked::lora_key(fused));
    let pipeline = gpu.pipeline(&key, || source_rows(b.dtype, fused.is_some(), rows, wg));
    let ldb = b.dtype.row_words(k);
    let p = Params {
        m: 1,
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
    let w = crate::gpu::groups(invocations.div_ceil(wg) as u32);
    let mut bindings = vec![a, b, bias, c];
    if let Some(l) = fused {
        bindings.extend([l.left, l.right]);
    }
    if b.dtype.group_size().is_some() {
        bindings.push(b);
    }
    let flops = super::flops(1, n, k + fused.map_or(0, |l| l.rank()));
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &bindings, w, flops);
}

/// m (1, F) = silu(x · W_gateᵀ + s·h_g·B_gᵀ) · (x · W_upᵀ + s·h_u·B_uᵀ): decoding's MLP
/// up-projections and SwiGLU in one dispatch, each product summed as [`nt_rows`] sums it and
/// SwiGLU as `swiglu_forward` computes it, so m equals the three dispatches' bit for bit.
/// Each invocation takes `rows` rows of both weights. The caller checks [`swiglu_takes`].
pub(super) fn swiglu_rows(
    gpu: &Gpu,
    x: &Tensor,
    (wg, fg): (&Tensor, Option<Fused>),
    (wu, fu): (&Tensor, Option<Fused>),
    m: &Tensor,
    rows: usize,
) {
    let (k, n) = (x.cols(), wg.rows());
    let invocations = n.div_ceil(rows);
    let wgs = (invocations / 16).clamp(8, 64).next_power_of_two();
    let key = format!("swiglu_gemv_rows/r{rows}/wg{wgs}/{}{}", wg.dtype.name(), super::blocked::lora_key(fg));
    let pipeline = gpu.pipeline(&key, || source_swiglu(wg.dtype, fg.is_some(), rows, wgs));
    let ldb = wg.dtype.row_words(k);
    let p = Params {
        m: 1,
        n: n as u32,
        k: k as u32,
        ldb: ldb as u32,
        alpha: 1.0,
        qoff: (n * ldb) as u32,
        ..Params::default()
    }
    .with_lora(fg);
    let mut bindings = vec![x, wg, wu, m];
    if let (Some(g), Some(u)) = (fg, fu) {
        bindings.extend([g.left, g.right, u.left, u.right]);
    }
    if wg.dtype.group_size().is_some() {
        bindings.extend([wg, wu]);
    }
    let flops = 2 * super::flops(1, n, k + fg.map_or(0, |l| l.rank()));
    let w = crate::gpu::groups(invocations.div_ceil(wgs) as u32);
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &bindings, w, flops);
}

/// Whether [`swiglu_rows`] takes these: x one row, both weights of one shape and dtype that the
/// rows kernel takes, LoRA terms on both or neither (of one rank and scale), and no more
/// storage bindings than the device allows.
pub(super) fn swiglu_takes(
    gpu: &Gpu,
    x: &Tensor,
    (wg, fg): (&Tensor, Option<Fused>),
    (wu, fu): (&Tensor, Option<Fused>),
) -> bool {
    let lora_ok = match (fg, fu) {
        (None, None) => true,
        (Some(g), Some(u)) => g.rank() == u.rank() && g.scale.to_bits() == u.scale.to_bits(),
        _ => false,
    };
    let storage = 4 + if fg.is_some() { 4 } else { 0 } + if wg.dtype.group_size().is_some() { 2 } else { 0 };
    takes(x.rows())
        && lora_ok
        && wg.dtype == wu.dtype
        && wg.shape == wu.shape
        && rows_take(wg.dtype, x.cols())
        && storage <= gpu.info.max_storage_buffers_per_shader_stage as usize
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
