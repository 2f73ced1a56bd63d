//! Tests of [`Checkpoint`] (single and sharded files, dtypes, errors naming the file and
//! tensor, non-finite weights) and of [`validate`].

use super::*;
use crate::base::dtype::DType;
use crate::base::host::HostData;
use crate::base::names::{self, proj_bias_key, proj_weight_key, Proj, LM_HEAD_KEY};
use crate::formats::safetensors::{encode_raw, encode_safetensors};
use crate::formats::testdata::{tiny_checkpoint, tiny_config, tiny_config_json, tiny_files};
use crate::platform::test;

fn err(files: HashMap<String, Vec<u8>>) -> String {
    match Checkpoint::from_files(files) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn single_file_roundtrip() {
    let cfg = tiny_config(false);
    let mut files = tiny_files(&cfg, &[], &[]);
    files.insert("tokenizer.json".into(), b"{\"model\":{}}".to_vec());
    let ckpt = Checkpoint::from_files(files).expect("opens");
    assert_eq!(ckpt.config(), &cfg);
    assert_eq!(ckpt.file("tokenizer.json"), Some(&b"{\"model\":{}}"[..]));
    assert!(ckpt.file("merges.txt").is_none());
    let names = ckpt.tensor_names();
    assert_eq!(names.len(), names::expected_tensors(&cfg).len());
    assert!(names.contains(&names::LM_HEAD_KEY.to_string()));
    let q = ckpt.tensor(&names::proj_weight_key(1, Proj::Q)).expect("reads");
    assert_eq!(q.shape, vec![36, 36]);
    assert_eq!(q.dtype(), DType::F32);
    assert_eq!(q.numel(), 36 * 36);
    assert_eq!(ckpt.shape(&names::proj_bias_key(0, Proj::K)), Some(&[12usize][..]));
    // The same values as written (testdata's formula, tensor 1 is layer 0's input norm).
    let norm = ckpt.tensor(&names::input_norm_key(0)).expect("reads");
    let want: Vec<f32> = (0..36).map(|k| ((7919 + k * 104729) % 1000) as f32 / 1000.0 - 0.5).collect();
    assert_eq!(norm.to_f32(), want);
    validate(&ckpt).expect("validates");
}

#[test]
fn dtypes() {
    let f64s: Vec<u8> = [1.5f64, -2.25, 1e-3].iter().flat_map(|x| x.to_le_bytes()).collect();
    let bf16 = [half::bf16::from_f32(0.5).to_bits(), half::bf16::from_f32(-3.0).to_bits()];
    let f16 = [half::f16::from_f32(0.25).to_bits(), half::f16::from_f32(65504.0).to_bits()];
    let bf16b: Vec<u8> = bf16.iter().flat_map(|x| x.to_le_bytes()).collect();
    let f16b: Vec<u8> = f16.iter().flat_map(|x| x.to_le_bytes()).collect();
    let i64b: Vec<u8> = [7i64, 8].iter().flat_map(|x| x.to_le_bytes()).collect();
    let st = encode_raw(&[
        ("a.f64", "F64", &[3], &f64s),
        ("b.bf16", "BF16", &[1, 2], &bf16b),
        ("c.f16", "F16", &[2], &f16b),
        ("d.i64", "I64", &[2], &i64b),
    ]);
    let mut files = HashMap::new();
    files.insert(CONFIG_FILE.to_string(), tiny_config_json(true).into_bytes());
    files.insert(SINGLE_FILE.to_string(), st);
    let ckpt = Checkpoint::from_files(files).expect("opens");

    let a = ckpt.tensor("a.f64").expect("f64 reads");
    assert_eq!(a.data, HostData::F32(vec![1.5, -2.25, 1e-3f64 as f32]));
    let b = ckpt.tensor("b.bf16").expect("bf16 reads");
    assert_eq!((b.dtype(), b.shape.clone()), (DType::BF16, vec![1, 2]));
    assert_eq!(b.data, HostData::BF16(bf16.to_vec()));
    assert_eq!(b.to_f32(), vec![0.5, -3.0]);
    assert_eq!(b.clone().into_f32().data, HostData::F32(vec![0.5, -3.0]));
    let c = ckpt.tensor("c.f16").expect("f16 reads");
    assert_eq!(c.dtype(), DType::F16);
    assert_eq!(c.to_f32(), vec![0.25, 65504.0]);

    let e = ckpt.tensor("d.i64").expect_err("i64 refused").to_string();
    assert!(e.contains("d.i64") && e.contains("I64") && e.contains("model.safetensors"), "{e}");
    let e = ckpt.tensor("e.missing").expect_err("missing").to_string();
    assert_eq!(e, "e.missing: not found in model.safetensors");
}

#[test]
fn host_tensor_encode_roundtrip() {
    let t = HostTensor { shape: vec![3], data: HostData::F16(vec![0x3c00, 0xc000, 0x0001]) };
    let u = HostTensor::from_f32(&[2, 1], vec![1.0, -0.0]);
    let bytes = encode_safetensors(&[("t", &t), ("u", &u)]);
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid safetensors");
    assert_eq!(st.len(), 2);
    let (n, meta) = safetensors::SafeTensors::read_metadata(&bytes).expect("header");
    assert_eq!(n % 8, 0);
    assert_eq!(meta.metadata().as_ref().and_then(|m| m.get("format")).map(String::as_str), Some("pt"));
    let tv = st.tensor("t").expect("t");
    assert_eq!(tv.dtype(), safetensors::Dtype::F16);
    assert_eq!(decode(tv.dtype(), tv.shape(), tv.data()), Some(t));
    let uv = st.tensor("u").expect("u");
    assert_eq!(decode(uv.dtype(), uv.shape(), uv.data()), Some(u));
}

/// Split the tiny model over two shards with an index.
fn sharded(
    cfg: &crate::base::config::ModelConfig,
) -> (HashMap<String, Vec<u8>>, serde_json::Map<String, serde_json::Value>) {
    let single = tiny_files(cfg, &[], &[]);
    let ckpt = Checkpoint::from_files(single).expect("opens");
    let names = ckpt.tensor_names();
    let (first, second) = names.split_at(names.len() / 2);
    let mut files = HashMap::new();
    let mut map = serde_json::Map::new();
    for (shard, part) in [("model-00001-of-00002.safetensors", first), ("model-00002-of-00002.safetensors", second)] {
        let tensors: Vec<(String, HostTensor)> =
            part.iter().map(|n| (n.clone(), ckpt.tensor(n).expect("reads"))).collect();
        let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        files.insert(shard.to_string(), encode_safetensors(&refs));
        for n in part {
            map.insert(n.clone(), shard.into());
        }
    }
    files.insert(CONFIG_FILE.to_string(), tiny_config_json(cfg.tie_word_embeddings).into_bytes());
    (files, map)
}

fn with_index(
    mut files: HashMap<String, Vec<u8>>,
    map: &serde_json::Map<String, serde_json::Value>,
) -> HashMap<String, Vec<u8>> {
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    files.insert(INDEX_FILE.to_string(), index.to_string().into_bytes());
    files
}

#[test]
fn sharded_checkpoint() {
    let cfg = tiny_config(true);
    let (files, map) = sharded(&cfg);
    let ckpt = Checkpoint::from_files(with_index(files.clone(), &map)).expect("opens");
    validate(&ckpt).expect("validates");
    let single = Checkpoint::from_files(tiny_files(&cfg, &[], &[])).expect("opens");
    assert_eq!(ckpt.tensor_names(), single.tensor_names());
    for n in ckpt.tensor_names() {
        assert_eq!(ckpt.tensor(&n).expect("reads"), single.tensor(&n).expect("reads"), "{n}");
    }
    let e = ckpt.tensor("nope").expect_err("missing").to_string();
    assert!(
        e.contains("nope") && e.contains("model-00001-of-00002.safetensors, model-00002-of-00002.safetensors"),
        "{e}"
    );

    // A shard the weight map names is absent.
    let mut f = with_index(files.clone(), &map);
    f.remove("model-00002-of-00002.safetensors");
    let e = err(f);
    assert!(e.starts_with(INDEX_FILE) && e.contains("model-00002-of-00002.safetensors"), "{e}");

    // The weight map puts a tensor in a shard that does not hold it.
    let mut m = map.clone();
    m.insert(names::EMBED_KEY.to_string(), "model-00002-of-00002.safetensors".into());
    m.insert("model.extra.weight".to_string(), "model-00001-of-00002.safetensors".into());
    let e = err(with_index(files.clone(), &m));
    assert!(e.contains(INDEX_FILE), "{e}");
    assert!(e.contains(names::EMBED_KEY) || e.contains("model.extra.weight"), "{e}");

    // A malformed index names the file.
    let mut f = files.clone();
    f.insert(INDEX_FILE.to_string(), b"{\"weight_map\": [}".to_vec());
    let e = err(f);
    assert!(e.starts_with(INDEX_FILE) && e.contains("line 1"), "{e}");
}

#[test]
fn open_errors() {
    let cfg = tiny_config(true);
    let mut f = tiny_files(&cfg, &[], &[]);
    f.remove(CONFIG_FILE);
    assert_eq!(err(f), "config.json: missing from the model files");

    let mut f = tiny_files(&cfg, &[], &[]);
    f.remove(SINGLE_FILE);
    let e = err(f);
    assert!(e.contains(SINGLE_FILE) && e.contains(INDEX_FILE), "{e}");

    let mut f = tiny_files(&cfg, &[], &[]);
    f.insert(CONFIG_FILE.into(), tiny_config_json(true).replace("silu", "gelu_new").into_bytes());
    let e = err(f);
    assert!(e.starts_with("config.json") && e.contains("hidden_act") && e.contains("gelu_new"), "{e}");

    let mut f = tiny_files(&cfg, &[], &[]);
    let truncated = f[SINGLE_FILE][..100].to_vec();
    f.insert(SINGLE_FILE.into(), truncated);
    let e = err(f);
    assert!(e.starts_with("model.safetensors: not a safetensors file"), "{e}");

    let mut f = tiny_files(&cfg, &[], &[]);
    f.insert(SINGLE_FILE.into(), vec![1, 2, 3]);
    let e = err(f);
    assert!(e.starts_with("model.safetensors: not a safetensors file"), "{e}");
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn open_dir_reads_files() {
    let cfg = tiny_config(false);
    let dir = std::env::temp_dir().join(format!("webtune-store-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let (files, map) = sharded(&cfg);
    for (name, bytes) in with_index(files, &map) {
        std::fs::write(dir.join(&name), bytes).expect("write");
    }
    std::fs::write(dir.join("tokenizer.json"), b"{}").expect("write");
    let ckpt = Checkpoint::open_dir(&dir).expect("opens");
    assert_eq!(ckpt.config(), &cfg);
    assert_eq!(ckpt.file("tokenizer.json"), Some(&b"{}"[..]));
    validate(&ckpt).expect("validates");

    std::fs::remove_file(dir.join("model-00001-of-00002.safetensors")).expect("rm");
    let e = Checkpoint::open_dir(&dir).expect_err("shard missing").to_string();
    assert!(e.contains("model-00001-of-00002.safetensors"), "{e}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
    let e = Checkpoint::open_dir(&dir).expect_err("no dir").to_string();
    assert!(e.contains("config.json"), "{e}");
}

#[test]
fn non_finite_weights_are_refused_naming_the_element() {
    let cfg = tiny_config(false);
    let key = names::input_norm_key(0);
    for (bad, dtype) in [(f32::NAN, "f32"), (f32::INFINITY, "bf16"), (f32::NEG_INFINITY, "f16")] {
        let mut values: Vec<f32> = (0..36).map(|k| k as f32 / 36.0).collect();
        values[7] = bad;
        let t = HostTensor::from_f32(&[36], values);
        let t = match dtype {
            "bf16" => HostTensor {
                shape: t.shape.clone(),
                data: HostData::BF16(t.to_f32().iter().map(|&x| half::bf16::from_f32(x).to_bits()).collect()),
            },
            "f16" => HostTensor {
                shape: t.shape.clone(),
                data: HostData::F16(t.to_f32().iter().map(|&x| half::f16::from_f32(x).to_bits()).collect()),
            },
            _ => t,
        };
        let mut files = tiny_files(&cfg, &[key.as_str()], &[]);
        let ckpt = Checkpoint::from_files(files.clone()).expect("opens");
        let mut tensors: Vec<(String, HostTensor)> = ckpt
            .tensor_names()
            .into_iter()
            .map(|n| {
                let t = ckpt.tensor(&n).expect("reads");
                (n, t)
            })
            .collect();
        tensors.push((key.clone(), t));
        let refs: Vec<(&str, &HostTensor)> = tensors.iter().map(|(n, t)| (n.as_str(), t)).collect();
        files.insert(SINGLE_FILE.into(), encode_safetensors(&refs));
        let ckpt = Checkpoint::from_files(files).expect("opens");
        let e = ckpt.tensor(&key).expect_err("a non-finite weight is refused").to_string();
        assert!(e.contains(&key) && e.contains("element 7") && e.contains("NaN or infinite"), "{dtype}: {e}");
    }
}

#[test]
fn validate_tiny() {
    for tie in [true, false] {
        let cfg = tiny_config(tie);
        let ckpt = tiny_checkpoint(&cfg, &[], &[]);
        validate(&ckpt).expect("complete checkpoint validates");
    }
    // Tied, but lm_head.weight shipped anyway: fine.
    let cfg = tiny_config(true);
    let ckpt = tiny_checkpoint(&cfg, &[], &[(LM_HEAD_KEY, vec![cfg.vocab, cfg.hidden])]);
    validate(&ckpt).expect("extra lm_head is fine");
}

#[test]
fn validate_names_bad_tensor() {
    let cfg = tiny_config(false);
    let q1 = proj_weight_key(1, Proj::Q);
    let ckpt = tiny_checkpoint(&cfg, &[], &[(&q1, vec![36, 40])]);
    let e = validate(&ckpt).expect_err("wrong shape").to_string();
    assert_eq!(e, "model.layers.1.self_attn.q_proj.weight: expected shape [36, 36] (from config.json), found [36, 40]");

    let ckpt = tiny_checkpoint(&cfg, &[LM_HEAD_KEY], &[]);
    let e = validate(&ckpt).expect_err("missing lm_head").to_string();
    assert!(e.starts_with("lm_head.weight: missing") && e.contains("[50, 36]"), "{e}");

    let kb = proj_bias_key(0, Proj::K);
    let ckpt = tiny_checkpoint(&cfg, &[&kb], &[]);
    let e = validate(&ckpt).expect_err("missing bias").to_string();
    assert!(e.starts_with("model.layers.0.self_attn.k_proj.bias: missing"), "{e}");

    // The same files with a config that wants more layers.
    let mut files = tiny_files(&cfg, &[], &[]);
    let text = String::from_utf8(files["config.json"].clone())
        .expect("utf8")
        .replace("\"num_hidden_layers\":2", "\"num_hidden_layers\":3");
    files.insert("config.json".into(), text.into_bytes());
    let ckpt = Checkpoint::from_files(files).expect("opens");
    let e = validate(&ckpt).expect_err("missing layer").to_string();
    assert!(e.starts_with("model.layers.2.input_layernorm.weight: missing"), "{e}");
}
