#!/usr/bin/env python3
"""Trains the MRP-causal drafting head (the causal form specd's mrp policy runs, policy/self/mrp.c; MRP
paper 002 sec. 3.2-3.3, eq. 3, Alg. 1) over CACHED hidden states of the frozen target: no backbone forward at all.

Data: shards written by the generator (<data>/<shard>/{tokens.i32, hidden.f16, seqs.json, DONE}):
the base model's own continuations of ChatML prompts, with the target's post-output-norm hidden
h_j for every position j. The target's logits are zA_j = E . h_j (E = the dequantized tied token
embedding, read from the target GGUF), so everything the loss needs comes from h and E.

Head (as policy/self/mrp_head.c computes it): row for target position j with following token y and hidden g:
  u = eh_proj([enorm(E[y]); hnorm(g)])  (init [0 | I]),  L llama blocks (position id j + 1),
  output RMSNorm -> hp;  residual logits C = E . hp.
Committed rows: j = 0..n-2 with y = x_{j+1}, g = h_j (one causal pass, the head's KV cache).
Drafting from t: z_1 = zA_t + C_1 with hp_1 = the committed row t;
  step k >= 2: a speculative row at position t + k, y = x_{t+k} (teacher forcing; the runtime
  feeds its draft d_{k-1} there), g = h_t + hp_1 + ... + hp_{k-1}, attending to the committed
  rows <= t and this round's earlier speculative rows; z_k = z_{k-1} + C_k.
Loss (eq. 3): sum over k of mean_t KL(softmax zA_{t+k} || softmax z_k), temperature 1, K unrolled
steps, uniform weights, on drafting positions t >= n_prompt - 1 (x_{t+1} is a response token).

Exact full-vocabulary KL at a fraction of the cost. Because z_k = E . x_k with
x_k = h_t + hp_1 + ... + hp_k (linear in the hidden), and the teacher p = softmax(E . h_{t+k}):
  KL(p || softmax z_k) = lse(E . x_k) - pE_{t+k} . x_k - H_{t+k},   pE_i = sum_v p_i[v] E[v],
so the teacher enters only through a 576-vector pE and its entropy H per position, computed
once per shard and cached (`--cache`). The student still needs the full log-sum-exp over the
49152 logits and its gradient softmax(E x) . E: two vocabulary-sized matmuls per row and step,
done in chunks of 64 rows (cache-resident softmax) with bf16 matmuls (`--vocab-dtype`, measured
~2.5x faster than f32 on this CPU; logits are rounded to bf16 before the f32 log-sum-exp).
Position subsampling (`--stride`, default K): per sequence only the drafting positions
t = r (mod stride), r random per batch, get the K-step loss, so each position's teacher is used
about once per epoch and the vocabulary cost per token is one row-step instead of K.

Held-out metrics (sequences whose prompt_id % holdout_mod == 0; f32 throughout), per step k:
  top1   : argmax z_k == argmax zA_{t+k}  (acceptance of draft k under greedy verification,
           teacher-forced path)
  kl     : KL(softmax zA_{t+k} || softmax z_k)
  cond   : P(draft k accepted | drafts 1..k-1 accepted and equal to the data tokens and
           x_{t+1} == argmax zA_t), i.e. the conditional acceptance of a greedy chain on the
           subset where the teacher-forced path is the greedy path
and the same for the no-head baseline z_k = zA_t."""
import argparse, glob, json, math, os, random, sys, time

import numpy as np
import torch
import torch.nn.functional as F

GGUF_PROJ = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"]
TARGET_DEFAULT = os.path.expanduser("~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")


# ----------------------------------------------------------------------------- target

def gguf_kv(r, name):
    f = r.fields[name]
    v = f.parts[f.data[0]]
    return v.tolist()[0] if v.size == 1 and f.types[0].name != "STRING" else bytes(v).decode()


def load_target(path):
    """The target's llama hyperparameters (for the head's shape and file) and its dequantized
    token embedding E [n_vocab, n_embd] f32 (the frozen tied output head)."""
    import gguf
    r = gguf.GGUFReader(path)
    arch = gguf_kv(r, "general.architecture")
    keys = ["context_length", "embedding_length", "feed_forward_length", "attention.head_count",
            "attention.head_count_kv", "attention.layer_norm_rms_epsilon", "rope.freq_base",
            "rope.dimension_count", "vocab_size"]
    hp = {k: gguf_kv(r, f"{arch}.{k}") for k in keys if f"{arch}.{k}" in r.fields}
    E = None
    for t in r.tensors:
        if t.name == "token_embd.weight":
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            shape = [int(x) for x in reversed(t.shape.tolist())]
            E = torch.from_numpy(np.array(a, dtype=np.float32).reshape(shape))
    if E is None:
        sys.exit(f"{path}: no token_embd.weight")
    hp["vocab_size"] = E.shape[0]
    return arch, hp, E


# ----------------------------------------------------------------------------- head

class Head(torch.nn.Module):
    """The MRP head: enorm/hnorm/eh_proj, L llama blocks (adjacent-pair RoPE as llama.cpp's
    "normal" mode, so q/k rows are already in the GGUF layout specd runs), output norm.
    Weights are [out, in] like the GGUF's (ggml ne = [in, out])."""

    def __init__(self, hp, n_layer=1, seed=0, init_std=0.02, out_norm_init=1.0):
        super().__init__()
        self.hp = dict(hp)
        d = hp["embedding_length"]
        self.d, self.n_ff = d, hp["feed_forward_length"]
        self.n_head, self.n_kv = hp["attention.head_count"], hp["attention.head_count_kv"]
        self.hd = d // self.n_head
        self.eps = hp["attention.layer_norm_rms_epsilon"]
        self.n_layer = n_layer
        g = torch.Generator().manual_seed(seed)

        def mat(o, i, std=init_std):
            return torch.nn.Parameter(torch.randn(o, i, generator=g) * std)

        P = torch.nn.Parameter
        self.enorm = P(torch.ones(d))
        self.hnorm = P(torch.ones(d))
        # [W_e | W_h] = [0 | I]: at init the body sees the (normalized) target hidden only
        self.eh_proj = P(torch.cat((torch.zeros(d, d), torch.eye(d)), 1))
        self.blocks = torch.nn.ModuleList()
        kvd = self.n_kv * self.hd
        # output projections scaled down (GPT-2 style) so the blocks start near identity
        so = init_std / math.sqrt(2 * n_layer)
        for _ in range(n_layer):
            b = torch.nn.ParameterDict({
                "attn_norm": P(torch.ones(d)), "ffn_norm": P(torch.ones(d)),
                "attn_q": mat(d, d), "attn_k": mat(kvd, d), "attn_v": mat(kvd, d),
                "attn_output": mat(d, d, so), "ffn_gate": mat(self.n_ff, d),
                "ffn_up": mat(self.n_ff, d), "ffn_down": mat(d, self.n_ff, so)})
            self.blocks.append(b)
        self.output_norm = P(torch.full((d,), float(out_norm_init)))
        i = torch.arange(0, self.hd, 2, dtype=torch.float64)
        self.register_buffer("inv_freq", (1.0 / (hp["rope.freq_base"] ** (i / self.hd))).float(),
                             persistent=False)

    def rms(self, x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * w

    def rope(self, x, pos):
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def inputs(self, ey, g):
        """u = eh_proj([enorm(E[y]); hnorm(g)]); ey = E[y] rows."""
        return torch.cat((self.rms(ey, self.enorm), self.rms(g, self.hnorm)), -1) @ self.eh_proj.t()

    def forward(self, u, pos, past, mask):
        """u [..., R, d] input rows at positions pos [R] (optional leading batch dims, shared
        positions); past: per layer list of (k, v) tensors [..., P_i, n_kv, hd] (concatenated in
        order) or None; mask [R, sum P_i + R] bool over the past keys then this group's keys, or
        [..., R, sum P_i + R] per batch row. Returns hp [..., R, d] and this group's per-layer (k, v)."""
        R = u.shape[-2]
        lead = u.shape[:-2]
        x = u.float()  # the residual stream stays f32 under autocast
        kvs = []
        bias = torch.zeros(mask.shape, dtype=x.dtype, device=x.device).masked_fill(~mask, float("-inf"))
        if mask.dim() > 2:
            bias = bias.unsqueeze(-3)  # broadcast over heads
        rep = self.n_head // self.n_kv
        for l, b in enumerate(self.blocks):
            a = self.rms(x, b["attn_norm"])
            q = self.rope((a @ b["attn_q"].t()).view(*lead, R, self.n_head, self.hd), pos)
            k = self.rope((a @ b["attn_k"].t()).view(*lead, R, self.n_kv, self.hd), pos)
            v = (a @ b["attn_v"].t()).view(*lead, R, self.n_kv, self.hd)
            kvs.append((k, v))
            if past:
                k = torch.cat([p[l][0] for p in past] + [k], -3)
                v = torch.cat([p[l][1] for p in past] + [v], -3)
            k = k.repeat_interleave(rep, dim=-2)
            v = v.repeat_interleave(rep, dim=-2)
            dt = v.dtype  # under autocast q, k (RoPE in f32) and v (a bf16 product) differ
            o = F.scaled_dot_product_attention(q.transpose(-3, -2).to(dt), k.transpose(-3, -2).to(dt),
                                               v.transpose(-3, -2), attn_mask=bias.to(dt))
            x = x + o.transpose(-3, -2).reshape(*lead, R, self.d) @ b["attn_output"].t()
            f = self.rms(x, b["ffn_norm"])
            x = x + (F.silu(f @ b["ffn_gate"].t()) * (f @ b["ffn_up"].t())) @ b["ffn_down"].t()
        return self.rms(x, self.output_norm), kvs


def head_from_ckpt(ck):
    h = Head(ck["hp"], n_layer=ck["args"]["layers"])
    h.load_state_dict(ck["head"])
    return h


# ----------------------------------------------------------------------------- vocab loss

class VocabLSE(torch.autograd.Function):
    """lse(E . x) per row, with gradient softmax(E . x) . E; chunked so the [rows, vocab]
    logits never exist at once (and stay cache-sized for the softmax)."""

    @staticmethod
    def forward(ctx, x, E, Ed, chunk):
        out = torch.empty(x.shape[0], device=x.device)
        grad = torch.empty(x.shape, device=x.device)
        xd = x.detach().to(Ed.dtype)
        for a in range(0, x.shape[0], chunk):
            z = (xd[a:a + chunk] @ Ed.t()).float()
            m = torch.logsumexp(z, -1)
            out[a:a + chunk] = m
            q = torch.exp(z - m[:, None]).to(Ed.dtype)
            grad[a:a + chunk] = (q @ Ed).float()
        ctx.save_for_backward(grad)
        return out

    @staticmethod
    def backward(ctx, g):
        (grad,) = ctx.saved_tensors
        return g[:, None] * grad, None, None, None


# ----------------------------------------------------------------------------- data

class Data:
    """All DONE shards: tokens (int32) and hidden (f16) memory-mapped, sequences with global
    offsets, and the teacher statistics cache per shard."""

    def __init__(self, dirs, cache_root, E, holdout_mod, log=print):
        self.shards = []
        self.seqs = []
        for d in dirs:
            meta = json.load(open(os.path.join(d, "seqs.json")))
            n = meta["n_tokens"]
            tok = np.memmap(os.path.join(d, "tokens.i32"), dtype="<i4", mode="r", shape=(n,))
            hid = np.memmap(os.path.join(d, "hidden.f16"), dtype="<f2", mode="r",
                            shape=(n, meta["n_embd"]))
            name = os.path.basename(os.path.normpath(d))
            tc = teacher_cache(d, os.path.join(cache_root, name), E, log)
            si = len(self.shards)
            self.shards.append({"dir": d, "name": name, "tok": tok, "hid": hid, "teacher": tc,
                                "meta": meta})
            for s in meta["sequences"]:
                if s["n_tokens"] - s["n_prompt"] < 2:
                    continue
                self.seqs.append({"shard": si, "off": s["offset"], "n": s["n_tokens"],
                                  "np": s["n_prompt"], "pid": s["prompt_id"]})
        self.train = [i for i, s in enumerate(self.seqs) if s["pid"] % holdout_mod != 0]
        self.held = [i for i, s in enumerate(self.seqs) if s["pid"] % holdout_mod == 0]

    def get(self, i, max_len):
        s = self.seqs[i]
        sh = self.shards[s["shard"]]
        n = min(s["n"], max_len)
        o = s["off"]
        x = torch.from_numpy(np.array(sh["tok"][o:o + n], dtype=np.int64))
        h = torch.from_numpy(np.array(sh["hid"][o:o + n], dtype=np.float32))
        t = torch.from_numpy(np.array(sh["teacher"][o:o + n], dtype=np.float32))
        return x, h, t, s["np"]


TEACHER_W = None  # columns of the teacher cache: pE (n_embd), H, lse, argmax


def teacher_cache(shard_dir, cache_dir, E, log, chunk=64):
    """Per position j: pE_j = softmax(E h_j) . E, H_j (entropy), lse_j = lse(E h_j), argmax_j,
    kept in cache_dir/teacher.f32 (DONE-marked). Only the rows the loss and the metrics read are
    computed (j >= n_prompt - 1 of each sequence; prompt rows stay 0). The logits are f32 (exact
    argmax, entropy and lse of the target's distribution); p . E runs in bf16 (p >= 0, so the
    rounding averages out: measured |pE_bf16 - pE_f32| / |pE| ~ 1e-3)."""
    meta = json.load(open(os.path.join(shard_dir, "seqs.json")))
    n, d = meta["n_tokens"], meta["n_embd"]
    w = d + 3
    path = os.path.join(cache_dir, "teacher.f32")
    if os.path.exists(path + ".done"):
        return np.memmap(path, dtype="<f4", mode="r", shape=(n, w))
    os.makedirs(cache_dir, exist_ok=True)
    hid = np.memmap(os.path.join(shard_dir, "hidden.f16"), dtype="<f2", mode="r", shape=(n, d))
    out = np.memmap(path + ".tmp", dtype="<f4", mode="w+", shape=(n, w))
    rows = np.concatenate([np.arange(s["offset"] + max(s["n_prompt"] - 1, 0), s["offset"] + s["n_tokens"])
                           for s in meta["sequences"]] or [np.zeros(0, dtype=np.int64)])
    Eb = E.bfloat16()
    t0 = time.time()
    with torch.no_grad():
        for a in range(0, rows.shape[0], chunk):
            r = rows[a:a + chunk]
            h = torch.from_numpy(np.array(hid[r], dtype=np.float32))
            z = h @ E.t()
            m = torch.logsumexp(z, -1)
            p = torch.exp(z - m[:, None])
            pe = (p.bfloat16() @ Eb).float()
            H = m - (p * z).sum(-1)
            o = torch.cat((pe, H[:, None], m[:, None], z.argmax(-1).float()[:, None]), 1)
            out[r] = o.numpy()
    out.flush()
    del out
    os.replace(path + ".tmp", path)
    open(path + ".done", "w").close()
    log(f"teacher cache {cache_dir}: {rows.shape[0]} of {n} positions in {time.time() - t0:.0f} s")
    return np.memmap(path, dtype="<f4", mode="r", shape=(n, w))


def done_shards(root):
    return sorted(d for d in glob.glob(os.path.join(root, "*")) if os.path.exists(os.path.join(d, "DONE")))


# ----------------------------------------------------------------------------- the unrolled pass

def pack(items):
    """Concatenate sequences: returns x, h, teacher [T], seq id [T], local index j [T], n per
    row, n_prompt per row."""
    xs, hs, ts, sid, jj, nn, npr = [], [], [], [], [], [], []
    for i, (x, h, t, np_) in enumerate(items):
        n = x.shape[0]
        xs.append(x); hs.append(h); ts.append(t)
        sid.append(torch.full((n,), i)); jj.append(torch.arange(n))
        nn.append(torch.full((n,), n)); npr.append(torch.full((n,), np_))
    return (torch.cat(xs), torch.cat(hs), torch.cat(ts), torch.cat(sid), torch.cat(jj),
            torch.cat(nn), torch.cat(npr))


def unrolled(head, E, batch, K, sel, direct=False):
    """The K-step drafting pass for the drafting rows `sel` (indices into the packed batch, each
    a committed row t). Returns per k: x_k [M, d] (z_k = E . x_k), and the row indices t+k of
    the targets plus a validity mask (t + k inside the sequence)."""
    x, h, _, sid, j, n, _ = batch
    d = h.shape[1]
    # committed rows: every j <= n-2 (y = x_{j+1} exists)
    crow = torch.nonzero(j <= n - 2).squeeze(1)
    pos_c = j[crow] + 1
    u = head.inputs(E[x[crow + 1]], h[crow])
    cm = (sid[crow][:, None] == sid[crow][None, :]) & (j[crow][None, :] <= j[crow][:, None])
    hp_c, kv_c = head(u, pos_c, None, cm)
    # map packed row -> committed index
    cidx = torch.full((x.shape[0],), -1, dtype=torch.long)
    cidx[crow] = torch.arange(crow.shape[0])
    ci = cidx[sel]
    assert (ci >= 0).all()
    M = sel.shape[0]
    hp = hp_c[ci]
    acc = hp
    outs = [(hp if direct else h[sel] + acc)]
    past = [kv_c]
    # committed keys visible to a drafting row at t: same sequence, j' <= t
    vis_c = (sid[crow][None, :] == sid[sel][:, None]) & (j[crow][None, :] <= j[sel][:, None])
    eye = torch.eye(M, dtype=torch.bool)
    last = hp
    for k in range(2, K + 1):
        tk = torch.minimum(sel + k, sel - j[sel] + n[sel] - 1)  # clamp inside the sequence
        g = last if direct else h[sel] + acc
        u = head.inputs(E[x[tk]], g)
        mask = torch.cat([vis_c] + [eye] * (k - 1), 1)
        hpk, kvk = head(u, j[sel] + k, past, mask)
        past.append(kvk)
        acc = acc + hpk
        last = hpk
        outs.append(hpk if direct else h[sel] + acc)
    tgt = [sel + k for k in range(1, K + 1)]
    valid = [(j[sel] + k <= n[sel] - 1) for k in range(1, K + 1)]
    return outs, tgt, valid


def drafting_rows(batch, stride, offset, K):
    x, h, _, sid, j, n, npr = batch
    ok = (j >= npr - 1) & (j <= n - 2)
    if stride > 1:
        ok &= ((j - (npr - 1) - offset) % stride) == 0
    return torch.nonzero(ok).squeeze(1)


def train_loss(head, E, Ed, batch, K, stride, offset, chunk, direct):
    sel = drafting_rows(batch, stride, offset, K)
    if sel.numel() == 0:
        return None, []
    outs, tgt, valid = unrolled(head, E, batch, K, sel, direct)
    T = batch[2]
    d = E.shape[1]
    losses = []
    for k in range(K):
        v = valid[k]
        if not v.any():
            losses.append(None)
            continue
        xk = outs[k][v]
        te = T[tgt[k][v]]
        lse = VocabLSE.apply(xk, E, Ed, chunk)
        kl = lse - (te[:, :d] * xk).sum(-1) - te[:, d]
        losses.append(kl.mean())
    tot = sum(l for l in losses if l is not None)
    return tot, [None if l is None else float(l.detach()) for l in losses]


@torch.no_grad()
def summarize(agg, seen):
    """Per-step sums of evaluate's counters -> rates (shared with gpu_mrp.heldout_agreement)."""
    out = {}
    for k, g in agg.items():
        nn_ = max(g["n"], 1)
        out[k] = {"n": g["n"], "top1": g["top1"] / nn_, "kl": g["kl"] / nn_,
                  "base_top1": g["base_top1"] / nn_, "base_kl": g["base_kl"] / nn_,
                  "cond_n": g["cond_n"], "cond": g["cond"] / max(g["cond_n"], 1),
                  "base_cond_n": g["base_cond_n"],
                  "base_cond": g["base_cond"] / max(g["base_cond_n"], 1)}
    out["tokens"] = seen
    return out


def evaluate(head, E, data, idx, K, max_len, direct, chunk=64, limit_tokens=None):
    """Held-out metrics per step k (f32 logits, every drafting position)."""
    d = E.shape[1]
    agg = {k: {"n": 0, "top1": 0, "kl": 0.0, "base_top1": 0, "base_kl": 0.0,
               "cond_n": 0, "cond": 0, "base_cond_n": 0, "base_cond": 0} for k in range(1, K + 1)}
    seen = 0
    for i in idx:
        item = data.get(i, max_len)
        batch = pack([item])
        x, h, T, sid, j, n, npr = batch
        sel = drafting_rows(batch, 1, 0, K)
        if sel.numel() == 0:
            continue
        outs, tgt, valid = unrolled(head, E, batch, K, sel, direct)
        A = T[:, d + 2].long()
        dr, ok_chain, base_chain = [], torch.ones(sel.shape[0], dtype=torch.bool), None
        chain = (x[sel + 1] == A[sel])               # the decided token is the greedy one
        bchain = chain.clone()
        for k in range(1, K + 1):
            v = valid[k - 1]
            tk = tgt[k - 1].clamp(max=x.shape[0] - 1)
            xk = outs[k - 1]
            lse = torch.empty(xk.shape[0])
            dk = torch.empty(xk.shape[0], dtype=torch.long)
            for a in range(0, xk.shape[0], chunk):
                z = xk[a:a + chunk] @ E.t()
                lse[a:a + chunk] = torch.logsumexp(z, -1)
                dk[a:a + chunk] = z.argmax(-1)
            te = T[tk]
            kl = lse - (te[:, :d] * xk).sum(-1) - te[:, d]
            bkl = T[sel, d + 1] - (te[:, :d] * h[sel]).sum(-1) - te[:, d]
            hit = dk == A[tk]
            bhit = A[sel] == A[tk]
            g = agg[k]
            g["n"] += int(v.sum())
            g["top1"] += int((hit & v).sum())
            g["kl"] += float(kl[v].sum())
            g["base_top1"] += int((bhit & v).sum())
            g["base_kl"] += float(bkl[v].sum())
            g["cond_n"] += int((chain & v).sum())
            g["cond"] += int((chain & v & hit).sum())
            g["base_cond_n"] += int((bchain & v).sum())
            g["base_cond"] += int((bchain & v & bhit).sum())
            # the next step's teacher-forced input x_{t+k+1} equals the draft and the draft is
            # accepted: the teacher-forced path is the greedy free-running path
            nxt = x[torch.minimum(sel + k + 1, sel - j[sel] + n[sel] - 1)]
            chain = chain & hit & (dk == nxt) & v
            bchain = bchain & bhit & (A[sel] == nxt) & v
        seen += x.shape[0]
        if limit_tokens and seen >= limit_tokens:
            break
    return summarize(agg, seen)


def fmt_eval(ev, K):
    return " | ".join(f"k{k}: top1 {ev[k]['top1']:.3f} (base {ev[k]['base_top1']:.3f}) "
                      f"kl {ev[k]['kl']:.3f} (base {ev[k]['base_kl']:.3f}) "
                      f"cond {ev[k]['cond']:.3f}/{ev[k]['cond_n']} (base {ev[k]['base_cond']:.3f})"
                      for k in range(1, K + 1))


# ----------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=".train/shards")
    ap.add_argument("--shards", default="", help="comma-separated shard names (default: all DONE)")
    ap.add_argument("--cache", default=".train/mrp", help="teacher statistics cache")
    ap.add_argument("--target", default=TARGET_DEFAULT)
    ap.add_argument("--out", default=".train/mrp/ckpt.pt")
    ap.add_argument("--log", default="", help="JSON log (default: <out>.log.json)")
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--init", default="",
                    help="warm start: the head weights of this checkpoint (fresh optimizer, schedule "
                         "and data order; shape options must match)")
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--out-norm-init", default="auto",
                    help="initial output_norm weight: a number, or auto = -rms(h) (residual: hp_1 "
                         "starts as -h_t, cancelling zA_t, which predicts the token just decided) "
                         "or +rms(h) (--direct: z_1 starts as zA_t)")
    ap.add_argument("--K", type=int, default=3, help="unrolled steps (drafts) trained")
    ap.add_argument("--stride", type=int, default=0, help="drafting-position subsampling (0: K)")
    ap.add_argument("--direct", action="store_true", help="ablation: z_k = E . hp_k (no residual)")
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--epochs", type=float, default=1.0)
    ap.add_argument("--steps", type=int, default=0, help="total optimizer steps (0: from --epochs)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--wd", type=float, default=0.01)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--vocab-dtype", choices=["bf16", "f32"], default="bf16")
    ap.add_argument("--chunk", type=int, default=64)
    ap.add_argument("--holdout-mod", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-tokens", type=int, default=6000, help="held-out tokens per periodic eval")
    ap.add_argument("--final-eval-tokens", type=int, default=40000)
    ap.add_argument("--max-minutes", type=float, default=0, help="stop (and save) after this long")
    ap.add_argument("--budget-minutes", type=float, default=0,
                    help="train for this much step time in all (evals excluded), cosine over it; "
                         "replaces --steps/--epochs")
    ap.add_argument("--follow", action="store_true",
                    help="on each --resume, add the shards that became DONE since (streaming data)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-only", action="store_true", help="build the teacher caches and exit")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    t_start = time.time()
    logp = a.log or a.out + ".log.json"

    def log(*s):
        print(time.strftime("%H:%M:%S"), *s, flush=True)

    arch, hp, E = load_target(a.target)
    ck = None
    if a.resume and os.path.exists(a.out):
        ck = torch.load(a.out, map_location="cpu", weights_only=False)
        shard_names = ck["shards"]
        for key in ("layers", "out_norm_init", "K", "stride", "direct", "batch_tokens", "max_len",
                    "holdout_mod", "vocab_dtype", "lr", "min_lr_frac", "warmup", "wd", "seed",
                    "steps"):
            setattr(a, key, ck["args"].get(key, getattr(a, key)))
        log(f"resume from {a.out}: step {ck['step']}, {ck.get('train_s', 0):.0f} s of training")
        if a.follow:  # shards finished since the last chunk join the pool (appended: indices stay)
            shard_names = shard_names + [os.path.basename(d) for d in done_shards(a.data)
                                         if os.path.basename(d) not in shard_names]
    else:
        names = [s for s in a.shards.split(",") if s]
        dirs = done_shards(a.data)
        shard_names = [os.path.basename(d) for d in dirs if not names or os.path.basename(d) in names]
    if not shard_names:
        sys.exit(f"no DONE shards under {a.data}")
    data = Data([os.path.join(a.data, s) for s in shard_names], a.cache, E, a.holdout_mod, log)
    if a.cache_only:
        return
    K = a.K
    stride = a.stride or K
    Ed = E.bfloat16() if a.vocab_dtype == "bf16" else E
    ntr = sum(min(data.seqs[i]["n"], a.max_len) for i in data.train)
    nho = sum(min(data.seqs[i]["n"], a.max_len) for i in data.held)
    log(f"shards {shard_names}: {len(data.train)} train seqs ({ntr} tokens), "
        f"{len(data.held)} held-out seqs ({nho} tokens)")

    if ck:
        ck["log"]["train_tokens"], ck["log"]["heldout_tokens"] = ntr, nho
    if a.out_norm_init == "auto":
        # mean rms of the target hidden over the first shard's response rows
        sh = data.shards[0]
        r = np.concatenate([np.arange(q["off"] + q["np"], q["off"] + q["n"])
                            for q in data.seqs if q["shard"] == 0])[:20000]
        rms = float(np.sqrt((np.array(sh["hid"][r], dtype=np.float32) ** 2).mean(-1)).mean())
        a.out_norm_init = f"{(rms if a.direct else -rms):.4f}"
        log(f"output_norm init {a.out_norm_init} (mean rms of h = {rms:.4f})")
    head = Head(hp, a.layers, seed=a.seed, out_norm_init=float(a.out_norm_init))
    decay = [p for n_, p in head.named_parameters() if p.dim() == 2]
    nodecay = [p for n_, p in head.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": nodecay, "weight_decay": 0.0}], lr=a.lr, betas=(0.9, 0.95))
    rng = random.Random(a.seed)
    if ck:
        head.load_state_dict(ck["head"])
        opt.load_state_dict(ck["opt"])
        step, total, order, cur = ck["step"], ck["total_steps"], ck["order"], ck["cursor"]
        hist, tokens_seen, wall = ck["log"], ck["tokens_seen"], ck["wall_s"]
        train_s = ck.get("train_s", 0.0)
        rng.setstate(ck["rng"])
        torch.set_rng_state(ck["torch_rng"])
        known = set(ck["order"])
        new = [i for i in data.train if i not in known]
        if new:
            rest = order[cur:] + new
            rng.shuffle(rest)
            order = order[:cur] + rest
            hist.setdefault("shards_added", []).append(
                {"step": step, "shards": shard_names[len(ck["shards"]):], "train_seqs": len(new)})
            hist["shards"] = shard_names
            log(f"added shards {shard_names[len(ck['shards']):]}: {len(new)} train seqs")
    else:
        if a.init:
            ick = torch.load(a.init, map_location="cpu", weights_only=False)
            for key in ("layers", "direct"):
                if ick["args"].get(key, getattr(a, key)) != getattr(a, key):
                    sys.exit(f"--init {a.init}: {key} = {ick['args'][key]}, this run {getattr(a, key)}")
            head.load_state_dict(ick["head"])
            log(f"warm start from {a.init} (its step {ick['step']}, {ick['tokens_seen']} tokens seen)")
        order = list(data.train)
        rng.shuffle(order)
        total = a.steps or max(1, int(math.ceil(a.epochs * ntr / a.batch_tokens)))
        step, cur, tokens_seen, wall, train_s = 0, 0, 0, 0.0, 0.0
        hist = {"args": vars(a), "init": a.init, "shards": shard_names, "train_tokens": ntr, "heldout_tokens": nho,
                "n_params": sum(p.numel() for p in head.parameters()), "steps": [], "evals": []}
        ev = evaluate(head, E, data, data.held, K, a.max_len, a.direct, limit_tokens=a.eval_tokens)
        hist["evals"].append({"step": 0, "tokens_seen": 0, **{str(k): v for k, v in ev.items()}})
        log("eval step 0:", fmt_eval(ev, K))

    def save():
        nonlocal wall
        w = wall + (time.time() - t_start)
        ckd = {"head": head.state_dict(), "opt": opt.state_dict(), "step": step, "total_steps": total,
               "order": order, "cursor": cur, "log": hist, "tokens_seen": tokens_seen, "wall_s": w,
               "rng": rng.getstate(), "torch_rng": torch.get_rng_state(), "args": vars(a),
               "shards": shard_names, "hp": hp, "arch": arch, "train_s": train_s}
        os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
        torch.save(ckd, a.out + ".tmp")
        os.replace(a.out + ".tmp", a.out)
        hist["wall_s"] = w
        hist["tokens_seen"] = tokens_seen
        hist["step"] = step
        hist["total_steps"] = total
        hist["train_s"] = train_s
        with open(logp, "w") as f:
            json.dump(hist, f, indent=1)
        log(f"saved {a.out} (step {step}/{total}, {tokens_seen} tokens, {w:.0f} s training wall)")

    def lr_at(s):
        if s < a.warmup:
            return a.lr * (s + 1) / a.warmup
        if a.budget_minutes:  # cosine over the training-time budget (evals excluded)
            p = train_s / (a.budget_minutes * 60)
        else:
            p = (s - a.warmup) / max(1, total - a.warmup)
        return a.lr * (a.min_lr_frac + (1 - a.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(p, 1.0))))

    def finished():
        return train_s >= a.budget_minutes * 60 if a.budget_minutes else step >= total

    while not finished():
        if a.max_minutes and time.time() - t_start > a.max_minutes * 60:
            save()
            log(f"CHUNK_DONE step {step}/{total}")
            return
        t0, c0 = time.time(), time.process_time()
        items, ntok = [], 0
        while ntok < a.batch_tokens:
            if cur >= len(order):
                rng.shuffle(order)
                cur = 0
            it = data.get(order[cur], a.max_len)
            cur += 1
            items.append(it)
            ntok += it[0].shape[0]
        batch = pack(items)
        for gr in opt.param_groups:
            gr["lr"] = lr_at(step)
        loss, per_k = train_loss(head, E, Ed, batch, K, stride, rng.randrange(stride), a.chunk, a.direct)
        opt.zero_grad(set_to_none=True)
        gn = 0.0
        if loss is not None:
            loss.backward()
            gn = float(torch.nn.utils.clip_grad_norm_(head.parameters(), a.clip))
            opt.step()
        step += 1
        tokens_seen += ntok
        dt = time.time() - t0
        # budget time: wall time, but never more than the CPU time per thread, so a step that was
        # paused (SIGSTOP) or starved by other processes does not eat the schedule
        train_s += min(dt, (time.process_time() - c0) / a.threads)
        hist["steps"].append({"step": step, "loss": None if loss is None else float(loss.detach()),
                              "kl_k": per_k, "lr": lr_at(step - 1), "grad_norm": gn, "tokens": ntok,
                              "s": round(dt, 3)})
        if step % 10 == 0 or step == 1:
            log(f"step {step} ({train_s:.0f} s) loss {float(loss.detach()) if loss is not None else float('nan'):.4f} "
                f"kl_k {[round(v, 4) if v is not None else None for v in per_k]} lr {lr_at(step - 1):.2e} "
                f"gn {gn:.2f} {ntok} tok {dt:.2f} s")
        full = finished()
        if step % a.eval_every == 0 or full:
            idx = data.held
            if full:  # spread the final evaluation over all shards' held-out sequences
                tok_per = max(1, nho // max(1, len(data.held)))
                idx = data.held[::max(1, len(data.held) * tok_per // a.final_eval_tokens)]
            ev = evaluate(head, E, data, idx, K, a.max_len, a.direct,
                          limit_tokens=a.final_eval_tokens if full else a.eval_tokens)
            hist["evals"].append({"step": step, "tokens_seen": tokens_seen, "final": full,
                                  **{str(k): v for k, v in ev.items()}})
            log(f"eval step {step}{' (final)' if full else ''} ({ev['tokens']} tokens):", fmt_eval(ev, K))
    save()
    log(f"TRAINING_DONE step {step}/{total}")


if __name__ == "__main__":
    main()
