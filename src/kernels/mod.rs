//! Compute kernels: one op per file, its WGSL beside it, forward and backward
//! side by side, each with an f64 CPU reference and tests that run natively
//! (lavapipe) and in headless Chromium (SwiftShader).
//!
//! WGSL variants are made by textual substitution of a few `{{NAME}}` constants;
//! the substituted values are part of the pipeline cache key. Where a kernel family has
//! several implementations (the matrix products), [`tune`] chooses among them for the device
//! by measurement, after checking each against the reference kernel.

pub mod argmax;
pub mod attention;
pub mod attention_cached;
pub mod attention_decode;
pub mod cross_entropy;
pub mod elementwise;
pub mod embedding;
pub mod matmul;
pub mod optimizer;
pub mod perturb;
pub mod quant;
pub mod rmsnorm;
pub mod rope;
pub mod swiglu;

pub mod testutil;
pub mod tune;

pub use tune::{tune, use_reference, TuneCache, Tuned};

/// Replace each `{{KEY}}` in `src` with its value.
pub fn render(src: &str, vars: &[(&str, String)]) -> String {
    let mut s = src.to_string();
    for (k, v) in vars {
        s = s.replace(&format!("{{{{{k}}}}}"), v);
    }
    s
}

/// Keep the lines of one kernel of a template: a line `//#NAME` starts a section, which lasts
/// to the next such line or `//#end` and is kept only when NAME is one of `on`; lines outside
/// sections are always kept, the marker lines never.
pub fn sections(src: &str, on: &[&str]) -> String {
    let mut keep = true;
    let mut out = String::with_capacity(src.len());
    for line in src.lines() {
        match line.trim().strip_prefix("//#") {
            Some("end") => keep = true,
            Some(name) if !name.is_empty() && !name.contains(' ') => keep = on.contains(&name),
            _ if keep => {
                out.push_str(line);
                out.push('\n');
            }
            _ => {}
        }
    }
    out
}

/// WGSL helpers shared by kernels that read packed 16-bit weights.
/// `unpack2` turns one u32 holding two 16-bit values (element 2i in the low half) into f32.
pub fn unpack_fns(dtype: crate::base::dtype::DType) -> &'static str {
    match dtype {
        crate::base::dtype::DType::BF16 => {
            "fn unpack2(w: u32) -> vec2<f32> { return vec2<f32>(bitcast<f32>(w << 16u), bitcast<f32>(w & 0xffff0000u)); }\n"
        }
        crate::base::dtype::DType::F16 => "fn unpack2(w: u32) -> vec2<f32> { return unpack2x16float(w); }\n",
        crate::base::dtype::DType::F32 => "",
        crate::base::dtype::DType::Q8 | crate::base::dtype::DType::Q4 => quant::WGSL_FNS,
    }
}
