//! Reading results back: a mapped copy, awaited through the map callback (the event loop
//! drives it in the browser; natively the device is polled), and [`Gpu::sync`].

use super::{Allocation, Category, DType, Gpu, GpuError, Tensor};
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
        let index = self.flush();
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        PendingRead { staging, index, rx, _acct: acct }
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

    /// Wait until all submitted work has finished (benchmarks).
    pub async fn sync(&self) -> Result<(), GpuError> {
        let t = self.zeros(&[1], DType::F32, Category::Staging)?;
        self.read_bytes(&t).await.map(|_| ())
    }
}

/// A read started by [`Gpu::read_later`].
pub struct PendingRead {
    staging: wgpu::Buffer,
    index: Option<wgpu::SubmissionIndex>,
    rx: futures_channel::oneshot::Receiver<Result<(), wgpu::BufferAsyncError>>,
    _acct: Allocation,
}

impl PendingRead {
    /// The bytes, once the submission that copied them has run.
    pub async fn bytes(self, gpu: &Gpu) -> Result<Vec<u8>, GpuError> {
        platform::poll_wait_for(&gpu.device, self.index.clone());
        self.rx
            .await
            .map_err(|_| GpuError::Readback("map callback dropped".into()))?
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        let out = {
            let view = self.staging.get_mapped_range(..).map_err(|e| GpuError::Readback(e.to_string()))?;
            view.to_vec()
        };
        self.staging.unmap();
        Ok(out)
    }
}
