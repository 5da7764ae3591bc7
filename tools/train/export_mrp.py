#!/usr/bin/env python3
"""Writes an MRP head (a train_mrp.py checkpoint, or with --init an untrained head) as the head
GGUF of /work/mrp-shared/CONTRACT.md:
  general.architecture "llama" and the target's llama.* keys, llama.block_count = L;
  blk.<i>.{attn_norm,attn_q,attn_k,attn_v,attn_output,ffn_norm,ffn_gate,ffn_up,ffn_down}.weight,
  output_norm.weight, mrp.enorm.weight, mrp.hnorm.weight, mrp.eh_proj.weight (ggml [1152, 576]:
  576 rows of 1152, the enorm(E[y]) half first); no token_embd / output (borrowed from the
  target); mrp.version = 1, mrp.n_draft, mrp.n_vocab.
Norms are F32 (the runtime's rule); matrices F32 or F16 (--dtype). q/k rows need no permutation:
the head was trained with llama.cpp's adjacent-pair ("normal") RoPE, i.e. already in the layout
the target GGUF's attn_q/attn_k use and specd's runtime applies."""
import argparse, os, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_mrp import Head, TARGET_DEFAULT, head_from_ckpt, load_target  # noqa: E402

HP_KEYS = {"context_length": "u32", "embedding_length": "u32", "feed_forward_length": "u32",
           "attention.head_count": "u32", "attention.head_count_kv": "u32",
           "attention.layer_norm_rms_epsilon": "f32", "rope.freq_base": "f32",
           "rope.dimension_count": "u32", "vocab_size": "u32"}


def write_head(head, hp, path, dtype, n_draft, name, extra=None):
    import gguf
    w = gguf.GGUFWriter(path, arch="llama")
    w.add_name(name)
    for k, t in HP_KEYS.items():
        (w.add_uint32 if t == "u32" else w.add_float32)(f"llama.{k}", hp[k])
    w.add_uint32("llama.block_count", head.n_layer)
    w.add_uint32("mrp.version", 1)
    w.add_uint32("mrp.n_draft", n_draft)
    w.add_uint32("mrp.n_vocab", hp["vocab_size"])
    for k, v in (extra or {}).items():
        if isinstance(v, str):
            w.add_string(k, v)
        elif isinstance(v, float):
            w.add_float32(k, v)
        else:
            w.add_uint32(k, int(v))
    mdt = np.float16 if dtype == "f16" else np.float32

    def vec(t):
        return t.detach().float().numpy().astype(np.float32)

    def mat(t):
        return np.ascontiguousarray(t.detach().float().numpy().astype(mdt))

    for i, b in enumerate(head.blocks):
        for n in ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate",
                  "ffn_up", "ffn_down"):
            t = b[n]
            # numpy [out, in] -> ggml ne [in, out], as llama.cpp stores [out, in] weights
            w.add_tensor(f"blk.{i}.{n}.weight", vec(t) if t.dim() == 1 else mat(t))
    w.add_tensor("output_norm.weight", vec(head.output_norm))
    w.add_tensor("mrp.enorm.weight", vec(head.enorm))
    w.add_tensor("mrp.hnorm.weight", vec(head.hnorm))
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
    ap.add_argument("--ckpt", default="/work/mrptrain-cache/ckpt.pt")
    ap.add_argument("--init", action="store_true", help="export an untrained head (fixed seed)")
    ap.add_argument("--layers", type=int, default=1, help="with --init")
    ap.add_argument("--seed", type=int, default=0, help="with --init")
    ap.add_argument("--n-draft", type=int, default=3, help="with --init")
    ap.add_argument("--target", default=TARGET_DEFAULT)
    ap.add_argument("--dtype", choices=["f32", "f16"], default="f16")
    ap.add_argument("--name", default="")
    ap.add_argument("--out", required=True)
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
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    write_head(head, hp, a.out + ".tmp", a.dtype, n_draft, name, extra)
    os.replace(a.out + ".tmp", a.out)
    print(f"wrote {a.out}: L={head.n_layer}, n_draft={n_draft}, {a.dtype} matrices, "
          f"{os.path.getsize(a.out) / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
