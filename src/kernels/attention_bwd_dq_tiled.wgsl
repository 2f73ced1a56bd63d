// Attention backward, step 2, with workgroup-memory tiles (for GPUs): dq as attention_bwd_dq.wgsl
// computes it, row by row in the same order, but a workgroup takes WG consecutive blocks of R
// query rows of one (batch, head) and streams the keys its last row sees through workgroup
// memory, TK at a time (each k and v row read from storage once per workgroup). Loops marked
// `// unroll` are expanded by the launcher; per-invocation arrays are zeroed by explicit stores.
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // query rows per invocation
const TK: u32 = {{TK}}u;    // keys per tile
const WG: u32 = {{WG}}u;

struct Params { B: u32, T: u32, H: u32, HKV: u32, G: u32, has_mask: u32, scale: f32, nblk: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<V>;                // q: (B*T, H*D)
@group(0) @binding(2) var<storage, read> k: array<V>;                // k: (B*T, HKV*D)
@group(0) @binding(3) var<storage, read> v: array<V>;                // v: (B*T, HKV*D)
@group(0) @binding(4) var<storage, read> d_o: array<V>;              // dO: (B*T, H*D)
@group(0) @binding(5) var<storage, read> stats: array<vec2<f32>>;    // (lse, delta): (B, H, T)
@group(0) @binding(6) var<storage, read> mask: array<u32>;           // mask: (B*T), read only if has_mask
@group(0) @binding(7) var<storage, read_write> dq: array<V>;         // dq: (B*T, H*D)

var<workgroup> kt: array<V, {{TKN}}>;   // keys t0.. of the tile, key j at (j - t0) * N
var<workgroup> vt: array<V, {{TKN}}>;   // their values

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let nw = (p.nblk + WG - 1u) / WG;                 // workgroups per (batch, head)
    let widx = wid.x + wid.y * nwg.x;                 // (b, h, workgroup block), block fastest
    if (widx >= p.B * p.H * nw) { return; }           // the whole workgroup: uniform
    let wb = nw - 1u - widx % nw;                     // last rows first
    let h = (widx / nw) % p.H;
    let b = widx / (nw * p.H);
    let kvh = h / p.G;
    let blk = wb * WG + li;
    let i0 = blk * R;

    var qr: array<V, {{RN}}>;     // scale · q rows, row r at r * N
    var gr: array<V, {{RN}}>;     // dO rows
    var acc: array<V, {{RN}}>;    // dq rows / scale
    var st: array<vec2<f32>, R>;  // (lse, delta) of each row
    for (var r = 0u; r < {{R}}u; r++) { // unroll
        let i = min(i0 + r, p.T - 1u);
        let base = ((b * p.T + i) * p.H + h) * N;
        for (var n = 0u; n < {{N}}u; n++) { // unroll
            qr[r * N + n] = q[base + n] * p.scale;
            gr[r * N + n] = d_o[base + n];
            acc[r * N + n] = V(0.0);
        }
        st[r] = stats[(b * p.H + h) * p.T + i];
    }
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
            var s: array<f32, R>;     // scores
            var dp: array<f32, R>;    // dO_i · v_j
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                s[r] = 0.0;
                dp[r] = 0.0;
            }
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                let kk = kt[kb + n];
                let vv = vt[kb + n];
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    s[r] += dotv(qr[r * N + n], kk);
                    dp[r] += dotv(gr[r * N + n], vv);
                }
            }
            var ds: array<f32, R>;    // dS / scale, 0 where key j comes after row r
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                ds[r] = 0.0;
                if (j <= i0 + r) { ds[r] = exp(s[r] - st[r].x) * (dp[r] - st[r].y); }
            }
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                let kk = kt[kb + n];
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    acc[r * N + n] += ds[r] * kk;
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < {{R}}u; r++) { // unroll
        let i = i0 + r;
        if (i < p.T) {
            let base = ((b * p.T + i) * p.H + h) * N;
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                dq[base + n] = acc[r * N + n] * p.scale;
            }
        }
    }
}
