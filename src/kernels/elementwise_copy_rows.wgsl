// dst[dst_off + i] = src[src_off + i] for i < n: copies whole rows between two f32 matrices of
// the same row length (the decoder's new k/v rows into its KV cache, the last hidden row).
// T is vec4<f32> when the row length is a multiple of 4 (n and offsets then count vec4s), else f32.
struct Params {
    n: u32,        // elements (of T) to copy
    src_off: u32,  // first element read from src
    dst_off: u32,  // first element written in dst
    _p0: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<{{T}}>;         // src: (src_rows, C)
@group(0) @binding(2) var<storage, read_write> dst: array<{{T}}>;   // dst: (dst_rows, C)

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
            dst[p.dst_off + i] = src[p.src_off + i];
        }
    }
}
