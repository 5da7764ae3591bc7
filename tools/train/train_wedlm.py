#!/usr/bin/env python3
"""WeDLM training of a gated mask-row adapter (paper 003, sections 3-4, eqs. 5-10) for a GGUF
llama model, on CPU: the model specd's `wedlm` policy runs with `adapter=DIR,shift=0`.

Per sequence x_0 = prompt + the base model's own continuation (the MRP shards, or make_data.py's
JSONL). The response is cut into prediction blocks of B tokens (from the first response token,
shifted by a random phase < B). Block k starting at l0 gets its own mask ratio gamma_k ~ U(0, 1]
(eq. 10) and masks each of its positions with probability gamma_k (at least one: a block without a
mask has no loss term, and the policy never runs such a step).

Layout of block k (eqs. 5-6, reordering; eqs. 8-9, dual stream):
  memory   x_0[0..l0-1] at positions 0..l0-1: one strict causal pass over the clean sequence,
           base weights (the memory stream x_o of eq. 8; with the LoRA gated to mask rows it is
           the exact base model, so committed KV is the base model's, and the auxiliary AR loss of
           section 6.1 has no gradient: it is only logged as l_clean)
  observed the block's unmasked tokens, ascending, at their logical positions (eq. 6 p_o), base
           weights: each sees the memory and the block's earlier observed tokens
  masks    the block's masks, ascending, at their logical positions (eq. 6 p_m), input = the
           trained mask embedding, LoRA on: each sees the memory, EVERY observed token of the
           block (also one after it in logical order: principle i) and the earlier masks
           (principle ii, directed)
which is strict causal attention in the physical order [memory | observed | masks] with logical
positions as RoPE ids -- the rows specd's wedlm policy lays out each step (policy/dlm/wedlm.c:
pending row, filled slots ascending, masks ascending; the pending token is memory position l0-1).
Blocks do not see each other's observed or mask rows, only the memory before their start (eq. 10:
x_o^{(<k)}). All blocks of a sequence run in one pass each (observed, then masks) with an
explicit attention mask.

Unshifted: the mask row at logical position j is trained on x_0[j] (eq. 7's
x_0^{(m_j)}; WeDLM's code computes the MLM loss at the same index), unlike R-ISD's shifted rows.

Loss (eq. 7 per block, eq. 10 over blocks): sum_k (1/gamma_k) sum_{j in M_k} -log P(x_0[j] | ...),
divided by the number of block positions (so its expectation over gamma and M is the mean per-token
cross-entropy, whatever the sequence length). Hard labels: the data token (the
WeDLM adapter is trained on the data, not distilled).

Held-out evaluation (fixed masks from --seed): top-1 agreement of each mask row with the data token
at its own position, by distance d from the block's first mask (d = 0 is the slot the policy would
commit next), the same against the base model's greedy token there (argmax of the clean row before
it: what lossless mode verifies against), and the losses."""
import argparse, json, math, os, random, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from isd_model import Model, PROJ  # noqa: E402
from train_isd import load_adapter, load_data  # noqa: E402


def sample_blocks(T, s, B, phase, rng):
    """Prediction blocks over the response x[s:T]: list of (l0, gamma, [(pos, masked)...]).
    With phase > 0 the first block is the partial [start, start + phase), so block boundaries
    move between epochs and every response position is in some block."""
    blocks = []
    lo = max(s, 1)  # a block needs at least one memory token before it (the pending token)
    ends = [lo + (phase or B)]
    while ends[-1] < T:
        ends.append(ends[-1] + B)
    for e in ends:
        hi = min(e, T)
        if hi <= lo:
            continue
        gamma = 1.0 - rng.random()  # U(0, 1]
        m = [rng.random() < gamma for _ in range(lo, hi)]
        if not any(m):
            m[rng.randrange(hi - lo)] = True
        blocks.append((lo, gamma, list(zip(range(lo, hi), m))))
        lo = hi
    return blocks


def build(blocks, T):
    """Rows and attention masks of the observed pass and the mask pass (eqs. 5-6, 8-10).
    Returns obs_pos [O], obs_blk [O], msk_pos [M], msk_blk [M], msk_gamma [M], msk_dist [M],
    omask [O, T+O], mmask [M, T+O+M]."""
    obs_pos, obs_blk, msk_pos, msk_blk, msk_gamma, msk_dist, starts = [], [], [], [], [], [], []
    for b, (l0, gamma, rows) in enumerate(blocks):
        starts.append(l0)
        first = min(p for p, m in rows if m)
        for p, m in rows:  # ascending logical order within each stream (eq. 5)
            if m:
                msk_pos.append(p); msk_blk.append(b); msk_gamma.append(gamma)
                msk_dist.append(p - first)
            else:
                obs_pos.append(p); obs_blk.append(b)
    obs_pos, obs_blk = torch.tensor(obs_pos, dtype=torch.long), torch.tensor(obs_blk, dtype=torch.long)
    msk_pos, msk_blk = torch.tensor(msk_pos, dtype=torch.long), torch.tensor(msk_blk, dtype=torch.long)
    start = torch.tensor(starts, dtype=torch.long)
    keys = torch.arange(T)
    # memory: a row of block k sees clean positions < l0_k (eq. 10, x_o^{(<k)})
    o_mem = keys[None, :] < start[obs_blk][:, None]
    m_mem = keys[None, :] < start[msk_blk][:, None]
    # observed rows: the block's observed rows up to themselves (ascending = physical order)
    o_obs = (obs_blk[:, None] == obs_blk[None, :]) & (obs_pos[None, :] <= obs_pos[:, None])
    # mask rows: every observed row of the block (principle i), earlier masks and self (ii)
    m_obs = msk_blk[:, None] == obs_blk[None, :]
    m_msk = (msk_blk[:, None] == msk_blk[None, :]) & (msk_pos[None, :] <= msk_pos[:, None])
    omask = torch.cat((o_mem, o_obs), 1)
    mmask = torch.cat((m_mem, m_obs, m_msk), 1)
    return (obs_pos, obs_blk, msk_pos, msk_blk, torch.tensor(msk_gamma), torch.tensor(msk_dist),
            omask, mmask)


def forward_blocks(model, mask_emb, x, blocks):
    """The three passes; returns mask-row logits [M, V], the layout, and the clean logits [T, V]."""
    T = x.shape[0]
    obs_pos, obs_blk, msk_pos, msk_blk, gam, dist, omask, mmask = build(blocks, T)
    with torch.no_grad():
        clog, kv = model(model.emb[x], torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril(),
                         gated=False, want_kv=True)
        if obs_pos.numel():
            _, okv = model(model.emb[x[obs_pos]], obs_pos, omask, gated=False, past=kv,
                           want_kv=True)
            past = [(torch.cat((k, ok), 0), torch.cat((v, ov), 0))
                    for (k, v), (ok, ov) in zip(kv, okv)]
        else:
            past = kv
    M = msk_pos.shape[0]
    mlog = model(mask_emb.expand(M, -1), msk_pos, mmask, gated=True, past=past)
    return mlog, (msk_pos, gam, dist), clog


def seq_loss(model, mask_emb, x, s, B, phase, rng):
    T = x.shape[0]
    blocks = sample_blocks(T, s, B, phase, rng)
    mlog, (pos, gam, dist), clog = forward_blocks(model, mask_emb, x, blocks)
    logq = F.log_softmax(mlog.float(), -1)
    nll = -logq.gather(1, x[pos][:, None])[:, 0]          # unshifted: row j predicts x_0[j]
    n_block = sum(len(r) for _, _, r in blocks)
    loss = (nll / gam).sum() / n_block                     # eqs. 7 and 10, 1/gamma weighted
    with torch.no_grad():
        l_clean = F.cross_entropy(clog[s - 1:T - 1].float(), x[s:T]).item()  # sec. 6.1 AR loss
        top = logq.argmax(-1)
        agree = (top == x[pos]).float()
        agree_base = (top == clog[pos - 1].argmax(-1)).float()
    return loss, dict(loss=loss.item(), nll=nll.mean().item(), l_clean=l_clean,
                      n_mask=int(pos.shape[0]), mask_frac=pos.shape[0] / n_block), \
        dist, agree, agree_base, nll.detach()


def evaluate(model, mask_emb, seqs, B, seed):
    """Fixed masks (seeded), so evaluations along a run compare the same layouts."""
    rng = random.Random(seed + 7919)
    agree_d = torch.zeros(B); base_d = torch.zeros(B); nll_d = torch.zeros(B); cnt = torch.zeros(B)
    tot = 0.0
    with torch.no_grad():
        for x, s in seqs:
            loss, st, dist, agree, agree_base, nll = seq_loss(model, mask_emb, x, s, B,
                                                              rng.randrange(B), rng)
            tot += st["loss"]
            for d in range(B):
                sel = dist == d
                agree_d[d] += agree[sel].sum(); base_d[d] += agree_base[sel].sum()
                nll_d[d] += nll[sel].sum(); cnt[d] += sel.sum()
    c = cnt.clamp(min=1)
    return dict(loss=tot / max(1, len(seqs)), nll=(nll_d.sum() / c.sum()).item(),
                agree=(agree_d.sum() / c.sum()).item(),
                agree_by_dist=[round(v, 4) for v in (agree_d / c).tolist()],
                agree_base_by_dist=[round(v, 4) for v in (base_d / c).tolist()],
                nll_by_dist=[round(v, 3) for v in (nll_d / c).tolist()],
                n_by_dist=[int(v) for v in cnt.tolist()])


def thread_cpu():
    return time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID)


def save(path, model, mask_emb, a, step, opt, sched, rng, order):
    """Everything --resume needs (written to a temporary name first, so a chunk killed while
    saving leaves the previous checkpoint intact); also what export_adapter.py reads."""
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
    ap.add_argument("--data", default=".train/shards",
                    help="a folder of MRP shards (<dir>/<shard>/ with DONE, tokens.i32, "
                         "seqs.json) or make_data.py's JSONL")
    ap.add_argument("--out", default=".train/wedlm.pt")
    ap.add_argument("--mask-token-id", type=int, default=0)
    ap.add_argument("--freeze-mask-embedding", action="store_true",
                    help="keep the mask rows' input vector fixed (default: trained, exported as "
                         "mask_embedding)")
    ap.add_argument("--mask-lr", type=float, default=0, help="mask embedding rate (0: --lr)")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--alpha", type=float, default=32)
    ap.add_argument("--targets", default=",".join(PROJ))
    ap.add_argument("--block", type=int, default=8, help="B, the prediction block (eq. 10)")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=1, help="sequences per optimizer step")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--init", help="warm start: an exported adapter directory (its LoRA and mask "
                                   "embedding, e.g. artifacts/adapters/smollm2-135m-risd2) or a "
                                   "checkpoint; fresh optimizer and schedule")
    ap.add_argument("--resume", help="a checkpoint this script wrote: goes on from its step")
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--max-len", type=int, default=128, help="response tokens used per sequence")
    ap.add_argument("--holdout", type=int, default=16)
    ap.add_argument("--eval-every", type=int, default=0)
    ap.add_argument("--no-eval-before", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-minutes", type=float, default=0,
                    help="stop (and save) once this chunk has trained this long; 0 = no limit")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    a.objective = "wedlm"              # export_adapter.py writes the WeDLM config keys
    a.train_mask_embedding = not a.freeze_mask_embedding
    a.strides = str(a.block)           # for tools that read R-ISD checkpoints
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = random.Random(a.seed)
    t0 = time.time()
    model = Model(a.model, a.rank, a.alpha, a.targets.split(","))
    ck = torch.load(a.resume, map_location="cpu", weights_only=False) if a.resume else None
    mask_emb = model.emb[a.mask_token_id].clone()[None, :]
    init = ck
    if a.init and os.path.isdir(a.init):
        got = load_adapter(model, a.init)
        if got is not None:
            mask_emb = got
        print(f"init: adapter {a.init} (mask embedding: "
              f"{'trained' if got is not None else 'base row'})", flush=True)
    elif a.init and ck is None:
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
    print(f"loaded in {time.time() - t0:.0f}s; trainable {sum(p.numel() for p in params)} params",
          flush=True)
    seqs = load_data(a.data, a.max_len)
    held, train = seqs[: a.holdout], seqs[a.holdout:]
    if not train:
        sys.exit(f"no training sequences in {a.data}")
    print(f"data: {len(train)} train / {len(held)} held-out sequences, "
          f"{sum(x.shape[0] - s for x, s in train)} train response tokens", flush=True)
    opt = torch.optim.AdamW(groups, weight_decay=0.0)
    warm = max(1, int(0.03 * a.steps))
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda i: min(1.0, (i + 1) / warm) * 0.5 * (1 + math.cos(math.pi * min(i, a.steps) / a.steps)))
    log_path = os.path.splitext(a.out)[0] + ".log.json"
    log = {"args": vars(a), "eval": [], "train": [], "chunks": []}
    first, order = 0, []
    if ck is not None and "opt" in ck:
        for k in ("steps", "lr", "block", "batch"):
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
        print(f"resumed at step {first} of {a.steps}", flush=True)
    elif not a.no_eval_before:
        ev = evaluate(model, mask_emb.detach(), held, a.block, a.seed)
        print(f"eval before: {json.dumps(ev)}", flush=True)
        log["eval"].append({"step": 0, **ev})
    t_train, c_train = time.time(), thread_cpu()
    c_before = log["train"][-1]["cpu"] if log["train"] else 0.0
    stopped = False
    for step in range(first, a.steps):
        c_step = thread_cpu()
        opt.zero_grad()
        acc = {}
        for _ in range(a.batch):
            if not order:
                order = list(range(len(train))); rng.shuffle(order)
            i = order.pop()
            if i >= len(train):
                i = rng.randrange(len(train))
            x, s = train[i]
            loss, st, *_ = seq_loss(model, mask_emb, x, s, a.block, rng.randrange(a.block), rng)
            (loss / a.batch).backward()
            for k, v in st.items():
                acc[k] = acc.get(k, 0.0) + v / a.batch
        acc["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, a.clip))
        opt.step(); sched.step()
        acc.update(step=step + 1, step_cpu=round(thread_cpu() - c_step, 3),
                   cpu=round(c_before + thread_cpu() - c_train, 1))
        log["train"].append(acc)
        if step % 10 == 0 or step == a.steps - 1:
            print(json.dumps(acc), flush=True)
        if a.eval_every and (step + 1) % a.eval_every == 0 and step + 1 < a.steps:
            ev = evaluate(model, mask_emb.detach(), held, a.block, a.seed)
            print(f"eval step {step + 1}: {json.dumps(ev)}", flush=True)
            log["eval"].append({"step": step + 1, **ev})
        out_of_time = (a.max_minutes and step + 1 < a.steps and
                       time.time() - t_train > 60 * a.max_minutes)
        if (step + 1) % 25 == 0 or step == a.steps - 1 or out_of_time:
            save(a.out, model, mask_emb, a, step + 1, opt, sched, rng, order)
        if out_of_time:
            print(f"time budget reached after {step + 1} steps", flush=True)
            stopped = True
            break
    n_done = len(log["train"])
    log["chunks"].append({"from": first, "to": n_done, "seconds": round(time.time() - t_train, 1),
                          "thread_cpu": round(thread_cpu() - c_train, 1)})
    ev = evaluate(model, mask_emb.detach(), held, a.block, a.seed)
    print(f"eval {'at stop' if stopped else 'after'} (step {n_done}): {json.dumps(ev)}", flush=True)
    log["eval"].append({"step": n_done, **ev})
    steps_cpu = [r["step_cpu"] for r in log["train"]]
    log["step_thread_cpu_mean"] = round(sum(steps_cpu) / max(1, len(steps_cpu)), 3)
    json.dump(log, open(log_path, "w"), indent=1)
    print(f"done: {n_done} of {a.steps} steps, thread CPU per step "
          f"{log['step_thread_cpu_mean']} s", flush=True)
    if n_done >= a.steps:
        print("TRAINING_DONE", flush=True)


if __name__ == "__main__":
    main()
