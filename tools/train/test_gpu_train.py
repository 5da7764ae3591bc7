#!/usr/bin/env python3
"""Checks gpu-train's parts on the CPU against the code they stand in for (run by
test_gpu_train.sh; needs torch, numpy, gguf and the default model):
  1. gpu_target: the batched, left-padded, KV-cached forward of generate_batch gives the hidden
     states of isd_model.Model's plain forward on each finished sequence (max |delta| after the
     f16 store), and greedy rows pick the reference argmax at every step (near-ties excepted);
     the sampler keeps what specd's transform keeps;
  2. gpu_mrp: on those sequences, the padded loss equals train_mrp.train_loss and
     heldout_agreement equals train_mrp.evaluate (same counts), for a random head and for the
     shipped head.
Prints the figures; exits 1 on a failure.
  usage: test_gpu_train.py MODEL"""
import os, random, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import gpu_mrp  # noqa: E402
import gpu_target  # noqa: E402
import isd_model  # noqa: E402
import train_mrp  # noqa: E402
from export_mrp import read_head  # noqa: E402

FAIL = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAIL.append(what)


def sampler_check():
    """The transform's kept sets on a hand-made row: top-k 3, then top-p, then min-p."""
    g = torch.Generator().manual_seed(0)
    logits = torch.tensor([[4.0, 3.0, 2.9, 1.0, 0.0]]).repeat(2000, 1)
    temp = torch.full((2000,), 1.0)
    got = set(gpu_target.sample(logits, temp, 3, 1.0, 0.0, g).tolist())
    check(got == {0, 1, 2}, f"top-k 3 keeps ids 0..2 (drew {sorted(got)})")
    # e = exp(z - max) = 1, .368, .333 (after top-k 3): Z = 1.70; p = 0.7 -> prefix sums 1 (< 1.19),
    # 1.368 (>= 1.19): ids 0 and 1
    got = set(gpu_target.sample(logits, temp, 3, 0.7, 0.0, g).tolist())
    check(got == {0, 1}, f"top-p 0.7 keeps ids 0, 1 (drew {sorted(got)})")
    got = set(gpu_target.sample(logits, temp, 3, 1.0, 0.35, g).tolist())
    check(got == {0, 1}, f"min-p 0.35 keeps ids 0, 1 (drew {sorted(got)})")
    got = set(gpu_target.sample(logits, torch.zeros(2000), 3, 1.0, 0.0, g).tolist())
    check(got == {0}, "temperature 0 is argmax")


def main():
    model = sys.argv[1]
    torch.manual_seed(0)
    sampler_check()
    import json
    prm = json.load(open(os.path.join(HERE, "prompts.chatml.json")))
    cw = isd_model.load_gguf(model)
    orig = isd_model.load_gguf
    isd_model.load_gguf = lambda p: cw  # one dequantization for both forwards
    try:
        tgt = gpu_target.Target(model, torch.device("cpu"), torch.float32)
        ref = isd_model.Model(model, rank=1, targets=())
    finally:
        isd_model.load_gguf = orig
    ref.out = torch.eye(ref.c.n_embd)  # the forward then returns the hidden after the output norm
    E = cw[1]["token_embd.weight"]

    # prompts of different lengths (left padding), greedy and sampled rows, one held out (id 0)
    jobs = [(0, 0, 0.0), (1, 1, 0.8), (2, 2, 0.8), (3, 4, 0.0), (4, 11, 0.8)]
    sp = {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
    toks, hid, seqs = gpu_target.generate_batch(tgt, prm["ids"], jobs, 12, prm["eog"], sp,
                                                torch.Generator().manual_seed(1))
    plen = [len(prm["ids"][p]) for _, p, _ in jobs]
    check(len(set(plen)) > 1, f"prompt lengths differ ({plen}): padding is exercised")
    worst, flips, near, n_greedy = 0.0, 0, 0, 0
    off = 0
    for s in seqs:
        n = s["n_tokens"]
        x = toks[off:off + n].long()
        check(x[:s["n_prompt"]].tolist() == prm["ids"][s["prompt_id"]], f"job {s['job']}: prompt ids kept")
        with torch.no_grad():
            h_ref = ref.forward(ref.emb[x], torch.arange(n), torch.arange(n)[None, :] <= torch.arange(n)[:, None],
                                gated=False)
        h = hid[off:off + n].float()
        worst = max(worst, float((h - h_ref).abs().max() / h_ref.abs().max()))
        if s["temp"] == 0:
            z = h_ref @ E.t()
            for j in range(s["n_prompt"] - 1, n - 1):
                n_greedy += 1
                if int(z[j].argmax()) != int(x[j + 1]):
                    top2 = z[j].topk(2).values
                    if float(top2[0] - top2[1]) < 1e-2 * float(top2[0].abs()):
                        near += 1
                    else:
                        flips += 1
        off += n
    print(f"     batched forward vs isd_model: max |delta| / max |h| = {worst:.2e} (f16 store); "
          f"greedy steps {n_greedy}, argmax flips {flips}, near ties {near}")
    check(worst < 2e-3, "batched cached forward == isd_model forward (within the f16 store)")
    check(n_greedy > 0 and flips == 0, "greedy rows decode the reference argmax")

    # the corpus, its teacher statistics and both implementations of loss and metrics
    corpus = gpu_mrp.Corpus(toks.shape[0], E.shape[1], torch.device("cpu"))
    corpus.add(toks, hid, seqs)
    corpus.teacher_stats(E)
    train, held = corpus.split(10)
    check(held == [0] and len(train) == 4, f"split: held {held}, train {train}")
    idx = list(range(len(corpus.seqs)))

    class Data:  # train_mrp.Data's get() over the corpus (teacher columns pE, H, lse, argmax)
        def get(self, i, max_len):
            s = corpus.seqs[i]
            o, n = s["offset"], s["n_tokens"]
            h = corpus.hidden[o:o + n].float()
            z = h @ E.t()
            T = torch.cat((corpus.pE[o:o + n].float(), corpus.H[o:o + n, None],
                           torch.logsumexp(z, -1)[:, None], z.argmax(-1).float()[:, None]), 1)
            return corpus.tokens[o:o + n], h, T, s["n_prompt"]

    hp = train_mrp.load_target(model)[1]
    heads = {"random": train_mrp.Head(hp, 1, seed=3, out_norm_init=-2.0)}
    shipped = os.path.join(os.path.dirname(os.path.dirname(HERE)), "artifacts", "mrp", "smollm2-135m-mrp.gguf")
    if os.path.exists(shipped):
        heads["shipped"] = read_head(shipped)[0]
    K = 3
    for name, head in heads.items():
        items = [Data().get(i, 1 << 30) for i in idx]
        with torch.no_grad():
            l_ref, k_ref = train_mrp.train_loss(head, E, E, train_mrp.pack(items), K, 1, 0, 64, False)
            l_pad, k_pad = gpu_mrp.train_loss_padded(head, E, E, corpus.gather(idx), K, 1, 0, 64)
        rel = abs(float(l_ref) - float(l_pad)) / abs(float(l_ref))
        print(f"     {name} head: loss train_mrp {float(l_ref):.5f} padded {float(l_pad):.5f} (rel {rel:.1e}); "
              f"per k {[round(v, 4) for v in k_ref]} / {[round(v, 4) for v in k_pad]}")
        check(rel < 1e-4, f"{name} head: padded loss == train_mrp.train_loss")
        ev_ref = train_mrp.evaluate(head, E, Data(), idx, K, 1 << 30, False)
        ev_pad = gpu_mrp.heldout_agreement(head, E, corpus, idx, K, seqs_per_batch=3)
        for k in range(1, K + 1):
            a, b = ev_ref[k], ev_pad[k]
            same = all(a[f] == b[f] for f in ("n", "cond_n", "base_cond_n")) and \
                all(abs(a[f] - b[f]) * a["n"] <= 1.0 + 1e-9 for f in ("top1", "base_top1", "cond", "base_cond"))
            kl = abs(a["kl"] - b["kl"]) <= 1e-3 * max(1.0, abs(a["kl"])) and \
                abs(a["base_kl"] - b["base_kl"]) <= 1e-3 * max(1.0, abs(a["base_kl"]))
            print(f"     {name} k{k}: n {a['n']}/{b['n']} top1 {a['top1']:.4f}/{b['top1']:.4f} "
                  f"kl {a['kl']:.4f}/{b['kl']:.4f} cond {a['cond']:.4f}/{b['cond']:.4f} "
                  f"base {a['base_top1']:.4f}/{b['base_top1']:.4f} (train_mrp.evaluate / heldout_agreement)")
            check(same and kl, f"{name} head k{k}: heldout_agreement == train_mrp.evaluate")
    if FAIL:
        print(f"{len(FAIL)} check(s) failed")
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
