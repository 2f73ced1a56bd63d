// In place: logits → dlogits = (softmax - onehot(target)) * inv_count, with softmax = exp(l - lse);
// rows whose target is ignored (outside [0, V)) get 0. Each invocation does 4 columns of one row.
struct Params {
    rows: u32,       // tokens in this token chunk
    cols: u32,       // vocab entries in this vocab chunk
    col0: u32,       // vocab id of the chunk's first column
    row0: u32,       // index among all N positions of the token chunk's first row
    vocab: u32,      // V
    inv_count: f32,  // 1 / number of non-ignored positions
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> g: array<f32>;    // (rows, cols): logits in, dlogits out
@group(0) @binding(2) var<storage, read> targets: array<i32>;    // (N)
@group(0) @binding(3) var<storage, read> lse: array<f32>;        // (N), saved by the forward

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let idx = (wid.x + wid.y * nwg.x) * 64u + lane;
    let per_row = (p.cols + 3u) / 4u;
    let r = idx / per_row;
    if (r >= p.rows) { return; }
    let c0 = (idx % per_row) * 4u;
    let t = targets[p.row0 + r];
    let valid = t >= 0 && u32(t) < p.vocab;
    let l = lse[p.row0 + r];
    let base = r * p.cols;
    for (var k = 0u; k < 4u; k++) {
        let c = c0 + k;
        if (c >= p.cols) { break; }
        var v = 0.0;
        if (valid) {
            v = exp(g[base + c] - l);
            if (p.col0 + c == u32(t)) { v -= 1.0; }
            v *= p.inv_count;
        }
        g[base + c] = v;
    }
}
