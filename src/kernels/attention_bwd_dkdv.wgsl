// Attention backward, step 3: for key j of kv head c, summed over the G query heads h of its
// group and the query rows i >= j that see it:
//   dv_j = Σ P_ij dO_i,    dk_j = scale · Σ P_ij (dO_i·v_j − delta_i) q_i,
// with P_ij = exp(scale · q_i·k_j − lse_i) recomputed row by row (no atomics, no T×T storage).
// One invocation per R consecutive key rows of one (batch, kv head). Two kernels from this one
// template, as attention_fwd.wgsl: untiled (query rows read from storage by each invocation) and
// tiled (a workgroup takes WG consecutive blocks of key rows and streams the query rows that see
// its first key through workgroup memory, TQ at a time per query head of the group, so each q
// and dO row and its (lse, delta) is read from storage once per workgroup).
// Loops marked `// unroll` are expanded by the launcher.
// Every per-invocation array is zeroed by explicit stores, never by the declaration's implicit
// zero value: Chrome (Tint + SwiftShader) does not re-zero a `var` declared inside a loop on each
// iteration, so it would carry the previous key's values (lavapipe does re-zero it).
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // key rows per invocation
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
//#tiled
const TQ: u32 = {{TK}}u;    // query rows per tile
var<workgroup> qt: array<V, {{TKN}}>;          // query rows t0.. of the tile, row i at (i - t0) * N
var<workgroup> gt: array<V, {{TKN}}>;          // their dO rows
var<workgroup> stt: array<vec2<f32>, {{TK}}>;  // their (lse, delta)
//#end

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
//#untiled
    let idx = (wid.x + wid.y * nwg.x) * WG + li;      // (b, c, block), block fastest
    if (idx >= p.B * p.HKV * p.nblk) { return; }
    let blk = idx % p.nblk;                           // first keys first: the most rows see them
    let c = (idx / p.nblk) % p.HKV;
    let b = idx / (p.nblk * p.HKV);
//#tiled
    let nw = (p.nblk + WG - 1u) / WG;                 // workgroups per (batch, kv head)
    let widx = wid.x + wid.y * nwg.x;                 // (b, c, workgroup block), block fastest
    if (widx >= p.B * p.HKV * nw) { return; }         // the whole workgroup: uniform
    let wb = widx % nw;                               // first keys first: the most rows see them
    let c = (widx / nw) % p.HKV;
    let b = widx / (nw * p.HKV);
    let blk = wb * WG + li;
//#end
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
    // Query rows are taken from `start` to T in passes of `step` rows (untiled: one pass from
    // this invocation's first row; tiled: the workgroup's first key, the same for all).
//#untiled
    let start = first;
    let step = max(p.T - first, 1u);
//#tiled
    let start = min(wb * WG * R, p.T);
    let step = TQ;
//#end
    for (var g = 0u; g < p.G; g++) {
        let h = c * p.G + g;
        for (var t0 = start; t0 < p.T; t0 += step) {
//#tiled
            for (var e = li; e < TQ * N; e += WG) {
                let qb = ((b * p.T + min(t0 + e / N, p.T - 1u)) * p.H + h) * N + e % N;
                qt[e] = q[qb];
                gt[e] = d_o[qb];
            }
            for (var e = li; e < TQ; e += WG) {
                stt[e] = stats[(b * p.H + h) * p.T + min(t0 + e, p.T - 1u)];
            }
            workgroupBarrier();
//#end
            let tend = min(t0 + step, p.T);
            for (var i = max(t0, first); i < tend; i++) {
//#untiled
                let st = stats[(b * p.H + h) * p.T + i];    // (lse, delta)
                let qb = ((b * p.T + i) * p.H + h) * N;
//#tiled
                let st = stt[i - t0];                       // (lse, delta)
                let qb = (i - t0) * N;
//#end
                var s: array<f32, R>;     // scores
                var dp: array<f32, R>;    // dO_i · v_j
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    s[r] = 0.0;
                    dp[r] = 0.0;
                }
                for (var n = 0u; n < {{N}}u; n++) { // unroll
                    let qq = {{QS}}[qb + n];
                    let gg = {{GS}}[qb + n];
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
                    let qq = {{QS}}[qb + n];
                    let gg = {{GS}}[qb + n];
                    for (var r = 0u; r < {{R}}u; r++) { // unroll
                        ak[r * N + n] += ds[r] * qq;
                        av[r * N + n] += pr[r] * gg;
                    }
                }
            }
//#tiled
            workgroupBarrier();
//#end
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
