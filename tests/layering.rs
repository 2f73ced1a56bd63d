//! The crate's layers point one way. Every `crate::…` path in src/ (in `use` lines and inline,
//! comments aside) must name a module listed below the file's own layer in [`LAYERS`], the
//! same picture as src/lib.rs's doc comment; an edge that points up fails the test, naming the
//! file, the line and both layers. And `cfg(target_arch …)` outside src/platform may only mark
//! a whole item (a module, function, type, impl, use or test), never a statement or an
//! expression: what differs between native and wasm lives in `crate::platform`.
//!
//! `super::` chains are resolved as if the line sat in an inline module one level below its
//! file's (where tests live), so only a chain that surely leaves the file's top module is
//! judged; code outside a module's own tree names it with `crate::`.
//!
//! The checks also run on small made-up sources with an upward edge and an inline cfg, so
//! that a checker that stopped seeing anything would fail here too.

#![cfg(not(target_arch = "wasm32"))]

use std::path::{Path, PathBuf};

/// Bottom to top. A module may use the modules of lower entries, and itself (its own
/// submodules use each other freely), never a module of its own entry or above. `base`'s
/// files are layered among themselves too.
const LAYERS: &[&[&str]] = &[
    &["platform"],
    &["base::bytes", "base::rng", "base::config"],
    &["base::names"],
    &["base::error"],
    &["base::dtype"],
    &["base::host"],
    &["base"],
    &["formats"],
    &["data"],
    &["gpu"],
    &["kernels"],
    &["model"],
    &["store"],
    &["import"],
    &["train", "generate"],
    &["runtime", "bench"],
    &["wasm"],
];

/// The entry of `LAYERS` that a module path (`["store", "staged"]`) belongs to: its longest
/// listed prefix, as (layer index, the listed name).
fn layer_of(path: &[String]) -> Option<(usize, &'static str)> {
    let mut best: Option<(usize, &'static str)> = None;
    for (i, layer) in LAYERS.iter().enumerate() {
        for &name in *layer {
            let parts: Vec<&str> = name.split("::").collect();
            let matches = parts.len() <= path.len() && parts.iter().zip(path).all(|(a, b)| a == b);
            if matches && best.is_none_or(|(_, b)| b.split("::").count() < parts.len()) {
                best = Some((i, name));
            }
        }
    }
    best
}

/// The module path of a file under src/: src/store/staged.rs → ["store", "staged"],
/// src/gpu/mod.rs → ["gpu"], src/lib.rs → [].
fn module_of(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().to_string()).collect();
    if let Some(last) = parts.pop() {
        let stem = last.trim_end_matches(".rs");
        if stem != "mod" && stem != "lib" {
            parts.push(stem.to_string());
        }
    }
    parts
}

/// One edge that points the wrong way.
#[derive(Debug, PartialEq)]
struct Violation {
    file: String,
    line: usize,
    text: String,
    why: String,
}

/// The `crate::a::b` and `super::…` paths a line of code names, resolved to module paths.
fn paths_in(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = line.as_bytes();
    let ident = |s: &str| -> Vec<String> {
        s.split("::")
            .map(|p| p.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>())
            .take_while(|p| !p.is_empty() && p.chars().next().is_some_and(|c| c.is_ascii_lowercase()))
            .collect()
    };
    for (at, _) in line.match_indices("crate::") {
        // `$crate::` in a macro defined in src/ names this crate like `crate::`;
        // `webtune_crate::` is not a crate path.
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        out.push(ident(&line[at + "crate::".len()..]));
    }
    for (at, _) in line.match_indices("super::") {
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b':') {
            continue;
        }
        // `super` climbs from the module that holds the line. That may be an inline module
        // (`mod tests`) one level below the file's, which we cannot see here, so the climb
        // starts there: only a chain that leaves the file's top module even then is checked.
        let mut rest = &line[at..];
        let mut base: Vec<String> = module.to_vec();
        base.push(String::new());
        while let Some(r) = rest.strip_prefix("super::") {
            base.pop();
            rest = r;
        }
        base.extend(ident(rest));
        out.push(base);
    }
    out
}

/// Check one file's source; `rel` is its path under src/.
fn check_source(rel: &Path, src: &str) -> Vec<Violation> {
    let module = module_of(rel);
    let Some((own, own_name)) = layer_of(&module) else {
        return if module.is_empty() {
            Vec::new() // lib.rs: the crate root declares the modules
        } else {
            vec![Violation {
                file: rel.display().to_string(),
                line: 0,
                text: String::new(),
                why: format!("module {} is in no layer of tests/layering.rs", module.join("::")),
            }]
        };
    };
    let mut out = Vec::new();
    for (n, line) in src.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("//") {
            continue;
        }
        let code = code.split(" //").next().unwrap_or(code);
        for path in paths_in(code, &module) {
            if path.is_empty() {
                continue;
            }
            let Some((theirs, their_name)) = layer_of(&path) else { continue };
            // Its own module (or a submodule of it) is fine.
            let own_top = own_name.split("::").count();
            if path.len() >= own_top && path[..own_top] == module[..own_top.min(module.len())] {
                continue;
            }
            if theirs >= own {
                out.push(Violation {
                    file: rel.display().to_string(),
                    line: n + 1,
                    text: line.trim().to_string(),
                    why: format!(
                        "{} (layer {own}) uses {} (layer {theirs}): an edge that points {}",
                        own_name,
                        their_name,
                        if theirs == own { "sideways" } else { "up" }
                    ),
                });
            }
        }
    }
    out
}

/// `cfg(target_arch …)` outside src/platform must mark a whole item.
fn check_cfg(rel: &Path, src: &str) -> Vec<Violation> {
    if rel.starts_with("platform") {
        return Vec::new();
    }
    let lines: Vec<&str> = src.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        let t = line.trim_start();
        if t.starts_with("//") || !t.contains("target_arch") {
            continue;
        }
        let why = if t.starts_with("#![cfg") {
            continue; // a whole file (crate or module) for one side
        } else if t.starts_with("#[cfg") {
            // The next line that is not an attribute or a doc comment must start an item.
            let next = lines[n + 1..]
                .iter()
                .map(|l| l.trim_start())
                .find(|l| !(l.starts_with("#[") || l.starts_with("///") || l.starts_with("//")));
            let item = next.is_some_and(|l| {
                let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub(super) ")).unwrap_or(l);
                let l = l.strip_prefix("pub ").unwrap_or(l);
                ["mod ", "fn ", "async fn ", "struct ", "enum ", "impl", "use ", "const ", "static ", "type ", "trait "]
                    .iter()
                    .any(|k| l.starts_with(k))
                    || l.split('(').next().is_some_and(|m| m.ends_with('!') && !m.contains(' '))
            });
            if item {
                continue;
            }
            "a cfg(target_arch) on something that is not an item (a statement, block or field)"
        } else {
            "cfg(target_arch) inside code (cfg! or a statement): put the difference in crate::platform"
        };
        out.push(Violation { file: rel.display().to_string(), line: n + 1, text: t.to_string(), why: why.into() });
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> =
        std::fs::read_dir(dir).expect("reads src/").map(|e| e.expect("an entry").path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

fn report(v: &[Violation]) -> String {
    v.iter().map(|v| format!("src/{}:{}: {}\n    {}", v.file, v.line, v.why, v.text)).collect::<Vec<_>>().join("\n")
}

#[test]
fn layers_point_one_way() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    let mut edges = 0;
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under src/");
        if rel.starts_with("bin") {
            continue; // the CLI is a separate crate on top of everything
        }
        let text = std::fs::read_to_string(f).expect("reads a source file");
        edges += text.matches("crate::").count();
        bad.extend(check_source(rel, &text));
        bad.extend(check_cfg(rel, &text));
    }
    assert!(files.len() > 50 && edges > 300, "the checker saw {} files and {edges} paths", files.len());
    assert!(bad.is_empty(), "{} edge(s) against the layering (tests/layering.rs):\n{}", bad.len(), report(&bad));
}

#[test]
fn the_checker_sees_upward_edges_and_inline_cfg() {
    // A kernel that reaches up into the trainer, inline and in a `use`; a store file that
    // goes up through `super::super`; a gpu file with a cfg on a statement.
    let kernel = "use crate::gpu::Gpu;\nuse crate::train::optimizer::Sgd;\nfn f() { crate::model::lora::zero_row(); }\n// crate::runtime in a comment is fine\n";
    let v = check_source(Path::new("kernels/matmul.rs"), kernel);
    assert_eq!(v.iter().map(|v| v.line).collect::<Vec<_>>(), vec![2, 3], "{}", report(&v));
    assert!(v[0].why.contains("kernels (layer 10) uses train (layer 14)"), "{}", v[0].why);
    let store =
        "use super::super::super::import::plan;\nuse super::Manifest;\nuse crate::model::source::WeightSource;\n";
    let v = check_source(Path::new("store/staged.rs"), store);
    assert_eq!(v.len(), 1, "{}", report(&v));
    assert!(v[0].why.contains("store") && v[0].why.contains("import"), "{}", v[0].why);
    let sideways = check_source(Path::new("train/trainer.rs"), "use crate::generate::generate;\n");
    assert!(sideways.len() == 1 && sideways[0].why.contains("sideways"), "{}", report(&sideways));
    let base = check_source(Path::new("base/config.rs"), "use crate::base::error::Error;\n");
    assert_eq!(base.len(), 1, "base::config is below base::error: {}", report(&base));
    let gpu = "#[cfg(not(target_arch = \"wasm32\"))]\npub fn native_only() {}\nfn g() {\n    #[cfg(target_arch = \"wasm32\")]\n    let x = 1;\n    if cfg!(target_arch = \"wasm32\") {}\n}\n";
    let v = check_cfg(Path::new("gpu/mod.rs"), gpu);
    assert_eq!(v.iter().map(|v| v.line).collect::<Vec<_>>(), vec![4, 6], "{}", report(&v));
    assert!(check_cfg(Path::new("platform/mod.rs"), gpu).is_empty());
    // A macro defined in src/ names this crate with `$crate::`: the same edge.
    let mac = "macro_rules! m {\n    () => { $crate::kernels::testutil::test_gpu() };\n}\n";
    let v = check_source(Path::new("platform/mod.rs"), mac);
    assert!(v.len() == 1 && v[0].line == 2 && v[0].why.contains("kernels"), "{}", report(&v));
    let unknown = check_source(Path::new("newthing/mod.rs"), "use crate::gpu::Gpu;\n");
    assert!(unknown.len() == 1 && unknown[0].why.contains("in no layer"), "{}", report(&unknown));
}
