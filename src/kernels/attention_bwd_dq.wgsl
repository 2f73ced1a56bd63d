// Attention backward, step 2: dq_i = scale · Σ_j P_ij (dO_i·v_j − delta_i) k_j, with
// P_ij = exp(scale · q_i·k_j − lse_i) recomputed key by key (nothing of size T×T stored).
// One invocation per R consecutive query rows of one (batch, head). Two kernels from this one
// template, as attention_fwd.wgsl: untiled (keys read from storage by each invocation) and tiled
// (a workgroup streams the keys of WG consecutive blocks through workgroup memory, TK at a time);
// the rows an invocation takes and the walk over its keys are attention_rows.wgsl and
// attention_keys.wgsl, shared with attention_fwd.wgsl.
// Loops marked `// unroll` are expanded by the launcher.
// Every per-invocation array is zeroed by explicit stores, never by the declaration's implicit
// zero value: Chrome (Tint + SwiftShader) does not re-zero a `var` declared inside a loop on each
// iteration, so it would carry the previous key's values (lavapipe does re-zero it).
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)
const R: u32 = {{R}}u;      // query rows per invocation
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
    // For each visible key j, its rows at kb (attention_keys.wgsl opens the two loops):
{{KEYS}}
            var s: array<f32, R>;     // scores
            var dp: array<f32, R>;    // dO_i · v_j
            for (var r = 0u; r < {{R}}u; r++) { // unroll
                s[r] = 0.0;
                dp[r] = 0.0;
            }
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                let kk = {{KS}}[kb + n];
                let vv = {{VS}}[kb + n];
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
                let kk = {{KS}}[kb + n];
                for (var r = 0u; r < {{R}}u; r++) { // unroll
                    acc[r * N + n] += ds[r] * kk;
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
            let base = ((b * p.T + i) * p.H + h) * N;
            for (var n = 0u; n < {{N}}u; n++) { // unroll
                dq[base + n] = acc[r * N + n] * p.scale;
            }
        }
    }
}
