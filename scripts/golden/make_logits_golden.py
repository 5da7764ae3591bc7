#!/usr/bin/env python3
"""Writes the runtime's llama.cpp goldens (offline; needs llama-cpp-python
0.3.36, e.g. the venv bench/llama/build makes: ~/.cache/specd/venv-llama).

  tests/data/runtime_logits_golden.txt   every position of a few prompts: top-32 ids and logits
  tests/data/runtime_greedy_golden.txt   greedy continuations of a few prompts

Every token goes through llama.cpp one at a time (a one-token decode), prompt included. Why:
llama.cpp evaluates a batch of prompt tokens with other kernels (llamafile's tinyBLAS GEMMs for
the F16 attention products and the Q8_0 head) than a one-token decode (ggml's vec_dot), so its
batched logits differ from its own decode logits (the files record by how much). Our kernels are
batch-invariant, so they can equal one of the two; they equal the decode path, which is also the
path every generated token takes.

Both store the prompt token ids (tokenized here by llama.cpp), so the C tests need no tokenizer.
Text format, one record per line, floats printed with 9 significant digits (exact for f32):
  logits: "prompt <k> <n>" / "tokens <ids...>" / "row <pos> <id> <logit> ... (top_k pairs)"
  greedy: "case <k>" / "prompt <n> <ids...>" / "output <m> <ids...>"   (stops at eos or n_gen)

usage: make_logits_golden.py [MODEL] [--threads N]
"""
import argparse
import os
import sys

import numpy as np
from llama_cpp import Llama, __version__ as llama_cpp_version

TOP_K = 32
N_GEN = 128
EOS = 2

LOGIT_PROMPTS = [
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "The quick brown fox jumps over the lazy dog. In 1905, Albert Einstein published four papers "
    "that changed physics: on the photoelectric effect, Brownian motion, special relativity and",
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n\n"
    "for i in range(10):\n    print(",
    # a longer one, so attention spans a few hundred keys
    "Speculative decoding speeds up autoregressive generation by letting a small draft model "
    "propose several tokens that a large target model then verifies in a single forward pass. "
    "When the draft agrees with the target, many tokens are produced for the price of one target "
    "step; when it disagrees, the first rejected token is replaced by a sample from a corrected "
    "distribution, so the output follows the target exactly. The speed-up depends on how often "
    "the draft is right, on the cost of the draft relative to the target, and on how many tokens "
    "are proposed per step. On a CPU the target's cost for k new rows grows slowly with k, because "
    "the weights are read from memory once for all rows. " * 2,
]

GREEDY_PROMPTS = [
    "<|im_start|>user\nWrite a short poem about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nExplain what a hash table is.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nGive me three tips for learning to cook.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is 17 times 23?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nTranslate 'good morning' into Spanish and French.<|im_end|>\n<|im_start|>assistant\n",
    "Once upon a time, in a small village by the mountains,",
    "The three laws of thermodynamics are",
    "import numpy as np\n\ndef softmax(x):\n",
    "Paris is the capital of France. Berlin is the capital of",
    "A list of prime numbers: 2, 3, 5, 7,",
]



def main():
    ap = argparse.ArgumentParser()
    default_model = os.path.join(
        os.environ.get("SPECD_MODEL_DIR", os.path.expanduser("~/.cache/specd/models")),
        "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("model", nargs="?", default=default_model)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data"))
    a = ap.parse_args()
    common = dict(model_path=a.model, n_ctx=2048, n_batch=512, n_threads=a.threads, verbose=False,
                  flash_attn=False)  # the classic F16-cache path our attention mirrors

    llm = Llama(logits_all=True, **common)
    head = (f"# llama-cpp-python {llama_cpp_version}, model {os.path.basename(a.model)}, "
            f"threads {a.threads}, flash_attn off, F16 KV cache, one token per eval\n")
    lines = [head, "specd-logits-golden 1\n", f"top_k {TOP_K}\n", f"n_vocab {llm.n_vocab()}\n"]
    for k, text in enumerate(LOGIT_PROMPTS):
        toks = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        llm.eval(toks)
        batch = np.array(llm.scores[: len(toks)], dtype=np.float32)
        # the golden: the same tokens one at a time
        llm.reset()
        for t in toks:
            llm.eval([t])
        scores = np.array(llm.scores[: len(toks)], dtype=np.float32)
        seq = batch  # what follows reports llama.cpp's batched path against its decode path
        self_delta = max(float(np.abs(scores[p][np.argsort(-scores[p])[:TOP_K]] -
                                          seq[p][np.argsort(-scores[p])[:TOP_K]]).max())
                         for p in range(len(toks)))
        self_agree = int((scores.argmax(1) == seq.argmax(1)).sum())
        lines.append(f"# llama.cpp one-token vs batched evals: max |delta| {self_delta:.4f}, "
                     f"top-1 agree {self_agree}/{len(toks)}\n")
        sys.stderr.write(lines[-1])
        lines.append(f"prompt {k} {len(toks)}\n")
        lines.append("tokens " + " ".join(map(str, toks)) + "\n")
        for p in range(len(toks)):
            row = scores[p]
            top = np.argsort(-row, kind="stable")[:TOP_K]
            lines.append(f"row {p} " + " ".join(f"{int(i)} {float(row[i])!r}" for i in top) + "\n")
    with open(os.path.join(a.out, "runtime_logits_golden.txt"), "w") as f:
        f.writelines(lines)
    del llm

    llm = Llama(logits_all=False, **common)
    lines = [head, "specd-greedy-golden 1\n", f"n_gen {N_GEN}\n", f"eos {EOS}\n"]
    for k, text in enumerate(GREEDY_PROMPTS):
        toks = llm.tokenize(text.encode(), add_bos=False, special=True)
        llm.reset()
        for t in toks:
            llm.eval([t])
        out = []
        for _ in range(N_GEN):
            # only the last row has logits (logits_all off, as in plain generation)
            last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
            t = int(np.argmax(last))
            out.append(t)
            if t == EOS:
                break
            llm.eval([t])
        lines.append(f"case {k}\n")
        lines.append(f"prompt {len(toks)} " + " ".join(map(str, toks)) + "\n")
        lines.append(f"output {len(out)} " + " ".join(map(str, out)) + "\n")
        sys.stderr.write(f"case {k}: {len(toks)} prompt tokens, {len(out)} generated\n")
    with open(os.path.join(a.out, "runtime_greedy_golden.txt"), "w") as f:
        f.writelines(lines)


if __name__ == "__main__":
    main()
