// p += alpha · z, z ~ N(0, 1) regenerated from (key, element index), never stored (MeZO).
// Elements come in blocks of 4: block b hashes (b, stream, key) twice through pcg4d into four
// u32 words, two Box–Muller pairs, giving z[4b .. 4b+4) = (r0 cos t0, r0 sin t0, r1 cos t1, r1 sin t1).
// kernels/perturb.rs (`z_host`) computes the same numbers on the host; keep the two in step.
struct Params {
    n: u32,        // elements of p
    alpha: f32,    // p += alpha · z
    key_lo: u32,   // the (seed, stream) key, mixed on the host
    key_hi: u32,
    stream: u32,   // the tensor's stream
    _p0: u32,
    _p1: u32,
    _p2: u32,
}
@group(0) @binding(0) var<uniform> prm: Params;
@group(0) @binding(1) var<storage, read_write> p: array<f32>;   // (n,)

const WG: u32 = 64u;
// Blocks of 4 elements per invocation, strided by WG.
const ITEMS: u32 = 4u;
const SQRT2: f32 = 1.4142135;
const LN2: f32 = 0.6931472;
// 2π / 2^24: one step of the angle.
const ANGLE_STEP: f32 = 3.7450704e-7;

// Jarzynski & Olano 2020, "Hash Functions for GPU Rendering" (u32 arithmetic wraps).
fn pcg4d(a: vec4<u32>) -> vec4<u32> {
    var v = a * 1664525u + 1013904223u;
    v.x += v.y * v.w; v.y += v.z * v.x; v.z += v.x * v.y; v.w += v.y * v.z;
    v = v ^ (v >> vec4<u32>(16u));
    v.x += v.y * v.w; v.y += v.z * v.x; v.z += v.x * v.y; v.w += v.y * v.z;
    return v;
}

// log, sin and cos are written out with +, −, ·, / only (WGSL leaves the built-ins' accuracy to
// the backend: SwiftShader's are off by ~1e-4), so every backend and the host agree to a few ulps.

// ln(k · 2^-24) for 1 ≤ k ≤ 2^24: k = 2^e · f with f in [√½, √2], ln f = 2 atanh(s) with
// s = (f − 1)/(f + 1), |s| ≤ 0.172, by its series to s^9 (error < 2e-9).
fn ln_u(k: u32) -> f32 {
    var e = firstLeadingBit(k);
    var f = bitcast<f32>(((k << (23u - min(e, 23u))) & 0x7fffffu) | 0x3f800000u);
    if (f > SQRT2) {
        f = f * 0.5;
        e = e + 1u;
    }
    let s = (f - 1.0) / (f + 1.0);
    let s2 = s * s;
    let poly = 1.0 + s2 * (0.33333334 + s2 * (0.2 + s2 * (0.14285715 + s2 * 0.11111111)));
    return f32(i32(e) - 24) * LN2 + 2.0 * s * poly;
}

// (cos, sin) of 2π·j/2^24 for 0 ≤ j < 2^24: the octant from j's top 3 bits, then Taylor
// polynomials on [0, π/4] (errors < 2e-9).
fn cos_sin_turn(j: u32) -> vec2<f32> {
    let o = j >> 21u;
    var r = j & 0x1fffffu;
    if ((o & 1u) != 0u) {
        r = 0x200000u - r;
    }
    let x = f32(r) * ANGLE_STEP;
    let x2 = x * x;
    let sn = x * (1.0 - x2 * (0.16666667 - x2 * (0.008333334 - x2 * (0.0001984127 - x2 * 2.7557319e-6))));
    let cs = 1.0 - x2 * (0.5 - x2 * (0.041666668 - x2 * (0.0013888889 - x2 * (2.4801588e-5 - x2 * 2.755732e-7))));
    var v = vec2<f32>(cs, sn);
    if ((((o + 1u) >> 1u) & 1u) != 0u) {
        v = vec2<f32>(sn, cs);
    }
    if ((((o + 2u) >> 2u) & 1u) != 0u) {
        v.x = -v.x;
    }
    if (o >= 4u) {
        v.y = -v.y;
    }
    return v;
}

// Two normals from two words: u1 = ((h1 >> 8) + 1)·2^-24 in (0, 1], angle 2π·(h2 >> 8)·2^-24.
fn box_muller(h1: u32, h2: u32) -> vec2<f32> {
    let r = sqrt(max(-2.0 * ln_u((h1 >> 8u) + 1u), 0.0));
    return r * cos_sin_turn(h2 >> 8u);
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let base = (wid.x + wid.y * nwg.x) * WG * ITEMS + lid.x;
    for (var k = 0u; k < ITEMS; k++) {
        let b = base + k * WG;
        let i0 = b * 4u;
        if (i0 >= prm.n) {
            break;
        }
        // Twice through pcg4d: consecutive blocks differ only in one low word.
        let h = pcg4d(pcg4d(vec4<u32>(b, prm.stream, prm.key_lo, prm.key_hi)));
        let z01 = box_muller(h.x, h.y);
        let z23 = box_muller(h.z, h.w);
        let z = vec4<f32>(z01, z23);
        for (var c = 0u; c < 4u; c++) {
            let i = i0 + c;
            if (i < prm.n) {
                p[i] = p[i] + prm.alpha * z[c];
            }
        }
    }
}
