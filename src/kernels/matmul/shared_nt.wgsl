// C = alpha · A · Bᵀ + bias + beta · C      (x·Wᵀ in Hugging Face's [out, in] layout)
// Subgroup-shared A: each invocation computes a {{ROWS}}×8 block of C; the invocations of a
// subgroup share their block's rows of A, each loading a few and broadcasting them
// (subgroupBroadcast), so A is read once per subgroup instead of once per invocation; B is
// read in runs of 4 along K straight from storage. The workgroup is {{SG}} × {{R}} invocations:
// subgroup g of it is one block of {{ROWS}} rows, its lanes {{SG}} blocks of 8 columns.
struct Params {
    M: u32, N: u32, K: u32,
    ldb: u32,      // B row stride in storage words
    alpha: f32, beta: f32,
    has_bias: u32,
    qoff: u32,     // quantized B: word offset of the (scale, offset) words, N · ldb
    rank: u32,     // fused LoRA: r (the columns of lh and of lb or the rows of la)
    ls: f32,       // fused LoRA: s / alpha
    RM: u32,       // subgroups along M per workgroup (the other {{R}} / RM along N)
    _q1: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> a: array<{{A_ELEM}}>;      // A: (M, K) f32
@group(0) @binding(2) var<storage, read> b: array<{{B_ELEM}}>;      // B: (N, K) f32, packed 16-bit, or Q8/Q4 words
@group(0) @binding(3) var<storage, read> bias: array<f32>;          // bias: (N), read only if has_bias
@group(0) @binding(4) var<storage, read_write> c: array<f32>;       // C: (M, N)
{{LORA_BINDINGS}}
{{UNPACK}}
{{LOAD_A}}
{{LOAD_B}}

fn store_row(m: u32, n0: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (m >= p.M) { return; }
    let v = array<f32, 8>(lo.x, lo.y, lo.z, lo.w, hi.x, hi.y, hi.z, hi.w);
    for (var j = 0u; j < 8u; j++) {
        let n = n0 + j;
        if (n >= p.N) { return; }
        var r = p.alpha * v[j];
        if (p.has_bias != 0u) { r += bias[n]; }
        let idx = m * p.N + n;
        if (p.beta != 0.0) { r += p.beta * c[idx]; }
        c[idx] = r;
    }
}

// Every invocation runs to the end: subgroupBroadcast needs the whole subgroup. Rows and
// columns past the matrix are clamped on load and skipped on store.
@compute @workgroup_size({{WG}})
fn main(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) sid: u32,
) {
    let g = li / {{SG}}u;
    let m0 = (wid.y * p.RM + g % p.RM) * {{ROWS}}u;
    let n0 = ((wid.x * ({{R}}u / p.RM) + g / p.RM) * {{SG}}u + li % {{SG}}u) * 8u;
{{ACC_DECL}}
{{LOOP}}{{LORA}}{{STORE}}
}
