//! Replays the fuzz targets' inputs (fuzz/harness.rs) under `cargo test`, so every input the
//! fuzzer kept and every crash it found stays a regression test without nightly Rust:
//!
//! - the seeds that [`harness::seeds`] makes (valid inputs; each must also be accepted where
//!   that is checkable), and the GGUF seeds in fuzz/seeds/gguf/;
//! - every file in fuzz/corpus/<target>/ (the minimized corpus of `scripts/fuzz.sh`) and in
//!   fuzz/regressions/<target>/ (inputs that once crashed, panicked or hung: each is fixed).
//!
//! A panic is reported with the target and the file, so a failure can be replayed with
//! `cargo fuzz run <target> <file>`.

#![cfg(not(target_arch = "wasm32"))]

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::{Path, PathBuf};

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    v.sort();
    v
}

/// Whether the target's parser accepted `data`; a panic fails the test naming the input.
fn run(target: &str, body: harness::Body, what: &str, data: &[u8]) -> bool {
    let r = std::panic::catch_unwind(|| body(data));
    r.unwrap_or_else(|_| panic!("fuzz target {target} panicked on {what} ({} bytes)", data.len()))
}

#[test]
fn seeds_are_accepted() {
    // Valid inputs must get past the parsers, or the fuzzer would start from nothing.
    for (target, data) in harness::seeds() {
        let body = harness::TARGETS.iter().find(|(n, _)| *n == target).expect("a known target").1;
        assert!(run(target, body, "its seed", &data), "{target}: its seed is refused");
    }
    let (cfg, st) = (harness::mini_config_json(), harness::mini_safetensors());
    let mut files = std::collections::HashMap::new();
    files.insert("config.json".to_string(), cfg.into_bytes());
    files.insert("model.safetensors".to_string(), st);
    let ckpt = webtune::formats::checkpoint::Checkpoint::from_files(files).expect("the safetensors seed loads");
    webtune::formats::checkpoint::validate(&ckpt).expect("the safetensors seed is a whole model");
    let gguf_seeds = files_in(&Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/gguf"));
    assert!(!gguf_seeds.is_empty(), "fuzz/seeds/gguf holds the GGUF seeds");
    for p in gguf_seeds {
        let bytes = std::fs::read(&p).expect("reads a seed");
        let files = webtune::formats::gguf::gguf_to_hf_files(&mut std::io::Cursor::new(&bytes[..]))
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let ckpt = webtune::formats::checkpoint::Checkpoint::from_files(files).expect("the converted seed loads");
        webtune::formats::checkpoint::validate(&ckpt).expect("the converted seed is a whole model");
    }
}

#[test]
fn corpus_and_regressions_replay() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut counts = Vec::new();
    for &(target, body) in harness::TARGETS {
        let mut n = 0;
        for sub in ["seeds", "corpus", "regressions"] {
            for p in files_in(&root.join(sub).join(target)) {
                let data = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
                run(target, body, &p.display().to_string(), &data);
                n += 1;
            }
        }
        counts.push(format!("{target} {n}"));
    }
    eprintln!("replayed: {}", counts.join(", "));
}

/// Writes [`harness::seeds`] to fuzz/seeds/<target>/seed (scripts/fuzz.sh runs this first).
#[test]
#[ignore]
fn write_seeds() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds");
    for (target, data) in harness::seeds() {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).expect("creates the seed folder");
        std::fs::write(dir.join("seed"), data).expect("writes a seed");
    }
}
