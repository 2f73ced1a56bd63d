// The running sum acc = Σ_chunks p·E of the one-pass lm_head + cross-entropy backward (rows of
// one token chunk, in place): with finish = 0, rescale each row by its factor before a new
// vocab chunk's p·E is added (the running max moved); with finish = 1, turn it into the
// gradient dx = (acc / sum − E[target]) · inv_count, which is (softmax − onehot(target))·E ·
// inv_count, and 0 for rows whose target is ignored (outside [0, V)).
// ELEM is vec4<f32> when C is a multiple of 4 (n and cols then count vec4s), else f32.
struct Params {
    n: u32,          // elements (of ELEM) of the token chunk: rows · cols
    cols: u32,       // elements per row
    row0: u32,       // index among all N positions of the token chunk's first row
    vocab: u32,      // V
    inv_count: f32,  // 1 / number of non-ignored positions
    finish: u32,     // 0: rescale, 1: finish
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> acc: array<{{ELEM}}>;   // (rows, C)
@group(0) @binding(2) var<storage, read> factor: array<f32>;           // (rows)
@group(0) @binding(3) var<storage, read> state: array<vec4<f32>>;      // (rows): max, sum, target logit
@group(0) @binding(4) var<storage, read> targets: array<i32>;          // (N)
@group(0) @binding(5) var<storage, read> et: array<{{ELEM}}>;          // (rows, C): E[target]

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = (wid.x + wid.y * nwg.x) * 64u + lane;
    if (i >= p.n) { return; }
    let r = i / p.cols;
    if (p.finish == 0u) {
        acc[i] = acc[i] * factor[r];
        return;
    }
    let t = targets[p.row0 + r];
    if (t >= 0 && u32(t) < p.vocab) {
        acc[i] = (acc[i] / state[r].y - et[i]) * p.inv_count;
    } else {
        acc[i] = {{ELEM}}(0.0);
    }
}
