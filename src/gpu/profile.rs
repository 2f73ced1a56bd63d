//! Where the GPU's time goes: while profiling is on, every dispatch is timed and attributed to
//! its kernel (the pipeline's key, which names the variant) with the floating-point work its
//! launcher declared. Times come from timestamp queries written at the start and end of each
//! dispatch's compute pass where the adapter has `timestamp-query`; natively without them,
//! from timed submissions (each dispatch submitted and waited for alone, which adds the
//! submission's cost to each kernel). [`Gpu::profile_take`] returns the totals per kernel.
//!
//! The timestamps of the dispatches recorded since the last submission are resolved into a
//! small mappable buffer at each submission (accounted as staging) and read back at the next
//! [`Gpu::profile_take`], so profiling adds no synchronisation of its own.

use super::{Allocation, Category, Gpu, GpuError, Kernel};
use crate::platform;
use std::collections::BTreeMap;

/// Dispatches between two submissions at most: [`Gpu::dispatch`] submits every 64, and a
/// profiled run submits before the query set would overflow.
pub(super) const MAX_TIMED: u32 = 256;

/// One kernel's totals over a profiled span.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct KernelProfile {
    /// The pipeline key: kernel and variant ("matmul_nt/q4/true/true").
    pub name: String,
    pub calls: u64,
    /// GPU time in ms (0 when nothing could time it).
    pub ms: f64,
    /// Floating-point operations its launchers declared (0 for kernels that declare none).
    pub flops: f64,
}

impl KernelProfile {
    /// GFLOP/s over its GPU time (0 when either is unknown).
    pub fn gflops(&self) -> f64 {
        if self.ms > 0.0 {
            self.flops / (self.ms * 1e6)
        } else {
            0.0
        }
    }
}

/// One kind of host work over a profiled span: what the CPU did for it outside the kernels
/// (fetching weights from a store, converting them to the GPU's layout, writing them into GPU
/// buffers). Wall time on the host; where it runs while the GPU computes, it overlaps the
/// kernels instead of adding to the span.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct HostProfile {
    pub name: String,
    pub calls: u64,
    pub ms: f64,
}

/// How a profile was timed.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
#[serde(rename_all = "snake_case")]
pub enum Timing {
    /// Timestamp queries around each dispatch's compute pass.
    Timestamps,
    /// Each dispatch submitted alone and waited for (natively, without timestamp queries).
    Submissions,
    /// Neither: calls and work are counted, times are 0 (a browser without timestamp-query).
    Untimed,
}

/// The kernels of a profiled span, most time first.
#[derive(Clone, Debug, serde::Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Profile {
    pub timing: Timing,
    pub kernels: Vec<KernelProfile>,
    /// Host work by kind, most time first.
    pub host: Vec<HostProfile>,
}

impl Profile {
    /// GPU time of all dispatches, in ms.
    pub fn gpu_ms(&self) -> f64 {
        self.kernels.iter().map(|k| k.ms).sum()
    }
    /// Dispatches in all.
    pub fn calls(&self) -> u64 {
        self.kernels.iter().map(|k| k.calls).sum()
    }
    /// Floating-point operations declared, in all.
    pub fn flops(&self) -> f64 {
        self.kernels.iter().map(|k| k.flops).sum()
    }

    /// The table `webtune bench --profile` prints: kernel, calls, ms, GFLOP/s, share of `wall_ms`
    /// (the span's wall time; the rest of it is the GPU idle: host work, uploads, waits).
    pub fn table(&self, wall_ms: f64) -> String {
        let mut s = format!(
            "{:<44} {:>6} {:>10} {:>9} {:>7}\n",
            format!("kernel ({})", self.timing.name()),
            "calls",
            "ms",
            "GFLOP/s",
            "share"
        );
        let share = |ms: f64| if wall_ms > 0.0 { 100.0 * ms / wall_ms } else { 0.0 };
        for k in &self.kernels {
            let g = if k.flops > 0.0 { format!("{:.1}", k.gflops()) } else { "-".into() };
            s += &format!("{:<44} {:>6} {:>10.1} {:>9} {:>6.1}%\n", k.name, k.calls, k.ms, g, share(k.ms));
        }
        let (gpu, flops) = (self.gpu_ms(), self.flops());
        let g = if gpu > 0.0 { format!("{:.1}", flops / (gpu * 1e6)) } else { "-".into() };
        s += &format!("{:<44} {:>6} {:>10.1} {:>9} {:>6.1}%\n", "all kernels", self.calls(), gpu, g, share(gpu));
        s += &format!(
            "{:<44} {:>6} {:>10.1} {:>9} {:>6.1}%\n",
            "not in a kernel (host, uploads, waits)",
            "",
            (wall_ms - gpu).max(0.0),
            "",
            share((wall_ms - gpu).max(0.0))
        );
        if !self.host.is_empty() {
            s += "host work (on the CPU; it overlaps the kernels where it runs while the GPU computes):\n";
            for h in &self.host {
                s += &format!("  {:<42} {:>6} {:>10.1} {:>9} {:>6.1}%\n", h.name, h.calls, h.ms, "", share(h.ms));
            }
        }
        if let Some(b) = self.product_bound(wall_ms) {
            s += &format!(
                "matrix products: {:.1} GFLOP, {:.2} s at the plain big products' {:.1} GFLOP/s; the span over that: {:.2}\n",
                b.gflop, b.seconds, b.plain_gflops, b.ratio
            );
        }
        s
    }
}

/// How far a step is from being bound by its matrix products: their work, the rate of the plain
/// big products (no fused LoRA term, at least [`ProductBound::BIG_FLOPS`] per call: the lm_head's
/// vocab chunks in a training step), and the span's wall time over the products' time at that
/// rate (issue 18's target for the 0.5B step: 1.3).
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ProductBound {
    /// Every matrix product's floating-point work (kernels named `matmul_…`), in GFLOP.
    pub gflop: f64,
    /// GFLOP/s of the plain big products.
    pub plain_gflops: f64,
    /// Seconds the products would take at that rate.
    pub seconds: f64,
    /// The span's wall time over `seconds`.
    pub ratio: f64,
}

impl ProductBound {
    /// Work per call from which a plain product counts as big.
    pub const BIG_FLOPS: f64 = 1e9;
}

impl Profile {
    /// [`ProductBound`] of a span of `wall_ms`; None without timed plain big products.
    pub fn product_bound(&self, wall_ms: f64) -> Option<ProductBound> {
        let products = self.kernels.iter().filter(|k| k.name.starts_with("matmul_"));
        let gflop = products.clone().map(|k| k.flops).sum::<f64>() / 1e9;
        let (ms, flops) = products
            .filter(|k| {
                !k.name.ends_with("/lora") && k.calls > 0 && k.flops / k.calls as f64 >= ProductBound::BIG_FLOPS
            })
            .fold((0.0, 0.0), |(m, f), k| (m + k.ms, f + k.flops));
        if ms <= 0.0 || flops <= 0.0 || wall_ms <= 0.0 {
            return None;
        }
        let plain_gflops = flops / (ms * 1e6);
        let seconds = gflop / plain_gflops;
        Some(ProductBound { gflop, plain_gflops, seconds, ratio: wall_ms / 1000.0 / seconds })
    }
}

impl Timing {
    pub fn name(self) -> &'static str {
        match self {
            Timing::Timestamps => "timestamps",
            Timing::Submissions => "timed submissions",
            Timing::Untimed => "untimed",
        }
    }
}

/// The timestamp queries of a profiled device.
struct Queries {
    set: wgpu::QuerySet,
    /// Where the set is resolved (QUERY_RESOLVE | COPY_SRC), 2 · MAX_TIMED u64.
    resolve: wgpu::Buffer,
    /// Nanoseconds per timestamp tick.
    period: f64,
    _acct: Allocation,
}

/// A submission's timestamps, copied into a mappable buffer, with what each pair times.
struct Resolved {
    buf: wgpu::Buffer,
    what: Vec<(usize, u64)>,
    _acct: Allocation,
}

/// What a profiled [`Gpu`] keeps (in `Gpu::profiler` while profiling is on).
pub(super) struct Profiler {
    queries: Option<Queries>,
    /// Kernel names, indexed by the `usize` of the records.
    names: Vec<String>,
    index: BTreeMap<String, usize>,
    /// Dispatches recorded since the last submission, in query order: (kernel, flops).
    open: Vec<(usize, u64)>,
    resolved: Vec<Resolved>,
    /// Finished: (kernel, flops, ns).
    done: Vec<(usize, u64, f64)>,
    /// Host work by kind: (calls, ms).
    host: BTreeMap<&'static str, (u64, f64)>,
}

impl Profiler {
    fn kernel(&mut self, name: &str) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_string());
        self.index.insert(name.to_string(), self.names.len() - 1);
        self.names.len() - 1
    }
}

impl Gpu {
    /// Start timing every dispatch (and forget what an earlier profile collected).
    pub fn profile_start(&self) {
        let queries = self.device.features().contains(wgpu::Features::TIMESTAMP_QUERY).then(|| {
            let bytes = 2 * MAX_TIMED as u64 * 8;
            Queries {
                set: self.device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("profile"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * MAX_TIMED,
                }),
                resolve: self.device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("profile resolve"),
                    size: bytes,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                period: self.queue.get_timestamp_period() as f64,
                _acct: self.alloc.track(Category::Staging, bytes),
            }
        });
        self.flush(); // nothing recorded before the start is timed
        *self.profiler.lock().unwrap_or_else(|e| e.into_inner()) = Some(Profiler {
            queries,
            names: Vec::new(),
            index: BTreeMap::new(),
            open: Vec::new(),
            resolved: Vec::new(),
            done: Vec::new(),
            host: BTreeMap::new(),
        });
    }

    /// Run `work`, and while profiling count its wall time as host work of kind `name`.
    pub fn host_work<R>(&self, name: &'static str, work: impl FnOnce() -> R) -> R {
        if !self.profiling() {
            return work();
        }
        let t0 = platform::now_ms();
        let r = work();
        self.host_done(name, platform::now_ms() - t0);
        r
    }

    /// [`Gpu::host_work`] of a future (fetching from an async store).
    pub async fn host_work_async<R>(&self, name: &'static str, work: impl std::future::Future<Output = R>) -> R {
        if !self.profiling() {
            return work.await;
        }
        let t0 = platform::now_ms();
        let r = work.await;
        self.host_done(name, platform::now_ms() - t0);
        r
    }

    fn host_done(&self, name: &'static str, ms: f64) {
        if let Some(p) = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            let e = p.host.entry(name).or_default();
            e.0 += 1;
            e.1 += ms;
        }
    }

    /// Whether dispatches are being timed.
    pub fn profiling(&self) -> bool {
        self.profiler.lock().map(|p| p.is_some()).unwrap_or(false)
    }

    /// Wait for the GPU, read every timestamp back, stop profiling and return the totals per
    /// kernel, most time first. None when profiling was not on.
    pub async fn profile_take(&self) -> Result<Option<Profile>, GpuError> {
        self.sync().await?;
        let Some(mut p) = self.profiler.lock().unwrap_or_else(|e| e.into_inner()).take() else { return Ok(None) };
        let period = p.queries.as_ref().map_or(0.0, |q| q.period);
        for r in std::mem::take(&mut p.resolved) {
            let (tx, rx) = futures_channel::oneshot::channel();
            r.buf.map_async(wgpu::MapMode::Read, .., move |res| {
                let _ = tx.send(res);
            });
            platform::poll_wait(&self.device);
            rx.await
                .map_err(|_| GpuError::Readback("profile: map callback dropped".into()))?
                .map_err(|e| GpuError::Readback(e.to_string()))?;
            let ticks: Vec<u64> = {
                let view = r.buf.get_mapped_range(..).map_err(|e| GpuError::Readback(e.to_string()))?;
                bytemuck::pod_collect_to_vec(&view)
            };
            r.buf.unmap();
            for (j, &(k, flops)) in r.what.iter().enumerate() {
                let ns = ticks[2 * j + 1].saturating_sub(ticks[2 * j]) as f64 * period;
                p.done.push((k, flops, ns));
            }
        }
        let timing = match (&p.queries, platform::SYNC_MAP) {
            (Some(_), _) => Timing::Timestamps,
            (None, true) => Timing::Submissions,
            (None, false) => Timing::Untimed,
        };
        let mut kernels: Vec<KernelProfile> =
            p.names.iter().map(|n| KernelProfile { name: n.clone(), calls: 0, ms: 0.0, flops: 0.0 }).collect();
        for &(k, flops, ns) in &p.done {
            kernels[k].calls += 1;
            kernels[k].ms += ns / 1e6;
            kernels[k].flops += flops as f64;
        }
        kernels.sort_by(|a, b| b.ms.total_cmp(&a.ms).then(b.calls.cmp(&a.calls)));
        let mut host: Vec<HostProfile> =
            p.host.iter().map(|(n, &(calls, ms))| HostProfile { name: n.to_string(), calls, ms }).collect();
        host.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        Ok(Some(Profile { timing, kernels, host }))
    }

    /// Called by [`Gpu::dispatch`] while profiling, before the pass is recorded: the timestamp
    /// writes for the pass (None without queries), and whether the dispatch must be submitted
    /// and timed alone (natively, without queries).
    pub(super) fn profile_begin(&self, kernel: &Kernel, flops: u64) -> (Option<(u32, u32)>, bool) {
        let mut guard = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = guard.as_mut() else { return (None, false) };
        let k = p.kernel(&kernel.key);
        if p.queries.is_none() {
            if platform::SYNC_MAP {
                return (None, true);
            }
            p.done.push((k, flops, 0.0));
            return (None, false);
        }
        let i = p.open.len() as u32;
        p.open.push((k, flops));
        (Some((2 * i, 2 * i + 1)), false)
    }

    /// The timestamp query set, for a pass's timestamp writes.
    pub(super) fn with_query_set<R>(&self, f: impl FnOnce(Option<&wgpu::QuerySet>) -> R) -> R {
        let guard = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        f(guard.as_ref().and_then(|p| p.queries.as_ref()).map(|q| &q.set))
    }

    /// Whether the query set is full (the next profiled dispatch must come after a submission).
    pub(super) fn profile_full(&self) -> bool {
        let guard = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        guard.as_ref().is_some_and(|p| p.open.len() as u32 >= MAX_TIMED)
    }

    /// A dispatch submitted and waited for alone took `ms` (timed submissions).
    pub(super) fn profile_timed(&self, kernel: &Kernel, flops: u64, ms: f64) {
        let mut guard = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = guard.as_mut() {
            let k = p.kernel(&kernel.key);
            p.done.push((k, flops, ms * 1e6));
        }
    }

    /// At a submission: resolve the timestamps of the dispatches in `enc` into a mappable
    /// buffer, to read at [`Gpu::profile_take`].
    pub(super) fn profile_resolve(&self, enc: &mut wgpu::CommandEncoder) {
        let mut guard = self.profiler.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = guard.as_mut() else { return };
        let Some(q) = p.queries.as_ref() else { return };
        if p.open.is_empty() {
            return;
        }
        let n = 2 * p.open.len() as u32;
        let bytes = n as u64 * 8;
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("profile readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.resolve_query_set(&q.set, 0..n, &q.resolve, 0);
        enc.copy_buffer_to_buffer(&q.resolve, 0, &buf, 0, bytes);
        let what = std::mem::take(&mut p.open);
        p.resolved.push(Resolved { buf, what, _acct: self.alloc.track(Category::Staging, bytes) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(name: &str, calls: u64, ms: f64, flops: f64) -> KernelProfile {
        KernelProfile { name: name.into(), calls, ms, flops }
    }

    #[test]
    fn product_bound_uses_the_plain_big_products_rate() {
        let p = Profile {
            timing: Timing::Timestamps,
            kernels: vec![
                k("matmul_nt/shared16x8/8/sg8/q4/true/true/lora", 10, 2000.0, 100e9), // fused: 50 GFLOP/s
                k("matmul_nt/shared16x8/8/sg8/q4/true/true", 4, 500.0, 40e9),         // plain big: 80
                k("matmul_tn/blocked1x64/true/true", 100, 100.0, 0.5e9),              // thin: not big
                k("attention_fwd/64/8/16", 4, 300.0, 10e9),                           // not a product
            ],
            host: vec![],
        };
        let b = p.product_bound(4000.0).unwrap();
        assert!((b.gflop - 140.5).abs() < 1e-9, "{b:?}");
        assert!((b.plain_gflops - 80.0).abs() < 1e-9, "{b:?}");
        assert!((b.seconds - 140.5 / 80.0).abs() < 1e-9, "{b:?}");
        assert!((b.ratio - 4.0 / (140.5 / 80.0)).abs() < 1e-9, "{b:?}");
        assert!(p.table(4000.0).contains("the span over that: 2.28"), "{}", p.table(4000.0));
        // No plain big product timed (decoding's one-row products, or an untimed browser): none.
        let decode = Profile {
            timing: Timing::Timestamps,
            kernels: vec![k("matmul_nt/gemv_rows/r8/wg8/bf16", 150, 70.0, 0.1e9)],
            host: vec![],
        };
        assert_eq!(decode.product_bound(100.0), None);
        assert!(!decode.table(100.0).contains("matrix products"));
    }
}
