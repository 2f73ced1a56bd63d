// Causal GQA attention of n new query rows against a KV cache (generation, batch 1):
// query row i is at position p0 + i and attends cache rows [0, p0 + i]:
//   o[i, h] = softmax_j(scale · q[i, h]·k[j, h / G]) · v[j, h / G]
// One invocation per (query row, head), streaming keys through an online softmax.
// V is vec4<f32> when D % 4 == 0, else f32; N values of V make one head row of D floats.
// The launcher writes out the per-dimension lines (the Q_LOAD .. STORE slots), so q and the
// accumulator are named variables that stay in registers.
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)

struct Params {
    n: u32,        // new query rows
    p0: u32,       // position of query row 0 = cache rows already filled before this call
    H: u32,        // query heads
    HKV: u32,      // key/value heads
    G: u32,        // H / HKV: query heads per kv head
    scale: f32,    // 1 / sqrt(D)
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> q: array<V>;            // q: (n, H*D), after RoPE
@group(0) @binding(2) var<storage, read> k: array<V>;            // k cache: (max_seq, HKV*D), rows < p0 + n valid
@group(0) @binding(3) var<storage, read> v: array<V>;            // v cache: (max_seq, HKV*D)
@group(0) @binding(4) var<storage, read_write> o: array<V>;      // o: (n, H*D)

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let idx = (wid.x + wid.y * nwg.x) * {{WG}}u + li;    // (row, head), head fastest
    if (idx >= p.n * p.H) { return; }
    // Last rows first: they see the most keys, and lavapipe's threads take workgroups in order.
    let i = p.n - 1u - idx / p.H;
    let h = idx % p.H;
    let kvh = h / p.G;
    let qb = (i * p.H + h) * N;
{{Q_LOAD}}
{{ACC_DECL}}
    var m = -1e30;    // running max of the scores
    var l = 0.0;      // running sum of exp(score - m)
    let jend = p.p0 + i + 1u;
    for (var j = 0u; j < jend; j++) {
        let kb = (j * p.HKV + kvh) * N;
        var s = 0.0;
{{SCORE}}
        let mn = max(m, s);
        let c = exp(m - mn);     // rescale factor of the old accumulator
        let e = exp(s - mn);
        l = l * c + e;
        m = mn;
{{ACC_UPDATE}}
    }
    // Key p0 + i is always seen, so l ≥ 1.
    let inv = 1.0 / l;
{{STORE}}
}
