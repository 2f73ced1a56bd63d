#!/usr/bin/env python3
"""numpy/OpenBLAS sgemm of the same products `webtune bench kernels` times, as JSON keyed like its
"M×K×N" column: python3 scripts/bench-numpy.py > numpy.json; webtune bench kernels --numpy numpy.json"""
import json, sys, time
import numpy as np

SHAPES = {"smollm2-135m": (576, 9, 3, 64, 1536), "qwen2.5-0.5b": (896, 14, 2, 64, 4864)}
tokens = int(sys.argv[1]) if len(sys.argv) > 1 else 256
rank = int(sys.argv[2]) if len(sys.argv) > 2 else 8
out = {}
def t(key, m, k, n):
    a = np.random.rand(m, k).astype(np.float32); b = np.random.rand(k, n).astype(np.float32)
    a @ b
    best = 1e9
    for _ in range(5):
        t0 = time.perf_counter(); a @ b; best = min(best, time.perf_counter() - t0)
    out[key] = {"ms": best * 1e3, "gflops": 2 * m * k * n / best / 1e9}
for c, h, kv, d, f in SHAPES.values():
    for din, dout in [(c, h * d), (c, kv * d), (h * d, c), (c, f), (f, c)]:
        t(f"{tokens}x{din}x{dout}", tokens, din, dout)
        t(f"{tokens}x{dout}x{din}", tokens, dout, din)
        t(f"{tokens}x{din}x{rank}", tokens, din, rank)
        t(f"{rank}x{tokens}x{din}", rank, tokens, din)
json.dump(out, sys.stdout, indent=1)
