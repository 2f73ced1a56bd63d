//! The TypeScript of the values that cross between the engine and JS, made from the Rust types
//! by ts-rs (derived in test builds only, so the wasm build is untouched) and committed in
//! npm/src/generated/, one file per type; npm/src/types.ts re-exports them under the client's
//! names. This test makes them again and fails, naming each file that differs and showing the
//! lines, when the committed files are not what the Rust types make: a change to a struct that
//! the app sees must be carried to TypeScript in the same commit.
//!
//! To write them after changing such a type (then look at the diff, and at npm/src/types.ts):
//!
//! ```text
//! WEBTUNE_WRITE_TS=1 cargo test --lib runtime::ts_types
//! ```
//!
//! u64 and usize fields are `number`: serde_json writes them as JSON numbers and the app reads
//! them with JSON.parse (every count here is far below 2^53).

use super::{
    DeviceInfo, GenerateRequest, MemoryReport, ModelInfo, SessionInfo, SessionSummary, StepInfo, StorageInfo,
    StoredModel,
};
use crate::data::tokenizer::Message;
use crate::import::{PartialImport, Progress};
use crate::train::trainer::TrainConfig;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use ts_rs::{Config, TS};

/// npm/src/generated/, where the files are committed.
fn committed_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("npm/src/generated")
}

/// Write the TypeScript of every type the app sees (and of the types they hold) into `dir`.
fn export_all(dir: &Path) -> Result<(), ts_rs::ExportError> {
    // `import type … from "./X.js"`: the npm package compiles as ES modules.
    let cfg = Config::new().with_large_int("number").with_import_extension(Some("js")).with_out_dir(dir);
    // What the Engine returns and reports.
    DeviceInfo::export_all(&cfg)?;
    StoredModel::export_all(&cfg)?;
    PartialImport::export_all(&cfg)?;
    StorageInfo::export_all(&cfg)?;
    Progress::export_all(&cfg)?;
    ModelInfo::export_all(&cfg)?;
    SessionInfo::export_all(&cfg)?;
    StepInfo::export_all(&cfg)?;
    MemoryReport::export_all(&cfg)?;
    SessionSummary::export_all(&cfg)?;
    // What the app sends.
    TrainConfig::export_all(&cfg)?;
    GenerateRequest::export_all(&cfg)?;
    Message::export_all(&cfg)?;
    Ok(())
}

/// The .ts files of `dir` by name.
fn read_ts(dir: &Path) -> BTreeMap<String, String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return BTreeMap::new() };
    let mut out = BTreeMap::new();
    for e in entries {
        let path = e.expect("a directory entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        if name.ends_with(".ts") {
            let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            out.insert(name, text);
        }
    }
    out
}

/// The lines of `old` and `new` that differ, `-` and `+` with their line numbers (a longest
/// common subsequence of lines; the files are short).
fn line_diff(old: &str, new: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    // common[i][j]: the longest common subsequence of a[i..] and b[j..].
    let mut common = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i][j] = if a[i] == b[j] { common[i + 1][j + 1] + 1 } else { common[i + 1][j].max(common[i][j + 1]) };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, String::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            (i, j) = (i + 1, j + 1);
        } else if j == b.len() || (i < a.len() && common[i + 1][j] >= common[i][j + 1]) {
            out += &format!("  -{:>4} | {}\n", i + 1, a[i]);
            i += 1;
        } else {
            out += &format!("  +{:>4} | {}\n", j + 1, b[j]);
            j += 1;
        }
    }
    out
}

/// A fresh directory under the target dir (beside the test binary), removed first if left over.
fn scratch_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let dir = exe.parent().expect("the test binary's directory").join(format!("webtune-ts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    dir
}

#[test]
fn generated_typescript_is_committed() {
    let dir = scratch_dir();
    export_all(&dir).expect("ts-rs exports the types");
    let made = read_ts(&dir);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(made.len() >= 13, "ts-rs wrote only {} files: {:?}", made.len(), made.keys());
    let committed_dir = committed_dir();

    if std::env::var_os("WEBTUNE_WRITE_TS").is_some() {
        std::fs::create_dir_all(&committed_dir).expect("creating npm/src/generated");
        for name in read_ts(&committed_dir).keys().filter(|n| !made.contains_key(*n)) {
            std::fs::remove_file(committed_dir.join(name)).expect("removing a stale file");
        }
        for (name, text) in &made {
            std::fs::write(committed_dir.join(name), text).expect("writing a generated file");
        }
        eprintln!("wrote {} files into {}", made.len(), committed_dir.display());
        return;
    }

    let committed = read_ts(&committed_dir);
    let mut problems = Vec::new();
    for (name, text) in &made {
        match committed.get(name) {
            None => problems.push(format!("npm/src/generated/{name} is missing; it would hold:\n{text}")),
            Some(old) if old != text => {
                problems.push(format!("npm/src/generated/{name} differs from the Rust type:\n{}", line_diff(old, text)))
            }
            Some(_) => {}
        }
    }
    for name in committed.keys().filter(|n| !made.contains_key(*n)) {
        problems.push(format!("npm/src/generated/{name} is made from no Rust type any more: remove it"));
    }
    assert!(
        problems.is_empty(),
        "the committed TypeScript is not what the Rust types make (- committed, + from Rust):\n\n{}\n\
         Write it with `WEBTUNE_WRITE_TS=1 cargo test --lib runtime::ts_types`, then carry the change \
         into npm/src/types.ts and whatever uses it.",
        problems.join("\n")
    );
}
