#!/usr/bin/env python3
"""Writes tests/data/dequant_golden.bin: dequantized values from an independent implementation,
gguf-py's numpy dequantizers (pip package `gguf`), for specd's to_float kernels to match.

Records of two kinds:
  synthetic  raw blocks stored in the file (random bytes with finite scales, and blocks made by
             gguf-py's own quantizers where it has one) and their dequantized values;
  model      the first rows of one tensor per type in the default model (read with gguf-py's
             GGUFReader); only the tensor name and the values are stored, the test reads the
             bytes from the model itself.

Format, little-endian: b"SPDQ", u32 version (1), u32 record count, then per record:
  u32 ggml type, u32 kind (0 synthetic, 1 model), u32 name length, name bytes,
  u64 element count, u64 raw byte count, raw bytes (kind 0 only), element count x f32.

Usage: make_dequant_golden.py MODEL.gguf OUT.bin   (run in a venv with `pip install gguf`)
"""
import struct
import sys

import numpy as np
from gguf import GGUFReader, GGMLQuantizationType as T
from gguf.quants import dequantize, quantize

rng = np.random.default_rng(20251122)


def finite_halves(n, scale):
    """n fp16 values (as bytes) that are finite, of magnitude ~scale."""
    return (rng.standard_normal(n) * scale).astype(np.float16)


def random_blocks(qtype, n_blocks):
    """Random bytes for n_blocks blocks of qtype, with every fp16 scale field made finite."""
    sizes = {T.Q4_0: 18, T.Q4_1: 20, T.Q8_0: 34, T.Q4_K: 144, T.Q6_K: 210}
    raw = rng.integers(0, 256, size=(n_blocks, sizes[qtype]), dtype=np.uint8)
    if qtype in (T.Q4_0, T.Q8_0):
        raw[:, 0:2] = finite_halves(n_blocks, 0.05).view(np.uint8).reshape(n_blocks, 2)
    elif qtype == T.Q4_1:
        raw[:, 0:4] = finite_halves(2 * n_blocks, 0.05).view(np.uint8).reshape(n_blocks, 4)
    elif qtype == T.Q4_K:
        raw[:, 0:4] = finite_halves(2 * n_blocks, 0.01).view(np.uint8).reshape(n_blocks, 4)
    elif qtype == T.Q6_K:
        raw[:, 208:210] = finite_halves(n_blocks, 0.001).view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


def random_halfwords(n, is_bf16):
    """n random 16-bit patterns that are not NaN in fp16 (or bf16)."""
    out = []
    while len(out) < n:
        h = int(rng.integers(0, 65536))
        if is_bf16:
            nan = (h & 0x7F80) == 0x7F80 and (h & 0x7F) != 0
        else:
            nan = (h & 0x7C00) == 0x7C00 and (h & 0x3FF) != 0
        if not nan:
            out.append(h)
    return np.array(out, dtype=np.uint16).view(np.uint8)


def record(qtype, kind, name, n_elements, raw, values):
    values = np.asarray(values, dtype=np.float32).reshape(-1)
    assert values.size == n_elements
    name_b = name.encode()
    out = struct.pack("<III", int(qtype), kind, len(name_b)) + name_b
    out += struct.pack("<QQ", n_elements, len(raw))
    if kind == 0:
        out += bytes(raw)
    return out + values.astype("<f4").tobytes()


def main():
    model_path, out_path = sys.argv[1], sys.argv[2]
    recs = []

    # synthetic: random bytes for every type gguf-py can dequantize
    for qtype, n_blocks, block in ((T.Q4_0, 8, 32), (T.Q4_1, 8, 32), (T.Q8_0, 8, 32),
                                   (T.Q4_K, 3, 256), (T.Q6_K, 3, 256)):
        raw = random_blocks(qtype, n_blocks)
        vals = dequantize(raw.reshape(1, -1), qtype)
        recs.append(record(qtype, 0, "random", n_blocks * block, raw, vals))
    for qtype, is_bf16 in ((T.F16, False), (T.BF16, True)):
        raw = random_halfwords(512, is_bf16)
        vals = dequantize(raw.reshape(1, -1), qtype)
        recs.append(record(qtype, 0, "random", 512, raw, vals))

    # synthetic: blocks made by gguf-py's quantizers from random floats
    x = (rng.standard_normal((1, 256)) * 0.7).astype(np.float32)
    for qtype in (T.Q4_0, T.Q4_1, T.Q8_0, T.BF16, T.F16):
        raw = quantize(x, qtype).reshape(-1).view(np.uint8)
        vals = dequantize(raw.reshape(1, -1), qtype)
        recs.append(record(qtype, 0, "quantized", 256, raw, vals))

    # model: the first rows of one tensor per type
    reader = GGUFReader(model_path)
    tensors = {t.name: t for t in reader.tensors}
    for name, rows in (("token_embd.weight", 2), ("blk.0.attn_q.weight", 2),
                       ("blk.0.attn_norm.weight", 1)):
        t = tensors[name]
        ne0 = int(t.shape[0])
        raw = np.asarray(t.data).reshape(-1).view(np.uint8)
        row_bytes = raw.size // int(np.prod([int(s) for s in t.shape[1:]]) or 1)
        raw = raw[: rows * row_bytes]
        if t.tensor_type == T.F32:
            vals = raw.view(np.float32)
        else:
            vals = dequantize(raw.reshape(rows, row_bytes), t.tensor_type)
        recs.append(record(t.tensor_type, 1, name, rows * ne0, raw, vals))

    with open(out_path, "wb") as f:
        f.write(b"SPDQ" + struct.pack("<II", 1, len(recs)))
        for r in recs:
            f.write(r)


if __name__ == "__main__":
    main()
