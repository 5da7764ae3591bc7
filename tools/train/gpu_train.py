#!/usr/bin/env python3
"""gpu-train: trains specd's MRP draft head for a GGUF target in one run within a wall budget, on a
GPU (or, tiny, on the CPU for the test): self-distillation data generated in memory, train_mrp.py's
head and objective, export_mrp.py's head GGUF. Entry point: tools/train/gpu-train (README.md,
"gpu-train").

1. target: gpu_target.Target (the GGUF dequantized, cast to f16 on a GPU / f32 on the CPU);
2. data: prompts.chatml.json (tools/train/prompts.txt in ChatML, specd's tokenizer), jobs as
   specd-gen-data numbers them (job g: prompt g % P; repetition 0 of every 4th prompt greedy, the
   rest at specd's CLI sampling defaults T 0.8 / top-k 40 / top-p 0.95 / min-p 0.05: the same
   distribution, not the same bits as specd), decoded in batches with a KV cache, every position's
   final hidden state kept in device memory; held out: prompt_id % 10 == 0 (train_mrp's split);
3. training: gpu_mrp (train_mrp.Head, the KL objective over K unrolled steps, padded batches),
   AdamW, bf16 autocast on a GPU, cosine schedule over the remaining time (or --steps);
4. export: export_mrp.write_head (Q8_0 and F16), the draft vocabulary from this data
   (export_mrp.rank_vocab), and the logs: gpu-train.json, gpu-train.log, loss.tsv.

Held-out figures before and after come from gpu_mrp.heldout_agreement on the same held-out
sequences. The run stops itself (SIGTERM too) and always exports what it has."""
import argparse, json, math, os, platform, random, signal, sys, time, traceback

T_START = float(os.environ.get("GPU_TRAIN_T0", "0")) or time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gpu_mrp  # noqa: E402
import gpu_target  # noqa: E402
from chat_ids import tokenizer_sha256  # noqa: E402
from export_mrp import rank_vocab, read_head, write_head  # noqa: E402
from train_mrp import TARGET_DEFAULT, Head, load_target  # noqa: E402

SHIPPED_HEAD = os.path.join(os.path.dirname(os.path.dirname(HERE)), "artifacts", "mrp",
                            "smollm2-135m-mrp.gguf")


def elapsed():
    return time.time() - T_START


class Log:
    def __init__(self, path):
        self.f = open(path, "w", buffering=1)

    def __call__(self, *s):
        line = f"[{elapsed():7.1f} s] " + " ".join(str(x) for x in s)
        print(line, flush=True)
        self.f.write(line + "\n")


def fmt_eval(ev, K):
    return " | ".join(f"k{k}: top1 {ev[k]['top1']:.3f} (base {ev[k]['base_top1']:.3f}) "
                      f"kl {ev[k]['kl']:.3f} (base {ev[k]['base_kl']:.3f}) cond {ev[k]['cond']:.3f}"
                      for k in range(1, K + 1)) + f" [{ev['tokens']} tokens]"


def jsonable_eval(ev):
    return {str(k): v for k, v in ev.items()}


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=os.environ.get("SPECD_MODEL") or TARGET_DEFAULT,
                    help="the target GGUF (default $SPECD_MODEL, else the default model's cache path)")
    ap.add_argument("--model-sha256", default="", help="refuse a model file with another sha256 "
                    "(a model carried in parts and reassembled)")
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="output folder (default $OUT)")
    ap.add_argument("--budget-s", type=float, default=480, help="wall budget of the whole run")
    ap.add_argument("--device", default="auto", help="cuda, cpu or auto")
    ap.add_argument("--prompt-ids", default=os.path.join(HERE, "prompts.chatml.json"))
    # data
    ap.add_argument("--tokens", type=int, default=16_000_000, help="data tokens to generate at most")
    ap.add_argument("--gen-frac", type=float, default=0.4,
                    help="generation stops by this fraction of the budget")
    ap.add_argument("--gen-batch", type=int, default=0, help="sequences per batch (0: 2048 cuda, 8 cpu)")
    ap.add_argument("--gen-dtype", choices=["auto", "f16", "bf16", "f32"], default="auto",
                    help="the target's weights and products (auto: f16 on cuda, f32 on the CPU; f16 "
                         "hidden states are ~10x closer to f32 than bf16's; a batch with a "
                         "non-finite value is dropped and the run goes on in bf16)")
    ap.add_argument("--max-new", type=int, default=256)
    ap.add_argument("--start-job", type=int, default=0)
    ap.add_argument("--greedy-every", type=int, default=4)
    ap.add_argument("--temp", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--min-p", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--holdout-mod", type=int, default=10)
    # head and training (train_mrp.py's names)
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--K", type=int, default=3)
    ap.add_argument("--stride", type=int, default=0, help="drafting-row subsampling (0: K)")
    ap.add_argument("--init", default="", help="warm start from a head GGUF (default: fresh)")
    ap.add_argument("--batch-tokens", type=int, default=0, help="padded tokens per step (0: 65536 cuda, 512 cpu)")
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=0, help="stop after this many steps (cosine over them)")
    ap.add_argument("--amp", choices=["auto", "on", "off"], default="auto", help="bf16 autocast (auto: on cuda)")
    ap.add_argument("--vocab-chunk", type=int, default=0, help="rows per vocabulary chunk (0: 4096 cuda, 64 cpu)")
    ap.add_argument("--eval-tokens", type=int, default=100_000, help="held-out tokens in the before/after evaluation")
    ap.add_argument("--eval-every-s", type=float, default=60, help="a short held-out evaluation this often")
    ap.add_argument("--compare-head", default=SHIPPED_HEAD,
                    help="also evaluate this head GGUF on the same held-out data ('' : none)")
    ap.add_argument("--reserve-s", type=float, default=0, help="seconds kept for the end (0: auto)")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    a = ap.parse_args()
    if not a.out:
        ap.error("--out (or $OUT) is required")
    return a


def main():
    a = parse()
    os.makedirs(a.out, exist_ok=True)
    log = Log(os.path.join(a.out, "gpu-train.log"))
    if a.threads:
        torch.set_num_threads(a.threads)
    dev = torch.device("cuda" if a.device == "auto" and torch.cuda.is_available() else
                       (a.device if a.device != "auto" else "cpu"))
    cuda = dev.type == "cuda"
    amp = a.amp == "on" or (a.amp == "auto" and cuda)
    gen_batch = a.gen_batch or (2048 if cuda else 8)
    batch_tokens = a.batch_tokens or (65536 if cuda else 512)
    vchunk = a.vocab_chunk or (4096 if cuda else 64)
    stride = a.stride or a.K
    stop = {"why": None}

    def on_term(sig, frm):
        stop["why"] = f"signal {sig}"
    signal.signal(signal.SIGTERM, on_term)

    devname = torch.cuda.get_device_name(dev) if cuda else f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"
    rep = {"tool": "tools/train/gpu-train", "args": vars(a), "device": devname,
           "torch": torch.__version__, "amp_bf16": amp, "gen_batch": gen_batch,
           "batch_tokens": batch_tokens, "stride": stride, "phases": {}, "errors": []}
    log(f"gpu-train: device {devname}, torch {torch.__version__}, budget {a.budget_s:.0f} s, out {a.out}")
    if cuda:
        gpu_mrp.set_tf32(False)  # the metrics' f32 logits stay f32

    # ------------------------------------------------------------------ target and prompts
    t0 = elapsed()
    if not os.path.isfile(a.model):
        sys.exit(f"gpu-train: no model file {a.model}")
    if a.model_sha256:
        from chat_ids import sha256_file
        got = sha256_file(a.model)
        if got != a.model_sha256.lower():
            sys.exit(f"gpu-train: {a.model} has sha256 {got}, not {a.model_sha256}")
        log(f"model sha256 {got}: as expected")
    prm = json.load(open(a.prompt_ids))
    tsha = tokenizer_sha256(a.model)
    if tsha != prm["tokenizer_sha256"]:
        sys.exit(f"gpu-train: {a.prompt_ids} was written for another tokenizer ({prm['tokenizer_sha256']}, "
                 f"this model's {tsha}): run tools/train/chat_ids.py write --model {a.model}")
    prompts, eog = prm["ids"], prm["eog"]
    arch, hp, E_cpu = load_target(a.model)
    E = E_cpu.to(dev)
    Ed = E.bfloat16() if cuda else E  # train_mrp's --vocab-dtype: bf16 on a GPU
    dtypes = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}
    gen_dtype = dtypes[a.gen_dtype] if a.gen_dtype != "auto" else (torch.float16 if cuda else torch.float32)
    rep["gen_dtype"] = str(gen_dtype)
    tgt = gpu_target.Target(a.model, dev, gen_dtype, log)
    rep["phases"]["load_s"] = round(elapsed() - t0, 2)
    rep["target"] = {"path": a.model, "arch": arch, "n_params": tgt.n_params, "hp": hp}

    # ------------------------------------------------------------------ data
    d = hp["embedding_length"]
    S = max(len(p) for p in prompts) + a.max_new
    cap = a.tokens + gen_batch * S
    if cuda:
        free = torch.cuda.mem_get_info(dev)[0]
        kv = gen_batch * S * tgt.c.n_layer * 2 * tgt.c.n_kv * tgt.c.head_dim * gen_dtype.itemsize
        per_tok = d * 2 * 2 + 16  # hidden f16 + pE bf16 + token and entropy
        room = int((free - kv - gen_batch * S * d * 2 - (12 << 30)) / per_tok)
        if room < cap:
            log(f"device memory: room for {room} tokens (asked {cap})")
            cap = max(room, gen_batch * S)
    corpus = gpu_mrp.Corpus(cap, d, dev)
    gen = torch.Generator(device=dev).manual_seed(a.seed)
    sp = {"top_k": a.top_k, "top_p": a.top_p, "min_p": a.min_p}
    gen_end = a.gen_frac * a.budget_s
    job, t_gen, last_batch_s, n_batches = a.start_job, elapsed(), 0.0, 0
    log(f"generation: up to {a.tokens} tokens, batches of {gen_batch} sequences, max_new {a.max_new}, "
        f"until {gen_end:.0f} s; T {a.temp} top-k {a.top_k} top-p {a.top_p} min-p {a.min_p}, "
        f"every {a.greedy_every}th prompt's first repetition greedy")
    try:
        while corpus.n < a.tokens and stop["why"] is None:
            if n_batches and elapsed() + last_batch_s > gen_end:
                break
            if corpus.room() < S:
                log("generation: corpus full")
                break
            tb = time.time()
            jobs = gpu_target.plan_jobs(len(prompts), job, gen_batch, a.greedy_every, a.temp)
            try:
                toks, hid, seqs = gpu_target.generate_batch(tgt, prompts, jobs, a.max_new, eog, sp, gen)
            except torch.OutOfMemoryError:
                if gen_batch <= 64:
                    raise
                gen_batch //= 2
                rep["gen_batch"] = gen_batch
                torch.cuda.empty_cache()
                log(f"generation: out of memory, batch -> {gen_batch}")
                continue
            if not bool(torch.isfinite(hid).all()):
                rep["errors"].append(f"generation: non-finite hidden values in {tgt.dtype}; batch dropped")
                log(f"generation: non-finite hidden values in {tgt.dtype}: batch dropped")
                if tgt.dtype == torch.bfloat16:
                    break
                tgt = gpu_target.Target(a.model, dev, torch.bfloat16, log)
                rep["gen_dtype"] = str(torch.bfloat16)
                continue
            took = corpus.add(toks, hid, seqs)
            job += took
            n_batches += 1
            last_batch_s = time.time() - tb
            del toks, hid
            r = elapsed() - t_gen
            log(f"generation batch {n_batches}: {took} sequences, {sum(s['n_tokens'] for s in seqs[:took])} "
                f"tokens in {last_batch_s:.1f} s; total {corpus.n} tokens, {len(corpus.seqs)} sequences, "
                f"{corpus.n / max(r, 1e-9):.0f} tokens/s")
            if took < len(seqs):
                break
    except Exception as e:  # keep what was generated
        rep["errors"].append(f"generation: {e!r}")
        log("generation failed:", traceback.format_exc())
    gen_s = elapsed() - t_gen
    tgt = None
    if cuda:
        torch.cuda.empty_cache()
    n_resp = sum(s["n_tokens"] - s["n_prompt"] for s in corpus.seqs)
    rep["data"] = {"tokens": corpus.n, "response_tokens": n_resp, "sequences": len(corpus.seqs),
                   "jobs": [a.start_job, job], "seconds": round(gen_s, 2),
                   "tokens_per_s": round(corpus.n / max(gen_s, 1e-9), 1),
                   "response_tokens_per_s": round(n_resp / max(gen_s, 1e-9), 1),
                   "stop_eog": sum(s["stop"] == "eog" for s in corpus.seqs),
                   "greedy_sequences": sum(s["temp"] == 0 for s in corpus.seqs),
                   "sampling": {"temp": a.temp, "top_k": a.top_k, "top_p": a.top_p, "min_p": a.min_p,
                                "greedy_every": a.greedy_every, "max_new": a.max_new,
                                "note": "specd's CLI sampling distribution, not specd's bits"}}
    log(f"data: {corpus.n} tokens ({n_resp} response) in {len(corpus.seqs)} sequences in {gen_s:.1f} s: "
        f"{corpus.n / max(gen_s, 1e-9):.0f} tokens/s")

    # ------------------------------------------------------------------ teacher, split, head
    t0 = elapsed()
    try:
        corpus.teacher_stats(E)
    except Exception as e:  # no training without it; the untrained head is still exported
        rep["errors"].append(f"teacher statistics: {e!r}")
        log("teacher statistics failed:", traceback.format_exc())
        corpus.seqs = []
    train_idx, held_idx = corpus.split(a.holdout_mod)
    eval_idx, tok = [], 0
    for i in held_idx:
        if tok >= a.eval_tokens:
            break
        eval_idx.append(i)
        tok += corpus.seqs[i]["n_tokens"]
    quick_idx = eval_idx[:max(1, len(eval_idx) // 5)]
    rep["data"].update(train_sequences=len(train_idx), heldout_sequences=len(held_idx),
                       train_tokens=sum(corpus.seqs[i]["n_tokens"] for i in train_idx),
                       heldout_tokens=sum(corpus.seqs[i]["n_tokens"] for i in held_idx))
    rep["phases"]["teacher_s"] = round(elapsed() - t0, 2)
    log(f"teacher statistics in {elapsed() - t0:.1f} s; {len(train_idx)} train sequences, "
        f"{len(held_idx)} held out ({len(eval_idx)} in the evaluation set)")

    if a.init:
        head, _, _ = read_head(a.init)
        init_desc = a.init
    else:
        rms = gpu_mrp.mean_rms(corpus, train_idx or held_idx) if corpus.seqs else 1.0
        head = Head(hp, a.layers, seed=0, out_norm_init=-rms)
        init_desc = f"fresh (train_mrp.Head, output_norm -{rms:.4f} = -mean rms(h))"
    head = head.to(dev)
    rep["head"] = {"init": init_desc, "layers": head.n_layer, "K": a.K,
                   "n_params": sum(p.numel() for p in head.parameters())}
    log(f"head: {init_desc}, {rep['head']['n_params']} parameters")

    evals = {}

    def evaluate(h, idx, name):
        te = time.time()
        ev = gpu_mrp.heldout_agreement(h, E, corpus, idx, a.K, chunk=vchunk)
        evals[name] = {"seconds": round(time.time() - te, 2), **jsonable_eval(ev)}
        log(f"eval {name} ({time.time() - te:.1f} s): {fmt_eval(ev, a.K)}")
        return ev

    if eval_idx:
        try:
            evaluate(head, eval_idx, "before")
            if a.compare_head and os.path.exists(a.compare_head):
                ch = read_head(a.compare_head)[0].to(dev)
                evaluate(ch, eval_idx, "compare_head")
                evals["compare_head"]["path"] = a.compare_head
                ch = None
        except Exception as e:
            rep["errors"].append(f"evaluation before: {e!r}")
            log("evaluation failed:", traceback.format_exc())
    else:
        log("no held-out sequence: no evaluation")
    eval_s = evals.get("before", {}).get("seconds", 5.0)
    reserve = a.reserve_s or (2.5 * eval_s + (20 if cuda else 5))

    # ------------------------------------------------------------------ training
    decay = [p for p in head.parameters() if p.dim() == 2]
    nodecay = [p for p in head.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": nodecay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    rng = random.Random(a.seed)
    t_train0 = elapsed()
    train_end = a.budget_s - reserve
    train_budget = max(train_end - t_train0, 1e-3)
    curve, quick = [], []
    step, seen, epoch, skipped, next_quick = 0, 0, 0, 0, time.time() + a.eval_every_s
    log(f"training: until {train_end:.0f} s ({train_budget:.0f} s), batches of ~{batch_tokens} tokens, "
        f"lr {a.lr} (warmup {a.warmup}, cosine to {a.min_lr_frac} x), K {a.K}, stride {stride}, "
        f"bf16 autocast {'on' if amp else 'off'}")

    def lr_at(s, frac):
        if s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(frac, 1.0))))

    head.train()
    try:
        while train_idx and stop["why"] is None:
            batches = corpus.batches(train_idx, batch_tokens, rng)
            for bi in batches:
                if a.steps and step >= a.steps:
                    stop["why"] = f"--steps {a.steps}"
                if elapsed() >= train_end:
                    stop["why"] = "budget"
                if stop["why"]:
                    break
                frac = step / a.steps if a.steps else (elapsed() - t_train0) / train_budget
                lr = lr_at(step, frac)
                for g in opt.param_groups:
                    g["lr"] = lr
                batch = corpus.gather(bi)
                with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=amp):
                    loss, per_k = gpu_mrp.train_loss_padded(head, E, Ed, batch, a.K, stride,
                                                            rng.randrange(stride), vchunk)
                opt.zero_grad(set_to_none=True)
                gn = 0.0
                if loss is not None and bool(torch.isfinite(loss)):
                    loss.backward()
                    gn = float(torch.nn.utils.clip_grad_norm_(head.parameters(), a.clip))
                    if math.isfinite(gn):
                        opt.step()
                if loss is not None and not (bool(torch.isfinite(loss)) and math.isfinite(gn)):
                    skipped += 1  # a non-finite loss or gradient: the step is left out
                    if skipped > 20 and skipped > step // 10:
                        raise RuntimeError(f"{skipped} non-finite steps of {step + 1}")
                step += 1
                ntok = int(batch[4].sum())
                seen += ntok
                lv = float(loss.detach()) if loss is not None else None
                curve.append({"step": step, "t": round(elapsed(), 2), "lr": lr, "loss": lv,
                              "kl_k": per_k, "grad_norm": round(gn, 4), "tokens": ntok})
                if step == 1 or step % 50 == 0:
                    log(f"step {step} epoch {epoch}: loss {lv if lv is None else round(lv, 4)} kl_k "
                        f"{[None if v is None else round(v, 3) for v in per_k]} lr {lr:.2e} gn {gn:.2f} "
                        f"{seen} tokens seen, {step / max(elapsed() - t_train0, 1e-9):.2f} steps/s")
                if quick_idx and time.time() >= next_quick:
                    head.eval()
                    ev = gpu_mrp.heldout_agreement(head, E, corpus, quick_idx, a.K, chunk=vchunk)
                    head.train()
                    quick.append({"step": step, "t": round(elapsed(), 2), **jsonable_eval(ev)})
                    log(f"quick eval step {step}: {fmt_eval(ev, a.K)}")
                    next_quick = time.time() + a.eval_every_s
            else:
                epoch += 1
                continue
            break
    except Exception as e:  # keep the head as it is
        rep["errors"].append(f"training: {e!r}")
        log("training failed:", traceback.format_exc())
    train_s = elapsed() - t_train0
    head.eval()
    rep["training"] = {"steps": step, "tokens_seen": seen, "epochs_done": epoch,
                       "epochs": round(seen / max(rep["data"]["train_tokens"], 1), 3),
                       "seconds": round(train_s, 2), "steps_per_s": round(step / max(train_s, 1e-9), 3),
                       "stopped_by": stop["why"] or "end", "lr": a.lr, "warmup": a.warmup,
                       "nonfinite_steps_skipped": skipped,
                       "final_loss": curve[-1]["loss"] if curve else None}
    log(f"training: {step} steps, {seen} tokens seen ({rep['training']['epochs']} epochs) in {train_s:.1f} s, "
        f"stopped by {rep['training']['stopped_by']}")

    # ------------------------------------------------------------------ after, export, logs
    if eval_idx:
        try:
            evaluate(head, eval_idx, "after")
        except Exception as e:
            rep["errors"].append(f"evaluation after: {e!r}")
            log("evaluation failed:", traceback.format_exc())
    export(a, head, hp, corpus, rep, step, seen, log)
    rep["evals"] = evals
    rep["quick_evals"] = quick
    rep["loss_curve"] = curve if len(curve) <= 4000 else curve[::math.ceil(len(curve) / 4000)]
    rep["wall_s"] = round(elapsed(), 2)
    if "before" in evals and "after" in evals:
        rep["first_draft_agreement"] = {"before": evals["before"]["1"]["top1"],
                                        "after": evals["after"]["1"]["top1"],
                                        "no_head": evals["after"]["1"]["base_top1"]}
        if "compare_head" in evals:
            rep["first_draft_agreement"]["compare_head"] = evals["compare_head"]["1"]["top1"]
    with open(os.path.join(a.out, "loss.tsv"), "w") as f:
        f.write("step\tt_s\tlr\tloss\t" + "\t".join(f"kl_{k}" for k in range(1, a.K + 1)) + "\tgrad_norm\ttokens\n")
        for c in curve:
            f.write(f"{c['step']}\t{c['t']}\t{c['lr']:.4e}\t{c['loss']}\t" +
                    "\t".join(str(None if v is None else round(v, 5)) for v in c["kl_k"]) +
                    f"\t{c['grad_norm']}\t{c['tokens']}\n")
    with open(os.path.join(a.out, "gpu-train.json"), "w") as f:
        json.dump(rep, f, indent=1)
    fda = rep.get("first_draft_agreement")
    log(f"done in {elapsed():.1f} s: data {corpus.n} tokens, {step} steps; held-out first-draft agreement "
        + (f"{fda['before']:.3f} -> {fda['after']:.3f} (no head {fda['no_head']:.3f}"
           + (f", compare head {fda['compare_head']:.3f}" if "compare_head" in fda else "") + ")"
           if fda else "not measured") + f"; errors: {len(rep['errors'])}")
    return 1 if rep["errors"] else 0


def export(a, head, hp, corpus, rep, step, seen, log):
    """The head GGUF twice (Q8_0 as shipped, F16), the draft vocabulary from this run's data."""
    te = time.time()
    rep["files"] = {}
    try:
        dvocab, extra = None, {"mrp.train_steps": step, "mrp.train_tokens": seen}
        if corpus.seqs:
            resp, allt, held = gpu_mrp.token_counts(corpus, a.holdout_mod, hp["vocab_size"])
            if resp.sum() > 0:
                src = (f"response tokens of the training split (prompt_id % {a.holdout_mod} != 0) of "
                       f"gpu-train's data (jobs {rep['data']['jobs'][0]}..{rep['data']['jobs'][1] - 1}): "
                       f"{int(resp.sum())} tokens, {int((resp > 0).sum())} distinct")
                order, lines, src = rank_vocab(resp, allt, held, src)
                dvocab = order[:min(16384, hp["vocab_size"])]
                extra["mrp.draft_vocab_source"] = src
                log("draft vocabulary: " + src + "\n" + "\n".join(lines))
        cpu_head = head.float().cpu()
        for dtype in ("q8_0", "f16"):
            path = os.path.join(a.out, f"mrp-head.{dtype}.gguf")
            write_head(cpu_head, hp, path + ".tmp", dtype, a.K, f"smollm2-135m-mrp-gpu-L{cpu_head.n_layer}",
                       extra, dvocab)
            os.replace(path + ".tmp", path)
            rep["files"][os.path.basename(path)] = os.path.getsize(path)
            log(f"wrote {path} ({os.path.getsize(path) / 1e6:.2f} MB)")
    except Exception as e:
        rep["errors"].append(f"export: {e!r}")
        log("export failed:", traceback.format_exc())
    rep["phases"]["export_s"] = round(time.time() - te, 2)


if __name__ == "__main__":
    sys.exit(main())
