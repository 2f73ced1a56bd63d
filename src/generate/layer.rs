//! One decoder block of a cached forward ([`Decoder::block`]): the norms, the projections with
//! their LoRA terms (merged or not), RoPE into the cache, attention over it and the MLP, fusing
//! what the device's kernels take for one row (decoding): the norm with LoRA's h products, the
//! MLP's gate, up and SwiGLU, each residual add into the product that feeds it.

use super::qkv::QkvPack;
use super::{Decoder, Workspace};
use crate::base::error::Result;
use crate::base::names::Proj;
use crate::gpu::{Gpu, Tensor};
use crate::kernels::attention_cached::{attention_cached, HeadShape};
use crate::kernels::attention_decode::{attention_decode, NewQkv};
use crate::kernels::matmul::matmul_nt_many;
use crate::kernels::rmsnorm::{rmsnorm_forward, rmsnorm_lora_h_row};
use crate::kernels::rope::rope_into_cache;
use crate::kernels::swiglu::swiglu_forward;
use crate::model::lora::LoraPair;
use crate::model::lora_linear::{gate_up_swiglu_h, lora_h_alloc, lora_h_jobs, lora_h_many, lora_linear_forward_h};
use crate::model::weights::{LayerWeights, Linear};

impl Decoder<'_> {
    /// The merged weight of projection p of layer l, if the adapter was merged.
    pub(super) fn merged(&self, l: usize, p: Proj) -> Option<&Linear> {
        self.merged.as_ref().and_then(|m| m.layers[l][p as usize].as_ref())
    }

    /// The unmerged LoRA pair of projection p of layer l, if any.
    pub(super) fn pair(&self, l: usize, p: Proj) -> Option<&LoraPair> {
        self.merged(l, p).is_none().then(|| self.lora.and_then(|lo| lo.params.pair(l, p))).flatten()
    }

    /// LoRA's h = x·Aᵀ for each of `projs` (which all read x) of layer l, computed together.
    fn lora_h(&self, gpu: &Gpu, l: usize, projs: &[Proj], x: &Tensor) -> Result<Vec<Option<Tensor>>> {
        lora_h_many(gpu, x, &self.pairs(l, projs))
    }

    /// ws.xn = rmsnorm(x) with weight `norm`, then LoRA's h = xn·Aᵀ for each of `projs` of layer
    /// l (which all read xn): in one dispatch where the kernels take it ([`rmsnorm_lora_h_row`]:
    /// one row, an unmerged adapter on them), else the norm and then [`Self::lora_h`]'s products.
    fn norm_lora_h(
        &self,
        gpu: &Gpu,
        l: usize,
        projs: &[Proj],
        x: &Tensor,
        norm: &Tensor,
        ws: &Workspace,
    ) -> Result<Vec<Option<Tensor>>> {
        self.norm_h(gpu, &self.pairs(l, projs), x, norm, ws)
    }

    /// [`Self::norm_lora_h`] for these LoRA pairs.
    fn norm_h(
        &self,
        gpu: &Gpu,
        pairs: &[Option<&LoraPair>],
        x: &Tensor,
        norm: &Tensor,
        ws: &Workspace,
    ) -> Result<Vec<Option<Tensor>>> {
        let eps = self.model.cfg.rms_norm_eps as f32;
        let hs = lora_h_alloc(gpu, x.rows(), pairs)?;
        let jobs = lora_h_jobs(pairs, &hs);
        if !rmsnorm_lora_h_row(gpu, x, norm, eps, &ws.xn, &jobs) {
            rmsnorm_forward(gpu, x, norm, eps, &ws.xn, &ws.rstd);
            matmul_nt_many(gpu, &ws.xn, &jobs);
        }
        Ok(hs)
    }

    /// The unmerged LoRA pairs of `projs` of layer l.
    fn pairs(&self, l: usize, projs: &[Proj]) -> Vec<Option<&LoraPair>> {
        projs.iter().map(|&p| self.pair(l, p)).collect()
    }

    /// y = linear p of layer l applied to x: merged, or the frozen weight plus LoRA (its h =
    /// x·Aᵀ from [`Self::lora_h`]); with `residual`, y += that instead.
    #[allow(clippy::too_many_arguments)]
    fn proj(
        &self,
        gpu: &Gpu,
        w: &LayerWeights,
        l: usize,
        p: Proj,
        x: &Tensor,
        h: Option<&Tensor>,
        y: &Tensor,
        residual: bool,
    ) -> Result<()> {
        let beta = if residual { 1.0 } else { 0.0 };
        if let Some(m) = self.merged(l, p) {
            lora_linear_forward_h(gpu, x, m, None, 0.0, y, beta);
            return Ok(());
        }
        let scale = self.lora.map_or(0.0, |lo| lo.scale());
        lora_linear_forward_h(gpu, x, w.linear(p), self.pair(l, p).zip(h), scale, y, beta);
        Ok(())
    }

    /// m = silu(gate(x)) · up(x) of layer l in one dispatch where the device's kernels take it
    /// ([`gate_up_swiglu_h`]: one row, unmerged weights); false, having done nothing, otherwise.
    fn gate_up_swiglu(
        &self,
        gpu: &Gpu,
        w: &LayerWeights,
        l: usize,
        x: &Tensor,
        h: &[Option<Tensor>],
        m: &Tensor,
    ) -> bool {
        if self.merged(l, Proj::Gate).is_some() || self.merged(l, Proj::Up).is_some() {
            return false;
        }
        let scale = self.lora.map_or(0.0, |lo| lo.scale());
        let gate = (w.linear(Proj::Gate), self.pair(l, Proj::Gate).zip(h[0].as_ref()));
        let up = (w.linear(Proj::Up), self.pair(l, Proj::Up).zip(h[1].as_ref()));
        gate_up_swiglu_h(gpu, x, gate, up, scale, m)
    }

    /// ws.o = attention of layer l for the new rows' q, k, v (ws.q, ws.k, ws.v, or ws.qkv where
    /// `packed`) at positions p0.. (RoPE on q and k, k and v into the cache), and LoRA's h =
    /// o·Aᵀ of the output projection: for one row in one dispatch where the device takes it
    /// ([`attention_decode`], h folded in where it has the bindings), else RoPE into the cache,
    /// attention over it and the h product.
    fn attention(&self, gpu: &Gpu, ws: &Workspace, l: usize, p0: usize, packed: bool) -> Result<Vec<Option<Tensor>>> {
        let cfg = &self.model.cfg;
        let heads = HeadShape { heads: cfg.heads, kv_heads: cfg.kv_heads, head_dim: cfg.head_dim };
        let (ck, cv) = (&self.cache.k[l], &self.cache.v[l]);
        let pairs = self.pairs(l, &[Proj::O]);
        let hs = lora_h_alloc(gpu, ws.o.rows(), &pairs)?;
        let jobs = lora_h_jobs(&pairs, &hs);
        let new = if packed { NewQkv::Packed(&ws.qkv) } else { NewQkv::Apart(&ws.q, &ws.k, &ws.v) };
        let decode = |lora| attention_decode(gpu, &heads, new, &self.rope, p0, ck, cv, &ws.o, lora);
        if jobs.is_empty() || !decode(jobs.first().copied()) {
            if !decode(None) {
                if packed {
                    // The packed row apart again: q, then k, then v.
                    let mut off = 0;
                    for t in [&ws.q, &ws.k, &ws.v] {
                        gpu.copy_region(&ws.qkv, off, t, 0, 4 * t.numel() as u64);
                        off += 4 * t.numel() as u64;
                    }
                }
                rope_into_cache(gpu, &ws.q, &ws.k, &ws.v, cfg.heads, cfg.kv_heads, &self.rope, p0, ck, cv);
                attention_cached(gpu, &heads, &ws.q, ck, cv, p0, &ws.o);
            }
            matmul_nt_many(gpu, &ws.o, &jobs);
        }
        Ok(hs)
    }

    /// ws.qkv = q, k and v of the decoded row through layer l's [`QkvPack`]: the norm with the
    /// pack's LoRA h (3r) in one dispatch where the kernels take it, then one product.
    fn qkv_packed(&self, gpu: &Gpu, pack: &QkvPack, w: &LayerWeights, ws: &Workspace) -> Result<()> {
        let h = self.norm_h(gpu, &[pack.lora.as_ref()], &ws.x, &w.input_norm, ws)?;
        let scale = self.lora.map_or(0.0, |lo| lo.scale());
        lora_linear_forward_h(gpu, &ws.xn, &pack.linear, pack.lora.as_ref().zip(h[0].as_ref()), scale, &ws.qkv, 0.0);
        Ok(())
    }

    /// Decoder block l over the residual stream ws.x (n, C) at positions p0.., in place; as
    /// [`block_forward`](crate::model::block::block_forward) but with the cache, and with each residual add done by the product
    /// that feeds it (o and down add into x as they store):
    /// x += down(silu(gate(xn2))·up(xn2)) after x += o(attn(rope(q), cache k, v)).
    pub(super) fn block(&mut self, gpu: &Gpu, ws: &Workspace, w: &LayerWeights, l: usize, p0: usize) -> Result<()> {
        let x = &ws.x;
        let pack = self.qkv.get(l).filter(|_| ws.n == 1);
        if let Some(pack) = pack {
            self.qkv_packed(gpu, pack, w, ws)?;
        } else {
            let h = self.norm_lora_h(gpu, l, &[Proj::Q, Proj::K, Proj::V], x, &w.input_norm, ws)?;
            self.proj(gpu, w, l, Proj::Q, &ws.xn, h[0].as_ref(), &ws.q, false)?;
            self.proj(gpu, w, l, Proj::K, &ws.xn, h[1].as_ref(), &ws.k, false)?;
            self.proj(gpu, w, l, Proj::V, &ws.xn, h[2].as_ref(), &ws.v, false)?;
        }
        let h = self.attention(gpu, ws, l, p0, pack.is_some())?;
        self.proj(gpu, w, l, Proj::O, &ws.o, h[0].as_ref(), x, true)?;
        let h = self.norm_lora_h(gpu, l, &[Proj::Gate, Proj::Up], x, &w.post_norm, ws)?;
        if !self.gate_up_swiglu(gpu, w, l, &ws.xn, &h, &ws.m) {
            self.proj(gpu, w, l, Proj::Gate, &ws.xn, h[0].as_ref(), &ws.g, false)?;
            self.proj(gpu, w, l, Proj::Up, &ws.xn, h[1].as_ref(), &ws.u, false)?;
            swiglu_forward(gpu, &ws.g, &ws.u, &ws.m);
        }
        let h = self.lora_h(gpu, l, &[Proj::Down], &ws.m)?;
        self.proj(gpu, w, l, Proj::Down, &ws.m, h[0].as_ref(), x, true)?;
        Ok(())
    }
}
