// dst[dst_off + i] = src[src_off + i] + beta · dst[dst_off + i] for i < n (dst not read when beta = 0):
// copies a range of rows between a full (N, C) tensor and a token chunk's (rows, C) scratch.
// ELEM is vec4<f32> when C is a multiple of 4 (n and offsets then count vec4s), else f32.
struct Params {
    n: u32,          // elements (of ELEM) to write
    src_off: u32,    // first element read from src
    dst_off: u32,    // first element written in dst
    beta: f32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<{{ELEM}}>;         // (rows, C) range of src
@group(0) @binding(2) var<storage, read_write> dst: array<{{ELEM}}>;   // (rows, C) range of dst

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i0 = ((wid.x + wid.y * nwg.x) * 64u + lane) * 4u;
    for (var k = 0u; k < 4u; k++) {
        let i = i0 + k;
        if (i >= p.n) { return; }
        var v = src[p.src_off + i];
        if (p.beta != 0.0) { v += p.beta * dst[p.dst_off + i]; }
        dst[p.dst_off + i] = v;
    }
}
