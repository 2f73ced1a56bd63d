//! What the browser's worker runs, without JavaScript types: stored models (import, list,
//! delete), the loaded model, a training session checkpointed to the store, adapters and
//! chat. Generic over the store ([`AsyncChunkStore`]: IndexedDB in the browser, memory or a
//! directory natively), so the native tests exercise the same code the page runs;
//! `src/wasm.rs` only converts between this and JS values.
//!
//! Here: the [`Runtime`] and what it holds, stored models, loading one, adapters, chat and the
//! memory report. The values the app sees and sends, their readers and their TypeScript are in
//! `api` (re-exported here) and `ts_types`; training sessions (start, step, save, list, resume,
//! delete) in `sessions`, which also says how a session is laid out in the store, beside the
//! models' `<model>/...` keys.

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
use crate::train::trainer::{TrainConfig, Trainer};
use std::sync::Arc;

mod api;
mod sessions;
#[cfg(all(test, not(target_arch = "wasm32")))]
mod ts_types;

pub use api::{
    from_app, generate_request_from_app, messages_from_app, train_config_from_app, Bytes, DeviceInfo, DeviceLimits,
    GenerateRequest, MemoryReport, ModelInfo, SessionInfo, SessionSummary, StepInfo, StorageInfo, StoredModel,
};

/// Key prefix of training sessions; no model may be called this.
pub const SESSIONS: &str = "sessions";

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
    /// Run the reference kernels, not the variants measured fastest ([`Runtime::set_reference_kernels`]).
    reference_kernels: bool,
    /// Time every dispatch of each training step, kernel by kernel ([`Runtime::set_profile`]).
    profile: bool,
}

/// The store key of the kernel choices ([`crate::kernels::TuneCache`], JSON).
pub const KERNELS_KEY: &str = "kernels/choices.json";

impl<S: AsyncChunkStore + wgpu::WasmNotSendSync + 'static> Runtime<S> {
    pub fn new(gpu: Gpu, store: S) -> Runtime<S> {
        Runtime {
            gpu,
            store: Arc::new(store),
            loaded: None,
            run: None,
            adapter: None,
            reference_kernels: false,
            profile: false,
        }
    }

    /// Carry on on a new device after the last was lost: what lived on the old one (the loaded
    /// model, the run in memory, an imported adapter) is dropped; the store keeps the model and
    /// the run's last checkpoint, so loading or resuming reads them back from it.
    pub fn replace_gpu(&mut self, gpu: Gpu) {
        (self.loaded, self.run, self.adapter) = (None, None, None);
        gpu.alloc.set_budget(self.gpu.alloc.budget());
        gpu.set_f16_products(self.gpu.f16_products());
        self.gpu = gpu;
    }

    /// With `on`, each training step from now on times its dispatches kernel by kernel and
    /// reports them in [`StepInfo::profile`] (timestamp queries where the adapter has them;
    /// each timed dispatch gets a compute pass of its own, so a profiled step is slower).
    pub fn set_profile(&mut self, on: bool) {
        self.profile = on;
    }

    /// With `on`, models loaded from now on run the reference kernels instead of the variants
    /// measured fastest on this device (to compare, or to rule a variant out).
    pub fn set_reference_kernels(&mut self, on: bool) {
        self.reference_kernels = on;
        if on {
            crate::kernels::use_reference(&self.gpu);
        }
    }

    /// Choose the kernel variants for `cfg` on this device: measured once per adapter and model
    /// shape, the choice kept in the store under [`KERNELS_KEY`] (checked against the reference
    /// on every load). Training-sized products: 256 tokens.
    async fn tune(&self, cfg: &crate::base::config::ModelConfig, dtype: crate::gpu::DType) -> String {
        if self.reference_kernels {
            crate::kernels::use_reference(&self.gpu);
            return format!(
                "matmul: blocked; attention: {} (the reference kernels, as asked)",
                crate::kernels::attention::tuning_of(&self.gpu).name()
            );
        }
        let mut cache: crate::kernels::TuneCache = match self.store.get_opt(KERNELS_KEY).await {
            Ok(Some(b)) => serde_json::from_slice(&b).unwrap_or_default(),
            _ => Default::default(),
        };
        match crate::kernels::tune(&self.gpu, cfg, 256, dtype, &mut cache).await {
            Ok(t) => {
                if !t.cached {
                    if let Ok(json) = serde_json::to_vec(&cache) {
                        // Best effort: without it the next load measures again.
                        let _ = self.store.put(KERNELS_KEY, &json).await;
                    }
                }
                t.summary()
            }
            Err(e) => {
                crate::kernels::use_reference(&self.gpu);
                format!("matmul: blocked; attention: reference (choosing failed: {e})")
            }
        }
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
        let kernels = self.tune(&model.cfg, format.dtype(crate::gpu::DType::BF16)).await;
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
            kernels,
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
