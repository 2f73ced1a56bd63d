// Elementwise ops over flat f32 tensors of `n` elements of T (T is vec4<f32> when the
// element count is a multiple of 4, else f32). Each workgroup covers 64·ITEMS consecutive
// elements, its invocations striding by 64 so neighbouring invocations touch neighbouring words.
struct Params {
    n: u32,        // elements of T in each tensor
    alpha: f32,    // axpy / scale factor
    value: f32,    // fill value
    _p0: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

const WG: u32 = 64u;
const ITEMS: u32 = 4u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let base = (wid.x + wid.y * nwg.x) * WG * ITEMS + lid.x;
    for (var k = 0u; k < ITEMS; k++) {
        let i = base + k * WG;
        if (i < p.n) {
            {{BODY}}
        }
    }
}
