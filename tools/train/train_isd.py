#!/usr/bin/env python3
"""Introspective-consistency training of a gated (R-ISD) LoRA adapter (I-DLM paper, sec. 3.1,
Appendix E/G/H.1) for a GGUF llama model, on CPU.

Input per sequence x_0 = prompt + response (the base model's own continuation, make_data.py).
The training input is [x_t | x_0], x_t all [MASK]. Attention (Appendix E, use_regular_causal):
  - clean x_0: strict token-level causal;
  - noisy x_t, cut into blocks of N: causal within a block, and each block sees the clean tokens of
    all preceding blocks (cross-attention) -- never the clean token at its own positions;
  - clean rows never see noisy rows.
Logit shift: the row at position l (clean or [MASK]) predicts x_0[l+1]; [MASK] rows keep the
position ids of the tokens they stand for, so a block starting at l0 is exactly an inference step
whose last decided token is at l0-1 (the [MASK] at offset k proposes the token k+2 ahead).
Because clean rows cannot see noisy rows, x_0 runs as one causal pass whose K/V the noisy pass
attends to; with R-ISD gating (LoRA only on [MASK] rows) that pass uses base weights only.

Loss (eq. 1-2): L = L_mask + s * L_clean, s = L_mask / L_clean held constant per step. Under the
gate L_clean is the base model's own AR loss and has no gradient (R-ISD keeps p exact); it is
still computed and logged. L_mask is cross-entropy of the [MASK] rows against --target:
  data   : the next token of x_0 (the paper's hard label);
  anchor : the base model's causal-anchor distribution p at the same position (the clean row's
           softmax). The data was sampled from that same p, so this is the same objective in
           expectation with far less variance -- worthwhile for a few hundred CPU steps.
Curriculum: stride N = 2 -> 3 -> 4 over equal thirds of the steps (H.1).

Logged per stride offset k on held-out sequences: top-1 agreement of q with p (the greedy
acceptance rate) and p_0.8(argmax q) (the expected acceptance of specd's argmax proposal under the
p/q rule at the CLI's default temperature 0.8, before top-k/top-p)."""
import argparse, json, math, os, random, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from isd_model import Model, PROJ  # noqa: E402


def load_data(path, max_len):
    seqs = []
    for line in open(path):
        d = json.loads(line)
        if len(d["response"]) < 8:
            continue
        s = len(d["prompt"])
        x = (d["prompt"] + d["response"])[: s + max_len]
        seqs.append((torch.tensor(x, dtype=torch.long), s))
    return seqs


def layout(T, s, N, phase):
    """[MASK] rows: positions l in blocks [l0, l0+N) from s+phase, targets x[l+1] (l <= T-2).
    Returns pos [M], block start per row [M], offset per row [M]."""
    pos, start, off = [], [], []
    l0 = s + phase
    while l0 <= T - 2:
        for k in range(N):
            if l0 + k > T - 2:
                break
            pos.append(l0 + k); start.append(l0); off.append(k)
        l0 += N
    return torch.tensor(pos), torch.tensor(start), torch.tensor(off)


def step_losses(model, mask_emb, x, s, N, phase, target):
    T = x.shape[0]
    with torch.no_grad():
        cmask = torch.ones(T, T, dtype=torch.bool).tril()
        clog, kv = model(model.emb[x], torch.arange(T), cmask, gated=False, want_kv=True)
    pos, start, off = layout(T, s, N, phase)
    M = pos.shape[0]
    key_clean = torch.arange(T)[None, :] < start[:, None]                       # [M, T]
    same = (start[:, None] == start[None, :]) & (off[None, :] <= off[:, None])  # [M, M]
    nmask = torch.cat((key_clean, same), 1)
    nlog = model(mask_emb.expand(M, -1), pos, nmask, gated=True, past=kv)
    logq = F.log_softmax(nlog.float(), -1)
    p = F.softmax(clog[pos].float(), -1)
    tgt = x[pos + 1]
    hard = F.nll_loss(logq, tgt)
    soft = -(p * logq).sum(-1).mean()
    l_mask = soft if target == "anchor" else hard
    l_clean = F.cross_entropy(clog[s - 1:T - 1].float(), x[s:T])
    s_hat = (l_mask / l_clean).detach()
    loss = l_mask + s_hat * l_clean
    with torch.no_grad():
        agree = (logq.argmax(-1) == clog[pos].argmax(-1)).float()
        # specd's ISD proposes argmax(q); the p/q rule then accepts it with probability p(x),
        # p at the CLI's default temperature 0.8
        pt = F.softmax(clog[pos].float() / 0.8, -1)
        pacc = pt.gather(1, logq.argmax(-1, keepdim=True))[:, 0]
    return loss, dict(l_mask=l_mask.item(), l_hard=hard.item(), l_clean=l_clean.item(),
                      s=s_hat.item()), off, agree, pacc


def evaluate(model, mask_emb, seqs, N):
    agree_k = torch.zeros(N); ov_k = torch.zeros(N); cnt = torch.zeros(N)
    lm = lh = lc = 0.0
    with torch.no_grad():
        for x, s in seqs:
            _, st, off, agree, ov = step_losses(model, mask_emb, x, s, N, 0, "anchor")
            lm += st["l_mask"]; lh += st["l_hard"]; lc += st["l_clean"]
            for k in range(N):
                sel = off == k
                agree_k[k] += agree[sel].sum(); ov_k[k] += ov[sel].sum(); cnt[k] += sel.sum()
    n = len(seqs)
    return dict(l_mask=lm / n, l_hard=lh / n, l_clean=lc / n,
                agree=(agree_k / cnt).tolist(), p_accept_t08=(ov_k / cnt).tolist())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="/root/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--data", default="/work/train-data/data.jsonl")
    ap.add_argument("--out", default="/work/train-data/ckpt.pt")
    ap.add_argument("--mask-token-id", type=int, required=True)
    ap.add_argument("--train-mask-embedding", action="store_true")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--targets", default=",".join(PROJ))
    ap.add_argument("--target", choices=["anchor", "data"], default="anchor")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=1, help="sequences per optimizer step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--resume", help="start from this checkpoint's LoRA weights (fresh optimizer)")
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    ap.add_argument("--max-len", type=int, default=128, help="response tokens used per sequence")
    ap.add_argument("--holdout", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--strides", default="2,3,4")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="stop early (and save) once training has run this long; 0 = no limit")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    t0 = time.time()
    model = Model(a.model, a.rank, a.alpha, a.targets.split(","))
    for t in [model.emb, model.out]:
        t.requires_grad_(False)
    if a.resume:
        model.lora.load_state_dict(torch.load(a.resume)["lora"])
    mask_emb = model.emb[a.mask_token_id].clone()[None, :]
    params = list(model.lora.parameters())
    if a.train_mask_embedding:
        mask_emb = torch.nn.Parameter(mask_emb)
        params.append(mask_emb)
    n_par = sum(p.numel() for p in params)
    print(f"loaded in {time.time() - t0:.0f}s; trainable {n_par} params", flush=True)
    seqs = load_data(a.data, a.max_len)
    held, train = seqs[: a.holdout], seqs[a.holdout:]
    print(f"data: {len(train)} train / {len(held)} held-out sequences, "
          f"{sum(x.shape[0] - s for x, s in train)} train response tokens", flush=True)
    strides = [int(v) for v in a.strides.split(",")]
    opt = torch.optim.AdamW(params, lr=a.lr, weight_decay=0.0)
    warm = max(1, int(0.03 * a.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(i, a.steps) / a.steps)))
    log = {"args": vars(a), "eval": [], "train": []}
    ev = evaluate(model, mask_emb.detach(), held, max(strides))
    print(f"eval before: {json.dumps(ev)}", flush=True)
    log["eval"].append({"step": 0, **ev})
    order = []
    t_train = time.time()
    for step in range(a.steps):
        N = strides[min(len(strides) - 1, step * len(strides) // a.steps)]
        opt.zero_grad()
        acc = {}
        for _ in range(a.batch):
            if not order:
                order = list(range(len(train))); rng.shuffle(order)
            x, s = train[order.pop()]
            loss, st, *_ = step_losses(model, mask_emb, x, s, N, rng.randrange(N), a.target)
            (loss / a.batch).backward()
            for k, v in st.items():
                acc[k] = acc.get(k, 0.0) + v / a.batch
        acc["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, a.clip))
        opt.step(); sched.step()
        acc.update(step=step + 1, N=N, t=round(time.time() - t_train, 1))
        log["train"].append(acc)
        if step % 10 == 0 or step == a.steps - 1:
            print(json.dumps(acc), flush=True)
        if a.eval_every and (step + 1) % a.eval_every == 0 and step + 1 < a.steps:
            ev = evaluate(model, mask_emb.detach(), held, max(strides))
            print(f"eval step {step + 1}: {json.dumps(ev)}", flush=True)
            log["eval"].append({"step": step + 1, **ev})
        out_of_time = a.max_minutes and time.time() - t_train > 60 * a.max_minutes
        if (step + 1) % 25 == 0 or step == a.steps - 1 or out_of_time:
            torch.save({"lora": model.lora.state_dict(), "mask_emb": mask_emb.detach(),
                        "args": vars(a), "step": step + 1}, a.out)
        if out_of_time:
            print(f"time budget reached after {step + 1} steps", flush=True)
            break
    ev = evaluate(model, mask_emb.detach(), held, max(strides))
    print(f"eval after: {json.dumps(ev)}", flush=True)
    log["eval"].append({"step": len(log["train"]), **ev})
    log["train_seconds"] = round(time.time() - t_train, 1)
    json.dump(log, open(os.path.splitext(a.out)[0] + ".log.json", "w"), indent=1)
    print(f"done: {len(log['train'])} steps in {log['train_seconds']}s", flush=True)


if __name__ == "__main__":
    main()
