//! safetensors, tensor by tensor: decoding one tensor's bytes into a host tensor, and writing
//! files (8-byte little-endian header length, JSON header padded with spaces to a multiple of
//! 8, then the data in the given order).

use crate::base::host::{HostData, HostTensor};
use safetensors::Dtype;

/// Decode the little-endian bytes of one safetensors tensor; F64 is narrowed to
/// F32. `None` for a dtype the engine does not read.
pub(crate) fn decode(dtype: Dtype, shape: &[usize], bytes: &[u8]) -> Option<HostTensor> {
    let data = match dtype {
        Dtype::F32 => {
            HostData::F32(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
        }
        Dtype::F64 => HostData::F32(
            bytes
                .chunks_exact(8)
                .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]) as f32)
                .collect(),
        ),
        Dtype::BF16 => HostData::BF16(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
        Dtype::F16 => HostData::F16(bytes.chunks_exact(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect()),
        _ => return None,
    };
    Some(HostTensor { shape: shape.to_vec(), data })
}

/// Serialize raw tensors: (name, dtype name as in safetensors: "F32", "BF16", ...,
/// shape, little-endian bytes). Names must be unique and each byte length must
/// match its shape and dtype (caller's invariant; checked by assert).
pub(crate) fn encode_raw(tensors: &[(&str, &str, &[usize], &[u8])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut meta = serde_json::Map::new();
    meta.insert("format".into(), "pt".into());
    header.insert("__metadata__".into(), serde_json::Value::Object(meta));
    let mut offset = 0usize;
    for &(name, dtype, shape, bytes) in tensors {
        let prev = header.insert(
            name.to_string(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes.len()]}),
        );
        assert!(prev.is_none(), "safetensors: tensor name {name} given twice");
        offset += bytes.len();
    }
    let mut head = serde_json::Value::Object(header).to_string().into_bytes();
    head.resize(head.len().next_multiple_of(8), b' ');
    let mut out = Vec::with_capacity(8 + head.len() + offset);
    out.extend_from_slice(&(head.len() as u64).to_le_bytes());
    out.extend_from_slice(&head);
    for &(_, _, _, bytes) in tensors {
        out.extend_from_slice(bytes);
    }
    out
}

/// Serialize host tensors in their own dtype (F32, BF16, F16).
pub fn encode_safetensors(tensors: &[(&str, &HostTensor)]) -> Vec<u8> {
    let encoded: Vec<(&str, &str, &[usize], Vec<u8>)> = tensors
        .iter()
        .map(|&(name, t)| {
            assert_eq!(t.numel(), data_len(&t.data), "safetensors: {name}: data length does not match shape");
            let (dtype, bytes) = match &t.data {
                HostData::F32(v) => ("F32", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                HostData::BF16(v) => ("BF16", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
                HostData::F16(v) => ("F16", v.iter().flat_map(|x| x.to_le_bytes()).collect()),
            };
            (name, dtype, t.shape.as_slice(), bytes)
        })
        .collect();
    let refs: Vec<(&str, &str, &[usize], &[u8])> =
        encoded.iter().map(|(n, d, s, b)| (*n, *d, *s, b.as_slice())).collect();
    encode_raw(&refs)
}

fn data_len(d: &HostData) -> usize {
    match d {
        HostData::F32(v) => v.len(),
        HostData::BF16(v) | HostData::F16(v) => v.len(),
    }
}
