// out[n, :] = table[ids[n] − start, :] for the tokens whose id falls in this chunk of the
// embedding matrix (rows start .. start + rows); other tokens are left alone, except that the
// last chunk writes zeros for ids past the end of the vocabulary.
// One invocation copies 4 columns of one token; the table may be f32, packed 16-bit or Q8/Q4.
struct Params {
    n: u32,         // tokens N
    c: u32,         // columns C
    ldw: u32,       // table row stride in storage words (f32: C; 16-bit: ceil(C/2); Q8/Q4: 8 per group)
    start: u32,     // first vocabulary row held by this chunk
    rows: u32,      // rows in this chunk
    zero_oob: u32,  // 1 in the last chunk: ids ≥ start + rows give zeros
    groups: u32,    // ceil(C / 4)
    qoff: u32,      // quantized table: word offset of the (scale, offset) words, rows · ldw
    id0: u32,       // the id of out's row n is ids[id0 + n]
    _p0: u32, _p1: u32, _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> ids: array<u32>;            // ids: (N)
@group(0) @binding(2) var<storage, read> table: array<{{TB}}>;       // table chunk: (rows, C) (Q8/Q4: codes, then params)
@group(0) @binding(3) var<storage, read_write> out: array<{{TO}}>;   // out: (N, C)

{{UNPACK}}
{{LOAD}}
{{STORE}}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let idx = (wid.x + wid.y * nwg.x) * 64u + lid.x;
    if (idx >= p.n * p.groups) { return; }
    let tok = idx / p.groups;
    let c0 = (idx % p.groups) * 4u;
    let id = ids[p.id0 + tok];
    if (id < p.start) { return; }
    let r = id - p.start;
    if (r >= p.rows) {
        if (p.zero_oob != 0u) { store4(tok, c0, vec4<f32>(0.0)); }
        return;
    }
    store4(tok, c0, load4(r, c0));
}
