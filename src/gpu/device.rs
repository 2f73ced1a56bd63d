//! Opening the device: the adapter's own limits requested (not WebGPU's defaults), what was
//! granted recorded in [`DeviceInfo`], the lost-device callback, and the fixed buffers every
//! [`Gpu`] makes at once (the dummy binding, the upload ring).

use super::staging::{Chunk, Ring, CHUNK_MAPPED};
use super::Allocator;
use super::{Category, DType, DeviceInfo, Gpu, GpuError, Tensor, STAGED_UPLOADS, STAGING_CHUNKS, STAGING_CHUNK_BYTES};
use crate::platform;
use std::collections::HashMap;
use std::sync::atomic::AtomicU8;
use std::sync::{Arc, Mutex};

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
            // Timestamp queries time the kernels of a profile; subgroups and f16 arithmetic allow
            // kernel variants that are chosen only where the adapter has them.
            required_features: features
                & (wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::SUBGROUP | wgpu::Features::SHADER_F16),
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
            subgroup_min_size: ai.subgroup_min_size,
            subgroup_max_size: ai.subgroup_max_size,
            // A browser does not say its adapter is a CPU; SwiftShader names itself.
            cpu: ai.device_type == wgpu::DeviceType::Cpu || {
                let name = format!("{} {}", ai.name, ai.driver).to_lowercase();
                ["swiftshader", "llvmpipe", "lavapipe"].iter().any(|s| name.contains(s))
            },
            vendor: ai.vendor,
            device_id: ai.device,
            driver: format!("{} {}", ai.driver, ai.driver_info).trim().to_string(),
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
            pass: Mutex::new(None),
            pending_dispatches: Mutex::new(0),
            staging: Mutex::new(Ring::default()),
            dummy: std::sync::OnceLock::new(),
            lost,
            profiler: Mutex::new(None),
            choices: Mutex::new(HashMap::new()),
            uniforms: Mutex::new(Default::default()),
            f16_products: Default::default(),
            phases: Default::default(),
        };
        gpu.set_phases_ahead(super::readback::phases_ahead_by_default(gpu.info.cpu));
        gpu.dummy(); // made now, so no step's accounting sees it appear
        gpu.make_uniforms(); // the same
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
                // COPY_SRC: [`Gpu::sync`] reads it back to wait for the work before.
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            self.wrap(buf, &[4], DType::F32, Category::Scratch)
        })
    }

    /// Largest buffer we may bind as one storage binding.
    pub fn max_binding(&self) -> u64 {
        self.info.max_storage_buffer_binding_size.min(self.info.max_buffer_size)
    }

    /// The multiple of bytes a storage binding's offset must be ([`Tensor::slice`]).
    pub fn storage_alignment(&self) -> u64 {
        (self.device.limits().min_storage_buffer_offset_alignment as u64).max(4)
    }
}
