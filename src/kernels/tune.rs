//! Choosing each kernel family's variant for the device: every candidate is checked against
//! the reference kernel on small random inputs, then timed at the model's own shapes
//! ([`gpu_time`]: timestamp queries where the device has them, so launch and wait costs do not
//! decide), and the fastest runs from now on ([`crate::gpu::Gpu::set_choice`]). Choices are
//! kept by adapter and shape ([`TuneCache`]) so a second load only checks them.

use super::{attention, matmul};
use crate::base::config::ModelConfig;
use crate::base::dtype::DType;
use crate::base::error::Result;
use crate::gpu::profile::Timing;
use crate::gpu::Gpu;
use std::collections::BTreeMap;

/// GPU milliseconds of one call of `f`, the best of `reps` after a warm-up (which compiles):
/// the sum of its dispatches' own times from timestamp queries where the device has them
/// (launches, waits and the host are left out), else the wall clock around the call and a wait.
pub async fn gpu_time(gpu: &Gpu, reps: usize, mut f: impl FnMut()) -> Result<f64> {
    f();
    gpu.sync().await?;
    let stamps = gpu.device.features().contains(wgpu::Features::TIMESTAMP_QUERY);
    let mut best = f64::INFINITY;
    for _ in 0..reps.max(1) {
        let ms = if stamps {
            gpu.profile_start();
            f();
            match gpu.profile_take().await? {
                Some(p) if p.timing == Timing::Timestamps => p.gpu_ms(),
                _ => f64::INFINITY,
            }
        } else {
            let t0 = crate::platform::now_ms();
            f();
            gpu.sync().await?;
            crate::platform::now_ms() - t0
        };
        best = best.min(ms);
    }
    Ok(best)
}

/// Whether two kernels' outputs agree to f32 rounding: |x − y| ≤ 1e-5 · (1 + |y|) everywhere.
pub fn agree(x: &[f32], y: &[f32]) -> bool {
    agree_within(x, y, 1e-5)
}

/// Whether `x` agrees with `y` within `tol` relative (of 1 + |y|) everywhere.
pub fn agree_within(x: &[f32], y: &[f32], tol: f32) -> bool {
    x.len() == y.len() && x.iter().zip(y).all(|(p, q)| (p - q).abs() <= tol * (1.0 + q.abs()))
}

/// Mark the fastest candidate that agrees as chosen (the first of equals: the reference, which
/// comes first) and return its name.
pub fn mark_fastest(measured: &mut [Measured]) -> Option<String> {
    let best = measured.iter_mut().filter(|m| m.agrees).min_by(|a, b| a.ms.total_cmp(&b.ms))?;
    best.chosen = true;
    Some(best.variant.clone())
}

/// Forget every choice: the reference kernels of every family run from now on.
pub fn use_reference(gpu: &Gpu) {
    for family in [matmul::CHOICE, matmul::THIN_CHOICE, matmul::GEMV_CHOICE, attention::CHOICE] {
        gpu.set_choice(family, None);
    }
}

/// One candidate as [`tune`] measured it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Measured {
    /// The kernel family: "matmul", "attention".
    pub family: String,
    pub variant: String,
    /// GPU ms of the family's timed work at the model's shapes (0 when it did not agree).
    pub ms: f64,
    /// Whether it computed what the reference computes.
    pub agrees: bool,
    pub chosen: bool,
}

/// Which variant each kernel family runs, by [`tune_key`], kept across loads (natively in a
/// file, `~/.cache/webtune/kernels.json`; in the browser in the weight store), so a second
/// load of the same model on the same adapter does not measure again.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TuneCache {
    /// tune_key → family → the variant's name
    pub choices: BTreeMap<String, BTreeMap<String, String>>,
}

/// What [`tune`] did.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Tuned {
    pub key: String,
    /// family → the variant that runs it
    pub chosen: BTreeMap<String, String>,
    /// True when the choices came from the cache (checked against the reference, not timed).
    pub cached: bool,
    /// Each candidate's measurement (empty when cached).
    pub measured: Vec<Measured>,
}

impl Tuned {
    /// One line for logs and the page: "matmul: tiled64x64 (3.1 ms; blocked 9.8 ms, …);
    /// attention: r1.1.1w16 (…)".
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (family, variant) in &self.chosen {
            let ms: Vec<&Measured> = self.measured.iter().filter(|m| &m.family == family).collect();
            if ms.len() < 2 {
                let how = if self.cached { "cached" } else { "the only candidate" };
                parts.push(format!("{family}: {variant} ({how})"));
                continue;
            }
            let best = ms.iter().find(|m| m.chosen).map_or(0.0, |m| m.ms);
            let rest: Vec<String> = ms
                .iter()
                .filter(|m| !m.chosen)
                .map(|m| {
                    if m.agrees {
                        format!("{} {:.2} ms", m.variant, m.ms)
                    } else {
                        format!("{} disagrees", m.variant)
                    }
                })
                .collect();
            parts.push(format!("{family}: {variant} ({best:.2} ms; {})", rest.join(", ")));
        }
        parts.join("; ")
    }
}

/// Bumped when the autotune's measurement changes, so choices cached by an earlier one are
/// measured again (2: one-row kernels timed streaming their weights; 3: the rows one-row
/// kernels are candidates; 4: browsers with subgroups get the subgroup kernels, GPUs tiled
/// attention).
const TUNE_VERSION: u32 = 4;

/// The autotune's version, the adapter (name, backend, vendor and device ids, driver, subgroup
/// sizes, limits), the weight dtype, whether f16 products were allowed, and the model shape a
/// choice was made for.
pub fn tune_key(gpu: &Gpu, cfg: &ModelConfig, tokens: usize, dtype: DType) -> String {
    let i = &gpu.info;
    format!(
        "t{}|{}|{}|{:04x}:{:04x}|{}|sg{}-{}|wg{}x{}|{}{}|m{}|c{}f{}q{}h{}.{}.{}",
        TUNE_VERSION,
        i.adapter,
        i.backend,
        i.vendor,
        i.device_id,
        i.driver,
        i.subgroup_min_size,
        i.subgroup_max_size,
        i.max_compute_invocations_per_workgroup,
        i.max_compute_workgroup_storage_size,
        dtype.name(),
        if gpu.f16_products() { "|f16" } else { "" },
        tokens.clamp(1, 512),
        cfg.hidden,
        cfg.intermediate,
        cfg.heads * cfg.head_dim,
        cfg.heads,
        cfg.kv_heads,
        cfg.head_dim
    )
}

/// Choose the device's kernel variants for a model of shape `cfg` trained or run on `tokens`
/// tokens at a time with frozen weights stored as `dtype`: for the matrix products and for
/// attention, each candidate is checked against the reference kernels and timed at the model's
/// own shapes, and the fastest runs from now on. Choices in `cache` for the same [`tune_key`]
/// are used after the check alone (no timing); new ones are added to it.
pub async fn tune(gpu: &Gpu, cfg: &ModelConfig, tokens: usize, dtype: DType, cache: &mut TuneCache) -> Result<Tuned> {
    use matmul::Variant;
    let key = tune_key(gpu, cfg, tokens, dtype);
    if let Some(c) = cache.choices.get(&key) {
        let mm = c.get(matmul::CHOICE).and_then(|s| Variant::parse(s));
        let at = c.get(attention::CHOICE).and_then(|s| attention::Tuning::parse(s));
        let thin = c.get(matmul::THIN_CHOICE).filter(|s| *s == matmul::BLOCKED || *s == matmul::SPLIT_K);
        let gemv = c.get(matmul::GEMV_CHOICE).filter(|s| *s == matmul::BLOCKED || matmul::gemv_runnable(gpu, s));
        if let (Some(v), Some(t), Some(thin), Some(gemv)) = (mm, at, thin, gemv) {
            let ok = matmul::candidates(gpu).contains(&v)
                && (v == Variant::Blocked || matmul::agrees(gpu, v, dtype).await?);
            if ok {
                gpu.set_choice(matmul::CHOICE, (v != Variant::Blocked).then(|| v.name()));
                gpu.set_choice(attention::CHOICE, Some(t.name()));
                gpu.set_choice(matmul::THIN_CHOICE, (thin == matmul::SPLIT_K).then(|| thin.clone()));
                gpu.set_choice(matmul::GEMV_CHOICE, (gemv != matmul::BLOCKED).then(|| gemv.clone()));
                return Ok(Tuned { key, chosen: c.clone(), cached: true, measured: Vec::new() });
            }
        }
    }
    let m = tokens.clamp(1, 512);
    let shapes = [(m, cfg.hidden, cfg.intermediate), (m, cfg.hidden, cfg.heads * cfg.head_dim)];
    let mut measured = matmul::choose(gpu, &shapes, dtype, 3).await?;
    measured.extend(matmul::choose_thin(gpu, m, &[cfg.hidden, cfg.intermediate], 8, 3).await?);
    let (c, f) = (cfg.hidden, cfg.intermediate);
    measured.extend(matmul::choose_gemv(gpu, &[(c, c), (c, f), (f, c)], dtype, 3).await?);
    let s = attention::AttnShape { batch: 1, seq: m, heads: cfg.heads, kv_heads: cfg.kv_heads, head_dim: cfg.head_dim };
    measured.extend(attention::choose(gpu, &s, 3).await?);
    let chosen: BTreeMap<String, String> = [
        (matmul::CHOICE.to_string(), Variant::of(gpu).name()),
        (attention::CHOICE.to_string(), attention::tuning_of(gpu).name()),
        (matmul::THIN_CHOICE.to_string(), gpu.choice(matmul::THIN_CHOICE).unwrap_or_else(|| matmul::BLOCKED.into())),
        (matmul::GEMV_CHOICE.to_string(), gpu.choice(matmul::GEMV_CHOICE).unwrap_or_else(|| matmul::BLOCKED.into())),
    ]
    .into();
    cache.choices.insert(key.clone(), chosen.clone());
    Ok(Tuned { key, chosen, cached: false, measured })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_test;

    // Allowed f16 products (where the adapter has shader-f16) are timed beside the f32
    // variants, under a cache key of their own, each checked at f16's precision; the fastest
    // that agrees is chosen as always. Without the permission none is timed.
    gpu_test!(async fn f16_products_are_candidates_only_when_allowed(gpu) {
        let cfg = crate::formats::testdata::tiny_config(false);
        let is_f16 = |m: &Measured| m.family == matmul::CHOICE && m.variant.ends_with("/f16");
        let mut cache = TuneCache::default();
        assert!(!gpu.f16_products());
        let plain = tune(gpu, &cfg, 16, DType::BF16, &mut cache).await.expect("tune");
        assert!(!plain.key.contains("|f16") && !plain.measured.iter().any(is_f16), "{plain:?}");
        if !gpu.set_f16_products(true) {
            assert!(!gpu.info.shader_f16);
            println!("no shader-f16 on this adapter: f16 products cannot be allowed");
            return;
        }
        let half = tune(gpu, &cfg, 16, DType::BF16, &mut cache).await.expect("tune");
        assert!(!half.cached && half.key != plain.key && half.key.contains("|f16"));
        let timed: Vec<&Measured> = half.measured.iter().filter(|m| is_f16(m)).collect();
        assert_eq!(timed.len(), matmul::runnable_f16(gpu).len());
        assert!(timed.iter().all(|m| m.agrees && m.ms > 0.0), "{timed:?}");
        let products: Vec<&Measured> = half.measured.iter().filter(|m| m.family == matmul::CHOICE).collect();
        let fastest = products.iter().filter(|m| m.agrees).min_by(|a, b| a.ms.total_cmp(&b.ms)).unwrap();
        assert!(fastest.chosen, "{products:?}");
        assert_eq!(matmul::Variant::of(gpu).name(), half.chosen[matmul::CHOICE]);
        println!("{}", half.summary());
        // The second load with the same permission takes the cached choice.
        assert!(tune(gpu, &cfg, 16, DType::BF16, &mut cache).await.expect("tune").cached);
        gpu.set_f16_products(false);
        use_reference(gpu);
    });
}
