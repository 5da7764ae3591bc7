#!/usr/bin/env python3
"""Checks that train_sdar.py trains the layout specd's sdar policy runs: the same rows, positions
and gates, and the same block-row logits. A manual check, not part of specd's build or tests (it
needs the torch venv).

  cc -O2 -Iinclude tools/train/check_adapter/sdar_rows.c -o /tmp/sdar_rows build/libspecd.a \
     -lzmq -lprotobuf-c -ljemalloc -lm -lpthread        # the link line of lora_rows.c
  python tools/train/check_adapter/compare_sdar.py --adapter DIR --tool /tmp/sdar_rows

For each block pattern (--fills; 'f' a filled slot, 'm' a mask, slots n..n+B-1 of the policy's
second denoise step) sdar_rows.c makes the policy build that block and runs the step through
specd's runtime; here the same block (memory x[0..n-1], the 'f' slots as tokens, the 'm' slots
masked) goes through train_sdar.forward_blocks, the function training uses.

Pass criteria (as compare_wedlm.py's, for the same reason: specd runs Q4_1 weights with quantized
activations, torch runs them dequantized to F32, so logits differ by ~0.1 and a fixed small
tolerance cannot be used): (1) the policy's rows are the trainer's (pending x[n-1] at n-1 gate 0,
then every slot at its position, gate 1, masks as the mask id); (2) the block rows' top-1 tokens
agree, or differ only at a near tie (gap below the pending row's difference, the numeric floor);
(3) against the wrong layouts -- no LoRA, and a block causal instead of bidirectional -- specd's
block-row logits lie at beta in [0.8, 1.2] on the line from the wrong layout's logits (0) to the
trainer's (1); the causal one is compared as an effect (specd's bidirectional - causal against the
trainer's), beta in [0.5, 1.5], since the quantization noise cancels in it.

--n-layers N checks a drafter adapter (distill_simsd_drafter.py, "specd_n_layers": N; the simsd
policy's drafter): specd runs the context cut after N blocks (sdar_rows --n-layers N) and the
trainer's model is cut the same way (distill_simsd_drafter.truncated: blocks 0..N-1, then the
output norm and the tied head); the adapter's LoRA tensors are those of layers 0..N-1 only.
Default: the adapter's "specd_n_layers", else every layer."""
import argparse, json, os, subprocess, sys, tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
from isd_model import Model  # noqa: E402
from train_isd import load_adapter, load_shards  # noqa: E402
from train_sdar import build, forward_blocks  # noqa: E402


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
    ap.add_argument("--adapter", required=True, help="an exported SDAR adapter directory")
    ap.add_argument("--tool", default="/tmp/sdar_rows")
    ap.add_argument("--data", default=".train/shards")
    ap.add_argument("--seq", type=int, default=0, help="which sequence of the data (held-out: < 16)")
    ap.add_argument("--fills", default="ffmm,fmfm,fmmf,ffmf", help="block patterns (B = length)")
    ap.add_argument("--n-layers", type=int, default=-1,
                    help="run both sides cut after N blocks (-1: the adapter's specd_n_layers, "
                         "else 0 = every layer)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    cfg = json.load(open(os.path.join(a.adapter, "adapter_config.json")))
    n_layers = a.n_layers if a.n_layers >= 0 else cfg.get("specd_n_layers", 0)
    model = Model(a.model, cfg["r"], cfg["lora_alpha"], cfg["target_modules"])
    if n_layers:
        from distill_simsd_drafter import truncated
        model = truncated(model, n_layers)  # shares the weights; LoRA of layers 0..N-1 only
        print(f"both sides cut after {n_layers} blocks", flush=True)
    mask_emb = load_adapter(model, a.adapter)
    if mask_emb is None:
        mask_emb = model.emb[cfg["specd_mask_token_id"]][None, :]
    mask_id = cfg["specd_mask_token_id"]
    seqs, _ = load_shards(a.data, 64)
    seqs = [(x, s) for x, s in seqs if x.shape[0] - s >= 16]
    x, s = seqs[a.seq]
    ok = True
    for fill in a.fills.split(","):
        B = len(fill)
        n = s + 2                       # pending x[n-1], block n..n+B-1
        ids = x[: n + B]
        with tempfile.NamedTemporaryFile(suffix=".bin") as f:
            cut = ["--n-layers", str(n_layers)] if n_layers else []
            r = subprocess.run([a.tool] + cut + [a.model, a.adapter, f.name, fill, str(n)] +
                               [str(int(t)) for t in ids], capture_output=True, text=True)
            if r.returncode:
                sys.exit(f"sdar_rows failed: {r.stderr}")
            tok, pos, gate, slog, scausal = read_rows(f.name)
        rows = [(n + i, c == "m") for i, c in enumerate(fill)]
        want_tok = [int(ids[n - 1])] + [mask_id if m else int(ids[p]) for p, m in rows]
        want_pos = [n - 1] + [p for p, _ in rows]
        want_gate = [0.0] + [1.0] * B
        same_layout = (tok.tolist() == want_tok and pos.tolist() == want_pos and
                       gate.tolist() == want_gate)
        blocks = [(n, 1.0, rows)]
        with torch.no_grad():
            blog, (bpos, masked, _, _), clog = forward_blocks(model, mask_emb, ids, blocks)
            T = ids.shape[0]
            _, _, _, _, _, bmask = build(blocks, T)
            _, kv = model(model.emb[ids], torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril(),
                          gated=False, want_kv=True)
            inp = torch.where(masked[:, None], mask_emb.expand(B, -1), model.emb[ids[bpos]])
            no_lora = model(inp, bpos, bmask, gated=False, past=kv).numpy()
            cmask = bmask.clone()
            cmask[:, T:] = torch.ones(B, B, dtype=torch.bool).tril()
            causal = model(inp, bpos, cmask, gated=True, past=kv).numpy()
        mt = blog.numpy()
        ms = slog[1:]
        floor = float(np.abs(slog[0] - clog[n - 1].numpy()).max())  # the pending row, base

        def beta(wrong, right=mt, got=ms):
            dv = (right - wrong).ravel().astype(np.float64)
            return float(np.dot((got - wrong).ravel(), dv) / np.dot(dv, dv))

        alt = {"no LoRA": (np.abs(ms - no_lora).mean(), beta(no_lora), (0.8, 1.2)),
               "causal block": (np.abs(ms - causal).mean(),
                                beta(causal, mt, causal + (ms - scausal[1:])), (0.5, 1.5))}
        ts, tt = ms.argmax(-1), mt.argmax(-1)
        gap = mt[np.arange(B), tt] - mt[np.arange(B), ts]
        ties_only = bool((gap[ts != tt] < floor).all())
        good = same_layout and ties_only and all(lo <= b <= hi for _, b, (lo, hi) in alt.values())
        ok &= good
        print(f"fill {fill}: layout {'same' if same_layout else 'DIFFERENT'}"
              f" | block rows: top-1 agree {(ts == tt).mean():.2f}, mean|d| "
              f"{np.abs(ms - mt).mean():.4f} (pending row floor max|d| {floor:.3f})"
              f" | wrong layouts: "
              + ", ".join(f"{k} mean|d| {v:.3f} beta {b:.2f}" for k, (v, b, _) in alt.items())
              + f" -> {'PASS' if good else 'FAIL'}")
    print("sdar layout check:", "PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
