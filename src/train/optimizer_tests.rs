//! Tests of optimizer.rs.

use super::*;
use crate::base::names::Proj;
use crate::formats::peft::Adapter;
use crate::gpu_test;
use crate::kernels::testutil::{assert_close, Rng};
use crate::model::lora::read_set;
use crate::train::schedule::{Schedule, ScheduleKind};

type Named = Vec<(String, Vec<usize>, Vec<f32>)>;

fn tiny_adapter(seed: u64) -> Adapter {
    let cfg = crate::formats::testdata::tiny_config(false);
    Adapter::new_init(&cfg, 3, 6.0, &Proj::all(), seed)
}

fn upload(gpu: &Gpu, adapter: &Adapter) -> Lora {
    let cfg = crate::formats::testdata::tiny_config(false);
    Lora::from_adapter(gpu, &cfg, adapter).unwrap()
}

fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}

/// The set's tensors in PEFT order (a, b per pair), as `read_set` returns them.
fn tensors(set: &LoraSet) -> Vec<&Tensor> {
    set.iter().flat_map(|(_, _, p)| [&p.a, &p.b]).collect()
}

/// Write `vals` (one per tensor, in PEFT order) into a set.
fn write_set(gpu: &Gpu, set: &LoraSet, vals: &[Vec<f32>]) {
    let ts = tensors(set);
    assert_eq!(ts.len(), vals.len());
    for (t, v) in ts.into_iter().zip(vals) {
        gpu.write_f32(t, v);
    }
}

fn random_grads(rng: &mut Rng, set: &LoraSet, a: f32) -> Vec<Vec<f32>> {
    tensors(set).iter().map(|t| rng.vec(t.numel(), a)).collect()
}

async fn read_flat(gpu: &Gpu, set: &LoraSet) -> Vec<Vec<f32>> {
    read_set(gpu, set).await.unwrap().into_iter().map(|(_, _, v)| v).collect()
}

fn check_params(what: &str, got: &[Vec<f32>], want: &[Vec<f64>], atol: f64, rtol: f64) {
    assert_eq!(got.len(), want.len());
    for (j, (g, w)) in got.iter().zip(want).enumerate() {
        assert_close(&format!("{what} tensor {j}"), g, w, atol, rtol);
    }
}

/// Configurations exercised over a LoRA set: clipping active / off, each optimizer.
fn configs() -> Vec<OptimizerConfig> {
    let d = OptimizerConfig::default();
    vec![
        OptimizerConfig { lr: 1e-2, weight_decay: 0.01, max_grad_norm: 1.0, ..d.clone() },
        OptimizerConfig { lr: 1e-2, beta1: 0.8, beta2: 0.95, eps: 1e-3, max_grad_norm: 0.0, ..d.clone() },
        OptimizerConfig { kind: OptimizerKind::Sgd, lr: 0.1, max_grad_norm: 1.0, ..d.clone() },
        OptimizerConfig {
            kind: OptimizerKind::Sgd,
            lr: 0.1,
            momentum: 0.9,
            weight_decay: 0.05,
            max_grad_norm: 1e6,
            ..d
        },
    ]
}

gpu_test!(async fn optimizer_set_steps_match_reference(gpu) {
    for (ci, cfg) in configs().into_iter().enumerate() {
        let lora = upload(gpu, &tiny_adapter(ci as u64));
        let grads = lora.zeros_like(gpu, Category::Grads).unwrap();
        let mut opt = Optimizer::new(gpu, cfg.clone(), &lora).unwrap();
        assert_eq!(opt.last_grad_norm(gpu).await.unwrap(), 0.0);
        let mut host = reference::Host::new(read_flat(gpu, &lora.params).await.iter().map(|t| f64s(t)).collect());
        let mut rng = Rng::new(100 + ci as u64);
        for k in 0..4u32 {
            let g = random_grads(&mut rng, &grads, 0.5);
            write_set(gpu, &grads, &g);
            let lr = cfg.lr * (1.0 - 0.2 * k as f32);
            opt.step(gpu, &lora.params, &grads, lr);
            let g64: Vec<Vec<f64>> = g.iter().map(|t| f64s(t)).collect();
            let norm = host.step(&cfg, &g64, lr as f64);
            let got = opt.last_grad_norm(gpu).await.unwrap() as f64;
            assert!((got - norm).abs() <= 1e-5 * norm, "config {ci} step {k}: grad norm {got} vs {norm}");
            if cfg.max_grad_norm == 1.0 {
                assert!(norm > 5.0, "clipping should be active (norm {norm})");
            }
        }
        assert_eq!(opt.step_count(), 4);
        let what = format!("config {ci} ({})", cfg.kind);
        check_params(&what, &read_flat(gpu, &lora.params).await, &host.p, 1e-6, 1e-5);
        // The state as checkpointed matches the reference moments.
        let (step, state) = opt.state(gpu).await.unwrap();
        assert_eq!(step, 4);
        match (cfg.kind, cfg.momentum != 0.0) {
            (OptimizerKind::AdamW, _) => {
                let n = host.m.len();
                assert_eq!(state.len(), 2 * n);
                assert!(state[0].0.ends_with(".lora_A.weight.exp_avg"), "{}", state[0].0);
                assert!(state[n].0.ends_with(".lora_A.weight.exp_avg_sq"), "{}", state[n].0);
                let vals: Vec<Vec<f32>> = state.into_iter().map(|(_, _, v)| v).collect();
                check_params(&format!("{what} exp_avg"), &vals[..n], &host.m, 1e-7, 1e-5);
                check_params(&format!("{what} exp_avg_sq"), &vals[n..], &host.v, 1e-12, 1e-5);
            }
            (OptimizerKind::Sgd, true) => {
                assert!(state[1].0.ends_with(".lora_B.weight.momentum_buffer"), "{}", state[1].0);
                let vals: Vec<Vec<f32>> = state.into_iter().map(|(_, _, v)| v).collect();
                check_params(&format!("{what} momentum_buffer"), &vals, &host.m, 1e-6, 1e-5);
            }
            (OptimizerKind::Sgd, false) => assert!(state.is_empty()),
        }
    }
});

gpu_test!(async fn optimizer_state_round_trip(gpu) {
    let d = OptimizerConfig::default();
    for cfg in [
        OptimizerConfig { lr: 1e-2, weight_decay: 0.01, ..d.clone() },
        OptimizerConfig { kind: OptimizerKind::Sgd, lr: 0.1, momentum: 0.9, ..d },
    ] {
        let adapter = tiny_adapter(7);
        let lora1 = upload(gpu, &adapter);
        let grads = lora1.zeros_like(gpu, Category::Grads).unwrap();
        let mut opt1 = Optimizer::new(gpu, cfg.clone(), &lora1).unwrap();
        let mut rng = Rng::new(5);
        let later: Vec<Vec<Vec<f32>>> = (0..5).map(|_| random_grads(&mut rng, &grads, 1.0)).collect();
        for g in &later[..3] {
            write_set(gpu, &grads, g);
            opt1.step(gpu, &lora1.params, &grads, cfg.lr);
        }
        // Save, and restore into a fresh adapter and optimizer.
        let params: Named = read_set(gpu, &lora1.params).await.unwrap();
        let (step, state) = opt1.state(gpu).await.unwrap();
        let lora2 = upload(gpu, &Adapter::from_f32(adapter.config.clone(), params));
        let mut opt2 = Optimizer::new(gpu, cfg.clone(), &lora2).unwrap();
        opt2.load_state(gpu, step, &state).unwrap();
        assert_eq!(opt2.step_count(), 3);
        for g in &later[3..] {
            write_set(gpu, &grads, g);
            opt1.step(gpu, &lora1.params, &grads, cfg.lr);
            opt2.step(gpu, &lora2.params, &grads, cfg.lr);
        }
        assert_eq!(read_set(gpu, &lora1.params).await.unwrap(), read_set(gpu, &lora2.params).await.unwrap());
        assert_eq!(opt1.state(gpu).await.unwrap(), opt2.state(gpu).await.unwrap());
    }
});

gpu_test!(async fn optimizer_load_state_refuses_mismatches(gpu) {
    let lora = upload(gpu, &tiny_adapter(1));
    let mut opt = Optimizer::new(gpu, OptimizerConfig::default(), &lora).unwrap();
    let (_, good) = opt.state(gpu).await.unwrap();
    let mut missing = good.clone();
    missing.pop();
    let mut reshaped = good.clone();
    reshaped[0].1 = vec![reshaped[0].2.len()];
    let mut extra = good.clone();
    extra.push(("base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight.exp_avg".into(), vec![1], vec![0.0]));
    let mut twice = good.clone();
    twice.push(good[0].clone());
    for (what, bad, needle) in [
        ("missing", missing, "missing"),
        ("reshaped", reshaped, "shape"),
        ("extra", extra, "unexpected"),
        ("twice", twice, "twice"),
    ] {
        match opt.load_state(gpu, 9, &bad) {
            Err(e) => assert!(e.to_string().contains(needle), "{what}: {e}"),
            Ok(()) => panic!("{what}: accepted"),
        }
        assert_eq!(opt.step_count(), 0, "{what}: a refused state must change nothing");
    }
    // AdamW state into plain SGD (which has none) is refused too.
    let mut sgd = Optimizer::new(gpu, OptimizerConfig { kind: OptimizerKind::Sgd, ..Default::default() }, &lora).unwrap();
    assert!(sgd.load_state(gpu, 1, &good).is_err());
    sgd.load_state(gpu, 2, &[]).unwrap();
    assert_eq!(sgd.step_count(), 2);
    opt.load_state(gpu, 4, &good).unwrap();
    assert_eq!(opt.step_count(), 4);
});

// A few AdamW steps on L = ½ Σ c·(p − t)² over every LoRA tensor, with a warmup + cosine
// schedule and clipping active: the GPU parameters follow the f64 run.
gpu_test!(async fn optimizer_adamw_quadratic(gpu) {
    let cfg = OptimizerConfig { lr: 0.05, weight_decay: 0.01, max_grad_norm: 1.0, ..Default::default() };
    let sched = Schedule { kind: ScheduleKind::Cosine, lr: cfg.lr, warmup_steps: 2, total_steps: 10, min_lr_ratio: 0.0 };
    let lora = upload(gpu, &tiny_adapter(3));
    let grads = lora.zeros_like(gpu, Category::Grads).unwrap();
    let mut opt = Optimizer::new(gpu, cfg.clone(), &lora).unwrap();
    let mut rng = Rng::new(11);
    let shapes: Vec<usize> = tensors(&lora.params).iter().map(|t| t.numel()).collect();
    let target: Vec<Vec<f64>> = shapes.iter().map(|&n| f64s(&rng.vec(n, 0.5))).collect();
    let curv: Vec<Vec<f64>> = shapes.iter().map(|&n| (0..n).map(|_| 0.5 + 1.5 * rng.uniform()).collect()).collect();
    let grad_of = |p: &[Vec<f64>]| -> Vec<Vec<f64>> {
        p.iter().zip(&target).zip(&curv).map(|((p, t), c)| p.iter().zip(t).zip(c).map(|((p, t), c)| c * (p - t)).collect()).collect()
    };
    let loss_of = |p: &[Vec<f64>]| -> f64 {
        p.iter().zip(&target).zip(&curv).flat_map(|((p, t), c)| p.iter().zip(t).zip(c).map(|((p, t), c)| 0.5 * c * (p - t) * (p - t))).sum()
    };
    let mut host = reference::Host::new(read_flat(gpu, &lora.params).await.iter().map(|t| f64s(t)).collect());
    let loss0 = loss_of(&host.p);
    for k in 0..8u32 {
        // The GPU run's gradient comes from its own (f32) parameters.
        let p32: Vec<Vec<f64>> = read_flat(gpu, &lora.params).await.iter().map(|t| f64s(t)).collect();
        let g: Vec<Vec<f32>> = grad_of(&p32).iter().map(|t| t.iter().map(|&x| x as f32).collect()).collect();
        write_set(gpu, &grads, &g);
        let lr = sched.lr_at(k);
        opt.step(gpu, &lora.params, &grads, lr);
        let g64 = grad_of(&host.p);
        let norm = host.step(&cfg, &g64, lr as f64);
        assert!(norm > 1.0, "clipping should be active at step {k} (norm {norm})");
        if k == 0 {
            // Warmup starts at lr 0: the first update leaves the parameters alone (the
            // moments still take in its gradient).
            assert_eq!(lr, 0.0);
            let after: Vec<Vec<f64>> = read_flat(gpu, &lora.params).await.iter().map(|t| f64s(t)).collect();
            assert_eq!(after, p32);
        }
    }
    let got = read_flat(gpu, &lora.params).await;
    check_params("adamw quadratic", &got, &host.p, 1e-6, 1e-5);
    let loss = loss_of(&host.p);
    assert!(loss < 0.9 * loss0, "the loss should fall: {loss0} → {loss}");
});

gpu_test!(async fn optimizer_zero_set(gpu) {
    let lora = upload(gpu, &tiny_adapter(2));
    crate::model::lora::zero_set(gpu, &lora.params);
    for (k, _, v) in read_set(gpu, &lora.params).await.unwrap() {
        assert!(v.iter().all(|&x| x == 0.0), "{k} not zeroed");
    }
});

#[test]
fn optimizer_config_parsing_and_validation() {
    for k in [OptimizerKind::AdamW, OptimizerKind::Sgd] {
        assert_eq!(k.to_string().parse::<OptimizerKind>().ok(), Some(k));
    }
    assert_eq!("AdamW".parse::<OptimizerKind>().ok(), Some(OptimizerKind::AdamW));
    assert!("adam".parse::<OptimizerKind>().is_err());
    let d = OptimizerConfig::default();
    assert_eq!(
        (d.kind, d.lr, d.beta1, d.beta2, d.eps, d.weight_decay, d.max_grad_norm),
        (OptimizerKind::AdamW, 2e-4, 0.9, 0.999, 1e-8, 0.0, 1.0)
    );
    assert!(d.validate().is_ok());
    for bad in [
        OptimizerConfig { beta2: 1.0, ..d.clone() },
        OptimizerConfig { lr: f32::NAN, ..d.clone() },
        OptimizerConfig { weight_decay: -0.1, ..d.clone() },
        OptimizerConfig { max_grad_norm: f32::NAN, ..d.clone() },
        OptimizerConfig { kind: OptimizerKind::Sgd, momentum: -1.0, ..d.clone() },
    ] {
        assert!(bad.validate().is_err(), "{bad:?} accepted");
    }
    assert_eq!(Optimizer::state_bytes(&d, 100), 204);
    assert_eq!(Optimizer::state_bytes(&OptimizerConfig { kind: OptimizerKind::Sgd, ..d }, 100), 4);
}

// A set lies in one buffer, in several (a layer each) or in separate ones (a layer larger than a
// buffer may be): the optimizer updates each alike, per buffer, per layer or per tensor —
// bit for bit without clipping (the gradient norm's sum runs in another order with it: within
// f32 rounding). The tensors are aligned for binding and never overlap.
gpu_test!(async fn sets_in_one_several_or_separate_buffers_step_alike(gpu) {
    let base = upload(gpu, &tiny_adapter(11));
    let values = read_flat(gpu, &base.params).await;
    let shapes = base.params.shapes();
    let layer = LoraSet::zeros(gpu, &shapes[..1].to_vec(), Category::Scratch).unwrap().arenas()[0].bytes();
    let grads_host = random_grads(&mut Rng::new(5), &base.params, 1.0);
    for cfg in configs() {
        let mut outs = Vec::new();
        for (cap, buffers) in [(u64::MAX, 1), (layer, shapes.len()), (layer - 4, 0)] {
            let params = LoraSet::zeros_capped(gpu, &shapes, Category::Lora, cap).unwrap();
            assert_eq!(params.arenas().len(), buffers, "cap {cap}");
            let mut ranges: Vec<(usize, u64, u64)> = tensors(&params)
                .iter()
                .map(|t| (std::sync::Arc::as_ptr(&t.buf) as usize, t.offset(), t.offset() + t.bytes()))
                .collect();
            assert!(ranges.iter().all(|r| r.1 % gpu.storage_alignment() == 0));
            ranges.sort();
            assert!(ranges.windows(2).all(|w| w[0].0 != w[1].0 || w[0].2 <= w[1].1), "overlapping tensors");
            write_set(gpu, &params, &values);
            let lora = Lora { r: base.r, alpha: base.alpha, targets: base.targets.clone(), params };
            let grads = lora.zeros_like(gpu, Category::Grads).unwrap();
            assert_eq!(grads.arenas().len(), buffers);
            assert!(buffers == 0 || lora.params.same_layout(&grads));
            write_set(gpu, &grads, &grads_host);
            let mut opt = Optimizer::new(gpu, cfg.clone(), &lora).unwrap();
            for _ in 0..2 {
                opt.step(gpu, &lora.params, &grads, cfg.lr);
            }
            outs.push(read_flat(gpu, &lora.params).await);
        }
        for (k, out) in outs.iter().enumerate().skip(1) {
            if cfg.max_grad_norm > 0.0 {
                let want: Vec<Vec<f64>> = outs[0].iter().map(|t| f64s(t)).collect();
                check_params(&format!("{cfg:?} layout {k}"), out, &want, 1e-6, 1e-5);
            } else {
                assert_eq!(out, &outs[0], "{cfg:?}: layout {k} differs from one buffer's update");
            }
        }
    }
});
