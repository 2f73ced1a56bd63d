// One decode step's attention, with what feeds it and what reads it folded into the one dispatch
// (batch 1, one new row at position p0; one workgroup, an invocation per query head):
// - q and the new key rotated by RoPE with rope_cache.wgsl's expressions, the rotated key and
//   the new value written into the caches at row p0 (by the first query head of each kv head);
// - causal GQA attention as attention_cached.wgsl computes it: keys 0..p0 from the caches, key
//   p0 from registers (the values just written there), the same online softmax in the same order;
// - with LoRA on the output projection, h (1, r) = o · Aᵀ once every head has stored its o.
// Head rows are vec4s (D % 8 == 0, so each half row is whole vec4s). q, k and v are either
// three bindings or one (packed side by side, the three projections' one product).
const N: u32 = {{N}}u;        // vec4s per head row (D / 4)
const HALF: u32 = {{HALF}}u;  // vec4s per half row (D / 8)

struct Params {
    p0: u32,       // the new row's position = cache rows filled before this call
    H: u32,        // query heads
    HKV: u32,      // key/value heads
    G: u32,        // H / HKV
    scale: f32,    // 1 / sqrt(D)
    rank: u32,     // rows of A (LoRA on o), 0 without
    koff: u32,     // packed q, k, v: the new key's first vec4
    voff: u32,     // ... and the new value's
}
@group(0) @binding(0) var<uniform> p: Params;
{{QKV_BINDINGS}}
@group(0) @binding({{B}}) var<storage, read_write> k: array<vec4<f32>>;   // key cache: (max_seq, HKV·D)
@group(0) @binding({{B1}}) var<storage, read_write> v: array<vec4<f32>>;   // value cache: (max_seq, HKV·D)
@group(0) @binding({{B2}}) var<storage, read> cs: array<vec4<f32>>;        // cos: (seq, D/2)
@group(0) @binding({{B3}}) var<storage, read> sn: array<vec4<f32>>;        // sin: (seq, D/2)
@group(0) @binding({{B4}}) var<storage, read_write> o: array<vec4<f32>>;   // o: (1, H·D)
{{LORA_BINDINGS}}
fn dotv(a: vec4<f32>, b: vec4<f32>) -> f32 { return dot(a, b); }

// One step of attention_cached's online softmax for score s: m (the running max) and l (the
// running sum) updated; returns (c, e), the old accumulator's rescale and the new value's weight.
fn online(m: ptr<function, f32>, l: ptr<function, f32>, s: f32) -> vec2<f32> {
    let mn = max(*m, s);
    let c = exp(*m - mn);
    let e = exp(s - mn);
    *l = *l * c + e;
    *m = mn;
    return vec2<f32>(c, e);
}

@compute @workgroup_size(64)
fn main(@builtin(local_invocation_index) li: u32) {
    if (li < p.H) {
        let h = li;
        let kvh = h / p.G;
        let qb = h * N;
        let nb = kvh * N;
        let tb = p.p0 * HALF;
{{ROTATE}}
        if (h % p.G == 0u) {
            let cb = (p.p0 * p.HKV + kvh) * N;
{{CACHE_STORE}}
        }
{{ACC_DECL}}
        var m = -1e30;    // running max of the scores
        var l = 0.0;      // running sum of exp(score - m)
        for (var j = 0u; j < p.p0; j++) {
            let kb = (j * p.HKV + kvh) * N;
            var s = 0.0;
{{SCORE}}
            let ce = online(&m, &l, s);
            let c = ce.x;
            let e = ce.y;
{{ACC_UPDATE}}
        }
        {
            var s = 0.0;
{{SCORE_NEW}}
            let ce = online(&m, &l, s);
            let c = ce.x;
            let e = ce.y;
{{ACC_UPDATE_NEW}}
        }
        let inv = 1.0 / l;
{{STORE}}
    }
{{LORA}}
}
