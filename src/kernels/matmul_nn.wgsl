// C = alpha · A · B + beta · C      (dy·W for the input gradient; B stored row-major (K, N))
// Each invocation computes an 8×8 block of C: per run of 4 along K it reads 8 rows of A
// (vec4 each) and 4 rows of B (8 contiguous values each).
struct Params {
    M: u32, N: u32, K: u32,
    ldb: u32,      // B row stride in storage words
    alpha: f32, beta: f32,
    _p0: u32, _p1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{A_ELEM}}>;      // A: (M, K) f32
@group(0) @binding(2) var<storage, read> b: array<{{B_ELEM}}>;      // B: (K, N) f32 or packed 16-bit
@group(0) @binding(3) var<storage, read_write> c: array<f32>;       // C: (M, N)

{{UNPACK}}
{{LOAD_A}}
{{LOAD_B8}}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 8u;
    if (m0 >= p.M || n0 >= p.N) { return; }
    var acc: array<vec4<f32>, 16>;
    for (var k = 0u; k < p.K; k += 4u) {
        var av: array<vec4<f32>, 8>;
        for (var i = 0u; i < 8u; i++) { av[i] = load_a4(m0 + i, k); }
        for (var kk = 0u; kk < 4u; kk++) {
            let row = min(k + kk, p.K - 1u);   // A is zero past K, so a clamped row adds nothing
            var blo: vec4<f32>; var bhi: vec4<f32>;
            load_b8(row, n0, &blo, &bhi);
            for (var i = 0u; i < 8u; i++) {
                let s = av[i][kk];
                acc[2u * i] += s * blo;
                acc[2u * i + 1u] += s * bhi;
            }
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
