"""The target (a llama GGUF) in PyTorch for batched self-distillation: many sequences decoded at once
with a preallocated KV cache, every position's final hidden state (after the output norm) kept.

Weights: isd_model.load_gguf (the GGUF dequantized to f32 with the gguf package), cast to `dtype`
on `device`. The layer math is isd_model.Model.forward's (adjacent-pair RoPE as llama.cpp, RMSNorm,
SwiGLU, GQA, tied or separate output head), batched: rows are left-padded so that every sequence's
next token sits in the same cache column; each row has its own RoPE positions and a key mask that
hides its padding.

Sampling: specd's transform (include/specd/sampling.h): z = l / T, top-k, top-p over the top-k
survivors (the shortest prefix whose sum of exp(z - zmax) reaches p * Z), min-p (keep
exp(z - zmax) >= m), then a draw from the kept tokens; T = 0 is argmax. The same distribution as
specd's CLI sampling, not the same bits: specd draws with keyed Philox Gumbel noise per position,
this draws with torch.multinomial from one generator per batch, and the logits come from this
forward (f16 on a GPU by default) instead of specd's kernels."""
import math
import time

import torch
import torch.nn.functional as F

import isd_model

PROJ = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")


class Target:
    def __init__(self, path, device, dtype, log=print):
        t0 = time.time()
        c, w = isd_model.load_gguf(path)
        self.c, self.device, self.dtype = c, device, dtype
        self.rep = c.n_head // c.n_kv
        cast = lambda t: t.to(device=device, dtype=dtype).contiguous()
        self.emb = cast(w["token_embd.weight"])
        self.out = cast(w["output.weight"]) if "output.weight" in w else self.emb
        self.norm = w["output_norm.weight"].to(device)
        self.layers = []
        for l in range(c.n_layer):
            L = {p: cast(w[f"blk.{l}.{p}.weight"]) for p in PROJ}
            L["attn_norm"] = w[f"blk.{l}.attn_norm.weight"].to(device)
            L["ffn_norm"] = w[f"blk.{l}.ffn_norm.weight"].to(device)
            self.layers.append(L)
        i = torch.arange(0, c.head_dim, 2, dtype=torch.float64)
        self.inv_freq = (1.0 / (c.rope_base ** (i / c.head_dim))).float().to(device)
        self.n_params = sum(t.numel() for t in w.values())
        log(f"target {path}: {c.n_layer} layers, d {c.n_embd}, vocab {c.n_vocab}, "
            f"{self.n_params / 1e6:.1f}M parameters -> {dtype} on {device} in {time.time() - t0:.1f} s")

    def rms(self, x, g):
        """RMSNorm in f32 (x of any dtype), weight g f32; returns f32."""
        x = x.float()
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * g

    def rope(self, x, pos):
        """x [B, T, H, D], pos [B, T]: adjacent pairs rotate by pos * inv_freq (isd_model.rope)."""
        ang = pos.float()[..., None] * self.inv_freq
        cos, sin = ang.cos()[:, :, None, :], ang.sin()[:, :, None, :]
        x0, x1 = x[..., 0::2].float(), x[..., 1::2].float()
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2).to(x.dtype)

    def new_cache(self, B, S):
        c = self.c
        shape = (B, c.n_kv, S, c.head_dim)
        return [(torch.empty(shape, device=self.device, dtype=self.dtype),
                 torch.empty(shape, device=self.device, dtype=self.dtype)) for _ in range(c.n_layer)]

    @torch.no_grad()
    def step(self, tok, pos, cache, col, keymask):
        """Runs T new columns for B rows. tok, pos [B, T] (padding columns: any token, any
        position); the new K/V go to cache columns col..col+T-1; keymask [B, T, col+T] bool: which
        cache columns each new row may attend to (causal, no padding). Returns the hidden after the
        output norm [B, T, d] f32."""
        c = self.c
        B, T = tok.shape
        end = col + T
        x = self.emb[tok].float()  # the residual stream in f32 (as llama.cpp), products in dtype
        mask = keymask[:, None, None].expand(B, 1, self.rep, T, end).reshape(B, 1, self.rep * T, end)
        for l, L in enumerate(self.layers):
            a = self.rms(x, L["attn_norm"]).to(self.dtype)
            q = self.rope((a @ L["attn_q"].t()).view(B, T, c.n_head, c.head_dim), pos)
            k = self.rope((a @ L["attn_k"].t()).view(B, T, c.n_kv, c.head_dim), pos)
            v = (a @ L["attn_v"].t()).view(B, T, c.n_kv, c.head_dim)
            K, V = cache[l]
            K[:, :, col:end] = k.transpose(1, 2)
            V[:, :, col:end] = v.transpose(1, 2)
            # GQA without copying K/V: the rep query heads of one KV head are extra query rows
            qg = q.view(B, T, c.n_kv, self.rep, c.head_dim).permute(0, 2, 3, 1, 4)
            qg = qg.reshape(B, c.n_kv, self.rep * T, c.head_dim)
            o = F.scaled_dot_product_attention(qg, K[:, :, :end], V[:, :, :end], attn_mask=mask)
            # reshape, not view: fused attention kernels may return a transposed (strided) output
            o = o.reshape(B, c.n_kv, self.rep, T, c.head_dim).permute(0, 3, 1, 2, 4).reshape(B, T, c.n_embd)
            x = x + o @ L["attn_output"].t()
            f = self.rms(x, L["ffn_norm"]).to(self.dtype)
            x = x + (F.silu(f @ L["ffn_gate"].t()) * (f @ L["ffn_up"].t())) @ L["ffn_down"].t()
        return self.rms(x, self.norm)

    def logits(self, h):
        """h [B, d] f32 -> [B, vocab] f32 through the output head (in the weights' dtype)."""
        return (h.to(self.dtype) @ self.out.t()).float()


def sample(logits, temp, top_k, top_p, min_p, gen):
    """specd's sampling transform on rows [B, V] f32 with per-row temperature temp [B] (0 = greedy);
    returns [B] token ids."""
    greedy = logits.argmax(-1)
    z = logits / temp.clamp(min=1e-6)[:, None]
    k = min(top_k, z.shape[-1]) if top_k > 0 else z.shape[-1]
    vals, idx = torch.topk(z, k, dim=-1)  # descending; ties: the order is not specd's index rule
    e = torch.exp(vals - vals[:, :1])
    keep = torch.ones_like(e, dtype=torch.bool)
    if top_p < 1.0:
        cum = torch.cumsum(e, -1)
        keep &= (cum - e) < top_p * e.sum(-1, keepdim=True)
    if min_p > 0:
        keep &= e >= min_p
    p = torch.where(keep, e, torch.zeros_like(e))
    pick = torch.multinomial(p, 1, generator=gen).squeeze(1)
    drawn = idx.gather(1, pick[:, None]).squeeze(1)
    return torch.where(temp > 0, drawn, greedy)


def plan_jobs(n_prompts, start, count, greedy_every, temp):
    """specd-gen-data's jobs: job g is prompt g % P, repetition g // P; repetition 0 of every
    greedy_every-th prompt is greedy. Returns [(job, prompt_id, temp)]."""
    out = []
    for g in range(start, start + count):
        p, rep = g % n_prompts, g // n_prompts
        t = 0.0 if (rep == 0 and greedy_every > 0 and p % greedy_every == 0) else temp
        out.append((g, p, t))
    return out


@torch.no_grad()
def generate_batch(tgt, prompts, jobs, max_new, eog, sp, gen):
    """One batch of jobs [(job, prompt_id, temp)] decoded together to the end of the longest.
    Returns (tokens [N] int32, hidden [N, d] f16, per-sequence dicts with n_tokens, n_prompt,
    prompt_id, job, temp, stop) for the N stored tokens in sequence order: each sequence's prompt,
    its sampled tokens, the last one (an end-of-generation token or the max_new-th) included with
    its hidden row, as specd-gen-data stores them."""
    dev = tgt.device
    B = len(jobs)
    plen = torch.tensor([len(prompts[p]) for _, p, _ in jobs], device=dev)
    Lp = int(plen.max())
    S = Lp + max_new
    pad = Lp - plen                                   # left padding per row
    toks = torch.zeros(B, S, dtype=torch.long)
    for b, (_, p, _) in enumerate(jobs):
        toks[b, Lp - len(prompts[p]):Lp] = torch.tensor(prompts[p])
    toks = toks.to(dev)
    hid = torch.empty(B, S, tgt.c.n_embd, dtype=torch.float16, device=dev)
    cols = torch.arange(S, device=dev)
    pos_all = (cols[None, :] - pad[:, None]).clamp(min=0)
    real = cols[None, :] >= pad[:, None]               # [B, S] not padding
    cache = tgt.new_cache(B, S)
    # prefill: causal over real columns; a padding row sees only itself (no empty softmax)
    i = torch.arange(Lp, device=dev)
    causal = i[None, :] <= i[:, None]
    km = (causal[None] & real[:, None, :Lp]) | torch.eye(Lp, dtype=torch.bool, device=dev)[None]
    h = tgt.step(toks[:, :Lp], pos_all[:, :Lp], cache, 0, km)
    hid[:, :Lp] = h.half()
    temp = torch.tensor([t for _, _, t in jobs], device=dev, dtype=torch.float32)
    eog_t = torch.tensor(sorted(eog), device=dev)
    nxt = sample(tgt.logits(h[:, -1]), temp, sp["top_k"], sp["top_p"], sp["min_p"], gen)
    n_new = torch.zeros(B, dtype=torch.long, device=dev)
    done = torch.zeros(B, dtype=torch.bool, device=dev)
    is_eog = torch.zeros(B, dtype=torch.bool, device=dev)
    col = Lp
    while True:
        live = ~done
        toks[:, col] = torch.where(live, nxt, toks[:, col])
        n_new += live.long()
        km = real[:, None, :col + 1]
        h = tgt.step(toks[:, col:col + 1], pos_all[:, col:col + 1], cache, col, km)
        hid[:, col] = h[:, 0].half()
        ended = live & torch.isin(nxt, eog_t)
        is_eog |= ended
        done |= ended | (n_new >= max_new)
        col += 1
        # done.all() waits for the device: asked every 8th step, so the host queues steps ahead
        if col >= S or ((col - Lp) % 8 == 0 and bool(done.all())):
            break
        nxt = sample(tgt.logits(h[:, 0]), temp, sp["top_k"], sp["top_p"], sp["min_p"], gen)
    keep = real & (cols[None, :] < (Lp + n_new)[:, None])
    tokens = toks[keep].to(torch.int32)
    hidden = hid[keep]
    n_tok = (plen + n_new).tolist()
    seqs = [{"job": g, "prompt_id": p, "temp": t, "n_prompt": int(plen[b]), "n_tokens": int(n_tok[b]),
             "stop": "eog" if bool(is_eog[b]) else "max"} for b, (g, p, t) in enumerate(jobs)]
    return tokens, hidden, seqs


def reference_hidden(path, ids):
    """isd_model.Model's forward (f32, CPU) on one sequence: the final hidden after the output
    norm [T, d] (the logits' input), to check the batched forward against."""
    m = isd_model.Model(path, rank=1, targets=())
    T = len(ids)
    x = torch.tensor(ids)
    pos = torch.arange(T)
    mask = pos[None, :] <= pos[:, None]
    # the forward returns logits; the hidden is recovered by running it with an identity head
    m.out = torch.eye(m.c.n_embd)
    with torch.no_grad():
        return m.forward(m.emb[x], pos, mask, gated=False)
