// dx = beta·dx + r·w·dy − (r³/C)·x·Σ(dy·w·x), per row, with r = rstd saved by forward.
// One workgroup per row, like the forward (T is vec4<f32> when C % 4 == 0, else f32).
struct Params {
    n: u32,     // rows N
    c: u32,     // columns C
    l: u32,     // row length in elements of T (C or C/4)
    beta: f32,  // 0 overwrites dx (whatever it held), 1 accumulates
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> dy: array<{{T}}>;            // dy: (N, C)
@group(0) @binding(2) var<storage, read> x: array<{{T}}>;             // x: (N, C)
@group(0) @binding(3) var<storage, read> w: array<{{T}}>;             // w: (C)
@group(0) @binding(4) var<storage, read> rstd: array<f32>;            // rstd: (N)
@group(0) @binding(5) var<storage, read_write> dx: array<{{T}}>;      // dx: (N, C)

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
    var s = 0.0;
    for (var i = lid.x; i < p.l; i += WG) {
        s += hsum(dy[base + i] * w[i] * x[base + i]);
    }
    sh[lid.x] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (lid.x < k) { sh[lid.x] += sh[lid.x + k]; }
        workgroupBarrier();
    }
    let r = rstd[row];
    let coef = r * r * r * sh[0] / f32(p.c);
    for (var i = lid.x; i < p.l; i += WG) {
        var g = r * w[i] * dy[base + i] - coef * x[base + i];
        if (p.beta != 0.0) { g += p.beta * dx[base + i]; }
        dx[base + i] = g;
    }
}
