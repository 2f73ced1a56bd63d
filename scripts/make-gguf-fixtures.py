#!/usr/bin/env python3
"""Make tests/fixtures/gguf/quants.gguf: random blocks of every tensor type webtune's GGUF importer
dequantizes, each next to gguf-py's own dequantization of it, in one GGUF written by gguf-py.

    python3 scripts/make-gguf-fixtures.py

Run by hand (the output is committed; Rust's unit tests in src/formats/gguf/ read it). Last run with
Python 3.11.7, numpy 2.x, gguf 0.19.0.

For each type T of F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q5_K, Q6_K the file holds
  - `q.T`: random raw blocks of type T, shape (3, 64) for the 32-wide types and the plain floats, (2, 512)
    for the 256-wide K-quants. Every byte is random except the f16 scale fields (d, dmin), which are random
    finite f16 values of moderate size, so no block decodes to inf or NaN;
  - `ref.T`: F32, the same shape, `gguf.quants.dequantize(q.T)`: the values the Rust dequantizer must
    reproduce bit for bit.
Plus a few metadata keys of different value types (the parser test reads them back), written by gguf-py so
the Rust parser is checked against the reference writer, not only against its own test writer.
"""

import os

import numpy as np
from gguf import GGMLQuantizationType as T
from gguf import GGUFWriter
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "gguf", "quants.gguf")

# Byte offsets of the f16 scale fields inside one block of each quantized type.
F16_FIELDS = {T.Q8_0: [0], T.Q4_0: [0], T.Q4_1: [0, 2], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208]}


def random_f16(rng, n, lo, hi):
    """n random finite f16 values with |x| in [lo, hi] and random sign."""
    mag = np.exp(rng.uniform(np.log(lo), np.log(hi), n))
    return (mag * rng.choice([-1.0, 1.0], n)).astype(np.float16)


def raw_blocks(rng, qtype, rows, cols):
    block, size = GGML_QUANT_SIZES[qtype]
    n_blocks = rows * cols // block
    raw = rng.integers(0, 256, size=(n_blocks, size), dtype=np.uint8)
    for off in F16_FIELDS[qtype]:
        raw[:, off:off + 2] = random_f16(rng, n_blocks, 1e-4, 0.5).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(rows, cols // block * size)


def main():
    rng = np.random.default_rng(20240613)
    w = GGUFWriter(OUT, arch="test")
    w.add_uint8("test.u8", 200)
    w.add_int16("test.i16", -12345)
    w.add_uint64("test.u64", 1 << 40)
    w.add_float64("test.f64", -2.5e-7)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "grüße")
    w.add_array("test.strings", ["a", "bc", ""])
    w.add_array("test.i32s", [1, -2, 3])
    for qtype in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q5_K, T.Q6_K]:
        rows, cols = (2, 512) if GGML_QUANT_SIZES[qtype][0] == 256 else (3, 64)
        if qtype == T.F32:
            raw = rng.standard_normal((rows, cols)).astype(np.float32).view(np.uint8)
        elif qtype == T.F16:
            raw = random_f16(rng, rows * cols, 1e-6, 6e4).reshape(rows, cols).view(np.uint8)
        elif qtype == T.BF16:
            # Random bit patterns with an exponent that is neither all zeros nor all ones.
            bits = rng.integers(0, 1 << 16, size=(rows, cols), dtype=np.uint16)
            exp = rng.integers(1, 255, size=(rows, cols), dtype=np.uint16)
            raw = ((bits & 0x807F) | (exp << 7)).astype(np.uint16).view(np.uint8)
        else:
            raw = raw_blocks(rng, qtype, rows, cols)
        ref = dequantize(raw, qtype).astype(np.float32).reshape(rows, cols)
        assert np.isfinite(ref).all(), qtype.name
        w.add_tensor(f"q.{qtype.name}", raw, raw_dtype=qtype)
        w.add_tensor(f"ref.{qtype.name}", ref)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{OUT}: {os.path.getsize(OUT)} bytes")


if __name__ == "__main__":
    main()
