// The decoder's new rows in one pass: q (n, Hq·D) rotated in place, k (n, Hkv·D) rotated into
// the key cache and v copied into the value cache, both at rows pos0.. (batch 1). The rotation
// is rope.wgsl's with sign +1, written the same way, so it rounds the same.
// One invocation handles 4 pairs of one (row, head), q heads first, then kv heads (which also
// copy their 8 values of v); as vec4 (W = 4, when D/2 % 4 == 0) or as 4 scalars (W = 1).
struct Params {
    total: u32,   // invocations: n · (Hq + Hkv) · groups
    hq: u32,
    hkv: u32,
    half: u32,    // D/2
    groups: u32,  // ceil(half / 4)
    pos0: u32,    // position of row 0; the cache rows written are pos0..pos0 + n
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<{{T}}>;   // q: (n, Hq·D)
@group(0) @binding(2) var<storage, read> k: array<{{T}}>;         // k: (n, Hkv·D)
@group(0) @binding(3) var<storage, read> v: array<{{T}}>;         // v: (n, Hkv·D)
@group(0) @binding(4) var<storage, read_write> ck: array<{{T}}>;  // key cache: (max_seq, Hkv·D)
@group(0) @binding(5) var<storage, read_write> cv: array<{{T}}>;  // value cache: (max_seq, Hkv·D)
@group(0) @binding(6) var<storage, read> cs: array<{{T}}>;        // cos: (seq, D/2)
@group(0) @binding(7) var<storage, read> sn: array<{{T}}>;        // sin: (seq, D/2)

const W: u32 = {{W}}u;

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = (wid.x + wid.y * nwg.x) * 64u + lid.x;
    if (idx >= p.total) { return; }
    let g = idx % p.groups;
    let rh = idx / p.groups;          // row · (Hq + Hkv) + head
    let heads = p.hq + p.hkv;
    let row = rh / heads;
    let head = rh % heads;
    let tbase = (row + p.pos0) * p.half;
    for (var kk = 0u; kk < 4u; kk += W) {
        let j = g * 4u + kk;
        if (j < p.half) {
            let c = cs[(tbase + j) / W];
            let s = sn[(tbase + j) / W];
            if (head < p.hq) {
                let base = (row * p.hq + head) * 2u * p.half;
                let i0 = (base + j) / W;
                let i1 = (base + p.half + j) / W;
                let a = q[i0];
                let b = q[i1];
                q[i0] = a * c - b * s;
                q[i1] = b * c + a * s;
            } else {
                let h = head - p.hq;
                let src = (row * p.hkv + h) * 2u * p.half;
                let dst = ((row + p.pos0) * p.hkv + h) * 2u * p.half;
                let a = k[(src + j) / W];
                let b = k[(src + p.half + j) / W];
                ck[(dst + j) / W] = a * c - b * s;
                ck[(dst + p.half + j) / W] = b * c + a * s;
                cv[(dst + j) / W] = v[(src + j) / W];
                cv[(dst + p.half + j) / W] = v[(src + p.half + j) / W];
            }
        }
    }
}
