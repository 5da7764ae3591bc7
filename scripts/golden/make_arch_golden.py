#!/usr/bin/env python3
"""Tiny synthetic models of each architecture the runtime supports, and llama.cpp's logits on them
(offline). Why: the only real model here is a llama; the qwen2 (Q/K/V biases) and qwen3 (per-head
Q/K RMSNorm, a head size other than n_embd / n_head) paths need a model llama.cpp can run too.

  tests/data/arch_<arch>.gguf                deterministic random weights, 0.3-0.4 MB
  tests/data/arch_<arch>_logits_golden.txt   llama.cpp's logits for a fixed id sequence

Two steps, because gguf-py and llama-cpp-python live in different environments here:
  write  (needs gguf-py + numpy, e.g. /work/venv-gguf)    writes the GGUFs
  eval   (needs llama-cpp-python, e.g. /work/venv-llama)  writes the goldens
  all    runs write here, then eval under --llama-python (default /work/venv-llama/bin/python)

The models mirror the default model's storage: block matrices Q4_1, token_embd Q8_0 (and the
output head unless untied: Q4_1 output.weight), norms and biases F32; a gpt2-style byte-level vocabulary of 512 tokens (256 byte
tokens, a few merges, 3 control tokens) that exists only so that llama.cpp loads the file: we
feed token ids, never text. Weight scales are chosen so that activations and logits spread over
a few units (a degenerate model, e.g. all logits equal, would match trivially).

Every token goes through llama.cpp one at a time (llm.eval([t])), as in make_logits_golden.py,
whose text format the goldens share: "prompt <k> <n>" / "tokens <ids...>" /
"row <pos> <id> <logit> ..." (top 32 per row, floats printed round-trip exact).

usage: make_arch_golden.py [all|write|eval] [--out DIR] [--llama-python PATH] [--threads N]
"""
import argparse
import os
import subprocess
import sys

TOP_K = 32
N_VOCAB = 512
N_TOKENS = 96
SEED = 20261122

# arch -> hyperparameters. qwen3 also gets Qwen3's head size 128, other than n_embd / n_head (so
# its Q and attention-output matrices are not square); qwen2 an untied output head (as Qwen2's
# larger models have; the others tie it, as SmolLM2 and the small Qwens do).
ARCHS = {
    "llama": dict(n_layer=2, n_embd=128, n_ff=256, n_head=2, n_head_kv=1, head_dim=64,
                  freq_base=100000.0, eps=1e-5),
    "qwen2": dict(n_layer=2, n_embd=128, n_ff=256, n_head=2, n_head_kv=1, head_dim=64,
                  freq_base=1000000.0, eps=1e-6, untied=True),
    "qwen3": dict(n_layer=2, n_embd=128, n_ff=256, n_head=4, n_head_kv=2, head_dim=128,
                  freq_base=1000000.0, eps=1e-6),
}


def bytes_to_unicode():
    """GPT-2's byte -> printable character map (the byte-level BPE alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def vocab():
    """512 tokens: the 256 byte tokens, 253 merges, 3 control tokens (ids 509..511)."""
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges = []
    letters = "etaoinshrdlucmfwypvbgkjqxz"
    sp = b2u[ord(" ")]
    for c in letters:  # " x"
        merges.append((sp, c))
    for a in letters:  # two-letter pairs
        for c in letters:
            if len(merges) == N_VOCAB - 256 - 3:
                break
            merges.append((a, c))
    for a, c in merges:
        tokens.append(a + c)
    types = [1] * len(tokens)
    for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        tokens.append(s)
        types.append(3)
    assert len(tokens) == N_VOCAB and len(set(tokens)) == N_VOCAB
    return tokens, types, [f"{a} {c}" for a, c in merges]


def write_models(out_dir):
    import numpy as np
    import gguf
    from gguf.quants import quantize

    Q41, Q80, F32 = (gguf.GGMLQuantizationType.Q4_1, gguf.GGMLQuantizationType.Q8_0,
                     gguf.GGMLQuantizationType.F32)
    tokens, types, merges = vocab()
    for k, (arch, hp) in enumerate(ARCHS.items()):
        rng = np.random.default_rng(SEED + k)
        E, F, H, HKV, D = hp["n_embd"], hp["n_ff"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        path = os.path.join(out_dir, f"arch_{arch}.gguf")
        w = gguf.GGUFWriter(path, arch)
        w.add_name(f"specd synthetic {arch}")
        w.add_block_count(hp["n_layer"])
        w.add_context_length(2048)
        w.add_embedding_length(E)
        w.add_feed_forward_length(F)
        w.add_head_count(H)
        w.add_head_count_kv(HKV)
        if H * D != E:
            w.add_key_length(D)
            w.add_value_length(D)
        w.add_rope_freq_base(hp["freq_base"])
        w.add_layer_norm_rms_eps(hp["eps"])
        w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
        w.add_tokenizer_model("gpt2")
        w.add_tokenizer_pre("default")
        w.add_token_list(tokens)
        w.add_token_types(types)
        w.add_token_merges(merges)
        w.add_bos_token_id(510)
        w.add_eos_token_id(511)
        w.add_add_bos_token(False)

        def mat(name, n_out, n_in, std, qtype=Q41):
            x = rng.normal(0.0, std, size=(n_out, n_in)).astype(np.float32)
            w.add_tensor(name, quantize(x, qtype), raw_dtype=qtype)

        def vec(name, n, mean, std):
            w.add_tensor(name, (mean + rng.normal(0.0, std, size=n)).astype(np.float32))

        mat("token_embd.weight", N_VOCAB, E, 0.1, Q80)  # small next to the blocks: no copy model
        vec("output_norm.weight", E, 1.0, 0.2)
        if hp.get("untied"):
            mat("output.weight", N_VOCAB, E, 0.1)
        for l in range(hp["n_layer"]):
            p = f"blk.{l}."
            vec(p + "attn_norm.weight", E, 1.0, 0.2)
            mat(p + "attn_q.weight", H * D, E, 0.1)
            mat(p + "attn_k.weight", HKV * D, E, 0.1)
            mat(p + "attn_v.weight", HKV * D, E, 0.1)
            if arch == "qwen2":  # Qwen2's K biases are large in real models; so are these
                vec(p + "attn_q.bias", H * D, 0.0, 0.3)
                vec(p + "attn_k.bias", HKV * D, 0.0, 1.0)
                vec(p + "attn_v.bias", HKV * D, 0.0, 0.1)
            if arch == "qwen3":
                vec(p + "attn_q_norm.weight", D, 1.0, 0.3)
                vec(p + "attn_k_norm.weight", D, 1.0, 0.3)
            mat(p + "attn_output.weight", E, H * D, 0.05)
            vec(p + "ffn_norm.weight", E, 1.0, 0.2)
            mat(p + "ffn_gate.weight", F, E, 0.1)
            mat(p + "ffn_up.weight", F, E, 0.1)
            mat(p + "ffn_down.weight", E, F, 0.05)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        sys.stderr.write(f"{path}: {os.path.getsize(path)} bytes\n")


def token_ids():
    """A fixed sequence over the whole vocabulary, control tokens included."""
    import numpy as np
    rng = np.random.default_rng(SEED)
    ids = [int(t) for t in rng.integers(0, N_VOCAB, size=N_TOKENS)]
    ids[0] = 510  # <|im_start|>
    ids[N_TOKENS // 2] = 511
    return ids


def eval_models(out_dir, threads):
    import numpy as np
    from llama_cpp import Llama, __version__ as llama_cpp_version

    toks = token_ids()
    for arch in ARCHS:
        path = os.path.join(out_dir, f"arch_{arch}.gguf")
        llm = Llama(model_path=path, n_ctx=512, n_batch=512, n_threads=threads, verbose=False,
                    flash_attn=False, logits_all=True)
        assert llm.n_vocab() == N_VOCAB
        llm.reset()
        llm.eval(toks)
        batch = np.array(llm.scores[: len(toks)], dtype=np.float32)
        llm.reset()
        for t in toks:
            llm.eval([t])
        scores = np.array(llm.scores[: len(toks)], dtype=np.float32)
        spread = float(np.median(scores.max(1) - np.median(scores, 1)))
        self_delta = float(np.abs(scores - batch).max())
        self_agree = int((scores.argmax(1) == batch.argmax(1)).sum())
        lines = [
            f"# llama-cpp-python {llama_cpp_version}, model arch_{arch}.gguf (synthetic, "
            f"make_arch_golden.py), threads {threads}, flash_attn off, F16 KV cache, "
            f"one token per eval\n",
            f"# median (max - median) logit per row {spread:.3f}; llama.cpp one-token vs batched "
            f"evals: max |delta| {self_delta:.4g}, top-1 agree {self_agree}/{len(toks)}\n",
            "specd-logits-golden 1\n", f"top_k {TOP_K}\n", f"n_vocab {N_VOCAB}\n",
            f"prompt 0 {len(toks)}\n", "tokens " + " ".join(map(str, toks)) + "\n",
        ]
        sys.stderr.write(f"{arch}: " + lines[1][2:])
        for p in range(len(toks)):
            row = scores[p]
            top = np.argsort(-row, kind="stable")[:TOP_K]
            lines.append(f"row {p} " + " ".join(f"{int(i)} {float(row[i])!r}" for i in top) + "\n")
        with open(os.path.join(out_dir, f"arch_{arch}_logits_golden.txt"), "w") as f:
            f.writelines(lines)
        del llm


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("step", nargs="?", default="all", choices=["all", "write", "eval"])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                  "..", "..", "tests", "data"))
    ap.add_argument("--llama-python", default="/work/venv-llama/bin/python")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    if a.step in ("all", "write"):
        write_models(a.out)
    if a.step == "eval":
        eval_models(a.out, a.threads)
    if a.step == "all":
        subprocess.run([a.llama_python, os.path.abspath(__file__), "eval", "--out", a.out,
                        "--threads", str(a.threads)], check=True)


if __name__ == "__main__":
    main()
