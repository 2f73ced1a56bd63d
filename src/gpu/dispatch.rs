//! Compute work: the pipeline cache (one [`Kernel`] per WGSL variant, keyed by the variant's
//! constants), the pending command encoder, and recording one dispatch (timed while profiling:
//! see [`super::profile`]).

use super::{Category, Gpu, Tensor};
use crate::platform;
use std::sync::Arc;
use wgpu::util::DeviceExt;

/// Slots of the parameter buffer: the most dispatches one submission carries (it is submitted
/// early when they are taken; [`Gpu::count_dispatch`] submits every 64 anyway).
const UNIFORM_SLOTS: u64 = 128;

/// The kernel parameters (each dispatch's uniform struct) of the work not yet submitted: one
/// buffer of [`UNIFORM_SLOTS`] slots, each dispatch binding its own slot, filled by a single
/// `queue.write_buffer` just before the submission (which the queue performs first, and after
/// the previous submission that read the same slots). One buffer made per dispatch instead cost
/// a buffer creation and a mapping each (in a browser, each a message to the GPU process): on
/// lavapipe ~10 µs of the ~700 dispatches a decoded token takes.
#[derive(Default)]
pub(super) struct Uniforms {
    buf: Option<(wgpu::Buffer, super::alloc::Allocation)>,
    /// Bytes between slots (the device's uniform offset alignment, at least 256).
    stride: u64,
    /// The slots filled so far, `stride` bytes each.
    bytes: Vec<u8>,
}

/// A compiled WGSL variant: its pipeline, its bind group layout, and the cache key that names
/// it (in profiles too).
pub struct Kernel {
    pub key: String,
    pub pipeline: wgpu::ComputePipeline,
    layout: wgpu::BindGroupLayout,
}

impl Gpu {
    /// Cached compute pipeline for a WGSL source; `key` must name the variant.
    pub fn pipeline(&self, key: &str, make_source: impl FnOnce() -> String) -> Arc<Kernel> {
        let mut cache = self.pipelines.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = cache.get(key) {
            return p.clone();
        }
        let src = make_source();
        let src = format!("{}{src}", crate::platform::wgsl_enables(&src));
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some(key),
            source: wgpu::ShaderSource::Wgsl(src.into()),
        });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(key),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let layout = pipeline.get_bind_group_layout(0);
        let p = Arc::new(Kernel { key: key.to_string(), pipeline, layout });
        cache.insert(key.to_string(), p.clone());
        p
    }

    /// The pending encoder, for commands outside a compute pass (copies, query resolves): the
    /// open compute pass, if any, is ended first.
    pub(super) fn encoder(&self) -> std::sync::MutexGuard<'_, Option<wgpu::CommandEncoder>> {
        self.end_pass();
        let mut guard = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            *guard = Some(self.device.create_command_encoder(&Default::default()));
        }
        guard
    }

    /// End the open compute pass (the dispatches recorded in it stay in the pending encoder).
    pub(super) fn end_pass(&self) {
        drop(self.pass.lock().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Record into the open compute pass, beginning one in the pending encoder if there is none.
    /// Consecutive dispatches share a pass: WebGPU orders them and makes each one's storage
    /// writes visible to the next, and one pass per dispatch costs more (on lavapipe about
    /// 0.1 ms each: the encoder's finish and the driver's work per pass).
    fn in_pass(&self, f: impl FnOnce(&mut wgpu::ComputePass<'static>)) {
        let mut pass = self.pass.lock().unwrap_or_else(|e| e.into_inner());
        if pass.is_none() {
            let mut guard = self.pending.lock().unwrap_or_else(|e| e.into_inner());
            let enc = guard.get_or_insert_with(|| self.device.create_command_encoder(&Default::default()));
            *pass = Some(enc.begin_compute_pass(&Default::default()).forget_lifetime());
        }
        if let Some(p) = pass.as_mut() {
            f(p);
        }
    }

    /// Record one dispatch. `params` is the kernel's uniform struct (binding 0);
    /// `bindings` follow as bindings 1.. in order. Large workgroup counts are
    /// folded into y so that no dimension exceeds 65535 (kernels compute the
    /// linear workgroup index as `wg.x + wg.y * nwg.x`).
    pub fn dispatch(&self, kernel: &Kernel, params: &[u8], bindings: &[&Tensor], workgroups: (u32, u32, u32)) {
        self.dispatch_flops(kernel, params, bindings, workgroups, 0)
    }

    /// [`Gpu::dispatch`], declaring the floating-point operations it does (for profiles).
    pub fn dispatch_flops(
        &self,
        kernel: &Kernel,
        params: &[u8],
        bindings: &[&Tensor],
        workgroups: (u32, u32, u32),
        flops: u64,
    ) {
        let bind_group = self.bind(kernel, params, bindings);
        let (mut x, mut y, z) = workgroups;
        while x > 65535 {
            x = x.div_ceil(2);
            y *= 2;
        }
        let (stamps, alone) = if self.profiling() {
            if self.profile_full() {
                self.flush();
            }
            self.profile_begin(kernel, flops)
        } else {
            (None, false)
        };
        if alone {
            self.flush(); // what came before is not this kernel's time
        }
        if !self.profiling() {
            self.in_pass(|pass| {
                pass.set_pipeline(&kernel.pipeline);
                pass.set_bind_group(0, &bind_group, &[]);
                pass.dispatch_workgroups(x, y, z);
            });
            self.count_dispatch();
            return;
        }
        // Profiling: a pass of its own, timed by its timestamps or alone.
        let t0 = platform::now_ms();
        {
            let mut guard = self.encoder();
            if let Some(enc) = guard.as_mut() {
                self.with_query_set(|set| {
                    let timestamp_writes = match (set, stamps) {
                        (Some(query_set), Some((b, e))) => Some(wgpu::ComputePassTimestampWrites {
                            query_set,
                            beginning_of_pass_write_index: Some(b),
                            end_of_pass_write_index: Some(e),
                        }),
                        _ => None,
                    };
                    let mut pass =
                        enc.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
                    pass.set_pipeline(&kernel.pipeline);
                    pass.set_bind_group(0, &bind_group, &[]);
                    pass.dispatch_workgroups(x, y, z);
                });
            }
        }
        if alone {
            self.flush();
            platform::poll_wait(&self.device);
            self.profile_timed(kernel, flops, platform::now_ms() - t0);
        }
        self.count_dispatch();
    }

    /// Make the parameter buffer ([`Uniforms`]).
    pub(super) fn make_uniforms(&self) {
        let stride = (self.device.limits().min_uniform_buffer_offset_alignment as u64).max(256);
        let buf = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("kernel parameters"),
            size: stride * UNIFORM_SLOTS,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let acct = self.alloc.track(Category::Scratch, buf.size());
        let mut u = self.uniforms.lock().unwrap_or_else(|e| e.into_inner());
        *u = Uniforms { buf: Some((buf, acct)), stride, bytes: Vec::new() };
    }

    /// The bind group of one dispatch: `params` in a slot of the parameter buffer (binding 0;
    /// a buffer of its own where they do not fit one), `bindings` as 1...
    fn bind(&self, kernel: &Kernel, params: &[u8], bindings: &[&Tensor]) -> wgpu::BindGroup {
        let full = {
            let u = self.uniforms.lock().unwrap_or_else(|e| e.into_inner());
            u.stride > 0 && u.bytes.len() as u64 >= u.stride * UNIFORM_SLOTS
        };
        if full {
            self.flush(); // writes the slots, so they can be filled again
        }
        let mut u = self.uniforms.lock().unwrap_or_else(|e| e.into_inner());
        let size = (params.len() as u64).next_multiple_of(16);
        let own; // a buffer of its own: no parameter buffer, or parameters larger than a slot
        let params_binding = match &u.buf {
            Some((buf, _)) if size <= u.stride => {
                let offset = u.bytes.len() as u64;
                let buf = buf.clone();
                u.bytes.extend_from_slice(params);
                let stride = u.stride as usize;
                u.bytes.resize(offset as usize + stride, 0);
                own = buf;
                wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: &own,
                    offset,
                    size: std::num::NonZeroU64::new(size),
                })
            }
            _ => {
                own = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("params"),
                    contents: params,
                    usage: wgpu::BufferUsages::UNIFORM,
                });
                own.as_entire_binding()
            }
        };
        drop(u);
        let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: params_binding }];
        for (i, t) in bindings.iter().enumerate() {
            let range =
                wgpu::BufferBinding { buffer: &t.buf, offset: t.offset(), size: std::num::NonZeroU64::new(t.bytes()) };
            entries
                .push(wgpu::BindGroupEntry { binding: i as u32 + 1, resource: wgpu::BindingResource::Buffer(range) });
        }
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &kernel.layout,
            entries: &entries,
        })
    }

    /// Write the filled parameter slots (before the submission that reads them).
    pub(super) fn write_uniforms(&self) {
        let mut u = self.uniforms.lock().unwrap_or_else(|e| e.into_inner());
        if let (Some((buf, _)), false) = (&u.buf, u.bytes.is_empty()) {
            self.queue.write_buffer(buf, 0, &u.bytes);
        }
        u.bytes.clear();
    }

    /// Submit after every 64 dispatches, so the device starts on the work while more is
    /// recorded.
    fn count_dispatch(&self) {
        let mut n = self.pending_dispatches.lock().unwrap_or_else(|e| e.into_inner());
        *n += 1;
        if *n >= 64 {
            *n = 0;
            drop(n);
            self.flush();
        }
    }
}
