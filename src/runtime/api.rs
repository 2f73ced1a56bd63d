//! The values the app sees and sends, without JavaScript types: what the runtime reports
//! (device, stored models, storage, the loaded model, sessions, steps, memory) and the
//! generate request, plus the readers that check a value from the app (`*_from_app`) and name
//! the field at fault.
//!
//! These structs (and those they hold from other modules) derive `ts_rs::TS` in test builds:
//! their TypeScript in npm/src/generated/ is made from them, and the test in
//! runtime/ts_types.rs fails when it falls behind.

use crate::data::tokenizer::Message;
use crate::train::trainer::TrainConfig;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// The adapter and what it granted, as the app is told (`gpu::DeviceInfo` in camelCase, the
/// limits apart).
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct DeviceInfo {
    pub adapter: String,
    pub backend: String,
    pub limits: DeviceLimits,
    pub shader_f16: bool,
    pub subgroups: bool,
}

/// The device's limits that the engine plans its buffers and kernels by, with WebGPU's names.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct DeviceLimits {
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
}

impl From<&crate::gpu::DeviceInfo> for DeviceInfo {
    fn from(i: &crate::gpu::DeviceInfo) -> DeviceInfo {
        DeviceInfo {
            adapter: i.adapter.clone(),
            backend: i.backend.clone(),
            limits: DeviceLimits {
                max_buffer_size: i.max_buffer_size,
                max_storage_buffer_binding_size: i.max_storage_buffer_binding_size,
                max_storage_buffers_per_shader_stage: i.max_storage_buffers_per_shader_stage,
                max_compute_workgroup_storage_size: i.max_compute_workgroup_storage_size,
                max_compute_invocations_per_workgroup: i.max_compute_invocations_per_workgroup,
            },
            shader_f16: i.shader_f16,
            subgroups: i.subgroups,
        }
    }
}

/// A complete model in the store (listed, or just imported).
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct StoredModel {
    pub name: String,
    /// Bytes of its stored chunks.
    pub bytes: u64,
}

/// The origin's storage: `navigator.storage.estimate()` and `persisted()`.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct StorageInfo {
    pub usage: u64,
    pub quota: u64,
    pub persisted: bool,
}

/// What the app is told about a loaded model.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct ModelInfo {
    pub name: String,
    pub model_type: String,
    pub layers: usize,
    pub hidden: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub intermediate: usize,
    pub vocab: usize,
    pub parameters: usize,
    /// Bytes of frozen weights on the GPU (a streamed model: only the final norm at rest).
    pub weight_bytes: u64,
    pub chat_template: bool,
    /// "stored", "bf16", "q8" or "q4"
    pub weights: String,
    /// Loaded streamed: each block is fetched from the store when a step needs it (see
    /// `Runtime::load_model`).
    pub streamed: bool,
    /// The kernel variants chosen for this model on this device, in words
    /// ("matmul: shared16x8/8/sg8 (42.3 ms; blocked 75.5 ms, …)", "matmul: blocked (reference)").
    pub kernels: String,
}

/// A training run as the app sees it, as started or resumed.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    pub session_id: String,
    pub model: String,
    pub total_steps: u32,
    /// Steps done (0 for a new run).
    pub step: u32,
    pub examples: usize,
    /// Whether the optimizer update is fused into the backward pass.
    pub fused: bool,
    /// The loss of every step done.
    pub losses: Vec<f32>,
    pub warnings: Vec<String>,
}

/// GPU bytes of one category: now, and the highest since the last step began.
#[derive(Clone, Debug, Default, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Bytes {
    pub live: u64,
    pub peak: u64,
}

/// The GPU memory accounting (every buffer the engine allocates is counted), for the page's graph.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct MemoryReport {
    pub live: u64,
    pub peak: u64,
    /// By category name: weights, lora, grads, optimizer, checkpoints, activations, scratch,
    /// staging.
    pub categories: std::collections::BTreeMap<&'static str, Bytes>,
    /// One sample per phase of the last step (empty outside training).
    pub timeline: Vec<crate::gpu::alloc::Sample>,
    /// The wasm linear memory (browser), else 0.
    pub wasm_bytes: u64,
    /// A streamed model: the most bytes of stored chunks held on the host at once since it
    /// was loaded (about one block; 0 when the weights are resident).
    pub staged_peak_bytes: u64,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
}

/// One optimizer step, with the memory it used.
#[derive(Clone, Debug, Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct StepInfo {
    pub step: u32,
    pub total_steps: u32,
    pub loss: f32,
    pub lr: f32,
    pub tokens: usize,
    pub ms: f64,
    pub tokens_per_sec: f64,
    pub memory: MemoryReport,
    /// The loss or the gradients were not finite (NaN or infinite): nothing was updated and
    /// `step` did not advance. Three in a row stop the run with an error (see `Trainer::step`).
    pub skipped: bool,
    /// Where the step's GPU time went, kernel by kernel (only while profiling is on: the
    /// Engine's `setProfile`, the client's `train({ profile: true })`).
    pub profile: Option<crate::gpu::profile::Profile>,
}

/// A stored session as listed.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    pub id: String,
    pub model: String,
    pub weights: String,
    /// The model was streamed (resuming loads it the same way); absent in older states.
    #[serde(default)]
    pub streamed: bool,
    pub step: u32,
    pub total_steps: u32,
    pub losses: Vec<f32>,
    /// Milliseconds since the epoch (browser) or since start (native) of the last save.
    pub updated: f64,
}

/// How to generate, as the app asks (camelCase; missing fields take the defaults, unknown ones
/// are ignored: see `generate_request_from_app`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "camelCase", default)]
pub struct GenerateRequest {
    /// Default 128.
    pub max_new_tokens: usize,
    /// 0 (the default) is greedy.
    pub temperature: f32,
    /// 0 (the default): no top-k cut.
    pub top_k: usize,
    /// Default 1 (no top-p cut).
    pub top_p: f32,
    /// Seed of the sampling. Default 0.
    pub seed: u64,
    /// Use the trained or imported adapter, if there is one (default true).
    pub adapter: bool,
}

impl Default for GenerateRequest {
    fn default() -> Self {
        GenerateRequest { max_new_tokens: 128, temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0, adapter: true }
    }
}

// ---- values from the app --------------------------------------------------------------
// The app sends plain objects (JS values, read as JSON). A bad one is refused with a message
// that names the field at fault, for the app to show.

/// `given` as `T`. serde's own errors name a missing or unknown field but not one of the wrong
/// type, so that one is found by reading each given field alone over `template` (a valid
/// value) and named.
pub fn from_app<T: Serialize + DeserializeOwned>(
    template: &T,
    given: serde_json::Value,
) -> std::result::Result<T, String> {
    serde_json::from_value::<T>(given.clone()).map_err(|e| {
        let (Ok(serde_json::Value::Object(base)), serde_json::Value::Object(fields)) =
            (serde_json::to_value(template), &given)
        else {
            return e.to_string();
        };
        for (k, v) in fields.iter().filter(|(k, _)| base.contains_key(*k)) {
            let mut one = base.clone();
            one.insert(k.clone(), v.clone());
            if let Err(e) = serde_json::from_value::<T>(serde_json::Value::Object(one)) {
                return format!("field {k:?}: {e}");
            }
        }
        e.to_string()
    })
}

/// What kind of JSON value `v` is, for an error message.
fn json_kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// A [`TrainConfig`] from the app: the fields given over the defaults (null: all defaults); a
/// field TrainConfig does not have is refused.
pub fn train_config_from_app(given: serde_json::Value) -> std::result::Result<TrainConfig, String> {
    let defaults = TrainConfig::default();
    let mut fields = match serde_json::to_value(&defaults) {
        Ok(serde_json::Value::Object(m)) => m,
        _ => return Err("the defaults are not an object".into()),
    };
    let given = match given {
        serde_json::Value::Null => serde_json::Map::new(),
        serde_json::Value::Object(m) => m,
        other => return Err(format!("must be an object, not {}", json_kind(&other))),
    };
    for (k, v) in given {
        if !fields.contains_key(&k) {
            let known: Vec<&str> = fields.keys().map(String::as_str).collect();
            return Err(format!("unknown field {k:?} (known: {})", known.join(", ")));
        }
        fields.insert(k, v);
    }
    from_app(&defaults, serde_json::Value::Object(fields))
}

/// [`GenerateRequest`] from the app: missing fields (or all, for null) take the defaults;
/// fields it does not have are ignored.
pub fn generate_request_from_app(given: serde_json::Value) -> std::result::Result<GenerateRequest, String> {
    match given {
        serde_json::Value::Null => Ok(GenerateRequest::default()),
        v @ serde_json::Value::Object(_) => from_app(&GenerateRequest::default(), v),
        other => Err(format!("must be an object, not {}", json_kind(&other))),
    }
}

/// A chat from the app: `[{role, content}, …]`. The error starts with where it is:
/// `messages: …` or `messages[i]: …` (and names the field).
pub fn messages_from_app(given: serde_json::Value) -> std::result::Result<Vec<Message>, String> {
    let serde_json::Value::Array(list) = given else {
        return Err(format!("messages: must be an array of {{role, content}}, not {}", json_kind(&given)));
    };
    let template = Message::new("user", "");
    list.into_iter()
        .enumerate()
        .map(|(i, m)| from_app(&template, m).map_err(|e| format!("messages[{i}]: {e}")))
        .collect()
}

#[cfg(test)]
mod app_value_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn train_config_takes_defaults_and_names_the_field_at_fault() {
        let cfg = train_config_from_app(json!({"rank": 8, "steps": 3, "schedule": "constant"})).expect("valid");
        assert_eq!((cfg.rank, cfg.steps, cfg.schedule.as_str()), (8, Some(3), "constant"));
        assert_eq!(cfg.alpha, TrainConfig::default().alpha, "a missing field keeps its default");
        assert_eq!(train_config_from_app(json!(null)).expect("null"), TrainConfig::default());

        let e = train_config_from_app(json!({"rank": 8, "lr": "fast"})).expect_err("a string lr");
        assert!(e.starts_with("field \"lr\": invalid type: string"), "{e}");
        let e = train_config_from_app(json!({"saveEvery": 5})).expect_err("camelCase");
        assert!(e.starts_with("unknown field \"saveEvery\" (known: "), "{e}");
        let e = train_config_from_app(json!("{\"rank\": 8}")).expect_err("a JSON string");
        assert_eq!(e, "must be an object, not a string");
    }

    #[test]
    fn generate_request_takes_defaults_ignores_unknown_and_names_the_field_at_fault() {
        let r = generate_request_from_app(json!({"maxNewTokens": 5, "signal": {}})).expect("valid");
        assert_eq!((r.max_new_tokens, r.top_p, r.adapter), (5, 1.0, true));
        assert_eq!(generate_request_from_app(json!(null)).expect("null").max_new_tokens, 128);
        let e = generate_request_from_app(json!({"topK": -1})).expect_err("a negative top-k");
        assert!(e.starts_with("field \"topK\": invalid value: integer `-1`"), "{e}");
        assert_eq!(generate_request_from_app(json!([])).expect_err("an array"), "must be an object, not an array");
    }

    #[test]
    fn messages_name_the_message_and_the_field_at_fault() {
        let m = messages_from_app(json!([{"role": "user", "content": "hi"}])).expect("valid");
        assert_eq!(m, [Message::new("user", "hi")]);
        let e =
            messages_from_app(json!([{"role": "user", "content": "hi"}, {"role": "user"}])).expect_err("no content");
        assert_eq!(e, "messages[1]: missing field `content`");
        let e = messages_from_app(json!([{"role": 3, "content": "hi"}])).expect_err("a number role");
        assert!(e.starts_with("messages[0]: field \"role\": invalid type: integer `3`"), "{e}");
        let e = messages_from_app(json!({"role": "user"})).expect_err("not an array");
        assert_eq!(e, "messages: must be an array of {role, content}, not an object");
    }
}
