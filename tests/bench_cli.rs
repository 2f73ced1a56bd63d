//! `webtune bench` (the real binary) at a shape given as a config.json: random weights at that
//! config, the schedule's step measured and written as JSON; a config.json that does not parse
//! exits with code 2 naming the file.

#![cfg(not(target_arch = "wasm32"))]

use crate::common::TempDir;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_webtune");

fn webtune(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(BIN).args(args).env("XDG_RUNTIME_DIR", "/tmp").output().expect("webtune runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn bench_takes_a_config_json() {
    let work = TempDir::new("bench-config");
    let cfg = work.path().join("narrow.json");
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 32,
        "num_hidden_layers": 3, "num_attention_heads": 2, "num_key_value_heads": 1,
        "intermediate_size": 48, "vocab_size": 96, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": true, "hidden_act": "silu", "torch_dtype": "float32"
    });
    std::fs::write(&cfg, config.to_string()).unwrap();
    let json = work.path().join("out.json");
    let (cfg_s, json_s) = (cfg.to_str().unwrap(), json.to_str().unwrap());
    let args = ["bench", "--shape", cfg_s, "--seq", "16", "--rank", "4", "--modes", "mesp", "--steps", "2"];
    let (code, stdout, stderr) = webtune(&[&args[..], &["--weights", "bf16", "--json", json_s]].concat());
    assert_eq!(code, Some(0), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("mesp ")), "a row for mesp:\n{stdout}");
    let out: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(out["model"]["layers"], 3, "the config's shape: {}", out["model"]);
    let losses = out["modes"]["mesp"]["losses"].as_array().expect("losses");
    assert_eq!(losses.len(), 2);
    assert!(losses.iter().all(|l| l.as_f64().is_some_and(|l| l.is_finite() && l > 0.0)), "{losses:?}");

    std::fs::write(&cfg, "{\"hidden_size\": ").unwrap();
    let (code, _, stderr) = webtune(&args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("narrow.json"), "the error names the file: {stderr}");
}
