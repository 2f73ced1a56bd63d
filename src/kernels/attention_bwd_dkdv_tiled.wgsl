// Attention backward, step 3, with workgroup-memory tiles (for GPUs): dk, dv as
// attention_bwd_dkdv.wgsl computes them, row by row in the same order, but a workgroup takes WG
// consecutive blocks of R key rows of one (batch, kv head) and streams the query rows that see
// its first key through workgroup memory, TQ at a time per query head of the group: each q and
// dO row and its (lse, delta) is read from storage once per workgroup instead of once per
// invocation. Loops marked `// unroll` are expanded by the launcher; per-invocation arrays are
// zeroed by explicit stores.
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // key rows per invocation
const TQ: u32 = {{TK}}u;    // query rows per tile
const WG: u32 = {{WG}}u;

struct Params { B: u32, T: u32, H: u32, HKV: u32, G: u32, has_mask: u32, scale: f32, nblk: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<V>;                // q: (B*T, H*D)
@group(0) @binding(2) var<storage, read> k: array<V>;                // k: (B*T, HKV*D)
@group(0) @binding(3) var<storage, read> v: array<V>;                // v: (B*T, HKV*D)
@group(0) @binding(4) var<storage, read> d_o: array<V>;              // dO: (B*T, H*D)
@group(0) @binding(5) var<storage, read> stats: array<vec2<f32>>;    // (lse, delta): (B, H, T)
@group(0) @binding(6) var<storage, read> mask: array<u32>;           // mask: (B*T), read only if has_mask
@group(0) @binding(7) var<storage, read_write> dk: array<V>;         // dk: (B*T, HKV*D)
@group(0) @binding(8) var<storage, read_write> dv: array<V>;         // dv: (B*T, HKV*D)

var<workgroup> qt: array<V, {{TKN}}>;          // query rows t0.. of the tile, row i at (i - t0) * N
var<workgroup> gt: array<V, {{TKN}}>;          // their dO rows
var<workgroup> stt: array<vec2<f32>, {{TK}}>;  // their (lse, delta)

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let nw = (p.nblk + WG - 1u) / WG;                 // workgroups per (batch, kv head)
    let widx = wid.x + wid.y * nwg.x;                 // (b, c, workgroup block), block fastest
    if (widx >= p.B * p.HKV * nw) { return; }         // the whole workgroup: uniform
    let wb = widx % nw;                               // first keys first: the most rows see them
    let c = (widx / nw) % p.HKV;
    let b = widx / (nw * p.HKV);
    let blk = wb * WG + li;
    let j0 = blk * R;

    var kr: array<V, {{RN}}>;     // scale · k rows, row r at r * N
    var vr: array<V, {{RN}}>;     // v rows
    var ak: array<V, {{RN}}>;     // dk rows / scale
    var av: array<V, {{RN}}>;     // dv rows
    var vis: array<bool, R>;      // key j0 + r exists and is not padding
    var first = p.T;              // the first query row any of these keys is visible to
    for (var r = 0u; r < {{R}}u; r++) { // unroll
        let j = min(j0 + r, p.T - 1u);
        let base = ((b * p.T + j) * p.HKV + c) * N;
        for (var n = 0u; n < {{N}}u; n++) { // unroll
            kr[r * N + n] = k[base + n] * p.scale;
            vr[r * N + n] = v[base + n];
            ak[r * N + n] = V(0.0);
            av[r * N + n] = V(0.0);
        }
        vis[r] = j0 + r < p.T && (p.has_mask == 0u || mask[b * p.T + j] != 0u);
        if (vis[r]) { first = min(first, j0 + r); }
    }
    // The workgroup's first key: no query row before it sees any of its keys.
    let wfirst = min(wb * WG * R, p.T);
    for (var g = 0u; g < p.G; g++) {
        let h = c * p.G + g;
        for (var t0 = wfirst; t0 < p.T; t0 += TQ) {
            for (var e = li; e < TQ * N; e += WG) {
                let qb = ((b * p.T + min(t0 + e / N, p.T - 1u)) * p.H + h) * N + e % N;
                qt[e] = q[qb];
                gt[e] = d_o[qb];
            }
            for (var e = li; e < TQ; e += WG) {
                stt[e] = stats[(b * p.H + h) * p.T + min(t0 + e, p.T - 1u)];
            }
            workgroupBarrier();
            let tend = min(t0 + TQ, p.T);
            for (var i = max(t0, first); i < tend; i++) {
                let st = stt[i - t0];    // (lse, delta)
                let qb = (i - t0) * N;
                var s: array<f32, R>;     // scores
                var dp: array<f32, R>;    // dO_i · v_j
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    s[r] = 0.0;
                    dp[r] = 0.0;
                }
                for (var n = 0u; n < {{N}}u; n++) { // unroll
                    let qq = qt[qb + n];
                    let gg = gt[qb + n];
                    for (var r = 0u; r < {{R}}u; r++) { // unroll
                        s[r] += dotv(kr[r * N + n], qq);
                        dp[r] += dotv(vr[r * N + n], gg);
                    }
                }
                var pr: array<f32, R>;    // P, 0 where row i does not see key j0 + r
                var ds: array<f32, R>;    // dS / scale
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    pr[r] = 0.0;
                    ds[r] = 0.0;
                    if (vis[r] && i >= j0 + r) {
                        pr[r] = exp(s[r] - st.x);
                        ds[r] = pr[r] * (dp[r] - st.y);
                    }
                }
                for (var n = 0u; n < {{N}}u; n++) { // unroll
                    let qq = qt[qb + n];
                    let gg = gt[qb + n];
                    for (var r = 0u; r < {{R}}u; r++) { // unroll
                        ak[r * N + n] += ds[r] * qq;
                        av[r * N + n] += pr[r] * gg;
                    }
                }
            }
            workgroupBarrier();
        }
    }
    for (var r = 0u; r < {{R}}u; r++) { // unroll
        let j = j0 + r;
        if (j < p.T) {
            let base = ((b * p.T + j) * p.HKV + c) * N;
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                dk[base + n] = ak[r * N + n] * p.scale;
                dv[base + n] = av[r * N + n];
            }
        }
    }
}
