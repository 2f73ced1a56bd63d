//! Tests of peft.rs.

use crate::platform::test;

use super::*;
use crate::base::host::HostData;
use crate::formats::testdata::tiny_config;

/// adapter_config.json as PEFT 0.13 writes it for a Qwen2.5 LoRA.
const PEFT_CONFIG: &str = r#"{
  "alpha_pattern": {},
  "auto_mapping": null,
  "base_model_name_or_path": "Qwen/Qwen2.5-0.5B-Instruct",
  "bias": "none",
  "fan_in_fan_out": false,
  "inference_mode": true,
  "init_lora_weights": true,
  "layer_replication": null,
  "layers_pattern": null,
  "layers_to_transform": null,
  "loftq_config": {},
  "lora_alpha": 16,
  "lora_dropout": 0.05,
  "megatron_config": null,
  "megatron_core": "megatron.core",
  "modules_to_save": null,
  "peft_type": "LORA",
  "r": 8,
  "rank_pattern": {},
  "revision": null,
  "target_modules": ["v_proj", "down_proj", "q_proj", "up_proj", "gate_proj", "o_proj", "k_proj"],
  "task_type": "CAUSAL_LM",
  "use_dora": false,
  "use_rslora": false
}"#;

fn edit(changes: &[(&str, serde_json::Value)]) -> String {
    let mut v: serde_json::Value = serde_json::from_str(PEFT_CONFIG).expect("parses");
    for (k, x) in changes {
        v[*k] = x.clone();
    }
    v.to_string()
}

fn cfg_err(text: &str) -> String {
    match AdapterConfig::from_json(text) {
        Ok(c) => panic!("expected an error, got {c:?}"),
        Err(e) => e.to_string(),
    }
}

use serde_json::json;

#[test]
fn reads_peft_config() {
    let c = AdapterConfig::from_json(PEFT_CONFIG).expect("parses");
    assert_eq!((c.r, c.lora_alpha, c.scale()), (8, 16.0, 2.0));
    assert_eq!(c.target_modules, Proj::all().to_vec());
    assert_eq!(c.base_model_name_or_path.as_deref(), Some("Qwen/Qwen2.5-0.5B-Instruct"));
    assert_eq!(c.lora_dropout, 0.05);
    // Written back, it reads the same.
    assert_eq!(AdapterConfig::from_json(&c.to_json()).expect("round trip"), c);
    let v: serde_json::Value = serde_json::from_str(&c.to_json()).expect("json");
    assert_eq!(v["lora_alpha"], json!(16));
    assert_eq!(v["peft_type"], json!("LORA"));
    assert_eq!(v["task_type"], json!("CAUSAL_LM"));
    assert_eq!(v["target_modules"][0], json!("q_proj"));

    let c = AdapterConfig::from_json(&edit(&[("target_modules", json!("all-linear")), ("lora_alpha", json!(4.5))]))
        .expect("all-linear");
    assert_eq!(c.target_modules.len(), 7);
    assert_eq!(c.lora_alpha, 4.5);
    let c = AdapterConfig::from_json(&edit(&[("target_modules", json!(["q", "v_proj", "q_proj"]))])).expect("short");
    assert_eq!(c.target_modules, vec![Proj::Q, Proj::V]);
}

#[test]
fn refuses_unsupported_config() {
    for (field, value) in [
        ("use_rslora", json!(true)),
        ("use_dora", json!(true)),
        ("bias", json!("lora_only")),
        ("fan_in_fan_out", json!(true)),
        ("rank_pattern", json!({"q_proj": 16})),
        ("alpha_pattern", json!({"q_proj": 32})),
        ("modules_to_save", json!(["lm_head"])),
        ("layers_to_transform", json!([0, 1])),
        ("peft_type", json!("IA3")),
        ("task_type", json!("SEQ_CLS")),
        ("init_lora_weights", json!("pissa")),
        ("r", json!(0)),
    ] {
        let e = cfg_err(&edit(&[(field, value.clone())]));
        assert!(e.starts_with("adapter_config.json") && e.contains(field), "{field}: {e}");
    }
    let e = cfg_err(&edit(&[("target_modules", json!(".*\\.(q|v)_proj"))]));
    assert!(e.contains("target_modules") && e.contains("regular expression"), "{e}");
    let e = cfg_err(&edit(&[("target_modules", json!(["q_proj", "lm_head"]))]));
    assert!(e.contains("target_modules") && e.contains("lm_head"), "{e}");
    let e = cfg_err(&edit(&[("target_modules", json!([]))]));
    assert!(e.contains("target_modules"), "{e}");
    let e = cfg_err(&edit(&[("target_modules", serde_json::Value::Null)]));
    assert!(e.contains("target_modules"), "{e}");
    let e = cfg_err("{\"r\": 8,\n\"lora_alpha\": }");
    assert!(e.starts_with("adapter_config.json") && e.contains("line 2"), "{e}");
    let e = cfg_err("{\"lora_alpha\": 16, \"target_modules\": [\"q_proj\"]}");
    assert!(e.contains("`r`"), "{e}");
}

#[test]
fn key_names() {
    assert_eq!(lora_a_key(0, Proj::Q), "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
    assert_eq!(lora_b_key(23, Proj::Down), "base_model.model.model.layers.23.mlp.down_proj.lora_B.weight");
    for layer in [0, 7, 123] {
        for p in Proj::all() {
            assert_eq!(parse_lora_key(&lora_a_key(layer, p)), Some((layer, p, crate::base::names::AB::A)));
            assert_eq!(parse_lora_key(&lora_b_key(layer, p)), Some((layer, p, crate::base::names::AB::B)));
        }
    }
    for bad in [
        "base_model.model.model.layers.01.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.x.self_attn.q_proj.lora_A.weight",
        "base_model.model.model.layers.1.mlp.q_proj.lora_A.weight",
        "base_model.model.model.layers.1.self_attn.q_proj.lora_A.default.weight",
        "base_model.model.lm_head.lora_A.weight",
        "model.layers.1.self_attn.q_proj.weight",
    ] {
        assert_eq!(parse_lora_key(bad), None, "{bad}");
    }
}

#[test]
fn new_init_is_peft_like() {
    let cfg = tiny_config(true);
    let a = Adapter::new_init(&cfg, 5, 10.0, &[Proj::V, Proj::Q, Proj::Down, Proj::V], 42);
    assert_eq!(a.config.target_modules, vec![Proj::Q, Proj::V, Proj::Down]);
    assert_eq!(a.config.scale(), 2.0);
    assert_eq!(a.tensors.len(), 2 * 3 * 2);
    a.validate(&cfg).expect("validates");
    let ta = &a.tensors[&lora_a_key(1, Proj::Down)];
    assert_eq!(ta.shape, vec![5, 20]);
    let bound = 1.0 / (20f32).sqrt();
    let v = ta.to_f32();
    assert!(v.iter().all(|x| x.abs() <= bound), "A within ±1/sqrt(in)");
    let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
    assert!(max > 0.8 * bound, "A spreads over the range: {max} vs {bound}");
    let tb = &a.tensors[&lora_b_key(0, Proj::V)];
    assert_eq!(tb.shape, vec![12, 5]);
    assert!(tb.to_f32().iter().all(|&x| x == 0.0));
    // Seeded: same seed same values, other seed other values.
    assert_eq!(a, Adapter::new_init(&cfg, 5, 10.0, &[Proj::Q, Proj::V, Proj::Down], 42));
    assert_ne!(a, Adapter::new_init(&cfg, 5, 10.0, &[Proj::Q, Proj::V, Proj::Down], 43));
}

#[test]
fn bytes_round_trip() {
    let cfg = tiny_config(false);
    let mut a = Adapter::new_init(&cfg, 3, 6.0, &Proj::all(), 7);
    a.config.base_model_name_or_path = Some("tiny".into());
    let b = Adapter::from_files(a.config_json().as_bytes(), &a.to_safetensors_bytes()).expect("reads back");
    assert_eq!(a, b);
    b.validate(&cfg).expect("validates");
}

#[test]
fn reads_16_and_64_bit_adapters() {
    let cfg = tiny_config(true);
    let a = Adapter::new_init(&cfg, 2, 2.0, &[Proj::O], 1);
    // Store A as f64 and B as bf16, as PEFT does for models of those dtypes.
    let mut owned: Vec<(String, &'static str, Vec<usize>, Vec<u8>)> = Vec::new();
    for (name, t) in &a.tensors {
        let v = t.to_f32();
        if name.contains("lora_A") {
            owned.push((
                name.clone(),
                "F64",
                t.shape.clone(),
                v.iter().flat_map(|&x| (x as f64).to_le_bytes()).collect(),
            ));
        } else {
            let bits = v.iter().flat_map(|&x| half::bf16::from_f32(x).to_bits().to_le_bytes()).collect();
            owned.push((name.clone(), "BF16", t.shape.clone(), bits));
        }
    }
    let refs: Vec<(&str, &str, &[usize], &[u8])> =
        owned.iter().map(|(n, d, s, b)| (n.as_str(), *d, s.as_slice(), b.as_slice())).collect();
    let b = Adapter::from_files(a.config_json().as_bytes(), &encode_raw(&refs)).expect("reads");
    assert_eq!(a, b);
    assert!(b.tensors.values().all(|t| matches!(t.data, HostData::F32(_))));

    let i32s = [1i32, 2].iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let bad = encode_raw(&[("base_model.model.model.layers.0.self_attn.o_proj.lora_A.weight", "I32", &[2], &i32s)]);
    let e = Adapter::from_files(a.config_json().as_bytes(), &bad).expect_err("i32").to_string();
    assert!(e.contains("o_proj.lora_A.weight") && e.contains("I32"), "{e}");
    let e = Adapter::from_files(a.config_json().as_bytes(), b"nope").expect_err("garbage").to_string();
    assert!(e.starts_with("adapter_model.safetensors"), "{e}");
}

#[test]
fn validate_names_the_problem() {
    let cfg = tiny_config(true);
    let base = Adapter::new_init(&cfg, 4, 8.0, &[Proj::Q, Proj::Gate], 3);

    let mut a = base.clone();
    a.tensors.remove(&lora_b_key(1, Proj::Gate));
    let e = a.validate(&cfg).expect_err("missing").to_string();
    assert!(e.contains(&lora_b_key(1, Proj::Gate)) && e.contains("missing"), "{e}");

    let mut a = base.clone();
    a.tensors.insert(lora_a_key(0, Proj::Q), HostTensor::from_f32(&[4, 35], vec![0.0; 140]));
    let e = a.validate(&cfg).expect_err("shape").to_string();
    assert_eq!(
        e,
        "adapter_model.safetensors: base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight: \
             expected shape [4, 36] (r, in_features), found [4, 35]"
    );

    let mut a = base.clone();
    a.tensors.insert(lora_b_key(0, Proj::Q), HostTensor::from_f32(&[36, 3], vec![0.0; 108]));
    let e = a.validate(&cfg).expect_err("rank").to_string();
    assert!(e.contains("q_proj.lora_B.weight") && e.contains("[36, 4]") && e.contains("[36, 3]"), "{e}");

    let mut a = base.clone();
    a.tensors.insert(lora_a_key(0, Proj::V), HostTensor::from_f32(&[4, 36], vec![0.0; 144]));
    let e = a.validate(&cfg).expect_err("untargeted").to_string();
    assert!(e.contains("v_proj.lora_A.weight") && e.contains("not in target_modules"), "{e}");

    let mut a = base.clone();
    a.tensors.insert(lora_a_key(2, Proj::Q), HostTensor::from_f32(&[4, 36], vec![0.0; 144]));
    let e = a.validate(&cfg).expect_err("layer").to_string();
    assert!(e.contains("layers.2.") && e.contains("2 layers"), "{e}");

    let mut a = base.clone();
    a.tensors.insert("base_model.model.lm_head.weight".into(), HostTensor::from_f32(&[1], vec![0.0]));
    let e = a.validate(&cfg).expect_err("extra").to_string();
    assert!(e.contains("base_model.model.lm_head.weight") && e.contains("unexpected"), "{e}");
}

#[test]
fn f32_safetensors_for_gradients() {
    let bytes = write_f32_safetensors(&[
        ("loss".into(), vec![], vec![2.5]),
        ("g".into(), vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, -6.0]),
    ]);
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("valid");
    let loss = st.tensor("loss").expect("loss");
    assert_eq!((loss.dtype(), loss.shape()), (safetensors::Dtype::F32, &[][..]));
    assert_eq!(loss.data(), &2.5f32.to_le_bytes());
    let g = st.tensor("g").expect("g");
    assert_eq!(g.shape(), &[2, 3]);
    assert_eq!(&g.data()[20..24], &(-6.0f32).to_le_bytes());
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn save_and_open_dir() {
    let cfg = tiny_config(true);
    let a = Adapter::new_init(&cfg, 2, 4.0, &[Proj::K, Proj::Up], 9);
    let dir = std::env::temp_dir().join(format!("webtune-peft-test-{}", std::process::id()));
    a.save_dir(&dir).expect("saves");
    assert_eq!(Adapter::open_dir(&dir).expect("opens"), a);
    std::fs::remove_file(dir.join(crate::base::names::ADAPTER_WEIGHTS_FILE)).expect("rm");
    let e = Adapter::open_dir(&dir).expect_err("missing").to_string();
    assert!(e.contains(crate::base::names::ADAPTER_WEIGHTS_FILE), "{e}");
    std::fs::remove_dir_all(&dir).expect("cleanup");
}
