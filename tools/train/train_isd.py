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


def load_jsonl(path, max_len):
    """make_data.py's JSONL: {"prompt": [ids], "response": [ids]} per line."""
    seqs = []
    for line in open(path):
        d = json.loads(line)
        if len(d["response"]) < 8:
            continue
        s = len(d["prompt"])
        x = (d["prompt"] + d["response"])[: s + max_len]
        seqs.append((torch.tensor(x, dtype=torch.long), s))
    return seqs


def load_shards(root, max_len):
    """The MRP generator's shards (tools/train/gen_shard.h): every <root>/<shard>/
    with a DONE file (written last: a shard without one is still being written), tokens.i32 (all
    sequences concatenated) and seqs.json (offset, n_prompt, n_tokens per sequence, n_tokens
    counting the prompt). hidden.f16 is the MRP head's input and not read here: R-ISD runs the
    target itself. Shards in name order, sequences in file order, so the held-out split is stable
    as long as no shard is added before the first one."""
    import numpy as np
    seqs, used = [], []
    for name in sorted(os.listdir(root)):
        d = os.path.join(root, name)
        if not os.path.isfile(os.path.join(d, "DONE")):
            continue
        meta = json.load(open(os.path.join(d, "seqs.json")))
        tok = np.fromfile(os.path.join(d, "tokens.i32"), dtype="<i4")
        for q in meta["sequences"]:
            o, p, n = int(q["offset"]), int(q["n_prompt"]), int(q["n_tokens"])
            if n - p < 8 or o + n > tok.shape[0]:
                continue
            x = tok[o: o + min(n, p + max_len)]
            seqs.append((torch.from_numpy(x.astype(np.int64)), p))
        used.append(name)
    return seqs, used


def load_data(path, max_len):
    """A JSONL file (make_data.py) or a folder of MRP shards."""
    if os.path.isdir(path):
        seqs, used = load_shards(path, max_len)
        print(f"shards read: {' '.join(used) or 'none (no DONE file yet)'}", flush=True)
        return seqs
    return load_jsonl(path, max_len)


def load_adapter(model, path):
    """Weights from an exported adapter directory (export_adapter.py's PEFT files): the inverse of
    the export, so training can continue from a shipped adapter whose checkpoint is gone. Returns
    the trained mask embedding when the adapter has one, else None. F16 exports round the weights
    (relative error ~5e-4), which the next optimizer steps absorb."""
    from safetensors.torch import load_file
    from isd_model import gguf_rows
    cfg = json.load(open(os.path.join(path, "adapter_config.json")))
    if cfg["r"] != model.rank or cfg["lora_alpha"] != model.alpha:
        sys.exit(f"--init {path}: r={cfg['r']} lora_alpha={cfg['lora_alpha']}, but this run has "
                 f"--rank {model.rank} --alpha {model.alpha}")
    t = load_file(os.path.join(path, "adapter_model.safetensors"))
    state = {}
    for key, v in t.items():
        if key == "mask_embedding":
            continue
        # base_model.model.model.layers.L.<block>.<module>.lora_<A|B>.weight
        parts = key.split(".")
        layer, module, which = parts[4], parts[6], parts[7][-1]
        v = v.float()
        if which == "B" and module in ("q_proj", "k_proj"):
            v = gguf_rows(v, model.c.head_dim)
        state[f"{layer}.{module}.{which}"] = v
    missing = set(model.lora.state_dict()) - set(state)
    if missing:
        sys.exit(f"--init {path}: the adapter lacks {len(missing)} LoRA tensors of this run "
                 f"(e.g. {sorted(missing)[0]}); pass the same --targets it was trained with")
    model.lora.load_state_dict(state)
    return t["mask_embedding"].float()[None, :] if "mask_embedding" in t else None


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


def save(path, model, mask_emb, a, step, opt, sched, rng, order):
    """Everything a --resume needs to go on as if the run had not stopped (written to a temporary
    name first: a chunk killed while saving leaves the previous checkpoint intact)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = path + ".tmp"
    torch.save({"lora": model.lora.state_dict(), "mask_emb": mask_emb.detach().clone(),
                "args": vars(a), "step": step, "opt": opt.state_dict(),
                "sched": sched.state_dict(), "rng": rng.getstate(),
                "torch_rng": torch.get_rng_state(), "order": list(order)}, tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--data", default=".train/isd/data.jsonl",
                    help="make_data.py's JSONL file, or a folder of MRP shards (<dir>/<shard>/ "
                         "with DONE, tokens.i32, seqs.json)")
    ap.add_argument("--out", default=".train/isd/ckpt.pt")
    ap.add_argument("--mask-token-id", type=int, required=True)
    ap.add_argument("--train-mask-embedding", action="store_true",
                    help="train the mask rows' input vector (init: the base embedding of "
                         "--mask-token-id); export_adapter.py writes it as mask_embedding")
    ap.add_argument("--mask-lr", type=float, default=0,
                    help="learning rate of the mask embedding (0: --lr)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--targets", default=",".join(PROJ))
    ap.add_argument("--target", choices=["anchor", "data"], default="anchor")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=1, help="sequences per optimizer step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init", help="start from these weights with a fresh optimizer and schedule: "
                                   "a checkpoint, or an exported adapter directory")
    ap.add_argument("--resume", help="a checkpoint: one this script wrote with its optimizer state "
                                     "goes on from its step (same --steps/--lr/--strides: the "
                                     "schedule continues); an older one without it is read as "
                                     "--init")
    ap.add_argument("--clip", type=float, default=1.0, help="gradient norm clip")
    ap.add_argument("--max-len", type=int, default=128, help="response tokens used per sequence")
    ap.add_argument("--holdout", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--no-eval-at-stop", action="store_true",
                    help="skip the held-out evaluation when a --max-minutes chunk stops early")
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
    ck = torch.load(a.resume, map_location="cpu", weights_only=False) if a.resume else None
    if ck is not None and "opt" not in ck:
        a.init, ck = a.resume, None  # an older weights-only checkpoint
    mask_emb = model.emb[a.mask_token_id].clone()[None, :]
    init = ck if ck is not None else None
    if a.init and os.path.isdir(a.init):
        got = load_adapter(model, a.init)
        if got is not None:
            mask_emb = got
        print(f"init: adapter {a.init} (mask embedding: "
              f"{'trained' if got is not None else 'base row'})", flush=True)
    elif a.init:
        init = torch.load(a.init, map_location="cpu", weights_only=False)
    if init is not None:
        model.lora.load_state_dict(init["lora"])
        if init.get("mask_emb") is not None:
            mask_emb = init["mask_emb"].float().reshape(1, -1)
    params = list(model.lora.parameters())
    groups = [{"params": params, "lr": a.lr}]
    if a.train_mask_embedding:
        mask_emb = torch.nn.Parameter(mask_emb.clone())
        groups.append({"params": [mask_emb], "lr": a.mask_lr or a.lr})
        params = params + [mask_emb]
    n_par = sum(p.numel() for p in params)
    print(f"loaded in {time.time() - t0:.0f}s; trainable {n_par} params", flush=True)
    seqs = load_data(a.data, a.max_len)
    held, train = seqs[: a.holdout], seqs[a.holdout:]
    if not train:
        sys.exit(f"no training sequences in {a.data}")
    print(f"data: {len(train)} train / {len(held)} held-out sequences, "
          f"{sum(x.shape[0] - s for x, s in train)} train response tokens", flush=True)
    strides = [int(v) for v in a.strides.split(",")]
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    warm = max(1, int(0.03 * a.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(i, a.steps) / a.steps)))
    log_path = os.path.splitext(a.out)[0] + ".log.json"
    log = {"args": vars(a), "eval": [], "train": [], "chunks": []}
    first, order = 0, []
    if ck is not None:
        for k in ("steps", "lr", "strides", "batch", "train_mask_embedding"):
            if ck["args"].get(k) != getattr(a, k):
                print(f"warning: --{k} {getattr(a, k)} differs from the checkpoint's "
                      f"{ck['args'].get(k)}", flush=True)
        opt.load_state_dict(ck["opt"])
        sched.load_state_dict(ck["sched"])
        rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        first, order = ck["step"], list(ck["order"])
        if os.path.exists(log_path):
            log = json.load(open(log_path))
            log["train"] = [r for r in log["train"] if r["step"] <= first]
            log.setdefault("chunks", [])
        print(f"resumed at step {first} of {a.steps}", flush=True)
    else:
        ev = evaluate(model, mask_emb.detach(), held, max(strides))
        print(f"eval before: {json.dumps(ev)}", flush=True)
        log["eval"].append({"step": 0, **ev})
    t_train = time.time()
    t_before = log["train"][-1]["t"] if log["train"] else 0.0
    step = first
    stopped = False
    for step in range(first, a.steps):
        N = strides[min(len(strides) - 1, step * len(strides) // a.steps)]
        opt.zero_grad()
        acc = {}
        for _ in range(a.batch):
            if not order:
                order = list(range(len(train))); rng.shuffle(order)
            i = order.pop()
            if i >= len(train):  # the data shrank since the checkpoint: draw again
                i = rng.randrange(len(train))
            x, s = train[i]
            loss, st, *_ = step_losses(model, mask_emb, x, s, N, rng.randrange(N), a.target)
            (loss / a.batch).backward()
            for k, v in st.items():
                acc[k] = acc.get(k, 0.0) + v / a.batch
        acc["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, a.clip))
        opt.step(); sched.step()
        acc.update(step=step + 1, N=N, t=round(t_before + time.time() - t_train, 1))
        if a.train_mask_embedding:
            acc["mask_emb_delta"] = float((mask_emb.detach()[0] - model.emb[a.mask_token_id]).norm())
        log["train"].append(acc)
        if step % 10 == 0 or step == a.steps - 1:
            print(json.dumps(acc), flush=True)
        if a.eval_every and (step + 1) % a.eval_every == 0 and step + 1 < a.steps:
            ev = evaluate(model, mask_emb.detach(), held, max(strides))
            print(f"eval step {step + 1}: {json.dumps(ev)}", flush=True)
            log["eval"].append({"step": step + 1, **ev})
        out_of_time = a.max_minutes and time.time() - t_train > 60 * a.max_minutes
        if (step + 1) % 25 == 0 or step == a.steps - 1 or out_of_time:
            save(a.out, model, mask_emb, a, step + 1, opt, sched, rng, order)
        if out_of_time:
            print(f"time budget reached after {step + 1} steps", flush=True)
            stopped = True
            break
    n_done = len(log["train"])
    log["chunks"].append({"from": first, "to": n_done, "seconds": round(time.time() - t_train, 1)})
    if not (stopped and a.no_eval_at_stop):
        ev = evaluate(model, mask_emb.detach(), held, max(strides))
        print(f"eval {'after' if not stopped else 'at stop'} (step {n_done}): {json.dumps(ev)}",
              flush=True)
        log["eval"].append({"step": n_done, **ev})
    log["train_seconds"] = round(sum(c["seconds"] for c in log["chunks"]), 1)
    json.dump(log, open(log_path, "w"), indent=1)
    print(f"done: {n_done} of {a.steps} steps, {log['train_seconds']}s of training", flush=True)


if __name__ == "__main__":
    main()
