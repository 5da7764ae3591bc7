#!/usr/bin/env python3
"""llama.cpp (llama-cpp-python 0.3.36, low-level API: no Python-side logits copies) on the same
workload as bench_runtime: the anchor of bench/runtime.
  prefill: one batch of P prompt tokens, logits for the last row
  decode:  D one-token batches after the prompt, logits each
  extend:  after a 256-token prefix, k = 1..16 new tokens in one batch with logits for all k rows
           (what verifying k drafted tokens costs), rolled back after each
Token ids are (i * 7919 + 13) % n_vocab, as in bench_runtime.c. Prints median over RUNS.
usage: llama_bench.py MODEL THREADS [RUNS] [P] [D]"""
import statistics
import sys
import time

import llama_cpp as L


def main():
    model, threads = sys.argv[1], int(sys.argv[2])
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    P = int(sys.argv[4]) if len(sys.argv) > 4 else 512
    D = int(sys.argv[5]) if len(sys.argv) > 5 else 256
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    m = L.llama_model_load_from_file(model.encode(), mp)
    cp = L.llama_context_default_params()
    cp.n_ctx = 1024
    cp.n_batch = 512
    cp.n_ubatch = 512
    cp.n_threads = threads
    cp.n_threads_batch = threads
    cp.flash_attn_type = 0  # disabled: the classic F16-cache path, as our goldens
    ctx = L.llama_init_from_model(m, cp)
    mem = L.llama_get_memory(ctx)
    V = L.llama_vocab_n_tokens(L.llama_model_get_vocab(m))
    toks = [(i * 7919 + 13) % V for i in range(P + D)]
    batch = L.llama_batch_init(512, 0, 1)

    def decode(ids, pos0, all_logits):
        batch.n_tokens = len(ids)
        for i, t in enumerate(ids):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if (all_logits or i == len(ids) - 1) else 0
        assert L.llama_decode(ctx, batch) == 0

    pre, dec, ext = [], [], {k: [] for k in range(1, 17)}
    for _ in range(runs):
        L.llama_memory_clear(mem, True)
        t0 = time.perf_counter()
        decode(toks[:P], 0, False)
        pre.append(P / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for i in range(D):
            decode([toks[P + i]], P + i, True)
        dec.append(D / (time.perf_counter() - t0))
        L.llama_memory_seq_rm(mem, 0, 256, -1)
        for k in range(1, 17):
            t0 = time.perf_counter()
            decode(toks[256:256 + k], 256, True)
            ext[k].append((time.perf_counter() - t0) * 1e3)
            L.llama_memory_seq_rm(mem, 0, 256, -1)
    print("llama.cpp: prefill %.1f tok/s" % statistics.median(pre))
    print("llama.cpp: decode %.1f tok/s" % statistics.median(dec))
    print("llama.cpp: extend_ms " + " ".join("%.3f" % statistics.median(ext[k]) for k in range(1, 17)))
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(m)


if __name__ == "__main__":
    main()
