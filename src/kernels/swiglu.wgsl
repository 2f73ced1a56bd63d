// SwiGLU, elementwise over (N, F) flattened: T is vec4<f32> when N·F % 4 == 0, else f32.
//   forward:  out = silu(gate) · up,                  silu(g) = g · σ(g)
//   backward: dgate = dout · up · σ(g) · (1 + g · (1 − σ(g))),  dup = dout · silu(g)
// Each workgroup covers 64·ITEMS consecutive elements, its invocations striding by 64.
struct Params {
    n: u32,     // elements of T in each tensor
    _p0: u32, _p1: u32, _p2: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
{{BINDINGS}}

const WG: u32 = 64u;
const ITEMS: u32 = 4u;

fn sigmoid(g: {{T}}) -> {{T}} { return 1.0 / (1.0 + exp(-g)); }

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let base = (wid.x + wid.y * nwg.x) * WG * ITEMS + lid.x;
    for (var k = 0u; k < ITEMS; k++) {
        let i = base + k * WG;
        if (i < p.n) {
            let g = gate[i];
            let s = sigmoid(g);
            {{BODY}}
        }
    }
}
