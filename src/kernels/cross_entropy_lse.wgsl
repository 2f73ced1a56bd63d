// One vocab chunk of the online log-sum-exp (lm_head + cross-entropy).
// One workgroup per token row: the 64 lanes stride over the chunk's columns (coalesced reads),
// reduce the chunk's max and then its sum of exp(l - max) through workgroup memory, and lane 0
// folds them into the row's running (max, sum), rescaling the old sum by exp(old_max - new_max).
// It also picks the target's logit when the target falls in this chunk. After the last chunk
// it writes lse = max + log(sum) and the row's loss term (lse - logit[target]) * inv_count.
// For the one-pass backward it leaves p = exp(l - max) in the block (max: the running max after
// this chunk) and the factor exp(old_max - new_max) by which the rows of the running sum
// Σ p·E must be rescaled before this chunk's p·E joins it (0 for the first chunk).
struct Params {
    rows: u32,       // tokens in this token chunk
    cols: u32,       // vocab entries in this vocab chunk
    col0: u32,       // vocab id of the chunk's first column
    row0: u32,       // index among all N positions of the token chunk's first row
    vocab: u32,      // V: targets outside [0, V) are ignored (-100 and unvalidated ids)
    first: u32,      // 1 for the first vocab chunk: start a new running state
    last: u32,       // 1 for the last vocab chunk: write lse and row_loss
    inv_count: f32,  // 1 / number of non-ignored positions
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> logits: array<f32>;      // (rows, cols): logits in, p out
@group(0) @binding(2) var<storage, read> targets: array<i32>;           // (N)
@group(0) @binding(3) var<storage, read_write> state: array<vec4<f32>>; // (token_chunk): running max, running sum, target logit, unused
@group(0) @binding(4) var<storage, read_write> lse: array<f32>;         // (N)
@group(0) @binding(5) var<storage, read_write> row_loss: array<f32>;    // (N): 0 for ignored rows
@group(0) @binding(6) var<storage, read_write> factor: array<f32>;      // (token_chunk): rescale of the running Σ p·E

const WG: u32 = 64u;
var<workgroup> red: array<f32, 64>;

fn reduce_max(lane: u32, v: f32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane < s) { red[lane] = max(red[lane], red[lane + s]); }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

fn reduce_sum(lane: u32, v: f32) -> f32 {
    red[lane] = v;
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if (lane < s) { red[lane] = red[lane] + red[lane + s]; }
        workgroupBarrier();
    }
    let r = red[0];
    workgroupBarrier();
    return r;
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32,
        @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let r = wid.x + wid.y * nwg.x;
    if (r >= p.rows) { return; }
    let base = r * p.cols;
    // The target's logit, read before the block is overwritten (the barriers of the reductions
    // order this read before the writes below).
    let t = targets[p.row0 + r];
    let valid = t >= 0 && u32(t) < p.vocab;
    let here = valid && u32(t) >= p.col0 && u32(t) - p.col0 < p.cols;
    var chunk_tl = 0.0;
    if (lane == 0u && here) { chunk_tl = logits[base + u32(t) - p.col0]; }

    var mx = -3.4e38;
    for (var j = lane; j < p.cols; j += WG) { mx = max(mx, logits[base + j]); }
    let cmax = reduce_max(lane, mx);

    let st = state[r];   // meaningful only after the first chunk
    var m = cmax;
    if (p.first == 0u) { m = max(st.x, cmax); }
    var sum = 0.0;
    for (var j = lane; j < p.cols; j += WG) {
        let e = exp(logits[base + j] - m);
        sum += e;
        logits[base + j] = e;
    }
    let csum = reduce_sum(lane, sum);

    if (lane != 0u) { return; }
    var s = csum;
    var tl = 0.0;
    var f = 0.0;
    if (p.first == 0u) {
        f = exp(st.x - m);
        s = st.y * f + csum;
        tl = st.z;
    }
    if (here) { tl = chunk_tl; }
    factor[r] = f;
    state[r] = vec4<f32>(m, s, tl, 0.0);
    if (p.last != 0u) {
        let l = m + log(s);
        lse[p.row0 + r] = l;
        var contrib = 0.0;
        if (valid) { contrib = (l - tl) * p.inv_count; }
        row_loss[p.row0 + r] = contrib;
    }
}
