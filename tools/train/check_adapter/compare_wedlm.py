#!/usr/bin/env python3
"""Checks that train_wedlm.py trains the layout specd's wedlm policy runs (shift=0): the same rows,
positions, gates and order, and the same mask-row logits. A manual check, not part of specd's
build or tests (it needs the torch venv).

  cc -O2 -Iinclude tools/train/check_adapter/wedlm_rows.c -o /tmp/wedlm_rows build/libspecd.a \
     -lzmq -lprotobuf-c -ljemalloc -lm -lpthread        # the link line of lora_rows.c
  python tools/train/check_adapter/compare_wedlm.py --adapter DIR --tool /tmp/wedlm_rows

For each window pattern (--fills; 'f' a filled slot, 'm' a mask, for slots n+1..n+W of the
policy's second step) wedlm_rows.c makes the policy build that window itself and runs its step
through specd's runtime; here the same block (memory x[0..n], the 'f' slots observed, the 'm'
slots masked) goes through train_wedlm.forward_blocks, the function training uses.

Pass criteria, and why: (1) the policy's rows equal the trainer's physical order exactly (pending
x[n] at n, observed ascending, masks ascending; gate 1 on masks only). (2) the mask rows' top-1
tokens agree, or differ only at a near tie (torch's logits of the two tokens closer than the
largest clean-row difference). (3) for each wrong layout (no LoRA; the shifted read of R-ISD), specd's mask-row logits lie at
beta in [0.8, 1.2] on the line from that layout's logits (0) to the trainer's (1); for masks not
seeing the observed tokens after them (plain logical-order causal), specd runs that layout too
(a visibility matrix) and its effect (seeing - blind) must be the trainer's effect, beta in
[0.5, 1.5] (measured 0.75-1.19 over 3 sequences x 4 patterns: a small effect, one token, against
the residual noise; a runtime that ignored the reordering would give 0). Logits cannot be compared at a fixed small tolerance: specd runs the Q4_1 weights with
quantized activations while torch runs them dequantized to F32, which moves every logit by
~0.1-0.2 (printed: the step's clean rows, base weights, are the floor), about as much as hiding one
observed token moves a mask row; that noise is mostly not along the wrong-layout direction, and it
cancels in the effect of principle (i)."""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from isd_model import Model  # noqa: E402
from train_isd import load_adapter, load_shards  # noqa: E402
from train_wedlm import build, forward_blocks  # noqa: E402


def read_rows(path):
    raw = open(path, "rb").read()
    n, V = np.frombuffer(raw[:8], dtype="<i4")
    meta = np.frombuffer(raw[8: 8 + 12 * n], dtype="<i4").reshape(n, 3)
    gate = meta[:, 2].copy().view("<f4")
    logits = np.frombuffer(raw[8 + 12 * n:], dtype="<f4").reshape(2, n, V)
    return meta[:, 0], meta[:, 1], gate, logits[0], logits[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--adapter", required=True, help="an exported WeDLM adapter directory")
    ap.add_argument("--tool", default="/tmp/wedlm_rows")
    ap.add_argument("--data", default=".train/shards")
    ap.add_argument("--seq", type=int, default=0, help="which sequence of the data (held-out: < 16)")
    ap.add_argument("--fills", default="ffmfmm,mfmfmm,fffffm,fmmmmm,mmfffm",
                    help="window patterns of step 2 (the last slot is new in step 2: 'm')")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(a.adapter, "adapter_config.json")))
    model = Model(a.model, cfg["r"], cfg["lora_alpha"], cfg["target_modules"])
    mask_emb = load_adapter(model, a.adapter)
    if mask_emb is None:
        mask_emb = model.emb[cfg["specd_mask_token_id"]][None, :]
    mask_id = cfg["specd_mask_token_id"]
    seqs, _ = load_shards(a.data, 64)
    seqs = [(x, s) for x, s in seqs if x.shape[0] - s >= 16]
    x, s = seqs[a.seq]
    ok = True
    for fill in a.fills.split(","):
        W = len(fill)
        n = s + 2                      # history x[0..n] in step 2: pending x[n], window n+1..n+W
        l0 = n + 1
        ids = x[: l0 + W]
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            r = subprocess.run([a.tool, a.model, a.adapter, f.name, fill, str(n)] +
                               [str(int(t)) for t in ids], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"wedlm_rows failed: {r.stderr}")
            tok, pos, gate, slog, sblind = read_rows(f.name)
        rows = [(l0 + i, c == "m") for i, c in enumerate(fill)]
        obs = [p for p, m in rows if not m]
        msk = [p for p, m in rows if m]
        want_tok = [int(ids[n])] + [int(ids[p]) for p in obs] + [mask_id] * len(msk)
        want_pos = [n] + obs + msk
        want_gate = [0.0] * (1 + len(obs)) + [1.0] * len(msk)
        same_layout = (tok.tolist() == want_tok and pos.tolist() == want_pos and
                       gate.tolist() == want_gate)
        blocks = [(l0, 1.0, rows)]
        with torch.no_grad():
            mlog, (mpos, _, _), _ = forward_blocks(model, mask_emb, ids, blocks)
            # the step's clean rows in torch: memory, then the observed rows in physical order
            T = l0 + len(obs)
            cl = model(torch.cat((model.emb[ids[:l0]], model.emb[ids[obs]])) if obs else
                       model.emb[ids[:l0]], torch.tensor(list(range(l0)) + obs),
                       torch.ones(T, T, dtype=torch.bool).tril(), gated=False)
            clean_t = cl[l0 - 1:].numpy()
            # wrong layouts, to show the check tells them apart
            _, _, _, _, _, _, _, mmask = build(blocks, ids.shape[0])
            clog, kv = model(model.emb[ids], torch.arange(ids.shape[0]),
                             torch.ones(ids.shape[0], ids.shape[0], dtype=torch.bool).tril(),
                             gated=False, want_kv=True)
            okv = None
            if obs:
                mem = (torch.arange(ids.shape[0])[None, :] < l0).expand(len(obs), -1)
                omask = torch.cat((mem, torch.ones(len(obs), len(obs), dtype=torch.bool).tril()), 1)
                _, okv = model(model.emb[ids[obs]], torch.tensor(obs), omask, gated=False,
                               past=kv, want_kv=True)
            past = kv if okv is None else [(torch.cat((k, ok_)), torch.cat((v, ov)))
                                           for (k, v), (ok_, ov) in zip(kv, okv)]
            M = len(msk)
            no_lora = model(mask_emb.expand(M, -1), mpos, mmask, gated=False, past=past).numpy()
            causal_logical = mmask.clone()
            Tm = ids.shape[0]
            for i, p in enumerate(msk):
                for j, q in enumerate(obs):
                    if q > p:
                        causal_logical[i, Tm + j] = False
            no_later = model(mask_emb.expand(M, -1), mpos, causal_logical, gated=True,
                             past=past).numpy()
        mt = mlog.numpy()
        ms = slog[1 + len(obs):]
        cs = slog[: 1 + len(obs)]
        d_mask = np.abs(ms - mt).mean()
        d_clean = np.abs(cs - clean_t).mean()
        top_same = (ms.argmax(-1) == mt.argmax(-1)).mean()
        # beta: where specd's mask rows lie on the line from a wrong layout's logits (0) to the
        # trainer's (1), by least squares over all rows and tokens. The numeric noise is not
        # along that line, so beta ~ 1 even where a wrong layout is close in mean |d|.
        def beta(wrong, right=mt, got=ms):
            dv = (right - wrong).ravel().astype(np.float64)
            return float(np.dot((got - wrong).ravel(), dv) / np.dot(dv, dv))
        alt = {"no LoRA": (np.abs(ms - no_lora).mean(), beta(no_lora))}
        if obs and any(q > p for p in msk for q in obs):
            # principle (i) as an effect: specd's (seeing - blind) against the trainer's; the
            # quantization noise, common to both specd runs, mostly cancels
            sb = sblind[1 + len(obs):]
            alt["masks blind to later observed"] = (np.abs(ms - no_later).mean(),
                                                    beta(no_later, mt, no_later + (ms - sb)))
        if M > 1:
            alt["shifted read (row of q-1)"] = (np.abs(ms[1:] - mt[:-1]).mean(),
                                                beta(mt[:-1], mt[1:], ms[1:]))
        # a top-1 mismatch is tolerated only as a near tie: torch's logits of the two tokens
        # closer than the clean rows' largest difference (the numeric floor)
        floor = np.abs(cs - clean_t).max()
        ts, tt = ms.argmax(-1), mt.argmax(-1)
        gap = mt[np.arange(M), tt] - mt[np.arange(M), ts]
        ties_only = bool((gap[ts != tt] < floor).all())
        lim = {"masks blind to later observed": (0.5, 1.5)}
        good = (same_layout and ties_only and
                all(lim.get(k, (0.8, 1.2))[0] <= b <= lim.get(k, (0.8, 1.2))[1]
                    for k, (_, b) in alt.items()))
        ok &= good
        print(f"fill {fill}: rows {' '.join(('M' if g else 't') + '@' + str(p) for p, g in zip(pos, gate))}"
              f" | layout {'same' if same_layout else 'DIFFERENT'}"
              f" | mask rows: top-1 agree {top_same:.2f}"
              f"{'' if top_same == 1 else f' (mismatch gaps {np.round(gap[ts != tt], 3).tolist()} vs floor {floor:.3f})'}"
              f", mean|d| {d_mask:.4f}, max|d| "
              f"{np.abs(ms - mt).max():.3f} | clean rows mean|d| {d_clean:.4f}, top-1 agree "
              f"{(cs.argmax(-1) == clean_t.argmax(-1)).mean():.2f}"
              f" | wrong layouts mean|d|: "
              + ", ".join(f"{k} {v:.3f} (beta {b:.2f})" for k, (v, b) in alt.items())
              + f" -> {'PASS' if good else 'FAIL'}")
    print("wedlm layout check:", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
