// Causal GQA attention forward, flash style, with workgroup-memory tiles (for GPUs). A workgroup
// takes WG consecutive blocks of R query rows of one (batch, head) and streams the keys its last
// row sees through workgroup memory, TK at a time: each k and v row is read from storage once per
// workgroup instead of once per invocation. Each row's arithmetic is attention_fwd.wgsl's, key
// by key in the same order, so the results agree with it to rounding. Loops marked `// unroll`
// are expanded by the launcher; per-invocation arrays are zeroed by explicit stores (see
// attention_fwd.wgsl).
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // query rows per invocation
const TK: u32 = {{TK}}u;    // keys per tile
const WG: u32 = {{WG}}u;

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

var<workgroup> kt: array<V, {{TKN}}>;   // keys t0.. of the tile, key j at (j - t0) * N
var<workgroup> vt: array<V, {{TKN}}>;   // their values

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let nw = (p.nblk + WG - 1u) / WG;                 // workgroups per (batch, head)
    let widx = wid.x + wid.y * nwg.x;                 // (b, h, workgroup block), block fastest
    if (widx >= p.B * p.H * nw) { return; }           // the whole workgroup: uniform
    // Last rows first: they see the most keys.
    let wb = nw - 1u - widx % nw;
    let h = (widx / nw) % p.H;
    let b = widx / (nw * p.H);
    let kvh = h / p.G;
    let blk = wb * WG + li;
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
    // This invocation's keys (none for a block past the end), and the workgroup's.
    let jend = select(0u, min(i0 + R, p.T), blk < p.nblk);
    let wend = min((wb * WG + WG) * R, p.T);
    for (var t0 = 0u; t0 < wend; t0 += TK) {
        for (var e = li; e < TK * N; e += WG) {
            let kb = ((b * p.T + min(t0 + e / N, p.T - 1u)) * p.HKV + kvh) * N + e % N;
            kt[e] = k[kb];
            vt[e] = v[kb];
        }
        workgroupBarrier();
        let tend = min(t0 + TK, jend);
        for (var j = t0; j < tend; j++) {
            if (p.has_mask != 0u && mask[b * p.T + j] == 0u) { continue; }
            let kb = (j - t0) * N;
            var s: array<f32, R>;
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                s[r] = 0.0;
            }
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                let kk = kt[kb + n];
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    s[r] += dotv(qr[r * N + n], kk);
                }
            }
            var pr: array<f32, R>;    // exp(s - new max), 0 where key j comes after row r
            var cr: array<f32, R>;    // rescale factor of the old accumulator
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                cr[r] = 1.0;
                pr[r] = 0.0;
                if (j <= i0 + r) {
                    let mn = max(m[r], s[r]);
                    cr[r] = exp(m[r] - mn);
                    pr[r] = exp(s[r] - mn);
                    l[r] = l[r] * cr[r] + pr[r];
                    m[r] = mn;
                }
            }
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                let vv = vt[kb + n];
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    acc[r * N + n] = acc[r * N + n] * cr[r] + pr[r] * vv;
                }
            }
        }
        workgroupBarrier();
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
