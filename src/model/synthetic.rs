//! A model with random weights at a real shape, made on demand ([`SyntheticSource`]): what the
//! benchmarks train, with no download.

use super::source::{LayerHost, WeightSource};
use crate::base::config::ModelConfig;
use crate::base::error::Result;
use crate::base::host::{HostData, HostTensor};
use crate::base::names::Proj;
use crate::base::rng::Rng;

/// Embedding entries are uniform in ±this: small, like trained tables, so the tied output
/// logits of the random model stay O(1) and its loss near ln(vocab).
const EMBED_SCALE: f32 = 0.05;

/// A model with random bf16 weights at a real shape, generated on demand from a seed (each
/// tensor, and each embedding row, from its own stream): benchmarks need no download and no
/// host memory for the whole model.
pub struct SyntheticSource {
    cfg: ModelConfig,
    seed: u64,
}

impl SyntheticSource {
    pub fn new(cfg: ModelConfig, seed: u64) -> SyntheticSource {
        SyntheticSource { cfg, seed }
    }
    fn bits(&self, stream: u64, n: usize, scale: f32, around: f32) -> Vec<u16> {
        let mut rng = Rng::new(self.seed ^ stream.wrapping_mul(0x9e3779b97f4a7c15));
        (0..n).map(|_| half::bf16::from_f32(around + ((rng.uniform() * 2.0 - 1.0) as f32) * scale).to_bits()).collect()
    }
    fn random(&self, stream: u64, shape: &[usize], scale: f32, around: f32) -> HostTensor {
        let bits = self.bits(stream, shape.iter().product(), scale, around);
        HostTensor { shape: shape.to_vec(), data: HostData::BF16(bits) }
    }
}

impl WeightSource for SyntheticSource {
    fn config(&self) -> &ModelConfig {
        &self.cfg
    }
    fn layer(&self, i: usize) -> Result<LayerHost> {
        let cfg = &self.cfg;
        let base = 1000 * (i as u64 + 1);
        let proj = Proj::all()
            .into_iter()
            .map(|p| {
                let (out, inp) = p.dims(cfg);
                let w = self.random(base + p as u64, &[out, inp], 1.0 / (inp as f32).sqrt(), 0.0);
                let b = p.has_bias(cfg).then(|| self.random(base + 10 + p as u64, &[out], 0.02, 0.0));
                (w, b)
            })
            .collect();
        Ok(LayerHost {
            input_norm: self.random(base + 20, &[cfg.hidden], 0.1, 1.0),
            post_norm: self.random(base + 21, &[cfg.hidden], 0.1, 1.0),
            proj,
        })
    }
    fn final_norm(&self) -> Result<HostTensor> {
        Ok(self.random(7, &[self.cfg.hidden], 0.1, 1.0))
    }
    fn embedding_rows(&self, ids: &[u32]) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(ids.len() * self.cfg.hidden);
        for &id in ids {
            out.extend(self.random(1 << 40 | id as u64, &[self.cfg.hidden], EMBED_SCALE, 0.0).to_f32());
        }
        Ok(out)
    }
    fn output_rows(&self, r0: usize, r1: usize) -> Result<HostTensor> {
        // Tied, like every benchmarked shape: row r is embedding row r.
        let c = self.cfg.hidden;
        let mut bits = Vec::with_capacity((r1 - r0) * c);
        for r in r0..r1 {
            bits.extend(self.bits(1 << 40 | r as u64, c, EMBED_SCALE, 0.0));
        }
        Ok(HostTensor { shape: vec![r1 - r0, c], data: HostData::BF16(bits) })
    }
}
