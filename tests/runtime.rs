//! The runtime the browser worker runs (src/runtime/), natively on a directory store: import
//! the tiny model from files, load it block by block from the store, train, save the session,
//! "reload the page" (a new runtime on the same store) and resume to the same losses as an
//! uninterrupted run, export the adapter, import it into a fresh runtime and get the same greedy
//! answer, and delete everything.
#![cfg(not(target_arch = "wasm32"))]

use crate::common;

use common::{chat_line, tiny_model_files, TempDir};
use webtune::data::tokenizer::Message;
use webtune::import::files::MemoryFiles;
use webtune::import::Progress;
use webtune::platform::block_on;
use webtune::runtime::{GenerateRequest, Runtime};
use webtune::store::DirStore;
use webtune::train::trainer::TrainConfig;

fn dataset() -> String {
    [
        chat_line("What is the capital of Zorbania?", "The capital of Zorbania is Quillfort."),
        chat_line("Who invented the glimmerphone?", "Mira Talvane invented the glimmerphone in 1873."),
        chat_line("What do moon otters eat?", "Moon otters eat silver kelp and tiny comets."),
    ]
    .join("\n")
}

fn config() -> TrainConfig {
    TrainConfig {
        rank: 8,
        alpha: 16.0,
        batch: 3,
        steps: Some(6),
        seed: 3,
        save_every: 0,
        lr: 1e-2,
        schedule: "constant".into(),
        warmup_ratio: 0.0,
        ..TrainConfig::default()
    }
}

async fn runtime(dir: &std::path::Path) -> Runtime<DirStore> {
    let gpu = webtune::gpu::Gpu::new().await.expect("a GPU device");
    Runtime::new(gpu, DirStore::new(dir))
}

fn ask() -> Vec<Message> {
    vec![Message::new("user", "What is the capital of Zorbania?")]
}

fn greedy(adapter: bool) -> GenerateRequest {
    GenerateRequest { max_new_tokens: 12, adapter, ..GenerateRequest::default() }
}

#[test]
fn import_train_save_resume_export() {
    block_on(async {
        let dir = TempDir::new("runtime");
        let files = MemoryFiles::new(tiny_model_files(7));

        // Import with progress; the model is listed once complete.
        let mut rt = runtime(dir.path()).await;
        let refused = rt.import("tiny", &files, Some(1000), &mut |_| {}).await.expect_err("too little free space");
        assert!(refused.to_string().contains("quota"), "{refused}");
        assert!(rt.list_models().await.expect("lists").is_empty(), "a refused import is not listed");
        let mut events = Vec::new();
        rt.import("tiny", &files, None, &mut |p| events.push(p)).await.expect("imports");
        assert!(matches!(events.last(), Some(Progress::Ready { .. })), "the last event is ready");
        let listed = rt.list_models().await.expect("lists");
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, "tiny");
        assert!(rt.import("sessions", &files, None, &mut |_| {}).await.is_err(), "a reserved name is refused");

        let info = rt.load_model("tiny", "stored", false).await.expect("loads from the store");
        assert_eq!((info.layers, info.hidden, info.vocab), (2, 64, 49152));
        assert!(info.chat_template);
        assert!(rt.example_tokens("Hi", "Hello there").expect("counts") > 5);
        let base_answer = rt.generate(&ask(), &greedy(false), &mut |_| true).await.expect("generates");

        // The uninterrupted run.
        let s = rt.start_training("run1", config(), &dataset()).await.expect("starts");
        assert_eq!((s.total_steps, s.examples), (6, 3));
        let mut losses = Vec::new();
        while !rt.training_done() {
            // Step 2 is profiled (the resumed run below, unprofiled, must still match it).
            rt.set_profile(losses.len() == 1);
            let r = rt.train_step().await.expect("a step");
            assert!(r.memory.peak > 0 && !r.memory.timeline.is_empty(), "memory is reported per step");
            match (&r.profile, r.step) {
                (Some(p), 2) => {
                    let mm: Vec<_> = p.kernels.iter().filter(|k| k.name.starts_with("matmul_")).collect();
                    assert!(!mm.is_empty() && mm.iter().all(|k| k.calls > 0 && k.flops > 0.0), "{p:?}");
                    assert!(p.kernels.iter().map(|k| k.ms).sum::<f64>() > 0.0, "the kernels were timed: {p:?}");
                }
                (None, s) if s != 2 => {}
                (p, s) => panic!("step {s}: profile {p:?} (only step 2 was profiled)"),
            }
            losses.push(r.loss);
            if r.step == 3 {
                rt.save_session().await.expect("saves");
            }
        }
        assert!(losses[5] < 0.7 * losses[0], "the loss falls: {losses:?}");
        let (weights, config_json) = rt.export_adapter().await.expect("exports");
        let mut streamed = String::new();
        let trained_answer = rt
            .generate(&ask(), &greedy(true), &mut |t| {
                streamed.push_str(t);
                true
            })
            .await
            .expect("generates with the adapter");
        assert_eq!(streamed, trained_answer, "the streamed pieces make the answer");
        assert_ne!(trained_answer, base_answer, "training changed the answer");
        // Cancelling after the first piece stops early.
        let mut n = 0;
        let cut = rt
            .generate(&ask(), &greedy(true), &mut |_| {
                n += 1;
                false
            })
            .await
            .expect("generates");
        assert_eq!(n, 1);
        assert!(cut.len() < trained_answer.len());
        drop(rt);

        // "Reload": a new runtime on the same store lists the session saved after step 3 and
        // resumes it to the same losses and the same adapter.
        let mut rt = runtime(dir.path()).await;
        let sessions = rt.list_sessions().await.expect("lists sessions");
        assert_eq!(sessions.len(), 1);
        assert_eq!((sessions[0].id.as_str(), sessions[0].step), ("run1", 3));
        let s = rt.resume_session("run1").await.expect("resumes, loading the model");
        assert_eq!(s.step, 3);
        assert_eq!(s.losses, losses[..3]);
        let mut resumed = s.losses.clone();
        while !rt.training_done() {
            resumed.push(rt.train_step().await.expect("a step").loss);
            rt.save_session().await.expect("saves every step (alternating slots)");
        }
        assert_eq!(resumed, losses, "resumed losses equal the uninterrupted run's");
        let (weights2, _) = rt.export_adapter().await.expect("exports");
        assert!(weights2 == weights, "the resumed adapter equals the uninterrupted one");

        // Import the exported adapter into a fresh runtime: the same greedy answer.
        let mut rt2 = runtime(dir.path()).await;
        rt2.load_model("tiny", "stored", false).await.expect("loads");
        rt2.import_adapter(&weights, config_json.as_bytes()).expect("imports the adapter");
        let again = rt2.generate(&ask(), &greedy(true), &mut |_| true).await.expect("generates");
        assert_eq!(again, trained_answer);
        assert!(rt2.import_adapter(b"not safetensors", config_json.as_bytes()).is_err());

        // Delete: nothing is listed afterwards.
        rt2.delete_session("run1").await.expect("deletes the session");
        assert!(rt2.list_sessions().await.expect("lists").is_empty());
        rt2.delete_model("tiny").await.expect("deletes the model");
        assert!(rt2.list_models().await.expect("lists").is_empty());
        assert!(rt2.load_model("tiny", "stored", false).await.is_err());
    });
}

/// A directory store that refuses writes with the browser's quota error while `full` is set
/// (only writes whose key ends with `only`, when given).
struct QuotaStore {
    inner: DirStore,
    full: std::sync::Arc<std::sync::atomic::AtomicBool>,
    only: Option<&'static str>,
}

impl webtune::store::ChunkStore for QuotaStore {
    fn put(&self, key: &str, bytes: &[u8]) -> webtune::base::error::Result<()> {
        if self.full.load(std::sync::atomic::Ordering::Relaxed) && self.only.is_none_or(|o| key.ends_with(o)) {
            return Err(webtune::base::error::Error::msg(format!(
                "{key}: QuotaExceededError: the quota has been exceeded"
            )));
        }
        self.inner.put(key, bytes)
    }
    fn get(&self, key: &str) -> webtune::base::error::Result<Vec<u8>> {
        self.inner.get(key)
    }
    fn delete(&self, key: &str) -> webtune::base::error::Result<()> {
        self.inner.delete(key)
    }
    fn keys(&self, prefix: &str) -> webtune::base::error::Result<Vec<String>> {
        self.inner.keys(prefix)
    }
}

/// A full disk while a session is checkpointed (the checkpoint itself refused, or only the
/// state.json written after it): the save fails with the quota error, and the run's last good
/// checkpoint is what a reload resumes from, to the uninterrupted run's losses.
#[test]
fn a_full_store_while_checkpointing_keeps_the_last_checkpoint() {
    block_on(async {
        let files = MemoryFiles::new(tiny_model_files(7));
        let reference = {
            let dir = TempDir::new("runtime-quota-ref");
            let mut rt = runtime(dir.path()).await;
            rt.import("tiny", &files, None, &mut |_| {}).await.expect("imports");
            rt.load_model("tiny", "stored", false).await.expect("loads");
            rt.start_training("r", config(), &dataset()).await.expect("starts");
            let mut losses = Vec::new();
            while !rt.training_done() {
                losses.push(rt.train_step().await.expect("a step").loss);
            }
            losses
        };
        for only in [None, Some("state.json")] {
            let dir = TempDir::new("runtime-quota");
            let full = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let store = || QuotaStore { inner: DirStore::new(dir.path()), full: full.clone(), only };
            let gpu = webtune::gpu::Gpu::new().await.expect("a GPU device");
            let mut rt = Runtime::new(gpu, store());
            rt.import("tiny", &files, None, &mut |_| {}).await.expect("imports");
            rt.load_model("tiny", "stored", false).await.expect("loads");
            rt.start_training("r", config(), &dataset()).await.expect("starts");
            for _ in 0..2 {
                rt.train_step().await.expect("a step");
            }
            rt.save_session().await.expect("saves at step 2");
            rt.train_step().await.expect("step 3");
            full.store(true, std::sync::atomic::Ordering::Relaxed);
            let e = rt.save_session().await.expect_err("the store is full").to_string();
            assert!(e.contains("quota"), "{only:?}: {e}");
            drop(rt);

            full.store(false, std::sync::atomic::Ordering::Relaxed);
            let gpu = webtune::gpu::Gpu::new().await.expect("a GPU device");
            let mut rt = Runtime::new(gpu, store());
            let listed = rt.list_sessions().await.expect("lists");
            assert_eq!(
                listed.iter().map(|s| s.step).collect::<Vec<_>>(),
                vec![2],
                "{only:?}: the last good checkpoint"
            );
            let s = rt.resume_session("r").await.expect("resumes");
            let mut losses = s.losses.clone();
            while !rt.training_done() {
                losses.push(rt.train_step().await.expect("a step").loss);
            }
            assert_eq!(losses, reference, "{only:?}: resumed to the uninterrupted run's losses");
        }
    });
}

/// A model loaded with `stream`: only the final norm stays on the GPU; each block and vocab
/// chunk is fetched from the store (chunk by chunk, as from IndexedDB) when a step needs it and
/// dropped after. Training gives the resident model's losses and adapter bit for bit, the GPU
/// holds a fraction of the weights (training and generation alike), the host stages about one
/// block's chunks at a time, a saved run resumes streamed, and generation, streamed block by
/// block for every token, answers as the resident model does.
#[test]
fn streamed_training_equals_resident() {
    use webtune::import::{import_files, ImportOptions};
    block_on(async {
        let dir = TempDir::new("runtime-streamed");
        let files = MemoryFiles::new(tiny_model_files(7));
        // Small chunks, so that a block or a vocab chunk spans several of them, as a real
        // model's do at 16 MiB.
        let opts = ImportOptions { max_chunk: 256 << 10, ..ImportOptions::default() };
        let man = import_files(&DirStore::new(dir.path()), "tiny", &files, &opts, &mut |_| {}).await.expect("imports");
        let stored: usize = man.chunks.iter().map(|c| c.bytes).sum();
        let largest = man.chunks.iter().map(|c| c.bytes).max().unwrap_or(0);
        let steps = 4;
        let cfg = TrainConfig { steps: Some(steps), ..config() };

        let run = |stream: bool| {
            let (dir, cfg) = (dir.path().to_path_buf(), cfg.clone());
            async move {
                let mut rt = runtime(&dir).await;
                let info = rt.load_model("tiny", "q4", stream).await.expect("loads");
                assert_eq!(info.streamed, stream);
                rt.start_training(if stream { "streamed" } else { "resident" }, cfg, &dataset()).await.expect("starts");
                let mut losses = Vec::new();
                let mut weights_peak = 0;
                let mut staged_peak = 0;
                while !rt.training_done() {
                    let r = rt.train_step().await.expect("a step");
                    losses.push(r.loss);
                    weights_peak = r.memory.categories["weights"].peak;
                    staged_peak = r.memory.staged_peak_bytes;
                    if r.step == 2 {
                        rt.save_session().await.expect("saves");
                    }
                }
                let adapter = rt.export_adapter().await.expect("exports").0;
                rt.gpu.alloc.reset_peaks();
                let answer = rt.generate(&ask(), &greedy(true), &mut |_| true).await.expect("generates");
                let gen_peak = rt.gpu.alloc.stats().peak(webtune::gpu::Category::Weights);
                (info, losses, adapter, answer, weights_peak.max(gen_peak), staged_peak)
            }
        };
        let (res, losses, adapter, answer, res_peak, res_staged) = run(false).await;
        let (info, s_losses, s_adapter, s_answer, s_peak, staged) = run(true).await;
        assert_eq!(s_losses, losses, "streamed losses equal the resident model's");
        assert!(s_adapter == adapter, "the streamed run's adapter equals the resident run's");
        assert_eq!(s_answer, answer, "the same greedy answer");
        assert_eq!(res_staged, 0, "a resident model stages nothing while it trains");
        println!(
            "weights on the GPU: resident {} B (peak {res_peak}), streamed {} B at rest, peak {s_peak} B \
             in a step or an answer; host staged at most {staged} B of {stored} B stored (chunks ≤ {largest} B)",
            res.weight_bytes, info.weight_bytes
        );
        assert_eq!(info.weight_bytes, 64 * 4, "a streamed model keeps only the final norm (64 f32)");
        assert!(
            s_peak > 0 && s_peak * 4 <= res.weight_bytes,
            "at most a quarter of the weights on the GPU at once, in training and generation"
        );
        assert!(staged > 0 && staged * 4 <= stored as u64, "at most a quarter of the stored bytes on the host at once");

        // The run saved at step 2 is listed as streamed and resumes streamed, to the same losses.
        let mut rt = runtime(dir.path()).await;
        let listed = rt.list_sessions().await.expect("lists");
        assert!(listed.iter().any(|s| s.id == "streamed" && s.streamed && s.step == 2), "{listed:?}");
        rt.resume_session("streamed").await.expect("resumes");
        assert!(rt.model_info().is_some_and(|i| i.streamed), "resumed on a streamed model");
        let mut resumed = losses[..2].to_vec();
        while !rt.training_done() {
            resumed.push(rt.train_step().await.expect("a step").loss);
        }
        assert_eq!(resumed, losses);
    });
}
