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
#[path = "peft_tests.rs"]
mod tests;
