// Causal GQA attention forward, flash style: o = softmax(scale · q·kᵀ + causal/padding mask) · v.
// One invocation per R consecutive query rows of one (batch, head); keys are streamed one at a
// time through an online softmax, so nothing of size T×T exists. Saves lse for the backward.
// V is vec4<f32> when D % 4 == 0, else f32; N values of V make one head row of D floats.
// Two kernels from this one template (the launcher keeps the lines marked for the kernel it
// builds, see `sections` in attention.rs; KS and VS name the arrays keys are read from):
// untiled, each invocation reads its keys from storage, in one pass; tiled (for GPUs), a
// workgroup takes WG consecutive blocks of one (batch, head) and streams the keys its last row
// sees through workgroup memory, TK at a time, so each k and v row is read from storage once per
// workgroup. A row's arithmetic is the same in both, key by key in the same order. The rows an
// invocation takes and the walk over its keys are attention_rows.wgsl and attention_keys.wgsl,
// shared with attention_bwd_dq.wgsl.
// Loops marked `// unroll` are expanded by the launcher, so the per-invocation arrays are
// indexed by constants and stay in registers.
// Every per-invocation array is zeroed by explicit stores, never by the declaration's implicit
// zero value: Chrome (Tint + SwiftShader) does not re-zero a `var` declared inside a loop on each
// iteration, so it would carry the previous key's values (lavapipe does re-zero it).
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // query rows per invocation
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
//#tiled
const TK: u32 = {{TK}}u;    // keys per tile
var<workgroup> kt: array<V, {{TKN}}>;   // keys t0.. of the tile, key j at (j - t0) * N
var<workgroup> vt: array<V, {{TKN}}>;   // their values
//#end

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    // This invocation's rows, i0.. of head h of batch b (attention_rows.wgsl):
{{ROWS}}

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
    // For each visible key j, its rows at kb (attention_keys.wgsl opens the two loops):
{{KEYS}}
            var s: array<f32, R>;
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                s[r] = 0.0;
            }
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                let kk = {{KS}}[kb + n];
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
                let vv = {{VS}}[kb + n];
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    acc[r * N + n] = acc[r * N + n] * cr[r] + pr[r] * vv;
                }
            }
        }
//#tiled
        workgroupBarrier();
//#end
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
