//! Tests of the GGUF parser, dequantizers and HF conversion, on GGUFs built here by a small writer
//! and on tests/fixtures/gguf/quants.gguf (random blocks and gguf-py's dequantization of them,
//! written by gguf-py: scripts/make-gguf-fixtures.py).

use super::hf::plan::unpermute_rows;
use super::*;
use crate::base::host::HostData;
use crate::formats::checkpoint::{validate, Checkpoint};
use crate::platform::test;

const QUANTS: &[u8] = include_bytes!("../../../tests/fixtures/gguf/quants.gguf");

use super::write::{GgufWriter as Writer, ARRAY, I32, T_F16, T_F32, T_Q4_0, T_Q8_0, U32};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f16_bits(x: f32) -> [u8; 2] {
    half::f16::from_f32(x).to_bits().to_le_bytes()
}

fn parse_err(bytes: &[u8]) -> String {
    Gguf::parse_bytes(bytes).expect_err("must be refused").to_string()
}

#[test]
fn parses_metadata_and_tensors() {
    // Q8_0 block: d = 0.5, q = -16..16; Q4_0 block: d = 0.25, nibbles j and 15 − j.
    let mut q8 = f16_bits(0.5).to_vec();
    q8.extend((0..32).map(|i| (i as i8 - 16) as u8));
    let mut q4 = f16_bits(0.25).to_vec();
    q4.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
    let nested = {
        // [[1, 2], [3]] as arrays of u32
        let mut b = ARRAY.to_le_bytes().to_vec();
        b.extend(2u64.to_le_bytes());
        for inner in [&[1u32, 2][..], &[3]] {
            b.extend(U32.to_le_bytes());
            b.extend((inner.len() as u64).to_le_bytes());
            inner.iter().for_each(|x| b.extend(x.to_le_bytes()));
        }
        b
    };
    let bytes = Writer::new()
        .str("general.architecture", "test")
        .raw("t.u8", 0, &[250])
        .raw("t.i8", 1, &[0xFE])
        .raw("t.u16", 2, &65000u16.to_le_bytes())
        .raw("t.i16", 3, &(-300i16).to_le_bytes())
        .u32("t.u32", 7)
        .raw("t.i32", I32, &(-7i32).to_le_bytes())
        .raw("t.u64", 10, &(1u64 << 50).to_le_bytes())
        .raw("t.i64", 11, &(-5i64).to_le_bytes())
        .f32("t.f32", 1.5)
        .raw("t.f64", 12, &0.1f64.to_le_bytes())
        .bool("t.bool", true)
        .strs("t.strs", &["x".into(), "ÿz".into()])
        .i32s("t.i32s", &[3, -1])
        .raw("t.nested", ARRAY, &nested)
        .tensor("a", &[3, 2], T_F32, f32_bytes(&[1., 2., 3., 4., 5., 6.]))
        .tensor("b", &[2], T_F16, [f16_bits(-2.0), f16_bits(0.125)].concat())
        .tensor("c", &[32], T_Q8_0, q8)
        .tensor("d", &[32], T_Q4_0, q4)
        .build();
    let g = Gguf::parse_bytes(&bytes).expect("parses");
    assert_eq!((g.version, g.alignment, g.tensors.len(), g.metadata.len()), (3, 32, 4, 15));
    assert_eq!(g.get("t.u8"), Some(&Value::U8(250)));
    assert_eq!(g.get("t.i8"), Some(&Value::I8(-2)));
    assert_eq!(g.get("t.u16"), Some(&Value::U16(65000)));
    assert_eq!(g.get("t.i16"), Some(&Value::I16(-300)));
    assert_eq!(g.get_u64("t.u32").expect("u32"), Some(7));
    assert_eq!(g.get("t.i32").and_then(Value::as_i64), Some(-7));
    assert_eq!(g.get_u64("t.u64").expect("u64"), Some(1 << 50));
    assert_eq!(g.get("t.i64"), Some(&Value::I64(-5)));
    assert_eq!(g.get_f64("t.f32").expect("f32"), Some(1.5));
    assert_eq!(g.get_f64("t.f64").expect("f64"), Some(0.1));
    assert_eq!(g.get_bool("t.bool").expect("bool"), Some(true));
    let strs = g.get_array("t.strs").expect("array").expect("present");
    assert_eq!(strs, &[Value::String("x".into()), Value::String("ÿz".into())]);
    assert_eq!(g.get("t.i32s"), Some(&Value::Array(vec![Value::I32(3), Value::I32(-1)])));
    let n = |v: &[u32]| Value::Array(v.iter().map(|&x| Value::U32(x)).collect());
    assert_eq!(g.get("t.nested"), Some(&Value::Array(vec![n(&[1, 2]), n(&[3])])));
    let e = g.get_u64("t.strs").expect_err("wrong type").to_string();
    assert!(e.contains("t.strs") && e.contains("expected a non-negative integer, found array"), "{e}");

    let a = g.tensor("a").expect("a");
    assert_eq!((a.shape(), a.ggml_type.name, a.n_bytes), (vec![2, 3], "F32", 24));
    assert_eq!(a.offset % 32, 0);
    let mut r = std::io::Cursor::new(&bytes[..]);
    assert_eq!(g.tensor_f32(&mut r, "a").expect("a"), vec![1., 2., 3., 4., 5., 6.]);
    assert_eq!(g.tensor_f32(&mut r, "b").expect("b"), vec![-2.0, 0.125]);
    let want: Vec<f32> = (0..32).map(|i| 0.5 * (i as f32 - 16.)).collect();
    assert_eq!(g.tensor_f32(&mut r, "c").expect("c"), want);
    let want: Vec<f32> = (0..32).map(|i| 0.25 * (if i < 16 { i } else { 31 - i } as f32 - 8.)).collect();
    assert_eq!(g.tensor_f32(&mut r, "d").expect("d"), want);
    assert!(g.tensor_f32(&mut r, "zz").expect_err("absent").to_string().contains("tensor zz"));
}

/// Every supported type against gguf-py's dequantization of the same random blocks, bit for bit.
#[test]
fn dequantizers_match_gguf_py() {
    let g = Gguf::parse_bytes(QUANTS).expect("fixture parses");
    assert_eq!(g.get_u64("test.u8").expect("u8"), Some(200));
    assert_eq!(g.get("test.i16"), Some(&Value::I16(-12345)));
    assert_eq!(g.get_u64("test.u64").expect("u64"), Some(1 << 40));
    assert_eq!(g.get_f64("test.f64").expect("f64"), Some(-2.5e-7));
    assert_eq!(g.get_str("test.string").expect("string"), Some("grüße"));
    let strs: Vec<&str> =
        g.get_array("test.strings").expect("ok").expect("present").iter().filter_map(Value::as_str).collect();
    assert_eq!(strs, ["a", "bc", ""]);
    let mut r = std::io::Cursor::new(QUANTS);
    for name in ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q5_K", "Q6_K"] {
        let q = g.tensor(&format!("q.{name}")).expect("q tensor");
        assert_eq!(q.ggml_type.name, name);
        let got = g.tensor_f32(&mut r, &q.name).expect("dequantizes");
        let want = g.tensor_f32(&mut r, &format!("ref.{name}")).expect("reference");
        assert_eq!(got.len(), want.len(), "{name}");
        let bad = got.iter().zip(&want).position(|(a, b)| a.to_bits() != b.to_bits());
        if let Some(i) = bad {
            panic!("{name}: element {i}: got {} want {} ({} values)", got[i], want[i], got.len());
        }
    }
}

/// One Q4_K block worked by hand: d = 1, dmin = 0.5; sub-block j has scale j + 1 and min j for
/// j < 4, scale 1 + 16·(j & 1) and min 2 for j ≥ 4 (the high bits from the first bytes' top bits).
#[test]
fn q4_k_block_by_hand() {
    let mut b = [f16_bits(1.0), f16_bits(0.5)].concat();
    let mut s = [0u8; 12];
    for j in 0..4 {
        s[j] = (j as u8 + 1) | (((j & 1) as u8) << 6); // scale j+1; top bits: high bits of scale j+4
        s[j + 4] = j as u8; // min j; top bits 0
        s[j + 8] = 1 | (2 << 4); // low nibbles of scale / min j+4
    }
    b.extend(s);
    b.extend([0x21u8; 128]); // low nibble 1 (even sub-blocks), high nibble 2 (odd)
    let out = dequantize(GgmlType::from_name("Q4_K").expect("known"), &b, 256).expect("dequantizes");
    for j in 0..8 {
        let (sc, mn) = if j < 4 { (j + 1, j) } else { (1 + 16 * (j & 1), 2) };
        let q = if j % 2 == 0 { 1 } else { 2 };
        let want = (sc * q) as f32 - 0.5 * mn as f32;
        assert!(out[j * 32..j * 32 + 32].iter().all(|&x| x == want), "sub-block {j}: {} vs {want}", out[j * 32]);
    }
}

#[test]
fn refuses_malformed_files_naming_the_problem() {
    let good = || Writer::new().str("general.architecture", "x").tensor("w", &[4], T_F32, vec![0; 16]).build();
    let mut b = good();
    b[0] = b'X';
    assert!(parse_err(&b).contains("not a GGUF file"), "{}", parse_err(&b));
    for (v, want) in [(1u32, "version 1"), (4, "version 4"), (3u32.swap_bytes(), "big-endian")] {
        let mut b = good();
        b[4..8].copy_from_slice(&v.to_le_bytes());
        assert!(parse_err(&b).contains(want), "{}", parse_err(&b));
    }
    let mut b = good();
    b[8..16].copy_from_slice(&(1u64 << 60).to_le_bytes());
    let e = parse_err(&b);
    assert!(e.contains("tensor count") && e.contains("1152921504606846976"), "{e}");
    let mut b = good();
    b[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(parse_err(&b).contains("metadata count"), "{}", parse_err(&b));
    let mut b = good();
    b[24..32].copy_from_slice(&(1u64 << 40).to_le_bytes()); // the first key's length
    let e = parse_err(&b);
    assert!(e.contains("metadata entry 0: key") && e.contains("string length 1099511627776"), "{e}");

    let array = |count: u64| [U32.to_le_bytes().to_vec(), count.to_le_bytes().to_vec()].concat();
    let e = parse_err(&Writer::new().raw("big.array", ARRAY, &array(1 << 59)).build());
    assert!(e.contains("big.array") && e.contains("array length") && e.contains("576460752303423488"), "{e}");
    let e = parse_err(&Writer::new().raw("odd", 13, &[0; 8]).build());
    assert!(e.contains("metadata odd") && e.contains("unknown metadata value type 13"), "{e}");
    let e = parse_err(&Writer::new().raw("b", 7, &[2]).build());
    assert!(e.contains("metadata b") && e.contains("bool"), "{e}");
    let e = parse_err(&Writer::new().tensor("w", &[4], 99, vec![0; 16]).build());
    assert!(e.contains("tensor w") && e.contains("unknown tensor type id 99"), "{e}");
    let e = parse_err(&Writer::new().tensor("w", &[1, 1, 1, 1, 1], T_F32, vec![0; 4]).build());
    assert!(e.contains("tensor w") && e.contains("n_dims = 5"), "{e}");
    let e = parse_err(&Writer::new().tensor("w", &[16], T_Q8_0, vec![0; 34]).build());
    assert!(e.contains("tensor w") && e.contains("ne[0] = 16") && e.contains("Q8_0"), "{e}");
    let e =
        parse_err(&Writer::new().tensor("w", &[4], T_F32, vec![0; 16]).tensor("w", &[4], T_F32, vec![0; 16]).build());
    assert!(e.contains("tensor w: given twice"), "{e}");
    let e = parse_err(&Writer::new().u32("general.alignment", 24).build());
    assert!(e.contains("general.alignment"), "{e}");

    // Data cut short: the tensor runs past the end.
    let b = Writer::new().tensor("w", &[64], T_F32, vec![0; 256]).build();
    let e = parse_err(&b[..b.len() - 4]);
    assert!(e.contains("tensor w") && e.contains("past the end of the file"), "{e}");
    // An offset far past the end, one that would overflow, one not aligned. The offset field of
    // the only tensor: header (24), name length (8), "w" (1), n_dims (4), ne[0] (8), type (4).
    let off_at = 24 + 8 + 1 + 4 + 8 + 4;
    for (off, want) in [(1u64 << 20, "past the end"), (u64::MAX - 31, "past the end"), (4, "alignment 32")] {
        let mut b = Writer::new().tensor("w", &[8], T_F32, vec![0; 32]).build();
        assert_eq!(&b[off_at..off_at + 8], &0u64.to_le_bytes());
        b[off_at..off_at + 8].copy_from_slice(&off.to_le_bytes());
        let e = parse_err(&b);
        assert!(e.contains("tensor w: offset") && e.contains(want), "{e}");
    }
}

/// No prefix of a valid file, and no single corrupted byte, makes the parser panic.
#[test]
fn truncated_or_corrupted_files_never_panic() {
    let b = Writer::new()
        .str("general.architecture", "x")
        .strs("list", &["ab".into(), "c".into()])
        .tensor("w", &[32], T_Q8_0, vec![1; 34])
        .build();
    for n in 0..b.len() {
        let _ = Gguf::parse_bytes(&b[..n]);
    }
    for i in 0..b.len() {
        for v in [0u8, 0x7F, 0xFF] {
            let mut c = b.clone();
            c[i] = v;
            if let Ok(g) = Gguf::parse_bytes(&c) {
                let _ = g.tensor_f32(&mut std::io::Cursor::new(&c[..]), "w");
            }
        }
    }
}

/// llama.cpp's `permute(w, n_head)`: (n_head, 2, half, in) → swap axes 1 and 2.
fn permute(w: &[f32], rows: usize, heads: usize) -> Vec<f32> {
    let row_len = w.len() / rows;
    let (hd, half) = (rows / heads, rows / heads / 2);
    let mut out = vec![0.; w.len()];
    for h in 0..heads {
        for j in 0..2 {
            for i in 0..half {
                let (src, dst) = ((h * hd + j * half + i) * row_len, (h * hd + 2 * i + j) * row_len);
                out[dst..dst + row_len].copy_from_slice(&w[src..src + row_len]);
            }
        }
    }
    out
}

#[test]
fn unpermute_inverts_llama_cpp_permute() {
    let w: Vec<f32> = (0..24 * 5).map(|x| x as f32).collect();
    assert_eq!(unpermute_rows(&permute(&w, 24, 3), 24, 3, "w").expect("even heads"), w);
    assert!(unpermute_rows(&w, 24, 5, "w").expect_err("odd").to_string().contains("5 heads"));
    // Head 0 of 1, head_dim 4: GGUF rows are HF rows 0, 2, 1, 3.
    let w = [0., 1., 2., 3.];
    assert_eq!(permute(&w, 4, 1), vec![0., 2., 1., 3.]);
}

/// A tiny byte-level BPE vocabulary: 3 control tokens, the 256 byte characters, 3 merges.
fn tiny_vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    // GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the rest U+0100.. in order.
    let printable = |b: u32| (0x21..=0x7E).contains(&b) || (0xA1..=0xAC).contains(&b) || (0xAE..=0xFF).contains(&b);
    let mut n = 0;
    let chars: Vec<String> = (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                n += 1;
                255 + n
            };
            char::from_u32(c).expect("char").to_string()
        })
        .collect();
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"].map(String::from).to_vec();
    tokens.extend(chars);
    tokens.extend(["Ġt", "he", "Ġthe"].map(String::from));
    let merges = ["Ġ t", "h e", "Ġt he"].map(String::from).to_vec();
    let mut types = vec![3; 3];
    types.resize(tokens.len(), 1);
    (tokens, merges, types)
}

/// (HF name, shape, values) of each tensor a tiny model should import to.
pub(crate) type HfTensors = Vec<(String, Vec<usize>, Vec<f32>)>;

/// A tiny llama/qwen2 GGUF (hidden 32, 4 heads of 8, 2 kv heads, intermediate 64, 1 layer) from
/// HF-layout weights whose values are exact in bf16; Q/K rows permuted as llama.cpp does for llama.
pub(crate) fn tiny_model(arch: &str, tied: bool) -> (Vec<u8>, HfTensors) {
    let (tokens, merges, types) = tiny_vocab();
    let (c, f, v) = (32usize, 64usize, tokens.len());
    let mut w = Writer::new();
    w.str("general.architecture", arch)
        .u32(&format!("{arch}.embedding_length"), c as u32)
        .u32(&format!("{arch}.block_count"), 1)
        .u32(&format!("{arch}.attention.head_count"), 4)
        .u32(&format!("{arch}.attention.head_count_kv"), 2)
        .u32(&format!("{arch}.feed_forward_length"), f as u32)
        .u32(&format!("{arch}.context_length"), 256)
        .f32(&format!("{arch}.rope.freq_base"), 50000.0)
        .f32(&format!("{arch}.attention.layer_norm_rms_epsilon"), 1e-5)
        .gpt2_tokenizer(
            "smollm",
            &tokens,
            &merges,
            &types,
            (1, 2, 2),
            "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}",
        );
    // Embedding as Q8_0: each row one block... of 32 values: d = 2^-6, q = small ints.
    let mut embed_q = Vec::new();
    let mut embed = Vec::new();
    for row in 0..v {
        embed_q.extend(f16_bits(1.0 / 64.0));
        for k in 0..c {
            let q = ((row * 7 + k * 3) % 41) as i8 - 20;
            embed_q.push(q as u8);
            embed.push(q as f32 / 64.0);
        }
    }
    w.tensor("token_embd.weight", &[c as u64, v as u64], T_Q8_0, embed_q);
    let mut hf = vec![("model.embed_tokens.weight".to_string(), vec![v, c], embed)];
    let val = |seed: usize, n: usize| -> Vec<f32> {
        (0..n).map(|k| ((seed * 31 + k * 17) % 64) as f32 / 32.0 - 1.0).collect()
    };
    let mut seed = 1;
    let mut add = |w: &mut Writer, gguf: &str, hf_name: &str, shape: Vec<usize>, permute_heads: Option<usize>| {
        seed += 1;
        let data = val(seed, shape.iter().product());
        let stored = match permute_heads {
            Some(h) if arch == "llama" => permute(&data, shape[0], h),
            _ => data.clone(),
        };
        let ne: Vec<u64> = shape.iter().rev().map(|&d| d as u64).collect();
        // Norms and biases as F32, matrices as F16 (both exact for these values).
        if shape.len() == 1 {
            w.tensor(gguf, &ne, T_F32, f32_bytes(&stored));
        } else {
            w.tensor(gguf, &ne, T_F16, stored.iter().flat_map(|&x| f16_bits(x)).collect());
        }
        hf.push((hf_name.to_string(), shape, data));
    };
    let l = "model.layers.0";
    add(&mut w, "blk.0.attn_norm.weight", &format!("{l}.input_layernorm.weight"), vec![c], None);
    add(&mut w, "blk.0.attn_q.weight", &format!("{l}.self_attn.q_proj.weight"), vec![c, c], Some(4));
    add(&mut w, "blk.0.attn_k.weight", &format!("{l}.self_attn.k_proj.weight"), vec![16, c], Some(2));
    add(&mut w, "blk.0.attn_v.weight", &format!("{l}.self_attn.v_proj.weight"), vec![16, c], None);
    if arch == "qwen2" {
        add(&mut w, "blk.0.attn_q.bias", &format!("{l}.self_attn.q_proj.bias"), vec![c], None);
        add(&mut w, "blk.0.attn_k.bias", &format!("{l}.self_attn.k_proj.bias"), vec![16], None);
        add(&mut w, "blk.0.attn_v.bias", &format!("{l}.self_attn.v_proj.bias"), vec![16], None);
    }
    add(&mut w, "blk.0.attn_output.weight", &format!("{l}.self_attn.o_proj.weight"), vec![c, c], None);
    add(&mut w, "blk.0.ffn_norm.weight", &format!("{l}.post_attention_layernorm.weight"), vec![c], None);
    add(&mut w, "blk.0.ffn_gate.weight", &format!("{l}.mlp.gate_proj.weight"), vec![f, c], None);
    add(&mut w, "blk.0.ffn_up.weight", &format!("{l}.mlp.up_proj.weight"), vec![f, c], None);
    add(&mut w, "blk.0.ffn_down.weight", &format!("{l}.mlp.down_proj.weight"), vec![c, f], None);
    add(&mut w, "output_norm.weight", "model.norm.weight", vec![c], None);
    if !tied {
        add(&mut w, "output.weight", "lm_head.weight", vec![v, c], None);
    }
    (w.build(), hf)
}

#[test]
fn converts_tiny_llama_and_qwen2_to_hf() {
    for (arch, tied) in [("llama", true), ("llama", false), ("qwen2", true)] {
        let (bytes, hf) = tiny_model(arch, tied);
        let files = gguf_to_hf_files(&mut std::io::Cursor::new(&bytes[..])).expect("converts");
        let ckpt = Checkpoint::from_files(files.clone()).expect("opens as a checkpoint");
        validate(&ckpt).expect("every tensor with its shape");
        let cfg = ckpt.config();
        assert_eq!((cfg.hidden, cfg.heads, cfg.kv_heads, cfg.head_dim, cfg.intermediate), (32, 4, 2, 8, 64));
        assert_eq!((cfg.vocab, cfg.tie_word_embeddings, cfg.rope_theta), (262, tied, 50000.0));
        assert_eq!((cfg.qkv_bias, cfg.bos_token_id, cfg.eos_token_ids.clone()), (arch == "qwen2", Some(1), vec![2]));
        assert_eq!(cfg.rms_norm_eps, 1e-5f32 as f64);
        assert_eq!(ckpt.tensor_names().len(), hf.len(), "{arch}");
        for (name, shape, want) in &hf {
            let t = ckpt.tensor(name).expect("present");
            assert!(matches!(t.data, HostData::BF16(_)), "{name} is bf16");
            assert_eq!(&t.shape, shape, "{name}");
            assert_eq!(&t.to_f32(), want, "{arch} {name}");
        }
    }
}

#[test]
fn conversion_refusals_name_the_problem() {
    let convert = |b: &[u8]| gguf_to_hf_files(&mut std::io::Cursor::new(b)).expect_err("refused").to_string();
    let (good, _) = tiny_model("llama", true);
    let g = Gguf::parse_bytes(&good).expect("parses");
    // Rewrite one metadata string value in place (same length) to get a variant of the good file.
    let swap = |from: &str, to: &str| {
        assert_eq!(from.len(), to.len());
        let mut b = good.clone();
        let at = b.windows(from.len()).position(|w| w == from.as_bytes()).expect("present");
        b[at..at + to.len()].copy_from_slice(to.as_bytes());
        b
    };
    let e = convert(&swap("smollm", "zzzzzz"));
    assert!(e.contains("tokenizer.ggml.pre") && e.contains("zzzzzz"), "{e}");
    let e = convert(&swap("gpt2", "bert"));
    assert!(e.contains("tokenizer.ggml.model") && e.contains("bert"), "{e}");
    let e = convert(&swap("blk.0.ffn_up.weight", "blk.0.ffn_xx.weight"));
    assert!(e.contains("blk.0.ffn_xx.weight"), "{e}");
    let e = convert(&swap("llama.block_count", "llama.block_cXunt"));
    assert!(e.contains("llama.block_count: missing"), "{e}");
    // An unsupported tensor type (Q5_0 = 6) on the FFN weight: the type id sits after its dims.
    let mut b = good.clone();
    let name = b"blk.0.ffn_up.weight";
    let at = b.windows(name.len()).position(|w| w == name).expect("name") + name.len();
    assert_eq!(&b[at..at + 4], &2u32.to_le_bytes());
    let ty_at = at + 4 + 16;
    b[ty_at..ty_at + 4].copy_from_slice(&6u32.to_le_bytes());
    // Q5_0 takes fewer bytes than F16 here, so the file still parses.
    let e = convert(&b);
    assert!(e.contains("blk.0.ffn_up.weight") && e.contains("Q5_0") && e.contains("not supported"), "{e}");
    assert_eq!(g.tensor("blk.0.ffn_up.weight").map(|t| t.ggml_type.name), Some("F16"));
}

/// Writes the GGUF seeds of the `gguf` fuzz target (fuzz/seeds/gguf/): tiny whole models that
/// convert to HF files, so the fuzzer starts from inputs that reach every stage.
/// `cargo test --lib write_fuzz_seeds -- --ignored` (scripts/fuzz.sh runs it).
#[test]
#[ignore]
fn write_fuzz_seeds() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/gguf");
    std::fs::create_dir_all(&dir).expect("creates fuzz/seeds/gguf");
    for (arch, tied) in [("llama", true), ("qwen2", false)] {
        let (bytes, _) = tiny_model(arch, tied);
        gguf_to_hf_files(&mut std::io::Cursor::new(&bytes[..])).expect("the seed converts");
        std::fs::write(dir.join(format!("tiny-{arch}.gguf")), bytes).expect("writes a seed");
    }
}
