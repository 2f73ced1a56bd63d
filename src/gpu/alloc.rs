//! The accounting allocator: every GPU buffer the engine makes is tagged with a
//! [`Category`] and counted here, live and peak, per category and in total.
//! A [`Tensor`](super::Tensor) holds an [`Allocation`]; dropping it returns the bytes.

use std::sync::{Arc, Mutex};

/// What a buffer holds. The memory benchmark reports peaks per category.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Category {
    /// Frozen base-model weights (embedding, projections, norms).
    Weights,
    /// LoRA A and B matrices.
    Lora,
    /// Gradients of the LoRA parameters.
    Grads,
    /// Optimizer state (AdamW moments).
    Optimizer,
    /// Saved block inputs (MeSP / MeBP checkpoints).
    Checkpoints,
    /// Intermediates of forward and backward.
    Activations,
    /// Small per-kernel scratch (log-sum-exp partials, reductions).
    Scratch,
    /// Upload and readback staging.
    Staging,
}

impl Category {
    pub const ALL: [Category; 8] = [
        Category::Weights,
        Category::Lora,
        Category::Grads,
        Category::Optimizer,
        Category::Checkpoints,
        Category::Activations,
        Category::Scratch,
        Category::Staging,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Category::Weights => "weights",
            Category::Lora => "lora",
            Category::Grads => "grads",
            Category::Optimizer => "optimizer",
            Category::Checkpoints => "checkpoints",
            Category::Activations => "activations",
            Category::Scratch => "scratch",
            Category::Staging => "staging",
        }
    }
    fn index(self) -> usize {
        self as usize
    }
}

/// Live and peak bytes, per category and in total.
#[derive(Clone, Debug, Default)]
pub struct MemoryStats {
    pub live: [u64; 8],
    pub peak: [u64; 8],
    pub live_total: u64,
    pub peak_total: u64,
    pub allocations: u64,
    /// Peak since the last timeline sample (total, and per category at that moment).
    interval_peak_total: u64,
    interval_peak: [u64; 8],
}

/// One point of the memory timeline: the phase that just ended, the live bytes
/// at its end and the highest total reached during it (with its split by category).
#[derive(Clone, Debug, serde::Serialize)]
#[cfg_attr(test, derive(ts_rs::TS))]
pub struct Sample {
    pub phase: String,
    /// Milliseconds since the timeline started, when the phase was recorded: when its work
    /// ended, or with phases ahead ([`crate::gpu::Gpu::set_phases_ahead`]) the phase before's.
    pub t_ms: f64,
    pub live_total: u64,
    pub peak_total: u64,
    /// Bytes per category at the phase's peak, by [`Category::name`].
    pub peak_by_category: std::collections::BTreeMap<&'static str, u64>,
}

impl MemoryStats {
    pub fn live(&self, c: Category) -> u64 {
        self.live[c.index()]
    }
    pub fn peak(&self, c: Category) -> u64 {
        self.peak[c.index()]
    }
}

/// Shared counters; cheap to clone.
#[derive(Clone, Default)]
pub struct Allocator {
    stats: Arc<Mutex<MemoryStats>>,
    timeline: Arc<Mutex<Option<Vec<Sample>>>>,
    /// When the timeline started (ms, [`crate::platform::now_ms`]).
    t0: Arc<Mutex<f64>>,
    /// Most bytes that may be live at once (None: no limit but the device's).
    budget: Arc<Mutex<Option<u64>>>,
    /// Releases held back until the work that used their buffers has run.
    retiring: Arc<Mutex<Retiring>>,
}

/// The bytes of dropped allocations still counted live ([`Allocator::defer_releases`]), each
/// with the epoch it was dropped in.
#[derive(Default)]
struct Retiring {
    on: bool,
    epoch: u64,
    held: Vec<(u64, Category, u64)>,
}

impl Allocator {
    /// Limit the live bytes to `budget` (None: no limit). An allocation that would pass it
    /// fails with [`crate::gpu::GpuError::OverBudget`] instead of being made.
    pub fn set_budget(&self, budget: Option<u64>) {
        if let Ok(mut b) = self.budget.lock() {
            *b = budget;
        }
    }
    pub fn budget(&self) -> Option<u64> {
        self.budget.lock().ok().and_then(|b| *b)
    }
    /// `Err((live, budget))` when `bytes` more would pass the budget.
    pub(crate) fn check_budget(&self, bytes: u64) -> Result<(), (u64, u64)> {
        let Some(budget) = self.budget() else { return Ok(()) };
        let live = self.stats.lock().map(|s| s.live_total).unwrap_or(0);
        if live + bytes > budget {
            return Err((live, budget));
        }
        Ok(())
    }
    pub fn stats(&self) -> MemoryStats {
        self.stats.lock().map(|s| s.clone()).unwrap_or_default()
    }
    /// Forget peaks: the next peak is measured from the live bytes now.
    pub fn reset_peaks(&self) {
        if let Ok(mut s) = self.stats.lock() {
            s.peak = s.live;
            s.peak_total = s.live_total;
        }
    }
    /// Start recording a timeline (one [`Sample`] per [`Allocator::sample`] call).
    pub fn record_timeline(&self, on: bool) {
        if let Ok(mut t) = self.timeline.lock() {
            *t = on.then(Vec::new);
        }
        if let Ok(mut t0) = self.t0.lock() {
            *t0 = crate::platform::now_ms();
        }
        if let Ok(mut s) = self.stats.lock() {
            s.interval_peak_total = s.live_total;
            s.interval_peak = s.live;
        }
    }
    /// Close a phase: record its peak (when recording) and start the next interval.
    pub fn sample(&self, phase: impl FnOnce() -> String) {
        let Ok(mut t) = self.timeline.lock() else { return };
        let Some(list) = t.as_mut() else { return };
        if let Ok(mut s) = self.stats.lock() {
            let peak_by_category = Category::ALL.iter().map(|c| (c.name(), s.interval_peak[c.index()])).collect();
            let t_ms = crate::platform::now_ms() - self.t0.lock().map(|t| *t).unwrap_or(0.0);
            list.push(Sample {
                phase: phase(),
                t_ms,
                live_total: s.live_total,
                peak_total: s.interval_peak_total,
                peak_by_category,
            });
            s.interval_peak_total = s.live_total;
            s.interval_peak = s.live;
        }
    }
    /// The recorded timeline (empty when not recording).
    pub fn timeline(&self) -> Vec<Sample> {
        self.timeline.lock().ok().and_then(|t| t.clone()).unwrap_or_default()
    }

    /// Count the bytes of dropped allocations as live until the work submitted before their
    /// drop has run ([`Allocator::release_through`]): with work of more than one phase in
    /// flight, a buffer dropped on the host lives on in the driver until the device is done with
    /// it, and the accounting must not say it is gone. Off (the default): bytes are released at
    /// drop, and whatever is held is released now (call it with the device idle).
    pub fn defer_releases(&self, on: bool) {
        let held = match self.retiring.lock() {
            Ok(mut r) => {
                r.on = on;
                if on {
                    Vec::new()
                } else {
                    std::mem::take(&mut r.held)
                }
            }
            Err(_) => Vec::new(),
        };
        for (_, c, b) in held {
            self.untrack(c, b);
        }
    }

    /// Whether releases are deferred ([`Allocator::defer_releases`]).
    pub fn deferring(&self) -> bool {
        self.retiring.lock().map(|r| r.on).unwrap_or(false)
    }

    /// Bytes dropped but still counted live ([`Allocator::defer_releases`]).
    pub fn held_bytes(&self) -> u64 {
        self.retiring.lock().map(|r| r.held.iter().map(|h| h.2).sum()).unwrap_or(0)
    }

    /// End the current epoch and return it: allocations dropped from now on belong to the
    /// next. Called just before work is submitted that a wait will then cover.
    pub(crate) fn close_epoch(&self) -> u64 {
        self.retiring
            .lock()
            .map(|mut r| {
                r.epoch += 1;
                r.epoch - 1
            })
            .unwrap_or(0)
    }

    /// Release what was dropped in epochs up to `epoch`: the work submitted when it closed has run.
    pub(crate) fn release_through(&self, epoch: u64) {
        let done: Vec<(u64, Category, u64)> = match self.retiring.lock() {
            Ok(mut r) if !r.held.is_empty() => {
                let (done, keep) = std::mem::take(&mut r.held).into_iter().partition(|h| h.0 <= epoch);
                r.held = keep;
                done
            }
            _ => Vec::new(),
        };
        for (_, c, b) in done {
            self.untrack(c, b);
        }
    }

    fn untrack(&self, category: Category, bytes: u64) {
        if let Ok(mut s) = self.stats.lock() {
            let i = category.index();
            s.live[i] -= bytes;
            s.live_total -= bytes;
        }
    }

    pub(crate) fn track(&self, category: Category, bytes: u64) -> Allocation {
        if let Ok(mut s) = self.stats.lock() {
            let i = category.index();
            s.live[i] += bytes;
            s.peak[i] = s.peak[i].max(s.live[i]);
            s.live_total += bytes;
            s.peak_total = s.peak_total.max(s.live_total);
            if s.live_total > s.interval_peak_total {
                s.interval_peak_total = s.live_total;
                s.interval_peak = s.live;
            }
            s.allocations += 1;
        }
        Allocation { alloc: self.clone(), category, bytes }
    }
}

/// Bytes counted as live until this is dropped.
pub struct Allocation {
    alloc: Allocator,
    category: Category,
    bytes: u64,
}

impl Allocation {
    pub fn category(&self) -> Category {
        self.category
    }
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Allocation {
    /// Release now, whatever [`Allocator::defer_releases`] says: for a buffer known to be no
    /// longer in use (a readback's, once read).
    pub(crate) fn release_now(mut self) {
        self.alloc.untrack(self.category, std::mem::take(&mut self.bytes));
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let held = match self.alloc.retiring.lock() {
            Ok(mut r) if r.on => {
                let e = r.epoch;
                r.held.push((e, self.category, self.bytes));
                true
            }
            _ => false,
        };
        if !held {
            self.alloc.untrack(self.category, self.bytes);
        }
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}B", self.category.name(), self.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_returns_to_zero_and_peak_stays() {
        let a = Allocator::default();
        let x = a.track(Category::Activations, 100);
        let y = a.track(Category::Weights, 50);
        assert_eq!(a.stats().live_total, 150);
        drop(x);
        let s = a.stats();
        assert_eq!(s.live_total, 50);
        assert_eq!(s.peak_total, 150);
        assert_eq!(s.peak(Category::Activations), 100);
        drop(y);
        assert_eq!(a.stats().live_total, 0);
    }

    #[test]
    fn deferred_releases_wait_for_their_epoch() {
        let a = Allocator::default();
        a.defer_releases(true);
        let (x, y, z) =
            (a.track(Category::Activations, 100), a.track(Category::Scratch, 10), a.track(Category::Staging, 1));
        drop(x);
        let e0 = a.close_epoch();
        drop(y);
        z.release_now();
        assert_eq!((a.stats().live_total, a.held_bytes()), (110, 110), "dropped bytes stay counted");
        a.release_through(e0);
        assert_eq!((a.stats().live_total, a.held_bytes()), (10, 10), "x's epoch released, y's not");
        let e1 = a.close_epoch();
        a.release_through(e1);
        assert_eq!((a.stats().live_total, a.held_bytes()), (0, 0));
        assert_eq!(a.stats().peak_total, 111);
        let w = a.track(Category::Weights, 5);
        drop(w);
        a.defer_releases(false);
        assert_eq!(a.stats().live_total, 0, "turning deferral off releases what it held");
    }
}
