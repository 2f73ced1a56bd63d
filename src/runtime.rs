//! What the browser's worker runs, without JavaScript types: stored models (import, list,
//! delete), the loaded model, a training session checkpointed to the store, adapters and
//! chat. Generic over the store ([`AsyncChunkStore`]: IndexedDB in the browser, memory or a
//! directory natively), so the native tests exercise the same code the page runs;
//! `src/wasm.rs` only converts between this and JS values.
//!
//! Store layout, beside the models' `<model>/...` keys: a training session `id` keeps
//! `sessions/<id>/state.json` (configuration, dataset, step, losses, which checkpoint slot
//! is current and its checksum) and two checkpoint slots `sessions/<id>/checkpoint-0|1`,
//! written alternately; state.json is written last, so an interrupted save leaves the
//! previous checkpoint current.
//!
//! The values the app sees and sends (the structs below, and those they hold from other
//! modules) derive `ts_rs::TS` in test builds: their TypeScript in npm/src/generated/ is made
//! from them, and the test in runtime/ts_types.rs fails when it falls behind.

use crate::base::bytes::fnv1a64;
use crate::base::error::{Error, Result};
use crate::data::dataset::load_jsonl;
use crate::data::tokenizer::{Message, Tokenizer};
use crate::formats::peft::Adapter;
use crate::generate::{generate, GenerateOptions};
use crate::gpu::{Category, Gpu};
use crate::import::files::FileSet;
use crate::import::{import_files, ImportOptions, Progress};
use crate::model::lora::Lora;
use crate::model::source::{Fetch, WeightSource};
use crate::model::weights::WeightFormat;
use crate::model::{Model, ResidentLoader};
use crate::store::staged::StoreFetch;
use crate::store::{self, AsyncChunkStore, Manifest, StoreSource};
use crate::train::trainer::{StepReport, TrainConfig, Trainer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

#[cfg(all(test, not(target_arch = "wasm32")))]
mod ts_types;

/// Key prefix of training sessions; no model may be called this.
pub const SESSIONS: &str = "sessions";

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

/// `sessions/<id>/state.json`
#[derive(Clone, Debug, Serialize, Deserialize)]
struct SessionState {
    summary: SessionSummary,
    config: TrainConfig,
    dataset: String,
    /// The current checkpoint slot (0 or 1), its size and checksum.
    slot: u8,
    bytes: usize,
    fnv1a64: String,
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

struct Loaded<S> {
    info: ModelInfo,
    model: Model,
    tok: Tokenizer,
    /// Streamed: what fetches its weights from the store (and counts the bytes staged).
    fetch: Option<Arc<StoreFetch<S>>>,
}

struct Run {
    id: String,
    config: TrainConfig,
    dataset: String,
    trainer: Trainer,
    /// The slot the last save wrote (the next save writes the other one).
    slot: Option<u8>,
}

/// The engine of one page: a GPU device, a store, at most one loaded model, one training run
/// and one adapter for chat.
pub struct Runtime<S: AsyncChunkStore + wgpu::WasmNotSendSync + 'static> {
    pub gpu: Gpu,
    pub store: Arc<S>,
    loaded: Option<Loaded<S>>,
    run: Option<Run>,
    /// An imported adapter (used for chat when no run is loaded).
    adapter: Option<Lora>,
}

fn check_session_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 100 || !id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
        return Err(Error::msg(format!("session id {id:?}: use 1 to 100 letters, digits, '-', '_' or '.'")));
    }
    Ok(())
}

fn state_key(id: &str) -> String {
    format!("{SESSIONS}/{id}/state.json")
}

fn slot_key(id: &str, slot: u8) -> String {
    format!("{SESSIONS}/{id}/checkpoint-{slot}")
}

impl<S: AsyncChunkStore + wgpu::WasmNotSendSync + 'static> Runtime<S> {
    pub fn new(gpu: Gpu, store: S) -> Runtime<S> {
        Runtime { gpu, store: Arc::new(store), loaded: None, run: None, adapter: None }
    }

    /// Carry on on a new device after the last was lost: what lived on the old one (the loaded
    /// model, the run in memory, an imported adapter) is dropped; the store keeps the model and
    /// the run's last checkpoint, so loading or resuming reads them back from it.
    pub fn replace_gpu(&mut self, gpu: Gpu) {
        (self.loaded, self.run, self.adapter) = (None, None, None);
        gpu.alloc.set_budget(self.gpu.alloc.budget());
        self.gpu = gpu;
    }

    // ---- stored models ------------------------------------------------------------

    /// Complete models and their bytes.
    pub async fn list_models(&self) -> Result<Vec<(String, u64)>> {
        store::list_models_async(self.store.as_ref()).await
    }

    /// Imports that stopped before their end (a closed tab, a lost connection, a full disk):
    /// importing the same files under the same name again resumes them.
    pub async fn partial_imports(&self) -> Result<Vec<crate::import::PartialImport>> {
        crate::import::partial_imports_async(self.store.as_ref()).await
    }

    pub async fn delete_model(&mut self, name: &str) -> Result<()> {
        if self.loaded.as_ref().is_some_and(|l| l.info.name == name) {
            self.loaded = None;
            self.run = None;
        }
        store::delete_model_async(self.store.as_ref(), name).await
    }

    /// Import (or resume importing) a model from `files`. `free_bytes` is the storage still
    /// free (quota − usage) where the platform tells it: an import that cannot fit is refused
    /// before anything is written.
    pub async fn import<F: FileSet>(
        &self,
        name: &str,
        files: &F,
        free_bytes: Option<u64>,
        on_progress: &mut dyn FnMut(Progress),
    ) -> Result<Manifest> {
        if name == SESSIONS {
            return Err(Error::msg(format!("model name {name:?} is reserved")));
        }
        let opts = ImportOptions { free_bytes, ..ImportOptions::default() };
        import_files(self.store.as_ref(), name, files, &opts, on_progress).await
    }

    // ---- the loaded model ---------------------------------------------------------

    /// Load a stored model: onto the GPU, one block at a time from the store (resident), or,
    /// when `stream` is set, only its final norm, each block being fetched from the store and
    /// uploaded when a step needs it (the next fetched while the GPU computes the current one):
    /// the least GPU and host memory, slower per step. Generation streams too: every block is
    /// fetched and uploaded again for each token (slow; load the model resident to chat fast).
    pub async fn load_model(&mut self, name: &str, weights: &str, stream: bool) -> Result<ModelInfo> {
        let format = WeightFormat::parse(weights).map_err(|e| Error::msg(format!("weights: {e}")))?;
        self.loaded = None;
        self.run = None;
        self.adapter = None;
        let man = store::read_manifest_async(self.store.as_ref(), name).await?;
        let file = |n: &'static str| store::read_model_file(self.store.as_ref(), &man, n);
        let tok_json = file("tokenizer.json")
            .await?
            .ok_or_else(|| Error::msg(format!("model {name}: tokenizer.json is not stored with it")))?;
        let tok = Tokenizer::from_files(
            &tok_json,
            file("tokenizer_config.json").await?.as_deref(),
            file("generation_config.json").await?.as_deref(),
            file("chat_template.jinja").await?.as_deref(),
        )
        .map_err(|e| Error::msg(format!("model {name}: {e}")))?;
        drop(tok_json);

        let before = self.gpu.alloc.stats().live(Category::Weights);
        // Both ways read the store through the same fetcher, one load step's chunks at a time.
        let fetch = Arc::new(StoreFetch::new(self.store.clone(), man)?);
        fetch.stage(&[]).await?;
        let source = Arc::new(StoreSource::open(fetch.staged(), name)?);
        let (model, fetch) = if stream {
            let model = Model::streamed_fetched(&self.gpu, source, format, fetch.clone()).await?;
            (model, Some(fetch))
        } else {
            let mut loader = ResidentLoader::new(&self.gpu, source.config().clone(), format);
            for step in loader.steps() {
                fetch.fetch(step).await?;
                loader.run(&self.gpu, source.as_ref(), step)?;
            }
            (loader.finish()?, None) // what was staged goes with `source` when this returns
        };
        let cfg = &model.cfg;
        let info = ModelInfo {
            name: name.to_string(),
            model_type: format!("{:?}", cfg.arch).to_lowercase(),
            layers: cfg.layers,
            hidden: cfg.hidden,
            heads: cfg.heads,
            kv_heads: cfg.kv_heads,
            intermediate: cfg.intermediate,
            vocab: cfg.vocab,
            parameters: crate::base::names::param_count(cfg),
            weight_bytes: self.gpu.alloc.stats().live(Category::Weights) - before,
            chat_template: tok.has_chat_template(),
            weights: format.name().to_string(),
            streamed: stream,
        };
        self.loaded = Some(Loaded { info: info.clone(), model, tok, fetch });
        Ok(info)
    }

    fn loaded(&self) -> Result<&Loaded<S>> {
        self.loaded.as_ref().ok_or_else(|| Error::msg("no model is loaded: load one first"))
    }

    pub fn model_info(&self) -> Option<&ModelInfo> {
        self.loaded.as_ref().map(|l| &l.info)
    }

    /// Tokens of one prompt → response example as the trainer renders it.
    pub fn example_tokens(&self, prompt: &str, response: &str) -> Result<usize> {
        let l = self.loaded()?;
        let line = serde_json::json!({"messages": [
            {"role": "user", "content": prompt}, {"role": "assistant", "content": response}
        ]});
        let ex = load_jsonl(&line.to_string(), &l.tok).map_err(|e| Error::msg(e.to_string()))?;
        Ok(ex.first().map_or(0, |e| e.input_ids.len()))
    }

    // ---- training -----------------------------------------------------------------

    /// Start a run of `config` on `dataset` (JSONL) with the loaded model.
    pub async fn start_training(&mut self, id: &str, config: TrainConfig, dataset: &str) -> Result<SessionInfo> {
        check_session_id(id)?;
        self.run = None;
        let l = self.loaded()?;
        let examples = load_jsonl(dataset, &l.tok).map_err(|e| Error::msg(format!("dataset: {e}")))?;
        let trainer = Trainer::new(&self.gpu, &l.model, examples, config.clone(), None)?;
        self.run = Some(Run { id: id.to_string(), config, dataset: dataset.to_string(), trainer, slot: None });
        self.session_info()
    }

    fn session_info(&self) -> Result<SessionInfo> {
        let (l, r) = (self.loaded()?, self.running()?);
        Ok(SessionInfo {
            session_id: r.id.clone(),
            model: l.info.name.clone(),
            total_steps: r.trainer.state.total_steps,
            step: r.trainer.state.step,
            examples: r.trainer.num_examples(),
            fused: r.trainer.fused(),
            losses: r.trainer.state.losses.clone(),
            warnings: r.trainer.warnings.clone(),
        })
    }

    fn running(&self) -> Result<&Run> {
        self.run.as_ref().ok_or_else(|| Error::msg("no training run: start or resume one first"))
    }

    pub fn training_done(&self) -> bool {
        self.run.as_ref().is_none_or(|r| r.trainer.done())
    }

    /// One optimizer step.
    pub async fn train_step(&mut self) -> Result<StepInfo> {
        let l = self.loaded.as_ref().ok_or_else(|| Error::msg("no model is loaded: load one first"))?;
        let r = self.run.as_mut().ok_or_else(|| Error::msg("no training run: start or resume one first"))?;
        if r.trainer.done() {
            return Err(Error::msg(format!("session {}: every step is done", r.id)));
        }
        self.gpu.alloc.reset_peaks();
        self.gpu.alloc.record_timeline(true);
        let rep: StepReport = r.trainer.step(&self.gpu, &l.model).await?;
        let memory = self.memory();
        self.gpu.alloc.record_timeline(false);
        Ok(StepInfo {
            step: rep.step,
            total_steps: rep.total_steps,
            loss: rep.loss,
            lr: rep.lr,
            tokens: rep.tokens,
            ms: rep.ms,
            tokens_per_sec: rep.tokens as f64 / (rep.ms / 1000.0).max(1e-9),
            memory,
            skipped: rep.skipped,
        })
    }

    /// Save the run: its checkpoint into the slot not current, then state.json.
    pub async fn save_session(&mut self) -> Result<()> {
        let l = self.loaded()?;
        let r = self.running()?;
        let bytes = r.trainer.checkpoint(&self.gpu).await?;
        let slot = match r.slot {
            Some(s) => 1 - s,
            None => match self.read_state(&r.id).await? {
                Some(st) => 1 - st.slot,
                None => 0,
            },
        };
        self.store.put(&slot_key(&r.id, slot), &bytes).await?;
        let st = SessionState {
            summary: SessionSummary {
                id: r.id.clone(),
                model: l.info.name.clone(),
                weights: l.info.weights.clone(),
                streamed: l.info.streamed,
                step: r.trainer.state.step,
                total_steps: r.trainer.state.total_steps,
                losses: r.trainer.state.losses.clone(),
                updated: crate::platform::wall_ms(),
            },
            config: r.config.clone(),
            dataset: r.dataset.clone(),
            slot,
            bytes: bytes.len(),
            fnv1a64: fnv1a64(&bytes),
        };
        let json = serde_json::to_vec(&st).map_err(|e| Error::msg(format!("session {}: {e}", r.id)))?;
        self.store.put(&state_key(&r.id), &json).await?;
        if let Some(r) = self.run.as_mut() {
            r.slot = Some(slot);
        }
        Ok(())
    }

    async fn read_state(&self, id: &str) -> Result<Option<SessionState>> {
        let Some(bytes) = self.store.get_opt(&state_key(id)).await? else { return Ok(None) };
        let st = serde_json::from_slice(&bytes)
            .map_err(|e| Error::msg(format!("session {id}: {} is damaged: {e}", state_key(id))))?;
        Ok(Some(st))
    }

    /// Every stored session.
    pub async fn list_sessions(&self) -> Result<Vec<SessionSummary>> {
        let mut out = Vec::new();
        for key in self.store.keys(&format!("{SESSIONS}/")).await? {
            if let Some(id) = key.strip_prefix(&format!("{SESSIONS}/")).and_then(|k| k.strip_suffix("/state.json")) {
                if let Some(st) = self.read_state(id).await? {
                    out.push(st.summary);
                }
            }
        }
        Ok(out)
    }

    /// Continue a stored session from its last checkpoint (loading its model if another one,
    /// or none, is loaded).
    pub async fn resume_session(&mut self, id: &str) -> Result<SessionInfo> {
        check_session_id(id)?;
        let st = self.read_state(id).await?.ok_or_else(|| Error::msg(format!("session {id}: not found")))?;
        let loaded_ok = self
            .loaded
            .as_ref()
            .is_some_and(|l| l.info.name == st.summary.model && l.info.weights == st.summary.weights);
        if !loaded_ok {
            self.load_model(&st.summary.model, &st.summary.weights, st.summary.streamed).await?;
        }
        let key = slot_key(id, st.slot);
        let bytes = self.store.get(&key).await?;
        if bytes.len() != st.bytes || fnv1a64(&bytes) != st.fnv1a64 {
            return Err(Error::msg(format!("session {id}: {key} is damaged (size or checksum differs)")));
        }
        self.run = None;
        let l = self.loaded()?;
        let examples = load_jsonl(&st.dataset, &l.tok).map_err(|e| Error::msg(format!("dataset: {e}")))?;
        let trainer = Trainer::resume(&self.gpu, &l.model, examples, st.config.clone(), &bytes, &key)?;
        self.run =
            Some(Run { id: id.to_string(), config: st.config, dataset: st.dataset, trainer, slot: Some(st.slot) });
        self.session_info()
    }

    pub async fn delete_session(&mut self, id: &str) -> Result<()> {
        check_session_id(id)?;
        if self.run.as_ref().is_some_and(|r| r.id == id) {
            self.run = None;
        }
        self.store.delete(&state_key(id)).await?;
        for key in self.store.keys(&format!("{SESSIONS}/{id}/")).await? {
            self.store.delete(&key).await?;
        }
        Ok(())
    }

    // ---- adapters and chat --------------------------------------------------------

    /// The run's adapter (or the imported one) as PEFT files: (adapter_model.safetensors,
    /// adapter_config.json).
    pub async fn export_adapter(&self) -> Result<(Vec<u8>, String)> {
        let adapter = match (&self.run, &self.adapter) {
            (Some(r), _) => r.trainer.adapter(&self.gpu).await?,
            (None, Some(_)) => return Err(Error::msg("an imported adapter is exported as the files it came from")),
            (None, None) => return Err(Error::msg("no adapter: train or import one first")),
        };
        Ok((adapter.to_safetensors_bytes(), adapter.config_json()))
    }

    /// Use a PEFT adapter for chat (the run, if any, is closed).
    pub fn import_adapter(&mut self, safetensors: &[u8], config: &[u8]) -> Result<()> {
        let l = self.loaded()?;
        let a = Adapter::from_files(config, safetensors)?;
        a.validate(&l.model.cfg)?;
        let lora = Lora::from_adapter(&self.gpu, &l.model.cfg, &a)?;
        self.run = None;
        self.adapter = Some(lora);
        Ok(())
    }

    /// Answer a chat; `on_text` gets each new piece of text and returns false to stop.
    pub async fn generate(
        &self,
        messages: &[Message],
        req: &GenerateRequest,
        on_text: &mut dyn FnMut(&str) -> bool,
    ) -> Result<String> {
        let l = self.loaded()?;
        let prompt = l.tok.apply_chat_template(messages, true).map_err(|e| Error::msg(e.to_string()))?;
        let ids = l.tok.encode(&prompt, false).map_err(|e| Error::msg(e.to_string()))?;
        let lora = if req.adapter {
            match (&self.run, &self.adapter) {
                (Some(r), _) => Some(&r.trainer.lora),
                (None, a) => a.as_ref(),
            }
        } else {
            None
        };
        let opts = GenerateOptions {
            max_new_tokens: req.max_new_tokens,
            temperature: req.temperature,
            top_k: req.top_k,
            top_p: req.top_p,
            seed: req.seed,
            eos_ids: l.tok.eos_ids().to_vec(),
            merge: false,
        };
        let mut dec = l.tok.stream_decoder(true);
        let mut text = String::new();
        let mut failed = None;
        generate(&self.gpu, &l.model, lora, &ids, &opts, &mut |id| match dec.push(id) {
            Ok(piece) => {
                text.push_str(&piece);
                piece.is_empty() || on_text(&piece)
            }
            Err(e) => {
                failed = Some(e.to_string());
                false
            }
        })
        .await?;
        if let Some(e) = failed {
            return Err(Error::msg(format!("decoding: {e}")));
        }
        Ok(text)
    }

    /// GPU memory by category, the last step's timeline, wasm memory and the device limits.
    pub fn memory(&self) -> MemoryReport {
        let s = self.gpu.alloc.stats();
        MemoryReport {
            live: s.live_total,
            peak: s.peak_total,
            categories: Category::ALL.iter().map(|&c| (c.name(), Bytes { live: s.live(c), peak: s.peak(c) })).collect(),
            timeline: self.gpu.alloc.timeline(),
            wasm_bytes: crate::platform::wasm_memory_bytes().unwrap_or(0),
            staged_peak_bytes: self.loaded.as_ref().and_then(|l| l.fetch.as_ref()).map_or(0, |f| f.peak_bytes() as u64),
            max_buffer_size: self.gpu.info.max_buffer_size,
            max_storage_buffer_binding_size: self.gpu.info.max_storage_buffer_binding_size,
        }
    }
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
