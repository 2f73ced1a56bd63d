//! Token embedding: a frozen gather, out (N, C) = table[ids], no backward (ids are inputs).
//! The embedding matrix may be split by rows into chunks (each within a binding limit), of
//! weight dtype F32, BF16, F16 or Q8/Q4 (dequantized on load: scale·q + offset, bit for bit
//! as `base::dtype::dequantize`); one dispatch per chunk, vec4 copies when C % 4 == 0.

use crate::gpu::{DType, Gpu, Tensor};
use crate::kernels::quant::wgsl_codes4;
use crate::kernels::{render, unpack_fns};

const SRC: &str = include_str!("embedding.wgsl");

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    c: u32,
    ldw: u32,
    start: u32,
    rows: u32,
    zero_oob: u32,
    groups: u32,
    /// quantized table: word offset of the group parameters (rows · ldw)
    qoff: u32,
    /// the id of out's row n is ids[id0 + n]
    id0: u32,
    _p: [u32; 3],
}

/// WGSL `load4(r, c0)` (4 columns of chunk row r from c0, zero past C) and the table's element type.
/// Quantized rows are padded to whole groups, so their loads need no bounds (store4 drops the pad).
fn load4(dtype: DType, aligned: bool) -> (String, &'static str) {
    if let Some(gs) = dtype.group_size() {
        let codes = wgsl_codes4(dtype, "table", "r * p.ldw", "c0");
        return (
            format!(
                "fn load4(r: u32, c0: u32) -> vec4<f32> {{
    let s = qparams(table[p.qoff + r * (p.ldw / 8u) + c0 / {gs}u]);
    return s.x * {codes} + s.y;
}}\n"
            ),
            "u32",
        );
    }
    let (src, elem) = match (dtype, aligned) {
        (DType::F32, true) => {
            ("fn load4(r: u32, c0: u32) -> vec4<f32> { return table[(r * p.ldw + c0) / 4u]; }\n", "vec4<f32>")
        }
        (DType::F32, false) => (
            "fn load4(r: u32, c0: u32) -> vec4<f32> {
    var v = vec4<f32>(0.0);
    for (var j = 0u; j < 4u; j++) { if (c0 + j < p.c) { v[j] = table[r * p.ldw + c0 + j]; } }
    return v;
}\n",
            "f32",
        ),
        (_, true) => (
            "fn load4(r: u32, c0: u32) -> vec4<f32> {
    let w = table[(r * p.ldw + c0 / 2u) / 2u];
    return vec4<f32>(unpack2(w.x), unpack2(w.y));
}\n",
            "vec2<u32>",
        ),
        (_, false) => (
            "fn load4(r: u32, c0: u32) -> vec4<f32> {
    let i = r * p.ldw + c0 / 2u;
    var hi = vec2<f32>(0.0);
    if (c0 / 2u + 1u < p.ldw) { hi = unpack2(table[i + 1u]); }
    return vec4<f32>(unpack2(table[i]), hi);
}\n",
            "u32",
        ),
    };
    (src.into(), elem)
}

/// WGSL `store4(n, c0, v)` into out (N, C), skipping columns past C, and out's element type.
fn store4(aligned: bool) -> (&'static str, &'static str) {
    if aligned {
        ("fn store4(n: u32, c0: u32, v: vec4<f32>) { out[(n * p.c + c0) / 4u] = v; }\n", "vec4<f32>")
    } else {
        (
            "fn store4(n: u32, c0: u32, v: vec4<f32>) {
    for (var j = 0u; j < 4u; j++) { if (c0 + j < p.c) { out[n * p.c + c0 + j] = v[j]; } }
}\n",
            "f32",
        )
    }
}

/// out (N, C) f32 = table[ids (N) u32]. `table` is the (vocab, C) embedding matrix split by rows:
/// every chunk but the last has `chunk_rows` rows, all share one weight dtype. Ids past the
/// vocabulary give zero rows.
pub fn embedding_forward(gpu: &Gpu, table: &[Tensor], chunk_rows: usize, ids: &Tensor, out: &Tensor) {
    let (n, c) = (out.rows(), out.cols());
    let dtype = table.first().map(|t| t.dtype).unwrap_or(DType::F32);
    let last = table.len().saturating_sub(1);
    let chunks_ok = !table.is_empty()
        && table.iter().enumerate().all(|(i, t)| {
            t.cols() == c && t.dtype == dtype && if i < last { t.rows() == chunk_rows } else { t.rows() <= chunk_rows }
        });
    assert!(
        chunks_ok && ids.numel() == n && out.dtype == DType::F32,
        "embedding_forward: table chunks {:?} (chunk_rows {chunk_rows}), ids {:?}, out {:?} {:?} \
         (want chunks (chunk_rows, C) of one dtype with a last one no longer, ids (N), out (N, C) f32)",
        table.iter().map(|t| (&t.shape, t.dtype)).collect::<Vec<_>>(),
        ids.shape,
        out.shape,
        out.dtype
    );
    if n == 0 || c == 0 {
        return;
    }
    for (i, chunk) in table.iter().enumerate() {
        embedding_chunk(gpu, chunk, i * chunk_rows, i == last, ids, 0, out);
    }
}

/// The rows of out (n, C) f32 whose id, ids[id0 + n] (ids u32, or i32 targets by their bits),
/// falls in `chunk`, the table's rows start.. (any weight dtype): that row of the chunk. With
/// `last` (the table's last chunk), ids past the chunk give zero rows; other rows are left
/// alone. [`embedding_forward`] is this over every chunk; the one-pass lm_head backward uses it
/// to gather its targets' rows from each vocab chunk as it comes.
pub fn embedding_chunk(gpu: &Gpu, chunk: &Tensor, start: usize, last: bool, ids: &Tensor, id0: usize, out: &Tensor) {
    let (n, c) = (out.rows(), out.cols());
    assert!(
        chunk.cols() == c && ids.numel() >= id0 + n && out.dtype == DType::F32,
        "embedding_chunk: chunk {:?}, ids {:?} from {id0}, out {:?} {:?}",
        chunk.shape,
        ids.shape,
        out.shape,
        out.dtype
    );
    if n == 0 || c == 0 {
        return;
    }
    let dtype = chunk.dtype;
    let aligned = c % 4 == 0;
    let pipeline = gpu.pipeline(&format!("embedding/{}/{aligned}", dtype.name()), || {
        let (load, tb) = load4(dtype, aligned);
        let (store, to) = store4(aligned);
        render(
            SRC,
            &[
                ("TB", tb.into()),
                ("TO", to.into()),
                ("UNPACK", unpack_fns(dtype).into()),
                ("LOAD", load),
                ("STORE", store.into()),
            ],
        )
    });
    let groups = c.div_ceil(4);
    let ldw = dtype.row_words(c);
    let p = Params {
        n: n as u32,
        c: c as u32,
        ldw: ldw as u32,
        start: start as u32,
        rows: chunk.rows() as u32,
        zero_oob: last as u32,
        groups: groups as u32,
        qoff: (chunk.rows() * ldw) as u32,
        id0: id0 as u32,
        _p: [0; 3],
    };
    let wgs = (n * groups).div_ceil(64) as u32;
    gpu.dispatch(&pipeline, bytemuck::bytes_of(&p), &[ids, chunk, out], (wgs, 1, 1));
}

/// f64 reference.
pub mod reference {
    /// out (N, C) = table (vocab, C) [ids], zero rows for ids past the vocabulary.
    pub fn forward(table: &[f64], c: usize, ids: &[u32]) -> Vec<f64> {
        let vocab = table.len() / c.max(1);
        let mut out = vec![0.0; ids.len() * c];
        for (n, &id) in ids.iter().enumerate() {
            if (id as usize) < vocab {
                out[n * c..(n + 1) * c].copy_from_slice(&table[id as usize * c..(id as usize + 1) * c]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::Category;
    use crate::gpu_test;
    use crate::kernels::testutil::{assert_close, round_to, Rng};

    async fn check(gpu: &Gpu, vocab: usize, chunk_rows: usize, c: usize, n: usize, dtype: DType) {
        let mut rng = Rng::new((vocab * 100 + c * 10 + n) as u64);
        let raw = rng.vec(vocab * c, 1.0);
        // What the table stands for once stored (quantization is per row, so chunking is free).
        let table: Vec<f32> = match dtype {
            DType::Q8 | DType::Q4 => {
                crate::base::dtype::dequantize(&crate::base::dtype::quantize(&raw, vocab, c, dtype), vocab, c, dtype)
            }
            _ => raw.iter().map(|&v| round_to(dtype, v)).collect(),
        };
        let mut ids: Vec<u32> = (0..n).map(|_| rng.below(vocab as u64) as u32).collect();
        // Every chunk boundary, and ids past the vocabulary (zero rows).
        for (i, id) in [0, chunk_rows - 1, chunk_rows, vocab - 1, vocab, 1_000_000].into_iter().enumerate() {
            if i < n {
                ids[(i * 5) % n] = id as u32;
            }
        }
        let chunks: Vec<Tensor> = raw
            .chunks(chunk_rows * c)
            .map(|rows| gpu.upload_f32_as(rows, &[rows.len() / c, c], dtype, Category::Weights).unwrap())
            .collect();
        let tids = gpu.upload_u32(&ids, &[n], Category::Activations).unwrap();
        let out = gpu.upload_f32(&vec![f32::NAN; n * c], &[n, c], Category::Activations).unwrap();
        embedding_forward(gpu, &chunks, chunk_rows, &tids, &out);
        let got = gpu.read_f32(&out).await.unwrap();
        let t64: Vec<f64> = table.iter().map(|&v| v as f64).collect();
        let what = format!("embedding vocab {vocab} chunks of {chunk_rows}, C {c}, N {n}, {dtype:?}");
        assert_close(&what, &got, &reference::forward(&t64, c, &ids), 0.0, 0.0);
    }

    gpu_test!(async fn embedding_chunked_dtypes(gpu) {
        for dtype in [DType::F32, DType::BF16, DType::F16, DType::Q8, DType::Q4] {
            check(gpu, 17, 7, 53, 37, dtype).await; // 3 chunks, the last short; odd C
            check(gpu, 17, 7, 52, 37, dtype).await; // vec4 path
            check(gpu, 17, 7, 6, 37, dtype).await; // C % 4 == 2: 16-bit rows with a half-used word
            check(gpu, 5, 5, 3, 2, dtype).await; // tiny, one chunk
        }
        for dtype in [DType::Q8, DType::Q4] {
            check(gpu, 17, 7, 130, 37, dtype).await; // several groups, the last partial
            check(gpu, 17, 7, 128, 37, dtype).await; // whole groups
        }
    });
}
