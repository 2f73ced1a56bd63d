// C = alpha · A · Bᵀ + bias + beta · C      (x·Wᵀ in Hugging Face's [out, in] layout)
// Each invocation computes an 8×8 block of C, reading A and B in runs of 4 along K
// straight from storage (no workgroup memory: the fastest shape on CPU emulators).
struct Params {
    M: u32, N: u32, K: u32,
    ldb: u32,      // B row stride in storage words
    alpha: f32, beta: f32,
    has_bias: u32, _pad: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{A_ELEM}}>;      // A: (M, K) f32
@group(0) @binding(2) var<storage, read> b: array<{{B_ELEM}}>;      // B: (N, K) f32 or packed 16-bit
@group(0) @binding(3) var<storage, read> bias: array<f32>;          // bias: (N), read only if has_bias
@group(0) @binding(4) var<storage, read_write> c: array<f32>;       // C: (M, N)

{{UNPACK}}
{{LOAD_A}}
{{LOAD_B}}

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let m0 = gid.y * 8u;
    let n0 = gid.x * 8u;
    if (m0 >= p.M || n0 >= p.N) { return; }
    var acc: array<vec4<f32>, 16>;   // row i: acc[2i] = cols 0..3, acc[2i+1] = cols 4..7
    for (var k = 0u; k < p.K; k += 4u) {
        var av: array<vec4<f32>, 8>;
        for (var i = 0u; i < 8u; i++) { av[i] = load_a4(m0 + i, k); }
        let b0 = load_b4(n0 + 0u, k); let b1 = load_b4(n0 + 1u, k);
        let b2 = load_b4(n0 + 2u, k); let b3 = load_b4(n0 + 3u, k);
        let b4 = load_b4(n0 + 4u, k); let b5 = load_b4(n0 + 5u, k);
        let b6 = load_b4(n0 + 6u, k); let b7 = load_b4(n0 + 7u, k);
        for (var i = 0u; i < 8u; i++) {
            let x = av[i];
            acc[2u * i] += vec4<f32>(dot(x, b0), dot(x, b1), dot(x, b2), dot(x, b3));
            acc[2u * i + 1u] += vec4<f32>(dot(x, b4), dot(x, b5), dot(x, b6), dot(x, b7));
        }
    }
    for (var i = 0u; i < 8u; i++) {
        let m = m0 + i;
        if (m >= p.M) { break; }
        for (var j = 0u; j < 8u; j++) {
            let n = n0 + j;
            if (n >= p.N) { break; }
            var v = p.alpha * acc[2u * i + j / 4u][j % 4u];
            if (p.has_bias != 0u) { v += bias[n]; }
            let idx = m * p.N + n;
            if (p.beta != 0.0) { v += p.beta * c[idx]; }
            c[idx] = v;
        }
    }
}
