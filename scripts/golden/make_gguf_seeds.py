#!/usr/bin/env python3
"""Writes the fuzz_gguf seed corpus (tests/fuzz/corpus/fuzz_gguf/): small GGUF files made by an
independent writer, gguf-py's GGUFWriter (pip package `gguf`), plus truncated copies.

  valid_*.gguf  well-formed files: every metadata value type, a tokenizer block, tensors of each
                supported type, a custom alignment, GGUF v2;
  trunc_*.gguf  prefixes of valid_llama.gguf cut inside the header, the metadata, the tensor
                table and the data.

tests/gguf/test_gguf_seeds.c checks that specd reads every valid_* file and refuses every
trunc_* one. Usage: make_gguf_seeds.py OUT_DIR   (run in a venv with `pip install gguf`)
"""
import os
import struct
import sys

import numpy as np
from gguf import GGUFWriter, GGMLQuantizationType as T
from gguf.quants import quantize

rng = np.random.default_rng(7)


def write(path, arch, fill, alignment=None):
    w = GGUFWriter(path, arch)
    if alignment:
        w.add_custom_alignment(alignment)
    fill(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama(w):
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(["<s>", "</s>", "a", "b", "ab", "\u0120x"])
    w.add_token_types([3, 3, 1, 1, 1, 1])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    w.add_add_bos_token(False)
    w.add_chat_template("{{ messages }}")
    x = (rng.standard_normal((4, 32)) * 0.5).astype(np.float32)
    w.add_tensor("token_embd.weight", quantize(x, T.Q8_0), raw_dtype=T.Q8_0)
    w.add_tensor("blk.0.attn_norm.weight", np.ones(32, dtype=np.float32))
    w.add_tensor("blk.0.attn_q.weight", quantize(x, T.Q4_1), raw_dtype=T.Q4_1)
    w.add_tensor("blk.0.attn_k.weight", quantize(x, T.Q4_0), raw_dtype=T.Q4_0)
    w.add_tensor("blk.0.attn_v.weight", x.astype(np.float16))
    w.add_tensor("output_norm.weight", quantize(x[0], T.BF16), raw_dtype=T.BF16)


def kquants(w):
    kq = rng.integers(0, 256, size=(2, 144), dtype=np.uint8)
    kq[:, 0:4] = 0x10  # small finite fp16 scales
    w.add_tensor("q4k", kq, raw_dtype=T.Q4_K)
    q6 = rng.integers(0, 256, size=(1, 210), dtype=np.uint8)
    q6[:, 208:210] = 0x10
    w.add_tensor("q6k", q6, raw_dtype=T.Q6_K)


def every_type(w):
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_float32("t.f32", 1.5)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "h\u00e9llo \"quoted\"\n")
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -2**62)
    w.add_float64("t.f64", 2.5e300)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_str", ["x", "", "zz"])
    w.add_array("t.arr_f32", [0.5, 1.5])


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    llama_path = os.path.join(out, "valid_llama.gguf")
    write(llama_path, "llama", llama)
    write(os.path.join(out, "valid_kquants_align64.gguf"), "llama", kquants, alignment=64)
    write(os.path.join(out, "valid_every_type.gguf"), "test", every_type)

    data = open(llama_path, "rb").read()
    # the same file as GGUF v2, whose layout is identical
    with open(os.path.join(out, "valid_llama_v2.gguf"), "wb") as f:
        f.write(data[:4] + struct.pack("<I", 2) + data[8:])
    for cut in (3, 12, 30, 200, len(data) // 2, len(data) - 100, len(data) - 1):
        with open(os.path.join(out, "trunc_llama_%d.gguf" % cut), "wb") as f:
            f.write(data[:cut])


if __name__ == "__main__":
    main()
