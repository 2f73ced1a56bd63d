//! The memory a GGUF import needs does not grow with the model: a GGUF of Qwen2.5-0.5B's shape
//! (991 MB, random F16 weights, `webtune make-gguf`'s) imported through the same streamed path
//! the browser takes (store/gguf_files.rs, import_files) into a store that keeps nothing, with
//! every heap allocation counted. The heap is what wasm linear memory holds (plus ~2 MB of
//! code data and stack), so its peak stands for the browser's: the target is at most 64 MiB.
//! (Measured in the browser: `node tests/browser/run.mjs --no-build --gguf FILE --no-answer`.)
#![cfg(not(target_arch = "wasm32"))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use webtune::base::error::Result;
use webtune::import::files::DirFiles;
use webtune::import::files::FileSet;
use webtune::import::gguf::GgufFiles;
use webtune::import::{import_files, ImportOptions};
use webtune::store::ChunkStore;

/// The system allocator, counting live and peak bytes.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
/// Set while the store keeps its copy of the last chunk (a real store keeps it elsewhere: on
/// disk, in IndexedDB), so that copy is not counted.
static UNCOUNTED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn count(delta: isize) {
    if UNCOUNTED.load(Relaxed) {
        return;
    }
    if delta >= 0 {
        let now = LIVE.fetch_add(delta as usize, Relaxed) + delta as usize;
        PEAK.fetch_max(now, Relaxed);
    } else {
        LIVE.fetch_sub(delta.unsigned_abs(), Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            count(l.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        count(-(l.size() as isize));
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new) };
        if !q.is_null() {
            count(new as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// A store that counts what it is given and keeps the small entries (import state, manifest)
/// and the last chunk (the importer reads each chunk back once written), uncounted.
#[derive(Default)]
struct Sink {
    small: std::sync::Mutex<std::collections::BTreeMap<String, Vec<u8>>>,
    bytes: AtomicUsize,
}

impl ChunkStore for Sink {
    fn put(&self, key: &str, bytes: &[u8]) -> Result<()> {
        self.bytes.fetch_add(bytes.len(), Relaxed);
        let mut small = self.small.lock().expect("lock");
        UNCOUNTED.store(true, Relaxed);
        small.retain(|k, _| k.ends_with(".json"));
        small.insert(key.to_string(), bytes.to_vec());
        UNCOUNTED.store(false, Relaxed);
        Ok(())
    }
    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let small = self.small.lock().expect("lock");
        small.get(key).cloned().ok_or_else(|| webtune::base::error::Error::msg(format!("{key}: not kept")))
    }
    fn delete(&self, key: &str) -> Result<()> {
        let mut small = self.small.lock().expect("lock");
        UNCOUNTED.store(!key.ends_with(".json"), Relaxed);
        small.remove(key);
        UNCOUNTED.store(false, Relaxed);
        Ok(())
    }
    fn keys(&self, prefix: &str) -> Result<Vec<String>> {
        Ok(self.small.lock().expect("lock").keys().filter(|k| k.starts_with(prefix)).cloned().collect())
    }
}

const MIB: f64 = (1 << 20) as f64;

#[test]
fn importing_a_1gb_gguf_peaks_under_64_mib() {
    let dir = std::env::temp_dir().join(format!("webtune-gguf-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("model.gguf");
    let cfg = webtune::base::config::ModelConfig::preset("qwen2.5-0.5b").expect("preset");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&path).expect("creates the GGUF"));
    let size = webtune::formats::gguf::write_random_model(&cfg, 1, &mut w).expect("writes the GGUF");
    drop(w);

    let base = LIVE.load(Relaxed);
    PEAK.store(base, Relaxed);
    let run = || {
        let src =
            webtune::platform::block_on(DirFiles { dir: dir.clone() }.open("model.gguf"))?.expect("the GGUF is there");
        let files = webtune::platform::block_on(GgufFiles::open(src))?;
        let opened = PEAK.load(Relaxed) - base;
        let sink = Sink::default();
        let man =
            webtune::platform::block_on(import_files(&sink, "m", &files, &ImportOptions::default(), &mut |_| {}))?;
        Ok::<_, webtune::base::error::Error>((opened, man, sink.bytes.load(Relaxed)))
    };
    let result = run();
    let peak = PEAK.load(Relaxed) - base;
    let _ = std::fs::remove_dir_all(&dir);
    let (opened, man, stored) = result.expect("imports");
    let chunks: usize = man.chunks.iter().map(|c| c.bytes).sum();
    println!(
        "GGUF {:.1} MB → {:.1} MB stored in {} chunks; heap peak {:.1} MiB ({:.1} MiB after reading the metadata)",
        size as f64 / 1e6,
        chunks as f64 / 1e6,
        man.chunks.len(),
        peak as f64 / MIB,
        opened as f64 / MIB
    );
    assert!(stored >= chunks && chunks > 980_000_000, "the whole model went through the store");
    assert!(peak as f64 <= 64.0 * MIB, "heap peak {:.1} MiB while importing a 1 GB GGUF", peak as f64 / MIB);
}
