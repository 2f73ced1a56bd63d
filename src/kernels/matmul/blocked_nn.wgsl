// C = alpha · A · B + beta · C      (dy·W for the input gradient; B stored row-major (K, N))
// Each invocation computes a {{ROWS}}×8 block of C (8×8; fewer rows for a few tokens): per run of 4 along K it reads 8 rows of A
// (vec4 each) and 4 rows of B (8 contiguous values each).
struct Params {
    M: u32, N: u32, K: u32,
    ldb: u32,      // B row stride in storage words
    alpha: f32, beta: f32,
    _p0: u32,
    qoff: u32,     // quantized B: word offset of the (scale, offset) words, K · ldb
    rank: u32,     // fused LoRA: r (the columns of lh and of lb or the rows of la)
    ls: f32,       // fused LoRA: s / alpha
    _q0: u32, _q1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{A_ELEM}}>;      // A: (M, K) f32
@group(0) @binding(2) var<storage, read> b: array<{{B_ELEM}}>;      // B: (K, N) f32, packed 16-bit, or Q8/Q4 words
@group(0) @binding(3) var<storage, read_write> c: array<f32>;       // C: (M, N)
{{LORA_BINDINGS}}
{{UNPACK}}
{{LOAD_A}}
{{LOAD_B8}}

fn store_row(m: u32, n0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (m >= p.M) { return; }
    let v = array<f32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    for (var j = 0u; j < 8u; j++) {
        let n = n0 + j;
        if (n >= p.N) { return; }
        var r = p.alpha * v[j];
        let idx = m * p.N + n;
        if (p.beta != 0.0) { r += p.beta * c[idx]; }
        c[idx] = r;
    }
}

// One-dimensional workgroups of WG_X × WG_Y invocations, x fastest: a CPU adapter runs a
// workgroup's consecutive invocations as the lanes of one SIMD vector (lavapipe vectorises
// along x only, so a 1×64 workgroup would run 64 one-lane vectors).
@compute @workgroup_size({{WG_X}} * {{WG_Y}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) li: u32) {
    let gid = vec2<u32>(wid.x * {{WG_X}}u + li % {{WG_X}}u, wid.y * {{WG_Y}}u + li / {{WG_X}}u);
    let m0 = gid.y * {{ROWS}}u;
    let n0 = gid.x * 8u;
    if (m0 >= p.M || n0 >= p.N) { return; }
{{ACC_DECL}}
    for (var k = 0u; k < p.K; k += 4u) {
{{BODY}}
    }
{{LORA}}{{STORE}}
}
