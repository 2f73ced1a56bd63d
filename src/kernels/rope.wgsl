// Rotary embedding in place, HF rotate-half convention, on x (rows, heads·D):
// for j < D/2 at position t = row % seq + pos0 (pos0 = 0 in training; the decoder's offset),
//   x[j]       ← x[j]·cos[t, j] − x[j + D/2]·sign·sin[t, j]
//   x[j + D/2] ← x[j + D/2]·cos[t, j] + x[j]·sign·sin[t, j]
// sign = +1 rotates forward, −1 applies the transpose (the backward).
// One invocation handles 4 pairs of one (row, head): as vec4 (W = 4, when D/2 % 4 == 0)
// or as 4 scalars (W = 1).
struct Params {
    total: u32,   // invocations: rows · heads · groups
    heads: u32,
    half: u32,    // D/2
    seq: u32,
    groups: u32,  // ceil(half / 4)
    sign: f32,
    pos0: u32,    // position of row 0 (generation with a KV cache); rows ≤ seq − pos0 then
    _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<{{T}}>;  // x: (rows, heads·D)
@group(0) @binding(2) var<storage, read> cs: array<{{T}}>;       // cos: (seq, D/2)
@group(0) @binding(3) var<storage, read> sn: array<{{T}}>;       // sin: (seq, D/2)

const W: u32 = {{W}}u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = (wid.x + wid.y * nwg.x) * 64u + lid.x;
    if (idx >= p.total) { return; }
    let g = idx % p.groups;
    let rh = idx / p.groups;          // row · heads + head
    let row = rh / p.heads;
    let xbase = rh * 2u * p.half;     // start of this (row, head)'s D values
    let tbase = (row % p.seq + p.pos0) * p.half;
    for (var k = 0u; k < 4u; k += W) {
        let j = g * 4u + k;
        if (j < p.half) {
            let i0 = (xbase + j) / W;
            let i1 = (xbase + p.half + j) / W;
            let a = x[i0];
            let b = x[i1];
            let c = cs[(tbase + j) / W];
            let s = p.sign * sn[(tbase + j) / W];
            x[i0] = a * c - b * s;
            x[i1] = b * c + a * s;
        }
    }
}
