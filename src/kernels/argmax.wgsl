// pick = (the first index of the largest of x, the first index of a value that is not finite or
// 0xffffffff, that value's bits): greedy decoding's argmax on the GPU, so that the next token's
// forward can be recorded before this token's id is read back. One workgroup: invocation t scans
// t, t + 256, …, keeping the first largest value it meets; then invocation 0 combines the 256
// partial results, a tie going to the lower index, so the result is the host's argmax.
struct Params {
    n: u32,     // values in x
    _p0: u32, _p1: u32, _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;           // x: (n) logits
@group(0) @binding(2) var<storage, read_write> pick: array<u32>;  // pick: (3)

const WG: u32 = 256u;
const NONE: u32 = 0xffffffffu;
var<workgroup> best_v: array<f32, 256>;
var<workgroup> best_i: array<u32, 256>;
var<workgroup> bad_i: array<u32, 256>;

// WGSL lets a compiler assume that floats are finite, so this looks at the exponent bits.
fn finite(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7f800000u) != 0x7f800000u;
}

@compute @workgroup_size(256)
fn main(@builtin(local_invocation_index) t: u32) {
    var bv = 0.0;
    var bi = NONE;
    var bad = NONE;
    for (var i = t; i < p.n; i += WG) {
        let v = x[i];
        if (!finite(v)) {
            bad = min(bad, i);
        } else if (bi == NONE || v > bv) {
            bv = v;
            bi = i;
        }
    }
    best_v[t] = bv;
    best_i[t] = bi;
    bad_i[t] = bad;
    workgroupBarrier();
    if (t == 0u) {
        var v = 0.0;
        var i = NONE;
        var b = NONE;
        for (var j = 0u; j < WG; j++) {
            let ij = best_i[j];
            if (ij != NONE && (i == NONE || best_v[j] > v || (best_v[j] == v && ij < i))) {
                v = best_v[j];
                i = ij;
            }
            b = min(b, bad_i[j]);
        }
        pick[0] = select(i, 0u, i == NONE);
        pick[1] = b;
        var bits = 0u;
        if (b != NONE) {
            bits = bitcast<u32>(x[b]);
        }
        pick[2] = bits;
    }
}
