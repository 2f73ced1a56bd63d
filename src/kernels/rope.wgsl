// Rotary embedding in place, HF rotate-half convention, on x (rows, heads·D):
// for j < D/2 at position t = row % seq + pos0 (pos0 = 0 in training; the decoder's offset),
//   x[j]       ← x[j]·cos[t, j] − x[j + D/2]·sign·sin[t, j]
//   x[j + D/2] ← x[j + D/2]·cos[t, j] + x[j]·sign·sin[t, j]
// sign = +1 rotates forward, −1 applies the transpose (the backward).
// One invocation handles 4 pairs of one (row, head): as vec4 (W = 4, when D/2 % 4 == 0)
// or as 4 scalars (W = 1). The pair form (the //#pair sections) rotates a second tensor x2
// (rows, heads2·D) too, in the same dispatch: q and k, or dq and dk, the invocations past
// x's taking x2's.
struct Params {
    total: u32,   // invocations for x: rows · heads · groups
    heads: u32,
    half: u32,    // D/2
    seq: u32,
    groups: u32,  // ceil(half / 4)
    sign: f32,
    pos0: u32,    // position of row 0 (generation with a KV cache); rows ≤ seq − pos0 then
    total2: u32,  // invocations for x2 (the pair form; 0 otherwise)
    heads2: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> x: array<{{T}}>;  // x: (rows, heads·D)
@group(0) @binding(2) var<storage, read> cs: array<{{T}}>;       // cos: (seq, D/2)
@group(0) @binding(3) var<storage, read> sn: array<{{T}}>;       // sin: (seq, D/2)
//#pair
@group(0) @binding(4) var<storage, read_write> x2: array<{{T}}>; // x2: (rows, heads2·D)
//#end

const W: u32 = {{W}}u;

// Where pair k (0, W, ...) of invocation idx lies in a tensor of `heads` heads: the indices
// (in units of W) of its two halves and of its table entry, and whether j < D/2.
fn pair_at(idx: u32, heads: u32, k: u32) -> vec4<u32> {
    let g = idx % p.groups;
    let rh = idx / p.groups;          // row · heads + head
    let row = rh / heads;
    let xbase = rh * 2u * p.half;     // start of this (row, head)'s D values
    let tbase = (row % p.seq + p.pos0) * p.half;
    let j = g * 4u + k;
    return vec4<u32>((xbase + j) / W, (xbase + p.half + j) / W, (tbase + j) / W, u32(j < p.half));
}

// (a, b) rotated by the angle at table entry ti (times sign).
fn turn(a: {{T}}, b: {{T}}, ti: u32) -> array<{{T}}, 2> {
    let c = cs[ti];
    let s = p.sign * sn[ti];
    return array<{{T}}, 2>(a * c - b * s, b * c + a * s);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = (wid.x + wid.y * nwg.x) * 64u + lid.x;
    if (idx < p.total) {
        for (var k = 0u; k < 4u; k += W) {
            let at = pair_at(idx, p.heads, k);
            if (at.w == 1u) {
                let r = turn(x[at.x], x[at.y], at.z);
                x[at.x] = r[0];
                x[at.y] = r[1];
            }
        }
        return;
    }
//#pair
    let idx2 = idx - p.total;
    if (idx2 < p.total2) {
        for (var k = 0u; k < 4u; k += W) {
            let at = pair_at(idx2, p.heads2, k);
            if (at.w == 1u) {
                let r = turn(x2[at.x], x2[at.y], at.z);
                x2[at.x] = r[0];
                x2[at.y] = r[1];
            }
        }
    }
//#end
}
