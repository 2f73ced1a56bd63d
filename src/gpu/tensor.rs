//! Tensors: GPU buffers with a shape and an accounted allocation, made, uploaded, written,
//! copied and re-accounted. Uploads are ordered with dispatches (see [`super::staging`]).

use super::{Allocation, Category, DType, Gpu, GpuError};
use std::sync::Arc;

/// A GPU buffer with a shape (PyTorch order, row-major) and an accounted allocation.
/// Matrices of a 16-bit dtype are stored with rows padded to even length; quantized ones
/// as laid out in `kernels::quant`.
#[derive(Clone)]
pub struct Tensor {
    pub buf: Arc<wgpu::Buffer>,
    pub shape: Vec<usize>,
    pub dtype: DType,
    /// Where the tensor's bytes start in `buf` and how many there are: all of it, or a
    /// [`Tensor::slice`] of a buffer shared with other tensors (each bound, written, copied
    /// and read back as that range only).
    pub(super) offset: u64,
    pub(super) len: u64,
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
    /// Bytes of the tensor's range of its buffer.
    pub fn bytes(&self) -> u64 {
        self.len
    }
    /// Where the tensor's range starts in its buffer (0 but for a [`Tensor::slice`]).
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// A tensor of `shape` and `dtype` over `bytes` bytes of this one's buffer from byte
    /// `offset` of its range: it shares the buffer (and its accounted allocation) and is
    /// bound, written, copied and read as that range alone. `offset` must be a multiple of
    /// the device's storage offset alignment ([`crate::gpu::Gpu::storage_alignment`]) for
    /// the slice to be bound.
    pub fn slice(&self, offset: u64, bytes: u64, shape: &[usize], dtype: DType) -> Tensor {
        assert!(
            offset % 4 == 0 && bytes > 0 && offset + bytes <= self.len,
            "slice of {bytes} bytes at {offset} of a {}-byte tensor",
            self.len
        );
        Tensor { offset: self.offset + offset, len: bytes, shape: shape.to_vec(), dtype, ..self.clone() }
    }
    pub fn category(&self) -> Category {
        self._acct.category()
    }
}

impl Gpu {
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
    pub(super) fn wrap(&self, buf: wgpu::Buffer, shape: &[usize], dtype: DType, cat: Category) -> Tensor {
        let acct = self.alloc.track(cat, buf.size());
        let len = buf.size();
        Tensor { buf: Arc::new(buf), shape: shape.to_vec(), dtype, offset: 0, len, _acct: Arc::new(acct) }
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
        let Tensor { buf, shape, dtype, offset, len, _acct } = t;
        assert!(offset == 0 && len == buf.size(), "retag of a slice of a buffer: retag the buffer");
        drop(_acct); // release first so the peak never counts the buffer twice
        let acct = self.alloc.track(cat, buf.size());
        Tensor { buf, shape, dtype, offset, len, _acct: Arc::new(acct) }
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

    pub fn upload_f32(&self, data: &[f32], shape: &[usize], cat: Category) -> Result<Tensor, GpuError> {
        debug_assert_eq!(data.len(), shape.iter().product::<usize>());
        self.upload_bytes(bytemuck::cast_slice(data), shape, DType::F32, cat)
    }

    pub fn upload_u32(&self, data: &[u32], shape: &[usize], cat: Category) -> Result<Tensor, GpuError> {
        self.upload_bytes(bytemuck::cast_slice(data), shape, DType::F32, cat)
    }

    /// Upload f32 values as `dtype` lays them out ([`crate::base::dtype::pack_f32`]): packed
    /// 16-bit rows padded to even length, or quantized blockwise along rows (Q8, Q4).
    pub fn upload_f32_as(
        &self,
        data: &[f32],
        shape: &[usize],
        dtype: DType,
        cat: Category,
    ) -> Result<Tensor, GpuError> {
        if dtype == DType::F32 {
            return self.upload_f32(data, shape, cat); // no copy
        }
        self.upload_bytes(&crate::base::dtype::pack_f32(data, shape, dtype), shape, dtype, cat)
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
        self.upload_bytes(&crate::base::dtype::pad_u16_rows(bits, cols), shape, dtype, cat)
    }

    /// Overwrite a tensor's contents with f32 values (ordered like [`Gpu::write_bytes`]).
    pub fn write_f32(&self, t: &Tensor, data: &[f32]) {
        self.write_bytes(t, bytemuck::cast_slice(data));
    }

    /// Record a copy of `bytes` bytes of `src` from byte `src_off` into `dst` at byte `dst_off`
    /// (offsets and length multiples of 4, both ranges inside their buffers).
    pub fn copy_region(&self, src: &Tensor, src_off: u64, dst: &Tensor, dst_off: u64, bytes: u64) {
        assert!(
            (src_off | dst_off | bytes) % 4 == 0 && src_off + bytes <= src.bytes() && dst_off + bytes <= dst.bytes(),
            "copy_region: {bytes} bytes from {src_off} of {src:?} ({} bytes) to {dst_off} of {dst:?} ({} bytes)",
            src.bytes(),
            dst.bytes()
        );
        let mut guard = self.encoder();
        if let Some(enc) = guard.as_mut() {
            enc.copy_buffer_to_buffer(&src.buf, src.offset + src_off, &dst.buf, dst.offset + dst_off, bytes);
        }
    }

    /// Record a copy of `src` into `dst` (whole buffer).
    pub fn copy(&self, src: &Tensor, dst: &Tensor) {
        let n = src.bytes().min(dst.bytes());
        let mut guard = self.encoder();
        if let Some(enc) = guard.as_mut() {
            enc.copy_buffer_to_buffer(&src.buf, src.offset, &dst.buf, dst.offset, n);
        }
    }
}
