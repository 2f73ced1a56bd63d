//! Reading results back: a mapped copy, awaited through the map callback (the event loop
//! drives it in the browser; natively the device is polled), and [`Gpu::sync`].

use super::{Allocation, Category, Gpu, GpuError, Tensor};
use crate::platform;

/// The most bytes one readback of [`Gpu::read_f32_many`] spans.
pub const READ_SPAN: u64 = 8 << 20;

impl Gpu {
    /// Read a tensor's raw bytes back (flushes pending work first).
    pub async fn read_bytes(&self, t: &Tensor) -> Result<Vec<u8>, GpuError> {
        self.read_later(t).bytes(self).await
    }

    /// Start reading a tensor back: its copy is recorded after the work recorded so far and
    /// submitted with it now; [`PendingRead::bytes`] waits for that submission only, so work
    /// recorded in between (the next token's forward) keeps the GPU busy meanwhile.
    pub fn read_later(&self, t: &Tensor) -> PendingRead {
        let size = t.bytes();
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let acct = self.alloc.track(Category::Staging, size);
        {
            let mut guard = self.encoder();
            if let Some(enc) = guard.as_mut() {
                enc.copy_buffer_to_buffer(&t.buf, t.offset(), &staging, 0, size);
            }
        }
        let epoch = self.alloc.close_epoch();
        let index = self.flush();
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        PendingRead { staging, index, rx, acct, epoch }
    }

    /// Read an f32 tensor back (exactly `numel` values).
    pub async fn read_f32(&self, t: &Tensor) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_bytes(t).await?;
        let mut v: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        v.truncate(t.numel());
        Ok(v)
    }

    /// Read f32 tensors back, each as [`Gpu::read_f32`] would, with one readback per buffer
    /// they share (a LoRA set's hundreds of slices of a few buffers: a few readbacks, not
    /// one each), or per [`READ_SPAN`] of it, so the host (in a browser: wasm memory, which
    /// never shrinks) holds at most that much more than the values returned.
    pub async fn read_f32_many(&self, ts: &[&Tensor]) -> Result<Vec<Vec<f32>>, GpuError> {
        self.read_f32_many_within(ts, READ_SPAN).await
    }

    /// [`Gpu::read_f32_many`] with readbacks of at most `span` bytes (but whole tensors).
    pub async fn read_f32_many_within(&self, ts: &[&Tensor], span: u64) -> Result<Vec<Vec<f32>>, GpuError> {
        let mut out: Vec<Option<Vec<f32>>> = vec![None; ts.len()];
        // Tensors by buffer, then by offset; runs of them within `span` share a readback.
        let mut order: Vec<usize> = (0..ts.len()).collect();
        order.sort_by_key(|&j| (std::sync::Arc::as_ptr(&ts[j].buf) as usize, ts[j].offset));
        let mut i = 0;
        while i < order.len() {
            let first = ts[order[i]];
            let lo = first.offset;
            let mut end = i + 1;
            while end < order.len() {
                let t = ts[order[end]];
                if !std::sync::Arc::ptr_eq(&t.buf, &first.buf) || t.offset + t.len - lo > span {
                    break;
                }
                end += 1;
            }
            let hi = order[i..end].iter().map(|&j| ts[j].offset + ts[j].len).max().unwrap_or(lo);
            let mut range = first.clone();
            (range.offset, range.len, range.shape) = (lo, hi - lo, vec![((hi - lo) / 4) as usize]);
            let bytes = self.read_bytes(&range).await?;
            for &j in &order[i..end] {
                let t = ts[j];
                let at = (t.offset - lo) as usize;
                let mut v: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes[at..at + t.len as usize]);
                v.truncate(t.numel());
                out[j] = Some(v);
            }
            i = end;
        }
        Ok(out.into_iter().map(Option::unwrap_or_default).collect())
    }

    /// Wait until all work recorded so far has finished (a phase's, benchmarks), and release
    /// what it held ([`super::Allocator::defer_releases`]).
    pub async fn sync(&self) -> Result<(), GpuError> {
        let ahead = self.phases.lock().unwrap_or_else(|e| e.into_inner()).fence.take();
        if let Some(f) = ahead {
            f.bytes(self).await?;
        }
        self.read_bytes(self.dummy()).await.map(|_| ())
    }

    /// Close a phase of a step (a block's forward or backward): submit its work, then wait for
    /// it; or, with phases ahead ([`Gpu::set_phases_ahead`]), wait for the phase before's only,
    /// so the device runs this phase's work while the host records the next. Either way,
    /// what the finished work held is released.
    pub async fn end_phase(&self) -> Result<(), GpuError> {
        if !self.phases_ahead() {
            return self.sync().await;
        }
        let fence = self.read_later(self.dummy());
        let before = self.phases.lock().unwrap_or_else(|e| e.into_inner()).fence.replace(fence);
        match before {
            Some(f) => f.bytes(self).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Whether phases end without waiting for their own work ([`Gpu::end_phase`]).
    pub fn phases_ahead(&self) -> bool {
        self.phases.lock().map(|p| p.ahead).unwrap_or(false)
    }

    /// Let each phase's work run while the host records the next (on), or wait for it at the
    /// phase's end (off). On, the bytes of dropped buffers stay counted until the work that may
    /// use them has run. The default: on for GPUs; off for CPU adapters (lavapipe,
    /// SwiftShader), where the device's threads share the host's cores and a Qwen2.5-0.5B step
    /// with unbounded work in flight took 136 s against 73 s; `WEBTUNE_PHASES=ahead` or `each`
    /// (natively) overrides it. Change it between steps, with the device idle.
    pub fn set_phases_ahead(&self, on: bool) {
        let mut p = self.phases.lock().unwrap_or_else(|e| e.into_inner());
        p.ahead = on;
        self.alloc.defer_releases(on);
    }
}

/// How the phases of a step end ([`Gpu::end_phase`]): whether ahead, and the wait for the
/// last phase's work when so.
#[derive(Default)]
pub(super) struct Phases {
    ahead: bool,
    fence: Option<PendingRead>,
}

/// Whether a device of this kind runs phases ahead unless told ([`Gpu::set_phases_ahead`]).
pub(super) fn phases_ahead_by_default(cpu: bool) -> bool {
    match std::env::var("WEBTUNE_PHASES").as_deref() {
        Ok("ahead") => true,
        Ok("each") => false,
        _ => !cpu,
    }
}

/// A read started by [`Gpu::read_later`].
pub struct PendingRead {
    staging: wgpu::Buffer,
    index: Option<wgpu::SubmissionIndex>,
    rx: futures_channel::oneshot::Receiver<Result<(), wgpu::BufferAsyncError>>,
    acct: Allocation,
    /// The epoch closed when its copy was submitted ([`super::Allocator::release_through`]).
    epoch: u64,
}

impl PendingRead {
    /// The bytes, once the submission that copied them has run.
    pub async fn bytes(self, gpu: &Gpu) -> Result<Vec<u8>, GpuError> {
        platform::poll_wait_for(&gpu.device, self.index.clone());
        let mapped = self
            .rx
            .await
            .map_err(|_| GpuError::Readback("map callback dropped".into()))
            .and_then(|r| r.map_err(|e| GpuError::Readback(e.to_string())));
        // The work submitted with the copy has run (or never will, the device lost).
        gpu.alloc.release_through(self.epoch);
        mapped?;
        let out = {
            let view = self.staging.get_mapped_range(..).map_err(|e| GpuError::Readback(e.to_string()))?;
            view.to_vec()
        };
        self.staging.unmap();
        self.acct.release_now();
        Ok(out)
    }
}
