//! The GPU context: device and granted limits, tensors whose bytes are
//! accounted, uploads, readback, and compute dispatch with a pipeline cache.
//!
//! Dispatches are recorded into one pending command encoder and submitted
//! together at the next readback or explicit [`Gpu::flush`]; on the CPU
//! emulators each submit costs far more than a dispatch.

pub mod alloc;
pub mod platform;

pub use alloc::{Allocation, Allocator, Category, MemoryStats};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

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
    dummy: std::sync::OnceLock<Tensor>,
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
        let gpu = Gpu {
            device,
            queue,
            info,
            alloc: Allocator::default(),
            pipelines: Mutex::new(HashMap::new()),
            pending: Mutex::new(None),
            pending_dispatches: Mutex::new(0),
            dummy: std::sync::OnceLock::new(),
        };
        gpu.dummy(); // made now, so no step's accounting sees it appear
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
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(what),
            size: bytes,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

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
        if !bytes.is_empty() {
            let n = bytes.len() / 4 * 4;
            self.queue.write_buffer(&t.buf, 0, &bytes[..n]);
            if n < bytes.len() {
                let mut tail = [0u8; 4];
                tail[..bytes.len() - n].copy_from_slice(&bytes[n..]);
                self.queue.write_buffer(&t.buf, n as u64, &tail);
            }
        }
        Ok(t)
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

    /// Overwrite a tensor's contents with f32 values.
    pub fn write_f32(&self, t: &Tensor, data: &[f32]) {
        self.flush();
        self.queue.write_buffer(&t.buf, 0, bytemuck::cast_slice(data));
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
        let enc = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(enc) = enc {
            self.queue.submit(Some(enc.finish()));
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
