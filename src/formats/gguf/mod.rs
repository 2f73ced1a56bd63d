//! GGUF, llama.cpp's model format: a parser for GGUF v2/v3 (header, metadata of every value type,
//! tensor infos), the dequantizers of [`quants`], and the conversion of a llama or qwen2 GGUF into
//! a Hugging Face checkpoint ([`gguf_to_hf_files`], [`import_gguf_to_dir`]).
//!
//! The parser reads from any `Read + Seek`: header, metadata and tensor infos first, then each
//! tensor's bytes on demand, so a large file is never read whole. Every count and length in the
//! file is checked against the bytes left before anything is allocated, and a malformed file is
//! refused with a [`GgufError`] naming the field or tensor and the offending value.
//!
//! Layout (all little-endian): magic "GGUF", version u32, tensor count u64, metadata count u64;
//! metadata as (key string, value type u32, value); tensor infos as (name string, n_dims u32,
//! ne u64 × n_dims innermost first, type u32, offset u64); then, aligned to `general.alignment`
//! (default 32), the tensor data, each tensor at its offset from there. A string is a u64 length
//! and UTF-8 bytes; an array is an element type u32, a count u64 and the elements.
//!
//! Here: the parsed file ([`Gguf`]: header, metadata, the tensor table) and its typed getters,
//! and reading a tensor's bytes. [`Value`] is in `value`, the bounded readers the parser reads
//! through in `reader`, the conversion to a Hugging Face checkpoint in `hf`.

mod hf;
mod quants;
mod reader;
mod tokenizer;
mod value;
pub mod write;

#[cfg(not(target_arch = "wasm32"))]
pub use hf::import_gguf_to_dir;
pub use hf::{
    gguf_to_hf_files, gguf_to_hf_files_with_summary, write_random_model, HfView, ImportSummary, Unit, UNIT_BYTES,
};
pub use quants::{dequantize, GgmlType};
pub use value::Value;

pub use crate::base::error::GgufError;
use reader::{PastPrefix, Prefix, Src};
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};

pub(crate) fn invalid(msg: impl Into<String>) -> GgufError {
    GgufError::Invalid(msg.into())
}

pub(crate) fn unsupported(msg: impl Into<String>) -> GgufError {
    GgufError::Unsupported(msg.into())
}

type Result<T, E = GgufError> = std::result::Result<T, E>;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// GGML_MAX_DIMS
const MAX_DIMS: u32 = 4;

/// Where one tensor lies and how it is stored.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// ne: dimensions innermost first, as GGUF lists them (a PyTorch (out, in) weight is [in, out]).
    pub dims: Vec<u64>,
    pub ggml_type: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    pub n_bytes: u64,
}

impl TensorInfo {
    /// The shape in PyTorch order (outermost first).
    pub fn shape(&self) -> Vec<usize> {
        self.dims.iter().rev().map(|&d| d as usize).collect()
    }

    pub fn numel(&self) -> usize {
        self.dims.iter().product::<u64>() as usize
    }
}

/// A parsed GGUF: header, metadata and tensor infos (no tensor data).
#[derive(Clone, Debug)]
pub struct Gguf {
    pub version: u32,
    pub metadata: BTreeMap<String, Value>,
    /// In file order.
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the tensor data section.
    pub data_offset: u64,
    pub file_len: u64,
}

impl Gguf {
    /// Parse header, metadata and tensor infos, checking every tensor lies inside the file.
    pub fn parse<R: Read + Seek>(r: &mut R) -> Result<Gguf> {
        let io = |what: &str| {
            let what = what.to_string();
            move |source| GgufError::Io { what, source }
        };
        let len = r.seek(SeekFrom::End(0)).map_err(io("finding the file size"))?;
        r.seek(SeekFrom::Start(0)).map_err(io("seeking to the start"))?;
        let mut src = Src::new(r, len);

        let magic: [u8; 4] = src.bytes(&|| "header: magic".into())?;
        if &magic != MAGIC {
            return Err(invalid(format!("not a GGUF file: it starts with {magic:02x?}, not \"GGUF\"")));
        }
        let version = src.u32(&|| "header: version".into())?;
        match version {
            2 | 3 => {}
            1 => {
                return Err(unsupported("version 1 (32-bit counts, 2023) is not supported; re-convert with llama.cpp"))
            }
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                return Err(unsupported(format!("big-endian GGUF (version {}) is not supported", v.swap_bytes())))
            }
            v => return Err(unsupported(format!("version {v} is not supported (2 and 3 are)"))),
        }
        let n_tensors = src.u64(&|| "header: tensor count".into())?;
        let n_kv = src.u64(&|| "header: metadata count".into())?;
        // The smallest metadata entry: an empty key (8), a type (4), one byte; the smallest tensor
        // info: an empty name (8), n_dims (4), type (4), offset (8).
        src.check_count(n_kv, 13, &|| "header: metadata count".into())?;
        src.check_count(n_tensors, 24, &|| "header: tensor count".into())?;

        let mut metadata = BTreeMap::new();
        for i in 0..n_kv {
            let key = src.string(&|| format!("metadata entry {i}: key"))?;
            let ty = src.u32(&|| format!("metadata {key}: value type"))?;
            let value = src.value(ty, 0, &|| format!("metadata {key}"))?;
            if metadata.insert(key.clone(), value).is_some() {
                return Err(invalid(format!("metadata {key}: given twice")));
            }
        }
        let alignment = match metadata.get("general.alignment") {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(v) => {
                let shown = v.as_u64().map_or_else(|| v.type_name().to_string(), |a| a.to_string());
                return Err(invalid(format!("metadata general.alignment = {shown}: must be a uint32 power of two")));
            }
        };

        let mut tensors = Vec::with_capacity(n_tensors.min(1 << 12) as usize);
        let mut names = std::collections::HashSet::new();
        for i in 0..n_tensors {
            let name = src.string(&|| format!("tensor info {i}: name"))?;
            let n_dims = src.u32(&|| format!("tensor {name}: n_dims"))?;
            if n_dims > MAX_DIMS {
                return Err(invalid(format!("tensor {name}: n_dims = {n_dims} is over {MAX_DIMS}")));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                dims.push(src.u64(&|| format!("tensor {name}: ne[{d}]"))?);
            }
            let type_id = src.u32(&|| format!("tensor {name}: type"))?;
            let ggml_type = GgmlType::from_id(type_id)
                .ok_or_else(|| invalid(format!("tensor {name}: unknown tensor type id {type_id}")))?;
            let offset = src.u64(&|| format!("tensor {name}: offset"))?;
            let n_bytes = tensor_bytes(&name, &dims, ggml_type)?;
            if !names.insert(name.clone()) {
                return Err(invalid(format!("tensor {name}: given twice")));
            }
            tensors.push(TensorInfo { name, dims, ggml_type, offset, n_bytes });
        }
        let data_offset = src.pos.next_multiple_of(alignment);
        for t in &mut tensors {
            if t.offset % alignment != 0 {
                return Err(invalid(format!(
                    "tensor {}: offset {} is not a multiple of the alignment {alignment}",
                    t.name, t.offset
                )));
            }
            let start = data_offset.checked_add(t.offset);
            let end = start.and_then(|s| s.checked_add(t.n_bytes));
            match (start, end) {
                (Some(start), Some(end)) if end <= len => t.offset = start,
                _ => {
                    return Err(invalid(format!(
                        "tensor {}: offset {} + {} bytes runs past the end of the file ({len} bytes, data from {data_offset})",
                        t.name, t.offset, t.n_bytes
                    )))
                }
            }
        }
        Ok(Gguf { version, metadata, tensors, alignment, data_offset, file_len: len })
    }

    /// Parse from the first bytes of a file of `file_len` bytes: `Ok(None)` when the header,
    /// metadata and tensor infos run past `prefix` (read more and try again). Every check is
    /// made against `file_len`, as [`Gguf::parse`] makes it.
    pub fn parse_prefix(prefix: &[u8], file_len: u64) -> Result<Option<Gguf>> {
        let mut r = Prefix::new(prefix, file_len);
        match Gguf::parse(&mut r) {
            Err(GgufError::Io { source, .. }) if source.get_ref().is_some_and(|e| e.is::<PastPrefix>()) => Ok(None),
            other => other.map(Some),
        }
    }

    /// Parse a GGUF held in memory.
    pub fn parse_bytes(bytes: &[u8]) -> Result<Gguf> {
        Gguf::parse(&mut std::io::Cursor::new(bytes))
    }

    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// A metadata string; `Ok(None)` when absent, an error naming the key when of another type.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>> {
        self.typed(key, "a string", Value::as_str)
    }

    /// A metadata non-negative integer of any width.
    pub fn get_u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }

    /// A metadata float (f32 widened exactly, or f64).
    pub fn get_f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "a float", Value::as_f64)
    }

    pub fn get_bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a bool", Value::as_bool)
    }

    pub fn get_array(&self, key: &str) -> Result<Option<&[Value]>> {
        self.typed(key, "an array", Value::as_array)
    }

    fn typed<'a, T>(&'a self, key: &str, want: &str, f: impl Fn(&'a Value) -> Option<T>) -> Result<Option<T>> {
        match self.metadata.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| {
                let shown = format!("{v:?}");
                let shown: String = if shown.chars().count() > 80 {
                    shown.chars().take(80).chain("..".chars()).collect()
                } else {
                    shown
                };
                invalid(format!("metadata {key}: expected {want}, found {} {shown}", v.type_name()))
            }),
        }
    }

    /// The raw bytes of one tensor (bounds were checked at parse).
    pub fn tensor_bytes<R: Read + Seek>(&self, r: &mut R, t: &TensorInfo) -> Result<Vec<u8>> {
        read_at(r, &t.name, t.offset, t.n_bytes as usize)
    }

    /// One tensor dequantized to f32, row-major in PyTorch order.
    pub fn tensor_f32<R: Read + Seek>(&self, r: &mut R, name: &str) -> Result<Vec<f32>> {
        let t = self.tensor(name).ok_or_else(|| invalid(format!("tensor {name}: not in the file")))?;
        let bytes = self.tensor_bytes(r, t)?;
        dequantize_tensor(t, &bytes, t.numel())
    }
}

/// `len` bytes of tensor `name`'s data at `offset`; an error names the tensor and the range.
pub(crate) fn read_at<R: Read + Seek>(r: &mut R, name: &str, offset: u64, len: usize) -> Result<Vec<u8>> {
    let what = || format!("reading tensor {name} ({len} bytes at {offset})");
    r.seek(SeekFrom::Start(offset)).map_err(|source| GgufError::Io { what: what(), source })?;
    let mut b = vec![0u8; len];
    r.read_exact(&mut b).map_err(|source| GgufError::Io { what: what(), source })?;
    Ok(b)
}

/// `n` values of tensor `t` (all of it, or whole rows) dequantized; an error names the tensor.
pub(crate) fn dequantize_tensor(t: &TensorInfo, bytes: &[u8], n: usize) -> Result<Vec<f32>> {
    dequantize(t.ggml_type, bytes, n).map_err(|e| match e {
        GgufError::Unsupported(m) => unsupported(format!("tensor {}: {m}", t.name)),
        e => e,
    })
}

/// Bytes a tensor of `dims` takes in `ty`, with every product checked.
fn tensor_bytes(name: &str, dims: &[u64], ty: GgmlType) -> Result<u64> {
    let mut numel: u64 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d == 0 {
            return Err(invalid(format!("tensor {name}: ne[{i}] = 0")));
        }
        numel = numel
            .checked_mul(d)
            .filter(|&n| n <= i64::MAX as u64)
            .ok_or_else(|| invalid(format!("tensor {name}: dimensions {dims:?} overflow")))?;
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    if ne0 % ty.block != 0 {
        return Err(invalid(format!(
            "tensor {name}: row length ne[0] = {ne0} is not a multiple of {}'s block of {}",
            ty.name, ty.block
        )));
    }
    (numel / ty.block)
        .checked_mul(ty.block_bytes)
        .ok_or_else(|| invalid(format!("tensor {name}: dimensions {dims:?} overflow")))
}

#[cfg(test)]
pub(crate) mod tests;
