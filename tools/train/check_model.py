#!/usr/bin/env python3
"""Checks the PyTorch forward (isd_model.py) against llama.cpp on one prompt, same GGUF file.

Step 1 (venv with llama-cpp-python):  check_model.py --dump /tmp/ref.npz
Step 2 (training venv, torch):         check_model.py --compare /tmp/ref.npz
Prints per-position top-1 agreement and the largest logit difference; the Q4_1/Q8_0 weights are
dequantized to F32 here while llama.cpp dots quantized activations, so small differences are
expected but the top-1 token should match."""
import argparse, os, sys

import numpy as np

MODEL = os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")
TEXT = ("<|im_start|>user\nWrite a Python function that adds two numbers.<|im_end|>\n"
        "<|im_start|>assistant\nHere is a simple function:\n\ndef add(a, b):\n    return a + b")

ap = argparse.ArgumentParser()
ap.add_argument("--dump")
ap.add_argument("--compare")
a = ap.parse_args()
if a.dump:
    from llama_cpp import Llama
    llm = Llama(model_path=MODEL, n_ctx=256, n_threads=1, logits_all=True, verbose=False)
    ids = llm.tokenize(TEXT.encode(), add_bos=False, special=True)
    llm.eval(ids)
    np.savez(a.dump, ids=np.array(ids), logits=np.array(llm.scores[: len(ids)], dtype=np.float32))
    print(len(ids), "tokens dumped")
else:
    import torch
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from isd_model import Model
    torch.set_num_threads(1)
    ref = np.load(a.compare)
    ids = torch.tensor(ref["ids"])
    m = Model(MODEL)
    T = ids.shape[0]
    with torch.no_grad():
        lg = m(m.emb[ids], torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril(), gated=False)
    lg = lg.numpy()
    agree = (lg.argmax(-1) == ref["logits"].argmax(-1)).mean()
    print(f"{T} positions: top-1 agreement {agree:.3f}, max |dlogit| "
          f"{np.abs(lg - ref['logits']).max():.3f}, mean |dlogit| {np.abs(lg - ref['logits']).mean():.4f}")
