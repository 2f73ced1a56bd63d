//! The wasm-bindgen API: [`Engine`], a thin layer over [`Runtime`] on IndexedDB that
//! converts JS values (the contract is notes/ENGINE_API.md; the TypeScript layer in npm/
//! runs it in a Web Worker). Every failure becomes a JS `Error` whose `name` says what
//! kind it is (NoWebGPU, Quota, BadInput, NotFound, Busy, Device, Error) and whose
//! `message` a person can read.
//!
//! Values cross as plain JS objects, read and written through JSON: what the app sends
//! (a TrainConfig, generate options, messages) is checked by `runtime::*_from_app`, and what it
//! gets back is one of the runtime's structs, whose TypeScript npm/src/generated/ holds.

// Each call holds its RefCell borrow across its awaits on purpose: `run` refuses a call
// ("Busy") while another holds the runtime mutably, so a borrow never panics.
#![allow(clippy::await_holding_refcell_ref)]

use crate::base::error::Error;
use crate::gpu::Gpu;
use crate::import::files::FileSet;
use crate::import::web::{BlobFiles, HttpFiles};
use crate::runtime::{self, DeviceInfo, Runtime, StorageInfo, StoredModel};
use crate::store::idb::{self, IdbStore};
use serde::Serialize;
use std::cell::RefCell;
use std::rc::Rc;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::future_to_promise;

/// A JS Error with `name` = kind.
fn js_error(kind: &str, message: &str) -> JsValue {
    let e = js_sys::Error::new(message);
    e.set_name(kind);
    e.into()
}

/// The kind of a crate error, for the app to react to.
fn kind(e: &Error) -> &'static str {
    let text = e.to_string();
    match e {
        Error::Gpu(crate::gpu::GpuError::OverBudget { .. }) => "Budget",
        Error::Gpu(_) => "Device",
        Error::Checkpoint(_) | Error::Config(_) | Error::Peft(_) | Error::Batch(_) | Error::Gguf(_) => "BadInput",
        Error::Msg(_) if text.contains("quota") => "Quota",
        Error::Msg(_) if text.contains("not found") || text.contains("no manifest") => "NotFound",
        Error::Msg(_) => "Error",
    }
}

fn err(e: Error) -> JsValue {
    js_error(kind(&e), &e.to_string())
}

fn bad_input(what: &str, e: impl std::fmt::Display) -> JsValue {
    js_error("BadInput", &format!("{what}: {e}"))
}

/// A serde value as a plain JS object (through JSON, so maps become objects).
fn to_js<T: Serialize>(v: &T) -> Result<JsValue, JsValue> {
    let text = serde_json::to_string(v).map_err(|e| js_error("Error", &e.to_string()))?;
    js_sys::JSON::parse(&text)
}

/// A JS value from the app as JSON (through JSON.stringify, so undefined members drop out);
/// undefined and null are null. `what` names it in the error.
fn from_js(what: &str, v: &JsValue) -> Result<serde_json::Value, JsValue> {
    if v.is_undefined() || v.is_null() {
        return Ok(serde_json::Value::Null);
    }
    let text = js_sys::JSON::stringify(v).map_err(|e| {
        let why = e.dyn_ref::<js_sys::Error>().map(|e| String::from(e.message()));
        bad_input(what, why.as_deref().unwrap_or("not representable as JSON"))
    })?;
    let text = JsValue::from(text).as_string().ok_or_else(|| bad_input(what, "not representable as JSON"))?;
    serde_json::from_str(&text).map_err(|e| bad_input(what, e))
}

fn busy() -> JsValue {
    js_error("Busy", "the engine is busy with another operation; wait for it to finish")
}

/// Call a JS progress callback with an event (errors in the callback are ignored: progress
/// is advisory).
fn report<T: Serialize>(f: &js_sys::Function, v: &T) {
    if let Ok(v) = to_js(v) {
        let _ = f.call1(&JsValue::NULL, &v);
    }
}

/// Storage this origin may still use (quota − usage), where the browser tells it.
async fn free_bytes() -> Option<u64> {
    idb::storage_estimate().await.ok().filter(|(_, quota)| *quota > 0).map(|(usage, quota)| quota.saturating_sub(usage))
}

type Shared = Rc<RefCell<Runtime<IdbStore>>>;

/// The engine of one page (or worker): the GPU device, the IndexedDB store, the loaded model,
/// the training run and the adapter.
#[wasm_bindgen]
pub struct Engine {
    rt: Shared,
    /// The runtime's device, reachable while an operation holds the runtime ([`Engine::lose_device`]).
    device: Rc<RefCell<wgpu::Device>>,
}

/// Run `f` on the runtime as a Promise; a second call while one runs is refused ("Busy").
fn run<F, Fut>(engine: &Engine, f: F) -> js_sys::Promise
where
    F: FnOnce(Shared) -> Fut + 'static,
    Fut: std::future::Future<Output = Result<JsValue, JsValue>> + 'static,
{
    let (rt, device) = (engine.rt.clone(), engine.device.clone());
    future_to_promise(async move {
        let lost = |rt: &Shared| rt.try_borrow().ok().and_then(|r| r.gpu.lost());
        if rt.try_borrow_mut().is_err() {
            return Err(busy());
        }
        let result = match lost(&rt) {
            None => f(rt.clone()).await,
            Some(_) => Err(JsValue::NULL),
        };
        if result.is_err() && lost(&rt).is_none() {
            // A failure can come before the device's lost promise settles: give it a moment.
            if let Ok(scope) = idb::Scope::current() {
                for _ in 0..10 {
                    scope.sleep(10).await;
                    if lost(&rt).is_some() {
                        break;
                    }
                }
            }
        }
        let Some(why) = lost(&rt) else { return result };
        // The device went, before this call or during it: this call says so (not how it
        // failed), and a new device is opened for the next one.
        let gpu = Gpu::new().await.map_err(|e| js_error("Device", &format!("no new GPU device after a loss: {e}")))?;
        *device.borrow_mut() = gpu.device.clone();
        rt.borrow_mut().replace_gpu(gpu);
        Err(device_lost(&why))
    })
}

/// The device is gone: what that means for the user's work, and what to do.
fn device_lost(why: &str) -> JsValue {
    js_error(
        "DeviceLost",
        &format!(
            "the GPU device was lost ({why}), so the model and the run in memory are gone. Nothing \
             stored is lost: the model and the run's last checkpoint are in this browser's storage, and \
             a new device is open. Load the model or resume the run to continue."
        ),
    )
}

#[wasm_bindgen]
impl Engine {
    /// Open the GPU device (with the adapter's own limits) and the IndexedDB store.
    pub async fn create(db_name: Option<String>) -> Result<Engine, JsValue> {
        console_error_panic_hook::set_once();
        let gpu = Gpu::new().await.map_err(|e| {
            js_error(
                "NoWebGPU",
                &format!(
                    "WebGPU is not available here ({e}). Use a recent Chrome, Edge or Safari, with \
                     hardware acceleration on."
                ),
            )
        })?;
        let store = IdbStore::open(db_name.as_deref().unwrap_or("webtune")).await.map_err(err)?;
        let device = Rc::new(RefCell::new(gpu.device.clone()));
        Ok(Engine { rt: Rc::new(RefCell::new(Runtime::new(gpu, store))), device })
    }

    /// Destroy the GPU device now, as a driver reset or the browser reclaiming the GPU would:
    /// for testing an app's recovery (what WebGL's WEBGL_lose_context is for). The operation
    /// running (a training step, say), or else the next call, fails with a "DeviceLost" error
    /// and opens a new device, so the call after it works again.
    #[wasm_bindgen(js_name = loseDevice)]
    pub fn lose_device(&self) {
        self.device.borrow().destroy();
    }

    /// Limit the GPU memory the engine may hold at once to `bytes` (null or undefined: no
    /// limit but the device's). An allocation past it fails with a "Budget" error.
    #[wasm_bindgen(js_name = setMemoryBudget)]
    pub fn set_memory_budget(&self, bytes: Option<f64>) -> Result<(), JsValue> {
        let rt = self.rt.try_borrow().map_err(|_| busy())?;
        match bytes {
            Some(b) if !(b > 0.0 && b.is_finite()) => Err(bad_input("memory budget", format!("{b} bytes"))),
            b => {
                rt.gpu.alloc.set_budget(b.map(|b| b as u64));
                Ok(())
            }
        }
    }

    /// Time every dispatch of each training step from now on (`true`) and report the kernels
    /// in the step's `profile`, or stop (`false`, the default).
    #[wasm_bindgen(js_name = setProfile)]
    pub fn set_profile(&self, on: bool) -> Result<(), JsValue> {
        self.rt.try_borrow_mut().map_err(|_| busy())?.set_profile(on);
        Ok(())
    }

    /// For models loaded from now on, run the reference kernels (`true`) or the variants
    /// measured fastest on this device (`false`, the default); `ModelInfo.kernels` says which.
    #[wasm_bindgen(js_name = useReferenceKernels)]
    pub fn use_reference_kernels(&self, on: bool) -> Result<(), JsValue> {
        let mut rt = self.rt.try_borrow_mut().map_err(|_| busy())?;
        rt.set_reference_kernels(on);
        Ok(())
    }

    /// For models loaded from now on, let the kernel choice take matrix products that multiply
    /// in f16 and accumulate in f32 (`true`; faster on many GPUs, gradients then within ~1e-2 of
    /// exact instead of float rounding) or not (`false`, the default). Returns whether they are
    /// allowed now: false where the adapter has no shader-f16.
    #[wasm_bindgen(js_name = useF16Products)]
    pub fn use_f16_products(&self, on: bool) -> Result<bool, JsValue> {
        let rt = self.rt.try_borrow().map_err(|_| busy())?;
        Ok(rt.gpu.set_f16_products(on))
    }

    /// The adapter, its backend, the granted limits and the optional features.
    #[wasm_bindgen(js_name = deviceInfo)]
    pub fn device_info(&self) -> Result<JsValue, JsValue> {
        let rt = self.rt.try_borrow().map_err(|_| busy())?;
        to_js(&DeviceInfo::from(&rt.gpu.info))
    }

    /// [{name, bytes}] of the complete stored models.
    #[wasm_bindgen(js_name = listModels)]
    pub fn list_models(&self) -> js_sys::Promise {
        run(self, |rt| async move {
            let rt = rt.borrow();
            let list = rt.list_models().await.map_err(err)?;
            let v: Vec<_> = list.into_iter().map(|(name, bytes)| StoredModel { name, bytes }).collect();
            to_js(&v)
        })
    }

    /// [{name, bytes, total}] of the imports that stopped before their end (bytes stored of
    /// total): importing the same files under the same name resumes one.
    #[wasm_bindgen(js_name = listImports)]
    pub fn list_imports(&self) -> js_sys::Promise {
        run(self, |rt| async move {
            let list = rt.borrow().partial_imports().await.map_err(err)?;
            to_js(&list)
        })
    }

    #[wasm_bindgen(js_name = deleteModel)]
    pub fn delete_model(&self, name: String) -> js_sys::Promise {
        run(self, |rt| async move {
            rt.borrow_mut().delete_model(&name).await.map_err(err)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// {usage, quota, persisted}
    pub fn storage(&self) -> js_sys::Promise {
        future_to_promise(async move {
            let (usage, quota) = idb::storage_estimate().await.map_err(err)?;
            let persisted = idb::persisted().await.unwrap_or(false);
            to_js(&StorageInfo { usage, quota, persisted })
        })
    }

    /// Import from a server in the Hugging Face hub layout; resumes an interrupted import.
    #[wasm_bindgen(js_name = importHub)]
    pub fn import_hub(
        &self,
        name: String,
        base: String,
        repo: String,
        revision: String,
        on_progress: js_sys::Function,
    ) -> js_sys::Promise {
        run(self, move |rt| async move {
            let _ = idb::request_persist().await;
            let free = free_bytes().await;
            let files = HttpFiles { base: format!("{}/{repo}/resolve/{revision}", base.trim_end_matches('/')) };
            let rt = rt.borrow();
            let man = rt.import(&name, &files, free, &mut |p| report(&on_progress, &p)).await.map_err(err)?;
            let bytes = man.chunks.iter().map(|c| c.bytes as u64).sum();
            to_js(&StoredModel { name, bytes })
        })
    }

    /// Import from File objects: a model folder's files, or one .gguf file.
    #[wasm_bindgen(js_name = importFiles)]
    pub fn import_files(&self, name: String, files: js_sys::Array, on_progress: js_sys::Function) -> js_sys::Promise {
        run(self, move |rt| async move {
            let _ = idb::request_persist().await;
            let free = free_bytes().await;
            let blobs = BlobFiles::from_files(&files).map_err(err)?;
            let rt = rt.borrow();
            let mut progress = |p: crate::import::Progress| report(&on_progress, &p);
            let gguf = files
                .iter()
                .filter_map(|f| f.dyn_into::<web_sys::File>().ok())
                .map(|f| f.name())
                .find(|n| n.ends_with(".gguf"));
            let man = match gguf {
                Some(gguf) => {
                    // Streamed: the metadata from the file's start, model.safetensors converted
                    // range by range as the importer reads it (store/gguf_files.rs).
                    let src = blobs.open(&gguf).await.map_err(err)?.ok_or_else(|| bad_input(&gguf, "unreadable"))?;
                    let files = crate::import::gguf::GgufFiles::open(src).await.map_err(|e| bad_input(&gguf, e))?;
                    rt.import(&name, &files, free, &mut progress).await.map_err(err)?
                }
                None => rt.import(&name, &blobs, free, &mut progress).await.map_err(err)?,
            };
            let bytes = man.chunks.iter().map(|c| c.bytes as u64).sum();
            to_js(&StoredModel { name, bytes })
        })
    }

    /// Load a stored model onto the GPU; weights: "stored", "bf16", "q8" or "q4"; `stream`:
    /// keep only the block being computed on the GPU, fetching each from IndexedDB when a step
    /// needs it (least memory, slower; generation streams too, every block again for each token).
    #[wasm_bindgen(js_name = loadModel)]
    pub fn load_model(&self, name: String, weights: String, stream: Option<bool>) -> js_sys::Promise {
        run(self, move |rt| async move {
            let info = rt.borrow_mut().load_model(&name, &weights, stream.unwrap_or(false)).await.map_err(err)?;
            to_js(&info)
        })
    }

    /// Tokens of one prompt → response example as the trainer renders it.
    #[wasm_bindgen(js_name = exampleTokens)]
    pub fn example_tokens(&self, prompt: &str, response: &str) -> Result<usize, JsValue> {
        self.rt.try_borrow().map_err(|_| busy())?.example_tokens(prompt, response).map_err(err)
    }

    /// Start a training run on the loaded model (config: a TrainConfig object, snake_case; missing
    /// fields, or all when it is null or undefined, take the defaults; dataset: JSONL).
    #[wasm_bindgen(js_name = startTraining)]
    pub fn start_training(&self, session_id: String, config: JsValue, dataset: String) -> js_sys::Promise {
        let config = from_js("train config", &config)
            .and_then(|v| runtime::train_config_from_app(v).map_err(|e| bad_input("train config", e)));
        run(self, move |rt| async move {
            let cfg = config?;
            let info = rt.borrow_mut().start_training(&session_id, cfg, &dataset).await.map_err(err)?;
            to_js(&info)
        })
    }

    /// One optimizer step: {step, totalSteps, loss, lr, tokens, ms, tokensPerSec, memory}.
    #[wasm_bindgen(js_name = trainStep)]
    pub fn train_step(&self) -> js_sys::Promise {
        run(self, |rt| async move {
            let r = rt.borrow_mut().train_step().await.map_err(err)?;
            to_js(&r)
        })
    }

    #[wasm_bindgen(js_name = trainingDone)]
    pub fn training_done(&self) -> Result<bool, JsValue> {
        Ok(self.rt.try_borrow().map_err(|_| busy())?.training_done())
    }

    /// Checkpoint the run to IndexedDB.
    #[wasm_bindgen(js_name = saveSession)]
    pub fn save_session(&self) -> js_sys::Promise {
        run(self, |rt| async move {
            rt.borrow_mut().save_session().await.map_err(err)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    #[wasm_bindgen(js_name = listSessions)]
    pub fn list_sessions(&self) -> js_sys::Promise {
        run(self, |rt| async move {
            let v = rt.borrow().list_sessions().await.map_err(err)?;
            to_js(&v)
        })
    }

    #[wasm_bindgen(js_name = resumeSession)]
    pub fn resume_session(&self, id: String) -> js_sys::Promise {
        run(self, move |rt| async move {
            let info = rt.borrow_mut().resume_session(&id).await.map_err(err)?;
            to_js(&info)
        })
    }

    #[wasm_bindgen(js_name = deleteSession)]
    pub fn delete_session(&self, id: String) -> js_sys::Promise {
        run(self, move |rt| async move {
            rt.borrow_mut().delete_session(&id).await.map_err(err)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// {safetensors: Uint8Array, config: string} in PEFT's format.
    #[wasm_bindgen(js_name = exportAdapter)]
    pub fn export_adapter(&self) -> js_sys::Promise {
        run(self, |rt| async move {
            let (bytes, config) = rt.borrow().export_adapter().await.map_err(err)?;
            let o = js_sys::Object::new();
            js_sys::Reflect::set(&o, &"safetensors".into(), &js_sys::Uint8Array::from(&bytes[..]))?;
            js_sys::Reflect::set(&o, &"config".into(), &config.into())?;
            Ok(o.into())
        })
    }

    #[wasm_bindgen(js_name = importAdapter)]
    pub fn import_adapter(&self, safetensors: js_sys::Uint8Array, config: String) -> js_sys::Promise {
        run(self, move |rt| async move {
            rt.borrow_mut().import_adapter(&safetensors.to_vec(), config.as_bytes()).map_err(err)?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// Answer a chat (messages: [{role, content}]; options: {maxNewTokens, temperature, topK,
    /// topP, seed, adapter}, each optional, or null/undefined for the defaults); onToken(text)
    /// gets each new piece and returns false to stop.
    pub fn generate(&self, messages: JsValue, options: JsValue, on_token: js_sys::Function) -> js_sys::Promise {
        let msgs = from_js("messages", &messages)
            .and_then(|v| runtime::messages_from_app(v).map_err(|e| js_error("BadInput", &e)));
        let req = from_js("generate options", &options)
            .and_then(|v| runtime::generate_request_from_app(v).map_err(|e| bad_input("generate options", e)));
        run(self, move |rt| async move {
            let (msgs, req) = (msgs?, req?);
            let rt = rt.borrow();
            let text = rt
                .generate(&msgs, &req, &mut |piece| {
                    on_token
                        .call1(&JsValue::NULL, &JsValue::from_str(piece))
                        .map(|v| v.as_bool() != Some(false))
                        .unwrap_or(true)
                })
                .await
                .map_err(err)?;
            Ok(JsValue::from_str(&text))
        })
    }

    /// GPU memory by category, the last step's timeline, wasm memory and the limits.
    pub fn memory(&self) -> Result<JsValue, JsValue> {
        to_js(&self.rt.try_borrow().map_err(|_| busy())?.memory())
    }
}
