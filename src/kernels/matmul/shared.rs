//! Subgroup-shared A: the invocations of a subgroup compute adjacent 8-column blocks of the same
//! `ROWS` rows of C, so they need the same rows of A. Each loads `ROWS / sg` of them and the
//! others get them by `subgroupBroadcast`, which reads A once per subgroup instead of once per
//! invocation. On CPU emulators every per-invocation load is a gather across SIMD lanes and a
//! broadcast is one permute, so this variant is 2–2.6× the register-blocked one on lavapipe
//! (subgroups of 8). It needs the adapter's `subgroups` feature and a known subgroup size, and
//! subgroups made of consecutive invocations of the (1-D) workgroup, which the check against
//! the register-blocked kernel at load time verifies before it is used. A workgroup's
//! subgroups lie along M or N or both, whichever computes the fewest outputs past C's edges
//! (the same sums either way).

use super::blocked::{acc_decl, body_nn, load4_f32, load4_packed, load8, loop_nt, lora_key, store_rows};
use super::lora::{self, Fused};
use super::Params;
use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::{render, unpack_fns};

const NT: &str = include_str!("shared_nt.wgsl");
const NN: &str = include_str!("shared_nn.wgsl");

/// The shape of a shared variant: rows of C per invocation (a multiple of 8), and subgroups
/// per workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shape {
    pub rows: usize,
    pub subgroups: usize,
}

impl Shape {
    /// The one measured best on lavapipe (16 rows: 2.6× the blocked kernel; 8 rows: 1.8×).
    pub const DEFAULT: Shape = Shape { rows: 16, subgroups: 8 };

    pub fn name(self) -> String {
        format!("shared{}x8/{}", self.rows, self.subgroups)
    }
}

/// `let a0..a{rows−1}`: rows m0.. of A at k, each loaded by one lane of the subgroup (lane l
/// loads rows m0 + l, m0 + sg + l, …) and broadcast to all.
fn broadcast_a_rows(rows: usize, sg: usize) -> String {
    let loads = rows.div_ceil(sg);
    let mut s = String::new();
    for r in 0..loads {
        s += &format!("        let mine{r} = load_a4(m0 + {}u + sid, k);\n", r * sg);
    }
    for i in 0..rows {
        s += &format!("        let a{i} = subgroupBroadcast(mine{}, {}u);\n", i / sg, i % sg);
    }
    s
}

/// The workgroup's subgroups along M ([`super::arrange`]; each covers `rows` rows and sg·8
/// columns), and the grid: x over blocks of (subgroups / that)·sg·8 columns, y over blocks of
/// that many subgroups' rows.
fn grid(m: usize, n: usize, sg: usize, shape: Shape) -> (u32, (u32, u32, u32)) {
    let rm = super::arrange(m, n, shape.rows, sg * 8, shape.subgroups, shape.subgroups);
    let rn = shape.subgroups / rm;
    (rm as u32, (n.div_ceil(sg * 8 * rn) as u32, m.div_ceil(rm * shape.rows) as u32, 1))
}

fn common_vars(shape: Shape, sg: usize) -> Vec<(&'static str, String)> {
    vec![
        ("ROWS", shape.rows.to_string()),
        ("SG", sg.to_string()),
        ("R", shape.subgroups.to_string()),
        ("WG", (sg * shape.subgroups).to_string()),
        ("ACC_DECL", acc_decl(shape.rows)),
        ("STORE", store_rows(shape.rows)),
    ]
}

/// C (M, N) = α · A (M, K) · Bᵀ + bias + β · C, as [`super::matmul_nt`], with subgroups of `sg`.
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
    shape: Shape,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.rows());
    let a_vec = k % 4 == 0;
    let b_vec = k % 4 == 0 || b.dtype.group_size().is_some();
    let key = format!("matmul_nt/{}/sg{sg}/{}/{a_vec}/{b_vec}{}", shape.name(), b.dtype.name(), lora_key(fused));
    let pipeline = gpu.pipeline(&key, || {
        let (la, ae) = load4_f32("load_a4", "a", "p.M", "p.K", "p.K", a_vec);
        let (lb, be) = match b.dtype {
            DType::F32 => load4_f32("load_b4", "b", "p.N", "p.K", "p.ldb", b_vec),
            DType::Q8 | DType::Q4 => (String::new(), "u32"),
            DType::BF16 | DType::F16 => load4_packed(b_vec),
        };
        let mut vars = common_vars(shape, sg);
        vars.extend([
            ("A_ELEM", ae.to_string()),
            ("B_ELEM", be.to_string()),
            ("UNPACK", unpack_fns(b.dtype).to_string()),
            ("LOAD_A", la),
            ("LOAD_B", lb),
            ("LOOP", loop_nt(b.dtype, shape.rows, &broadcast_a_rows(shape.rows, sg))),
            ("LORA_BINDINGS", if fused.is_some() { lora::NT_BINDINGS.into() } else { String::new() }),
            ("LORA", if fused.is_some() { lora::nt_epilogue(shape.rows, Some(sg)) } else { String::new() }),
        ]);
        render(NT, &vars)
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
    let (sub_m, w) = grid(m, n, sg, shape);
    let p = Params { sub_m, ..p };
    lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &[a, b, bias, c], fused, w, (m, n, k));
}

/// C (M, N) = α · A (M, K) · B (K, N) + β · C, as [`super::matmul_nn`], with subgroups of `sg`.
#[allow(clippy::too_many_arguments)]
pub(super) fn nn(
    gpu: &Gpu,
    a: &Tensor,
    b: &Tensor,
    c: &Tensor,
    alpha: f32,
    beta: f32,
    fused: Option<Fused>,
    sg: usize,
    shape: Shape,
) {
    let (m, k, n) = (a.rows(), a.cols(), b.cols());
    let a_vec = k % 4 == 0;
    let b_vec = match b.dtype {
        DType::F32 => n % 4 == 0,
        DType::BF16 | DType::F16 => n % 8 == 0,
        DType::Q8 | DType::Q4 => true, // rows padded to whole groups
    };
    let key = format!("matmul_nn/{}/sg{sg}/{}/{a_vec}/{b_vec}{}", shape.name(), b.dtype.name(), lora_key(fused));
    let pipeline = gpu.pipeline(&key, || {
        let (la, ae) = load4_f32("load_a4", "a", "p.M", "p.K", "p.K", a_vec);
        let (lb, be) = load8("load_b8", "b", "p.N", "p.ldb", b.dtype, b_vec);
        let mut vars = common_vars(shape, sg);
        vars.extend([
            ("A_ELEM", ae.to_string()),
            ("B_ELEM", be.to_string()),
            ("UNPACK", unpack_fns(b.dtype).to_string()),
            ("LOAD_A", la),
            ("LOAD_B8", lb),
            ("BODY", body_nn(shape.rows, &broadcast_a_rows(shape.rows, sg))),
            ("LORA_BINDINGS", if fused.is_some() { lora::NN_BINDINGS.into() } else { String::new() }),
            ("LORA", if fused.is_some() { lora::nn_epilogue(shape.rows, Some(sg)) } else { String::new() }),
        ]);
        render(NN, &vars)
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
    let (sub_m, w) = grid(m, n, sg, shape);
    let p = Params { sub_m, ..p };
    lora::dispatch(gpu, &pipeline, bytemuck::bytes_of(&p), &[a, b, c], fused, w, (m, n, k));
}
