//! PEFT LoRA adapters: adapter_config.json (a serde mirror of what PEFT writes)
//! and adapter_model.safetensors with keys
//! `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight` (A: (r, in))
//! and `...lora_B.weight` (B: (out, r)). The key names are produced here only.
//! Supports plain LoRA (scale alpha / r); rsLoRA, DoRA, trained biases, per-module
//! ranks and other extras are rejected, naming the field.

use crate::base::config::ModelConfig;
use crate::base::host::HostTensor;
use crate::base::names::{lora_a_key, lora_b_key, parse_lora_key, Proj};
use crate::formats::safetensors::{decode, encode_raw};
use serde::Deserialize;
use std::collections::BTreeMap;

pub use crate::base::error::PeftError;

/// adapter_config.json resolved: what the engine uses.
#[derive(Clone, Debug, PartialEq)]
pub struct AdapterConfig {
    pub r: usize,
    pub lora_alpha: f64,
    /// In checkpoint order (q, k, v, o, gate, up, down), no duplicates.
    pub target_modules: Vec<Proj>,
    pub base_model_name_or_path: Option<String>,
    pub revision: Option<String>,
    /// Kept for the config we write back; the engine trains without dropout.
    pub lora_dropout: f64,
}

impl AdapterConfig {
    /// s = lora_alpha / r
    pub fn scale(&self) -> f64 {
        self.lora_alpha / self.r as f64
    }
}

/// adapter_config.json as PEFT writes it; fields that change the math are read
/// so they can be refused.
#[derive(Debug, Deserialize)]
struct RawConfig {
    peft_type: Option<String>,
    task_type: Option<String>,
    r: usize,
    lora_alpha: f64,
    lora_dropout: Option<f64>,
    target_modules: Option<serde_json::Value>,
    bias: Option<String>,
    fan_in_fan_out: Option<bool>,
    use_rslora: Option<bool>,
    use_dora: Option<bool>,
    lora_bias: Option<bool>,
    use_qalora: Option<bool>,
    modules_to_save: Option<serde_json::Value>,
    layers_to_transform: Option<serde_json::Value>,
    rank_pattern: Option<serde_json::Value>,
    alpha_pattern: Option<serde_json::Value>,
    layer_replication: Option<serde_json::Value>,
    exclude_modules: Option<serde_json::Value>,
    trainable_token_indices: Option<serde_json::Value>,
    target_parameters: Option<serde_json::Value>,
    init_lora_weights: Option<serde_json::Value>,
    base_model_name_or_path: Option<String>,
    revision: Option<String>,
}

fn refuse(field: &'static str, reason: impl Into<String>) -> PeftError {
    PeftError::Config { field, reason: reason.into() }
}

/// null, {}, [] and "" all mean "not used".
fn is_empty(v: &Option<serde_json::Value>) -> bool {
    match v {
        None | Some(serde_json::Value::Null) => true,
        Some(serde_json::Value::Object(o)) => o.is_empty(),
        Some(serde_json::Value::Array(a)) => a.is_empty(),
        Some(serde_json::Value::String(s)) => s.is_empty(),
        Some(_) => false,
    }
}

fn parse_targets(v: &Option<serde_json::Value>) -> Result<Vec<Proj>, PeftError> {
    const FIELD: &str = "target_modules";
    let list = match v {
        None | Some(serde_json::Value::Null) => return Err(refuse(FIELD, "missing; list the projections")),
        Some(serde_json::Value::String(s)) if s == "all-linear" => return Ok(Proj::all().to_vec()),
        Some(serde_json::Value::String(s)) => {
            return Err(refuse(
                FIELD,
                format!("{s:?} is a regular expression; only a list of module names is supported"),
            ))
        }
        Some(serde_json::Value::Array(a)) => a,
        Some(other) => return Err(refuse(FIELD, format!("expected a list of module names, found {other}"))),
    };
    let mut out = Vec::new();
    for item in list {
        let name = item.as_str().ok_or_else(|| refuse(FIELD, format!("expected a module name, found {item}")))?;
        let p = Proj::parse(name).ok_or_else(|| {
            refuse(FIELD, format!("{name:?} is not a decoder projection (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj)"))
        })?;
        if !out.contains(&p) {
            out.push(p);
        }
    }
    if out.is_empty() {
        return Err(refuse(FIELD, "the list is empty"));
    }
    out.sort();
    Ok(out)
}

impl AdapterConfig {
    /// Parse and check the text of an adapter_config.json.
    pub fn from_json(text: &str) -> Result<AdapterConfig, PeftError> {
        let raw: RawConfig = serde_json::from_str(text)?;
        match raw.peft_type.as_deref() {
            None | Some("LORA") => {}
            Some(t) => return Err(refuse("peft_type", format!("{t:?} is not supported (only \"LORA\")"))),
        }
        match raw.task_type.as_deref() {
            None | Some("CAUSAL_LM") => {}
            Some(t) => return Err(refuse("task_type", format!("{t:?} is not supported (only \"CAUSAL_LM\")"))),
        }
        if raw.r == 0 {
            return Err(refuse("r", "must be positive, found 0"));
        }
        if !raw.lora_alpha.is_finite() {
            return Err(refuse("lora_alpha", format!("must be finite, found {}", raw.lora_alpha)));
        }
        match raw.bias.as_deref() {
            None | Some("none") => {}
            Some(b) => return Err(refuse("bias", format!("{b:?} is not supported (only \"none\")"))),
        }
        for (field, flag) in [
            ("fan_in_fan_out", raw.fan_in_fan_out),
            ("use_rslora", raw.use_rslora),
            ("use_dora", raw.use_dora),
            ("lora_bias", raw.lora_bias),
            ("use_qalora", raw.use_qalora),
        ] {
            if flag == Some(true) {
                return Err(refuse(field, "true is not supported"));
            }
        }
        for (field, v) in [
            ("modules_to_save", &raw.modules_to_save),
            ("layers_to_transform", &raw.layers_to_transform),
            ("rank_pattern", &raw.rank_pattern),
            ("alpha_pattern", &raw.alpha_pattern),
            ("layer_replication", &raw.layer_replication),
            ("exclude_modules", &raw.exclude_modules),
            ("trainable_token_indices", &raw.trainable_token_indices),
            ("target_parameters", &raw.target_parameters),
        ] {
            if !is_empty(v) {
                let shown = v.as_ref().map(|x| x.to_string()).unwrap_or_default();
                return Err(refuse(field, format!("{shown} is not supported (must be null or empty)")));
            }
        }
        // Initialisations that also change the base weights (PiSSA, OLoRA, LoftQ, ...) are refused.
        match &raw.init_lora_weights {
            None | Some(serde_json::Value::Bool(_)) => {}
            Some(serde_json::Value::String(s)) if s == "gaussian" => {}
            Some(v) => {
                return Err(refuse("init_lora_weights", format!("{v} is not supported (true, false or \"gaussian\")")))
            }
        }
        Ok(AdapterConfig {
            r: raw.r,
            lora_alpha: raw.lora_alpha,
            target_modules: parse_targets(&raw.target_modules)?,
            base_model_name_or_path: raw.base_model_name_or_path,
            revision: raw.revision,
            lora_dropout: raw.lora_dropout.unwrap_or(0.0),
        })
    }

    /// A PEFT-compatible adapter_config.json (the fields PEFT writes, defaults for the rest).
    pub fn to_json(&self) -> String {
        let alpha = if self.lora_alpha.fract() == 0.0 && self.lora_alpha.abs() < 1e15 {
            serde_json::json!(self.lora_alpha as i64)
        } else {
            serde_json::json!(self.lora_alpha)
        };
        let targets: Vec<&str> = self.target_modules.iter().map(|p| p.name()).collect();
        let v = serde_json::json!({
            "alpha_pattern": {},
            "auto_mapping": null,
            "base_model_name_or_path": self.base_model_name_or_path,
            "bias": "none",
            "fan_in_fan_out": false,
            "inference_mode": true,
            "init_lora_weights": true,
            "layer_replication": null,
            "layers_pattern": null,
            "layers_to_transform": null,
            "loftq_config": {},
            "lora_alpha": alpha,
            "lora_bias": false,
            "lora_dropout": self.lora_dropout,
            "megatron_config": null,
            "megatron_core": "megatron.core",
            "modules_to_save": null,
            "peft_type": "LORA",
            "r": self.r,
            "rank_pattern": {},
            "revision": self.revision,
            "target_modules": targets,
            "task_type": "CAUSAL_LM",
            "use_dora": false,
            "use_rslora": false
        });
        serde_json::to_string_pretty(&v).unwrap_or_default()
    }
}

/// A LoRA adapter in host memory, tensors as f32 keyed by PEFT name.
#[derive(Clone, Debug, PartialEq)]
pub struct Adapter {
    pub config: AdapterConfig,
    pub tensors: BTreeMap<String, HostTensor>,
}

impl Adapter {
    /// Read adapter_config.json and adapter_model.safetensors; any of F64, F32,
    /// F16, BF16 becomes f32. Keys are checked against a model by [`Adapter::validate`].
    pub fn from_files(config_json: &[u8], safetensors: &[u8]) -> Result<Adapter, PeftError> {
        let text = std::str::from_utf8(config_json).map_err(|e| refuse("(file)", format!("not UTF-8: {e}")))?;
        let config = AdapterConfig::from_json(text)?;
        let st = safetensors::SafeTensors::deserialize(safetensors)
            .map_err(|e| PeftError::Safetensors { reason: e.to_string() })?;
        let mut tensors = BTreeMap::new();
        for (name, view) in st.iter() {
            let t = decode(view.dtype(), view.shape(), view.data())
                .ok_or_else(|| PeftError::Dtype { tensor: name.to_string(), dtype: view.dtype().to_string() })?;
            tensors.insert(name.to_string(), t.into_f32());
        }
        Ok(Adapter { config, tensors })
    }

    /// An adapter from named f32 tensors (e.g. read back from the GPU).
    pub fn from_f32(config: AdapterConfig, tensors: Vec<(String, Vec<usize>, Vec<f32>)>) -> Adapter {
        let tensors = tensors.into_iter().map(|(n, s, d)| (n, HostTensor::from_f32(&s, d))).collect();
        Adapter { config, tensors }
    }

    /// Read `dir/adapter_config.json` and `dir/adapter_model.safetensors`.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn open_dir(dir: &std::path::Path) -> Result<Adapter, PeftError> {
        let read = |name: &str| {
            let path = dir.join(name);
            std::fs::read(&path).map_err(|source| PeftError::Io { path: path.display().to_string(), source })
        };
        let config = read(crate::base::names::ADAPTER_CONFIG_FILE)?;
        if !dir.join(crate::base::names::ADAPTER_WEIGHTS_FILE).is_file() && dir.join("adapter_model.bin").is_file() {
            return Err(PeftError::Io {
                path: dir.join("adapter_model.bin").display().to_string(),
                source: std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "pickled adapters are not read; save with safe_serialization=True",
                ),
            });
        }
        let weights = read(crate::base::names::ADAPTER_WEIGHTS_FILE)?;
        Adapter::from_files(&config, &weights)
    }

    /// Write `dir/adapter_config.json` and `dir/adapter_model.safetensors` (f32),
    /// creating `dir` if needed.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn save_dir(&self, dir: &std::path::Path) -> Result<(), PeftError> {
        let io = |path: std::path::PathBuf| move |source| PeftError::Io { path: path.display().to_string(), source };
        std::fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
        std::fs::write(dir.join(crate::base::names::ADAPTER_CONFIG_FILE), self.config_json())
            .map_err(io(dir.join(crate::base::names::ADAPTER_CONFIG_FILE)))?;
        std::fs::write(dir.join(crate::base::names::ADAPTER_WEIGHTS_FILE), self.to_safetensors_bytes())
            .map_err(io(dir.join(crate::base::names::ADAPTER_WEIGHTS_FILE)))?;
        Ok(())
    }

    /// Check the tensors against a model: each targeted projection of each layer
    /// has A (r, in) and B (out, r), and nothing else is present.
    pub fn validate(&self, cfg: &ModelConfig) -> Result<(), PeftError> {
        let r = self.config.r;
        let targets = &self.config.target_modules;
        for key in self.tensors.keys() {
            let bad = |reason: String| PeftError::Tensor { tensor: key.clone(), reason };
            let (layer, p, _) = parse_lora_key(key)
                .ok_or_else(|| bad("unexpected tensor: not the lora_A/lora_B weight of a decoder projection".into()))?;
            if layer >= cfg.layers {
                return Err(bad(format!("layer {layer} does not exist (the model has {} layers)", cfg.layers)));
            }
            if !targets.contains(&p) {
                return Err(bad(format!("{} is not in target_modules {:?}", p.name(), self.target_names())));
            }
        }
        for layer in 0..cfg.layers {
            for &p in targets {
                let (out, inp) = p.dims(cfg);
                for (key, expected, what) in [
                    (lora_a_key(layer, p), [r, inp], "r, in_features"),
                    (lora_b_key(layer, p), [out, r], "out_features, r"),
                ] {
                    let t = self.tensors.get(&key).ok_or_else(|| PeftError::Tensor {
                        tensor: key.clone(),
                        reason: format!("missing ({} is in target_modules)", p.name()),
                    })?;
                    if t.shape != expected {
                        return Err(PeftError::Shape {
                            tensor: key,
                            expected: expected.to_vec(),
                            found: t.shape.clone(),
                            what,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    fn target_names(&self) -> Vec<&'static str> {
        self.config.target_modules.iter().map(|p| p.name()).collect()
    }

    /// adapter_model.safetensors content, all tensors as f32.
    pub fn to_safetensors_bytes(&self) -> Vec<u8> {
        let list: Vec<(String, Vec<usize>, Vec<f32>)> =
            self.tensors.iter().map(|(n, t)| (n.clone(), t.shape.clone(), t.to_f32())).collect();
        write_f32_safetensors(&list)
    }

    /// PEFT-compatible adapter_config.json.
    pub fn config_json(&self) -> String {
        self.config.to_json()
    }

    /// A new adapter initialised as PEFT does: A Kaiming-uniform with a = √5
    /// (uniform in ±1/√in), B zero. Draws layer by layer, projections in
    /// checkpoint order, A row-major, from SplitMix64(seed).
    pub fn new_init(cfg: &ModelConfig, r: usize, alpha: f64, targets: &[Proj], seed: u64) -> Adapter {
        let mut targets: Vec<Proj> = targets.to_vec();
        targets.sort();
        targets.dedup();
        let mut rng = crate::base::rng::Rng::new(seed);
        let mut tensors = BTreeMap::new();
        for layer in 0..cfg.layers {
            for &p in &targets {
                let (out, inp) = p.dims(cfg);
                let bound = 1.0 / (inp as f64).sqrt();
                let a: Vec<f32> = (0..r * inp).map(|_| ((rng.uniform() * 2.0 - 1.0) * bound) as f32).collect();
                tensors.insert(lora_a_key(layer, p), HostTensor::from_f32(&[r, inp], a));
                tensors.insert(lora_b_key(layer, p), HostTensor::from_f32(&[out, r], vec![0.0; out * r]));
            }
        }
        let config = AdapterConfig {
            r,
            lora_alpha: alpha,
            target_modules: targets,
            base_model_name_or_path: None,
            revision: None,
            lora_dropout: 0.0,
        };
        Adapter { config, tensors }
    }
}

/// A safetensors file of named f32 tensors (adapters, and gradient dumps with
/// `loss` and the grads). Names must be unique and data lengths match shapes.
pub fn write_f32_safetensors(tensors: &[(String, Vec<usize>, Vec<f32>)]) -> Vec<u8> {
    let bytes: Vec<Vec<u8>> = tensors
        .iter()
        .map(|(name, shape, data)| {
            assert_eq!(
                shape.iter().product::<usize>(),
                data.len(),
                "safetensors: {name}: data length does not match shape"
            );
            data.iter().flat_map(|x| x.to_le_bytes()).collect()
        })
        .collect();
    let refs: Vec<(&str, &str, &[usize], &[u8])> =
        tensors.iter().zip(&bytes).map(|((n, s, _), b)| (n.as_str(), "F32", s.as_slice(), b.as_slice())).collect();
    encode_raw(&refs)
}

#[cfg(test)]
mod tests {
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
        let c =
            AdapterConfig::from_json(&edit(&[("target_modules", json!(["q", "v_proj", "q_proj"]))])).expect("short");
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
}
