//! Tests of the importer: plans equal to [`import_checkpoint`]'s, resumption after every kind
//! of interruption, refusals that name the file, progress events, partial imports.

use super::checkpoint::import_checkpoint;
use super::copy::import_files;
use super::files::{ByteSource, FileSet};
use super::files::{MemoryFile, MemoryFiles};
use super::plan::{plan, Segment, TensorSource};
use super::resume::ImportState;
use super::*;
use crate::base::error::{Error, Result};
use crate::base::host::HostTensor;
use crate::base::names;
use crate::base::names::{CONFIG_FILE, INDEX_FILE, SINGLE_FILE};
use crate::formats::checkpoint::Checkpoint;
use crate::formats::safetensors::encode_safetensors;
use crate::formats::testdata::{tiny_config, tiny_files};
use crate::platform::test;
use crate::store::{import_key, manifest_key, ChunkStore, Manifest};
use crate::store::{list_models, read_model_file, MemoryStore, StoreSource};
use safetensors::Dtype;
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::sync::Arc;

/// Drive a future over memory files and a memory store: ready when first polled.
fn run<T>(f: impl std::future::Future<Output = T>) -> T {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a memory future was not ready at once"),
    }
}

/// Every read: (file, start, len).
type Log = Rc<RefCell<Vec<(String, u64, usize)>>>;

/// Memory files that log each read and fail every read after the first `fail_after`.
struct Logged {
    files: MemoryFiles,
    log: Log,
    fail_after: Option<usize>,
}

struct LoggedFile {
    file: MemoryFile,
    log: Log,
    fail_after: Option<usize>,
}

impl Logged {
    fn new(files: &HashMap<String, Vec<u8>>, fail_after: Option<usize>) -> Logged {
        Logged { files: MemoryFiles::new(files.clone()), log: Log::default(), fail_after }
    }
    fn reads(&self) -> Vec<(String, u64, usize)> {
        self.log.borrow().clone()
    }
    /// Bytes read from the weights' data (not their headers).
    fn data_reads(&self) -> Vec<(String, u64, usize)> {
        let weights = |f: &str| f.ends_with(".safetensors");
        self.reads().into_iter().filter(|(f, s, _)| weights(f) && *s != 0 && *s != 8).collect()
    }
}

impl ByteSource for LoggedFile {
    fn describe(&self) -> String {
        self.file.describe()
    }
    async fn size(&self) -> Result<u64> {
        self.file.size().await
    }
    async fn read(&self, start: u64, len: usize) -> Result<Vec<u8>> {
        let n = self.log.borrow().len();
        if self.fail_after.is_some_and(|k| n >= k) {
            return Err(Error::msg(format!("{}: the network went away", self.file.name)));
        }
        self.log.borrow_mut().push((self.file.name.clone(), start, len));
        self.file.read(start, len).await
    }
}

impl FileSet for Logged {
    type Source = LoggedFile;
    async fn open(&self, name: &str) -> Result<Option<LoggedFile>> {
        let file = self.files.open(name).await?;
        Ok(file.map(|file| LoggedFile { file, log: self.log.clone(), fail_after: self.fail_after }))
    }
}

const TOKENIZER: &[u8] = b"{\"model\":{\"type\":\"BPE\"}}";
const TEMPLATE: &[u8] = b"{% for m in messages %}{{ m.content }}{% endfor %}";

/// The tiny untied model as one model.safetensors, with an extra tensor (stored, not
/// needed) and two small files.
fn single() -> HashMap<String, Vec<u8>> {
    let mut files = tiny_files(&tiny_config(false), &[], &[("extra.scale", vec![7])]);
    files.insert("tokenizer.json".into(), TOKENIZER.to_vec());
    files.insert("chat_template.jinja".into(), TEMPLATE.to_vec());
    files
}

type Named<'a> = (&'a str, &'a HostTensor);

/// The same tensors in two shards with an index, each shard in an order of its own;
/// shard 2 also holds a tensor the index does not name (ignored).
fn sharded() -> HashMap<String, Vec<u8>> {
    let mut files = single();
    let ckpt = Checkpoint::from_files(files.clone()).expect("the tiny model opens");
    files.remove(SINGLE_FILE);
    let names = ckpt.tensor_names();
    let tensors: Vec<(String, HostTensor)> =
        names.iter().map(|n| (n.clone(), ckpt.tensor(n).expect("reads"))).collect();
    let (mut one, mut two): (Vec<Named>, Vec<Named>) = (Vec::new(), Vec::new());
    let mut map = serde_json::Map::new();
    for (i, (n, t)) in tensors.iter().enumerate() {
        let (shard, list) = if i % 3 == 0 {
            ("model-00001-of-00002.safetensors", &mut one)
        } else {
            ("model-00002-of-00002.safetensors", &mut two)
        };
        list.push((n, t));
        map.insert(n.clone(), shard.into());
    }
    one.reverse();
    let stray = HostTensor::from_f32(&[3], vec![1.0, 2.0, 3.0]);
    two.push(("not.in.the.index", &stray));
    files.insert("model-00001-of-00002.safetensors".into(), encode_safetensors(&one));
    files.insert("model-00002-of-00002.safetensors".into(), encode_safetensors(&two));
    let index = serde_json::json!({"metadata": {"total_size": 0}, "weight_map": map});
    files.insert(INDEX_FILE.into(), index.to_string().into_bytes());
    files
}

type Files = HashMap<String, Vec<u8>>;

fn opts(max_chunk: usize) -> ImportOptions {
    ImportOptions { max_chunk, free_bytes: None }
}

/// Import `files` into `store` as "m"; the manifest and the events.
fn import(store: &MemoryStore, files: &Logged, max_chunk: usize) -> (Result<Manifest>, Vec<Progress>) {
    let mut events = Vec::new();
    let r = run(import_files(store, "m", files, &opts(max_chunk), &mut |p| events.push(p)));
    (r, events)
}

/// Every key and its bytes.
fn contents(store: &MemoryStore) -> Vec<(String, Vec<u8>)> {
    let keys = ChunkStore::keys(store, "").expect("keys");
    keys.into_iter().map(|k| (k.clone(), ChunkStore::get(store, &k).expect("get"))).collect()
}

fn err_text<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.expect_err("expected an error").to_string()
}

/// Checks common to every complete import of `files` at `max_chunk`: the same manifest
/// and chunks as import_checkpoint, each data byte read once, no read over a chunk, the
/// same tensors through StoreSource, the small files readable.
fn check_import(files: &HashMap<String, Vec<u8>>, max_chunk: usize) -> Manifest {
    let ckpt = Checkpoint::from_files(files.clone()).expect("opens");
    let want_store = MemoryStore::new();
    let want = import_checkpoint(&want_store, "m", &ckpt, max_chunk).expect("import_checkpoint");
    assert_eq!(want.files.len(), 2, "the small files are in the manifest");

    let store = Arc::new(MemoryStore::new());
    let logged = Logged::new(files, None);
    let (man, _) = import(&store, &logged, max_chunk);
    let man = man.expect("imports");
    assert_eq!(man, want, "the same manifest as import_checkpoint");
    assert_eq!(contents(&store), contents(&want_store), "the same keys and bytes");
    let data = logged.data_reads();
    assert!(data.iter().all(|r| r.2 <= max_chunk), "a read over {max_chunk} bytes: {data:?}");
    let total: usize = man.chunks.iter().map(|c| c.bytes).sum();
    assert_eq!(data.iter().map(|r| r.2).sum::<usize>(), total, "each data byte is read once");
    for (f, s, n) in logged.reads() {
        if f.ends_with(".safetensors") && s == 0 {
            assert_eq!(n, 8, "{f}: the first read is the header length");
        }
    }

    let src = StoreSource::open(store.clone(), "m").expect("opens");
    for name in ckpt.tensor_names() {
        assert_eq!(src.tensor(&name).expect("reads"), ckpt.tensor(&name).expect("reads"), "{name}");
    }
    let tok = run(read_model_file(store.as_ref(), &man, "tokenizer.json")).expect("reads");
    assert_eq!(tok.as_deref(), Some(TOKENIZER));
    assert_eq!(run(read_model_file(store.as_ref(), &man, "merges.txt")).expect("reads"), None);
    assert_eq!(list_models(store.as_ref()).expect("lists"), [("m".to_string(), total as u64)]);
    assert!(partial_imports(store.as_ref()).expect("lists").is_empty());
    man
}

#[test]
fn same_as_import_checkpoint() {
    for files in [single(), sharded()] {
        let whole = check_import(&files, MAX_CHUNK_BYTES);
        assert_eq!(whole.chunks.len(), 1);
        let man = check_import(&files, 700);
        assert!(man.chunks.iter().all(|c| c.bytes <= 700));
        assert!(man.tensors.iter().any(|t| t.pieces.len() > 1), "no tensor was split");
        let shared = man
            .chunks
            .iter()
            .any(|c| man.tensors.iter().filter(|t| t.pieces.iter().any(|p| p.chunk == c.key)).count() > 1);
        assert!(shared, "no chunk holds two tensors");
        let order: Vec<&str> = man.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(order[0], names::EMBED_KEY);
        assert_eq!(order[order.len() - 1], "extra.scale", "the others come after the layout's");
        assert!(!order.contains(&"not.in.the.index"));
    }
}

#[test]
fn plan_merges_adjacent_reads() {
    let t = |name: &str, file: &str, start: u64, end: u64| TensorSource {
        name: name.into(),
        dtype: Dtype::U8,
        shape: vec![(end - start) as usize],
        file: file.into(),
        start,
        end,
    };
    let tensors = [t("a", "x", 8, 108), t("b", "x", 108, 158), t("c", "y", 8, 38), t("d", "x", 200, 560)];
    let p = plan("m", String::new(), Vec::new(), &tensors, 200).expect("plans");
    let seg = |f: &str, start, len| Segment { file: f.into(), start, len };
    assert_eq!(p.chunks.len(), 3);
    assert_eq!(p.chunks[0].segments, [seg("x", 8, 150), seg("y", 8, 30)]);
    assert_eq!(p.chunks[1].segments, [seg("x", 200, 200)]);
    assert_eq!(p.chunks[2].segments, [seg("x", 400, 160)]);
    assert_eq!(p.manifest.tensors[3].pieces.len(), 2, "d is split");
    assert!(plan("m", String::new(), Vec::new(), &tensors, 0).is_err());
}

#[test]
fn resumes_where_it_stopped() {
    for files in [single(), sharded()] {
        let max = 700;
        let clean = MemoryStore::new();
        let full = Logged::new(&files, None);
        let want = import(&clean, &full, max).0.expect("imports");
        let reads = full.reads().len();

        // The network fails half way: an error, nothing listed, a partial import.
        let store = MemoryStore::new();
        let (r, _) = import(&store, &Logged::new(&files, Some(reads / 2)), max);
        assert!(err_text(r).contains("the network went away"));
        assert!(list_models(&store).expect("lists").is_empty(), "a partial import is not listed");
        let state: ImportState =
            serde_json::from_slice(&ChunkStore::get(&store, &import_key("m")).expect("import.json")).expect("parses");
        let done: u64 = state.done.iter().map(|c| c.bytes as u64).sum();
        let total: u64 = want.chunks.iter().map(|c| c.bytes as u64).sum();
        assert!(state.done.len() >= 2 && done < total, "{} chunks done", state.done.len());
        let partial = partial_imports(&store).expect("lists");
        assert_eq!(partial, [PartialImport { model: "m".into(), done, total }]);

        // A done chunk is corrupted: it is fetched again with those not done.
        let bad = &state.done[1];
        let mut bytes = ChunkStore::get(&store, &bad.key).expect("get");
        bytes[3] ^= 0x20;
        ChunkStore::put(&store, &bad.key, &bytes).expect("put");
        let again = Logged::new(&files, None);
        let (man, events) = import(&store, &again, max);
        assert_eq!(man.expect("resumes"), want, "the same manifest as an uninterrupted import");
        assert_eq!(contents(&store), contents(&clean), "the same keys and bytes");
        let fetched: u64 = again.data_reads().iter().map(|r| r.2 as u64).sum();
        assert_eq!(fetched, total - done + bad.bytes as u64, "only the chunks not done are read");
        assert!(partial_imports(&store).expect("lists").is_empty());
        check_events(&events, &want);
    }
}

/// A memory store that refuses writes once `room` bytes have been written, as a
/// browser does when the origin's quota is full.
struct Full {
    store: MemoryStore,
    room: std::sync::atomic::AtomicUsize,
}

impl ChunkStore for Full {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        use std::sync::atomic::Ordering::SeqCst;
        let room = self.room.load(SeqCst);
        if bytes.len() > room {
            return Err(Error::msg(format!("writing {key} failed: the storage quota is full")));
        }
        self.room.store(room - bytes.len(), SeqCst);
        ChunkStore::put(&self.store, key, bytes)
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        ChunkStore::get(&self.store, key)
    }
    fn delete(&self, key: &str) -> Result<()> {
        ChunkStore::delete(&self.store, key)
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        ChunkStore::keys(&self.store, prefix)
    }
}

#[test]
fn a_full_store_is_refused_or_resumed() {
    let files = single();
    let max = 700;
    let clean = MemoryStore::new();
    let want = import(&clean, &Logged::new(&files, None), max).0.expect("imports");
    let total: u64 = want.chunks.iter().map(|c| c.bytes as u64).sum();
    fn import_with_free<S: ChunkStore>(store: &S, files: &Files, max: usize, free: u64) -> Result<Manifest> {
        let o = ImportOptions { max_chunk: max, free_bytes: Some(free) };
        run(import_files(store, "m", &Logged::new(files, None), &o, &mut |_| {}))
    }
    let with_free = |store: &MemoryStore, free: u64| import_with_free(store, &files, max, free);
    let full_with_free = |store: &Full, free: u64| import_with_free(store, &files, max, free);

    // Known too little room: refused before anything is written, both sizes named.
    let store = MemoryStore::new();
    let msg = err_text(with_free(&store, total - 1));
    assert!(msg.contains("quota") && msg.contains(&format!("({total} bytes)")), "{msg}");
    assert!(ChunkStore::keys(&store, "").expect("keys").is_empty(), "nothing is written");

    // The store fills up half way: an error, nothing listed, the chunks written kept.
    let full = Full { store: MemoryStore::new(), room: (total as usize / 2).into() };
    let (r, _) = {
        let mut events = Vec::new();
        let r = run(import_files(&full, "m", &Logged::new(&files, None), &opts(max), &mut |p| events.push(p)));
        (r, events)
    };
    assert!(err_text(r).contains("quota"));
    assert!(list_models(&full).expect("lists").is_empty(), "a partial import is not listed");
    let partial = partial_imports(&full).expect("lists");
    assert_eq!(partial.len(), 1);
    let done = partial[0].done;
    assert!(done > 0 && done < total, "{done} of {total}");

    // Free space known again: one byte short is refused and keeps the partial import;
    // exactly enough finishes it with the same chunks as an uninterrupted import.
    full.room.store(usize::MAX, std::sync::atomic::Ordering::SeqCst);
    let short = total - done - 1;
    assert!(err_text(full_with_free(&full, short)).contains("quota"));
    assert_eq!(partial_imports(&full).expect("lists"), partial, "the partial import is kept");
    assert_eq!(full_with_free(&full, total - done).expect("resumes"), want);
    assert_eq!(contents(&full.store), contents(&clean), "the same keys and bytes");
}

#[test]
fn another_plan_starts_over() {
    let files = sharded();
    let store = MemoryStore::new();
    let (r, _) = import(&store, &Logged::new(&files, Some(12)), 700);
    assert!(r.is_err());
    let man = import(&store, &Logged::new(&files, None), 900).0.expect("imports");
    let mut keys: Vec<String> = man.chunks.iter().map(|c| c.key.clone()).collect();
    keys.extend(man.files.iter().map(|f| f.key.clone()));
    keys.push(manifest_key("m"));
    keys.sort();
    assert_eq!(ChunkStore::keys(&store, "").expect("keys"), keys, "nothing of the first plan is left");

    // Complete with this plan: back at once, reading headers only.
    let again = Logged::new(&files, None);
    let (same, events) = import(&store, &again, 900);
    assert_eq!(same.expect("imports"), man);
    assert!(again.data_reads().is_empty(), "no data is read again");
    assert!(matches!(events.last(), Some(Progress::Ready { .. })));

    // Another plan replaces the model.
    let single = Logged::new(&single(), None);
    let other = import(&store, &single, 900).0.expect("imports");
    assert_ne!(other.chunks.len(), 0);
    let left = ChunkStore::keys(&store, "").expect("keys");
    assert_eq!(left.len(), other.chunks.len() + other.files.len() + 1, "{left:?}");
}

/// The header of a safetensors file rewritten by `f`, the data kept.
fn tamper(bytes: &[u8], f: impl FnOnce(&mut serde_json::Map<String, serde_json::Value>)) -> Vec<u8> {
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes")) as usize;
    let mut header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).expect("a header");
    f(&mut header);
    let mut head = serde_json::Value::Object(header).to_string().into_bytes();
    head.resize(head.len().next_multiple_of(8), b' ');
    let mut out = (head.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&head);
    out.extend_from_slice(&bytes[8 + n..]);
    out
}

#[test]
fn hostile_files_are_refused() {
    let norm = "model.norm.weight";
    let n0 = "model.layers.0.input_layernorm.weight";
    let n1 = "model.layers.1.input_layernorm.weight";
    let down = "model.layers.1.mlp.down_proj.weight";
    let with = |name: &str, bytes: Vec<u8>| {
        let mut f = single();
        f.insert(name.into(), bytes);
        f
    };
    let st = single()[SINGLE_FILE].clone();
    let set = |tensor: &'static str, field: &'static str, v: serde_json::Value| {
        tamper(&st, move |h| {
            h[tensor][field] = v;
        })
    };
    let offsets = |h: &serde_json::Map<String, serde_json::Value>, t: &str| h[t]["data_offsets"].clone();
    let mut long = st.clone();
    long[..8].copy_from_slice(&(st.len() as u64).to_le_bytes());
    let mut huge = st.clone();
    huge[..8].copy_from_slice(&200_000_000u64.to_le_bytes());
    let mut trailing = st.clone();
    trailing.extend_from_slice(&[0; 4]);
    let data_len = {
        let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes"));
        st.len() as u64 - 8 - n
    };
    let cfg = tiny_config(false);
    let mut no_config = single();
    no_config.remove(CONFIG_FILE);
    let mut no_weights = single();
    no_weights.remove(SINGLE_FILE);
    let index = |v: serde_json::Value| {
        let mut f = sharded();
        f.insert(INDEX_FILE.into(), v.to_string().into_bytes());
        f
    };
    let shard1 = "model-00001-of-00002.safetensors";
    let nan_at = |element: usize, value: f32| {
        let n = u64::from_le_bytes(st[..8].try_into().expect("8 bytes")) as usize;
        let h: serde_json::Value = serde_json::from_slice(&st[8..8 + n]).expect("header");
        assert_eq!(h[down]["dtype"], "F32");
        let at = 8 + n + h[down]["data_offsets"][0].as_u64().expect("offset") as usize + element * 4;
        let mut b = st.clone();
        b[at..at + 4].copy_from_slice(&value.to_le_bytes());
        b
    };
    // (files, what the error must name)
    let cases: Vec<(Files, Vec<&str>)> = vec![
        (with(SINGLE_FILE, nan_at(5, f32::NAN)), vec![down, "element 5", "NaN or infinite"]),
        (with(SINGLE_FILE, nan_at(0, f32::NEG_INFINITY)), vec![down, "element 0", "NaN or infinite"]),
        (with(SINGLE_FILE, long), vec![SINGLE_FILE, "runs past the end"]),
        (with(SINGLE_FILE, huge), vec![SINGLE_FILE, "over the limit"]),
        (with(SINGLE_FILE, st[..5].to_vec()), vec![SINGLE_FILE, "too short"]),
        (with(SINGLE_FILE, trailing), vec![SINGLE_FILE, "after the last tensor"]),
        (
            with(SINGLE_FILE, set(norm, "data_offsets", serde_json::json!([0, data_len + 4]))),
            vec![norm, "outside the data"],
        ),
        (with(SINGLE_FILE, set(norm, "data_offsets", serde_json::json!([40, 8]))), vec![norm, "end before"]),
        (with(SINGLE_FILE, tamper(&st, |h| h[n1]["data_offsets"] = offsets(h, n0))), vec![SINGLE_FILE, "overlap", n0]),
        (with(SINGLE_FILE, set(norm, "dtype", "Q4".into())), vec![SINGLE_FILE, norm, "unknown dtype"]),
        (with(SINGLE_FILE, set(norm, "shape", serde_json::json!([35]))), vec![SINGLE_FILE, norm, "make 140 bytes"]),
        (with(SINGLE_FILE, b"\x10\0\0\0\0\0\0\0{not json}      ".to_vec()), vec![SINGLE_FILE, "header"]),
        (tiny_files(&cfg, &[], &[(norm, vec![35])]), vec![SINGLE_FILE, norm, "expected shape [36]", "config.json"]),
        (tiny_files(&cfg, &[down], &[]), vec![down, "missing from model.safetensors"]),
        (no_config, vec![CONFIG_FILE, "missing"]),
        (with(CONFIG_FILE, b"{\"hidden_size\": \"wide\"}".to_vec()), vec![CONFIG_FILE]),
        (no_weights, vec![SINGLE_FILE, INDEX_FILE]),
        (index(serde_json::json!({"weights": {}})), vec![INDEX_FILE, "weight_map"]),
        (with(INDEX_FILE, b"not json".to_vec()), vec![INDEX_FILE]),
        (
            index(serde_json::json!({"weight_map": {norm: "model-00003-of-00002.safetensors"}})),
            vec![INDEX_FILE, "model-00003-of-00002.safetensors", norm],
        ),
        (
            index(serde_json::json!({"weight_map": {norm: "../secret.safetensors"}})),
            vec![INDEX_FILE, "not a file name"],
        ),
        (index(serde_json::json!({"weight_map": {"nowhere": shard1}})), vec![INDEX_FILE, "nowhere", shard1]),
    ];
    for (i, (files, want)) in cases.into_iter().enumerate() {
        let store = MemoryStore::new();
        let (r, events) = import(&store, &Logged::new(&files, None), 700);
        let e = err_text(r);
        assert!(want.iter().all(|w| e.contains(w)), "case {i}: {e:?} does not name {want:?}");
        assert!(!events.iter().any(|p| matches!(p, Progress::Ready { .. })), "case {i}: ready");
        assert_eq!(ChunkStore::keys(&store, "").expect("keys"), Vec::<String>::new(), "case {i}: {e}");
    }
}

/// Per file: Initiate first, loaded rising to its total, Done once and last; Total
/// rising to the chunk bytes; Ready last.
fn check_events(events: &[Progress], man: &Manifest) {
    let total: u64 = man.chunks.iter().map(|c| c.bytes as u64).sum();
    assert_eq!(events.last(), Some(&Progress::Ready { name: "m".into(), bytes: total }));
    assert_eq!(events.iter().filter(|p| matches!(p, Progress::Ready { .. })).count(), 1);
    let totals: Vec<(u64, u64)> = events
        .iter()
        .filter_map(|p| match p {
            Progress::Total { loaded, total, .. } => Some((*loaded, *total)),
            _ => None,
        })
        .collect();
    assert_eq!(totals.len(), man.chunks.len(), "a total after each chunk");
    assert!(totals.windows(2).all(|w| w[0].0 <= w[1].0), "total loaded falls: {totals:?}");
    assert_eq!(totals.last(), Some(&(total, total)));
    let mut files: BTreeMap<&str, Vec<&Progress>> = BTreeMap::new();
    for p in events {
        match p {
            Progress::Initiate { file, .. }
            | Progress::Download { file, .. }
            | Progress::Progress { file, .. }
            | Progress::Done { file, .. } => files.entry(file).or_default().push(p),
            _ => {}
        }
    }
    for (file, list) in &files {
        assert!(matches!(list[0], Progress::Initiate { .. }), "{file}: {list:?}");
        assert!(matches!(list[list.len() - 1], Progress::Done { .. }), "{file}: {list:?}");
        assert_eq!(list.iter().filter(|p| matches!(p, Progress::Done { .. })).count(), 1, "{file}");
        let loaded: Vec<(u64, u64)> = list
            .iter()
            .filter_map(|p| match p {
                Progress::Progress { loaded, total, progress, .. } => {
                    assert!((0.0..=100.0).contains(progress));
                    Some((*loaded, *total))
                }
                _ => None,
            })
            .collect();
        assert!(loaded.windows(2).all(|w| w[0].0 <= w[1].0), "{file}: loaded falls: {loaded:?}");
        let last = loaded.last().expect("progress");
        assert_eq!(last.0, last.1, "{file}: ends at its total");
    }
    for f in [CONFIG_FILE, "tokenizer.json", "chat_template.jinja"] {
        assert!(files.contains_key(f), "{f}: no events");
    }
    let weights: u64 = files
        .iter()
        .filter(|(f, _)| f.ends_with(".safetensors"))
        .map(|(_, list)| match list.iter().rev().find(|p| matches!(p, Progress::Progress { .. })) {
            Some(Progress::Progress { total, .. }) => *total,
            _ => 0,
        })
        .sum();
    assert_eq!(weights, total, "the weight files' totals add up to the chunk bytes");
}

#[test]
fn progress_events() {
    for files in [single(), sharded()] {
        let store = MemoryStore::new();
        let (man, events) = import(&store, &Logged::new(&files, None), 700);
        check_events(&events, &man.expect("imports"));
    }
    let p = Progress::Total { name: "m".into(), loaded: 1, total: 2, progress: 50.0, rate: 3.0, eta: 0.5 };
    let v = serde_json::to_value(&p).expect("serialises");
    assert_eq!(
        v,
        serde_json::json!({"status": "total", "name": "m", "loaded": 1, "total": 2, "progress": 50.0, "rate": 3.0, "eta": 0.5})
    );
    let p = Progress::Initiate { name: "m".into(), file: "config.json".into() };
    let v = serde_json::to_value(&p).expect("serialises");
    assert_eq!(v, serde_json::json!({"status": "initiate", "name": "m", "file": "config.json"}));
}

/// The native path: a model directory into a directory store.
#[cfg(not(target_arch = "wasm32"))]
#[test]
fn directory_to_directory() {
    use super::files::DirFiles;
    use crate::store::DirStore;
    let tag = format!("webtune-import-{}-{}", std::process::id(), now_ms() as u64);
    let root = std::env::temp_dir().join(tag);
    let files = sharded();
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).expect("mkdir");
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).expect("write");
    }
    let want = import(&MemoryStore::new(), &Logged::new(&files, None), 700).0.expect("imports");
    let store = Arc::new(DirStore::new(root.join("store")));
    let man = run(import_files(store.as_ref(), "m", &DirFiles { dir }, &opts(700), &mut |_| {}));
    let result = man.map(|man| (man, StoreSource::open(store.clone(), "m").map(|s| s.manifest().clone())));
    std::fs::remove_dir_all(&root).expect("cleans up");
    let (man, opened) = result.expect("imports");
    assert_eq!(man, want);
    assert_eq!(opened.expect("opens"), want);
}

#[test]
fn model_files_are_checked() {
    let store = MemoryStore::new();
    let man = import(&store, &Logged::new(&single(), None), 700).0.expect("imports");
    let f = man.files.iter().find(|f| f.name == "chat_template.jinja").expect("stored");
    assert_eq!(f.key, "m/files/chat_template.jinja");
    ChunkStore::put(&store, &f.key, b"{{ something else }}").expect("put");
    let e = err_text(run(read_model_file(&store, &man, "chat_template.jinja")));
    assert!(e.contains("chat_template.jinja") && e.contains("corrupt"), "{e}");
    // A manifest written before the files were stored still reads.
    let mut old = serde_json::to_value(&man).expect("serialises");
    old.as_object_mut().expect("an object").remove("files");
    let old: Manifest = serde_json::from_value(old).expect("parses");
    assert!(old.files.is_empty());
    assert_eq!(run(read_model_file(&store, &old, "tokenizer.json")).expect("reads"), None);
}
