#!/usr/bin/env python3
"""llama.cpp's tokenizer (through llama-cpp-python 0.3.36, vocab only) on a text file: the anchor
of bench/tokenize. Calls llama_tokenize once per run with a buffer large enough for the whole text
(Llama.tokenize would tokenize twice: its first buffer is n_ctx long). Prints MB/s (best of RUNS)
and writes the ids (int32 little-endian) to IDS for bench_tokenize to compare.
usage: llama_tokenize.py MODEL TEXT IDS [RUNS]"""
import sys
import time

import llama_cpp


def main():
    model, text_path, ids_path = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 5
    text = open(text_path, "rb").read()
    llm = llama_cpp.Llama(model_path=model, vocab_only=True, verbose=False)
    vocab = llm._model.vocab
    cap = len(text) + 16
    buf = (llama_cpp.llama_token * cap)()
    best = 1e30
    n = 0
    for _ in range(runs):
        t0 = time.perf_counter()
        n = llama_cpp.llama_tokenize(vocab, text, len(text), buf, cap, False, False)
        best = min(best, time.perf_counter() - t0)
    assert n >= 0
    with open(ids_path, "wb") as f:
        f.write(bytes(memoryview(buf).cast("B")[: 4 * n]))
    print("llama.cpp: %.2f MB/s (%.2f MB, %d tokens, best of %d: %.3f s)"
          % (len(text) / 1e6 / best, len(text) / 1e6, n, runs, best))


if __name__ == "__main__":
    main()
