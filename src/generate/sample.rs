//! Host-side sampling of the next token from the logits read back each step: greedy, or
//! temperature → top-k → top-p (transformers' order) with a seeded SplitMix64.

/// The sampler's generator (kept under its old name).
pub use crate::base::rng::Rng as SplitMix64;

/// The first index of the largest value.
pub fn argmax(logits: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in logits.iter().enumerate() {
        if x > logits[best] {
            best = i;
        }
    }
    best
}

/// Pick the next token from `logits` (V, finite): argmax when temperature is 0; otherwise
/// softmax(logits / temperature) restricted to the top_k most likely, then to the smallest
/// most-likely prefix reaching top_p (at least one token), renormalised, and drawn with `rng`.
/// Ties rank the lower id first, so top_k = 1 is greedy.
pub fn sample(logits: &[f32], temperature: f32, top_k: usize, top_p: f32, rng: &mut SplitMix64) -> u32 {
    if temperature == 0.0 || logits.len() <= 1 {
        return argmax(logits) as u32;
    }
    let t = temperature as f64;
    let mut order: Vec<u32> = (0..logits.len() as u32).collect();
    let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
    if top_k > 0 && top_k < order.len() {
        order.select_nth_unstable_by(top_k - 1, by_logit);
        order.truncate(top_k);
    }
    order.sort_unstable_by(by_logit);
    let top = logits[order[0] as usize] as f64 / t;
    let mut w: Vec<f64> = order.iter().map(|&i| (logits[i as usize] as f64 / t - top).exp()).collect();
    if top_p < 1.0 {
        let z: f64 = w.iter().sum();
        let mut cum = 0.0;
        let mut keep = w.len();
        for (i, wi) in w.iter().enumerate() {
            cum += wi / z;
            if cum >= top_p as f64 {
                keep = i + 1;
                break;
            }
        }
        w.truncate(keep);
    }
    let mut u = rng.uniform() * w.iter().sum::<f64>();
    for (i, wi) in w.iter().enumerate() {
        if u < *wi {
            return order[i];
        }
        u -= wi;
    }
    order[w.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (temperature, top_k, top_p), as `GenerateOptions` carries them.
    fn opts(temperature: f32, top_k: usize, top_p: f32) -> (f32, usize, f32) {
        (temperature, top_k, top_p)
    }

    fn sample_with(logits: &[f32], (t, k, p): &(f32, usize, f32), rng: &mut SplitMix64) -> u32 {
        sample(logits, *t, *k, *p, rng)
    }

    #[test]
    fn sample_greedy_top_k_top_p() {
        let logits = [0.5f32, 2.0, -1.0, 2.0, 1.0];
        let mut rng = SplitMix64::new(1);
        // Ties: the lower id.
        assert_eq!(sample_with(&logits, &opts(0.0, 0, 1.0), &mut rng), 1);
        assert_eq!(sample_with(&logits, &opts(1.5, 1, 1.0), &mut rng), 1);
        // top_k = 2 keeps ids 1 and 3 only; a tiny top_p keeps only the first of them.
        for _ in 0..50 {
            let t = sample_with(&logits, &opts(1.0, 2, 1.0), &mut rng);
            assert!(t == 1 || t == 3, "top_k 2 drew {t}");
            assert_eq!(sample_with(&logits, &opts(1.0, 0, 0.01), &mut rng), 1);
        }
    }

    #[test]
    fn sample_matches_softmax_frequencies() {
        // p = softmax(logits / 0.5) restricted to top_p 0.9: ids 0 (0.867), 1 (0.117) stay.
        let logits = [1.0f32, 0.0, -1.0, -3.0];
        let o = opts(0.5, 0, 0.9);
        let e: Vec<f64> = logits.iter().map(|&x| (x as f64 / 0.5).exp()).collect();
        let z: f64 = e.iter().sum();
        let (p0, p1) = (e[0] / z, e[1] / z);
        assert!(p0 < 0.9 && p0 + p1 >= 0.9);
        let mut rng = SplitMix64::new(42);
        let mut counts = [0usize; 4];
        let draws = 20_000;
        for _ in 0..draws {
            counts[sample_with(&logits, &o, &mut rng) as usize] += 1;
        }
        assert_eq!(counts[2] + counts[3], 0, "tokens outside top_p were drawn: {counts:?}");
        let f0 = counts[0] as f64 / draws as f64;
        let want = p0 / (p0 + p1);
        assert!((f0 - want).abs() < 0.01, "frequency of id 0 {f0} vs {want}");
    }
}
