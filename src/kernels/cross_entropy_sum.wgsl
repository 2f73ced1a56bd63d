// loss[0] = Σ row_loss: one workgroup, 64 strided partial sums, then a tree (deterministic).
struct Params {
    n: u32,          // N
    _p0: u32, _p1: u32, _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> row_loss: array<f32>;    // (N)
@group(0) @binding(2) var<storage, read_write> loss: array<f32>;  // (1)

var<workgroup> red: array<f32, 64>;

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) lane: u32) {
    var s = 0.0;
    for (var j = lane; j < p.n; j += 64u) { s += row_loss[j]; }
    red[lane] = s;
    workgroupBarrier();
    for (var k = 32u; k > 0u; k = k / 2u) {
        if (lane < k) { red[lane] = red[lane] + red[lane + k]; }
        workgroupBarrier();
    }
    if (lane == 0u) { loss[0] = red[0]; }
}
