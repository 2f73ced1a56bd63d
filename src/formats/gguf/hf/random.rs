//! A GGUF of a model's shape with random weights and a stand-in tokenizer, written without
//! holding it in memory (`webtune make-gguf`, import benchmarks at real sizes).

use super::plan::gguf_name;
use crate::base::config::ModelConfig;
use crate::base::names::expected_tensors;
use std::io::Write;

/// A GGUF of `cfg`'s shape with random weights (F16 matrices, F32 norms and biases, uniform in
/// ±0.05 from `seed`) and a stand-in byte-level BPE tokenizer as large as a real one (3 special
/// tokens, the 256 byte tokens, then pairs and triples of bytes with their merges): what
/// `webtune make-gguf` writes to benchmark imports at real sizes without a download. Written
/// tensor by tensor into `w`; returns the bytes written.
pub fn write_random_model<W: Write>(cfg: &ModelConfig, seed: u64, w: &mut W) -> std::io::Result<u64> {
    use crate::base::config::Arch;
    use crate::formats::gguf::write::{T_F16 as F16, T_F32 as F32};
    let arch = match cfg.arch {
        Arch::Llama => "llama",
        Arch::Qwen2 => "qwen2",
    };
    // Byte-level BPE as real vocabularies are: the 256 byte tokens, then every pair of them, then
    // pairs followed by a byte, each with its merge, up to the vocabulary size.
    let bytes = crate::formats::gguf::tokenizer::byte_chars();
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).to_vec();
    tokens.extend(bytes.iter().map(|c| c.to_string()));
    let mut merges = Vec::new();
    let pairs = bytes.iter().flat_map(|&a| bytes.iter().map(move |&b| (a.to_string(), b.to_string())));
    let triples = pairs.clone().flat_map(|(a, b)| bytes.iter().map(move |&c| (format!("{a}{b}"), c.to_string())));
    for (a, b) in pairs.chain(triples).take(cfg.vocab.saturating_sub(tokens.len())) {
        tokens.push(format!("{a}{b}"));
        merges.push(format!("{a} {b}"));
    }
    let mut types = vec![3; 3];
    types.resize(tokens.len(), 1);
    let mut g = crate::formats::gguf::write::GgufWriter::new();
    let key = |k: &str| format!("{arch}.{k}");
    g.str("general.architecture", arch)
        .u32(&key("embedding_length"), cfg.hidden as u32)
        .u32(&key("block_count"), cfg.layers as u32)
        .u32(&key("attention.head_count"), cfg.heads as u32)
        .u32(&key("attention.head_count_kv"), cfg.kv_heads as u32)
        .u32(&key("attention.key_length"), cfg.head_dim as u32)
        .u32(&key("feed_forward_length"), cfg.intermediate as u32)
        .u32(&key("context_length"), cfg.max_position_embeddings as u32)
        .f32(&key("rope.freq_base"), cfg.rope_theta as f32)
        .f32(&key("attention.layer_norm_rms_epsilon"), cfg.rms_norm_eps as f32)
        .gpt2_tokenizer(
            if arch == "qwen2" { "qwen2" } else { "smollm" },
            &tokens,
            &merges,
            &types,
            (1, 2, 0),
            "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}\
             {% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}",
        );
    let tensors = expected_tensors(cfg);
    for (hf, shape) in &tensors {
        let name = gguf_name(hf).ok_or_else(|| std::io::Error::other(format!("{hf}: no GGUF name")))?;
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        let numel = shape.iter().product::<usize>() as u64;
        let (ty, bytes) = if shape.len() >= 2 { (F16, 2) } else { (F32, 4) };
        g.tensor_len(&name, &ne, ty, numel * bytes);
    }
    let mut rng = crate::base::rng::Rng::new(seed);
    let mut buf = Vec::new();
    g.write(w, |i, w| {
        let shape = &tensors[i].1;
        let numel: usize = shape.iter().product();
        // 1 Mi values at a time, so a 272 MB embedding table is never whole in memory.
        for start in (0..numel).step_by(1 << 20) {
            buf.clear();
            for _ in start..(start + (1 << 20)).min(numel) {
                let x = ((rng.uniform() * 2.0 - 1.0) * 0.05) as f32;
                if shape.len() >= 2 {
                    buf.extend(half::f16::from_f32(x).to_bits().to_le_bytes());
                } else {
                    buf.extend((1.0 + x).to_le_bytes());
                }
            }
            w.write_all(&buf)?;
        }
        Ok(())
    })
}
