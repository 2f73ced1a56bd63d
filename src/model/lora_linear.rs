//! The LoRA linear layer, y = x·Wᵀ + b + s·(x·Aᵀ)·Bᵀ, forward and backward, with LoRA's thin
//! h = x·Aᵀ made where it is needed and never kept (MeSP) unless asked; and [`SharedH`], which
//! computes the h of the projections that read one input (q, k, v; gate, up) in one dispatch.

use crate::base::error::Result;
use crate::base::names::Proj;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::matmul::{
    gate_up_swiglu_row, matmul_nn, matmul_nn_lora, matmul_nt, matmul_nt_many, matmul_nt_with, matmul_tn_pair, Fused,
    Variant,
};
use crate::model::lora::LoraPair;
use crate::model::weights::Linear;
use std::cell::RefCell;

pub(crate) fn act(gpu: &Gpu, shape: &[usize]) -> Result<Tensor> {
    Ok(gpu.zeros(shape, DType::F32, Category::Activations)?)
}

/// y = x·Wᵀ + b + s·h·Bᵀ + β·y with LoRA's h = x·Aᵀ already computed (decoding computes the h
/// of the projections that read one input together, [`lora_h_many`]), or y = x·Wᵀ + b + β·y.
pub fn lora_linear_forward_h(
    gpu: &Gpu,
    x: &Tensor,
    lin: &Linear,
    lora: Option<(&LoraPair, &Tensor)>,
    s: f32,
    y: &Tensor,
    beta: f32,
) {
    let f = lora.map(|(l, h)| Fused { left: h, right: &l.b, scale: s });
    matmul_nt_with(gpu, Variant::of(gpu), x, &lin.w, lin.b.as_ref(), y, 1.0, beta, f);
}

/// m = silu(gate(x)) · up(x) for one row x in one dispatch ([`gate_up_swiglu_row`]: decoding's
/// MLP, each linear with its LoRA term from h already computed, s its scale); false, having
/// done nothing, where the device's kernels do not take it (the caller runs the two
/// products and SwiGLU).
pub fn gate_up_swiglu_h(
    gpu: &Gpu,
    x: &Tensor,
    gate: (&Linear, Option<(&LoraPair, &Tensor)>),
    up: (&Linear, Option<(&LoraPair, &Tensor)>),
    s: f32,
    m: &Tensor,
) -> bool {
    if gate.0.b.is_some() || up.0.b.is_some() {
        return false;
    }
    let fg = gate.1.map(|(l, h)| Fused { left: h, right: &l.b, scale: s });
    let fu = up.1.map(|(l, h)| Fused { left: h, right: &l.b, scale: s });
    gate_up_swiglu_row(gpu, x, (&gate.0.w, fg), (&up.0.w, fu), m)
}

/// h = x·Aᵀ (N, r) for each LoRA pair of the projections that read x, in as few dispatches as
/// the device allows ([`matmul_nt_many`]); None where a projection has none.
pub fn lora_h_many(gpu: &Gpu, x: &Tensor, pairs: &[Option<&LoraPair>]) -> Result<Vec<Option<Tensor>>> {
    let hs = lora_h_alloc(gpu, x.rows(), pairs)?;
    matmul_nt_many(gpu, x, &lora_h_jobs(pairs, &hs));
    Ok(hs)
}

/// The h (n, r) of each LoRA pair of `pairs`, not yet computed; None where a projection has none.
pub fn lora_h_alloc(gpu: &Gpu, n: usize, pairs: &[Option<&LoraPair>]) -> Result<Vec<Option<Tensor>>> {
    pairs.iter().map(|p| p.map(|l| act(gpu, &[n, l.a.rows()])).transpose()).collect()
}

/// The products (A, h) that compute `hs` ([`lora_h_alloc`] of `pairs`).
pub fn lora_h_jobs<'a>(pairs: &[Option<&'a LoraPair>], hs: &'a [Option<Tensor>]) -> Vec<(&'a Tensor, &'a Tensor)> {
    pairs.iter().zip(hs).filter_map(|(p, h)| Some((&p.as_ref()?.a, h.as_ref()?))).collect()
}

/// h = x·Aᵀ (N, r) of one LoRA pair.
fn lora_h(gpu: &Gpu, x: &Tensor, l: &LoraPair) -> Result<Tensor> {
    let h = act(gpu, &[x.rows(), l.a.rows()])?;
    matmul_nt(gpu, x, &l.a, None, &h, 1.0, 0.0);
    Ok(h)
}

/// dx (N, in) = beta·dx + dy·W + s·(dy·B)·A, and (accumulated, +=) dB += s·dyᵀ·h, dA += s·gᵀ·x
/// with g = dy·B and h = x·Aᵀ recomputed here (MeSP: h is never kept from forward) unless
/// `h_saved` brings it (MeBP, full).
#[allow(clippy::too_many_arguments)]
pub fn lora_linear_backward(
    gpu: &Gpu,
    dy: &Tensor,
    x: &Tensor,
    lin: &Linear,
    lora: Option<(&LoraPair, &LoraPair)>,
    s: f32,
    dx: &Tensor,
    beta: f32,
    h_saved: Option<&Tensor>,
) -> Result<()> {
    let Some((p, g)) = lora else {
        matmul_nn(gpu, dy, &lin.w, dx, 1.0, beta);
        return Ok(());
    };
    {
        let n = dy.rows();
        let r = p.a.rows();
        let gt = act(gpu, &[n, r])?; // g: (N, r)
        matmul_nn(gpu, dy, &p.b, &gt, 1.0, 0.0);
        // dx = β·dx + dy·W + s·g·A in one pass over dx.
        matmul_nn_lora(gpu, dy, &lin.w, dx, beta, Fused { left: &gt, right: &p.a, scale: s });
        let own;
        let h = match h_saved {
            Some(h) => h,
            None => {
                own = lora_h(gpu, x, p)?; // h: (N, r), recomputed
                &own
            }
        };
        // dA += s·gᵀ·x and dB += s·dyᵀ·h in one dispatch.
        matmul_tn_pair(gpu, [(&gt, x, &g.a), (dy, h, &g.b)], s, 1.0);
    }
    Ok(())
}

/// LoRA's h = x·Aᵀ of one block's projections, the projections that read one input computed
/// together ([`lora_h_many`]: q, k and v in one dispatch, gate and up in another) when the first
/// of them asks, and handed to the others as they ask for theirs with the same input. Each h is
/// its own product's bit for bit, so the block computes what it computed one h at a time.
pub struct SharedH<'a> {
    lora: Option<&'a [Option<LoraPair>]>,
    /// (projection, its input, its h) computed ahead for a projection that has not asked yet.
    ahead: RefCell<Vec<(Proj, Tensor, Tensor)>>,
}

impl<'a> SharedH<'a> {
    pub fn new(lora: Option<&'a [Option<LoraPair>]>) -> SharedH<'a> {
        SharedH { lora, ahead: RefCell::new(Vec::new()) }
    }

    fn pair(&self, p: Proj) -> Option<&'a LoraPair> {
        self.lora.and_then(|r| r[p as usize].as_ref())
    }

    /// h = x·Aᵀ of projection `p` for input `x` (None: `p` has no LoRA pair).
    pub fn h(&self, gpu: &Gpu, x: &Tensor, p: Proj) -> Result<Option<Tensor>> {
        if self.pair(p).is_none() {
            return Ok(None);
        }
        let same =
            |t: &Tensor| std::sync::Arc::ptr_eq(&t.buf, &x.buf) && t.offset() == x.offset() && t.shape == x.shape;
        let mut ahead = self.ahead.borrow_mut();
        if let Some(i) = ahead.iter().position(|(q, t, _)| *q == p && same(t)) {
            return Ok(Some(ahead.swap_remove(i).2));
        }
        let group: &[Proj] = match p {
            Proj::Q => &[Proj::Q, Proj::K, Proj::V],
            Proj::Gate => &[Proj::Gate, Proj::Up],
            _ => &[],
        };
        if group.is_empty() {
            return lora_h(gpu, x, self.pair(p).expect("checked above")).map(Some);
        }
        let pairs: Vec<Option<&LoraPair>> = group.iter().map(|&g| self.pair(g)).collect();
        let mut mine = None;
        for (&g, h) in group.iter().zip(lora_h_many(gpu, x, &pairs)?) {
            match h {
                Some(h) if g == p => mine = Some(h),
                Some(h) => ahead.push((g, x.clone(), h)),
                None => {}
            }
        }
        Ok(mine)
    }

    /// The LoRA linear layer's forward with h from [`SharedH::h`]: y = x·Wᵀ + b + s·h·Bᵀ, and
    /// h back when `keep_h` (MeBP and full keep it for the backward; MeSP's recompute hands it
    /// to the backward).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        gpu: &Gpu,
        x: &Tensor,
        lin: &Linear,
        p: Proj,
        s: f32,
        y: &Tensor,
        keep_h: bool,
    ) -> Result<Option<Tensor>> {
        let h = self.forward_beta(gpu, x, lin, p, s, y, 0.0)?;
        Ok(if keep_h { h } else { None })
    }

    /// [`SharedH::forward`] added to y (y += x·Wᵀ + b + s·h·Bᵀ, as one store adds it: equal bit
    /// for bit to the product into a buffer of its own and then
    /// [`crate::kernels::elementwise::axpy`]), keeping no h: a block's residual.
    pub fn forward_add(&self, gpu: &Gpu, x: &Tensor, lin: &Linear, p: Proj, s: f32, y: &Tensor) -> Result<()> {
        self.forward_beta(gpu, x, lin, p, s, y, 1.0).map(drop)
    }

    /// y = x·Wᵀ + b + s·h·Bᵀ + β·y, returning h.
    #[allow(clippy::too_many_arguments)]
    fn forward_beta(
        &self,
        gpu: &Gpu,
        x: &Tensor,
        lin: &Linear,
        p: Proj,
        s: f32,
        y: &Tensor,
        beta: f32,
    ) -> Result<Option<Tensor>> {
        let h = self.h(gpu, x, p)?;
        lora_linear_forward_h(gpu, x, lin, self.pair(p).zip(h.as_ref()), s, y, beta);
        Ok(h)
    }
}
