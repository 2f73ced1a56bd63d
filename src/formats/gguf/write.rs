//! A GGUF writer: metadata entries given as raw value bytes (or through the typed helpers),
//! tensors given as bytes or, for files larger than memory should hold, as lengths whose bytes
//! are written by a callback. Tests build GGUFs with it, and `webtune make-gguf` writes a model
//! of a real shape with random weights (import benchmarks) without holding it in memory.

use std::io::{self, Write};

// GGUF value type ids (those the typed helpers write, and the tests' raw entries).
pub(crate) const U32: u32 = 4;
pub(crate) const I32: u32 = 5;
const F32: u32 = 6;
const BOOL: u32 = 7;
const STRING: u32 = 8;
pub(crate) const ARRAY: u32 = 9;
// GGML tensor type ids.
pub(crate) const T_F32: u32 = 0;
pub(crate) const T_F16: u32 = 1;
#[cfg(test)]
pub(crate) const T_Q4_0: u32 = 2;
#[cfg(test)]
pub(crate) const T_Q8_0: u32 = 8;
/// The data alignment written (GGUF's default; `general.alignment` is not written).
const ALIGN: u64 = 32;

fn put_str(buf: &mut Vec<u8>, s: &str) {
    buf.extend((s.len() as u64).to_le_bytes());
    buf.extend(s.as_bytes());
}

/// One tensor: name, ne (innermost first), type id, and its bytes or their length.
struct Tensor {
    name: String,
    ne: Vec<u64>,
    ty: u32,
    data: Result<Vec<u8>, u64>,
}

/// A GGUF v3 (by default) being put together.
pub struct GgufWriter {
    pub version: u32,
    kv: Vec<u8>,
    n_kv: u64,
    tensors: Vec<Tensor>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    pub fn new() -> GgufWriter {
        GgufWriter { version: 3, kv: Vec::new(), n_kv: 0, tensors: Vec::new() }
    }

    /// A key of value type `ty` whose value bytes are `value` (anything, even malformed).
    pub fn raw(&mut self, key: &str, ty: u32, value: &[u8]) -> &mut GgufWriter {
        put_str(&mut self.kv, key);
        self.kv.extend(ty.to_le_bytes());
        self.kv.extend(value);
        self.n_kv += 1;
        self
    }

    pub fn u32(&mut self, key: &str, v: u32) -> &mut GgufWriter {
        self.raw(key, U32, &v.to_le_bytes())
    }

    pub fn f32(&mut self, key: &str, v: f32) -> &mut GgufWriter {
        self.raw(key, F32, &v.to_le_bytes())
    }

    pub fn bool(&mut self, key: &str, v: bool) -> &mut GgufWriter {
        self.raw(key, BOOL, &[v as u8])
    }

    pub fn str(&mut self, key: &str, v: &str) -> &mut GgufWriter {
        let mut b = Vec::new();
        put_str(&mut b, v);
        self.raw(key, STRING, &b)
    }

    pub fn strs(&mut self, key: &str, v: &[String]) -> &mut GgufWriter {
        let mut b = STRING.to_le_bytes().to_vec();
        b.extend((v.len() as u64).to_le_bytes());
        v.iter().for_each(|s| put_str(&mut b, s));
        self.raw(key, ARRAY, &b)
    }

    pub fn i32s(&mut self, key: &str, v: &[i32]) -> &mut GgufWriter {
        let mut b = I32.to_le_bytes().to_vec();
        b.extend((v.len() as u64).to_le_bytes());
        v.iter().for_each(|x| b.extend(x.to_le_bytes()));
        self.raw(key, ARRAY, &b)
    }

    /// A byte-level BPE tokenizer as llama.cpp writes one ("gpt2" model): the pre-tokenizer name,
    /// tokens, merges ("a b"), token types, the bos/eos/pad ids and a chat template.
    #[allow(clippy::too_many_arguments)]
    pub fn gpt2_tokenizer(
        &mut self,
        pre: &str,
        tokens: &[String],
        merges: &[String],
        types: &[i32],
        (bos, eos, pad): (u32, u32, u32),
        template: &str,
    ) -> &mut GgufWriter {
        self.str("tokenizer.ggml.model", "gpt2")
            .str("tokenizer.ggml.pre", pre)
            .strs("tokenizer.ggml.tokens", tokens)
            .strs("tokenizer.ggml.merges", merges)
            .i32s("tokenizer.ggml.token_type", types)
            .u32("tokenizer.ggml.bos_token_id", bos)
            .u32("tokenizer.ggml.eos_token_id", eos)
            .u32("tokenizer.ggml.padding_token_id", pad)
            .bool("tokenizer.ggml.add_bos_token", false)
            .str("tokenizer.chat_template", template)
    }

    /// A tensor of type id `ty` with its bytes.
    pub fn tensor(&mut self, name: &str, ne: &[u64], ty: u32, data: Vec<u8>) -> &mut GgufWriter {
        self.tensors.push(Tensor { name: name.to_string(), ne: ne.to_vec(), ty, data: Ok(data) });
        self
    }

    /// A tensor of `len` bytes, written by [`GgufWriter::write`]'s callback.
    pub fn tensor_len(&mut self, name: &str, ne: &[u64], ty: u32, len: u64) -> &mut GgufWriter {
        self.tensors.push(Tensor { name: name.to_string(), ne: ne.to_vec(), ty, data: Err(len) });
        self
    }

    /// Write the file: header, metadata, tensor infos, then each tensor's bytes aligned to 32;
    /// `fill(i, w)` writes those of tensor `i` when they were given as a length (exactly that
    /// many bytes). Returns the bytes written.
    pub fn write<W: Write>(&self, w: &mut W, mut fill: impl FnMut(usize, &mut W) -> io::Result<()>) -> io::Result<u64> {
        let mut head = b"GGUF".to_vec();
        head.extend(self.version.to_le_bytes());
        head.extend((self.tensors.len() as u64).to_le_bytes());
        head.extend(self.n_kv.to_le_bytes());
        head.extend(&self.kv);
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut head, &t.name);
            head.extend((t.ne.len() as u32).to_le_bytes());
            t.ne.iter().for_each(|d| head.extend(d.to_le_bytes()));
            head.extend(t.ty.to_le_bytes());
            head.extend(offset.to_le_bytes());
            offset = (offset + t.len()).next_multiple_of(ALIGN);
        }
        head.resize(head.len().next_multiple_of(ALIGN as usize), 0);
        w.write_all(&head)?;
        let mut n = head.len() as u64;
        for (i, t) in self.tensors.iter().enumerate() {
            match &t.data {
                Ok(bytes) => w.write_all(bytes)?,
                Err(_) => fill(i, w)?,
            }
            let pad = t.len().next_multiple_of(ALIGN) - t.len();
            w.write_all(&vec![0; pad as usize])?;
            n += t.len() + pad;
        }
        Ok(n)
    }

    /// The file in memory (every tensor given with its bytes).
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let r = self.write(&mut out, |i, _| Err(io::Error::other(format!("tensor {i} was given no bytes"))));
        r.expect("a GGUF in memory whose tensors all have bytes");
        out
    }
}

impl Tensor {
    fn len(&self) -> u64 {
        match &self.data {
            Ok(b) => b.len() as u64,
            Err(n) => *n,
        }
    }
}
