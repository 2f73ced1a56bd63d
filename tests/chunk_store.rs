//! The chunked weight store (`webtune::store::chunks`), natively and in headless Chromium:
//! - import → read back is bit-exact through the memory and directory backends, with chunks
//!   small enough that tensors are split and grouped; list and delete see whole models only;
//! - a corrupt or missing chunk is an error naming it;
//! - `StoreSource` streams the same weights as `CheckpointSource` (tied and untied, f32 and
//!   bf16), reading only the chunks that hold the rows asked for;
//! - a streamed model on a `StoreSource` gives bit-identical loss and LoRA gradients, with the
//!   host cache and without it (each block then converted ahead of its use, once per use).

use crate::common;

use common::{both, fixtures, test};
use std::sync::{Arc, Mutex};
use webtune::base::names::{self, Proj};
use webtune::formats::batch::Batch;
use webtune::formats::checkpoint::Checkpoint;
use webtune::gpu::Category;
use webtune::import::import_checkpoint;
use webtune::model::lora::{read_set, Lora};
use webtune::model::source::{CheckpointSource, WeightSource};
use webtune::model::weights::WeightFormat;
use webtune::model::Model;
use webtune::store::{delete_model, list_models, manifest_key, ChunkStore, MemoryStore, StoreSource};

/// The llama-bias fixture (f32, vocab 67, C 44, 3 layers, biases); `tie` rewrites its config
/// to tied embeddings (lm_head.weight then is an extra tensor, stored but unused).
fn llama_bias(tie: bool) -> Checkpoint {
    let mut files = fixtures::llama_bias().files();
    if tie {
        let config = String::from_utf8(files["config.json"].clone()).expect("config.json is UTF-8");
        let config = config.replace("\"tie_word_embeddings\": false", "\"tie_word_embeddings\": true");
        files.insert("config.json".to_string(), config.into_bytes());
    }
    let ckpt = Checkpoint::from_files(files).expect("opens");
    assert_eq!(ckpt.config().tie_word_embeddings, tie);
    ckpt
}

/// The tiny bf16 model of tests/common: tied, no lm_head, vocab 49152 (a 6 MiB embedding).
fn tiny_bf16() -> Checkpoint {
    Checkpoint::from_files(common::tiny_model_files(5)).expect("the tiny model opens")
}

/// (model name, checkpoint, max chunk bytes)
fn models() -> Vec<(&'static str, Checkpoint, usize)> {
    vec![("bias", llama_bias(false), 1000), ("bias-tied", llama_bias(true), 1000), ("tiny", tiny_bf16(), 100_000)]
}

fn err<T>(r: webtune::base::error::Result<T>) -> String {
    match r {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

fn round_trip(store: Arc<dyn ChunkStore>) {
    let mut want = Vec::new();
    for (name, ckpt, max) in models() {
        let man = import_checkpoint(store.as_ref(), name, &ckpt, max).expect("imports");
        assert!(man.chunks.iter().all(|c| c.bytes <= max), "{name}: a chunk is over {max} bytes");
        assert!(man.tensors.iter().any(|t| t.pieces.len() > 1), "{name}: no tensor was split");
        let shared = man
            .chunks
            .iter()
            .any(|c| man.tensors.iter().filter(|t| t.pieces.iter().any(|p| p.chunk == c.key)).count() > 1);
        assert!(shared, "{name}: no chunk holds two tensors");
        let src = StoreSource::open(store.clone(), name).expect("opens");
        let mut total = 0u64;
        for t in ckpt.tensor_names() {
            let got = src.tensor(&t).expect("reads");
            assert_eq!(got, ckpt.tensor(&t).expect("reads"), "{name}: {t} differs");
            total += (got.numel() * got.dtype().bytes_per_element()) as u64;
        }
        want.push((name.to_string(), total));
    }
    store.put("partial/chunks/00000", b"an import that never finished").expect("put");
    want.sort();
    assert_eq!(list_models(store.as_ref()).expect("lists"), want);
    delete_model(store.as_ref(), "bias").expect("deletes");
    assert!(store.keys("bias/").expect("keys").is_empty());
    let left: Vec<String> = list_models(store.as_ref()).expect("lists").into_iter().map(|m| m.0).collect();
    assert_eq!(left, ["bias-tied", "tiny"]);
    assert!(err(StoreSource::open(store.clone(), "bias")).contains("model bias: no manifest"));
}

#[test]
fn round_trip_memory() {
    round_trip(Arc::new(MemoryStore::new()));
}

#[cfg(not(target_arch = "wasm32"))]
#[test]
fn round_trip_dir() {
    use webtune::store::DirStore;
    let dir = common::TempDir::new("chunks");
    let store = Arc::new(DirStore::new(dir.join("store")));
    round_trip(store.clone());
    assert!(dir.join("store/tiny/chunks/00000").is_file() && dir.join("store/tiny/manifest.json").is_file());
    assert!(!dir.join("store/bias").exists(), "deleting a model leaves no directory");
    assert!(err(store.put("../escape", b"x")).contains("not a valid key"));
    assert!(err(store.get("tiny/nothing")).contains("tiny/nothing: not found"));
}

/// The llama-bias fixture imported as model "m" in 1000-byte chunks, with one bit flipped in
/// the first chunk of layer 1's q_proj: (store, checkpoint, manifest, that chunk's key).
fn with_corrupt_q1() -> (Arc<MemoryStore>, Checkpoint, webtune::store::Manifest, String) {
    let store = Arc::new(MemoryStore::new());
    let ckpt = llama_bias(false);
    let man = import_checkpoint(store.as_ref(), "m", &ckpt, 1000).expect("imports");
    let q1 = names::proj_weight_key(1, Proj::Q);
    let key = man.tensors.iter().find(|t| t.name == q1).expect("q1 stored").pieces[0].chunk.clone();
    let mut bytes = store.get(&key).expect("get");
    bytes[17] ^= 0x40;
    store.put(&key, &bytes).expect("put");
    (store, ckpt, man, key)
}

#[test]
fn corrupt_or_missing_chunk_is_named() {
    let (store, ckpt, _, key) = with_corrupt_q1();
    let q1 = names::proj_weight_key(1, Proj::Q);
    let src = StoreSource::open(store.clone(), "m").expect("opens (chunks are checked when read)");
    let e = err(src.tensor(&q1));
    assert!(e.contains(&key) && e.contains("corrupt"), "{e}");
    assert!(err(src.layer(1)).contains(&key));
    assert_eq!(src.layer(0).expect("layer 0 reads").input_norm, ckpt.tensor(&names::input_norm_key(0)).expect("reads"));
    store.delete(&key).expect("delete");
    let e = err(src.tensor(&q1));
    assert!(e.contains(&key) && e.contains("not found"), "{e}");

    // A manifest that lacks a tensor the config needs, or lies about a shape.
    let text = String::from_utf8(store.get(&manifest_key("m")).expect("get")).expect("utf8");
    store.put(&manifest_key("m"), text.replace("model.norm.weight", "model.norm.weigh").as_bytes()).expect("put");
    assert!(err(StoreSource::open(store.clone(), "m")).starts_with("model m: model.norm.weight: missing"));
    store.put(&manifest_key("m"), text.replacen("[67,44]", "[66,44]", 1).as_bytes()).expect("put");
    assert!(err(StoreSource::open(store.clone(), "m")).contains("model.embed_tokens.weight: expected shape [67, 44]"));
}

/// Fetched from an async store (as the browser streams from IndexedDB), a chunk is checked as
/// it is staged: a corrupt one fails the fetch of the step that needs it, naming it, and the
/// reads of staged chunks (lent without a copy, not checked again) give the stored tensors.
async fn staged_chunks_checked_when_fetched() {
    use webtune::model::{Fetch, LoadStep};
    use webtune::store::staged::StoreFetch;
    let (store, ckpt, man, key) = with_corrupt_q1();
    let fetch = StoreFetch::new(store, man).expect("fetch");
    let e = fetch.fetch(LoadStep::Layer(1)).await.expect_err("a corrupt chunk").to_string();
    assert!(e.contains(&key) && e.contains("corrupt"), "{e}");
    fetch.fetch(LoadStep::Layer(0)).await.expect("layer 0 fetches");
    let staged: Arc<dyn ChunkStore> = fetch.staged();
    assert!(staged.checked());
    let src = StoreSource::open(staged, "m").expect("opens");
    let layer = src.layer(0).expect("layer 0 reads");
    for (p, (w, _)) in Proj::all().into_iter().zip(&layer.proj) {
        let want = ckpt.tensor(&names::proj_weight_key(0, p)).expect("reads");
        assert_eq!(bits(&w.to_f32()), bits(&want.to_f32()), "{p:?}");
    }
}
both!(staged_chunks_are_checked_when_fetched, staged_chunks_checked_when_fetched());

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

#[test]
fn store_source_streams_the_same_weights() {
    let store: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
    for (name, ckpt, max) in models() {
        import_checkpoint(store.as_ref(), name, &ckpt, max).expect("imports");
        let (a, b) = (CheckpointSource::new(ckpt.clone()), StoreSource::open(store.clone(), name).expect("opens"));
        let cfg = ckpt.config();
        for i in 0..cfg.layers {
            let (x, y) = (a.layer(i).expect("layer"), b.layer(i).expect("layer"));
            assert!(
                x.input_norm == y.input_norm && x.post_norm == y.post_norm && x.proj == y.proj,
                "{name}: layer {i}"
            );
        }
        assert_eq!(a.final_norm().expect("norm"), b.final_norm().expect("norm"));
        let v = cfg.vocab as u32;
        let ids = [3, v - 1, 0, 3, v / 2, v / 2 + 1, 1];
        assert_eq!(
            bits(&a.embedding_rows(&ids).expect("rows")),
            bits(&b.embedding_rows(&ids).expect("rows")),
            "{name}"
        );
        for (r0, r1) in [(0, cfg.vocab), (5, 29), (cfg.vocab - 3, cfg.vocab), (7, 7)] {
            assert_eq!(
                a.output_rows(r0, r1).expect("rows"),
                b.output_rows(r0, r1).expect("rows"),
                "{name}: {r0}..{r1}"
            );
        }
        assert!(err(b.embedding_rows(&[v])).contains("out of range"));
    }
}

/// A store that records which keys are read.
struct Counting(MemoryStore, Mutex<Vec<String>>);

impl ChunkStore for Counting {
    fn put(&self, key: &str, bytes: &[u8]) -> webtune::base::error::Result<()> {
        self.0.put(key, bytes)
    }
    fn get(&self, key: &str) -> webtune::base::error::Result<Vec<u8>> {
        self.1.lock().expect("lock").push(key.to_string());
        self.0.get(key)
    }
    fn delete(&self, key: &str) -> webtune::base::error::Result<()> {
        self.0.delete(key)
    }
    fn keys(&self, prefix: &str) -> webtune::base::error::Result<Vec<String>> {
        self.0.keys(prefix)
    }
}

#[test]
fn rows_read_only_their_chunks() {
    let store = Arc::new(Counting(MemoryStore::new(), Mutex::new(Vec::new())));
    let man = import_checkpoint(store.as_ref(), "tiny", &tiny_bf16(), 100_000).expect("imports");
    let embed = &man.tensors[0];
    assert!(embed.name == names::EMBED_KEY && embed.pieces.len() > 60, "{} pieces", embed.pieces.len());
    let src = StoreSource::open(store.clone(), "tiny").expect("opens");
    let reads = |f: &dyn Fn()| {
        store.1.lock().expect("lock").clear();
        f();
        store.1.lock().expect("lock").clone()
    };
    // Row r of (49152, 64) bf16 lies at byte 128·r: chunks 0 and 40 (4,000,000 / 100,000).
    let got = reads(&|| drop(src.embedding_rows(&[5, 31_250, 5, 6]).expect("rows")));
    assert_eq!(got, [embed.pieces[0].chunk.clone(), embed.pieces[40].chunk.clone()]);
    let got = reads(&|| drop(src.output_rows(700, 900).expect("rows"))); // bytes 89,600..115,200
    assert_eq!(got, [embed.pieces[0].chunk.clone(), embed.pieces[1].chunk.clone()]);
}

/// Loss and gradients of the llama-bias batch on a streamed model over `src` (with the host
/// cache, or converting every block at each use), and how many conversions the step made.
async fn loss_and_grads(
    gpu: &webtune::gpu::Gpu,
    src: Arc<dyn WeightSource>,
    cache: bool,
) -> (f32, Vec<(String, Vec<usize>, Vec<f32>)>, u64) {
    let fixture = fixtures::llama_bias();
    let adapter = fixture.adapter();
    let model = if cache {
        Model::streamed(gpu, src, WeightFormat::Stored).expect("streamed model")
    } else {
        Model::streamed_uncached(gpu, src, WeightFormat::Stored).expect("streamed model")
    };
    let lora = Lora::from_adapter(gpu, &model.cfg, &adapter).expect("lora");
    let batch = Batch::from_json(fixture.batch, model.cfg.vocab).expect("batch");
    let input = model.prepare(gpu, &batch).expect("input");
    let grads = lora.zeros_like(gpu, Category::Grads).expect("grads");
    gpu.profile_start();
    let loss = model.loss_and_grads(gpu, &lora, Some(&grads), &input).await.expect("loss and grads");
    let profile = gpu.profile_take().await.expect("profile").expect("profiled");
    let converts = profile.host.iter().find(|h| h.name.contains("convert")).map_or(0, |h| h.calls);
    (loss, read_set(gpu, &grads).await.expect("read grads"), converts)
}

async fn same_gradients_from_store() {
    let gpu = webtune::kernels::testutil::shared_test_gpu().await;
    for tie in [false, true] {
        let ckpt = llama_bias(tie);
        let store: Arc<dyn ChunkStore> = Arc::new(MemoryStore::new());
        import_checkpoint(store.as_ref(), "bias", &ckpt, 1000).expect("imports");
        let src = StoreSource::open(store, "bias").expect("opens");
        let layers = ckpt.config().layers as u64;
        let src: Arc<dyn WeightSource> = Arc::new(src);
        let (l0, g0, _) = loss_and_grads(&gpu, Arc::new(CheckpointSource::new(ckpt)), true).await;
        let (l1, g1, cached) = loss_and_grads(&gpu, src.clone(), true).await;
        // Without the cache each block is converted for the forward and again for the backward
        // (ahead of its use, while the GPU runs the block before): one more per block, no more.
        let (l2, g2, uncached) = loss_and_grads(&gpu, src, false).await;
        assert_eq!(uncached, cached + layers, "tied {tie}: conversions {uncached} uncached, {cached} cached");
        for (l, g) in [(l1, &g1), (l2, &g2)] {
            assert_eq!(l0.to_bits(), l.to_bits(), "tied {tie}: loss {l0} vs {l}");
            assert_eq!(g0.len(), g.len());
            for ((k, _, a), (k1, _, b)) in g0.iter().zip(g) {
                assert!(k == k1 && bits(a) == bits(b), "tied {tie}: gradient {k} differs");
            }
        }
    }
}
both!(store_source_gives_the_same_gradients, same_gradients_from_store());
