#!/usr/bin/env python3
"""Make the q4 gradient references tests/fixtures/<name>/expected-q4.safetensors.

Run by hand from anywhere, after scripts/make-fixtures.py (never in CI; the outputs are committed):

    cargo build --release --bin webtune
    python3 scripts/make-q4-fixture.py            # or: --webtune path/to/webtune

Last run with: Python 3.11.7, torch 2.15.0, transformers 5.24.0, peft 0.21.2, safetensors 0.8.0
(recorded in each file's safetensors metadata).

For each fixture below it
  1. runs `webtune dequantize --model tests/fixtures/<name> --weights q4` into a temporary
     directory: config.json + model.safetensors holding, in f32, the exact values the q4 model
     computes with (projection weights, embedding and lm_head quantized then dequantized, the
     rest widened);
  2. checks those values against an independent numpy implementation of the q4 format
     (blockwise 4-bit along rows, groups of 64, w = scale*q + offset with f16 scale/offset,
     see src/kernels/quant.rs): bit for bit, and every value within scale/2 of the original;
  3. with the fixture's own adapter (tests/fixtures/<name>/adapter) and batch (batch.json),
     computes the loss and every LoRA gradient in float64 exactly as make-fixtures.py computes
     expected.safetensors (its loss_and_grads: PyTorch + transformers + PEFT from the saved
     files, every step in float64), cross-checked by its from-scratch independent_f64;
  4. writes expected-q4.safetensors in the format of expected.safetensors ("loss" [1] and the
     gradient of every adapter tensor under its adapter_model.safetensors key, all float64),
     with its provenance and how far it lies from the unquantized reference as JSON in its
     one metadata key "made_by".
"""

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.torch import load_file, save_file

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
_spec = importlib.util.spec_from_file_location("make_fixtures", os.path.join(ROOT, "scripts", "make-fixtures.py"))
mf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mf)  # also registers the "eager_f64" attention

FIXTURES = ["llama-bias", "qwen2-tiny"]
Q4_GROUP, Q4_LEVELS = 64, 15
F16_MIN_NORMAL = np.float32(2.0**-14)


def f16_floor(x):
    """The largest f16 <= x (f32 array) that is zero or normal."""
    x = np.clip(x, -65504.0, 65504.0).astype(np.float32)
    h = x.astype(np.float16)
    over = h.astype(np.float32) > x
    h[over] = np.nextafter(h[over], np.float16(-np.inf))
    v = h.astype(np.float32)
    sub = (v != 0) & (np.abs(v) < F16_MIN_NORMAL)
    h[sub & (v > 0)] = 0
    h[sub & (v < 0)] = -F16_MIN_NORMAL
    return h


def f16_ceil(x):
    """The smallest f16 >= x >= 0 (f32 array) that is zero or normal."""
    x = np.minimum(x, 65504.0).astype(np.float32)
    h = x.astype(np.float16)
    under = h.astype(np.float32) < x
    h[under] = np.nextafter(h[under], np.float16(np.inf))
    h[(h.astype(np.float32) < F16_MIN_NORMAL)] = F16_MIN_NORMAL
    h[~(x > 0)] = 0
    return h


def q4_roundtrip(w):
    """dequantize(quantize(w)) for a (rows, cols) f32 matrix, and the per-value scale."""
    rows, cols = w.shape
    out = np.empty_like(w)
    scales = np.empty_like(w)
    for g0 in range(0, cols, Q4_GROUP):
        part = w[:, g0 : g0 + Q4_GROUP]
        offset = f16_floor(part.min(axis=1))
        rng = np.clip(part.max(axis=1), -65504.0, 65504.0).astype(np.float64) - offset.astype(np.float64)
        scale = f16_ceil((rng / Q4_LEVELS).astype(np.float32))
        low = scale.astype(np.float64) * Q4_LEVELS < rng
        while low.any():  # the f32 division may round down: offset + 15*scale must reach the max
            scale[low] = np.nextafter(scale[low], np.float16(np.inf))
            low = scale.astype(np.float64) * Q4_LEVELS < rng
        s, o = scale.astype(np.float64)[:, None], offset.astype(np.float64)[:, None]
        x = np.where(s > 0, (part.astype(np.float64) - o) / np.where(s > 0, s, 1.0), 0.0)
        q = np.floor(x)
        q = np.clip(q + (x - q >= 0.5), 0, Q4_LEVELS)  # round half away from zero (x >= 0), like Rust
        out[:, g0 : g0 + Q4_GROUP] = scale.astype(np.float32)[:, None] * q.astype(np.float32) + offset.astype(np.float32)[:, None]
        scales[:, g0 : g0 + Q4_GROUP] = scale.astype(np.float32)[:, None]
    return out, scales


def load_dir(d):
    w = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors") and not f.startswith("expected"):
            w.update(load_file(os.path.join(d, f)))
    return w


def check_dequantized(fdir, qdir):
    """The dequantized checkpoint against the numpy q4 implementation; returns (converted, kept) counts."""
    orig, deq = load_dir(fdir), load_dir(qdir)
    assert set(deq) <= set(orig), sorted(set(deq) - set(orig))
    converted = kept = 0
    for k, t in deq.items():
        assert t.dtype == torch.float32, (k, t.dtype)
        o = orig[k].to(torch.float32).numpy()
        d = t.numpy()
        if k.endswith("proj.weight") or k in ("model.embed_tokens.weight", "lm_head.weight"):
            want, scale = q4_roundtrip(o)
            assert np.array_equal(want.view(np.uint32), d.view(np.uint32)), f"{k}: webtune's q4 values differ from numpy's"
            assert np.all(np.abs(d.astype(np.float64) - o) <= scale.astype(np.float64) / 2 * (1 + 1e-6)), k
            levels = max(len(np.unique(d[r, g : g + Q4_GROUP])) for r in range(d.shape[0]) for g in range(0, d.shape[1], Q4_GROUP))
            assert levels <= 16, (k, levels)
            assert not np.array_equal(d, o), f"{k}: unchanged by q4"
            converted += 1
        else:
            assert np.array_equal(o, d), f"{k}: should be the stored values widened to f32"
            kept += 1
    return converted, kept


def make(name, webtune):
    fdir = os.path.join(mf.OUT, name)
    batch = json.load(open(os.path.join(fdir, "batch.json")))
    adapter_keys = sorted(load_file(os.path.join(fdir, "adapter", "adapter_model.safetensors")))
    ref = load_file(os.path.join(fdir, "expected.safetensors"))
    with tempfile.TemporaryDirectory() as qdir:
        subprocess.run([webtune, "dequantize", "--model", fdir, "--weights", "q4", "--out", qdir], check=True)
        converted, kept = check_dequantized(fdir, qdir)
        shutil.copytree(os.path.join(fdir, "adapter"), os.path.join(qdir, "adapter"))
        loss64, g64, base_loss = mf.loss_and_grads(qdir, torch.float64, batch, adapter_keys)
        loss_ind, g_ind = mf.independent_f64(qdir, batch)
    rel = lambda a, b: float((a - b).norm() / b.norm())
    ind_rel = max([abs(float(loss_ind) - float(loss64)) / abs(float(loss64))] + [rel(g_ind[k], g64[k]) for k in adapter_keys])
    assert ind_rel < 1e-12, f"independent float64 implementation disagrees: {ind_rel:.2e}"
    loss_vs_ref = abs(float(loss64) - float(ref["loss"])) / abs(float(ref["loss"]))
    grad_vs_ref = {k: rel(g64[k], ref[k]) for k in adapter_keys}
    expected = {"loss": loss64.reshape(1).contiguous()}
    expected.update({k: g.contiguous() for k, g in g64.items()})
    meta = {
        "made_by": "scripts/make-q4-fixture.py",
        "weights": "q4 (webtune dequantize --weights q4, checked bit for bit against numpy)",
        "versions": mf.versions(),
        "loss_without_adapter_float64": base_loss,
        "independent_float64_max_rel_diff": float(f"{ind_rel:.3e}"),
        "loss_rel_diff_from_expected": float(f"{loss_vs_ref:.3e}"),
        "grad_rel_diff_from_expected_min": float(f"{min(grad_vs_ref.values()):.3e}"),
        "grad_rel_diff_from_expected_max": float(f"{max(grad_vs_ref.values()):.3e}"),
    }
    out = os.path.join(fdir, "expected-q4.safetensors")
    # One metadata key: safetensors writes several in hash order, which would change the file on every run.
    save_file(expected, out, metadata={"made_by": json.dumps(meta, sort_keys=True)})
    os.chmod(out, 0o644)
    lo = min(grad_vs_ref, key=grad_vs_ref.get)
    print(f"== {name}: {converted} matrices q4 (bit-exact vs numpy), {kept} tensors kept; {os.path.getsize(out) / 1024:.1f} KiB")
    print(f"   loss f64 {float(loss64):.12f}  (unquantized {float(ref['loss']):.12f}, rel diff {loss_vs_ref:.3e})")
    print(f"   independent float64 implementation: max rel diff {ind_rel:.1e}")
    print(f"   grads vs unquantized reference: rel diff min {grad_vs_ref[lo]:.3e} ({lo}), max {max(grad_vs_ref.values()):.3e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--webtune", default=os.path.join(ROOT, "target", "release", "webtune"))
    args = ap.parse_args()
    webtune = os.path.abspath(args.webtune)
    if not os.path.exists(webtune):
        sys.exit(f"{webtune} not found: cargo build --release --bin webtune")
    os.chdir(ROOT)
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    print("versions:", json.dumps(mf.versions()))
    for name in FIXTURES:
        make(name, webtune)


if __name__ == "__main__":
    main()
