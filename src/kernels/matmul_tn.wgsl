// C = alpha · Aᵀ · B + beta · C      (weight gradients: dB = s·dyᵀ·h, dA = s·gᵀ·x; contraction over tokens)
// Each invocation computes an 8×8 block of C as a sum over K of outer products of
// 8 contiguous values of a row of A and 8 of the same row of B.
struct Params {
    M: u32, N: u32, K: u32,
    _p0: u32,
    alpha: f32, beta: f32,
    _p1: u32, _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{A_ELEM}}>;      // A: (K, M) f32
@group(0) @binding(2) var<storage, read> b: array<{{B_ELEM}}>;      // B: (K, N) f32
@group(0) @binding(3) var<storage, read_write> c: array<f32>;       // C: (M, N)

{{LOAD_A8}}
{{LOAD_B8}}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 8u;
    if (m0 >= p.M || n0 >= p.N) { return; }
    var acc: array<vec4<f32>, 16>;
    for (var k = 0u; k < p.K; k++) {
        var alo: vec4<f32>; var ahi: vec4<f32>;
        var blo: vec4<f32>; var bhi: vec4<f32>;
        load_a8(k, m0, &alo, &ahi);
        load_b8(k, n0, &blo, &bhi);
        for (var i = 0u; i < 4u; i++) {
            acc[2u * i] += alo[i] * blo;
            acc[2u * i + 1u] += alo[i] * bhi;
            acc[2u * (i + 4u)] += ahi[i] * blo;
            acc[2u * (i + 4u) + 1u] += ahi[i] * bhi;
        }
    }
    for (var i = 0u; i < 8u; i++) {
        let m = m0 + i;
        if (m >= p.M) { break; }
        for (var j = 0u; j < 8u; j++) {
            let n = n0 + j;
            if (n >= p.N) { break; }
            var v = p.alpha * acc[2u * i + j / 4u][j % 4u];
            let idx = m * p.N + n;
            if (p.beta != 0.0) { v += p.beta * c[idx]; }
            c[idx] = v;
        }
    }
}
