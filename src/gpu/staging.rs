//! The upload ring (natively): uploads are written into mapped staging chunks and copied into
//! their destination in the pending encoder, so they land in order with the dispatches; at
//! [`Gpu::flush`] the pending work is submitted and the chunks are mapped again. In the browser
//! `queue.writeBuffer` is used instead (see [`STAGED_UPLOADS`]).

use super::{Allocation, Gpu, Tensor};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// Bytes of one upload staging chunk; larger uploads are split into chunk-sized copies.
pub const STAGING_CHUNK_BYTES: u64 = 4 << 20;
/// Chunks in the upload ring: two, so one can be filled while the GPU copies from the other.
/// They are made with the [`Gpu`] and live as long as it, so `staging` shows them in every peak.
pub const STAGING_CHUNKS: usize = 2;
/// Whether uploads go through the staging ring. Not on wasm32: there a chunk is mapped again
/// only when the browser's event loop runs the `map_async` callback, which a synchronous upload
/// cannot wait for, and a mapped range is a copy in wasm memory besides; `GPUQueue.writeBuffer`
/// copies straight from wasm memory into staging the browser manages.
pub const STAGED_UPLOADS: bool = crate::platform::SYNC_MAP;

/// States of a staging chunk, set by the `map_async` callback (which may run inside
/// `queue.submit` or `device.poll`, so it touches only this atomic).
pub(super) const CHUNK_IN_FLIGHT: u8 = 0;
pub(super) const CHUNK_MAPPED: u8 = 1;
pub(super) const CHUNK_FAILED: u8 = 2;

/// One buffer of the upload ring.
pub(super) struct Chunk {
    pub(super) buf: wgpu::Buffer,
    pub(super) state: Arc<AtomicU8>,
    /// Bytes handed out since the chunk was last mapped; copies from them are recorded in the
    /// pending encoder, so a chunk with `used > 0` must be unmapped before that is submitted.
    pub(super) used: u64,
    /// The submission that last read the chunk (while it is in flight), with its number in
    /// [`Ring::submits`] to find the oldest.
    pub(super) submission: Option<(u64, wgpu::SubmissionIndex)>,
    pub(super) _acct: Allocation,
}

/// The upload ring and a count of submissions (to order the chunks in flight).
#[derive(Default)]
pub(super) struct Ring {
    pub(super) chunks: Vec<Chunk>,
    pub(super) submits: u64,
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

impl Gpu {
    /// [`Gpu::write_bytes`]; `fresh`: no recorded work uses `t` yet (it was just made).
    pub(super) fn write_at(&self, t: &Tensor, bytes: &[u8], fresh: bool) {
        debug_assert!(bytes.len() as u64 <= t.bytes(), "{} bytes into a buffer of {}", bytes.len(), t.bytes());
        let bytes = &bytes[..bytes.len().min(t.bytes() as usize)];
        if bytes.is_empty() {
            return;
        }
        if !STAGED_UPLOADS {
            return self.write_direct(&t.buf, t.offset(), bytes, !fresh);
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
                    enc.copy_buffer_to_buffer(&chunk.buf, at, &t.buf, t.offset() + done as u64, padded as u64);
                }
                Some(piece)
            });
            match written {
                Some(piece) => done += piece,
                None => {
                    // The device is lost or a chunk could not be mapped again: write directly.
                    drop(ring);
                    return self.write_direct(&t.buf, t.offset() + done as u64, &bytes[done..], true);
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

    /// Submit everything recorded so far; the submission's index (None when nothing was pending).
    pub fn flush(&self) -> Option<wgpu::SubmissionIndex> {
        let mut ring = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        self.submit_with(&mut ring)
    }

    /// Submit the pending encoder: first unmap the staging chunks its copies read, then map them
    /// again (asynchronously: they come back once this submission has run).
    fn submit_with(&self, ring: &mut Ring) -> Option<wgpu::SubmissionIndex> {
        self.end_pass();
        let enc = self.pending.lock().unwrap_or_else(|e| e.into_inner()).take();
        let mut enc = enc?;
        self.profile_resolve(&mut enc);
        let filled: Vec<usize> = (0..ring.chunks.len()).filter(|&i| ring.chunks[i].used > 0).collect();
        for &i in &filled {
            ring.chunks[i].buf.unmap();
        }
        self.write_uniforms();
        let epoch = self.alloc.close_epoch();
        let index = self.queue.submit(Some(enc.finish()));
        if self.alloc.deferring() {
            // What was dropped before this submission is released once it has run (natively the
            // callback fires in a poll: the non-blocking one here, or a wait's).
            let alloc = self.alloc.clone();
            self.queue.on_submitted_work_done(move || alloc.release_through(epoch));
            crate::platform::poll_now(&self.device);
        }
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
        Some(index)
    }
}
