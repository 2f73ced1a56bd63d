#!/usr/bin/env python3
"""PyTorch + PEFT at the shapes `webtune bench` uses, for the tables that compare the two in one run
(random weights at a preset's published shape: no download; never in CI).

    python3 scripts/bench-torch.py train  --shape smollm2-135m --seq 256 --rank 8 [--steps 3] [--checkpointing]
    python3 scripts/bench-torch.py decode --shape smollm2-135m --prompt 32 --tokens 34
    python3 scripts/bench-torch.py gemm                  # f32 products at the bench-kernels shapes
    ... [--device cpu|cuda] [--dtype float32|bfloat16] [--threads N] [--json FILE]

train: LoRA on q,k,v,o,gate,up,down (alpha = 2·rank), batch 1, AdamW, every position
supervised; tokens/s of the steps after the first. decode: greedy generate with the adapter
applied unmerged and a KV cache; ms per new token after the first two (transformers'
generate, max_new_tokens, min_new_tokens so it never stops early). gemm: x (256, in) · Wᵀ in
float32 with TF32 off (what "f32" means), at every product `webtune bench kernels` times, plus an
8192³ product as the f32 rate this device reaches at all.
"""
import argparse, json, sys, time

SHAPES = {
    # hidden, layers, heads, kv_heads, intermediate, vocab, tied, qkv_bias, arch, rope_theta
    "smollm2-135m": (576, 30, 9, 3, 1536, 49152, True, False, "llama", 100000.0),
    "qwen2.5-0.5b": (896, 24, 14, 2, 4864, 151936, True, True, "qwen2", 1000000.0),
    "qwen2.5-1.5b": (1536, 28, 12, 2, 8960, 151936, True, True, "qwen2", 1000000.0),
}


def model_for(shape, dtype, device):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    c, l, h, kv, f, v, tied, bias, arch, theta = SHAPES[shape]
    common = dict(hidden_size=c, num_hidden_layers=l, num_attention_heads=h, num_key_value_heads=kv,
                  intermediate_size=f, vocab_size=v, tie_word_embeddings=tied, rope_theta=theta,
                  max_position_embeddings=4096, rms_norm_eps=1e-6)
    cfg = Qwen2Config(**common) if arch == "qwen2" else LlamaConfig(**common)
    torch.manual_seed(0)
    model = (Qwen2ForCausalLM if arch == "qwen2" else LlamaForCausalLM)(cfg)
    return model.to(device=device, dtype=dtype), cfg


def with_lora(model, rank):
    from peft import LoraConfig, get_peft_model

    lc = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0, task_type="CAUSAL_LM",
                    target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    return get_peft_model(model, lc)


def sync(device):
    import torch
    if device == "cuda":
        torch.cuda.synchronize()


def train(a, dtype):
    import torch
    model, cfg = model_for(a.shape, dtype, a.device)
    if a.checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    model = with_lora(model, a.rank)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (1, a.seq), generator=g).to(a.device)
    times, losses = [], []
    for _ in range(a.steps):
        sync(a.device)
        t0 = time.perf_counter()
        out = model(input_ids=ids, labels=ids)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(a.device)
        times.append(time.perf_counter() - t0)
        losses.append(float(out.loss.detach()))
    step = sum(times[1:]) / max(1, len(times) - 1) if len(times) > 1 else times[0]
    peak = torch.cuda.max_memory_allocated() if a.device == "cuda" else None
    return {"step_s": step, "first_step_s": times[0], "tokens_per_s": a.seq / step, "losses": losses,
            "cuda_peak_bytes": peak}


def decode(a, dtype):
    import torch
    model, cfg = model_for(a.shape, dtype, a.device)
    model = with_lora(model, a.rank)
    model.eval()
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, cfg.vocab_size, (1, a.prompt), generator=g).to(a.device)
    with torch.no_grad():
        # Warm-up, then time n and n + k new tokens: the difference is k decode steps.
        def run(n):
            sync(a.device)
            t0 = time.perf_counter()
            model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                           min_new_tokens=n, do_sample=False, pad_token_id=0)
            sync(a.device)
            return time.perf_counter() - t0
        run(2)
        t2 = run(2)
        tn = run(a.tokens)
    ms = (tn - t2) * 1000 / (a.tokens - 2)
    return {"ms_per_token": ms, "tokens_per_s": 1000 / ms, "prefill_and_2_s": t2}


def gemm(a, dtype):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    out = {}

    def rate(m, k, n):
        x = torch.randn(m, k, device=a.device, dtype=torch.float32)
        w = torch.randn(n, k, device=a.device, dtype=torch.float32)
        for _ in range(3):
            x @ w.T
        sync(a.device)
        reps = 20
        t0 = time.perf_counter()
        for _ in range(reps):
            x @ w.T
        sync(a.device)
        dt = (time.perf_counter() - t0) / reps
        return {"ms": dt * 1e3, "gflops": 2 * m * k * n / dt / 1e9}

    for shape in ["smollm2-135m", "qwen2.5-0.5b"]:
        c, l, h, kv, f, v, *_ = SHAPES[shape]
        d = c // h
        for din, dout in [(c, h * d), (c, kv * d), (h * d, c), (c, f), (f, c)]:
            out[f"{a.seq}x{din}x{dout}"] = rate(a.seq, din, dout)
            out[f"{a.seq}x{dout}x{din}"] = rate(a.seq, dout, din)
    big = 8192 if a.device == "cuda" else 2048
    return {"products": out, "square": {"n": big, **rate(big, big, big)}}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["train", "decode", "gemm"])
    p.add_argument("--shape", default="smollm2-135m", choices=sorted(SHAPES))
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--prompt", type=int, default=32)
    p.add_argument("--tokens", type=int, default=34)
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--json")
    a = p.parse_args()
    import torch
    if a.threads:
        torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    r = {"train": train, "decode": decode, "gemm": gemm}[a.what](a, dtype)
    r.update({"what": a.what, "shape": a.shape, "device": a.device, "dtype": a.dtype,
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "gpu": torch.cuda.get_device_name(0) if a.device == "cuda" else None,
              "seq": a.seq, "rank": a.rank, "checkpointing": a.checkpointing})
    print(json.dumps(r))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
