//! The rows one-row kernels: an invocation per 8 or 16 rows of W through the whole of K, one
//! `vec4<u32>` load per row and run of 8 values (16-bit) or two per group (Q8/Q4, the group's
//! scale and offset through a word-typed binding of the same buffer), where the register-blocked
//! kernel makes two `vec2<u32>` loads per 8 values. No subgroups: every adapter runs them. Also
//! the MLP's gate and up products with SwiGLU in one dispatch ([`swiglu_rows`]).

use super::super::lora::{self, Fused};
use super::{lora_term, params, store, takes, PARAMS};
use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::unpack_fns;

/// (invocations, workgroup size) for `rows` rows of N per invocation: workgroups of 8 to 64
/// invocations, at least 16 of them where N allows (as the register-blocked kernel's `lanes`).
fn workgroups(n: usize, rows: usize) -> (usize, usize) {
    let invocations = n.div_ceil(rows);
    (invocations, (invocations / 16).clamp(8, 64).next_power_of_two())
}

/// Whether [`nt_rows`] takes a product with W of `dtype` and K columns: 16-bit rows of a
/// multiple of 8 values (whole `vec4<u32>` runs), quantized rows of whole groups (so x is
/// read only within K).
pub(super) fn rows_take(dtype: DType, k: usize) -> bool {
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
    let lora = |h: &str, b: &str| if fused { lora_term(h, b) } else { String::new() };
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
pub(super) fn nt_rows(
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
    let (invocations, wg) = workgroups(n, rows);
    let key =
        format!("matmul_nt/gemv_rows/r{rows}/wg{wg}/{}{}", b.dtype.name(), super::super::blocked::lora_key(fused));
    let pipeline = gpu.pipeline(&key, || source_rows(b.dtype, fused.is_some(), rows, wg));
    let p = params(n, k, b.dtype, alpha, beta, bias.is_some(), fused);
    let bias = bias.unwrap_or(gpu.dummy());
    let w = crate::gpu::groups(invocations.div_ceil(wg) as u32);
    let mut bindings = vec![a, b, bias, c];
    if let Some(l) = fused {
        bindings.extend([l.left, l.right]);
    }
    if b.dtype.group_size().is_some() {
        bindings.push(b);
    }
    let flops = super::super::flops(1, n, k + fused.map_or(0, |l| l.rank()));
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &bindings, w, flops);
}

/// m (1, F) = silu(x · W_gateᵀ + s·h_g·B_gᵀ) · (x · W_upᵀ + s·h_u·B_uᵀ): decoding's MLP
/// up-projections and SwiGLU in one dispatch, each product summed as [`nt_rows`] sums it and
/// SwiGLU as `swiglu_forward` computes it, so m equals the three dispatches' bit for bit.
/// Each invocation takes `rows` rows of both weights. The caller checks [`swiglu_takes`].
pub(in crate::kernels::matmul) fn swiglu_rows(
    gpu: &Gpu,
    x: &Tensor,
    (wg, fg): (&Tensor, Option<Fused>),
    (wu, fu): (&Tensor, Option<Fused>),
    m: &Tensor,
    rows: usize,
) {
    let (k, n) = (x.cols(), wg.rows());
    let (invocations, wgs) = workgroups(n, rows);
    let key = format!("swiglu_gemv_rows/r{rows}/wg{wgs}/{}{}", wg.dtype.name(), super::super::blocked::lora_key(fg));
    let pipeline = gpu.pipeline(&key, || source_swiglu(wg.dtype, fg.is_some(), rows, wgs));
    let p = params(n, k, wg.dtype, 1.0, 0.0, false, fg);
    let mut bindings = vec![x, wg, wu, m];
    if let (Some(g), Some(u)) = (fg, fu) {
        bindings.extend([g.left, g.right, u.left, u.right]);
    }
    if wg.dtype.group_size().is_some() {
        bindings.extend([wg, wu]);
    }
    let flops = 2 * super::super::flops(1, n, k + fg.map_or(0, |l| l.rank()));
    let w = crate::gpu::groups(invocations.div_ceil(wgs) as u32);
    gpu.dispatch_flops(&pipeline, bytemuck::bytes_of(&p), &bindings, w, flops);
}

/// Whether [`swiglu_rows`] takes these: x one row, both weights of one shape and dtype that the
/// rows kernel takes, LoRA terms on both or neither (of one rank and scale), and no more
/// storage bindings than the device allows.
pub(in crate::kernels::matmul) fn swiglu_takes(
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
