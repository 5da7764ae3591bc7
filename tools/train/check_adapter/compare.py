#!/usr/bin/env python3
"""Checks that specd's runtime, loading an exported adapter, computes the same mask-row logits as
the training forward (catches a wrong q/k row permutation, a wrong scale or name): a manual
check, not part of specd's build or tests.

  cc -O2 -Iinclude tools/train/check_adapter/lora_rows.c -o /tmp/lora_rows build/libspecd.a \
     -lzmq -lprotobuf-c -ljemalloc -lm -lpthread
  /tmp/lora_rows MODEL ADAPTER_DIR /tmp/rows.bin <token ids...> 3 0     # 3 mask rows of id 0
  python compare.py --ckpt CKPT --ids "<token ids...>" --rows /tmp/rows.bin
"""
import argparse, os, sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from isd_model import Model  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--model", default=os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
ap.add_argument("--ckpt", required=True)
ap.add_argument("--ids", required=True)
ap.add_argument("--rows", required=True)
ap.add_argument("--n-mask", type=int, default=3)
a = ap.parse_args()
torch.set_num_threads(1)
ids = torch.tensor([int(v) for v in a.ids.split()])
ck = torch.load(a.ckpt)
m = Model(a.model, ck["args"]["rank"], ck["args"]["alpha"], ck["args"]["targets"].split(","))
m.lora.load_state_dict(ck["lora"])
T, M = ids.shape[0], a.n_mask
mask_ids = torch.full((M,), ck["args"]["mask_token_id"], dtype=torch.long)
with torch.no_grad():
    clog, kv = m(m.emb[ids], torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril(),
                 gated=False, want_kv=True)
    mask = torch.cat((torch.ones(M, T, dtype=torch.bool), torch.ones(M, M, dtype=torch.bool).tril()), 1)
    nlog = m(m.emb[mask_ids], torch.arange(T, T + M), mask, gated=True, past=kv)
    blog = m(m.emb[mask_ids], torch.arange(T, T + M), mask, gated=False, past=kv)
s = np.fromfile(a.rows, dtype=np.float32).reshape(T + M, -1)
t = torch.cat((clog, nlog)).numpy()
print("clean rows: top-1 agreement", (s[:T].argmax(-1) == t[:T].argmax(-1)).mean(),
      "max |d|", np.abs(s[:T] - t[:T]).max())
print("mask rows: top-1 specd", s[T:].argmax(-1), "torch", t[T:].argmax(-1),
      "torch without LoRA", blog.numpy().argmax(-1))
print("mask rows: mean |d| specd vs torch", np.abs(s[T:] - t[T:]).mean(),
      "(vs torch without LoRA", np.abs(s[T:] - blog.numpy()).mean(), ")")
