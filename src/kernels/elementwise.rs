//! Elementwise ops on flat f32 tensors: [`axpy`], [`add`], [`scale`], [`fill`], the
//! reduction [`sum_squares`] (gradient norms), and [`copy_rows`] (a row range of one matrix into
//! another: the decoder's KV cache). Each uses vec4 loads when the element count (row length for
//! `copy_rows`) is a multiple of 4 and a scalar variant otherwise; both are checked against f64.

use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::render;

const EW: &str = include_str!("elementwise.wgsl");
const SUMSQ: &str = include_str!("elementwise_sumsq.wgsl");
const COPY_ROWS: &str = include_str!("elementwise_copy_rows.wgsl");
const COPY_BLOCK: &str = include_str!("elementwise_copy_block.wgsl");

/// Elements (of T) one workgroup of `elementwise.wgsl` covers: 64 invocations × 4.
const EW_PER_GROUP: usize = 256;
/// Workgroup size of `elementwise_sumsq.wgsl`, and the most partial sums its first stage makes.
const SUMSQ_WG: usize = 256;
/// Elements (of T) each invocation of the first sum-of-squares stage should at least visit.
const SUMSQ_PER_THREAD: usize = 16;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    alpha: f32,
    value: f32,
    _p0: u32,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SumParams {
    n: u32,
    accumulate: u32,
    _p0: u32,
    _p1: u32,
}

/// WGSL element type and element count for a flat tensor of `numel` f32.
fn elem(numel: usize) -> (&'static str, usize) {
    if numel % 4 == 0 {
        ("vec4<f32>", numel / 4)
    } else {
        ("f32", numel)
    }
}

fn check_f32(op: &str, ts: &[(&str, &Tensor)], numel: usize) {
    for (name, t) in ts {
        assert!(
            t.dtype == DType::F32 && t.numel() == numel,
            "{op}: {name} {:?} {:?} does not match {numel} f32 elements",
            t.shape,
            t.dtype
        );
    }
}

/// One elementwise dispatch: `names` are `(name, read_write)` of the tensors `ts`, bound as 1...
fn launch(gpu: &Gpu, op: &str, names: &[(&str, bool)], body: &str, ts: &[&Tensor], alpha: f32, value: f32) {
    let numel = ts[0].numel();
    if numel == 0 {
        return;
    }
    let (ty, n) = elem(numel);
    let key = format!("elementwise/{op}/{ty}");
    let pipeline = gpu.pipeline(&key, || {
        let bindings: String = names
            .iter()
            .enumerate()
            .map(|(i, (name, rw))| {
                let access = if *rw { "read_write" } else { "read" };
                format!("@group(0) @binding({}) var<storage, {access}> {name}: array<{ty}>;   // ({numel},)\n", i + 1)
            })
            .collect();
        render(EW, &[("BINDINGS", bindings), ("BODY", body.replace("T(", &format!("{ty}(")))])
    });
    let p = Params { n: n as u32, alpha, value, _p0: 0 };
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), ts, (n.div_ceil(EW_PER_GROUP) as u32, 1, 1));
}

/// y += α · x, both with the same number of elements (any shape).
pub fn axpy(gpu: &Gpu, alpha: f32, x: &Tensor, y: &Tensor) {
    check_f32("axpy", &[("x", x), ("y", y)], y.numel());
    launch(gpu, "axpy", &[("x", false), ("y", true)], "y[i] = y[i] + p.alpha * x[i];", &[x, y], alpha, 0.0);
}

/// out = a + b, all with the same number of elements.
pub fn add(gpu: &Gpu, a: &Tensor, b: &Tensor, out: &Tensor) {
    check_f32("add", &[("a", a), ("b", b), ("out", out)], out.numel());
    launch(gpu, "add", &[("a", false), ("b", false), ("out", true)], "out[i] = a[i] + b[i];", &[a, b, out], 0.0, 0.0);
}

/// x *= α
pub fn scale(gpu: &Gpu, x: &Tensor, alpha: f32) {
    check_f32("scale", &[("x", x)], x.numel());
    launch(gpu, "scale", &[("x", true)], "x[i] = x[i] * p.alpha;", &[x], alpha, 0.0);
}

/// x = value (every element).
pub fn fill(gpu: &Gpu, x: &Tensor, value: f32) {
    check_f32("fill", &[("x", x)], x.numel());
    launch(gpu, "fill", &[("x", true)], "x[i] = T(p.value);", &[x], 0.0, value);
}

/// out[0] = Σ x² (or out[0] += Σ x² when `accumulate`); x f32 of any shape, out f32 with ≥ 1 element.
/// One dispatch for small tensors; otherwise up to 256 workgroup partial sums in a scratch
/// buffer, then a second dispatch sums them (no float atomics).
pub fn sum_squares(gpu: &Gpu, x: &Tensor, out: &Tensor, accumulate: bool) {
    assert!(
        x.dtype == DType::F32 && out.dtype == DType::F32 && out.numel() >= 1,
        "sum_squares: x {:?} {:?}, out {:?} {:?} (want f32 and out with at least one element)",
        x.shape,
        x.dtype,
        out.shape,
        out.dtype
    );
    let numel = x.numel();
    let (ty, n) = elem(numel);
    let stage = |input: &Tensor, ty: &str, term: &str, n: usize, dst: &Tensor, acc: bool, groups: usize| {
        let key = format!("elementwise/sumsq/{ty}/{term}");
        let pipeline = gpu.pipeline(&key, || render(SUMSQ, &[("T", ty.into()), ("TERM", term.into())]));
        let p = SumParams { n: n as u32, accumulate: acc as u32, _p0: 0, _p1: 0 };
        gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[input, dst], (groups as u32, 1, 1));
    };
    let sq = if ty == "f32" { "v * v" } else { "dot(v, v)" };
    let groups = n.div_ceil(SUMSQ_WG * SUMSQ_PER_THREAD).clamp(1, SUMSQ_WG);
    if numel == 0 {
        // Σ over nothing is 0: the scalar kernel with n = 0 writes exactly that.
        stage(gpu.dummy(), "f32", "v * v", 0, out, accumulate, 1);
        return;
    }
    if groups == 1 {
        stage(x, ty, sq, n, out, accumulate, 1);
        return;
    }
    let partial = match gpu.zeros(&[groups], DType::F32, Category::Scratch) {
        Ok(t) => t,
        // 1 KiB of scratch cannot exceed a binding limit; fall back to one workgroup anyway.
        Err(_) => return stage(x, ty, sq, n, out, accumulate, 1),
    };
    stage(x, ty, sq, n, &partial, false, groups);
    stage(&partial, "f32", "v", groups, out, accumulate, 1);
}

/// dst rows [dst_row0, dst_row0 + rows) = src rows [src_row0, src_row0 + rows); src (·, C) and
/// dst (·, C) f32 with the same row length C (other rows of dst are left alone).
pub fn copy_rows(gpu: &Gpu, src: &Tensor, src_row0: usize, dst: &Tensor, dst_row0: usize, rows: usize) {
    let c = dst.cols();
    assert!(
        src.dtype == DType::F32
            && dst.dtype == DType::F32
            && src.cols() == c
            && src_row0 + rows <= src.rows()
            && dst_row0 + rows <= dst.rows(),
        "copy_rows: src {:?} {:?} rows {src_row0}..+{rows}, dst {:?} {:?} rows {dst_row0}..+{rows} \
         (want f32 matrices with the same row length, ranges inside both)",
        src.shape,
        src.dtype,
        dst.shape,
        dst.dtype
    );
    if rows == 0 || c == 0 {
        return;
    }
    let (ty, w) = if c % 4 == 0 { ("vec4<f32>", 4) } else { ("f32", 1) };
    let pipeline = gpu.pipeline(&format!("elementwise/copy_rows/{ty}"), || render(COPY_ROWS, &[("T", ty.into())]));
    let n = rows * c / w;
    let p = [n as u32, (src_row0 * c / w) as u32, (dst_row0 * c / w) as u32, 0];
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[src, dst], (n.div_ceil(EW_PER_GROUP) as u32, 1, 1));
}

/// dst[row0.., col0..] = src: src (rows, W) f32 placed as a block of dst (·, LD) f32 (the rest of
/// dst is left alone).
pub fn copy_block(gpu: &Gpu, src: &Tensor, dst: &Tensor, row0: usize, col0: usize) {
    let (rows, w, ld) = (src.rows(), src.cols(), dst.cols());
    assert!(
        src.dtype == DType::F32 && dst.dtype == DType::F32 && row0 + rows <= dst.rows() && col0 + w <= ld,
        "copy_block: src {:?} at ({row0}, {col0}) of dst {:?} (want f32, the block inside dst)",
        src.shape,
        dst.shape
    );
    let n = rows * w;
    if n == 0 {
        return;
    }
    let pipeline = gpu.pipeline("elementwise/copy_block", || COPY_BLOCK.to_string());
    let p = [n as u32, w as u32, ld as u32, (row0 * ld + col0) as u32];
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[src, dst], crate::gpu::groups(n.div_ceil(64) as u32));
}

/// f64 references.
pub mod reference {
    pub fn axpy(alpha: f64, x: &[f64], y: &[f64]) -> Vec<f64> {
        x.iter().zip(y).map(|(x, y)| y + alpha * x).collect()
    }
    pub fn add(a: &[f64], b: &[f64]) -> Vec<f64> {
        a.iter().zip(b).map(|(a, b)| a + b).collect()
    }
    pub fn scale(x: &[f64], alpha: f64) -> Vec<f64> {
        x.iter().map(|x| x * alpha).collect()
    }
    pub fn sum_squares(x: &[f64]) -> f64 {
        x.iter().map(|x| x * x).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, Rng};

    fn f64s(v: &[f32]) -> Vec<f64> {
        v.iter().map(|&x| x as f64).collect()
    }

    /// Sizes: awkward (37·29), vec4-aligned, tiny, and one large and odd enough to span many
    /// workgroups and both sum-of-squares stages.
    const SIZES: [usize; 5] = [37 * 29, 44 * 52, 3, 100_003, 100_000];

    gpu_test!(async fn elementwise_axpy_add(gpu) {
        for &n in &SIZES {
            let mut rng = Rng::new(n as u64);
            let (x, y, b) = (rng.vec(n, 1.0), rng.vec(n, 1.0), rng.vec(n, 2.0));
            let tx = gpu.upload_f32(&x, &[n], Category::Activations).unwrap();
            let ty = gpu.upload_f32(&y, &[n], Category::Activations).unwrap();
            let tb = gpu.upload_f32(&b, &[n], Category::Activations).unwrap();
            let to = gpu.zeros(&[n], DType::F32, Category::Activations).unwrap();
            axpy(gpu, -0.75, &tx, &ty);
            add(gpu, &tx, &tb, &to);
            let got_y = gpu.read_f32(&ty).await.unwrap();
            let got_o = gpu.read_f32(&to).await.unwrap();
            assert_close(&format!("axpy n={n}"), &got_y, &reference::axpy(-0.75, &f64s(&x), &f64s(&y)), 1e-6, 1e-6);
            assert_close(&format!("add n={n}"), &got_o, &reference::add(&f64s(&x), &f64s(&b)), 1e-6, 1e-6);
        }
    });

    gpu_test!(async fn elementwise_scale_fill(gpu) {
        for &n in &SIZES {
            let mut rng = Rng::new(n as u64 + 1);
            let x = rng.vec(n, 1.0);
            let tx = gpu.upload_f32(&x, &[n], Category::Activations).unwrap();
            let tf = gpu.upload_f32(&x, &[n], Category::Activations).unwrap();
            scale(gpu, &tx, 1.5);
            fill(gpu, &tf, -2.25);
            let got = gpu.read_f32(&tx).await.unwrap();
            assert_close(&format!("scale n={n}"), &got, &reference::scale(&f64s(&x), 1.5), 1e-6, 1e-6);
            let got = gpu.read_f32(&tf).await.unwrap();
            assert_close(&format!("fill n={n}"), &got, &vec![-2.25; n], 0.0, 0.0);
        }
    });

    gpu_test!(async fn elementwise_sum_squares(gpu) {
        for &n in &SIZES {
            for accumulate in [false, true] {
                let mut rng = Rng::new(n as u64 + 2);
                let x = rng.vec(n, 1.0);
                let tx = gpu.upload_f32(&x, &[n], Category::Grads).unwrap();
                let to = gpu.upload_f32(&[3.5, 7.0], &[2], Category::Scratch).unwrap();
                sum_squares(gpu, &tx, &to, accumulate);
                let got = gpu.read_f32(&to).await.unwrap();
                let want = reference::sum_squares(&f64s(&x)) + if accumulate { 3.5 } else { 0.0 };
                assert_close(&format!("sum_squares n={n} acc={accumulate}"), &got, &[want, 7.0], 1e-5, 1e-5);
            }
        }
        // Several tensors accumulated into one total, as a gradient norm does.
        let mut rng = Rng::new(9);
        let (a, b) = (rng.vec(53, 1.0), rng.vec(4 * 29, 1.0));
        let ta = gpu.upload_f32(&a, &[53], Category::Grads).unwrap();
        let tb = gpu.upload_f32(&b, &[4, 29], Category::Grads).unwrap();
        let to = gpu.upload_f32(&[f32::NAN], &[1], Category::Scratch).unwrap();
        sum_squares(gpu, &ta, &to, false);
        sum_squares(gpu, &tb, &to, true);
        let got = gpu.read_f32(&to).await.unwrap();
        let want = reference::sum_squares(&f64s(&a)) + reference::sum_squares(&f64s(&b));
        assert_close("sum_squares accumulated", &got, &[want], 1e-5, 1e-5);
    });

    gpu_test!(async fn elementwise_copy_rows_ranges(gpu) {
        // (C, src rows, src_row0, dst rows, dst_row0, rows): scalar, vec4, one row, all rows.
        for (c, sr, s0, dr, d0, rows) in [(6, 13, 4, 29, 17, 9), (12, 5, 0, 37, 36, 1), (3, 2, 1, 3, 0, 1), (8, 7, 0, 7, 0, 7)]
        {
            let mut rng = Rng::new((c * 1000 + s0 * 10 + d0) as u64);
            let (x, y) = (rng.vec(sr * c, 1.0), rng.vec(dr * c, 1.0));
            let tx = gpu.upload_f32(&x, &[sr, c], Category::Activations).unwrap();
            let ty = gpu.upload_f32(&y, &[dr, c], Category::Activations).unwrap();
            copy_rows(gpu, &tx, s0, &ty, d0, rows);
            let mut want = f64s(&y);
            for r in 0..rows {
                for j in 0..c {
                    want[(d0 + r) * c + j] = x[(s0 + r) * c + j] as f64;
                }
            }
            let what = format!("copy_rows C {c} src {sr}@{s0} dst {dr}@{d0} rows {rows}");
            assert_close(&what, &gpu.read_f32(&ty).await.unwrap(), &want, 0.0, 0.0);
        }
    });
}
