//! Workgroup-memory tiles with register blocking, the classic shape for GPUs: a workgroup of
//! `wx` × `wy` invocations computes a (BM, BN) = (`rows`·wy, `cols`·wx) tile of C: each K step of 16
//! it copies a (BM, 16) tile of A and a (16, BN) tile of B (unpacked or dequantized on the way in: bf16,
//! f16, Q8, Q4) into workgroup memory, waits, and each invocation accumulates its `rows`×`cols`
//! block from there. On CPU emulators workgroup memory and barriers cost more than they save;
//! on GPUs this is what lets the arithmetic units be fed. Sums over K run in a different
//! order from the register-blocked kernels', so results agree to f32 rounding, not bit for
//! bit; the check at load time allows for that.
//!
//! Half-precision forms ([`Tile::half`], where the device has shader-f16 and the run asked for
//! f16 products, [`crate::gpu::Gpu::set_f16_products`]): the tiles are f16 in workgroup
//! memory (half the bytes), each invocation multiplies and adds a tile's 16 products in f16
//! and adds that partial sum to its f32 accumulator. Activations and gradients span more
//! than f16's range (gradients of 1e-8, activations of 1e4), so each workgroup first scales
//! every row of A by a power of two that brings its largest value into [32, 64) (exact, and
//! undone at the store): products then neither overflow nor flush to zero. Results agree with
//! the f32 kernels to f16 rounding (~1e-3 relative), not f32's: an opt-in, never the default.

use super::blocked::lora_key;
use super::lora::Fused;
use super::Params;
use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::quant::wgsl_codes4;
use crate::kernels::unpack_fns;

/// K per tile.
const BK: usize = 16;

/// A tile shape: invocations along N (`wx`, `cols` columns each, 4 or 8) and along M (`wy`,
/// `rows` rows each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tile {
    pub wx: usize,
    pub wy: usize,
    pub rows: usize,
    pub cols: usize,
    /// f16 tiles and products, f32 accumulators (see the module's doc).
    pub half: bool,
}

impl Tile {
    /// The shapes offered to the autotune: 4×4 or 8×8 outputs per invocation, in tiles from
    /// 32×32 (many workgroups for short sequences and narrow products) to 128×128 (the most
    /// reuse of each loaded value).
    pub const ALL: [Tile; 6] = [
        Tile { wx: 16, wy: 16, rows: 4, cols: 4, half: false },
        Tile { wx: 16, wy: 8, rows: 4, cols: 4, half: false },
        Tile { wx: 8, wy: 8, rows: 4, cols: 4, half: false },
        Tile { wx: 8, wy: 8, rows: 8, cols: 8, half: false },
        Tile { wx: 16, wy: 8, rows: 8, cols: 8, half: false },
        Tile { wx: 16, wy: 16, rows: 8, cols: 8, half: false },
    ];

    /// [`Tile::ALL`]'s shapes with f16 tiles and products.
    pub fn all_half() -> [Tile; 6] {
        Tile::ALL.map(|t| Tile { half: true, ..t })
    }

    pub fn bm(self) -> usize {
        self.wy * self.rows
    }
    pub fn bn(self) -> usize {
        self.wx * self.cols
    }
    pub fn invocations(self) -> usize {
        self.wx * self.wy
    }
    pub fn name(self) -> String {
        let half = if self.half { "/f16" } else { "" };
        format!("tiled{}x{}r{}c{}{half}", self.bm(), self.bn(), self.rows, self.cols)
    }
    /// Bytes of workgroup memory: the A and B tiles (f32, or f16 and A's row scales).
    pub fn shared_bytes(self) -> usize {
        if self.half {
            2 * BK * (self.bm() + self.bn()) + 4 * self.bm()
        } else {
            4 * BK * (self.bm() + self.bn())
        }
    }
    pub fn parse(s: &str) -> Option<Tile> {
        Tile::ALL.into_iter().chain(Tile::all_half()).find(|t| t.name() == s)
    }
}

/// `fn load_b4(r, c) -> vec4<f32>`: 4 values of row r of B from column c (c % 4 == 0) for any
/// weight dtype, rows `rows` and row length `len` (WGSL expressions); zero or finite garbage
/// past the row (never stored).
fn load_b4(dtype: DType, rows: &str, len: &str, aligned: bool) -> (String, &'static str) {
    let row = format!("min(r, {rows} - 1u)");
    match dtype {
        DType::F32 if aligned => (
            format!("fn load_b4(r: u32, c: u32) -> vec4<f32> {{ return b[({row} * p.ldb + c) / 4u]; }}\n"),
            "vec4<f32>",
        ),
        DType::F32 => (
            format!(
                "fn load_b4(r: u32, c: u32) -> vec4<f32> {{
    let base = {row} * p.ldb;
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) {{ if (c + j < {len}) {{ v[j] = b[base + c + j]; }} }}
    return v;
}}\n"
            ),
            "f32",
        ),
        DType::BF16 | DType::F16 if aligned => (
            format!(
                "fn load_b4(r: u32, c: u32) -> vec4<f32> {{
    let w = b[({row} * p.ldb + c / 2u) / 2u];
    return vec4<f32>(unpack2(w.x), unpack2(w.y));
}}\n"
            ),
            "vec2<u32>",
        ),
        DType::BF16 | DType::F16 => (
            format!(
                "fn load_b4(r: u32, c: u32) -> vec4<f32> {{
    let base = {row} * p.ldb + c / 2u;
    var lo = vec2<f32>(0.0); var hi = vec2<f32>(0.0);
    if (c / 2u < p.ldb) {{ lo = unpack2(b[base]); }}
    if (c / 2u + 1u < p.ldb) {{ hi = unpack2(b[base + 1u]); }}
    return vec4<f32>(lo, hi);
}}\n"
            ),
            "u32",
        ),
        DType::Q8 | DType::Q4 => {
            let gs = dtype.group_size().unwrap_or(1);
            let codes = wgsl_codes4(dtype, "b", "rr * p.ldb", "c");
            (
                format!(
                    "fn load_b4(r: u32, c: u32) -> vec4<f32> {{
    let rr = {row};
    let s = qparams(b[p.qoff + rr * (p.ldb / 8u) + c / {gs}u]);
    return s.x * {codes} + s.y;
}}\n"
                ),
                "u32",
            )
        }
    }
}

/// The WGSL of one tiled product. `nt`: B is (N, K); otherwise (nn) B is (K, N).
fn source(nt: bool, t: Tile, dtype: DType, a_vec: bool, b_vec: bool, fused: bool) -> String {
    let (bm, bn, wg) = (t.bm(), t.bn(), t.invocations());
    let (la, ae) = super::blocked::load4_f32("load_a4", "a", "p.M", "p.K", "p.K", a_vec);
    let (lb, be) = if nt { load_b4(dtype, "p.N", "p.K", b_vec) } else { load_b4(dtype, "p.K", "p.N", b_vec) };
    let mut s = String::new();
    // Half tiles: their element type, and how a loaded f32 value enters them.
    let (el, a_in, b_in) = if t.half {
        s += "enable f16;\n";
        ("f16", "f16(v[j] * rs[r])", "f16(clamp(v[j], -65504.0, 65504.0))")
    } else {
        ("f32", "v[j]", "v[j]")
    };
    s += "struct Params {\n    M: u32, N: u32, K: u32,\n    ldb: u32,\n    alpha: f32, beta: f32,\n    has_bias: u32,\n    qoff: u32,\n    rank: u32,\n    ls: f32,\n    _q0: u32, _q1: u32,\n}\n";
    s += "@group(0) @binding(0) var<uniform> p: Params;\n";
    s += &format!("@group(0) @binding(1) var<storage, read> a: array<{ae}>;      // A: (M, K) f32\n");
    s += &format!(
        "@group(0) @binding(2) var<storage, read> b: array<{be}>;      // B: {} f32, packed 16-bit, or Q8/Q4 words\n",
        if nt { "(N, K)" } else { "(K, N)" }
    );
    let c_binding = if nt {
        s +=
            "@group(0) @binding(3) var<storage, read> bias: array<f32>;          // bias: (N), read only if has_bias\n";
        4
    } else {
        3
    };
    s += &format!("@group(0) @binding({c_binding}) var<storage, read_write> c: array<f32>;       // C: (M, N)\n");
    if fused {
        s += &format!(
            "@group(0) @binding({}) var<storage, read> lh: array<f32>;   // {}\n@group(0) @binding({}) var<storage, read> lw: array<f32>;   // {}\n",
            c_binding + 1,
            if nt { "h: (M, r)" } else { "g: (M, r)" },
            c_binding + 2,
            if nt { "LoRA B: (N, r)" } else { "LoRA A: (r, N)" }
        );
    }
    s += unpack_fns(dtype);
    s += &la;
    s += &lb;
    s += &format!("var<workgroup> ta: array<{el}, {}>;   // A tile, k-major: ta[k * BM + m]\n", BK * bm);
    s += &format!("var<workgroup> tb: array<{el}, {}>;   // B tile, k-major: tb[k * BN + n]\n", BK * bn);
    if t.half {
        s += &format!("var<workgroup> rs: array<f32, {bm}>;   // each row of A's scale, a power of two\n");
    }
    s += &format!(
        "@compute @workgroup_size({wg})\nfn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {{\n"
    );
    s += &format!("    let tx = li % {}u; let ty = li / {}u;\n", t.wx, t.wx);
    s += &format!("    let bm0 = wid.y * {bm}u; let bn0 = wid.x * {bn}u;\n");
    let hs = t.cols / 4;
    s += &format!("    let m0 = bm0 + ty * {}u; let n0 = bn0 + tx * {}u;\n", t.rows, t.cols);
    for i in 0..t.rows {
        for h in 0..hs {
            s += &format!("    var acc{i}_{h} = vec4<f32>(0.0);\n");
        }
    }
    if t.half {
        // Each row's scale: 2^e with its largest |value| · 2^e in [16, 32).
        s += &format!(
            "    for (var i = li; i < {bm}u; i += {wg}u) {{
        var mx = 0.0;
        for (var k = 0u; k < p.K; k += 4u) {{
            let v = abs(load_a4(bm0 + i, k));
            mx = max(mx, max(max(v.x, v.y), max(v.z, v.w)));
        }}
        var sc = 1.0;
        if (mx > 0.0) {{ sc = ldexp(1.0, clamp(5 - frexp(mx).exp, -126, 126)); }}
        rs[i] = sc;
    }}
    workgroupBarrier();
"
        );
    }
    s += &format!("    for (var k0 = 0u; k0 < p.K; k0 += {BK}u) {{\n");
    // A tile: bm rows × BK columns, 4 values along k per load, stored k-major. Past K: zero.
    s += &format!(
        "        for (var i = li; i < {}u; i += {wg}u) {{\n            let r = i / {}u; let c = (i % {}u) * 4u;\n            var v = load_a4(bm0 + r, k0 + c);\n            if (k0 + c >= p.K) {{ v = vec4<f32>(0.0); }}\n            for (var j = 0u; j < 4u; j++) {{ ta[(c + j) * {bm}u + r] = {a_in}; }}\n        }}\n",
        bm * BK / 4,
        BK / 4,
        BK / 4
    );
    if nt {
        // B (N, K): bn rows (n), 4 values along k per load, transposed into tb.
        s += &format!(
            "        for (var i = li; i < {}u; i += {wg}u) {{\n            let r = i / {}u; let c = (i % {}u) * 4u;\n            let v = load_b4(bn0 + r, k0 + c);\n            for (var j = 0u; j < 4u; j++) {{ tb[(c + j) * {bn}u + r] = {b_in}; }}\n        }}\n",
            bn * BK / 4,
            BK / 4,
            BK / 4
        );
    } else {
        // B (K, N): BK rows (k), 4 values along n per load; rows past K are zero.
        s += &format!(
            "        for (var i = li; i < {}u; i += {wg}u) {{\n            let r = i / {}u; let c = (i % {}u) * 4u;\n            var v = load_b4(k0 + r, bn0 + c);\n            if (k0 + r >= p.K) {{ v = vec4<f32>(0.0); }}\n            for (var j = 0u; j < 4u; j++) {{ tb[r * {bn}u + c + j] = {b_in}; }}\n        }}\n",
            BK * bn / 4,
            bn / 4,
            bn / 4
        );
    }
    s += "        workgroupBarrier();\n";
    // Half tiles: the tile's 16 products summed in f16, then added to the f32 accumulator.
    let sum = if t.half { "pt" } else { "acc" };
    if t.half {
        for i in 0..t.rows {
            for h in 0..hs {
                s += &format!("        var pt{i}_{h} = vec4<f16>(0.0h);\n");
            }
        }
    }
    s += &format!("        for (var kk = 0u; kk < {BK}u; kk++) {{\n");
    s += &format!("            let q = kk * {bn}u + tx * {}u;\n", t.cols);
    for h in 0..hs {
        let q = 4 * h;
        s += &format!(
            "            let bv{h} = vec4<{el}>(tb[q + {q}u], tb[q + {}u], tb[q + {}u], tb[q + {}u]);\n",
            q + 1,
            q + 2,
            q + 3
        );
    }
    s += &format!("            let qa = kk * {bm}u + ty * {}u;\n", t.rows);
    for i in 0..t.rows {
        s += &format!("            let a{i} = ta[qa + {i}u];\n");
        for h in 0..hs {
            s += &format!("            {sum}{i}_{h} += a{i} * bv{h};\n");
        }
    }
    s += "        }\n";
    if t.half {
        for i in 0..t.rows {
            for h in 0..hs {
                s += &format!("        acc{i}_{h} += vec4<f32>(pt{i}_{h});\n");
            }
        }
    }
    s += "        workgroupBarrier();\n    }\n";
    if t.half {
        // Undo each row's scale (a power of two: exact).
        for i in 0..t.rows {
            s += &format!("    let inv{i} = 1.0 / rs[ty * {}u + {i}u];\n", t.rows);
            for h in 0..hs {
                s += &format!("    acc{i}_{h} *= inv{i};\n");
            }
        }
    }
    if fused {
        s += "    for (var t = 0u; t < p.rank; t++) {\n";
        for h in 0..hs {
            if nt {
                s += &format!("        var lv{h} = vec4<f32>(0.0);\n        for (var j = 0u; j < 4u; j++) {{ lv{h}[j] = lw[min(n0 + {}u + j, p.N - 1u) * p.rank + t]; }}\n", 4 * h);
            } else {
                s += &format!("        var lv{h} = vec4<f32>(0.0);\n        for (var j = 0u; j < 4u; j++) {{ if (n0 + {q}u + j < p.N) {{ lv{h}[j] = lw[t * p.N + n0 + {q}u + j]; }} }}\n", q = 4 * h);
            }
        }
        for i in 0..t.rows {
            s += &format!("        let g{i} = p.ls * lh[min(m0 + {i}u, p.M - 1u) * p.rank + t];\n");
            for h in 0..hs {
                s += &format!("        acc{i}_{h} += g{i} * lv{h};\n");
            }
        }
        s += "    }\n";
    }
    for i in 0..t.rows {
        for h in 0..hs {
            s += &format!("    store4(m0 + {i}u, n0 + {}u, acc{i}_{h});\n", 4 * h);
        }
    }
    s += "}\n";
    let bias = if nt { "if (p.has_bias != 0u) { r += bias[n]; }\n        " } else { "" };
    s += &format!(
        "fn store4(m: u32, n0: u32, v: vec4<f32>) {{
    if (m >= p.M) {{ return; }}
    for (var j = 0u; j < 4u; j++) {{
        let n = n0 + j;
        if (n >= p.N) {{ return; }}
        var r = p.alpha * v[j];
        {bias}let idx = m * p.N + n;
        if (p.beta != 0.0) {{ r += p.beta * c[idx]; }}
        c[idx] = r;
    }}
}}
"
    );
    s
}

/// Whether the device can run tile `t` (workgroup size and memory).
pub fn fits(gpu: &Gpu, t: Tile) -> bool {
    t.invocations() as u32 <= gpu.info.max_compute_invocations_per_workgroup
        && t.shared_bytes() as u32 <= gpu.info.max_compute_workgroup_storage_size
}

#[allow(clippy::too_many_arguments)]
fn run(
    gpu: &Gpu,
    nt: bool,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
    t: Tile,
) {
    let (m, k) = (a.rows(), a.cols());
    let n = if nt { b.rows() } else { b.cols() };
    let a_vec = k % 4 == 0;
    let row_len = if nt { k } else { n };
    let b_vec = row_len % 4 == 0 || b.dtype.group_size().is_some();
    let key = format!(
        "matmul_{}/{}/{}/{a_vec}/{b_vec}{}",
        if nt { "nt" } else { "nn" },
        t.name(),
        b.dtype.name(),
        lora_key(fused)
    );
    let pipeline = gpu.pipeline(&key, || source(nt, t, b.dtype, a_vec, b_vec, fused.is_some()));
    let ldb = b.dtype.row_words(row_len);
    let brows = if nt { n } else { k };
    let p = Params {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        ldb: ldb as u32,
        alpha,
        beta,
        has_bias: bias.is_some() as u32,
        qoff: (brows * ldb) as u32,
        ..Params::default()
    }
    .with_lora(fused);
    let w = (n.div_ceil(t.bn()) as u32, m.div_ceil(t.bm()) as u32, 1);
    let mut bind: Vec<&Tensor> = vec![a, b];
    if nt {
        bind.push(bias.unwrap_or(gpu.dummy()));
    }
    bind.push(c);
    super::lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &bind, fused, w, (m, n, k));
}

/// C (M, N) = α · A · Bᵀ + bias + β · C (+ the fused LoRA term), B (N, K).
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
    t: Tile,
) {
    run(gpu, true, a, b, bias, c, alpha, beta, fused, t)
}

/// C (M, N) = α · A · B + β · C (+ the fused LoRA term), B (K, N).
#[allow(clippy::too_many_arguments)]
pub(super) fn nn(gpu: &Gpu, a: &Tensor, b: &Tensor, c: &Tensor, alpha: f32, beta: f32, fused: Option<Fused>, t: Tile) {
    run(gpu, false, a, b, None, c, alpha, beta, fused, t)
}
