//! A GGUF's Hugging Face checkpoint as a view ([`HfView`]): the json files, and
//! model.safetensors as a header plus [`Unit`]s of rows converted on demand, each from its own
//! byte range of the GGUF.

use super::plan::{plan, unpermute_rows, Plan, Planned};
use super::ImportSummary;
use crate::formats::gguf::{dequantize_tensor, invalid, Gguf, Result};
use serde_json::json;

/// Most bf16 bytes one conversion unit makes ([`HfView`]): 1 MiB, so converting a unit takes
/// about 4 × that (raw bytes, f32, the un-permuted copy, bf16) whatever the model's size.
pub const UNIT_BYTES: usize = 1 << 20;

/// The Hugging Face checkpoint of a GGUF as a view: the small json files, and model.safetensors
/// as a header plus tensors made on demand in units of whole rows (whole heads for the
/// un-permuted Q and K), each from its own byte range of the GGUF. The metadata is dropped once
/// the plan is made, so a view holds only the tensor infos; converting a range of
/// model.safetensors needs only the units it overlaps. Both the native import (streamed into a
/// file) and the browser's (a virtual file the importer reads in chunks) use it.
pub struct HfView {
    pub(super) json: Vec<(&'static str, Vec<u8>)>,
    pub(super) tensors: Vec<Planned>,
    pub(super) summary: ImportSummary,
    /// The length (u64 LE) and the JSON header of model.safetensors.
    head: Vec<u8>,
    /// Start of each tensor in model.safetensors (absolute), and the file's length last.
    starts: Vec<u64>,
    /// Rows per unit of each tensor.
    unit_rows: Vec<usize>,
}

/// One unit of [`HfView`]: rows `rows` of tensor `tensor`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    pub tensor: usize,
    pub rows: (usize, usize),
}

impl HfView {
    /// The view of a parsed GGUF (checked as for [`gguf_to_hf_files`](super::gguf_to_hf_files)),
    /// with units of at most `unit_bytes` bf16 bytes where rows allow (one row, or one head's
    /// rows, may be more).
    pub fn new(g: Gguf, unit_bytes: usize) -> Result<HfView> {
        let Plan { json, tensors, summary } = plan(&g)?;
        drop(g);
        let mut header = serde_json::Map::new();
        header.insert("__metadata__".into(), json!({"format": "pt"}));
        let mut offset = 0u64;
        let mut rel = Vec::with_capacity(tensors.len());
        let mut unit_rows = Vec::with_capacity(tensors.len());
        for t in &tensors {
            let n = t.shape.iter().product::<usize>() as u64 * 2;
            header.insert(
                t.hf_name.clone(),
                json!({"dtype": "BF16", "shape": t.shape, "data_offsets": [offset, offset + n]}),
            );
            rel.push(offset);
            offset += n;
            let (rows, row_bytes) = (t.rows(), t.row_len() * 2);
            let mut per = (unit_bytes / row_bytes.max(1)).clamp(1, rows);
            if let Some(heads) = t.unpermute_heads {
                // Nothing checked divisibility yet: convert() refuses rows that do not split into heads.
                let head_rows = (rows / heads.max(1)).max(1);
                per = per.next_multiple_of(head_rows).min(rows);
            }
            unit_rows.push(per);
        }
        let mut head = serde_json::Value::Object(header).to_string().into_bytes();
        head.resize(head.len().next_multiple_of(8), b' ');
        let mut prefixed = (head.len() as u64).to_le_bytes().to_vec();
        prefixed.extend_from_slice(&head);
        let data = prefixed.len() as u64;
        let mut starts: Vec<u64> = rel.iter().map(|r| data + r).collect();
        starts.push(data + offset);
        Ok(HfView { json, tensors, summary, head: prefixed, starts, unit_rows })
    }

    /// config.json, the tokenizer files and generation_config.json, by name.
    pub fn json_files(&self) -> &[(&'static str, Vec<u8>)] {
        &self.json
    }

    pub fn summary(&self) -> &ImportSummary {
        &self.summary
    }

    /// The length of model.safetensors.
    pub fn safetensors_len(&self) -> u64 {
        *self.starts.last().unwrap_or(&0)
    }

    /// model.safetensors's first bytes: the header length and the header.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// The units that hold bytes `start .. end` of model.safetensors, in order.
    pub fn units(&self, start: u64, end: u64) -> Vec<Unit> {
        let mut out = Vec::new();
        let (start, end) = (start.max(self.head.len() as u64), end.min(self.safetensors_len()));
        if start >= end {
            return out;
        }
        // The tensor holding `start`: the last whose start is <= it.
        let first = self.starts[..self.tensors.len()].partition_point(|&s| s <= start).saturating_sub(1);
        for i in first..self.tensors.len() {
            let t0 = self.starts[i];
            if t0 >= end {
                break;
            }
            let row_bytes = (self.tensors[i].row_len() * 2) as u64;
            let rows = self.tensors[i].rows();
            let per = self.unit_rows[i];
            let lo = (start.saturating_sub(t0) / row_bytes) as usize / per * per;
            let hi = ((end - t0).div_ceil(row_bytes) as usize).min(rows);
            let mut r = lo;
            while r < hi {
                out.push(Unit { tensor: i, rows: (r, (r + per).min(rows)) });
                r += per;
            }
        }
        out
    }

    /// Where `unit`'s bytes lie in model.safetensors: (start, end).
    pub fn unit_range(&self, unit: Unit) -> (u64, u64) {
        let row_bytes = (self.tensors[unit.tensor].row_len() * 2) as u64;
        let t0 = self.starts[unit.tensor];
        (t0 + unit.rows.0 as u64 * row_bytes, t0 + unit.rows.1 as u64 * row_bytes)
    }

    /// Where `unit`'s source bytes lie in the GGUF: (offset, length).
    pub fn source_range(&self, unit: Unit) -> (u64, usize) {
        let t = &self.tensors[unit.tensor];
        let row = t.src.n_bytes / t.rows() as u64;
        (t.src.offset + unit.rows.0 as u64 * row, ((unit.rows.1 - unit.rows.0) as u64 * row) as usize)
    }

    /// `unit` in bf16, from its source bytes (as [`HfView::source_range`] says): dequantized,
    /// un-permuted where llama.cpp permuted, rounded once.
    pub fn convert(&self, unit: Unit, raw: &[u8]) -> Result<Vec<u8>> {
        let t = &self.tensors[unit.tensor];
        let rows = unit.rows.1 - unit.rows.0;
        let mut data = dequantize_tensor(&t.src, raw, rows * t.row_len())?;
        if let Some(heads) = t.unpermute_heads {
            let head_rows = t.rows() / heads.max(1);
            if head_rows == 0 || t.rows() % heads != 0 {
                return Err(invalid(format!(
                    "tensor {}: {} rows cannot be split into {heads} heads",
                    t.src.name,
                    t.rows()
                )));
            }
            data = unpermute_rows(&data, rows, rows / head_rows, &t.src.name)?;
        }
        Ok(data.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect())
    }
}
