#!/usr/bin/env python3
"""Distils the SimSD drafter (paper 004 section 3) for specd's `simsd`
policy, on CPU: the TARGET is A4 (the GGUF model, all layers, with the SDAR adapter
artifacts/adapters/smollm2-135m-sdar on its block rows); the DRAFTER is the same GGUF model cut after
its first L layers (specd's context option n_layers=L: blocks 0..L-1, then the output norm and the
tied head) with its own gated LoRA on those L layers and its own mask embedding.

Layout: exactly train_sdar.py's (its `build`), so the drafter's block rows are what policy/dlm/sdar.c
lays out, run with n_layers=L:
  memory   one strict causal pass over the clean prefix, BASE weights. The student's memory is the
           first L layers of the teacher's memory pass (base causal layer l depends only on layers
           < l), so one pass serves both: the student takes its KV of layers 0..L-1.
  block    the B rows of each block, LoRA on every row (masked: the mask embedding; unmasked: the
           token's embedding), bidirectional within the block, causal to the memory; unshifted
           (the row at position j predicts x_0[j]).
Block sampling: train_wedlm.sample_blocks (blocks of B with a random phase, gamma_k ~ U(0, 1], each
position masked with probability gamma_k, at least one).

Initialisation: the student's LoRA = A4's LoRA tensors of layers 0..L-1 and A4's mask embedding, so
step 0 is "A4 truncated after L layers".

Loss: forward KL(teacher || student) at temperature 1 over the full vocabulary, mean over the
masked block rows (the rows whose tokens the drafter proposes; unmasked rows are context). The
drafter's only job in SimSD is to propose what the target would accept, so the target's
distribution is the label: a CE to the data token (--ce, default 0) would pull the drafter toward
tokens the target does not predict (A4 agrees with the data on only ~40% of slots 1-3), which can
only cost acceptance. It is kept as an option for a regulariser.

The loop (options, warmup + cosine schedule, AdamW, --max-minutes, checkpoints, --resume, --init)
is train_wedlm.main's: this script swaps in the student model, its loss and its data split, as
train_sdar.py swaps its loss. In that loop's held-out evaluation, for this objective,
"agree_by_dist" = agreement with the DATA token by block slot, "agree_base_by_dist" = agreement with
the TEACHER's argmax, and "nll_by_dist" = KL(teacher || student) by slot.

Data split: the drafter trains on every shard but --eval-shard (s015: the held-out shard of
--eval) and without the first --holdout sequences (A4's own held-out sequences, seen by neither).

--eval: evaluate the initial truncated A4 and a checkpoint on the same fixed masks of the held-out
shard, per block slot d = 0..B-1 (slot 0 is the one the policy could take from the exact pending
row; slots >= 1 are the drafter's guesses), and print a table; also the "all masked" layout (every
block fully masked: a draft from scratch).

Export: export_adapter.py --ckpt OUT.pt --out DIR (writes "specd_n_layers")."""
import argparse, copy, json, os, random, sys, time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_isd  # noqa: E402
import train_sdar as S  # noqa: E402
import train_wedlm as W  # noqa: E402
from isd_model import Model  # noqa: E402

A4 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "artifacts", "adapters",
                  "smollm2-135m-sdar")


class Pair:
    """The teacher (A4, all layers, its LoRA) and the student built from it."""
    teacher = None
    teacher_mask = None   # [1, n_embd]
    ce = 0.0


def truncated(teacher, n_layers):
    """A Model sharing the teacher's weights, cut after n_layers blocks (then output norm + head),
    with a copy of the teacher's LoRA of those layers as its own trainable LoRA."""
    s = Model.__new__(Model)
    torch.nn.Module.__init__(s)
    s.c = copy.copy(teacher.c)
    s.c.n_layer = n_layers
    s.rank, s.alpha, s.targets, s.scale = teacher.rank, teacher.alpha, teacher.targets, teacher.scale
    s.emb, s.out, s.norm, s.inv_freq = teacher.emb, teacher.out, teacher.norm, teacher.inv_freq
    s.layers = teacher.layers[:n_layers]
    s.lora = copy.deepcopy(teacher.lora[:n_layers])
    for p in s.lora.parameters():
        p.requires_grad_(True)
    return s


def load_teacher(path, rank, alpha, targets, adapter):
    t = Model(path, rank, alpha, targets)
    mask = train_isd.load_adapter(t, adapter)
    if mask is None:
        sys.exit(f"{adapter}: no mask_embedding (A4 has one)")
    for p in t.lora.parameters():
        p.requires_grad_(False)
    return t, mask


def teacher_rows(x, blocks):
    """The memory pass (base, causal, all layers) and the teacher's block rows (train_sdar's
    layout): teacher logits [R, V], the layout, the memory KV and the clean logits."""
    T = x.shape[0]
    t = Pair.teacher
    pos, blk, masked, gam, slot, mask = S.build(blocks, T)
    with torch.no_grad():
        clog, kv = t(t.emb[x], torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril(),
                     gated=False, want_kv=True)
        inp = torch.where(masked[:, None], Pair.teacher_mask.expand(pos.shape[0], -1),
                          t.emb[x[pos]])
        tlog = t(inp, pos, mask, gated=True, past=kv)
    return tlog, (pos, masked, slot, mask), kv, clog


def student_rows(student, s_mask, x, lay, kv):
    """The student's block rows over its layers' share of the teacher's memory KV."""
    pos, masked, _, mask = lay
    inp = torch.where(masked[:, None], s_mask.expand(pos.shape[0], -1), student.emb[x[pos]])
    return student(inp, pos, mask, gated=True, past=kv[: student.c.n_layer])


def seq_loss(student, s_mask, x, s, B, phase, rng):
    """train_wedlm.seq_loss's contract: loss, stats, and per masked row its slot, agreement with
    the data, agreement with the TEACHER's argmax (the "base" slot of that contract) and the KL."""
    T = x.shape[0]
    blocks = W.sample_blocks(T, s, B, phase, rng)
    tlog, lay, kv, _ = teacher_rows(x, blocks)
    slog = student_rows(student, s_mask, x, lay, kv)
    pos, masked, slot, _ = lay
    mpos = pos[masked]
    logp = F.log_softmax(tlog[masked].float(), -1)
    logq = F.log_softmax(slog[masked].float(), -1)
    kl = (logp.exp() * (logp - logq)).sum(-1)
    nll = -logq.gather(1, x[mpos][:, None])[:, 0]
    loss = kl.mean() + (Pair.ce * nll.mean() if Pair.ce else 0.0)
    with torch.no_grad():
        top = logq.argmax(-1)
        agree = (top == x[mpos]).float()
        agree_t = (top == logp.argmax(-1)).float()
    return loss, dict(loss=loss.item(), kl=kl.mean().item(), nll=nll.mean().item(),
                      agree_teacher=agree_t.mean().item(), n_mask=int(mpos.shape[0])), \
        slot[masked], agree, agree_t, kl.detach()


def split_data(root, eval_shard, max_len):
    """(train-loop list, eval-shard list): the loop's list holds every shard but eval_shard (its
    first --holdout sequences are A4's own held-out ones, the loop's held-out set)."""
    seqs, used = train_isd.load_shards(root, max_len)
    keep = [n for n in used if n != eval_shard]
    out_train, out_eval, i = [], [], 0
    for name in used:
        # load_shards keeps shard order and file order: count what it kept of this shard
        d = os.path.join(root, name)
        meta = json.load(open(os.path.join(d, "seqs.json")))
        n_tok = os.path.getsize(os.path.join(d, "tokens.i32")) // 4
        k = sum(1 for q in meta["sequences"]
                if int(q["n_tokens"]) - int(q["n_prompt"]) >= 8
                and int(q["offset"]) + int(q["n_tokens"]) <= n_tok)
        (out_eval if name == eval_shard else out_train).extend(seqs[i: i + k])
        i += k
    assert i == len(seqs), "shard split does not add up to load_shards' list"
    print(f"shards: train loop {' '.join(keep)}; held-out shard {eval_shard} "
          f"({len(out_eval)} sequences)", flush=True)
    return out_train, out_eval


def fixed_blocks(seqs, B, seed, all_masked):
    rng = random.Random(seed + 7919)
    out = []
    for x, s in seqs:
        bl = W.sample_blocks(x.shape[0], s, B, rng.randrange(B), rng)
        if all_masked:
            bl = [(l0, 1.0, [(p, True) for p, _ in r]) for l0, _, r in bl]
        out.append(bl)
    return out


def eval_tables(students, seqs, layouts, B):
    """Per student (model, mask embedding) and slot: top-1 agreement with the teacher,
    KL(teacher||student), sum_v min(p, q) (= 1 - TV: the probability that SimSD's eq. 2 accepts
    the drafter's sample at temperature 1, given the same block state), top-1 agreement with the
    data; the teacher's agreement with the data; the count of masked rows. One teacher pass per
    sequence serves every student."""
    z = lambda: torch.zeros(len(students), B)  # noqa: E731
    at, kl_d, ov, ad, td, cnt = z(), z(), z(), z(), torch.zeros(B), torch.zeros(B)
    with torch.no_grad():
        for (x, s), blocks in zip(seqs, layouts):
            tlog, lay, kv, _ = teacher_rows(x, blocks)
            pos, masked, slot, _ = lay
            logp = F.log_softmax(tlog[masked].float(), -1)
            tt, y, sl = logp.argmax(-1), x[pos[masked]], slot[masked]
            for d in range(B):
                td[d] += (tt[sl == d] == y[sl == d]).sum(); cnt[d] += (sl == d).sum()
            for i, (m, e) in enumerate(students):
                logq = F.log_softmax(student_rows(m, e, x, lay, kv)[masked].float(), -1)
                kl = (logp.exp() * (logp - logq)).sum(-1)
                acc = torch.minimum(logp.exp(), logq.exp()).sum(-1)
                st = logq.argmax(-1)
                for d in range(B):
                    k = sl == d
                    at[i, d] += (st[k] == tt[k]).sum(); kl_d[i, d] += kl[k].sum()
                    ov[i, d] += acc[k].sum()
                    ad[i, d] += (st[k] == y[k]).sum()
    c, tot = cnt.clamp(min=1), cnt.sum().clamp(min=1)
    return [dict(agree_teacher=(at[i] / c).tolist(), kl=(kl_d[i] / c).tolist(),
                 accept_t1=(ov[i] / c).tolist(),
                 agree_data=(ad[i] / c).tolist(), teacher_data=(td / c).tolist(),
                 n=[int(v) for v in cnt.tolist()],
                 all=dict(agree_teacher=(at[i].sum() / tot).item(), kl=(kl_d[i].sum() / tot).item(),
                          accept_t1=(ov[i].sum() / tot).item(),
                          agree_data=(ad[i].sum() / tot).item(), teacher_data=(td.sum() / tot).item()))
            for i in range(len(students))]


def run_eval(a):
    torch.set_num_threads(a.threads)
    t0 = time.time()
    Pair.teacher, Pair.teacher_mask = load_teacher(a.model, a.rank, a.alpha, a.targets.split(","),
                                                   a.teacher)
    init = truncated(Pair.teacher, a.n_layers)
    _, evs = split_data(a.data, a.eval_shard, a.max_len)
    evs = evs[: a.eval_n]
    ck = torch.load(a.eval, map_location="cpu", weights_only=False)
    if ck["args"].get("n_layers") != a.n_layers:
        sys.exit(f"--eval {a.eval}: n_layers {ck['args'].get('n_layers')} != {a.n_layers}")
    dist = truncated(Pair.teacher, a.n_layers)
    dist.lora.load_state_dict(ck["lora"])
    d_mask = ck["mask_emb"].float().reshape(1, -1)
    print(f"loaded in {time.time() - t0:.0f}s; {len(evs)} held-out sequences of {a.eval_shard}, "
          f"checkpoint {a.eval} at step {ck['step']}", flush=True)
    res = {"checkpoint": a.eval, "step": ck["step"], "shard": a.eval_shard, "n_seqs": len(evs),
           "seed": a.seed, "n_layers": a.n_layers}
    for name, full in (("random masks (training distribution)", False),
                       ("all masked (draft from scratch)", True)):
        lay = fixed_blocks(evs, a.block, a.seed, full)
        ra, rb = eval_tables([(init, Pair.teacher_mask), (dist, d_mask)], evs, lay, a.block)
        res[name] = {"init": ra, "distilled": rb}
        B = a.block
        print(f"\n{name}: {evs and len(evs)} sequences, masked rows by slot {ra['n']}")
        print("| student | " + " | ".join(f"d={d}" for d in range(B)) + " | all |")
        print("|---|" + "---|" * (B + 1))
        for key, lab in (("agree_teacher", "top-1 = teacher"), ("kl", "KL(teacher||student)"),
                         ("accept_t1", "sum min(p,q) at T=1"), ("agree_data", "top-1 = data")):
            for nm, r in (("(a) truncated A4", ra), ("(b) distilled", rb)):
                f = "{:.2f}" if key == "kl" else "{:.3f}"
                print(f"| {nm}: {lab} | " + " | ".join(f.format(v) for v in r[key]) +
                      f" | {f.format(r['all'][key])} |")
        print("| teacher (A4): top-1 = data | " + " | ".join(f"{v:.3f}" for v in ra["teacher_data"])
              + f" | {ra['all']['teacher_data']:.3f} |", flush=True)
    if a.eval_json:
        json.dump(res, open(a.eval_json, "w"), indent=1)
    print(f"\neval took {time.time() - t0:.0f}s", flush=True)


def main():
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--n-layers", type=int, default=8)
    ap.add_argument("--teacher", default=A4, help="A4: the SDAR adapter directory (the target)")
    ap.add_argument("--ce", type=float, default=0.0, help="weight of a CE to the data token")
    ap.add_argument("--eval-shard", default="s015")
    ap.add_argument("--eval", help="a checkpoint: print the held-out table instead of training")
    ap.add_argument("--eval-n", type=int, default=64, help="held-out shard sequences in --eval")
    ap.add_argument("--eval-json", help="--eval: also write the figures here")
    mine, rest = ap.parse_known_args()
    if mine.eval:
        # the loop's options this mode reads, with the loop's defaults
        ep = argparse.ArgumentParser()
        ep.add_argument("--model", default=os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
        ep.add_argument("--data", default=".train/shards")
        ep.add_argument("--rank", type=int, default=16)
        ep.add_argument("--alpha", type=float, default=32)
        ep.add_argument("--targets", default=",".join(train_isd.PROJ))
        ep.add_argument("--block", type=int, default=4)
        ep.add_argument("--max-len", type=int, default=96)
        ep.add_argument("--threads", type=int, default=1)
        ep.add_argument("--seed", type=int, default=0)
        a = ep.parse_args(rest)
        for k, v in vars(mine).items():
            setattr(a, k, v)
        run_eval(a)
        return
    Pair.ce = mine.ce

    def make(path, rank, alpha, targets):
        Pair.teacher, Pair.teacher_mask = load_teacher(path, rank, alpha, targets, mine.teacher)
        return truncated(Pair.teacher, mine.n_layers)

    def init_from_a4(student, path):
        # --init A4: the student already holds A4's first L layers (make); its mask embedding
        if os.path.realpath(path) != os.path.realpath(mine.teacher):
            sys.exit("--init: only the teacher's adapter (the student starts as truncated A4); "
                     "use --resume to go on from a checkpoint")
        return Pair.teacher_mask.clone()

    def load_data(path, max_len):
        return split_data(path, mine.eval_shard, max_len)[0]

    W.Model, W.load_adapter, W.load_data, W.seq_loss = make, init_from_a4, load_data, seq_loss
    save = W.save

    def save_drafter(path, model, mask_emb, a, *more):
        a.objective = "sdar"          # export_adapter.py: the SDAR keys
        a.n_layers = mine.n_layers    # export_adapter.py: "specd_n_layers"
        a.teacher, a.ce, a.eval_shard = mine.teacher, mine.ce, mine.eval_shard
        save(path, model, mask_emb, a, *more)

    W.save = save_drafter
    # this objective's defaults, before the caller's options (argparse keeps the last)
    sys.argv[1:] = ["--out", ".train/simsd-drafter.pt", "--block", "4",
                    "--max-len", "96", "--init", mine.teacher] + rest
    W.main()


if __name__ == "__main__":
    main()
