#!/usr/bin/env python3
"""Make the reference fixtures in tests/fixtures/ from PyTorch + transformers + PEFT.

Run by hand from anywhere (never in CI; the outputs are committed):

    python3 scripts/make-fixtures.py

Last run with: Python 3.11.7, torch 2.15.0, transformers 5.24.0, peft 0.21.2, safetensors 0.8.0
(each fixture's meta.json records the versions it was made with).

For each fixture it
  1. builds a tiny random Qwen2/Llama model (odd sizes, GQA, weights large enough that
     attention is not uniform, norms random around 1, non-zero biases) and saves it with
     save_pretrained in the stored dtype (bf16, f16 or f32; one fixture sharded);
  2. attaches a PEFT LoRA adapter, fills lora_A AND lora_B with non-zero random values and
     saves it with save_pretrained (float32, as PEFT does for a float32 base);
  3. reloads both from the saved files (from_pretrained(dtype=float64, attn_implementation="eager_f64"),
     PeftModel.from_pretrained(is_trainable=True)) -- never from the live model, see
     TOOLCHAIN.md pitfall 12 -- runs a padded, partly masked batch with labels through it,
     takes the causal LM loss and backpropagates. Everything runs in float64: transformers
     rounds four steps to float32 even in a float64 model -- eager attention's softmax
     (which also turns the float64 mask into -inf and the left-padded row into NaN), RoPE's
     inv_freq and cos/sin, RMSNorm, and the loss (ForCausalLMLoss casts the logits to float32)
     -- so those are swapped for float64 versions of the same math (eager_attention_f64,
     exact_f64, causal_lm_loss; the loss is checked against transformers' own to 1e-6), and
     the result is checked against a from-scratch float64 implementation (independent_f64);
  4. writes expected.safetensors: "loss" (f64, shape [1]) and, under each key of
     adapter_model.safetensors, that tensor's gradient (f64);
  5. repeats the forward/backward in float32 with stock transformers (attn_implementation="eager")
     and prints (and records) how far float32 rounding moves the loss and the gradients.

Outputs, per fixture tests/fixtures/<name>/:
  config.json, model.safetensors (or model-0000k-of-0000n.safetensors + model.safetensors.index.json),
  adapter/adapter_config.json, adapter/adapter_model.safetensors, batch.json, expected.safetensors, meta.json
"""

import json
import math
import os
import platform
import shutil
import sys

import torch
import transformers
import peft
import safetensors
from safetensors.torch import load_file, save_file
from transformers import AttentionInterface, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM
from transformers.masking_utils import AttentionMaskInterface, eager_mask
from transformers.models.llama.modeling_llama import repeat_kv
from peft import LoraConfig, PeftModel, get_peft_model

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
OUT = os.path.join("tests", "fixtures")  # relative to ROOT, so adapter_config.json holds no absolute path

ALL7 = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}

# Weight scales of the random models (see init_weights).
PROJ_STD = 0.3  # q/k/v/o/gate/up/down weights: scores of std ~2, so softmax is far from uniform
BIAS_STD = 0.3
NORM_LO, NORM_HI = 0.6, 1.4  # RMSNorm weights uniform in [0.6, 1.4]
LORA_A_GAIN = 1.0  # lora_A ~ N(0, gain^2 / in_features)
LORA_B_STD = 0.2

FIXTURES = [
    dict(
        name="qwen2-tiny",
        seed=1001,
        cls=Qwen2ForCausalLM,
        config=Qwen2Config(
            hidden_size=36,
            num_attention_heads=6,  # head_dim 6
            num_key_value_heads=2,
            intermediate_size=52,
            vocab_size=131,
            num_hidden_layers=2,
            tie_word_embeddings=False,
            rope_theta=10000.0,
            rms_norm_eps=1e-6,
            initializer_range=PROJ_STD,
            max_position_embeddings=64,
        ),
        dtype="bfloat16",
        max_shard_size=None,
        lora=dict(r=4, lora_alpha=8, target_modules=ALL7),
    ),
    dict(
        name="llama-tiny",
        seed=2002,
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            hidden_size=40,
            num_attention_heads=5,
            head_dim=8,
            num_key_value_heads=1,
            intermediate_size=44,
            vocab_size=97,
            num_hidden_layers=2,
            tie_word_embeddings=True,
            attention_bias=False,
            mlp_bias=False,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            initializer_range=PROJ_STD,
            max_position_embeddings=64,
        ),
        dtype="float16",
        max_shard_size="20KB",  # ~45 KB of weights: 3 shards
        lora=dict(r=3, lora_alpha=5, target_modules=["q_proj", "v_proj", "down_proj"]),
    ),
    dict(
        name="llama-bias",
        seed=3003,
        cls=LlamaForCausalLM,
        config=LlamaConfig(
            hidden_size=44,
            num_attention_heads=4,
            head_dim=12,  # 4 * 12 = 48 != hidden 44
            num_key_value_heads=2,
            intermediate_size=30,
            vocab_size=67,
            num_hidden_layers=3,
            tie_word_embeddings=False,
            attention_bias=True,
            mlp_bias=True,
            rope_theta=10000.0,
            rms_norm_eps=1e-5,
            initializer_range=PROJ_STD,
            max_position_embeddings=64,
        ),
        dtype="float32",
        max_shard_size=None,
        lora=dict(r=5, lora_alpha=10, target_modules=ALL7),
    ),
]

BATCH_ROWS, SEQ = 3, 11
LEFT_PAD, RIGHT_PAD = 3, 2
PROMPT_MASK = range(3, 6)  # row 2: labels -100 at positions 3..5 (prompt masking in the middle)


def eager_attention_f64(module, query, key, value, attention_mask, scaling, dropout=0.0, **kwargs):
    """transformers' eager attention, except that softmax runs in the tensors' own dtype.

    Stock "eager" takes softmax in float32 even for a float64 model: the float64 mask value
    (finfo(float64).min) becomes -inf there, a fully masked query row (the left padding)
    gives NaN, and 0 * NaN then spreads it to the whole row through the values.
    """
    k = repeat_kv(key, module.num_key_value_groups)
    v = repeat_kv(value, module.num_key_value_groups)
    w = torch.matmul(query, k.transpose(2, 3)) * scaling
    if attention_mask is not None:
        w = w + attention_mask
    w = torch.softmax(w, dim=-1)
    w = torch.nn.functional.dropout(w, p=dropout, training=module.training)
    return torch.matmul(w, v).transpose(1, 2).contiguous(), w


AttentionInterface.register("eager_f64", eager_attention_f64)
AttentionMaskInterface.register("eager_f64", eager_mask)


def exact_f64(model):
    """Make RoPE (inv_freq, cos/sin) and every RMSNorm compute in float64; stock transformers
    takes both through float32 even in a float64 model."""
    cfg = model.config
    rp = cfg.rope_parameters
    assert rp["rope_type"] == "default", rp
    rotary = model.get_base_model().model.rotary_emb
    assert rotary.attention_scaling == 1.0
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv_freq = 1.0 / (rp["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float64) / d))

    def rope_forward(x, position_ids):
        freqs = position_ids[..., None].to(torch.float64) * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    rotary.forward = rope_forward

    def rms_forward(norm):
        def forward(x):
            return norm.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + norm.variance_epsilon))
        return forward

    n = 0
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            m.forward = rms_forward(m)
            n += 1
    assert n == 2 * cfg.num_hidden_layers + 1, n


def causal_lm_loss(logits, labels):
    """transformers' ForCausalLMLoss without its cast to float32: logits at t predict labels[t+1];
    mean over the labels that are not -100."""
    shift = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:]
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), shift.reshape(-1), ignore_index=-100)


def independent_f64(fdir, batch):
    """The same loss and adapter gradients from the files alone, written from scratch in float64
    (no transformers, no PEFT): a cross-check of the reference and of the conventions in meta.json."""
    cfg = json.load(open(os.path.join(fdir, "config.json")))
    w = {}
    for f in sorted(os.listdir(fdir)):
        if f.endswith(".safetensors") and f != "expected.safetensors":
            w.update({k: v.to(torch.float64) for k, v in load_file(os.path.join(fdir, f)).items()})
    acfg = json.load(open(os.path.join(fdir, "adapter", "adapter_config.json")))
    assert not acfg.get("use_rslora") and not acfg.get("use_dora")
    scale = acfg["lora_alpha"] / acfg["r"]
    ad = {k: v.to(torch.float64).requires_grad_() for k, v in load_file(os.path.join(fdir, "adapter", "adapter_model.safetensors")).items()}

    H, nh, nkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = cfg.get("head_dim") or H // nh
    eps, theta = cfg["rms_norm_eps"], cfg["rope_parameters"]["rope_theta"]
    ids = torch.tensor(batch["input_ids"])
    am = torch.tensor(batch["attention_mask"]).bool()
    labels = torch.tensor(batch["labels"])
    B, T = ids.shape

    def lin(x, name):
        y = x @ w[name + ".weight"].T
        if name + ".bias" in w:
            y = y + w[name + ".bias"]
        a = f"base_model.model.{name}.lora_A.weight"
        if a in ad:
            y = y + scale * ((x @ ad[a].T) @ ad[a.replace("lora_A", "lora_B")].T)
        return y

    def rms(x, name):
        return w[name] * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)

    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv  # (T, hd/2): positions 0..T-1 in every row
    cos, sin = ang.cos(), ang.sin()

    def rope(x):  # (B, h, T, hd), rotate-half convention
        x1, x2 = x[..., : hd // 2], x[..., hd // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None] & am[:, None, :]  # (B, Tq, Tk)
    x = w["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rms(x, p + "input_layernorm.weight")
        q = lin(h, p + "self_attn.q_proj").view(B, T, nh, hd).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(B, T, nkv, hd).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(B, T, nkv, hd).transpose(1, 2)
        q, k = rope(q), rope(k)
        k, v = k.repeat_interleave(nh // nkv, dim=1), v.repeat_interleave(nh // nkv, dim=1)
        s = (q @ k.transpose(2, 3)) / math.sqrt(hd)
        s = s.masked_fill(~allowed[:, None], float("-inf"))
        a = torch.softmax(s, dim=-1).nan_to_num(0.0)  # fully masked (padded) query rows: zeros
        o = (a @ v).transpose(1, 2).reshape(B, T, nh * hd)
        x = x + lin(o, p + "self_attn.o_proj")
        h = rms(x, p + "post_attention_layernorm.weight")
        g = lin(h, p + "mlp.gate_proj")
        x = x + lin(torch.nn.functional.silu(g) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    x = rms(x, "model.norm.weight")
    head = w["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else w["lm_head.weight"]
    loss = causal_lm_loss(x @ head.T, labels)
    loss.backward()
    return loss.detach(), {k: t.grad for k, t in ad.items()}


def versions():
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
        "safetensors": safetensors.__version__,
    }


def init_weights(model, cfg, gen):
    """Explicit init (independent of transformers' _init_weights): every value drawn in float64."""
    h = cfg.hidden_size
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                v = NORM_LO + (NORM_HI - NORM_LO) * torch.rand(p.shape, generator=gen, dtype=torch.float64)
            elif name.endswith("embed_tokens.weight"):
                # Tied: it is also the lm_head, so keep logits of std ~1 (loss near log(vocab)).
                std = 1.0 / math.sqrt(h) if cfg.tie_word_embeddings else 1.0
                v = std * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            elif name.endswith("lm_head.weight"):
                v = (1.0 / math.sqrt(h)) * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            elif name.endswith("proj.weight"):
                v = PROJ_STD * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            elif name.endswith("proj.bias"):
                v = BIAS_STD * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            else:
                raise RuntimeError(f"no init rule for {name}")
            p.copy_(v)


def make_batch(vocab, gen):
    ids = torch.randint(1, vocab, (BATCH_ROWS, SEQ), generator=gen)
    mask = torch.ones(BATCH_ROWS, SEQ, dtype=torch.long)
    pad = 0
    # row 0: left-padded
    ids[0, :LEFT_PAD] = pad
    mask[0, :LEFT_PAD] = 0
    # row 1: right-padded
    ids[1, SEQ - RIGHT_PAD :] = pad
    mask[1, SEQ - RIGHT_PAD :] = 0
    labels = ids.clone()
    labels[mask == 0] = -100
    # The first real token of the left-padded row would be predicted from a padded position
    # (whose hidden state is meaningless), so it is masked too.
    labels[0, LEFT_PAD] = -100
    # row 2: full row, prompt masking in the middle
    for t in PROMPT_MASK:
        labels[2, t] = -100
    return {"input_ids": ids.tolist(), "labels": labels.tolist(), "attention_mask": mask.tolist()}


def set_lora(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_A." in name:
                p.copy_((LORA_A_GAIN / math.sqrt(p.shape[1])) * torch.randn(p.shape, generator=gen, dtype=torch.float64))
            elif ".lora_B." in name:
                p.copy_(LORA_B_STD * torch.randn(p.shape, generator=gen, dtype=torch.float64))


def param_name(adapter_key):
    # adapter file key "...q_proj.lora_A.weight" is parameter "...q_proj.lora_A.default.weight"
    head, _, last = adapter_key.rpartition(".")
    return f"{head}.default.{last}"


def loss_and_grads(fdir, dtype, batch, adapter_keys):
    """float64: every step in float64 (eager_f64, exact_f64, causal_lm_loss). float32: stock transformers."""
    f64 = dtype == torch.float64
    base = AutoModelForCausalLM.from_pretrained(fdir, dtype=dtype, attn_implementation="eager_f64" if f64 else "eager")
    model = PeftModel.from_pretrained(base, os.path.join(fdir, "adapter"), is_trainable=True)
    if f64:
        exact_f64(model)
    model.eval()  # no dropout anywhere; gradients still flow
    params = dict(model.named_parameters())
    trainable = {n for n, p in params.items() if p.requires_grad}
    wanted = {param_name(k) for k in adapter_keys}
    assert trainable == wanted, (sorted(trainable ^ wanted))[:5]
    for n in wanted:
        assert params[n].dtype == dtype, (n, params[n].dtype)
    labels = torch.tensor(batch["labels"])
    out = model(
        input_ids=torch.tensor(batch["input_ids"]),
        attention_mask=torch.tensor(batch["attention_mask"]),
        labels=labels,
    )
    if f64:
        # transformers' loss casts the logits to float32 first (ForCausalLMLoss: logits.float()),
        # so take the same loss in float64 here and check it against transformers' own.
        loss = causal_lm_loss(out.logits, labels)
        assert abs(loss.item() - out.loss.item()) <= 1e-6 * abs(loss.item()), (loss.item(), out.loss.item())
    else:
        loss = out.loss
    assert torch.isfinite(loss)
    loss.backward()
    grads = {k: params[param_name(k)].grad.detach().to(torch.float64).clone() for k in adapter_keys}
    with torch.no_grad(), model.disable_adapter():
        logits = model(input_ids=torch.tensor(batch["input_ids"]), attention_mask=torch.tensor(batch["attention_mask"])).logits
        base_loss = causal_lm_loss(logits, labels)
    return loss.detach().to(torch.float64), grads, base_loss.item()


def make(fx):
    name, cfg = fx["name"], fx["config"]
    fdir = os.path.join(OUT, name)
    if os.path.isdir(fdir):
        shutil.rmtree(fdir)
    os.makedirs(fdir)
    gen = torch.Generator().manual_seed(fx["seed"])
    torch.manual_seed(fx["seed"])

    # 1. base model, saved in its stored dtype
    model = fx["cls"](cfg)
    init_weights(model, cfg, gen)
    model.to(DTYPES[fx["dtype"]])
    kw = {"max_shard_size": fx["max_shard_size"]} if fx["max_shard_size"] else {}
    model.save_pretrained(fdir, **kw)
    gc = os.path.join(fdir, "generation_config.json")
    if os.path.exists(gc):
        os.remove(gc)
    del model

    # 2. LoRA adapter with non-zero A and B, saved from a float32 base (so the adapter is float32)
    base32 = AutoModelForCausalLM.from_pretrained(fdir, dtype=torch.float32)
    lcfg = LoraConfig(lora_dropout=0.0, bias="none", task_type="CAUSAL_LM", **fx["lora"])
    pm = get_peft_model(base32, lcfg)
    set_lora(pm, gen)
    pm.save_pretrained(os.path.join(fdir, "adapter"))
    # PEFT keeps target_modules as a set, so its order in the file changes from run to run: sort it.
    acfg_path = os.path.join(fdir, "adapter", "adapter_config.json")
    with open(acfg_path) as f:
        acfg = json.load(f)
    acfg["target_modules"] = sorted(acfg["target_modules"])
    with open(acfg_path, "w") as f:
        f.write(json.dumps(acfg, indent=2, sort_keys=True))
    readme = os.path.join(fdir, "adapter", "README.md")
    if os.path.exists(readme):
        os.remove(readme)
    del pm, base32
    adapter = load_file(os.path.join(fdir, "adapter", "adapter_model.safetensors"))
    adapter_keys = sorted(adapter)

    # 3. batch
    batch = make_batch(cfg.vocab_size, gen)
    with open(os.path.join(fdir, "batch.json"), "w") as f:
        f.write("{\n" + ",\n".join(f'  "{k}": {json.dumps(batch[k])}' for k in ("input_ids", "labels", "attention_mask")) + "\n}\n")

    rel = lambda a, b: float((a - b).norm() / b.norm())

    # 4. float64 reference from the saved files, and the same in float32
    loss64, g64, base_loss = loss_and_grads(fdir, torch.float64, batch, adapter_keys)
    loss32, g32, _ = loss_and_grads(fdir, torch.float32, batch, adapter_keys)
    loss_ind, g_ind = independent_f64(fdir, batch)
    ind_rel = max([abs(float(loss_ind) - float(loss64)) / abs(float(loss64))] + [rel(g_ind[k], g64[k]) for k in adapter_keys])
    assert ind_rel < 1e-12, f"independent float64 implementation disagrees: {ind_rel:.2e}"
    expected = {"loss": loss64.reshape(1).contiguous()}
    expected.update({k: g.contiguous() for k, g in g64.items()})
    save_file(expected, os.path.join(fdir, "expected.safetensors"), metadata={"made_by": "scripts/make-fixtures.py"})

    g32_rel = max(rel(g32[k], g64[k]) for k in adapter_keys)
    loss_rel = abs(float(loss32) - float(loss64)) / abs(float(loss64))
    norms = {k: float(g.norm()) for k, g in g64.items()}
    n_labels = sum(1 for row in batch["labels"] for t in row[1:] if t != -100)

    files = sorted(os.path.relpath(os.path.join(d, f), fdir) for d, _, fs in os.walk(fdir) for f in fs)
    meta = {
        "name": name,
        "made_by": "scripts/make-fixtures.py",
        "versions": versions(),
        "seed": fx["seed"],
        "architecture": cfg.architectures[0] if cfg.architectures else fx["cls"].__name__,
        "stored_dtype": fx["dtype"],
        "sharded": bool(fx["max_shard_size"]),
        "lora": {"r": fx["lora"]["r"], "lora_alpha": fx["lora"]["lora_alpha"], "target_modules": fx["lora"]["target_modules"],
                 "scaling": fx["lora"]["lora_alpha"] / fx["lora"]["r"], "adapter_dtype": "float32"},
        "init": {"proj_std": PROJ_STD, "bias_std": BIAS_STD, "norm_uniform": [NORM_LO, NORM_HI],
                 "lora_A_std": f"{LORA_A_GAIN}/sqrt(in_features)", "lora_B_std": LORA_B_STD},
        "batch": {"rows": BATCH_ROWS, "seq": SEQ,
                  "rows_described": ["left-padded (attention_mask 0 at 0..2; labels -100 at 0..3)",
                                     "right-padded (attention_mask 0 at the last 2 positions; labels -100 there)",
                                     "full row, labels -100 at 3..5 (prompt masking)"],
                  "label_tokens_in_loss": n_labels},
        "conventions": [
            "loss: transformers' causal LM loss (ForCausalLMLoss, taken in float64): logits at position t predict labels[t+1]; mean over all labels != -100 in the batch",
            "position_ids: arange(seq) for every row (transformers' default when none are given); left padding does not shift positions",
            "attention: causal, and keys with attention_mask 0 are masked; padded query rows are never used by the loss",
            "reference computed from the saved files (from_pretrained, PeftModel.from_pretrained) entirely in float64: transformers' eager attention but with softmax in float64 (stock eager takes it in float32, which turns the float64 mask into -inf and the left-padded row into NaN), RoPE inv_freq/cos/sin and RMSNorm in float64 (stock: float32), and the loss in float64 (stock ForCausalLMLoss casts logits to float32; checked equal to 1e-6)",
            "loss_float32 / grad_float32_max_rel_err: the same with stock transformers (eager attention) in float32",
            "independent_float64_max_rel_diff: the reference against a from-scratch float64 implementation (scripts/make-fixtures.py independent_f64)",
            "expected.safetensors: 'loss' [1] and the gradient of every adapter tensor under its adapter_model.safetensors key, all float64",
        ],
        "loss_float64": float(loss64),
        "loss_float32": float(loss32),
        "loss_float32_rel_diff": loss_rel,
        "grad_float32_max_rel_err": g32_rel,
        "independent_float64_max_rel_diff": ind_rel,
        "loss_without_adapter_float64": base_loss,
        "grad_norms": norms,
        "files": files + ["meta.json"],
    }
    with open(os.path.join(fdir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")

    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(fdir) for f in fs)
    print(f"== {name}: {fx['dtype']}, {len(adapter_keys)} adapter tensors, {n_labels} label tokens, {size / 1024:.1f} KiB")
    print(f"   loss f64 {float(loss64):.12f}   f32 {float(loss32):.9f}   rel diff {loss_rel:.2e}   (no adapter: {base_loss:.6f})")
    print(f"   independent float64 implementation: max rel diff {ind_rel:.1e}")
    print(f"   grads: f32 vs f64 max rel err {g32_rel:.2e}; norms min {min(norms.values()):.3e} max {max(norms.values()):.3e}")
    for k in adapter_keys[:4]:
        print(f"     {k}: {tuple(g64[k].shape)} |g| {norms[k]:.4e}")
    return size


def main():
    os.chdir(ROOT)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    print("versions:", json.dumps(versions()))
    total = sum(make(fx) for fx in FIXTURES)
    print(f"total {total / 1024:.1f} KiB in {OUT}")
    if total > 1024 * 1024:
        sys.exit("fixtures are over 1 MB")


if __name__ == "__main__":
    main()
