#!/usr/bin/env python3
"""Tiny synthetic models of each architecture the runtime supports, and llama.cpp's logits on them
(offline). Why: the only real model here is a llama; the qwen2 (Q/K/V biases) and qwen3 (per-head
Q/K RMSNorm, a head size other than n_embd / n_head) paths need a model llama.cpp can run too.

  tests/data/arch_<arch>.gguf                deterministic random weights, 0.3-0.4 MB
  tests/data/arch_<arch>_logits_golden.txt   llama.cpp's logits for a fixed id sequence

Two steps, because gguf-py and llama-cpp-python may live in different environments:
  write  (needs gguf-py + numpy: pip install gguf numpy)           writes the GGUFs
  eval   (needs llama-cpp-python 0.3.36, the oracle of the goldens)  writes the goldens
  all    runs write here, then eval under --llama-python (default: the venv bench/llama/build
         makes, ~/.cache/specd/venv-llama; python3 -m venv ~/.cache/specd/venv-llama &&
         ~/.cache/specd/venv-llama/bin/pip install llama-cpp-python==0.3.36 makes it too)

The models mirror the default model's storage: block matrices Q4_1, token_embd Q8_0 (and the
output head unless untied: Q4_1 output.weight), norms and biases F32; a gpt2-style byte-level vocabulary of 512 tokens (256 byte
tokens, a few merges, 3 control tokens) that exists only so that llama.cpp loads the file: we
feed token ids, never text. Weight scales are chosen so that activations and logits spread over
a few units (a degenerate model, e.g. all logits equal, would match trivially).

Every token goes through llama.cpp one at a time (llm.eval([t])), as in make_logits_golden.py,
whose text format the goldens share: "prompt <k> <n>" / "tokens <ids...>" /
"row <pos> <id> <logit> ..." (top 32 per row, floats printed round-trip exact).

--dtypes writes and evaluates instead one qwen2 per weight type the runtime has a matmul for
(DTYPE_MODELS: F16, BF16, Q4_0, Q4_1, Q8_0, Q4_K, Q6_K; 0.9-2.8 MB each, so not committed; use
--out elsewhere). On llama-cpp-python 0.3.36 (x86, AVX2) only Q4_1 and Q8_0 came out bit-exact;
the others differ by about an ulp per matmul output from the first row on (Q4_0 and Q4_K go
through llama.cpp's repacked q4_0_8x8 / q4_K_8x8 GEMV by default; Q4_0 is exact without it).

usage: make_arch_golden.py [all|write|eval] [--dtypes] [--out DIR] [--llama-python PATH]
                           [--threads N]
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
MODELS = {
    "llama": dict(arch="llama", seed=0, n_layer=2, n_embd=128, n_ff=256, n_head=2, n_head_kv=1, head_dim=64,
                  freq_base=100000.0, eps=1e-5),
    "qwen2": dict(arch="qwen2", seed=1, n_layer=2, n_embd=128, n_ff=256, n_head=2, n_head_kv=1, head_dim=64,
                  freq_base=1000000.0, eps=1e-6, untied=True),
    "qwen3": dict(arch="qwen3", seed=2, n_layer=2, n_embd=128, n_ff=256, n_head=4, n_head_kv=2, head_dim=128,
                  freq_base=1000000.0, eps=1e-6),
}


# Every weight type the runtime has a matmul for, one model each (--dtypes; exploration, not
# committed): a qwen2 whose block matrices and untied head all have that type. n_embd 256, since
# the K-quants pack 256 columns per block.
DTYPES = ["F16", "BF16", "Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q6_K"]
DTYPE_MODELS = {
    f"dt_{t.lower()}": dict(arch="qwen2", seed=10 + i, n_layer=2, n_embd=256, n_ff=512, n_head=4,
                            n_head_kv=2, head_dim=64, freq_base=1000000.0, eps=1e-6, untied=True,
                            types=t, output=t)
    for i, t in enumerate(DTYPES)
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


def kquant_blocks(rng, n_out, n_in, qtype, std):
    """Random but valid Q4_K / Q6_K rows (gguf-py has no quantizer for them): random quants and
    sub-block scales, a per-block fp16 scale chosen so that the weights' spread is about std."""
    import numpy as np
    nb = n_in // 256

    def f16(base):
        return (base * rng.uniform(0.5, 1.5, size=(n_out, nb, 1))).astype(np.float16).view(np.uint8)

    def u8(n, lo=0, hi=256):
        return rng.integers(lo, hi, size=(n_out, nb, n)).astype(np.uint8)

    if qtype == "Q4_K":  # d, dmin, 12 bytes of 6-bit scales and mins, 128 bytes of nibbles
        d = std / 200.0  # d * sc * q has a spread of about 200 d for uniform sc and q
        blocks = np.concatenate([f16(d), f16(7.5 * d), u8(12), u8(128)], axis=-1)
    else:  # Q6_K: 128 bytes low nibbles, 64 bytes high bits, 16 int8 scales, d
        d = std / (23.0 * 18.5)
        scales = rng.integers(-40, 41, size=(n_out, nb, 16)).astype(np.int8).view(np.uint8)
        blocks = np.concatenate([u8(128), u8(64), scales, f16(d)], axis=-1)
    return blocks.reshape(n_out, -1)


def write_models(out_dir, models):
    import numpy as np
    import gguf
    from gguf.quants import quantize

    T = gguf.GGMLQuantizationType
    tokens, types, merges = vocab()
    for name, spec in models.items():
        arch, hp = spec["arch"], spec
        rng = np.random.default_rng(SEED + spec["seed"])
        E, F, H, HKV, D = hp["n_embd"], hp["n_ff"], hp["n_head"], hp["n_head_kv"], hp["head_dim"]
        path = os.path.join(out_dir, f"arch_{name}.gguf")
        w = gguf.GGUFWriter(path, arch)
        w.add_name(f"specd synthetic {name}")
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

        def mat(name, n_out, n_in, std, qtype="Q4_1"):
            if qtype in ("Q4_K", "Q6_K"):
                w.add_tensor(name, kquant_blocks(rng, n_out, n_in, qtype, std),
                             raw_dtype=T[qtype])
                return
            x = rng.normal(0.0, std, size=(n_out, n_in)).astype(np.float32)
            if qtype == "F16":
                w.add_tensor(name, x.astype(np.float16))
            else:
                w.add_tensor(name, quantize(x, T[qtype]), raw_dtype=T[qtype])

        def vec(name, n, mean, std):
            w.add_tensor(name, (mean + rng.normal(0.0, std, size=n)).astype(np.float32))

        def ty(l, proj):  # a matrix's type: per model, or per layer and projection
            t = spec.get("types", "Q4_1")
            return t if isinstance(t, str) else t[l][proj]

        mat("token_embd.weight", N_VOCAB, E, 0.1, "Q8_0")  # small next to the blocks: no copy model
        vec("output_norm.weight", E, 1.0, 0.2)
        if hp.get("untied"):
            mat("output.weight", N_VOCAB, E, 0.1, spec.get("output", "Q4_1"))
        for l in range(hp["n_layer"]):
            p = f"blk.{l}."
            vec(p + "attn_norm.weight", E, 1.0, 0.2)
            mat(p + "attn_q.weight", H * D, E, 0.1, ty(l, "q"))
            mat(p + "attn_k.weight", HKV * D, E, 0.1, ty(l, "k"))
            mat(p + "attn_v.weight", HKV * D, E, 0.1, ty(l, "v"))
            if arch == "qwen2":  # Qwen2's K biases are large in real models; so are these
                vec(p + "attn_q.bias", H * D, 0.0, 0.3)
                vec(p + "attn_k.bias", HKV * D, 0.0, 1.0)
                vec(p + "attn_v.bias", HKV * D, 0.0, 0.1)
            if arch == "qwen3":
                vec(p + "attn_q_norm.weight", D, 1.0, 0.3)
                vec(p + "attn_k_norm.weight", D, 1.0, 0.3)
            mat(p + "attn_output.weight", E, H * D, 0.05, ty(l, "o"))
            vec(p + "ffn_norm.weight", E, 1.0, 0.2)
            mat(p + "ffn_gate.weight", F, E, 0.1, ty(l, "gate"))
            mat(p + "ffn_up.weight", F, E, 0.1, ty(l, "up"))
            mat(p + "ffn_down.weight", E, F, 0.05, ty(l, "down"))
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


def eval_models(out_dir, names, threads):
    import numpy as np
    from llama_cpp import Llama, __version__ as llama_cpp_version

    toks = token_ids()
    for arch in names:
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
    ap.add_argument("--llama-python",
                    default=os.path.expanduser("~/.cache/specd/venv-llama/bin/python"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtypes", action="store_true",
                    help="the one-type-per-model set (DTYPE_MODELS) instead of MODELS")
    a = ap.parse_args()
    models = DTYPE_MODELS if a.dtypes else MODELS
    if a.step in ("all", "write"):
        write_models(a.out, models)
    if a.step == "eval":
        eval_models(a.out, list(models), a.threads)
    if a.step == "all":
        subprocess.run([a.llama_python, os.path.abspath(__file__), "eval", "--out", a.out,
                        "--threads", str(a.threads)] + (["--dtypes"] if a.dtypes else []),
                       check=True)


if __name__ == "__main__":
    main()
