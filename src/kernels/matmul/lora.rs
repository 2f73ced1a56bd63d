//! LoRA riding on the frozen product it belongs to: the WGSL that adds s·h·Bᵀ to x·Wᵀ
//! (forward, `nt`) or s·g·A to dy·W (input gradient, `nn`) in the accumulators of the big
//! product, after its K loop and before its store, so the thin (tokens, out) product is
//! never a pass of its own over the output.
//!
//! The term is added as `ls · lora` with ls = s / α into the accumulator that the store scales
//! by α, so the result is α·(x·Wᵀ + (s/α)·h·Bᵀ) + bias, which for the α = 1 the model uses is
//! exactly x·Wᵀ + s·h·Bᵀ + bias, summed in the same order by every variant.

use crate::gpu::{Gpu, Kernel, Tensor};

/// The thin factors of a fused LoRA term: `nt`: h (M, r) and B (N, r); `nn`: g (M, r) and
/// A (r, N); scaled by `scale` (LoRA's s).
#[derive(Clone, Copy)]
pub struct Fused<'a> {
    pub left: &'a Tensor,
    pub right: &'a Tensor,
    pub scale: f32,
}

impl Fused<'_> {
    /// r, the rank.
    pub fn rank(&self) -> usize {
        self.left.cols()
    }
}

/// Dispatch a product (M, N) over K: its `bindings`, then the fused term's two factors when
/// there is one, whose r columns count as that many more terms of the contraction.
#[allow(clippy::too_many_arguments)]
pub(super) fn dispatch(
    gpu: &Gpu,
    kernel: &Kernel,
    params: &[u8],
    bindings: &[&Tensor],
    fused: Option<Fused>,
    workgroups: (u32, u32, u32),
    (m, n, k): (usize, usize, usize),
) {
    match fused {
        Some(l) => {
            let all: Vec<&Tensor> = bindings.iter().copied().chain([l.left, l.right]).collect();
            gpu.dispatch_flops(kernel, params, &all, workgroups, super::flops(m, n, k + l.rank()))
        }
        None => gpu.dispatch_flops(kernel, params, bindings, workgroups, super::flops(m, n, k)),
    }
}

/// Bindings and loaders of `nt`'s fused term: `lh` (M, r) and `lb` (N, r), after C at binding 4.
/// A whole run of 4 is four plain loads (the branch is uniform): the per-element bounds checks
/// and the dynamic index into a vector that the tail needs cost the fused term half its time on
/// lavapipe.
pub(super) const NT_BINDINGS: &str = "@group(0) @binding(5) var<storage, read> lh: array<f32>;   // h: (M, r)
@group(0) @binding(6) var<storage, read> lb: array<f32>;   // LoRA B: (N, r)
fn lora_h4(m: u32, t: u32) -> vec4<f32> {
    let base = min(m, p.M - 1u) * p.rank + t;
    if (t + 4u <= p.rank) { return vec4<f32>(lh[base], lh[base + 1u], lh[base + 2u], lh[base + 3u]); }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) { if (t + j < p.rank) { v[j] = lh[base + j]; } }
    return v;
}
fn lora_b4(n: u32, t: u32) -> vec4<f32> {
    let base = min(n, p.N - 1u) * p.rank + t;
    if (t + 4u <= p.rank) { return vec4<f32>(lb[base], lb[base + 1u], lb[base + 2u], lb[base + 3u]); }
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) { if (t + j < p.rank) { v[j] = lb[base + j]; } }
    return v;
}
";

/// [`NT_BINDINGS`] for a second fused term in one kernel: its h and B at bindings `first` and
/// `first + 1`, read by `lora_h4{tag}` and `lora_b4{tag}`.
pub(super) fn nt_bindings_second(first: u32, tag: &str) -> String {
    NT_BINDINGS
        .replace("binding(5) var<storage, read> lh:", &format!("binding({first}) var<storage, read> lh{tag}:"))
        .replace("binding(6) var<storage, read> lb:", &format!("binding({}) var<storage, read> lb{tag}:", first + 1))
        .replace("lh[", &format!("lh{tag}["))
        .replace("lb[", &format!("lb{tag}["))
        .replace("fn lora_h4(", &format!("fn lora_h4{tag}("))
        .replace("fn lora_b4(", &format!("fn lora_b4{tag}("))
}

/// `nt`'s fused term for a `rows`×8 block at (m0, n0): acc += ls · h (rows, r) · B (8, r)ᵀ.
/// With `sg` (the subgroup-shared kernels, whose lanes share m0), each lane loads `rows / sg`
/// of the rows of h and the others get them by `subgroupBroadcast`, as the K loop shares A:
/// a CPU adapter turns a load at a per-lane address into a gather, which made the fused term
/// cost as much as a sixth of the product at N = 4864 (the same sums either way).
pub(super) fn nt_epilogue(rows: usize, sg: Option<usize>) -> String {
    let mut s = String::from("    for (var t = 0u; t < p.rank; t += 4u) {\n");
    for j in 0..8 {
        s += &format!("        let l{j} = lora_b4(n0 + {j}u, t);\n");
    }
    if let Some(sg) = sg {
        for r in 0..rows.div_ceil(sg) {
            s += &format!("        let mh{r} = lora_h4(m0 + {}u + sid, t);\n", r * sg);
        }
    }
    for i in 0..rows {
        match sg {
            Some(sg) => s += &format!("        let h{i} = p.ls * subgroupBroadcast(mh{}, {}u);\n", i / sg, i % sg),
            None => s += &format!("        let h{i} = p.ls * lora_h4(m0 + {i}u, t);\n"),
        }
        s += &format!(
            "        acc{} += vec4<f32>(dot(h{i}, l0), dot(h{i}, l1), dot(h{i}, l2), dot(h{i}, l3));\n",
            2 * i
        );
        s += &format!(
            "        acc{} += vec4<f32>(dot(h{i}, l4), dot(h{i}, l5), dot(h{i}, l6), dot(h{i}, l7));\n",
            2 * i + 1
        );
    }
    s += "    }\n";
    s
}

/// Bindings and loaders of `nn`'s fused term: `lg` (M, r) and `la` (r, N), after C at binding 3.
pub(super) const NN_BINDINGS: &str = "@group(0) @binding(4) var<storage, read> lg: array<f32>;   // g: (M, r)
@group(0) @binding(5) var<storage, read> la: array<f32>;   // LoRA A: (r, N)
fn lora_a8(t: u32, n0: u32, lo: ptr<function, vec4<f32>>, hi: ptr<function, vec4<f32>>) {
    let base = t * p.N + n0;
    if (n0 + 8u <= p.N) {
        *lo = vec4<f32>(la[base], la[base + 1u], la[base + 2u], la[base + 3u]);
        *hi = vec4<f32>(la[base + 4u], la[base + 5u], la[base + 6u], la[base + 7u]);
        return;
    }
    var v: array<f32, 8>;
    for (var j = 0u; j < 8u; j++) { if (n0 + j < p.N) { v[j] = la[t * p.N + n0 + j]; } }
    *lo = vec4<f32>(v[0], v[1], v[2], v[3]); *hi = vec4<f32>(v[4], v[5], v[6], v[7]);
}
";

/// `nn`'s fused term for a `rows`×8 block at (m0, n0): acc += ls · g (rows, r) · A (r, 8).
/// With `sg`, the rows of g are loaded a few per lane and broadcast, as in [`nt_epilogue`].
pub(super) fn nn_epilogue(rows: usize, sg: Option<usize>) -> String {
    let mut s = String::from("    for (var t = 0u; t < p.rank; t++) {\n        var llo: vec4<f32>; var lhi: vec4<f32>;\n        lora_a8(t, n0, &llo, &lhi);\n");
    if let Some(sg) = sg {
        for r in 0..rows.div_ceil(sg) {
            s += &format!("        let mg{r} = lg[min(m0 + {}u + sid, p.M - 1u) * p.rank + t];\n", r * sg);
        }
    }
    for i in 0..rows {
        match sg {
            Some(sg) => s += &format!("        let g{i} = p.ls * subgroupBroadcast(mg{}, {}u);\n", i / sg, i % sg),
            None => s += &format!("        let g{i} = p.ls * lg[min(m0 + {i}u, p.M - 1u) * p.rank + t];\n"),
        }
        s += &format!("        acc{} += g{i} * llo; acc{} += g{i} * lhi;\n", 2 * i, 2 * i + 1);
    }
    s += "    }\n";
    s
}
