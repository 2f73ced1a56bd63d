#!/usr/bin/env python3
"""Convert a Llama-architecture GGUF (here SmolLM2-135M-Instruct, Q4_1) into a Hugging Face checkpoint directory.

    python3 scripts/convert-gguf-to-hf.py GGUF OUTDIR

Writes OUTDIR/ (built in OUTDIR.tmp and renamed into place, so a half-written directory never looks done):
  config.json, model.safetensors (bf16), tokenizer.json, tokenizer_config.json (with chat_template),
  generation_config.json, special_tokens_map.json

How:
  1. transformers loads the GGUF with `dtype=torch.float32` and `GgufConfig(dequantize=True)`. For llama (5.24) that is
     its legacy path: gguf-py dequantizes each tensor to float32 numpy (Q4_1: fp16 scale * 4-bit code + fp16 min,
     Q8_0: fp16 scale * int8, both exact in float32), LlamaTensorProcessor undoes llama.cpp's Q/K row permutation,
     then the tensor is cast to the requested dtype. We ask for float32 and round to bf16 ourselves, so the rounding
     is one explicit step whatever path a later transformers takes (its newer packed-block path dequantizes straight
     into the target dtype, which for bf16 would round the fp16 scale and min before the multiply-add).
  2. Every tensor is checked against gguf-py's dequantization (`gguf.quants.dequantize`) with our own name map and
     our own inverse of llama.cpp's permute: they must agree exactly (this checks transformers' mapping and
     un-permutation, not the dequantizer, which is the same gguf-py code).
  3. The float32 weights are rounded once to bf16 (round-to-nearest-even, `Tensor.to(torch.bfloat16)`), loaded into a
     clean model built from the config (no quantization_config) and saved with save_pretrained. The GGUF has no
     output.weight: the embeddings are tied (tie_word_embeddings = true), so model.safetensors has no lm_head.weight.
  4. The tokenizer comes from the same GGUF. transformers has no split rule for GGUF's pre-tokenizer type "smollm" and
     falls back to plain ByteLevel; llama.cpp's "smollm" splits every digit first (regex \\p{N}), as SmolLM2's own
     tokenizer.json does (Digits(individual_digits) then ByteLevel), so that pre-tokenizer is restored here.
     tokenizer_config.json gets the chat template (transformers 5 would put it in chat_template.jinja instead).
  5. The saved directory is reloaded: weights must equal what was saved, logits must be finite, the tokenizer must
     reproduce the GGUF tokenizer's ids on a probe string and render the chat template.

Needs: torch, transformers (5.x), gguf, safetensors, tokenizers. Last run with: Python 3.11.7, torch 2.15.0,
transformers 5.24.0, gguf 0.19.0, safetensors 0.8.0.
"""

import json
import os

os.environ.setdefault("TQDM_DISABLE", "1")  # transformers' GGUF loader draws a progress bar with tqdm
import shutil
import sys

import numpy as np
import torch
import transformers
from gguf import GGUFReader
from gguf.quants import dequantize as gguf_dequantize
from safetensors.torch import load_file
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig, GgufConfig

# GGUF tensor name (per block) -> Hugging Face Llama parameter name.
BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}


def hf_name(gguf_name):
    if gguf_name in TOP_NAMES:
        return TOP_NAMES[gguf_name]
    blk, layer, part, kind = gguf_name.split(".")
    if blk != "blk" or part not in BLOCK_NAMES:
        raise ValueError(f"unexpected GGUF tensor {gguf_name}")
    return f"model.layers.{layer}.{BLOCK_NAMES[part]}.{kind}"


def unpermute(w, n_head):
    """Inverse of llama.cpp's convert_hf_to_gguf `permute` for q_proj/k_proj rows. w: (n_head * head_dim, in)."""
    # llama.cpp: reshape(n_head, 2, head_dim/2, in).swapaxes(1, 2), so the GGUF rows of a head are interleaved pairs.
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def reference_state_dict(gguf_path, n_head, n_kv_head):
    """Dequantize every tensor with gguf-py (float32), independently of transformers."""
    reader = GGUFReader(gguf_path)
    out, types = {}, {}
    for t in reader.tensors:
        w = gguf_dequantize(t.data, t.tensor_type).astype(np.float32)
        shape = tuple(int(x) for x in reversed(t.shape))  # GGUF lists ne0 (innermost) first
        w = w.reshape(shape)
        name = hf_name(t.name)
        if name.endswith("q_proj.weight"):
            w = unpermute(w, n_head)
        elif name.endswith("k_proj.weight"):
            w = unpermute(w, n_kv_head)
        out[name] = torch.from_numpy(np.ascontiguousarray(w))
        types[t.tensor_type.name] = types.get(t.tensor_type.name, 0) + 1
    return out, types


def fix_tokenizer_json(path):
    with open(path) as f:
        tj = json.load(f)
    pre = tj.get("pre_tokenizer") or {}
    if pre.get("type") == "ByteLevel":
        tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": True},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        ]}
    with open(path, "w") as f:
        json.dump(tj, f, ensure_ascii=False, indent=2)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: convert-gguf-to-hf.py GGUF OUTDIR")
    gguf_path, outdir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    gdir, gname = os.path.dirname(gguf_path), os.path.basename(gguf_path)
    tmp = outdir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    # 1. Dequantize to float32 with transformers.
    model = AutoModelForCausalLM.from_pretrained(
        gdir, gguf_file=gname, dtype=torch.float32, quantization_config=GgufConfig(dequantize=True))
    cfg = model.config
    sd32 = {k: v.detach().clone() for k, v in model.state_dict().items()}
    for k, v in sd32.items():
        if v.dtype != torch.float32:
            sys.exit(f"{k} came back as {v.dtype}, not float32")

    # 2. Cross-check against gguf-py.
    ref, types = reference_state_dict(gguf_path, cfg.num_attention_heads, cfg.num_key_value_heads)
    tied = "lm_head.weight" not in ref
    if tied != bool(cfg.tie_word_embeddings):
        sys.exit(f"tie_word_embeddings={cfg.tie_word_embeddings} but output.weight present={not tied}")
    expect = set(ref) | ({"lm_head.weight"} if tied else set())
    if set(sd32) != expect:
        sys.exit(f"key mismatch: only transformers {sorted(set(sd32) - expect)[:5]}, only gguf {sorted(expect - set(sd32))[:5]}")
    worst = 0.0
    for k, r in ref.items():
        if sd32[k].shape != r.shape:
            sys.exit(f"{k}: shape {tuple(sd32[k].shape)} vs gguf-py {tuple(r.shape)}")
        worst = max(worst, (sd32[k] - r).abs().max().item())
    if worst != 0.0:
        sys.exit(f"transformers and gguf-py dequantize differently: max |diff| {worst}")
    # How far the single bf16 rounding moves the weights (relative to each tensor's max |w|).
    bf_err = max(((r.to(torch.bfloat16).float() - r).abs().max() / r.abs().max().clamp_min(1e-30)).item()
                 for r in ref.values())
    print(f"convert: {len(ref)} tensors {types}, transformers == gguf-py exactly; tied embeddings: {tied}; "
          f"bf16 rounding max rel err {bf_err:.2e}")

    # 3. Clean bf16 model from the config, saved.
    cdict = cfg.to_dict()
    cdict.pop("quantization_config", None)
    for k in ("transformers_version", "_name_or_path", "_model_name_or_path"):
        cdict.pop(k, None)
    clean_cfg = AutoConfig.for_model(cdict.pop("model_type"), **cdict)
    clean_cfg.dtype = torch.bfloat16
    del model
    clean = AutoModelForCausalLM.from_config(clean_cfg, dtype=torch.bfloat16)
    sd16 = {k: v.to(torch.bfloat16) for k, v in sd32.items()}
    missing, unexpected = clean.load_state_dict(sd16, strict=False)
    if unexpected or [m for m in missing if m != "lm_head.weight"]:
        sys.exit(f"load_state_dict: missing {missing}, unexpected {unexpected}")
    clean.tie_weights()
    clean.generation_config = GenerationConfig(
        bos_token_id=1 if cfg.bos_token_id is None else cfg.bos_token_id,
        eos_token_id=2 if cfg.eos_token_id is None else cfg.eos_token_id,
        pad_token_id=2 if cfg.pad_token_id is None else cfg.pad_token_id)
    clean.save_pretrained(tmp)

    # 4. Tokenizer from the same GGUF.
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    template = tok.chat_template
    if not template:
        sys.exit("the GGUF has no chat template")
    tok.model_max_length = cfg.max_position_embeddings
    tok.save_pretrained(tmp)
    fix_tokenizer_json(os.path.join(tmp, "tokenizer.json"))
    tc_path = os.path.join(tmp, "tokenizer_config.json")
    with open(tc_path) as f:
        tc = json.load(f)
    for k in ("is_local", "local_files_only", "name_or_path"):
        tc.pop(k, None)
    tc.update(add_bos_token=False, add_eos_token=False, clean_up_tokenization_spaces=False,
              model_max_length=cfg.max_position_embeddings, chat_template=template)
    with open(tc_path, "w") as f:
        json.dump(tc, f, ensure_ascii=False, indent=2)
    jinja = os.path.join(tmp, "chat_template.jinja")
    if os.path.exists(jinja):
        os.remove(jinja)  # one copy of the template, in tokenizer_config.json
    special = {k: tc[k] for k in ("bos_token", "eos_token", "pad_token", "unk_token") if tc.get(k)}
    with open(os.path.join(tmp, "special_tokens_map.json"), "w") as f:
        json.dump(special, f, indent=2)

    # 5. Reload and check.
    saved = load_file(os.path.join(tmp, "model.safetensors"))
    for k, v in saved.items():
        if v.dtype != torch.bfloat16 or not torch.equal(v, sd16[k]):
            sys.exit(f"saved {k} differs from what was meant to be saved")
    with open(os.path.join(tmp, "config.json")) as f:
        if "quantization_config" in json.load(f):
            sys.exit("config.json still has a quantization_config")
    m2 = AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32, attn_implementation="eager")
    if m2.lm_head.weight.data_ptr() != m2.model.embed_tokens.weight.data_ptr() and tied:
        sys.exit("reloaded lm_head is not tied to embed_tokens")
    tok2 = AutoTokenizer.from_pretrained(tmp)
    text = tok2.apply_chat_template([{"role": "user", "content": "What is 12 + 30?"}],
                                    add_generation_prompt=True, tokenize=False)
    ids = tok2(text, add_special_tokens=False, return_tensors="pt").input_ids
    probe = "Hello, world! Tokenizers split text; numbers like 2024 and 3.14 too."
    a, b = tok(probe, add_special_tokens=False).input_ids, tok2(probe, add_special_tokens=False).input_ids
    if a != b or tok2.decode(b) != probe:
        sys.exit(f"tokenizer round trip: {a} vs {b}")
    with torch.no_grad():
        logits = m2(ids).logits
    if not torch.isfinite(logits).all():
        sys.exit("reloaded model gives non-finite logits")
    nxt = tok2.decode([int(logits[0, -1].argmax())])
    print(f"convert: reloaded OK, {ids.shape[1]}-token chat prompt -> logits finite, next token {nxt!r}")

    for name in os.listdir(tmp):
        os.chmod(os.path.join(tmp, name), 0o644)
    shutil.rmtree(outdir, ignore_errors=True)
    os.rename(tmp, outdir)


if __name__ == "__main__":
    main()
