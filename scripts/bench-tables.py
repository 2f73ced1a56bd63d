#!/usr/bin/env python3
"""Markdown tables from the JSON files of scripts/bench-paper.sh (default folder target/bench).

    python3 scripts/bench-tables.py [FOLDER]

Standard library only. MB = 10^6 bytes, as printed by `webtune bench`.
"""
import json
import pathlib
import sys

folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "target/bench")
runs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
MB = 1e6
CATS = ["weights", "lora", "grads", "optimizer", "checkpoints", "activations", "scratch", "staging"]


ORDER = ["mesp", "mebp", "full", "mezo"]


def ordered(modes):
    return sorted(modes.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else len(ORDER))


def peak(run, mode):
    m = run["modes"].get(mode)
    return m["peak_bytes"] / MB if m else None


def fmt(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def paper(run):
    p = run.get("paper_mb") or {}
    return p.get("mesp"), p.get("mebp")


main = runs.get("paper-0.5b-256")
if main:
    c = main["config"]
    print(f"### Qwen2.5-0.5B, seq {c['seq']}, rank {c['rank']}, {c['optimizer']}, {c['weights']} weights "
          f"({'resident' if c['resident'] else 'streamed'}), batch 1\n")
    print("| mode | peak MB | " + " | ".join(CATS) + " | step s | tokens/s | fused update |")
    print("|---" * (len(CATS) + 5) + "|")
    for mode, m in ordered(main["modes"]):
        cats = " | ".join(fmt(m["peak_by_category"].get(k, 0) / MB) for k in CATS)
        print(f"| {mode} | **{fmt(m['peak_bytes'] / MB)}** | {cats} | {fmt(m['step_s'])} | {fmt(m['tokens_per_s'], 2)} | "
              f"{'yes' if m['fused_update'] else 'no'} |")
    ps, pb = paper(main)
    s, b = peak(main, "mesp"), peak(main, "mebp")
    if s and b:
        print(f"\nMeSP / MeBP: **{s / b:.2f}** here; the paper: {ps / pb:.2f} ({ps} / {pb} MB).\n")

adamw = runs.get("adamw-bf16-0.5b-256")
if adamw:
    print("### Our defaults (AdamW, bf16 weights), Qwen2.5-0.5B, seq 256, rank 8\n")
    print("| mode | peak MB | lora | grads | optimizer | weights | step s |")
    print("|---|---|---|---|---|---|---|")
    for mode, m in ordered(adamw["modes"]):
        pc = m["peak_by_category"]
        print(f"| {mode} | **{fmt(m['peak_bytes'] / MB)}** | {fmt(pc['lora'] / MB)} | {fmt(pc['grads'] / MB)} | "
              f"{fmt(pc['optimizer'] / MB)} | {fmt(pc['weights'] / MB)} | {fmt(m['step_s'])} |")
    print()

seq_runs = sorted(
    [(r["config"]["seq"], r) for k, r in runs.items() if k.startswith("paper-0.5b-")], key=lambda x: x[0])
if seq_runs:
    print("### Sequence sweep, Qwen2.5-0.5B, rank 8, sgd, q4 (MB)\n")
    print("| seq | MeSP here | MeBP here | ratio | MeSP paper | MeBP paper | ratio paper |")
    print("|---|---|---|---|---|---|---|")
    for seq, r in seq_runs:
        s, b = peak(r, "mesp"), peak(r, "mebp")
        ps, pb = paper(r)
        print(f"| {seq} | **{fmt(s)}** | {fmt(b)} | {fmt(s / b if s and b else None, 2)} | {fmt(ps)} | {fmt(pb)} | "
              f"{fmt(ps / pb if ps and pb else None, 2)} |")
    print()

rank_runs = sorted(
    [(r["config"]["rank"], r) for k, r in runs.items()
     if (k.startswith("rank") or k == "paper-0.5b-256") and r["config"]["seq"] == 256], key=lambda x: x[0])
if rank_runs:
    print("### Rank sweep, Qwen2.5-0.5B, seq 256, sgd, q4 (MB)\n")
    print("| rank | MeSP | MeBP | ratio | LoRA params MB |")
    print("|---|---|---|---|---|")
    for rank, r in rank_runs:
        s, b = peak(r, "mesp"), peak(r, "mebp")
        lora = r["modes"]["mesp"]["peak_by_category"]["lora"] / MB
        print(f"| {rank} | **{fmt(s)}** | {fmt(b)} | {fmt(s / b if s and b else None, 2)} | {fmt(lora)} |")
    print()

shape_runs = [runs[k] for k in ["paper-0.5b-256", "paper-1.5b-256", "paper-3b-256"] if k in runs]
if shape_runs:
    print("### Model sizes, seq 256, rank 8, sgd, q4 (MB)\n")
    print("| model | MeSP here | MeBP here | MeSP paper | MeBP paper | MeSP step s |")
    print("|---|---|---|---|---|---|")
    for r in shape_runs:
        s, b = peak(r, "mesp"), peak(r, "mebp")
        ps, pb = paper(r)
        print(f"| {r['config']['shape']} | **{fmt(s)}** | {fmt(b)} | {fmt(ps)} | {fmt(pb)} | "
              f"{fmt(r['modes']['mesp']['step_s'])} |")
    print()
