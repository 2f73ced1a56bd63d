#!/usr/bin/env python3
"""The table of scripts/bench-gpu.sh: webtune beside PyTorch + PEFT from the JSON files in DIR.

    python3 scripts/bench-gpu-table.py DIR

Ratios are webtune / PyTorch (higher is better for webtune). A product's share of peak is its
GFLOP/s over the GPU's f32 (non-tensor-core) peak: GPU_PEAK_TFLOPS, else the datasheet figure
for the GPUs listed below, else none."""
import json, os, re, sys

# Dense f32 (CUDA cores, not tensor cores) TFLOP/s by datasheet, for the names nvidia-smi prints.
PEAKS = {"H200": 67.0, "H100 80GB HBM3": 67.0, "H100 PCIe": 51.0, "A100": 19.5, "L40S": 91.6, "RTX 4090": 82.6}


def load(d, name):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        return None
    try:
        with open(p) as f:
            return json.load(f)
    except (ValueError, OSError):
        return None


def fmt(v, spec="{:.1f}"):
    return "-" if v is None else spec.format(v)


def ratio(a, b):
    return None if a is None or b in (None, 0) else a / b


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "target/bench-gpu"
    gpu = ""
    if os.path.exists(os.path.join(d, "gpu.txt")):
        gpu = open(os.path.join(d, "gpu.txt")).read().strip()
    peak = os.environ.get("GPU_PEAK_TFLOPS")
    peak = float(peak) if peak else next((v for k, v in PEAKS.items() if k in gpu), None)
    kern = load(d, "kernels.json") or {}
    print(f"GPU: {gpu or '(no nvidia-smi)'}; webtune's adapter: {kern.get('adapter', '?')}; "
          f"f32 peak used: {fmt(peak)} TFLOP/s")

    print("\n| training, seq 256, rank 8, batch 1 | webtune tok/s | PyTorch tok/s | ratio | PyTorch + ckpt tok/s | ratio |")
    print("|---|---|---|---|---|---|")
    for shape, ours, how in [("smollm2-135m", "train-smollm2.json", ""),
                             ("smollm2-135m", "train-smollm2-each.json", ", waiting at each block"),
                             ("smollm2-135m", "train-smollm2-ahead.json", ", a block's work running while the next is recorded"),
                             ("qwen2.5-0.5b", "train-qwen05.json", ""),
                             ("qwen2.5-0.5b", "train-qwen05-f16.json", ", f16 products allowed")]:
        w = load(d, ours)
        wt = w["modes"]["mesp"]["tokens_per_s"] if w else None
        if w and "phases_ahead" in w and not how:
            how = ", phases ahead" if w["phases_ahead"] else ", waiting at each block"
        if w and how.startswith((", waiting", ", a block")):
            how += f" (peak {w['modes']['mesp']['peak_bytes'] / 1e6:.1f} MB)"
        t = load(d, f"torch-train-{shape}.json")
        tc = load(d, f"torch-train-ckpt-{shape}.json")
        tt, ttc = (t or {}).get("tokens_per_s"), (tc or {}).get("tokens_per_s")
        print(f"| {shape} (webtune: MeSP, AdamW, bf16 resident{how}; PyTorch: f32) | {fmt(wt)} | {fmt(tt)} | "
              f"{fmt(ratio(wt, tt), '{:.2f}')} | {fmt(ttc)} | {fmt(ratio(wt, ttc), '{:.2f}')} |")

    p = load(d, "paper-qwen05.json")
    if p:
        print("\n| Qwen2.5-0.5B, the paper's setting (seq 256, rank 8, SGD, q4 streamed) | peak MB | step s | tok/s |")
        print("|---|---|---|---|")
        for m, r in p["modes"].items():
            print(f"| {m} | {r['peak_bytes'] / 1e6:.1f} | {r['step_s']:.3f} | {r['tokens_per_s']:.1f} |")

    print("\n| decoding, greedy, LoRA unmerged | webtune ms/token | tok/s | PyTorch ms/token | tok/s | ratio |")
    print("|---|---|---|---|---|---|")
    for shape, ours in [("smollm2-135m", "decode-smollm2.json"), ("qwen2.5-0.5b", "decode-qwen05.json")]:
        w = load(d, ours)
        wr = (w or {}).get("result", {})
        t = load(d, f"torch-decode-{shape}.json") or {}
        print(f"| {shape} | {fmt(wr.get('ms_per_token'), '{:.2f}')} | {fmt(wr.get('tokens_per_s'))} | "
              f"{fmt(t.get('ms_per_token'), '{:.2f}')} | {fmt(t.get('tokens_per_s'))} | "
              f"{fmt(ratio(wr.get('tokens_per_s'), t.get('tokens_per_s')), '{:.2f}')} |")

    tg = (load(d, "torch-gemm.json") or {})
    torch_products = tg.get("products", {})
    sq = tg.get("square")
    if sq:
        print(f"\nPyTorch f32 (TF32 off) at {sq['n']}³: {sq['gflops'] / 1000:.1f} TFLOP/s"
              + (f" = {100 * sq['gflops'] / 1000 / peak:.0f}% of peak" if peak else ""))
    print("\n| shape | product | M×K×N | variant (* = chosen; the fastest f16 one beside it) | GFLOP/s | % of f32 peak | PyTorch f32 GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    rows = []
    for k in kern.get("kernels", []):
        m = re.match(r"(\S+) (.*?) (n[tn]) bf16 (\S+)( \*)?$", k["kernel"]) if "·W" in k["kernel"] else None
        if m:
            rows.append((k, m.groups()))
    # Of the variants that multiply in f16 (timed with --f16-products), the fastest per product.
    best_f16 = {}
    for k, (proj, prod, op, variant, star) in rows:
        key = (k["shape"], proj, op)
        if variant.endswith("/f16") and k["gflops"] > best_f16.get(key, {"gflops": -1})["gflops"]:
            best_f16[key] = k
    for k, (proj, prod, op, variant, star) in rows:
        if not star and "--all" not in sys.argv and best_f16.get((k["shape"], proj, op)) is not k:
            continue
        share = 100 * k["gflops"] / 1000 / peak if peak else None
        tp = torch_products.get(k["dims"], {}).get("gflops")
        print(f"| {k['shape']} | {proj} {prod} ({op}) | {k['dims']} | {variant}{star or ''} | {k['gflops']:.0f} | "
              f"{fmt(share)} | {fmt(tp, '{:.0f}')} |")
    prof = load(d, "profile-qwen05.json")
    if prof:
        ps = prof["modes"]["mesp"].get("profiles", [])
        if ps:
            last = ps[-1]
            wall = last["wall_ms"]
            print(f"\nQwen2.5-0.5B step profile (bf16 resident, AdamW): {wall:.1f} ms wall, "
                  f"{sum(k['calls'] for k in last['profile']['kernels'])} dispatches")
            print("| kernel | calls | ms | GFLOP/s | share |")
            print("|---|---|---|---|---|")
            for k in last["profile"]["kernels"][:12]:
                g = k["flops"] / (k["ms"] * 1e6) if k["ms"] > 0 and k["flops"] > 0 else None
                print(f"| {k['name']} | {k['calls']} | {k['ms']:.2f} | {fmt(g, '{:.0f}')} | {100 * k['ms'] / wall:.1f}% |")


if __name__ == "__main__":
    main()
