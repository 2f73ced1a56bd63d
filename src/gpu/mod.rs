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
mod device;
mod dispatch;
pub mod profile;
mod readback;
mod staging;
mod tensor;

pub use crate::base::dtype::DType;
pub use crate::base::error::GpuError;
pub use alloc::{Allocation, Allocator, Category, MemoryStats};
pub use dispatch::Kernel;
pub use readback::PendingRead;
pub use staging::{STAGED_UPLOADS, STAGING_CHUNKS, STAGING_CHUNK_BYTES};
pub use tensor::Tensor;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

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
    /// The smallest and largest subgroup the adapter may run (equal when it is fixed).
    pub subgroup_min_size: u32,
    pub subgroup_max_size: u32,
    /// The adapter is a CPU (lavapipe, SwiftShader, WARP): software rendering.
    pub cpu: bool,
    /// PCI vendor and device ids and the driver's name and version, where the adapter says.
    pub vendor: u32,
    pub device_id: u32,
    pub driver: String,
}

pub struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub info: DeviceInfo,
    pub alloc: Allocator,
    pipelines: Mutex<HashMap<String, Arc<Kernel>>>,
    /// The compute pass open in `pending`, if any (declared first: it is dropped before the encoder). Lock order: `staging`, `pass`, `pending`.
    pass: Mutex<Option<wgpu::ComputePass<'static>>>,
    pending: Mutex<Option<wgpu::CommandEncoder>>,
    pending_dispatches: Mutex<u32>,
    /// The upload ring (empty when not [`STAGED_UPLOADS`]).
    staging: Mutex<staging::Ring>,
    dummy: std::sync::OnceLock<Tensor>,
    /// Why the device was lost, once it is (its lost callback sets it).
    lost: Arc<Mutex<Option<String>>>,
    /// While profiling: what times the dispatches ([`profile`]). Lock order: after `pending`.
    profiler: Mutex<Option<profile::Profiler>>,
    /// Which variant of each kernel family this device runs ([`Gpu::choice`]).
    choices: Mutex<HashMap<String, String>>,
    /// The kernel parameters of the dispatches not yet submitted ([`dispatch::Uniforms`]).
    /// Lock order: after `pending`.
    uniforms: Mutex<dispatch::Uniforms>,
    /// Whether the autotune may choose products in f16 ([`Gpu::set_f16_products`]).
    f16_products: std::sync::atomic::AtomicBool,
    /// How the phases of a step end ([`Gpu::end_phase`]).
    phases: Mutex<readback::Phases>,
}

impl Gpu {
    /// The variant chosen for kernel family `family` on this device (by measurement and a check
    /// against the reference kernel, see `kernels::matmul::choose`), or None: the reference.
    /// `WEBTUNE_KERNELS=reference` (natively) ignores every choice.
    pub fn choice(&self, family: &str) -> Option<String> {
        if std::env::var("WEBTUNE_KERNELS").is_ok_and(|v| v == "reference") {
            return None;
        }
        self.choices.lock().ok().and_then(|c| c.get(family).cloned())
    }

    /// Run `variant` for kernel family `family` from now on (None: the reference).
    pub fn set_choice(&self, family: &str, variant: Option<String>) {
        if let Ok(mut c) = self.choices.lock() {
            match variant {
                Some(v) => c.insert(family.to_string(), v),
                None => c.remove(family),
            };
        }
    }

    /// Let the autotune choose matrix products that multiply in f16 (accumulating in f32),
    /// where the device has shader-f16: faster on many GPUs, but their results agree with the
    /// f32 kernels to f16 rounding (~1e-3), not f32's, so gradients are no longer exact to float
    /// rounding. Off by default. Returns whether it is now on (false without shader-f16).
    pub fn set_f16_products(&self, on: bool) -> bool {
        let on = on && self.info.shader_f16;
        self.f16_products.store(on, std::sync::atomic::Ordering::Relaxed);
        on
    }

    /// Whether [`Gpu::set_f16_products`] turned f16 products on.
    pub fn f16_products(&self) -> bool {
        self.f16_products.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A binding for [`Gpu::dispatch`]: a whole tensor buffer.
pub type Binding<'a> = &'a Tensor;

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
#[path = "tests.rs"]
mod tests;
