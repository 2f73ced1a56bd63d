// Causal GQA attention forward, flash style: o = softmax(scale · q·kᵀ + causal/padding mask) · v.
// One invocation per R consecutive query rows of one (batch, head); keys are streamed 4 at a
// time through an online softmax, so nothing of size T×T exists. Saves lse for the backward.
// V is vec4<f32> when D % 4 == 0, else f32; N values of V make one head row of D floats.
// Loops marked `// unroll` are expanded by the launcher, so the per-invocation arrays are
// indexed by constants and stay in registers.
// Every per-invocation array is zeroed by explicit stores, never by the declaration's implicit
// zero value: Chrome (Tint + SwiftShader) does not re-zero a `var` declared inside a loop on each
// iteration, so it would carry the previous key's values (lavapipe does re-zero it).
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // query rows per invocation

struct Params {
    B: u32, T: u32,
    H: u32,        // query heads
    HKV: u32,      // key/value heads
    G: u32,        // H / HKV: query heads per kv head
    has_mask: u32,
    scale: f32,    // 1 / sqrt(D)
    nblk: u32,     // ceil(T / R)
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<V>;            // q: (B*T, H*D)
@group(0) @binding(2) var<storage, read> k: array<V>;            // k: (B*T, HKV*D)
@group(0) @binding(3) var<storage, read> v: array<V>;            // v: (B*T, HKV*D)
@group(0) @binding(4) var<storage, read> mask: array<u32>;       // mask: (B*T), read only if has_mask
@group(0) @binding(5) var<storage, read_write> o: array<V>;      // o: (B*T, H*D)
@group(0) @binding(6) var<storage, read_write> lse: array<f32>;  // lse: (B, H, T)

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let idx = (wid.x + wid.y * nwg.x) * {{WG}}u + li;    // (b, h, block), block fastest
    if (idx >= p.B * p.H * p.nblk) { return; }
    // Last rows first: they see the most keys, and lavapipe's threads take workgroups in order.
    let blk = p.nblk - 1u - idx % p.nblk;
    let h = (idx / p.nblk) % p.H;
    let b = idx / (p.nblk * p.H);
    let kvh = h / p.G;
    let i0 = blk * R;

    var qr: array<V, {{RN}}>;    // scale · q rows, row r at r * N
    var acc: array<V, {{RN}}>;   // unnormalised output rows
    var m: array<f32, R>;        // running max of the scores
    var l: array<f32, R>;        // running sum of exp(score - m)
    for (var r = 0u; r < {{R}}u; r++) { // unroll
        let base = ((b * p.T + min(i0 + r, p.T - 1u)) * p.H + h) * N;
        for (var n = 0u; n < {{N}}u; n++) { // unroll
            qr[r * N + n] = q[base + n] * p.scale;
            acc[r * N + n] = V(0.0);
        }
        m[r] = -1e30;
        l[r] = 0.0;
    }
    let jend = min(i0 + R, p.T);
    // Keys in blocks of 4: one rescale of the accumulator per block instead of per key (on a
    // CPU adapter the accumulator lives in memory, and this is most of its traffic).
    for (var j0 = 0u; j0 < jend; j0 += 4u) {
        var kvis: array<bool, 4>;   // key j0 + kk exists and is not padding
        var kb: array<u32, 4>;
        for (var kk = 0u; kk < 4u; kk++) { // unroll
            let j = min(j0 + kk, p.T - 1u);
            kvis[kk] = j0 + kk < jend && (p.has_mask == 0u || mask[b * p.T + j] != 0u);
            kb[kk] = ((b * p.T + j) * p.HKV + kvh) * N;
        }
        var s: array<f32, {{R4}}>;  // scores, row r key kk at r * 4 + kk
        for (var r = 0u; r < {{R4}}u; r++) { // unroll
            s[r] = 0.0;
        }
        for (var n = 0u; n < {{N}}u; n++) { // unroll
            let k0 = k[kb[0] + n];
            let k1 = k[kb[1] + n];
            let k2 = k[kb[2] + n];
            let k3 = k[kb[3] + n];
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                let qq = qr[r * N + n];
                s[r * 4u] += dotv(qq, k0);
                s[r * 4u + 1u] += dotv(qq, k1);
                s[r * 4u + 2u] += dotv(qq, k2);
                s[r * 4u + 3u] += dotv(qq, k3);
            }
        }
        var pr: array<f32, {{R4}}>;   // exp(s - new max), 0 where key j0 + kk is not seen by row r
        var cr: array<f32, R>;        // rescale factor of the old accumulator
        for (var r = 0u; r < {{R}}u; r++) { // unroll
            var mn = m[r];
            for (var kk = 0u; kk < 4u; kk++) { // unroll
                if (kvis[kk] && j0 + kk <= i0 + r) { mn = max(mn, s[r * 4u + kk]); }
            }
            cr[r] = exp(m[r] - mn);
            var sum = 0.0;
            for (var kk = 0u; kk < 4u; kk++) { // unroll
                pr[r * 4u + kk] = 0.0;
                if (kvis[kk] && j0 + kk <= i0 + r) { pr[r * 4u + kk] = exp(s[r * 4u + kk] - mn); }
                sum += pr[r * 4u + kk];
            }
            l[r] = l[r] * cr[r] + sum;
            m[r] = mn;
        }
        for (var n = 0u; n < {{N}}u; n++) { // unroll
            let v0 = v[kb[0] + n];
            let v1 = v[kb[1] + n];
            let v2 = v[kb[2] + n];
            let v3 = v[kb[3] + n];
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                acc[r * N + n] = acc[r * N + n] * cr[r]
                    + (pr[r * 4u] * v0 + pr[r * 4u + 1u] * v1 + pr[r * 4u + 2u] * v2 + pr[r * 4u + 3u] * v3);
            }
        }
    }
    for (var r = 0u; r < {{R}}u; r++) { // unroll
        let i = i0 + r;
        if (i < p.T) {
            // A row with no visible key has l = 0: it gets o = 0 and lse = 0 (never read).
            let seen = l[r] > 0.0;
            let inv = select(0.0, 1.0 / l[r], seen);
            let base = ((b * p.T + i) * p.H + h) * N;
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                o[base + n] = acc[r * N + n] * inv;
            }
            lse[(b * p.H + h) * p.T + i] = select(0.0, m[r] + log(max(l[r], 1e-30)), seen);
        }
    }
}
