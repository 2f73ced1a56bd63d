// Optimizer updates of one f32 parameter tensor of `n` elements of T (T is vec4<f32> when the
// element count is a multiple of 4, else f32), elementwise, PyTorch's formulas in f32.
// The gradient is multiplied by the clip factor of clip_grad_norm_, computed here from the
// global squared gradient norm so that no readback is needed between steps.
// `main` calls one update function ({{UPDATE}}: adamw, sgd or sgd_momentum); only the bindings
// that function uses are part of the pipeline's layout, in the order of their binding numbers.
struct Params {
    n: u32,          // elements of T in each tensor
    clip: u32,       // 1: g = grad · min(1, max_norm / (sqrt(norm_sq[0]) + 1e-6)); 0: g = grad
    max_norm: f32,
    lr: f32,         // SGD learning rate
    wd: f32,         // SGD weight decay (coupled: added to the gradient, as torch.optim.SGD does)
    decay: f32,      // AdamW: 1 - lr·weight_decay (decoupled, applied to the parameter first)
    beta1: f32,      // AdamW β1; SGD momentum μ
    beta2: f32,      // AdamW β2
    eps: f32,        // AdamW ε
    step_size: f32,  // AdamW: lr / (1 - β1^t)
    bc2_sqrt: f32,   // AdamW: sqrt(1 - β2^t)
    _p0: u32,
}
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> param: array<{{T}}>; // param: (n,)
@group(0) @binding(2) var<storage, read> grad: array<{{T}}>;        // grad: (n,), not modified
@group(0) @binding(3) var<storage, read> norm_sq: array<f32>;       // norm_sq: (1,) Σ grad² over all tensors
@group(0) @binding(4) var<storage, read_write> m: array<{{T}}>;     // m: (n,) AdamW exp_avg; SGD momentum_buffer
@group(0) @binding(5) var<storage, read_write> v: array<{{T}}>;     // v: (n,) AdamW exp_avg_sq

const WG: u32 = 64u;
const ITEMS: u32 = 4u;

// torch.nn.utils.clip_grad_norm_: clip_coef = max_norm / (total_norm + 1e-6), clamped to ≤ 1.
fn clip_factor() -> f32 {
    if (p.clip == 0u) {
        return 1.0;
    }
    return min(1.0, p.max_norm / (sqrt(norm_sq[0]) + 1e-6));
}

// torch.optim.AdamW (_single_tensor_adam with decoupled weight decay):
//   param *= 1 - lr·wd; exp_avg.lerp_(g, 1 - β1); exp_avg_sq = β2·exp_avg_sq + (1 - β2)·g²;
//   param += -step_size · exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - β2^t) + ε)
fn adamw(i: u32, g: {{T}}) {
    let m0 = m[i];
    let m1 = m0 + (1.0 - p.beta1) * (g - m0);
    let v1 = v[i] * p.beta2 + (1.0 - p.beta2) * (g * g);
    m[i] = m1;
    v[i] = v1;
    let denom = sqrt(v1) / p.bc2_sqrt + p.eps;
    param[i] = param[i] * p.decay - p.step_size * (m1 / denom);
}

// torch.optim.SGD without momentum: d = g + wd·param; param -= lr·d.
fn sgd(i: u32, g: {{T}}) {
    let w = param[i];
    param[i] = w - p.lr * (g + p.wd * w);
}

// torch.optim.SGD with momentum μ (dampening 0, not Nesterov): d = g + wd·param;
// buf = μ·buf + d (buf starts at zero, so the first step gives buf = d as torch's clone does);
// param -= lr·buf.
fn sgd_momentum(i: u32, g: {{T}}) {
    let w = param[i];
    let b = m[i] * p.beta1 + (g + p.wd * w);
    m[i] = b;
    param[i] = w - p.lr * b;
}

@compute @workgroup_size(64)
fn main(@builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_id) lid: vec3<u32>) {
    let c = clip_factor();
    let base = (wid.x + wid.y * nwg.x) * WG * ITEMS + lid.x;
    for (var k = 0u; k < ITEMS; k++) {
        let i = base + k * WG;
        if (i < p.n) {
            {{UPDATE}}(i, grad[i] * c);
        }
    }
}
