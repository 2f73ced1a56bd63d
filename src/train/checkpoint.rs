//! Training checkpoints: one safetensors file holding the LoRA parameters, the
//! optimizer state and (in its metadata) the trainer state — step, epoch, data
//! cursor, seed, losses and the configuration — so a single atomic rename
//! replaces one complete state with the next. The metadata also holds an FNV-1a 64
//! checksum of the state and of every tensor's bytes, so a file damaged on disk (or half
//! written by something other than [`crate::platform::write_atomic`]) is refused, never read back as valid.

use crate::base::error::{Error, Result};
use std::collections::HashMap;

/// Key of the JSON trainer state in the safetensors metadata.
const STATE_KEY: &str = "webtune.train_state";
/// Key of the checksum (state JSON, then each tensor's name and bytes in name order).
const CHECKSUM_KEY: &str = "webtune.checksum";

fn checksum<'a>(json: &str, tensors: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h = (h ^ b as u64).wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(json.as_bytes());
    for (name, bytes) in tensors {
        eat(name.as_bytes());
        eat(&(bytes.len() as u64).to_le_bytes());
        eat(bytes);
    }
    format!("{h:016x}")
}

pub type NamedF32 = (String, Vec<usize>, Vec<f32>);

/// Encode a checkpoint: `state` is serialized to JSON into the metadata.
pub fn encode<S: serde::Serialize>(state: &S, tensors: &[NamedF32]) -> Result<Vec<u8>> {
    let json = serde_json::to_string(state).map_err(|e| Error::msg(format!("checkpoint state: {e}")))?;
    let bytes: Vec<Vec<u8>> = tensors.iter().map(|(_, _, v)| bytemuck::cast_slice(v).to_vec()).collect();
    let views = tensors
        .iter()
        .zip(&bytes)
        .map(|((name, shape, _), b)| {
            safetensors::tensor::TensorView::new(safetensors::Dtype::F32, shape.clone(), b)
                .map(|v| (name.clone(), v))
                .map_err(|e| Error::msg(format!("checkpoint tensor {name}: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| tensors[a].0.cmp(&tensors[b].0));
    let sum = checksum(&json, order.iter().map(|&i| (tensors[i].0.as_str(), bytes[i].as_slice())));
    let mut meta = HashMap::new();
    meta.insert(CHECKSUM_KEY.to_string(), sum);
    meta.insert(STATE_KEY.to_string(), json);
    meta.insert("format".to_string(), "pt".to_string());
    safetensors::serialize(views, Some(meta)).map_err(|e| Error::msg(format!("checkpoint: {e}")))
}

/// Decode a checkpoint written by [`encode`]; `what` names the file in errors.
pub fn decode<S: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<(S, Vec<NamedF32>)> {
    let st = safetensors::SafeTensors::deserialize(bytes)
        .map_err(|e| Error::msg(format!("{what}: not a valid checkpoint: {e}")))?;
    let (_, meta) = safetensors::SafeTensors::read_metadata(bytes)
        .map_err(|e| Error::msg(format!("{what}: not a valid checkpoint: {e}")))?;
    let json = meta
        .metadata()
        .as_ref()
        .and_then(|m| m.get(STATE_KEY))
        .ok_or_else(|| Error::msg(format!("{what}: no trainer state in the checkpoint metadata")))?;
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let expected = meta.metadata().as_ref().and_then(|m| m.get(CHECKSUM_KEY));
    let found = checksum(json, views.iter().map(|(n, v)| (n.as_str(), v.data())));
    match expected {
        Some(e) if *e == found => {}
        Some(e) => {
            return Err(Error::msg(format!(
                "{what}: damaged checkpoint: checksum {found} where {e} was written; delete it (or run with --fresh) to start over"
            )))
        }
        None => return Err(Error::msg(format!("{what}: no checksum in the checkpoint metadata"))),
    }
    let state: S = serde_json::from_str(json).map_err(|e| Error::msg(format!("{what}: trainer state: {e}")))?;
    let mut tensors = Vec::new();
    for (name, view) in views {
        if view.dtype() != safetensors::Dtype::F32 {
            return Err(Error::msg(format!("{what}: {name}: expected F32, found {:?}", view.dtype())));
        }
        let vals: Vec<f32> = bytemuck::pod_collect_to_vec(view.data());
        tensors.push((name, view.shape().to_vec(), vals));
    }
    Ok((state, tensors))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::test;

    #[derive(serde::Serialize, serde::Deserialize, PartialEq, Debug)]
    struct S {
        step: u32,
        losses: Vec<f32>,
    }

    #[test]
    fn round_trip() {
        let s = S { step: 7, losses: vec![1.5, 0.25] };
        let t = vec![
            ("b".to_string(), vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]),
            ("a".to_string(), vec![1], vec![-1.0]),
        ];
        let bytes = encode(&s, &t).unwrap();
        let (s2, t2): (S, Vec<NamedF32>) = decode(&bytes, "x").unwrap();
        assert_eq!(s, s2);
        assert_eq!(t2[0], t[1]);
        assert_eq!(t2[1], t[0]);
    }

    #[test]
    fn a_flipped_byte_is_detected() {
        let t = vec![("a".to_string(), vec![4], vec![1.0, 2.0, 3.0, 4.0])];
        let bytes = encode(&S { step: 3, losses: vec![0.5] }, &t).unwrap();
        // Flip one bit in every byte position of the data (the last 16 bytes) and of the header.
        for i in (bytes.len() - 16..bytes.len()).chain([10, 40]) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x04;
            let err = decode::<S>(&bad, "ckpt.safetensors").expect_err("a damaged checkpoint is refused");
            assert!(err.to_string().contains("ckpt.safetensors"), "byte {i}: {err}");
        }
    }

    #[test]
    fn truncated_is_an_error() {
        let bytes = encode(&S { step: 1, losses: vec![] }, &[("a".into(), vec![4], vec![0.0; 4])]).unwrap();
        let err = decode::<S>(&bytes[..bytes.len() - 3], "ckpt.safetensors").unwrap_err().to_string();
        assert!(err.contains("ckpt.safetensors"), "{err}");
    }
}
