//! Text generation for one sequence (batch 1) with a KV cache, and host-side sampling.
//!
//! - [`generate`]: prefill the prompt, then decode one token at a time, each step feeding only the
//!   new token; tokens are handed to a callback as soon as they are sampled (streaming, cancel).
//! - [`Decoder`]: the cached forward itself: n new tokens at positions [p0, p0 + n) go through
//!   every block with the training kernels (LoRA applied unmerged by
//!   [`lora_linear_forward_h`], or folded into f32 weights by [`MergedWeights`]); their keys and
//!   values are appended to the [`KvCache`] and [`attention_cached`] lets query i attend cache
//!   rows [0, p0 + i]. Only the last row goes through the final norm and the output table.
//! - [`logits_last`]: the last position's logits of a full forward without a cache, through the
//!   training [`block_forward`] (the reference the cached path is tested against).
//! - [`sample`]: greedy, or temperature → top-k → top-p (transformers' order) with a seeded
//!   SplitMix64, on the host from the logits read back each step. Greedy generation from a
//!   resident model picks on the GPU instead ([`argmax_pick`]): the next token's forward reads
//!   its id where the argmax wrote it, so it is recorded before this token's id is read back and
//!   the GPU never waits for the host between tokens.

use crate::base::config::ModelConfig;
use crate::base::error::{Error, Result};
use crate::base::names::Proj;
use crate::gpu::{Category, DType, Gpu, Tensor};
use crate::kernels::argmax::{argmax_pick, read_pick, PICK_WORDS};
use crate::kernels::attention::AttnShape;
use crate::kernels::embedding::embedding_forward;
use crate::kernels::matmul::matmul_nn;
use crate::kernels::rope::{rope_table, RopeTable};
use crate::model::block::{block_forward, BlockCtx};
use crate::model::lora::{Lora, LoraPair};
use crate::model::weights::Linear;
use crate::model::Model;

mod layer;
mod logits;
mod qkv;
mod sample;

use logits::{overflowed, read_logits, LogitsBufs};
use qkv::{QkvPack, QKV};
pub use sample::{argmax, sample, SplitMix64};

/// How to generate. `Default`: greedy, 256 new tokens, seed 0, no EOS ids, LoRA unmerged.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    /// 0 = greedy (argmax); otherwise logits are divided by it before top-k / top-p.
    pub temperature: f32,
    /// Keep only the k most likely tokens; 0 = off.
    pub top_k: usize,
    /// Keep the smallest set of most likely tokens whose probability reaches top_p; 1 = off.
    pub top_p: f32,
    pub seed: u64,
    /// Stop after any of these ids (it is returned and passed to the callback). Pass
    /// `model.cfg.eos_token_ids` (or the chat template's end-of-turn id) for the model's own.
    pub eos_ids: Vec<u32>,
    /// Fold LoRA into f32 copies of the targeted weights first ([`MergedWeights`]): fewer
    /// dispatches per token, at 4 bytes per weight of every targeted projection.
    pub merge: bool,
}

impl Default for GenerateOptions {
    fn default() -> Self {
        GenerateOptions {
            max_new_tokens: 256,
            temperature: 0.0,
            top_k: 0,
            top_p: 1.0,
            seed: 0,
            eos_ids: Vec::new(),
            merge: false,
        }
    }
}

impl GenerateOptions {
    fn validate(&self) -> Result<()> {
        if !(self.temperature >= 0.0 && self.temperature.is_finite()) {
            return Err(Error::msg(format!("generate: temperature {} must be finite and ≥ 0", self.temperature)));
        }
        if !(self.top_p > 0.0 && self.top_p <= 1.0) {
            return Err(Error::msg(format!("generate: top_p {} must be in (0, 1]", self.top_p)));
        }
        Ok(())
    }
}

/// Keys and values (after RoPE) of every position seen so far, per layer.
pub struct KvCache {
    /// k[l]: (max_seq, Hkv·D) f32; rows [0, len) are filled
    pub k: Vec<Tensor>,
    /// v[l]: (max_seq, Hkv·D) f32
    pub v: Vec<Tensor>,
    /// Positions filled.
    pub len: usize,
    pub max_seq: usize,
}

impl KvCache {
    /// Bytes of a cache of `max_seq` positions for this model.
    pub fn bytes(cfg: &ModelConfig, max_seq: usize) -> u64 {
        (2 * cfg.layers * max_seq * cfg.kv_heads * cfg.head_dim * 4) as u64
    }

    pub fn new(gpu: &Gpu, cfg: &ModelConfig, max_seq: usize) -> Result<KvCache> {
        let shape = [max_seq.max(1), cfg.kv_heads * cfg.head_dim];
        let mut k = Vec::with_capacity(cfg.layers);
        let mut v = Vec::with_capacity(cfg.layers);
        for _ in 0..cfg.layers {
            k.push(gpu.zeros(&shape, DType::F32, Category::Activations)?);
            v.push(gpu.zeros(&shape, DType::F32, Category::Activations)?);
        }
        Ok(KvCache { k, v, len: 0, max_seq: max_seq.max(1) })
    }

    /// Forget every position from `len` on (e.g. to regenerate from a shared prefix).
    pub fn truncate(&mut self, len: usize) {
        self.len = self.len.min(len);
    }
}

/// LoRA folded into the weights: for each targeted projection an f32 W' (out, in) = W + s·B·A
/// (W unpacked by the embedding gather, then `matmul_nn` adds s·B·A on the GPU), with the
/// original bias. Untargeted projections are not copied.
pub struct MergedWeights {
    /// Per layer, per projection (`Proj as usize`): the merged linear, if that projection has LoRA.
    pub layers: Vec<Vec<Option<Linear>>>,
}

impl MergedWeights {
    pub fn build(gpu: &Gpu, model: &Model, lora: &Lora) -> Result<MergedWeights> {
        let s = lora.scale();
        check_lora(model, lora)?;
        if model.is_streamed() {
            return Err(Error::msg("generate: merging LoRA needs resident weights; the model is streamed"));
        }
        let mut layers = Vec::with_capacity(model.cfg.layers);
        for (i, w) in model.weights.layers.iter().enumerate() {
            let mut row = Vec::with_capacity(7);
            for p in Proj::all() {
                row.push(match lora.params.pair(i, p) {
                    None => None,
                    Some(pair) => Some(merge_linear(gpu, w.linear(p), pair, s)?),
                });
            }
            layers.push(row);
        }
        Ok(MergedWeights { layers })
    }

    /// Bytes of the merged f32 weights.
    pub fn bytes(&self) -> u64 {
        self.layers.iter().flatten().flatten().map(|l| l.w.bytes()).sum()
    }
}

/// W' (out, in) f32 = W + s·B (out, r)·A (r, in).
fn merge_linear(gpu: &Gpu, lin: &Linear, pair: &LoraPair, s: f32) -> Result<Linear> {
    let (out, inp) = (lin.w.rows(), lin.w.cols());
    let w = gpu.zeros(&[out, inp], DType::F32, Category::Weights)?;
    // Row r of W gathered as "token" r: the embedding kernel unpacks any weight dtype to f32.
    let rows: Vec<u32> = (0..out as u32).collect();
    let ids = gpu.upload_u32(&rows, &[out], Category::Scratch)?;
    embedding_forward(gpu, std::slice::from_ref(&lin.w), out, &ids, &w);
    matmul_nn(gpu, &pair.b, &pair.a, &w, s, 1.0);
    Ok(Linear { w, b: lin.b.clone() })
}

fn check_lora(model: &Model, lora: &Lora) -> Result<()> {
    let cfg = &model.cfg;
    let ok = lora.params.layers.len() == cfg.layers && lora.params.layers.iter().all(|l| l.len() == 7);
    if !ok {
        return Err(Error::msg(format!(
            "generate: the adapter has {} layers, the model {}",
            lora.params.layers.len(),
            cfg.layers
        )));
    }
    Ok(())
}

fn check_ids(cfg: &ModelConfig, ids: &[u32]) -> Result<()> {
    if ids.is_empty() {
        return Err(Error::msg("generate: no input tokens"));
    }
    if let Some((i, id)) = ids.iter().enumerate().find(|(_, &id)| id as usize >= cfg.vocab) {
        return Err(Error::msg(format!("generate: token {i} is id {id}, past the vocabulary ({})", cfg.vocab)));
    }
    Ok(())
}

fn act(gpu: &Gpu, shape: &[usize]) -> Result<Tensor> {
    Ok(gpu.zeros(shape, DType::F32, Category::Activations)?)
}

/// The same buffer seen with another shape of no more elements.
fn view(t: &Tensor, shape: &[usize]) -> Tensor {
    let mut v = t.clone();
    v.shape = shape.to_vec();
    v
}

/// The activations of a forward of n new tokens, reused by every layer and by every call with
/// the same n, so that a decode step allocates nothing.
struct Workspace {
    n: usize,
    ids: Tensor,  // (n) u32
    x: Tensor,    // (n, C) the residual stream, each block updating it in place
    xn: Tensor,   // (n, C) rmsnorm output (both norms of a block)
    rstd: Tensor, // (n)
    q: Tensor,    // (n, Hq·D)
    k: Tensor,    // (n, Hkv·D)
    qkv: Tensor,  // (1, (Hq + 2·Hkv)·D) a decoded row's q, k, v side by side, from a QkvPack
    v: Tensor,    // (n, Hkv·D)
    o: Tensor,    // (n, Hq·D)
    g: Tensor,    // (n, F)
    u: Tensor,    // (n, F)
    m: Tensor,    // (n, F)
    out: LogitsBufs,
}

impl Workspace {
    fn new(gpu: &Gpu, model: &Model, n: usize) -> Result<Workspace> {
        let cfg = &model.cfg;
        let (c, f) = (cfg.hidden, cfg.intermediate);
        let (qd, kvd) = (cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim);
        Ok(Workspace {
            n,
            ids: gpu.zeros(&[n], DType::F32, Category::Activations)?,
            x: act(gpu, &[n, c])?,
            xn: act(gpu, &[n, c])?,
            rstd: act(gpu, &[n])?,
            q: act(gpu, &[n, qd])?,
            k: act(gpu, &[n, kvd])?,
            v: act(gpu, &[n, kvd])?,
            qkv: act(gpu, &[1, qd + 2 * kvd])?,
            o: act(gpu, &[n, qd])?,
            g: act(gpu, &[n, f])?,
            u: act(gpu, &[n, f])?,
            m: act(gpu, &[n, f])?,
            out: LogitsBufs::new(gpu, model)?,
        })
    }
}

/// The ids a forward feeds: from the host, or one token's id already on the GPU.
enum NewIds<'b> {
    Host(&'b [u32]),
    Gpu(&'b Tensor),
}

impl NewIds<'_> {
    fn len(&self) -> usize {
        match self {
            NewIds::Host(ids) => ids.len(),
            NewIds::Gpu(_) => 1,
        }
    }
}

/// The cached forward of one sequence: owns its KV cache, RoPE table and (optionally) merged
/// weights; each [`Decoder::forward`] appends tokens and returns the last one's logits.
pub struct Decoder<'a> {
    model: &'a Model,
    lora: Option<&'a Lora>,
    merged: Option<MergedWeights>,
    /// cos/sin for positions [0, max_seq)
    rope: RopeTable,
    /// Per layer, q, k and v as one product for decoding (resident models; empty otherwise)
    qkv: Vec<QkvPack>,
    pub cache: KvCache,
    /// Activations of the last call's n (a decode step's n = 1 stays allocated).
    ws: Option<Workspace>,
}

impl<'a> Decoder<'a> {
    /// A decoder for up to `max_seq` positions; with `merge` (and an adapter) LoRA is folded into
    /// f32 weights first.
    pub fn new(gpu: &Gpu, model: &'a Model, lora: Option<&'a Lora>, max_seq: usize, merge: bool) -> Result<Self> {
        if let Some(l) = lora {
            check_lora(model, l)?;
        }
        let cfg = &model.cfg;
        let max_seq = max_seq.max(1);
        let merged = match (merge, lora) {
            (true, Some(l)) => Some(MergedWeights::build(gpu, model, l)?),
            _ => None,
        };
        let rope = rope_table(gpu, max_seq, cfg.head_dim, cfg.rope_theta)?;
        let cache = KvCache::new(gpu, cfg, max_seq)?;
        let mut dec = Decoder { model, lora, merged, rope, qkv: Vec::new(), cache, ws: None };
        dec.qkv = dec.pack_qkv(gpu)?;
        Ok(dec)
    }

    /// Every layer's [`QkvPack`] from the weights decoding uses (merged where merged), or none
    /// (a streamed model, or a layer that cannot be packed).
    fn pack_qkv(&self, gpu: &Gpu) -> Result<Vec<QkvPack>> {
        if self.model.is_streamed() {
            return Ok(Vec::new());
        }
        let mut packs = Vec::with_capacity(self.model.cfg.layers);
        for (l, w) in self.model.weights.layers.iter().enumerate() {
            let lin = QKV.map(|p| self.merged(l, p).unwrap_or(w.linear(p)));
            match QkvPack::build(gpu, lin, QKV.map(|p| self.pair(l, p)))? {
                Some(pack) => packs.push(pack),
                None => return Ok(Vec::new()),
            }
        }
        Ok(packs)
    }

    /// Positions already in the cache.
    pub fn len(&self) -> usize {
        self.cache.len
    }

    pub fn is_empty(&self) -> bool {
        self.cache.len == 0
    }

    /// Feed `ids` at positions [len, len + n): their keys and values join the cache; returns
    /// the logits (V) after the last of them.
    pub async fn forward(&mut self, gpu: &Gpu, ids: &[u32]) -> Result<Vec<f32>> {
        let logits = self.encode(gpu, ids).await?;
        read_logits(gpu, &logits).await
    }

    /// Record the forward of `ids`; returns the (1, V) logits tensor (not yet read; the next
    /// call overwrites it). A streamed model's blocks are uploaded (fetched first where the
    /// store needs it) one at a time, waiting for each to finish before the next.
    pub async fn encode(&mut self, gpu: &Gpu, ids: &[u32]) -> Result<Tensor> {
        check_ids(&self.model.cfg, ids)?;
        self.encode_ids(gpu, NewIds::Host(ids)).await
    }

    /// [`Decoder::encode`] of one token whose id is the first word of `pick` on the GPU (where
    /// [`argmax_pick`] wrote it): nothing waits for it to be known. A resident model only (a
    /// streamed one gathers its embedding rows on the host).
    pub async fn encode_picked(&mut self, gpu: &Gpu, pick: &Tensor) -> Result<Tensor> {
        if self.model.is_streamed() {
            return Err(Error::msg("generate: a streamed model embeds ids from the host, not from the GPU"));
        }
        self.encode_ids(gpu, NewIds::Gpu(pick)).await
    }

    async fn encode_ids(&mut self, gpu: &Gpu, ids: NewIds<'_>) -> Result<Tensor> {
        let (p0, n) = (self.cache.len, ids.len());
        if p0 + n > self.cache.max_seq {
            return Err(Error::msg(format!(
                "generate: {p0} cached + {n} new positions exceed the cache's {}",
                self.cache.max_seq
            )));
        }
        let ws = match self.ws.take() {
            Some(ws) if ws.n == n => ws,
            old => {
                drop(old);
                Workspace::new(gpu, self.model, n)?
            }
        };
        match ids {
            NewIds::Host(ids) => {
                gpu.write_f32(&ws.ids, bytemuck::cast_slice(ids));
                self.model.embed_ids(gpu, ids, &ws.ids, &ws.x).await?;
            }
            NewIds::Gpu(pick) => {
                gpu.copy(pick, &ws.ids); // its first word, the id
                self.model.embed_ids(gpu, &[], &ws.ids, &ws.x).await?;
            }
        }
        let model = self.model;
        for l in 0..model.cfg.layers {
            let w = model.fetch_layer(gpu, l).await?;
            self.block(gpu, &ws, &w, l, p0)?;
            if model.is_streamed() {
                drop(w);
                gpu.sync().await?; // its weights are really released before the next block's
            }
        }
        self.cache.len = p0 + n;
        ws.out.compute(gpu, self.model, &ws.x).await?;
        let logits = ws.out.logits.clone();
        self.ws = Some(ws);
        Ok(logits)
    }
}

/// Last-position logits (V) of a full forward over `ids` without a cache: the training
/// [`block_forward`] over the whole sequence (batch 1, no padding), then the last row's logits.
pub async fn logits_last(gpu: &Gpu, model: &Model, lora: Option<&Lora>, ids: &[u32]) -> Result<Vec<f32>> {
    let cfg = &model.cfg;
    check_ids(cfg, ids)?;
    if let Some(l) = lora {
        check_lora(model, l)?;
    }
    let t = ids.len();
    let rope = rope_table(gpu, t, cfg.head_dim, cfg.rope_theta)?;
    let ctx = BlockCtx {
        cfg,
        attn: AttnShape { batch: 1, seq: t, heads: cfg.heads, kv_heads: cfg.kv_heads, head_dim: cfg.head_dim },
        rope: &rope,
        mask: None,
        scale: lora.map_or(0.0, |l| l.scale()),
        mlp_chunk_rows: 0,
    };
    let tids = gpu.upload_u32(ids, &[t], Category::Activations)?;
    let mut x = act(gpu, &[t, cfg.hidden])?;
    model.embed_ids(gpu, ids, &tids, &x).await?;
    for i in 0..cfg.layers {
        let w = model.fetch_layer(gpu, i).await?;
        let row = lora.map(|l| l.params.layers[i].as_slice());
        x = block_forward(gpu, &ctx, &w, row, &x, false)?.0;
        if model.is_streamed() {
            drop(w);
            gpu.sync().await?;
        }
    }
    let out = LogitsBufs::new(gpu, model)?;
    out.compute(gpu, model, &x).await?;
    read_logits(gpu, &out.logits).await
}

/// Generate from prompt ids; `on_token` is called with each new id as soon as it is sampled (for
/// streaming) and may return false to cancel. Returns the new ids (an EOS id that stopped it
/// included). Stops at max_new_tokens, after an id in `opts.eos_ids`, or on cancel.
pub async fn generate(
    gpu: &Gpu,
    model: &Model,
    lora: Option<&Lora>,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<Vec<u32>> {
    opts.validate()?;
    check_ids(&model.cfg, prompt)?;
    if opts.max_new_tokens == 0 {
        return Ok(Vec::new());
    }
    // The last sampled token is never fed back.
    let max_seq = prompt.len() + opts.max_new_tokens - 1;
    let mut dec = Decoder::new(gpu, model, lora, max_seq, opts.merge)?;
    if opts.temperature == 0.0 && !model.is_streamed() {
        return generate_greedy(gpu, &mut dec, prompt, opts, on_token).await;
    }
    let mut rng = SplitMix64::new(opts.seed);
    let mut out = Vec::new();
    let mut logits = dec.forward(gpu, prompt).await?;
    loop {
        let tok = sample(&logits, opts.temperature, opts.top_k, opts.top_p, &mut rng);
        out.push(tok);
        if !on_token(tok) || opts.eos_ids.contains(&tok) || out.len() >= opts.max_new_tokens {
            return Ok(out);
        }
        logits = dec.forward(gpu, &[tok]).await?;
    }
}

/// [`generate`] greedily with the argmax on the GPU: token k + 1's forward is recorded (its id
/// read where token k's argmax wrote it) before token k's id is read back, so the host records
/// while the GPU computes and the GPU never waits for a readback. The same tokens as picking on
/// the host; after an EOS or a cancel one forward more than was needed has run (never past the
/// cache: the last token wanted is never fed).
async fn generate_greedy(
    gpu: &Gpu,
    dec: &mut Decoder<'_>,
    prompt: &[u32],
    opts: &GenerateOptions,
    on_token: &mut dyn FnMut(u32) -> bool,
) -> Result<Vec<u32>> {
    let pick = gpu.zeros(&[PICK_WORDS], DType::F32, Category::Activations)?;
    let logits = dec.encode(gpu, prompt).await?;
    argmax_pick(gpu, &logits, &pick);
    let mut pending = gpu.read_later(&pick);
    let mut out = Vec::new();
    loop {
        // Feed the token being read back, unless it is the last one wanted.
        let next = if out.len() + 1 < opts.max_new_tokens {
            let logits = dec.encode_picked(gpu, &pick).await?;
            argmax_pick(gpu, &logits, &pick); // after this forward's embedding has read the id
            Some(gpu.read_later(&pick))
        } else {
            None
        };
        let tok = read_pick(&pending.bytes(gpu).await?).map_err(|(i, v)| overflowed(i, v))?;
        out.push(tok);
        if !on_token(tok) || opts.eos_ids.contains(&tok) || out.len() >= opts.max_new_tokens {
            return Ok(out);
        }
        pending = next.ok_or_else(|| Error::msg("generate: no forward was recorded for the next token"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(temperature: f32, top_k: usize, top_p: f32) -> GenerateOptions {
        GenerateOptions { temperature, top_k, top_p, ..Default::default() }
    }

    #[test]
    fn options_are_validated() {
        assert!(opts(-1.0, 0, 1.0).validate().is_err());
        assert!(opts(f32::NAN, 0, 1.0).validate().is_err());
        assert!(opts(1.0, 0, 0.0).validate().is_err());
        assert!(opts(1.0, 0, 1.5).validate().is_err());
        assert!(GenerateOptions::default().validate().is_ok());
    }
}
