//! The GPU context: device and granted limits, tensors whose bytes are
//! accounted, uploads, readback, and compute dispatch with a pipeline cache.
//!
//! Dispatches are recorded into one pending command encoder and submitted
//! together at the next readback or explicit [`Gpu::flush`]; on the CPU
//! emulators each submit costs far more than a dispatch.
//!
//! Uploads (natively) go through a fixed ring of [`STAGING_CHUNKS`] mappable buffers of
//! [`STAGING_CHUNK_BYTES`], accounted as [`Category::Staging`]: the bytes are written into a
//! mapped chunk and a copy into the destination is recorded in the same pending encoder as the
//! dispatches, so an upload lands after the dispatches recorded before it and before those
//! recorded after it. At [`Gpu::flush`] the chunks in use are unmapped, submitted and mapped
//! again asynchronously; when every chunk is in flight an upload waits for the oldest one.
//! `queue.write_buffer` would instead allocate a fresh, unaccounted staging buffer per call.
//! In the browser mapping completes only from the event loop, so nothing may wait for it there:
//! wasm32 keeps `queue.write_buffer` (the browser owns that staging memory; see [`STAGED_UPLOADS`]).

pub mod alloc;
pub mod platform;

pub use alloc::{Allocation, Allocator, Category, MemoryStats};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// Bytes of one upload staging chunk; larger uploads are split into chunk-sized copies.
pub const STAGING_CHUNK_BYTES: u64 = 4 << 20;
/// Chunks in the upload ring: two, so one can be filled while the GPU copies from the other.
/// They are made with the [`Gpu`] and live as long as it, so `staging` shows them in every peak.
pub const STAGING_CHUNKS: usize = 2;
/// Whether uploads go through the staging ring. Not on wasm32: there a chunk is mapped again
/// only when the browser's event loop runs the `map_async` callback, which a synchronous upload
/// cannot wait for, and a mapped range is a copy in wasm memory besides; `GPUQueue.writeBuffer`
/// copies straight from wasm memory into staging the browser manages.
pub const STAGED_UPLOADS: bool = cfg!(not(target_arch = "wasm32"));

/// States of a staging chunk, set by the `map_async` callback (which may run inside
/// `queue.submit` or `device.poll`, so it touches only this atomic).
const CHUNK_IN_FLIGHT: u8 = 0;
const CHUNK_MAPPED: u8 = 1;
const CHUNK_FAILED: u8 = 2;

/// One buffer of the upload ring.
struct Chunk {
    buf: wgpu::Buffer,
    state: Arc<AtomicU8>,
    /// Bytes handed out since the chunk was last mapped; copies from them are recorded in the
    /// pending encoder, so a chunk with `used > 0` must be unmapped before that is submitted.
    used: u64,
    /// The submission that last read the chunk (while it is in flight), with its number in
    /// [`Ring::submits`] to find the oldest.
    submission: Option<(u64, wgpu::SubmissionIndex)>,
    _acct: Allocation,
}

/// The upload ring and a count of submissions (to order the chunks in flight).
#[derive(Default)]
struct Ring {
    chunks: Vec<Chunk>,
    submits: u64,
}

impl Chunk {
    fn mapped(&self) -> bool {
        self.state.load(Ordering::Acquire) == CHUNK_MAPPED
    }
    /// Offset of the next piece (map ranges start on [`wgpu::MAP_ALIGNMENT`]).
    fn next_offset(&self) -> u64 {
        self.used.next_multiple_of(wgpu::MAP_ALIGNMENT)
    }
    fn room(&self) -> u64 {
        STAGING_CHUNK_BYTES.saturating_sub(self.next_offset())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    #[error("no WebGPU/Vulkan adapter is available: {0}")]
    NoAdapter(String),
    #[error("the GPU device could not be created: {0}")]
    Device(String),
    #[error("reading a buffer back from the GPU failed: {0}")]
    Readback(String),
    #[error("a buffer of {bytes} bytes for {what} exceeds the device limit of {limit} bytes")]
    TooLarge { what: String, bytes: u64, limit: u64 },
    #[error(
        "out of the GPU memory budget: {} more for {what} with {} in use would pass the budget of {}; \
         lower the sequence length, the batch or the rank, use --weights q4, or raise the budget",
        crate::store::human_bytes(*bytes), crate::store::human_bytes(*live), crate::store::human_bytes(*budget)
    )]
    OverBudget { what: String, bytes: u64, live: u64, budget: u64 },
}

/// Element type of a tensor as it lies in its GPU buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    /// bfloat16, two per u32 (element 2i in the low half), rows padded to an even length.
    BF16,
    /// IEEE half, two per u32 like BF16; unpacked with `unpack2x16float`.
    F16,
    /// Blockwise 8-bit, groups of 32 along a row, w = scale·q + offset (q in 0..=255); codes
    /// then per-group (scale, offset) f16 pairs in one buffer (layout: `kernels::quant`).
    Q8,
    /// Blockwise 4-bit, groups of 64 along a row, w = scale·q + offset (q in 0..=15); layout as Q8.
    Q4,
}

impl DType {
    /// Short name, used in pipeline cache keys.
    pub fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
            DType::Q8 => "q8",
            DType::Q4 => "q4",
        }
    }
    /// Elements per quantization group (a row is padded to whole groups); None when not quantized.
    pub fn group_size(self) -> Option<usize> {
        match self {
            DType::Q8 => Some(32),
            DType::Q4 => Some(64),
            DType::F32 | DType::BF16 | DType::F16 => None,
        }
    }
    /// Stored row length in elements: 16-bit rows are padded to an even count
    /// so every row starts on a u32; quantized rows to whole groups.
    pub fn padded_row(self, cols: usize) -> usize {
        match self {
            DType::F32 => cols,
            DType::BF16 | DType::F16 => cols + (cols & 1),
            DType::Q8 | DType::Q4 => cols.div_ceil(self.group_size().unwrap_or(1)) * self.group_size().unwrap_or(1),
        }
    }
    /// Storage bytes per element, rounded up to whole bytes (Q8 and Q4 say 1: size
    /// buffers with [`DType::row_bytes`], which also counts the group parameters).
    pub fn bytes_per_element(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 | DType::F16 => 2,
            DType::Q8 | DType::Q4 => 1,
        }
    }
    /// u32 words of one row's element data (the codes, for quantized types): the row stride.
    pub fn row_words(self, cols: usize) -> usize {
        match self {
            DType::F32 => cols,
            DType::BF16 | DType::F16 => cols.div_ceil(2),
            // 32 one-byte or 64 four-bit codes: 8 words per group either way.
            DType::Q8 | DType::Q4 => self.padded_row(cols) / self.group_size().unwrap_or(1) * 8,
        }
    }
    /// Bytes one row occupies: its element words, plus one (scale, offset) word per group.
    pub fn row_bytes(self, cols: usize) -> usize {
        let params = match self.group_size() {
            Some(g) => cols.div_ceil(g),
            None => 0,
        };
        4 * (self.row_words(cols) + params)
    }
}

/// A GPU buffer with a shape (PyTorch order, row-major) and an accounted allocation.
/// Matrices of a 16-bit dtype are stored with rows padded to even length; quantized ones
/// as laid out in `kernels::quant`.
#[derive(Clone)]
pub struct Tensor {
    pub buf: Arc<wgpu::Buffer>,
    pub shape: Vec<usize>,
    pub dtype: DType,
    _acct: Arc<Allocation>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({:?}, {:?})", self.shape, self.dtype)
    }
}

impl Tensor {
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    pub fn rows(&self) -> usize {
        if self.shape.len() < 2 {
            1
        } else {
            self.shape[..self.shape.len() - 1].iter().product()
        }
    }
    pub fn cols(&self) -> usize {
        *self.shape.last().unwrap_or(&1)
    }
    pub fn bytes(&self) -> u64 {
        self.buf.size()
    }
    pub fn category(&self) -> Category {
        self._acct.category()
    }
}

/// What the adapter is and what it granted us.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    pub adapter: String,
    pub backend: String,
    pub max_buffer_size: u64,
    pub max_storage_buffer_binding_size: u64,
    pub max_storage_buffers_per_shader_stage: u32,
    pub max_compute_workgroup_storage_size: u32,
    pub max_compute_invocations_per_workgroup: u32,
    pub shader_f16: bool,
    pub subgroups: bool,
}

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: DeviceInfo,
    pub alloc: Allocator,
    pipelines: Mutex<HashMap<String, Arc<wgpu::ComputePipeline>>>,
    pending: Mutex<Option<wgpu::CommandEncoder>>,
    pending_dispatches: Mutex<u32>,
    /// The upload ring (empty when not [`STAGED_UPLOADS`]). Lock order: `staging`, then `pending`.
    staging: Mutex<Ring>,
    dummy: std::sync::OnceLock<Tensor>,
    /// Why the device was lost, once it is (its lost callback sets it).
    lost: Arc<Mutex<Option<String>>>,
}

/// A binding for [`Gpu::dispatch`]: a whole tensor buffer.
pub type Binding<'a> = &'a Tensor;

impl Gpu {
    /// Ask for the adapter's own limits (not WebGPU's defaults) and plan from what is granted.
    pub async fn new() -> Result<Gpu, GpuError> {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = platform::backends();
        let instance = wgpu::Instance::new(desc);
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: wgpu::PowerPreference::HighPerformance,
                force_fallback_adapter: false,
                compatible_surface: None,
                // Ask for the adapter's real limits, not a bucketed fingerprinting-safe subset.
                apply_limit_buckets: false,
            })
            .await
            .map_err(|e| GpuError::NoAdapter(e.to_string()))?;
        let limits = adapter.limits();
        let ai = adapter.get_info();
        let features = adapter.features();
        let device_desc = wgpu::DeviceDescriptor {
            label: Some("webtune"),
            required_features: wgpu::Features::empty(),
            required_limits: limits.clone(),
            ..Default::default()
        };
        let (device, queue) =
            adapter.request_device(&device_desc).await.map_err(|e| GpuError::Device(e.to_string()))?;
        let granted = device.limits();
        let info = DeviceInfo {
            adapter: ai.name.clone(),
            backend: format!("{:?}", ai.backend),
            max_buffer_size: granted.max_buffer_size,
            max_storage_buffer_binding_size: granted.max_storage_buffer_binding_size,
            max_storage_buffers_per_shader_stage: granted.max_storage_buffers_per_shader_stage,
            max_compute_workgroup_storage_size: granted.max_compute_workgroup_storage_size,
            max_compute_invocations_per_workgroup: granted.max_compute_invocations_per_workgroup,
            shader_f16: features.contains(wgpu::Features::SHADER_F16),
            subgroups: features.contains(wgpu::Features::SUBGROUP),
        };
        let lost: Arc<Mutex<Option<String>>> = Arc::default();
        let on_lost = lost.clone();
        device.set_device_lost_callback(move |reason, message| {
            let why = match (reason, message.trim()) {
                (wgpu::DeviceLostReason::Destroyed, "") => "destroyed".to_string(),
                (_, "") => format!("{reason:?}"),
                (_, m) => m.to_string(),
            };
            if let Ok(mut l) = on_lost.lock() {
                l.get_or_insert(why);
            }
        });
        let gpu = Gpu {
            device,
            queue,
            info,
            alloc: Allocator::default(),
            pipelines: Mutex::new(HashMap::new()),
            pending: Mutex::new(None),
            pending_dispatches: Mutex::new(0),
            staging: Mutex::new(Ring::default()),
            dummy: std::sync::OnceLock::new(),
            lost,
        };
        gpu.dummy(); // made now, so no step's accounting sees it appear
        if STAGED_UPLOADS {
            // Made now for the same reason: staging is a fixed cost from the start.
            let chunks = (0..STAGING_CHUNKS)
                .map(|_| Chunk {
                    buf: gpu.device.create_buffer(&wgpu::BufferDescriptor {
                        label: Some("upload staging"),
                        size: STAGING_CHUNK_BYTES,
                        usage: wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_SRC,
                        mapped_at_creation: true,
                    }),
                    state: Arc::new(AtomicU8::new(CHUNK_MAPPED)),
                    used: 0,
                    submission: None,
                    _acct: gpu.alloc.track(Category::Staging, STAGING_CHUNK_BYTES),
                })
                .collect();
            gpu.staging.lock().unwrap_or_else(|e| e.into_inner()).chunks = chunks;
        }
        Ok(gpu)
    }

    /// A 16-byte zero tensor to bind where a kernel's optional input is absent.
    pub fn dummy(&self) -> &Tensor {
        self.dummy.get_or_init(|| {
            let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("dummy"),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            });
            self.wrap(buf, &[4], DType::F32, Category::Scratch)
        })
    }

    /// Largest buffer we may bind as one storage binding.
    pub fn max_binding(&self) -> u64 {
        self.info.max_storage_buffer_binding_size.min(self.info.max_buffer_size)
    }

    fn raw_buffer(&self, bytes: u64, what: &str) -> Result<wgpu::Buffer, GpuError> {
        let bytes = bytes.max(4).next_multiple_of(4);
        if bytes > self.max_binding() {
            return Err(GpuError::TooLarge { what: what.into(), bytes, limit: self.max_binding() });
        }
        if let Err((live, budget)) = self.alloc.check_budget(bytes) {
            return Err(GpuError::OverBudget { what: what.into(), bytes, live, budget });
        }
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    // On wasm32 wgpu's handles are not Send; the Arc is for native callers that share
    // tensors across threads, and costs nothing where there is one thread.
    #[cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]
    fn wrap(&self, buf: wgpu::Buffer, shape: &[usize], dtype: DType, cat: Category) -> Tensor {
        let acct = self.alloc.track(cat, buf.size());
        Tensor { buf: Arc::new(buf), shape: shape.to_vec(), dtype, _acct: Arc::new(acct) }
    }

    /// Bytes a tensor of this shape and dtype occupies (16-bit rows padded to even length,
    /// quantized rows to whole groups, plus their group parameters).
    pub fn tensor_bytes(shape: &[usize], dtype: DType) -> u64 {
        let cols = *shape.last().unwrap_or(&1);
        let rows: usize = if shape.len() < 2 { 1 } else { shape[..shape.len() - 1].iter().product() };
        (rows * dtype.row_bytes(cols)) as u64
    }

    /// The same buffer, accounted under another category from now on.
    pub fn retag(&self, t: Tensor, cat: Category) -> Tensor {
        let Tensor { buf, shape, dtype, _acct } = t;
        drop(_acct); // release first so the peak never counts the buffer twice
        let acct = self.alloc.track(cat, buf.size());
        Tensor { buf, shape, dtype, _acct: Arc::new(acct) }
    }

    /// A tensor of zeros (f32 or packed).
    pub fn zeros(&self, shape: &[usize], dtype: DType, cat: Category) -> Result<Tensor, GpuError> {
        let buf = self.raw_buffer(Self::tensor_bytes(shape, dtype), cat.name())?;
        // New buffers are zero-initialised by wgpu and WebGPU.
        Ok(self.wrap(buf, shape, dtype, cat))
    }

    /// Upload raw bytes already laid out as the dtype expects.
    pub fn upload_bytes(&self, bytes: &[u8], shape: &[usize], dtype: DType, cat: Category) -> Result<Tensor, GpuError> {
        let t = self.zeros(shape, dtype, cat)?;
        self.write_at(&t, bytes, true);
        Ok(t)
    }

    /// Overwrite the start of a tensor's buffer with `bytes` (a ragged end is zero-padded to
    /// whole words; bytes past the buffer are ignored). Ordered like a dispatch: it lands after
    /// the work recorded before it and before the work recorded after it.
    pub fn write_bytes(&self, t: &Tensor, bytes: &[u8]) {
        self.write_at(t, bytes, false)
    }

    /// [`Gpu::write_bytes`]; `fresh`: no recorded work uses `t` yet (it was just made).
    fn write_at(&self, t: &Tensor, bytes: &[u8], fresh: bool) {
        debug_assert!(bytes.len() as u64 <= t.bytes(), "{} bytes into a buffer of {}", bytes.len(), t.bytes());
        let bytes = &bytes[..bytes.len().min(t.bytes() as usize)];
        if bytes.is_empty() {
            return;
        }
        if !STAGED_UPLOADS {
            return self.write_direct(&t.buf, 0, bytes, !fresh);
        }
        let mut ring = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let mut done = 0;
        while done < bytes.len() {
            let written = self.staging_chunk(&mut ring).and_then(|i| {
                let chunk = &mut ring.chunks[i];
                let at = chunk.next_offset();
                let piece = (bytes.len() - done).min(chunk.room() as usize);
                let padded = piece.next_multiple_of(4);
                let mut view = chunk.buf.get_mapped_range_mut(at..at + padded as u64).ok()?;
                view.slice(..piece).copy_from_slice(&bytes[done..done + piece]);
                if padded > piece {
                    view.slice(piece..).copy_from_slice(&[0u8; 3][..padded - piece]);
                }
                drop(view);
                chunk.used = at + padded as u64;
                let mut guard = self.encoder();
                if let Some(enc) = guard.as_mut() {
                    enc.copy_buffer_to_buffer(&chunk.buf, at, &t.buf, done as u64, padded as u64);
                }
                Some(piece)
            });
            match written {
                Some(piece) => done += piece,
                None => {
                    // The device is lost or a chunk could not be mapped again: write directly.
                    drop(ring);
                    return self.write_direct(&t.buf, done as u64, &bytes[done..], true);
                }
            }
        }
    }

    /// `queue.write_buffer`. The queue performs it before the next submission, so with `flush`
    /// the pending work is submitted first and the write cannot overtake dispatches recorded
    /// earlier (not needed for a buffer no recorded work uses).
    fn write_direct(&self, buf: &wgpu::Buffer, offset: u64, bytes: &[u8], flush: bool) {
        if flush {
            self.flush();
        }
        let n = bytes.len() / 4 * 4;
        if n > 0 {
            self.queue.write_buffer(buf, offset, &bytes[..n]);
        }
        if n < bytes.len() {
            let mut tail = [0u8; 4];
            tail[..bytes.len() - n].copy_from_slice(&bytes[n..]);
            self.queue.write_buffer(buf, offset + n as u64, &tail);
        }
    }

    /// A mapped chunk with room for at least a word: the one being filled, else a free one, else
    /// (after submitting the pending work, which puts the filled chunks in flight) the first to
    /// come back, waiting for the oldest submission if need be. None when none can come back.
    fn staging_chunk(&self, ring: &mut Ring) -> Option<usize> {
        let usable = |c: &Chunk| c.mapped() && c.room() >= 4;
        let mut waited = false;
        loop {
            if let Some(i) = ring.chunks.iter().position(|c| c.used > 0 && usable(c)) {
                return Some(i);
            }
            if let Some(i) = ring.chunks.iter().position(|c| c.used == 0 && usable(c)) {
                return Some(i);
            }
            if ring.chunks.iter().any(|c| c.used > 0) {
                self.submit_with(ring);
                // Chunks whose copies have already run come back without a wait.
                let _ = self.device.poll(wgpu::PollType::Poll);
                continue;
            }
            if waited {
                return None; // a wait brought nothing back: the device is gone
            }
            // Every chunk is in flight (or failed): wait for the oldest one's submission.
            let (_, oldest) = ring
                .chunks
                .iter()
                .filter(|c| c.state.load(Ordering::Acquire) == CHUNK_IN_FLIGHT)
                .filter_map(|c| c.submission.clone())
                .min_by_key(|(n, _)| *n)?;
            self.device.poll(wgpu::PollType::Wait { submission_index: Some(oldest), timeout: None }).ok()?;
            waited = true;
        }
    }

    pub fn upload_f32(&self, data: &[f32], shape: &[usize], cat: Category) -> Result<Tensor, GpuError> {
        debug_assert_eq!(data.len(), shape.iter().product::<usize>());
        self.upload_bytes(bytemuck::cast_slice(data), shape, DType::F32, cat)
    }

    pub fn upload_u32(&self, data: &[u32], shape: &[usize], cat: Category) -> Result<Tensor, GpuError> {
        self.upload_bytes(bytemuck::cast_slice(data), shape, DType::F32, cat)
    }

    /// Upload f32 values as a packed 16-bit matrix (rows padded to even length), or quantized
    /// blockwise along rows (Q8, Q4; see `kernels::quant`).
    pub fn upload_f32_as(
        &self,
        data: &[f32],
        shape: &[usize],
        dtype: DType,
        cat: Category,
    ) -> Result<Tensor, GpuError> {
        match dtype {
            DType::F32 => self.upload_f32(data, shape, cat),
            DType::Q8 | DType::Q4 => crate::kernels::quant::upload_quantized(self, data, shape, dtype, cat),
            DType::BF16 | DType::F16 => {
                let bits: Vec<u16> = data
                    .iter()
                    .map(|&v| match dtype {
                        DType::BF16 => half::bf16::from_f32(v).to_bits(),
                        _ => half::f16::from_f32(v).to_bits(),
                    })
                    .collect();
                self.upload_u16_rows(&bits, shape, dtype, cat)
            }
        }
    }

    /// Upload 16-bit words (bf16 or f16 bit patterns), padding each row to even length.
    pub fn upload_u16_rows(
        &self,
        bits: &[u16],
        shape: &[usize],
        dtype: DType,
        cat: Category,
    ) -> Result<Tensor, GpuError> {
        let cols = *shape.last().unwrap_or(&1);
        if cols % 2 == 0 {
            return self.upload_bytes(bytemuck::cast_slice(bits), shape, dtype, cat);
        }
        let mut padded = Vec::with_capacity(bits.len() + bits.len() / cols.max(1));
        for row in bits.chunks(cols.max(1)) {
            padded.extend_from_slice(row);
            padded.push(0);
        }
        self.upload_bytes(bytemuck::cast_slice(&padded), shape, dtype, cat)
    }

    /// Overwrite a tensor's contents with f32 values (ordered like [`Gpu::write_bytes`]).
    pub fn write_f32(&self, t: &Tensor, data: &[f32]) {
        self.write_bytes(t, bytemuck::cast_slice(data));
    }

    /// Record a copy of `src` into `dst` (whole buffer).
    pub fn copy(&self, src: &Tensor, dst: &Tensor) {
        let n = src.bytes().min(dst.bytes());
        let mut guard = self.encoder();
        if let Some(enc) = guard.as_mut() {
            enc.copy_buffer_to_buffer(&src.buf, 0, &dst.buf, 0, n);
        }
    }

    /// Cached compute pipeline for a WGSL source; `key` must name the variant.
    pub fn pipeline(&self, key: &str, make_source: impl FnOnce() -> String) -> Arc<wgpu::ComputePipeline> {
        let mut cache = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(key) {
            return p.clone();
        }
        let src = make_source();
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(key),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let p = Arc::new(self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        }));
        cache.insert(key.to_string(), p.clone());
        p
    }

    fn encoder(&self) -> std::sync::MutexGuard<'_, Option<wgpu::CommandEncoder>> {
        let mut guard = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.device.create_command_encoder(&Default::default()));
        }
        guard
    }

    /// Record one dispatch. `params` is the kernel's uniform struct (binding 0);
    /// `bindings` follow as bindings 1.. in order. Large workgroup counts are
    /// folded into y so that no dimension exceeds 65535 (kernels compute the
    /// linear workgroup index as `wg.x + wg.y * nwg.x`).
    pub fn dispatch(
        &self,
        pipeline: &wgpu::ComputePipeline,
        params: &[u8],
        bindings: &[&Tensor],
        workgroups: (u32, u32, u32),
    ) {
        let uniform = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("params"),
            contents: params,
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let layout = pipeline.get_bind_group_layout(0);
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: uniform.as_entire_binding() }];
        for (i, t) in bindings.iter().enumerate() {
            entries.push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: t.buf.as_entire_binding() });
        }
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        let (mut x, mut y, z) = workgroups;
        while x > 65535 {
            x = x.div_ceil(2);
            y *= 2;
        }
        {
            let mut guard = self.encoder();
            if let Some(enc) = guard.as_mut() {
                let mut pass = enc.begin_compute_pass(&Default::default());
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
        }
        let mut n = self.pending_dispatches.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        if *n >= 64 {
            *n = 0;
            drop(n);
            self.flush();
        }
    }

    /// Submit everything recorded so far.
    pub fn flush(&self) {
        let mut ring = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        self.submit_with(&mut ring);
    }

    /// Submit the pending encoder: first unmap the staging chunks its copies read, then map them
    /// again (asynchronously: they come back once this submission has run).
    fn submit_with(&self, ring: &mut Ring) {
        let enc = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take();
        let Some(enc) = enc else { return };
        let filled: Vec<usize> = (0..ring.chunks.len()).filter(|&i| ring.chunks[i].used > 0).collect();
        for &i in &filled {
            ring.chunks[i].buf.unmap();
        }
        let index = self.queue.submit(Some(enc.finish()));
        ring.submits += 1;
        for &i in &filled {
            let chunk = &mut ring.chunks[i];
            chunk.used = 0;
            chunk.submission = Some((ring.submits, index.clone()));
            chunk.state.store(CHUNK_IN_FLIGHT, Ordering::Release);
            let state = chunk.state.clone();
            chunk.buf.map_async(wgpu::MapMode::Write, .., move |r| {
                state.store(if r.is_ok() { CHUNK_MAPPED } else { CHUNK_FAILED }, Ordering::Release);
            });
        }
    }

    /// Read a tensor's raw bytes back (flushes pending work first).
    pub async fn read_bytes(&self, t: &Tensor) -> Result<Vec<u8>, GpuError> {
        let size = t.bytes();
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let _acct = self.alloc.track(Category::Staging, size);
        {
            let mut guard = self.encoder();
            if let Some(enc) = guard.as_mut() {
                enc.copy_buffer_to_buffer(&t.buf, 0, &staging, 0, size);
            }
        }
        self.flush();
        let (tx, rx) = futures_channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        platform::poll_wait(&self.device);
        rx.await
            .map_err(|_| GpuError::Readback("map callback dropped".into()))?
            .map_err(|e| GpuError::Readback(e.to_string()))?;
        let out = {
            let view = staging.get_mapped_range(..).map_err(|e| GpuError::Readback(e.to_string()))?;
            view.to_vec()
        };
        staging.unmap();
        Ok(out)
    }

    /// Read an f32 tensor back (exactly `numel` values).
    pub async fn read_f32(&self, t: &Tensor) -> Result<Vec<f32>, GpuError> {
        let bytes = self.read_bytes(t).await?;
        let mut v: Vec<f32> = bytemuck::pod_collect_to_vec(&bytes);
        v.truncate(t.numel());
        Ok(v)
    }

    /// Wait until all submitted work has finished (benchmarks).
    pub async fn sync(&self) -> Result<(), GpuError> {
        let t = self.zeros(&[1], DType::F32, Category::Staging)?;
        self.read_bytes(&t).await.map(|_| ())
    }
}

/// Split `n` workgroups into a grid for [`Gpu::dispatch`].
pub fn groups(n: u32) -> (u32, u32, u32) {
    (n.max(1), 1, 1)
}

impl Gpu {
    /// Why the device was lost (a driver reset, the browser reclaiming the GPU, a test's
    /// `device.destroy()`), or None while it works. Everything on a lost device is gone: a new
    /// [`Gpu`] is needed.
    pub fn lost(&self) -> Option<String> {
        self.lost.lock().ok().and_then(|l| l.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu_test;

    /// y = 2·x + 1 over `n` f32, one element per invocation (an arbitrary reader of `x`).
    fn double_plus_one(gpu: &Gpu, x: &Tensor, y: &Tensor) {
        let p = gpu.pipeline("test_double_plus_one", || {
            "struct P { n: u32 }
             @group(0) @binding(0) var<uniform> p: P;
             @group(0) @binding(1) var<storage, read> x: array<f32>;
             @group(0) @binding(2) var<storage, read_write> y: array<f32>;
             @compute @workgroup_size(64)
             fn main(@builtin(global_invocation_id) g: vec3<u32>) {
                 if (g.x < p.n) { y[g.x] = 2.0 * x[g.x] + 1.0; }
             }"
            .to_string()
        });
        let n = x.numel() as u32;
        gpu.dispatch(&p, bytemuck::bytes_of(&[n, 0, 0, 0]), &[x, y], groups(n.div_ceil(64)));
    }

    gpu_test!(async fn gpu_upload_split_over_chunks(gpu) {
        // 2.5 chunks of f32 plus a ragged 16-bit tail: several chunk-sized copies and a padded end.
        let n = (STAGING_CHUNK_BYTES as usize * 5 / 2) / 4 + 3;
        let data: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 7.0).collect();
        let staging_before = gpu.alloc.stats().live(Category::Staging);
        let t = gpu.upload_f32(&data, &[n], Category::Activations).expect("upload");
        assert_eq!(gpu.read_f32(&t).await.expect("read"), data);
        let bits: Vec<u16> = (0..37 * 29).map(|i| i as u16 ^ 0x5a5a).collect();
        let h = gpu.upload_u16_rows(&bits, &[37, 29], DType::BF16, Category::Activations).expect("upload");
        let back: Vec<u16> = bytemuck::pod_collect_to_vec(&gpu.read_bytes(&h).await.expect("read"));
        for r in 0..37 {
            assert_eq!(&back[r * 30..r * 30 + 29], &bits[r * 29..(r + 1) * 29], "row {r}");
            assert_eq!(back[r * 30 + 29], 0, "row {r} padding");
        }
        let one = gpu.upload_bytes(&[1, 2, 3], &[1], DType::F32, Category::Scratch).expect("upload");
        assert_eq!(&gpu.read_bytes(&one).await.expect("read")[..4], &[1, 2, 3, 0]);
        if STAGED_UPLOADS {
            // The ring is the staging: fixed and accounted from the start.
            assert_eq!(staging_before, STAGING_CHUNKS as u64 * STAGING_CHUNK_BYTES);
            assert_eq!(gpu.alloc.stats().live(Category::Staging), staging_before);
        }
    });

    gpu_test!(async fn gpu_writes_ordered_with_dispatches(gpu) {
        // Each write lands after the dispatches recorded before it and before those after it,
        // also when the writes are larger than the ring and force submissions in between.
        let n = (STAGING_CHUNK_BYTES as usize * 3) / 4 + 5;
        let x = gpu.zeros(&[n], DType::F32, Category::Activations).expect("x");
        let outs: Vec<Tensor> =
            (0..4).map(|_| gpu.zeros(&[n], DType::F32, Category::Activations).expect("y")).collect();
        for (k, y) in outs.iter().enumerate() {
            gpu.write_f32(&x, &vec![k as f32 + 0.25; n]);
            double_plus_one(gpu, &x, y);
        }
        // A small write between two readers of the same buffer.
        let s = gpu.upload_f32(&[1.0; 5], &[5], Category::Scratch).expect("s");
        let s1 = gpu.zeros(&[5], DType::F32, Category::Scratch).expect("s1");
        let s2 = gpu.zeros(&[5], DType::F32, Category::Scratch).expect("s2");
        double_plus_one(gpu, &s, &s1);
        gpu.write_f32(&s, &[3.0; 5]);
        double_plus_one(gpu, &s, &s2);
        for (k, y) in outs.iter().enumerate() {
            let v = gpu.read_f32(y).await.expect("read");
            let want = 2.0 * (k as f32 + 0.25) + 1.0;
            assert!(v.iter().all(|&e| e == want), "reader {k}: {:?} != {want}", &v[..4]);
        }
        assert_eq!(gpu.read_f32(&s1).await.expect("read"), vec![3.0; 5]);
        assert_eq!(gpu.read_f32(&s2).await.expect("read"), vec![7.0; 5]);
    });
}
