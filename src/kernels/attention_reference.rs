use super::AttnShape;

/// For (b, h, i): the probabilities P[j] (0 for invisible keys) and the log-sum-exp of the
/// visible scaled scores, or None if no key is visible.
fn probs(
    s: &AttnShape,
    q: &[f64],
    k: &[f64],
    mask: Option<&[u32]>,
    (b, h, i): (usize, usize, usize),
) -> Option<(Vec<f64>, f64)> {
    let (t, d, hq, hkv) = (s.seq, s.head_dim, s.heads, s.kv_heads);
    let c = h / (hq / hkv);
    let scale = 1.0 / (d as f64).sqrt();
    let qi = &q[((b * t + i) * hq + h) * d..][..d];
    let vis = |j: usize| j <= i && mask.is_none_or(|m| m[b * t + j] != 0);
    let sc: Vec<f64> = (0..t)
        .map(|j| {
            let kj = &k[((b * t + j) * hkv + c) * d..][..d];
            if vis(j) {
                scale * qi.iter().zip(kj).map(|(x, y)| x * y).sum::<f64>()
            } else {
                f64::NEG_INFINITY
            }
        })
        .collect();
    let mx = sc.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    if mx == f64::NEG_INFINITY {
        return None;
    }
    let e: Vec<f64> = sc.iter().map(|&x| (x - mx).exp()).collect();
    let z: f64 = e.iter().sum();
    Some((e.into_iter().map(|x| x / z).collect(), mx + z.ln()))
}

/// (o: (B*T, Hq*D), lse: (B, Hq, T)); rows with no visible key give o = 0, lse = 0.
pub fn forward(s: &AttnShape, q: &[f64], k: &[f64], v: &[f64], mask: Option<&[u32]>) -> (Vec<f64>, Vec<f64>) {
    let (t, d, hq, hkv) = (s.seq, s.head_dim, s.heads, s.kv_heads);
    let mut o = vec![0.0; s.batch * t * hq * d];
    let mut lse = vec![0.0; s.batch * hq * t];
    for b in 0..s.batch {
        for h in 0..hq {
            let c = h / (hq / hkv);
            for i in 0..t {
                let Some((pr, l)) = probs(s, q, k, mask, (b, h, i)) else { continue };
                lse[(b * hq + h) * t + i] = l;
                let out = &mut o[((b * t + i) * hq + h) * d..][..d];
                for (j, &pj) in pr.iter().enumerate() {
                    let vj = &v[((b * t + j) * hkv + c) * d..][..d];
                    for (x, y) in out.iter_mut().zip(vj) {
                        *x += pj * y;
                    }
                }
            }
        }
    }
    (o, lse)
}

/// (dq, dk, dv) for upstream gradient `d_o`, by the textbook softmax backward.
pub fn backward(
    s: &AttnShape,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    mask: Option<&[u32]>,
    d_o: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (t, d, hq, hkv) = (s.seq, s.head_dim, s.heads, s.kv_heads);
    let scale = 1.0 / (d as f64).sqrt();
    let mut dq = vec![0.0; q.len()];
    let mut dk = vec![0.0; k.len()];
    let mut dv = vec![0.0; v.len()];
    for b in 0..s.batch {
        for h in 0..hq {
            let c = h / (hq / hkv);
            for i in 0..t {
                let Some((pr, _)) = probs(s, q, k, mask, (b, h, i)) else { continue };
                let qo = ((b * t + i) * hq + h) * d;
                let g = &d_o[qo..][..d];
                // dP_j = dO_i · v_j; dS_j = P_j (dP_j − Σ_l P_l dP_l)
                let dp: Vec<f64> = (0..t)
                    .map(|j| {
                        let vj = &v[((b * t + j) * hkv + c) * d..][..d];
                        g.iter().zip(vj).map(|(x, y)| x * y).sum::<f64>()
                    })
                    .collect();
                let dot: f64 = pr.iter().zip(&dp).map(|(x, y)| x * y).sum();
                for j in 0..t {
                    if pr[j] == 0.0 {
                        continue;
                    }
                    let ds = pr[j] * (dp[j] - dot) * scale;
                    let ko = ((b * t + j) * hkv + c) * d;
                    for x in 0..d {
                        dq[qo + x] += ds * k[ko + x];
                        dk[ko + x] += ds * q[qo + x];
                        dv[ko + x] += pr[j] * g[x];
                    }
                }
            }
        }
    }
    (dq, dk, dv)
}
