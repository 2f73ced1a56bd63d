// Decoding's norm and LoRA down-products in one dispatch, for one row x (1, C):
//   y = w · (x · rstd), rstd = 1 / sqrt(mean(x²) + eps)   (as rmsnorm_fwd.wgsl, bit for bit)
//   h_j (1, r) = y · A_jᵀ for each of the {{J}} projections that read y (A_j (r, C) f32)
// One workgroup: the norm as rmsnorm_fwd's one row, then invocation i sums rows i, i + 64, ...
// of the stacked A_j, each through the whole of C in order (T is vec4<f32> when C % 4 == 0).
struct Params {
    c: u32,     // columns C
    l: u32,     // row length in elements of T (C or C/4)
    r: u32,     // rank: rows of each A_j
    eps: f32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;          // x: (1, C)
@group(0) @binding(2) var<storage, read> w: array<{{T}}>;          // w: (C)
@group(0) @binding(3) var<storage, read_write> y: array<{{T}}>;    // y: (1, C)
{{BINDINGS}}
const WG: u32 = 64u;
var<workgroup> sh: array<f32, 64>;

fn hsum(v: {{T}}) -> f32 { return {{HSUM}}; }

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_id) lid: vec3<u32>) {
    let base = 0u;
{{NORM_ROW}}
    // y as stored is what the products read: make every invocation's stores visible.
    storageBarrier();
    for (var jt = lid.x; jt < {{J}}u * p.r; jt += WG) {
        let j = jt / p.r;
        let t = jt % p.r;
        let base = t * p.l;
        var acc = 0.0;
{{SUMS}}
    }
}
