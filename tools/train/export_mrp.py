#!/usr/bin/env python3
"""Writes an MRP head (a train_mrp.py checkpoint, or with --init an untrained head) as the head
GGUF that specd's mrp policy loads (policy/self/mrp_head.h):
  general.architecture "llama" and the target's llama.* keys, llama.block_count = L;
  blk.<i>.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}.weight,
  output_norm.weight, mrp.enorm.weight, mrp.hnorm.weight, mrp.eh_proj.weight (ggml [1152, 576]:
  576 rows of 1152, the enorm(E[y]) half first); no token_embd / output (borrowed from the
  target); mrp.version = 1, mrp.n_draft, mrp.n_vocab; with --draft-vocab N > 0 also
  mrp.draft_vocab (INT32 array key: N distinct token ids, most frequent first) and
  mrp.draft_vocab_source (a string saying what was counted).
The draft vocabulary (FR-Spec): the response tokens (positions >= n_prompt) of the training split
(sequences whose prompt_id % --holdout-mod != 0) of every finished shard (DONE) under --data,
ranked by count, ties by the count over all tokens of those sequences, then by id. It is a key,
not a tensor, because specd's GGUF reader admits only tensor types it has kernels for. The
coverage (fraction of response tokens inside the top N, training split and held out) is printed
for a few N.
Norms are F32 (the runtime's rule); matrices F32, F16 or Q8_0 (--dtype). q/k rows need no permutation:
the head was trained with llama.cpp's adjacent-pair ("normal") RoPE, i.e. already in the layout
the target GGUF's attn_q/attn_k use and specd's runtime applies."""
import argparse, os, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_mrp import Head, TARGET_DEFAULT, head_from_ckpt, load_target  # noqa: E402
import target_record  # noqa: E402

HP_KEYS = {"context_length": "u32", "embedding_length": "u32", "feed_forward_length": "u32",
           "attention.head_count": "u32", "attention.head_count_kv": "u32",
           "attention.layer_norm_rms_epsilon": "f32", "rope.freq_base": "f32",
           "rope.dimension_count": "u32", "vocab_size": "u32"}


def draft_vocab(data_dir, holdout_mod, n_vocab):
    """-> (token ids ranked most frequent first (all n_vocab), coverage lines, source text)"""
    import glob
    import json
    resp = np.zeros(n_vocab, np.int64)
    allt = np.zeros(n_vocab, np.int64)
    held = np.zeros(n_vocab, np.int64)
    shards = []
    for d in sorted(glob.glob(os.path.join(data_dir, "s[0-9]*"))):
        if not os.path.exists(os.path.join(d, "DONE")):
            continue
        shards.append(os.path.basename(d))
        meta = json.load(open(os.path.join(d, "seqs.json")))
        toks = np.fromfile(os.path.join(d, "tokens.i32"), np.int32)
        for s in meta["sequences"]:
            o, p, n = s["offset"], s["n_prompt"], s["n_tokens"]
            seq = toks[o:o + n]
            if s["prompt_id"] % holdout_mod == 0:
                np.add.at(held, seq[p:], 1)
            else:
                np.add.at(resp, seq[p:], 1)
                np.add.at(allt, seq, 1)
    if not shards or resp.sum() == 0:
        sys.exit(f"export: no finished shard with response tokens under {data_dir}")
    src = (f"response tokens of the training split (prompt_id % {holdout_mod} != 0) of "
           f"{','.join(shards)}: {int(resp.sum())} tokens, {int((resp > 0).sum())} distinct")
    return rank_vocab(resp, allt, held, src)


def rank_vocab(resp, allt, held, src):
    """Token counts (response tokens of the training split, all tokens of those sequences, held-out
    response tokens; [n_vocab] each) -> (ids most frequent first, coverage lines, src)."""
    n_vocab = resp.shape[0]
    order = np.lexsort((np.arange(n_vocab), -allt, -resp))
    lines = []
    for N in (1024, 2048, 4096, 8192, 16384):
        top = order[:N]
        lines.append(f"  top {N:5d}: coverage {resp[top].sum() / resp.sum():.4f} (training split), "
                     f"{held[top].sum() / max(held.sum(), 1):.4f} (held out)")
    return order, lines, src


def write_head(head, hp, path, dtype, n_draft, name, extra=None, dvocab=None):
    import gguf
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name(name)
    for k, t in HP_KEYS.items():
        (w.add_uint32 if t == "u32" else w.add_float32)(f"llama.{k}", hp[k])
    w.add_uint32("llama.block_count", head.n_layer)
    w.add_uint32("mrp.version", 1)
    w.add_uint32("mrp.n_draft", n_draft)
    w.add_uint32("mrp.n_vocab", hp["vocab_size"])
    if dvocab is not None:
        w.add_array("mrp.draft_vocab", [int(x) for x in dvocab])
    for k, v in (extra or {}).items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, int(v))
    mdt = np.float32 if dtype == "f32" else np.float16

    def vec(t):
        return t.detach().float().numpy().astype(np.float32)

    def mat(t):
        return np.ascontiguousarray(t.detach().float().numpy().astype(mdt))

    def blk_mat(t):
        """q8_0: Q8_0 blocks of 32 along each row (ggml's layout; rows of 576 / 1152)"""
        if dtype != "q8_0":
            return mat(t)
        a = t.detach().float().numpy().astype(np.float32)
        return gguf.quants.quantize(a, gguf.GGMLQuantizationType.Q8_0)

    for i, b in enumerate(head.blocks):
        for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                  "ffn_up", "ffn_down"):
            t = b[n]
            # numpy [out, in] -> ggml ne [in, out], as llama.cpp stores [out, in] weights
            if t.dim() == 1:
                w.add_tensor(f"blk.{i}.{n}.weight", vec(t))
            elif dtype == "q8_0":
                w.add_tensor(f"blk.{i}.{n}.weight", blk_mat(t),
                             raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            else:
                w.add_tensor(f"blk.{i}.{n}.weight", mat(t))
    w.add_tensor("output_norm.weight", vec(head.output_norm))
    w.add_tensor("mrp.enorm.weight", vec(head.enorm))
    w.add_tensor("mrp.hnorm.weight", vec(head.hnorm))
    if dtype == "q8_0":
        w.add_tensor("mrp.eh_proj.weight", blk_mat(head.eh_proj),
                     raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    else:
        w.add_tensor("mrp.eh_proj.weight", mat(head.eh_proj))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def read_head(path):
    """GGUF head -> (Head, hp, meta): the inverse of write_head (dequantizes F16/F32)."""
    import gguf
    from train_mrp import gguf_kv
    r = gguf.GGUFReader(path)
    hp = {k: gguf_kv(r, f"llama.{k}") for k in HP_KEYS}
    L = gguf_kv(r, "llama.block_count")
    meta = {k: gguf_kv(r, k) for k in ("mrp.version", "mrp.n_draft", "mrp.n_vocab", "general.name")}
    head = Head(hp, L)
    W = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape.tolist())]
        W[t.name] = torch.from_numpy(np.array(a, dtype=np.float32).reshape(shape))
    with torch.no_grad():
        for i, b in enumerate(head.blocks):
            for n in b:
                b[n].copy_(W[f"blk.{i}.{n}.weight"])
        head.output_norm.copy_(W["output_norm.weight"])
        head.enorm.copy_(W["mrp.enorm.weight"])
        head.hnorm.copy_(W["mrp.hnorm.weight"])
        head.eh_proj.copy_(W["mrp.eh_proj.weight"])
    return head, hp, meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ckpt", default=".train/mrp/ckpt.pt")
    ap.add_argument("--init", action="store_true", help="export an untrained head (fixed seed)")
    ap.add_argument("--layers", type=int, default=1, help="with --init")
    ap.add_argument("--seed", type=int, default=0, help="with --init")
    ap.add_argument("--n-draft", type=int, default=3, help="with --init")
    ap.add_argument("--target", default=TARGET_DEFAULT)
    ap.add_argument("--dtype", choices=["f32", "f16", "q8_0"], default="f16",
                    help="matrices (norms stay f32); q8_0: about 3x less head time per row in "
                         "specd on CPU, drafts from slightly rounded weights")
    ap.add_argument("--name", default="")
    ap.add_argument("--draft-vocab", type=int, default=16384,
                    help="ids in mrp.draft_vocab (0: none; the policy's vocab= takes the first "
                         "8192 by default)")
    ap.add_argument("--data", default=".train/shards", help="shards for --draft-vocab")
    ap.add_argument("--holdout-mod", type=int, default=10,
                    help="prompt_id %% M == 0 is held out (train_mrp.py's split)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--specd", default="build/specd",
                    help="computes --target's fingerprint for <out>.target.json")
    a = ap.parse_args()
    if a.init:
        _, hp, _ = load_target(a.target)
        head = Head(hp, a.layers, seed=a.seed)
        n_draft, name = a.n_draft, a.name or f"smollm2-135m-mrp-init-L{a.layers}"
        extra = {"mrp.train_steps": 0}
    else:
        ck = torch.load(a.ckpt, map_location="cpu", weights_only=False)
        head, hp = head_from_ckpt(ck), ck["hp"]
        if ck["args"].get("direct"):
            sys.exit("export: a --direct (ablation) head is not the contract's residual head")
        n_draft = ck["args"]["K"]
        name = a.name or f"smollm2-135m-mrp-L{head.n_layer}"
        extra = {"mrp.train_steps": ck["step"], "mrp.train_tokens": ck["tokens_seen"]}
    dvocab = None
    if a.draft_vocab > 0:
        order, lines, src = draft_vocab(a.data, a.holdout_mod, hp["vocab_size"])
        dvocab = order[:min(a.draft_vocab, hp["vocab_size"])]
        extra["mrp.draft_vocab_source"] = src
        print(f"draft vocabulary: {len(dvocab)} ids; {src}")
        print("\n".join(lines))
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    write_head(head, hp, a.out + ".tmp", a.dtype, n_draft, name, extra, dvocab)
    os.replace(a.out + ".tmp", a.out)
    target_record.write(a.out, a.target, a.specd)
    print(f"wrote {a.out}: L={head.n_layer}, n_draft={n_draft}, {a.dtype} matrices, "
          f"{os.path.getsize(a.out) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
