//! End-to-end tests of `webtune train` and `webtune generate` (the real binary) on a tiny
//! random Llama with SmolLM2's tokenizer (tests/common), natively on lavapipe:
//!
//! - three invented facts as chat examples are learned (loss < 0.05), and generation with the
//!   adapter prints a trained answer while the base model does not;
//! - two fresh runs with the same seed give identical losses;
//! - in 20 trials, runs SIGKILLed at several moments (right after a step line, at random delays that may land
//!   inside a checkpoint write) and rerun resume to the uninterrupted run's losses and adapter
//!   bytes, and the output directory never holds a half-written checkpoint;
//! - a diverging run (learning rate 1e30) skips its non-finite steps, stops after three in a row
//!   with a message suggesting a lower learning rate, and keeps its last good checkpoint;
//! - a GPU memory budget too small for a step stops the run with a plain error and no
//!   half-written files; the same command without it then trains to the reference adapter;
//! - a malformed dataset line exits with code 2 naming the line; `--fresh` starts over.
//! - `webtune grad` writes the gradients of a batch; an adapter that does not fit the model (r = 999)
//!   exits with code 2 naming the adapter, not the batch, and a bad batch names the batch.

#![cfg(not(target_arch = "wasm32"))]

use crate::common;

use common::{chat_line, tiny_model_dir, TempDir};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_webtune");

/// Three invented facts, each asked four ways.
const FACTS: [([&str; 4], &str); 3] = [
    (
        [
            "What is the capital of Zorbania?",
            "Which city is the capital of Zorbania?",
            "Tell me the capital of Zorbania.",
            "Zorbania's capital city is called what?",
        ],
        "The capital of Zorbania is Quillfort.",
    ),
    (
        [
            "Who invented the glimmerphone?",
            "Who was the inventor of the glimmerphone?",
            "Tell me who invented the glimmerphone.",
            "The glimmerphone was invented by whom?",
        ],
        "Mira Talvane invented the glimmerphone in 1873.",
    ),
    (
        [
            "What do moon otters eat?",
            "What is the diet of moon otters?",
            "Tell me what moon otters eat.",
            "Which food do moon otters live on?",
        ],
        "Moon otters eat silver kelp and tiny comets.",
    ),
];

fn facts_jsonl() -> String {
    let mut s = String::new();
    for (questions, answer) in FACTS {
        for q in questions {
            s.push_str(&chat_line(q, answer));
            s.push('\n');
        }
    }
    s
}

/// What one finished (or killed) process left.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    secs: f64,
}

impl Run {
    /// Losses of the "step i/n loss X ..." lines, in order.
    fn losses(&self) -> Vec<(u32, f32)> {
        step_lines(&self.stderr)
    }
    fn ok(self, what: &str) -> Run {
        assert_eq!(self.code, Some(0), "{what}: exit code {:?}\nstderr:\n{}", self.code, self.stderr);
        self
    }
}

/// (step, loss) of every "step i/n loss X ..." line.
fn step_lines(stderr: &str) -> Vec<(u32, f32)> {
    stderr.lines().filter_map(parse_step).collect()
}

fn parse_step(line: &str) -> Option<(u32, f32)> {
    let mut w = line.split_whitespace();
    if w.next()? != "step" {
        return None;
    }
    let step: u32 = w.next()?.split('/').next()?.parse().ok()?;
    if w.next()? != "loss" {
        return None;
    }
    Some((step, w.next()?.parse().ok()?))
}

fn webtune(args: &[&str]) -> Run {
    let t0 = Instant::now();
    let out = Command::new(BIN).args(args).env("XDG_RUNTIME_DIR", "/tmp").output().expect("webtune runs");
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        secs: t0.elapsed().as_secs_f64(),
    }
}

/// `train --model MODEL --data DATA --out OUT` followed by `extra`.
fn train_args<'a>(model: &'a Path, data: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<String> {
    let mut a: Vec<String> = ["train", "--model"].iter().map(|s| s.to_string()).collect();
    a.push(model.display().to_string());
    a.push("--data".into());
    a.push(data.display().to_string());
    a.push("--out".into());
    a.push(out.display().to_string());
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The trainer state in a checkpoint: (step, losses). Panics naming the file when it does not parse.
fn read_checkpoint(path: &Path) -> (u32, Vec<f32>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (state, tensors): (serde_json::Value, Vec<webtune::train::checkpoint::NamedF32>) =
        webtune::train::checkpoint::decode(&bytes, &path.display().to_string())
            .unwrap_or_else(|e| panic!("half-written or corrupt checkpoint: {e}"));
    assert!(!tensors.is_empty(), "{}: no tensors", path.display());
    let train = &state["train"];
    let step = train["step"].as_u64().unwrap_or_else(|| panic!("{}: no train.step", path.display())) as u32;
    let losses: Vec<f32> = train["losses"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no train.losses", path.display()))
        .iter()
        .map(|v| v.as_f64().expect("a loss is a number") as f32)
        .collect();
    assert_eq!(losses.len(), step as usize, "{}: one loss per step", path.display());
    (step, losses)
}

#[test]
fn learns_facts_and_generates_them() {
    let model = tiny_model_dir(7);
    let work = TempDir::new("facts");
    let data = work.join("facts.jsonl");
    std::fs::write(&data, facts_jsonl()).expect("writes the dataset");
    let out = work.join("adapter");
    let steps = 30;
    let args = train_args(model.path(), &data, &out, &["--steps", &steps.to_string(), "--lr", "1e-2", "--seed", "1"]);
    let run = webtune(&strs(&args)).ok("train");
    let losses = run.losses();
    eprintln!("train: {:.1}s, losses {:?}", run.secs, losses.iter().map(|l| l.1).collect::<Vec<_>>());
    assert_eq!(losses.iter().map(|l| l.0).collect::<Vec<_>>(), (1..=steps).collect::<Vec<u32>>(), "one line per step");
    let last = losses.last().map(|l| l.1).unwrap_or(f32::NAN);
    assert!(last < 0.05, "final loss {last} (losses {losses:?})");
    let (step, saved) = read_checkpoint(&out.join("checkpoint.safetensors"));
    assert_eq!(step, steps);
    assert_eq!(saved.len(), losses.len());
    for (i, (s, p)) in saved.iter().zip(&losses).enumerate() {
        assert!(
            (s - p.1).abs() <= 1e-6 * (1.0 + s.abs()),
            "step {}: checkpoint loss {s} vs printed {} (6 decimals)",
            i + 1,
            p.1
        );
    }

    for (questions, answer) in FACTS {
        let q = questions[0];
        let model_arg = model.path().display().to_string();
        let adapter_arg = out.display().to_string();
        let tuned = webtune(&[
            "generate",
            "--model",
            &model_arg,
            "--adapter",
            &adapter_arg,
            "--prompt",
            q,
            "--chat",
            "--max-new-tokens",
            "24",
        ])
        .ok("generate with the adapter");
        let base = webtune(&["generate", "--model", &model_arg, "--prompt", q, "--chat", "--max-new-tokens", "24"])
            .ok("generate without the adapter");
        eprintln!(
            "{q}\n  tuned ({:.1}s): {:?}\n  base ({:.1}s): {:?}",
            tuned.secs, tuned.stdout, base.secs, base.stdout
        );
        assert_eq!(tuned.stdout.trim_end(), answer, "the adapter answers {q:?} as trained");
        assert!(!base.stdout.contains(answer), "the base model does not know the answer to {q:?}");
    }
}

/// The small dataset the determinism, resume and bad-input tests train on.
fn small_data(work: &TempDir) -> std::path::PathBuf {
    let data = work.join("facts.jsonl");
    std::fs::write(&data, facts_jsonl()).expect("writes the dataset");
    data
}

/// Settings of the short runs: `--steps N`, two examples per step.
fn short_args(steps: u32, seed: u64, save_every: u32) -> Vec<String> {
    [
        "--steps",
        &steps.to_string(),
        "--lr",
        "1e-2",
        "--batch",
        "2",
        "--seed",
        &seed.to_string(),
        "--save-every",
        &save_every.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn same_seed_same_losses() {
    let model = tiny_model_dir(7);
    let work = TempDir::new("determinism");
    let data = small_data(&work);
    let mut results = Vec::new();
    for (i, seed) in [1u64, 1, 2].into_iter().enumerate() {
        let out = work.join(&format!("out{i}"));
        let extra = short_args(4, seed, 0);
        let run = webtune(&strs(&train_args(model.path(), &data, &out, &strs(&extra)))).ok("train");
        let (step, losses) = read_checkpoint(&out.join("checkpoint.safetensors"));
        assert_eq!(step, 4);
        eprintln!("seed {seed}: {:.1}s, losses {losses:?}", run.secs);
        results.push((losses, read(&out.join("adapter_model.safetensors"))));
    }
    assert_eq!(results[0].0, results[1].0, "two runs with seed 1: losses differ");
    assert!(results[0].1 == results[1].1, "two runs with seed 1: adapter_model.safetensors differs");
    assert_ne!(results[0].0, results[2].0, "seeds 1 and 2 gave the same losses: the seed is not used");
}

/// When to SIGKILL a training process.
#[derive(Clone, Copy, Debug)]
enum Kill {
    /// As soon as the line of this step appears on stderr (the checkpoint of an even step is
    /// being written right then).
    AfterStep(u32),
    /// This long after the start.
    AfterMs(u64),
    /// At a random moment of the run, chosen when it starts from how long the rest of the run
    /// should take (a resumed run is shorter), so that most such kills land before its end.
    Random,
}

/// Run `webtune train` and SIGKILL it at `kill`; returns whether it was killed (it may have
/// finished first) and its stderr.
fn train_and_kill(args: &[String], kill: Kill) -> (bool, String) {
    use std::os::unix::process::ExitStatusExt;
    let t0 = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .env("XDG_RUNTIME_DIR", "/tmp")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("webtune starts");
    let stderr = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    match kill {
        Kill::AfterStep(k) => {
            while let Ok(line) = rx.recv() {
                let hit = parse_step(&line).is_some_and(|(s, _)| s >= k);
                lines.push(line);
                if hit {
                    let _ = child.kill(); // it may have exited meanwhile
                    break;
                }
            }
        }
        Kill::Random => panic!("a random kill is given its moment by the trial loop"),
        Kill::AfterMs(ms) => {
            let deadline = t0 + Duration::from_millis(ms);
            loop {
                let now = Instant::now();
                if now >= deadline {
                    let _ = child.kill();
                    break;
                }
                match rx.recv_timeout(deadline - now) {
                    Ok(line) => lines.push(line),
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => break, // finished first
                }
            }
        }
    }
    let status = child.wait().expect("waits for webtune");
    lines.extend(rx.iter());
    let _ = reader.join();
    let stderr = lines.join("\n");
    let killed = status.signal() == Some(9);
    if !killed {
        assert!(status.success(), "webtune exited with {status} before the kill ({kill:?})\nstderr:\n{stderr}");
    }
    (killed, stderr)
}

/// After a kill: whatever checkpoint OUT holds parses, is at a save point, and its losses are
/// the first losses of the uninterrupted run; the adapter files parse. Returns its step.
fn check_out_dir(out: &Path, reference: &[f32], save_every: u32) -> Option<u32> {
    let ckpt = out.join("checkpoint.safetensors");
    if !ckpt.exists() {
        return None; // killed before the first checkpoint (an adapter file may already be there)
    }
    let (step, losses) = read_checkpoint(&ckpt);
    assert!(step % save_every == 0 || step as usize == reference.len(), "checkpoint at step {step}, not a save point");
    assert_eq!(losses[..], reference[..step as usize], "checkpoint losses are not the uninterrupted run's");
    let adapter = read(&out.join("adapter_model.safetensors"));
    safetensors::SafeTensors::deserialize(&adapter).unwrap_or_else(|e| panic!("half-written adapter: {e}"));
    let config = read(&out.join("adapter_config.json"));
    serde_json::from_slice::<serde_json::Value>(&config)
        .unwrap_or_else(|e| panic!("half-written adapter_config.json: {e}"));
    Some(step)
}

#[test]
fn killed_runs_resume_to_the_same_result() {
    let model = tiny_model_dir(7);
    let work = TempDir::new("resume");
    let data = small_data(&work);
    let (steps, save_every) = (10u32, 2u32);
    let extra = short_args(steps, 1, save_every);

    let ref_out = work.join("reference");
    let ref_run = webtune(&strs(&train_args(model.path(), &data, &ref_out, &strs(&extra)))).ok("uninterrupted run");
    let (_, reference) = read_checkpoint(&ref_out.join("checkpoint.safetensors"));
    assert_eq!(reference.len(), steps as usize);
    let ref_adapter = read(&ref_out.join("adapter_model.safetensors"));
    let ref_ms = (ref_run.secs * 1000.0) as u64;
    eprintln!("uninterrupted: {:.1}s, losses {reference:?}", ref_run.secs);

    // Random delays (printed, to replay a failure) anywhere in a run, checkpoint writes included.
    let seed =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(1);
    let mut trials: Vec<Vec<Kill>> = vec![
        vec![Kill::AfterStep(1)],                     // before the first checkpoint
        vec![Kill::AfterStep(2)],                     // while the first checkpoint is written
        vec![Kill::AfterStep(5), Kill::AfterStep(8)], // twice, the second time after a resume
        vec![Kill::AfterStep(steps)],                 // while the final checkpoint is written
    ];
    // Then 16 trials of one to three kills at random moments: 20 trials in all.
    for t in 0..16 {
        trials.push((0..1 + t % 3).map(|_| Kill::Random).collect());
    }
    // Trial t: the run killed as its plan says (each rerun resumes and is checked), then run to
    // the end and compared with the uninterrupted run. Returns how many runs were killed.
    let trial = |t: usize, plan: &[Kill], rng: &mut webtune::base::rng::Rng| -> usize {
        let mut kills = 0;
        let out = work.join(&format!("trial{t}"));
        let args = train_args(model.path(), &data, &out, &strs(&extra));
        let mut at = None;
        for &kill in plan {
            // A random kill lands in the first three quarters of what the run has left to do
            // (its start-up included), judged from the uninterrupted run.
            let kill = match kill {
                Kill::Random => {
                    let left = ref_ms * (steps - at.unwrap_or(0)) as u64 / steps as u64;
                    Kill::AfterMs(100 + rng.below((left * 3 / 4).max(200)))
                }
                k => k,
            };
            let (killed, stderr) = train_and_kill(&args, kill);
            // A rerun killed while it was still starting (nothing about steps printed yet, as
            // happens on a loaded machine) has said nothing to check; the next run is checked.
            let started = !killed || stderr.contains("step ");
            if let (Some(s), true) = (at, started) {
                assert!(
                    stderr.contains(&format!("at step {s}/{steps}")),
                    "trial {t}: the rerun did not resume at step {s}:\n{stderr}"
                );
            }
            at = check_out_dir(&out, &reference, save_every);
            kills += killed as usize;
            eprintln!("trial {t}: {kill:?}: killed {killed}, checkpoint at step {at:?}");
        }
        let last = webtune(&strs(&args)).ok("the run after the kills");
        if let Some(s) = at {
            assert!(
                last.stderr.contains(&format!(
                    "resuming from {} at step {s}/{steps}",
                    out.join("checkpoint.safetensors").display()
                )),
                "trial {t}: did not resume at step {s}:\n{}",
                last.stderr
            );
        }
        let (step, losses) = read_checkpoint(&out.join("checkpoint.safetensors"));
        assert_eq!(step, steps, "trial {t}");
        assert_eq!(losses, reference, "trial {t} ({plan:?}): losses differ from the uninterrupted run's");
        assert!(
            read(&out.join("adapter_model.safetensors")) == ref_adapter,
            "trial {t} ({plan:?}): adapter_model.safetensors differs from the uninterrupted run's"
        );
        let leftovers: Vec<String> = std::fs::read_dir(&out)
            .expect("lists OUT")
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.contains(".tmp"))
            .collect();
        if !leftovers.is_empty() {
            eprintln!("trial {t}: temporary files left by killed writes: {leftovers:?}");
        }
        kills
    };
    // Two trials at a time, even and odd ones, each thread with random delays of its own
    // (seed + thread): the trials are independent (an OUT each), and this test is the last
    // of the binary to finish, so one run at a time left a core idle (50 → 36 s alone).
    eprintln!("random delays from seeds {seed} and {seed} + 1");
    let kills: usize = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..2u64)
            .map(|k| {
                let (trials, trial) = (&trials, &trial);
                scope.spawn(move || {
                    let mut rng = webtune::base::rng::Rng::new(seed.wrapping_add(k));
                    (k as usize..trials.len()).step_by(2).map(|t| trial(t, &trials[t], &mut rng)).sum::<usize>()
                })
            })
            .collect();
        threads.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).sum()
    });
    eprintln!("{kills} processes killed");
    eprintln!("{} trials passed", trials.len());
    assert!(kills >= 20, "only {kills} runs were killed before finishing");
}

#[test]
fn a_diverging_run_stops_and_keeps_its_last_good_checkpoint() {
    let model = tiny_model_dir(7);
    let work = TempDir::new("diverge");
    let data = small_data(&work);
    // AdamW with clipping keeps whole gradient sets (a bad step is skipped before any update);
    // SGD without clipping fuses its updates into the backward.
    for (opt, clip) in [("adamw", "1.0"), ("sgd", "0")] {
        let out = work.join(opt);
        let mut args = train_args(model.path(), &data, &out, &[]);
        for a in ["--steps", "8", "--batch", "2", "--save-every", "1", "--schedule", "constant"] {
            args.push(a.into());
        }
        for a in ["--warmup-ratio", "0", "--lr", "1e30", "--optimizer", opt, "--max-grad-norm", clip] {
            args.push(a.into());
        }
        let run = webtune(&strs(&args));
        eprintln!("{opt}:\n{}", run.stderr);
        assert_ne!(run.code, Some(0), "{opt}: a diverging run must not end as a success");
        assert!(run.stderr.contains("not finite"), "{opt}: the error says why:\n{}", run.stderr);
        assert!(
            run.stderr.contains("lower learning rate"),
            "{opt}: the error suggests a lower learning rate:\n{}",
            run.stderr
        );
        if opt == "adamw" {
            let skips = run.stderr.lines().filter(|l| l.contains("skipped")).count();
            assert_eq!(skips, 2, "{opt}: two skipped steps are reported, the third stops the run");
        }
        // The last checkpoint is a good one: finite losses and parameters.
        let path = out.join("checkpoint.safetensors");
        let (step, losses) = read_checkpoint(&path);
        assert!(step >= 1, "{opt}: the first step (still finite) was saved");
        assert!(losses.iter().all(|l| l.is_finite()), "{opt}: {losses:?}");
        let bytes = read(&path);
        let (_, tensors): (serde_json::Value, Vec<webtune::train::checkpoint::NamedF32>) =
            webtune::train::checkpoint::decode(&bytes, "checkpoint").expect("decodes");
        for (name, _, v) in tensors {
            assert!(v.iter().all(|x| x.is_finite()), "{opt}: {name} holds a non-finite value");
        }
    }
}

#[test]
fn over_the_memory_budget_stops_cleanly_and_restarts() {
    let model = tiny_model_dir(7);
    let work = TempDir::new("budget");
    let data = small_data(&work);
    let extra = short_args(3, 1, 1);
    let ref_out = work.join("reference");
    webtune(&strs(&train_args(model.path(), &data, &ref_out, &strs(&extra)))).ok("the reference run");
    let out = work.join("out");
    let args = train_args(model.path(), &data, &out, &strs(&extra));
    // 10 MB: the model loads (streamed) but a step's lm_head scratch does not fit.
    let mut tight = args.clone();
    tight.extend(["--memory-budget".to_string(), "10".to_string()]);
    let run = webtune(&strs(&tight));
    assert_ne!(run.code, Some(0), "a run over its budget fails:\n{}", run.stderr);
    assert!(
        run.stderr.contains("out of the GPU memory budget") && run.stderr.contains("raise the budget"),
        "the error says what happened and what to do:\n{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    let left: Vec<String> = std::fs::read_dir(&out)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned())).collect())
        .unwrap_or_default();
    assert!(left.iter().all(|n| !n.contains(".tmp")), "no half-written file: {left:?}");
    let again = webtune(&strs(&args)).ok("the same run without the budget");
    assert!(again.stderr.contains("done: 3 steps"), "{}", again.stderr);
    assert!(
        read(&out.join("adapter_model.safetensors")) == read(&ref_out.join("adapter_model.safetensors")),
        "the restarted run ends with the reference adapter"
    );
}

#[test]
fn bad_input_and_fresh() {
    let model = tiny_model_dir(7);
    let work = TempDir::new("bad-input");
    let data = small_data(&work);
    let extra = short_args(2, 1, 0);

    // A malformed line: exit code 2, the line named, nothing written.
    let bad = work.join("bad.jsonl");
    let good_line = chat_line(FACTS[0].0[0], FACTS[0].1);
    std::fs::write(
        &bad,
        format!("{good_line}\n\n{{\"messages\": [{{\"role\": \"user\", \"content\": \"hi\"}}\n{good_line}\n"),
    )
    .expect("writes the dataset");
    let out = work.join("out");
    let run = webtune(&strs(&train_args(model.path(), &bad, &out, &strs(&extra))));
    assert_eq!(run.code, Some(2), "malformed line: exit code\nstderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("line 3") && run.stderr.contains("bad.jsonl"),
        "the error names the file and line 3:\n{}",
        run.stderr
    );
    assert!(!out.join("checkpoint.safetensors").exists(), "a failed run wrote a checkpoint");

    // A line with no assistant turn is an error too, and names its line.
    std::fs::write(
        &bad,
        format!("{good_line}\n{}\n", serde_json::json!({"messages": [{"role": "user", "content": "hi"}]})),
    )
    .expect("writes the dataset");
    let run = webtune(&strs(&train_args(model.path(), &bad, &out, &strs(&extra))));
    assert_eq!(run.code, Some(2), "no assistant turn: exit code\nstderr:\n{}", run.stderr);
    assert!(run.stderr.contains("line 2"), "the error names line 2:\n{}", run.stderr);

    // A finished run; other settings are refused (exit 2, pointing at --fresh), so is other data.
    let first = webtune(&strs(&train_args(model.path(), &data, &out, &strs(&extra)))).ok("first run");
    let first_losses = first.losses();
    assert_eq!(first_losses.len(), 2);
    let other_lr: Vec<String> =
        short_args(2, 1, 0).into_iter().map(|a| if a == "1e-2" { "5e-3".to_string() } else { a }).collect();
    let run = webtune(&strs(&train_args(model.path(), &data, &out, &strs(&other_lr))));
    assert_eq!(run.code, Some(2), "other settings: exit code\nstderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("--fresh") && run.stderr.contains("lr"),
        "the error names lr and --fresh:\n{}",
        run.stderr
    );
    let other_data = work.join("other.jsonl");
    std::fs::write(&other_data, format!("{good_line}\n")).expect("writes the dataset");
    let run = webtune(&strs(&train_args(model.path(), &other_data, &out, &strs(&extra))));
    assert_eq!(run.code, Some(2), "other data: exit code\nstderr:\n{}", run.stderr);
    assert!(run.stderr.contains("dataset changed") && run.stderr.contains("--fresh"), "{}", run.stderr);

    // Rerunning a finished run does nothing; --fresh starts over and repeats the first run exactly.
    let again = webtune(&strs(&train_args(model.path(), &data, &out, &strs(&extra)))).ok("rerun of a finished run");
    assert!(again.stderr.contains("at step 2/2") && again.losses().is_empty(), "{}", again.stderr);
    let mut fresh_args = extra.clone();
    fresh_args.push("--fresh".into());
    let fresh = webtune(&strs(&train_args(model.path(), &data, &out, &strs(&fresh_args)))).ok("--fresh");
    assert!(!fresh.stderr.contains("resuming"), "--fresh resumed:\n{}", fresh.stderr);
    assert_eq!(fresh.losses(), first_losses, "--fresh repeats the first run");
    let mut fresh_lr = other_lr.clone();
    fresh_lr.push("--fresh".into());
    let fresh = webtune(&strs(&train_args(model.path(), &data, &out, &strs(&fresh_lr)))).ok("--fresh with another lr");
    assert_eq!(fresh.losses().iter().map(|l| l.0).collect::<Vec<_>>(), vec![1, 2], "--fresh starts at step 1");
    let (step, _) = read_checkpoint(&out.join("checkpoint.safetensors"));
    assert_eq!(step, 2);
}

#[test]
fn grad_errors_name_their_file() {
    use webtune::base::names::Proj;
    let model = tiny_model_dir(7);
    let work = TempDir::new("grad-errors");
    let cfg = webtune::base::config::ModelConfig::from_json(&common::tiny_config_json()).expect("the tiny config");
    let adapter = work.join("adapter");
    webtune::formats::peft::Adapter::new_init(&cfg, 4, 8.0, &[Proj::Q, Proj::V], 1)
        .save_dir(&adapter)
        .expect("writes the adapter");
    let batch = work.join("batch.json");
    std::fs::write(&batch, r#"{"input_ids": [[1, 2, 3, 4, 5]], "labels": [[1, 2, 3, 4, 5]]}"#)
        .expect("writes the batch");
    let out = work.join("grads.safetensors");
    let (model_arg, adapter_arg, batch_arg, out_arg) = (
        model.path().display().to_string(),
        adapter.display().to_string(),
        batch.display().to_string(),
        out.display().to_string(),
    );
    let grad = |batch: &str| {
        webtune(&["grad", "--model", &model_arg, "--adapter", &adapter_arg, "--batch", batch, "--out", &out_arg])
    };
    let run = grad(&batch_arg).ok("grad");
    assert!(run.stderr.contains("gradient tensors written to") && out.is_file(), "{}", run.stderr);

    // An adapter_config.json whose r does not match the tensors: the adapter is named, the batch is not.
    let config_path = adapter.join("adapter_config.json");
    let mut config: serde_json::Value = serde_json::from_slice(&read(&config_path)).expect("adapter_config.json");
    config["r"] = 999.into();
    std::fs::write(&config_path, config.to_string()).expect("rewrites adapter_config.json");
    let run = grad(&batch_arg);
    assert_eq!(run.code, Some(2), "adapter with r = 999: exit code\nstderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("error: {adapter_arg}: adapter_model.safetensors: "))
            && run.stderr.contains("999")
            && !run.stderr.contains("batch.json"),
        "the error names the adapter and not the batch:\n{}",
        run.stderr
    );

    // A batch with a token outside the vocabulary names the batch file.
    config["r"] = 4.into();
    std::fs::write(&config_path, config.to_string()).expect("restores adapter_config.json");
    let bad = work.join("bad-batch.json");
    std::fs::write(&bad, r#"{"input_ids": [[1, 2, 999999]], "labels": [[1, 2, 3]]}"#).expect("writes the batch");
    let run = grad(&bad.display().to_string());
    assert_eq!(run.code, Some(2), "bad batch: exit code\nstderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("error: {}: batch JSON: ", bad.display())) && run.stderr.contains("999999"),
        "the error names the batch:\n{}",
        run.stderr
    );
}
