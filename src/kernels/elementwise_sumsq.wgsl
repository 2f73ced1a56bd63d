// out[g] (+)= Σ term(x[i]) over the elements i that workgroup g visits (grid stride over all
// workgroups). term is x² (first stage) or x (second stage, summing the partials).
// T is vec4<f32> when the element count is a multiple of 4, else f32.
struct Params {
    n: u32,           // elements of T in x
    accumulate: u32,  // 1: add to out[g] instead of overwriting it
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<{{T}}>;      // x: (n,)
@group(0) @binding(2) var<storage, read_write> out: array<f32>; // out: (workgroups,)

const WG: u32 = 256u;
var<workgroup> sh: array<f32, 256>;

fn term(v: {{T}}) -> f32 { return {{TERM}}; }

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    var s = 0.0;
    for (var i = wid.x * WG + lid.x; i < p.n; i += nwg.x * WG) {
        s += term(x[i]);
    }
    sh[lid.x] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k >>= 1u) {
        if (lid.x < k) { sh[lid.x] += sh[lid.x + k]; }
        workgroupBarrier();
    }
    if (lid.x == 0u) {
        var r = sh[0];
        if (p.accumulate != 0u) { r += out[wid.x]; }
        out[wid.x] = r;
    }
}
