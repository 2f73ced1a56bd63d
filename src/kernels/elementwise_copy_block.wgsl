// dst[row0 + i, col0 + j] = src[i, j] for src (rows, W) f32 inside dst (·, LD) f32: a matrix
// placed as a block of a wider one (the decoder's block-diagonal LoRA B of q, k and v).
struct Params {
    n: u32,     // rows · W
    w: u32,     // W
    ld: u32,    // dst row length
    off: u32,   // row0 · LD + col0
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lid.x;
    if (i < p.n) {
        dst[p.off + (i / p.w) * p.ld + i % p.w] = src[i];
    }
}
