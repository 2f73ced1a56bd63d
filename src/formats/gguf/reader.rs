//! The bounded readers the parser reads through: [`Src`] knows how many bytes are left, so
//! every count and length (strings, arrays, metadata values in all) is checked before anything
//! is allocated; [`Prefix`] serves the first bytes of a file for
//! [`Gguf::parse_prefix`](super::Gguf::parse_prefix), and reading past them is a [`PastPrefix`]
//! error.

use super::{invalid, GgufError, Result, Value};
use std::io::{Read, Seek, SeekFrom};

/// Arrays nested deeper than this are refused (the recursion would otherwise follow the file).
const MAX_ARRAY_DEPTH: usize = 4;
/// Metadata values in all, array elements included: 4 Mi values bound the metadata's memory to
/// ~128 MiB; the largest tokenizers (262k tokens, scores, types and merges) need under 1.1 Mi.
const MAX_VALUES: u64 = 1 << 22;

/// A reader that knows how many bytes are left, so every length can be checked before use.
pub(super) struct Src<'r, R> {
    r: &'r mut R,
    /// Bytes read so far.
    pub(super) pos: u64,
    len: u64,
    /// Metadata values read so far (against [`MAX_VALUES`]).
    values: u64,
}

impl<'r, R: Read> Src<'r, R> {
    /// `r` at its start, a file of `len` bytes.
    pub(super) fn new(r: &'r mut R, len: u64) -> Self {
        Src { r, pos: 0, len, values: 0 }
    }

    fn left(&self) -> u64 {
        self.len - self.pos
    }

    pub(super) fn bytes<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        if self.left() < N as u64 {
            return Err(invalid(format!("{}: the file ends at byte {} (truncated)", what(), self.len)));
        }
        let mut b = [0u8; N];
        self.r.read_exact(&mut b).map_err(|source| GgufError::Io { what: what(), source })?;
        self.pos += N as u64;
        Ok(b)
    }

    pub(super) fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.bytes(what).map(u32::from_le_bytes)
    }

    pub(super) fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.bytes(what).map(u64::from_le_bytes)
    }

    /// Check that `count` items of at least `min_size` bytes each can fit in what is left.
    pub(super) fn check_count(&self, count: u64, min_size: u64, what: &dyn Fn() -> String) -> Result<()> {
        if count.saturating_mul(min_size) > self.left() {
            return Err(invalid(format!(
                "{}: {count} is impossible: {count} × at least {min_size} bytes is more than the {} bytes left \
                 in the file",
                what(),
                self.left()
            )));
        }
        Ok(())
    }

    pub(super) fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let n = self.u64(&|| format!("{}: string length", what()))?;
        if n > self.left() {
            return Err(invalid(format!(
                "{}: string length {n} is more than the {} bytes left in the file",
                what(),
                self.left()
            )));
        }
        let mut b = vec![0u8; n as usize];
        self.r.read_exact(&mut b).map_err(|source| GgufError::Io { what: what(), source })?;
        self.pos += n;
        // Token strings may hold invalid UTF-8 in some vocabularies; keep them readable rather than refuse.
        Ok(String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    /// One value of type `ty`; `what` names it for messages.
    pub(super) fn value(&mut self, ty: u32, depth: usize, what: &dyn Fn() -> String) -> Result<Value> {
        self.values += 1;
        if self.values > MAX_VALUES {
            return Err(invalid(format!("{}: more than {MAX_VALUES} metadata values in all", what())));
        }
        Ok(match ty {
            0 => Value::U8(u8::from_le_bytes(self.bytes(what)?)),
            1 => Value::I8(i8::from_le_bytes(self.bytes(what)?)),
            2 => Value::U16(u16::from_le_bytes(self.bytes(what)?)),
            3 => Value::I16(i16::from_le_bytes(self.bytes(what)?)),
            4 => Value::U32(u32::from_le_bytes(self.bytes(what)?)),
            5 => Value::I32(i32::from_le_bytes(self.bytes(what)?)),
            6 => Value::F32(f32::from_le_bytes(self.bytes(what)?)),
            7 => match self.bytes::<1>(what)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(invalid(format!("{}: bool byte {b} is neither 0 nor 1", what()))),
            },
            8 => Value::String(self.string(what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(invalid(format!("{}: arrays nested more than {MAX_ARRAY_DEPTH} deep", what())));
                }
                let elem = self.u32(&|| format!("{}: array element type", what()))?;
                let min_size = value_min_size(elem)
                    .ok_or_else(|| invalid(format!("{}: unknown array element type {elem}", what())))?;
                let count = self.u64(&|| format!("{}: array length", what()))?;
                self.check_count(count, min_size, &|| format!("{}: array length", what()))?;
                if count > MAX_VALUES {
                    return Err(invalid(format!("{}: array length {count} is over {MAX_VALUES}", what())));
                }
                if self.values + count > MAX_VALUES {
                    return Err(invalid(format!("{}: more than {MAX_VALUES} metadata values in all", what())));
                }
                // Exactly as many as there are (growing by doubling would take up to twice the
                // memory, and a vocabulary's three arrays are the largest allocations of a parse):
                // at most MAX_VALUES, and each at least min_size bytes of the file.
                let mut items = Vec::with_capacity(count as usize);
                for i in 0..count {
                    items.push(self.value(elem, depth + 1, &|| format!("{}[{i}]", what()))?);
                }
                Value::Array(items)
            }
            10 => Value::U64(u64::from_le_bytes(self.bytes(what)?)),
            11 => Value::I64(i64::from_le_bytes(self.bytes(what)?)),
            12 => Value::F64(f64::from_le_bytes(self.bytes(what)?)),
            _ => return Err(invalid(format!("{}: unknown metadata value type {ty}", what()))),
        })
    }
}

/// The fewest bytes a value of a type can take (`None`: unknown type).
fn value_min_size(ty: u32) -> Option<u64> {
    Some(match ty {
        0 | 1 | 7 => 1,
        2 | 3 => 2,
        4..=6 => 4,
        8 | 10..=12 => 8,
        9 => 12,
        _ => return None,
    })
}

/// Reading past the prefix [`Gguf::parse_prefix`](super::Gguf::parse_prefix) was given.
#[derive(Debug)]
pub(super) struct PastPrefix;

impl std::fmt::Display for PastPrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("past the bytes read so far")
    }
}

impl std::error::Error for PastPrefix {}

/// The first bytes of a file of `len` bytes.
pub(super) struct Prefix<'a> {
    bytes: &'a [u8],
    len: u64,
    pos: u64,
}

impl<'a> Prefix<'a> {
    /// `bytes`, the first of a file of `len` bytes.
    pub(super) fn new(bytes: &'a [u8], len: u64) -> Self {
        Prefix { bytes, len, pos: 0 }
    }
}

impl Read for Prefix<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let have = self.bytes.get(self.pos as usize..).filter(|_| self.pos <= self.bytes.len() as u64).unwrap_or(&[]);
        if have.is_empty() && !buf.is_empty() && self.pos < self.len {
            return Err(std::io::Error::other(PastPrefix));
        }
        let n = have.len().min(buf.len());
        buf[..n].copy_from_slice(&have[..n]);
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for Prefix<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::new(std::io::ErrorKind::InvalidInput, "seek before the start"))?;
        Ok(self.pos)
    }
}
