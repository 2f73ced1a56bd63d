// Attention backward, step 1: delta = rowsum(dO ∘ O) for every (batch, head, query row),
// packed with that row's lse so the next two kernels read one buffer for both.
alias V = {{V}};
const N: u32 = {{N}}u;      // V values per head row (D / width)

struct Params { B: u32, T: u32, H: u32, HKV: u32, G: u32, has_mask: u32, scale: f32, nblk: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> o: array<V>;                    // o: (B*T, H*D)
@group(0) @binding(2) var<storage, read> d_o: array<V>;                  // dO: (B*T, H*D)
@group(0) @binding(3) var<storage, read> lse: array<f32>;                // lse: (B, H, T)
@group(0) @binding(4) var<storage, read_write> stats: array<vec2<f32>>;  // (lse, delta): (B, H, T)

fn dotv(a: V, b: V) -> f32 { {{DOT}} }

@compute @workgroup_size({{WG}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) li: u32) {
    let idx = (wid.x + wid.y * nwg.x) * {{WG}}u + li;     // (b, h, i), i fastest
    if (idx >= p.B * p.H * p.T) { return; }
    let i = idx % p.T;
    let h = (idx / p.T) % p.H;
    let b = idx / (p.T * p.H);
    let base = ((b * p.T + i) * p.H + h) * N;
    var d = 0.0;
    for (var n = 0u; n < N; n++) {
        d += dotv(d_o[base + n], o[base + n]);
    }
    stats[idx] = vec2<f32>(lse[idx], d);
}
