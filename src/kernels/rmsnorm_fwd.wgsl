// y = w · (x · rstd), rstd = 1 / sqrt(mean(x²) + eps), per row; rstd is saved for backward.
// One workgroup per row: each invocation strides over the row (T is vec4<f32> when C % 4 == 0,
// else f32), then a workgroup tree reduction forms the sum of squares. The residual form (the
// //#residual sections) first adds a residual r into x in place (x ← x + r, the block's
// h = x + o_proj(...)), each invocation the elements it then reads.
struct Params {
    n: u32,     // rows N
    c: u32,     // columns C
    l: u32,     // row length in elements of T (C or C/4)
    eps: f32,
}
@group(0) @binding(0) var<uniform> p: Params;
//#plain
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;             // x: (N, C)
//#residual
@group(0) @binding(1) var<storage, read_write> x: array<{{T}}>;       // x: (N, C), += r
@group(0) @binding(5) var<storage, read> res: array<{{T}}>;           // r: (N, C)
//#end
@group(0) @binding(2) var<storage, read> w: array<{{T}}>;             // w: (C)
@group(0) @binding(3) var<storage, read_write> y: array<{{T}}>;       // y: (N, C)
@group(0) @binding(4) var<storage, read_write> rstd: array<f32>;      // rstd: (N)

const WG: u32 = 64u;
var<workgroup> sh: array<f32, 64>;

fn hsum(v: {{T}}) -> f32 { return {{HSUM}}; }

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let row = wid.x + wid.y * nwg.x;
    if (row >= p.n) { return; }
    let base = row * p.l;
//#residual
    for (var i = lid.x; i < p.l; i += WG) {
        x[base + i] = x[base + i] + res[base + i];
    }
//#end
{{NORM_ROW}}
    if (lid.x == 0u) { rstd[row] = r; }
}
