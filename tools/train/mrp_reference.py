#!/usr/bin/env python3
"""Reference drafts of an MRP head GGUF, for checking specd's C implementation.

Given a head GGUF, the target GGUF (for E), a token sequence and its cached target hidden states
(a generator shard: tokens.i32 + hidden.f16 + seqs.json, picked by --seq), it runs the inference
procedure of specd's mrp policy (policy/self/mrp.c) exactly as the runtime should, in f32:
  committed rows j = 0..t (y = x_{j+1}, g = h_j, position j + 1), causal;
  step 1: hp_1 = the committed row t, z_1 = E . (h_t + hp_1), d_1 = argmax z_1;
  step k >= 2: one speculative row at position t + k with y = d_{k-1} (the draft, not the data
  token), g = h_t + hp_1 + ... + hp_{k-1}, attending to committed rows 0..t and this round's
  earlier speculative rows; z_k = z_{k-1} + E . hp_k, d_k = argmax z_k.
--t is the index in the sequence of the newest decided position (x_{t+1} is the token just
decided); default: the last prompt position (t = n_prompt - 1, x_{t+1} = the first response
token). Prints one line per step, or JSON with --json."""
import argparse, json, os, sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from export_mrp import read_head  # noqa: E402
from train_mrp import TARGET_DEFAULT, load_target  # noqa: E402


@torch.no_grad()
def draft(head, E, x, h, t, K):
    """x [n] tokens, h [n, d] target hiddens (f32); returns drafts, per-step top-5 (token, z),
    hp norms, and the target's own argmax at t (the no-head draft)."""
    jc = torch.arange(t + 1)
    u = head.inputs(E[x[jc + 1]], h[jc])
    m = torch.ones(t + 1, t + 1, dtype=torch.bool).tril()
    hp_c, kv_c = head(u, jc + 1, None, m)
    acc = hp_c[t:t + 1]
    past = [kv_c]
    drafts, tops, norms = [], [], [float(acc.norm())]
    z = (h[t:t + 1] + acc) @ E.t()
    for k in range(1, K + 1):
        if k >= 2:
            u = head.inputs(E[torch.tensor([drafts[-1]])], h[t:t + 1] + acc)
            mask = torch.ones(1, t + 1 + (k - 1), dtype=torch.bool)  # all committed <= t, own chain
            hpk, kvk = head(u, torch.tensor([t + k]), past, mask)
            past.append(kvk)
            acc = acc + hpk
            norms.append(float(hpk.norm()))
            z = (h[t:t + 1] + acc) @ E.t()
        v, i = z[0].topk(5)
        drafts.append(int(i[0]))
        tops.append([[int(a), round(float(b), 4)] for a, b in zip(i, v)])
    return drafts, tops, norms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--head", required=True)
    ap.add_argument("--target", default=TARGET_DEFAULT)
    ap.add_argument("--shard", default=".train/shards/s000")
    ap.add_argument("--seq", type=int, default=0, help="sequence index in the shard's seqs.json")
    ap.add_argument("--t", type=int, default=-1, help="newest decided position (default n_prompt-1)")
    ap.add_argument("--K", type=int, default=0, help="drafts (default: the head's mrp.n_draft)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    torch.set_num_threads(1)
    head, hp, meta = read_head(a.head)
    _, _, E = load_target(a.target)
    sj = json.load(open(os.path.join(a.shard, "seqs.json")))
    s = sj["sequences"][a.seq]
    o, n, d = s["offset"], s["n_tokens"], sj["n_embd"]
    tok = np.memmap(os.path.join(a.shard, "tokens.i32"), dtype="<i4", mode="r")
    hid = np.memmap(os.path.join(a.shard, "hidden.f16"), dtype="<f2", mode="r").reshape(-1, d)
    x = torch.from_numpy(np.array(tok[o:o + n], dtype=np.int64))
    h = torch.from_numpy(np.array(hid[o:o + n], dtype=np.float32))
    t = a.t if a.t >= 0 else s["n_prompt"] - 1
    if not 0 <= t <= n - 2:
        sys.exit(f"--t {t} outside 0..{n - 2}")
    K = a.K or meta["mrp.n_draft"]
    drafts, tops, norms = draft(head, E, x, h, t, K)
    A = [int((h[min(t + k, n - 1)] @ E.t()).argmax()) for k in range(0, K + 1)]
    res = {"head": a.head, "shard": a.shard, "seq": a.seq, "t": t, "n_tokens": n,
           "n_prompt": s["n_prompt"], "decided": int(x[t + 1]), "drafts": drafts,
           "top5": tops, "hp_norm": norms, "target_argmax_at_t": A[0],
           "data_next": [int(x[t + 1 + k]) if t + 1 + k < n else None for k in range(1, K + 1)],
           "target_argmax_next": A[1:]}
    if a.json:
        print(json.dumps(res))
        return
    print(f"seq {a.seq} t {t} (n_prompt {s['n_prompt']}, n {n}): decided x_{t + 1} = {res['decided']}, "
          f"target argmax at t = {A[0]}")
    for k in range(K):
        print(f"  d_{k + 1} = {drafts[k]:6d}  top5 {tops[k]}  |hp_{k + 1}| {norms[k]:.4f}  "
              f"(data x_{t + k + 2} = {res['data_next'][k]}, target argmax at t+{k + 1} = {A[k + 1]})")


if __name__ == "__main__":
    main()
