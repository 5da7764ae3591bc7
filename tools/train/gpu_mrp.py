"""train_mrp.py's MRP head, loss and held-out metrics on sequences held in (GPU) memory, in a padded
[batch, length] layout instead of train_mrp.py's packed rows with a dense all-pairs mask (which is
quadratic in the batch and so does not scale to GPU batches).

The head (train_mrp.Head, which takes leading batch dims), the exact vocabulary log-sum-exp
(train_mrp.VocabLSE) and the objective are train_mrp.py's:
  loss = sum_k mean over drafting rows t of KL(softmax zA_{t+k} || softmax z_k),
  z_k = E . x_k, x_k = h_t + hp_1 + ... + hp_k, KL = lse(E x_k) - pE_{t+k} . x_k - H_{t+k},
with the teacher entering through pE_j = softmax(E h_j) . E (bf16 product, as train_mrp's cache)
and its entropy H_j. Drafting rows: t >= n_prompt - 1 with x_{t+1} in the sequence; step k counts
where t + k <= n - 1. Subsampling: train_mrp keeps t = r (mod stride) counted from n_prompt - 1 per
sequence; here t = r (mod stride) counts from column 0, so every sequence of a batch has its
drafting rows in the same columns (a dense [batch, columns] block); r is random per batch in both,
so each position is used about once per `stride` batches either way.

heldout_agreement() computes train_mrp.evaluate's metrics (top1, kl, cond, and the no-head
baseline of each) with f32 logits over every drafting row of the given sequences; the CPU test
checks it against train_mrp.evaluate on the same data, and both the CPU test and the GPU run call
it for their before/after figures."""
import math

import torch

from train_mrp import VocabLSE, summarize


def set_tf32(on):
    """TF32 products for f32 matmuls on a GPU on or off; returns the previous setting (False where
    this torch refuses the switch)."""
    try:
        was = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = bool(on)
        return was
    except Exception:  # a torch that only takes its newer precision API: leave its default
        return False


class Corpus:
    """Sequences in flat device tensors: tokens [N] int64, hidden [N, d] f16 (after the target's
    output norm), the teacher statistics pE [N, d] bf16 and H [N] f32 once computed, and per
    sequence its offset, n_tokens, n_prompt, prompt_id (plus what the generator recorded)."""

    def __init__(self, cap, d, device):
        self.device = device
        self.tokens = torch.zeros(cap, dtype=torch.long, device=device)
        self.hidden = torch.zeros(cap, d, dtype=torch.float16, device=device)
        self.n = 0
        self.seqs = []
        self.pE = self.H = None

    @property
    def cap(self):
        return self.tokens.shape[0]

    def room(self):
        return self.cap - self.n

    def add(self, tokens, hidden, seqs):
        """Appends whole sequences (as many as fit); returns how many were taken."""
        took, m = 0, 0
        for s in seqs:
            if self.n + m + s["n_tokens"] > self.cap:
                break
            m += s["n_tokens"]
            took += 1
        self.tokens[self.n:self.n + m] = tokens[:m].long()
        self.hidden[self.n:self.n + m] = hidden[:m]
        off = self.n
        for s in seqs[:took]:
            self.seqs.append(dict(s, offset=off))
            off += s["n_tokens"]
        self.n += m
        return took

    def split(self, holdout_mod):
        """train_mrp's split: sequences with prompt_id % holdout_mod == 0 are held out; only
        sequences with at least two response tokens are used (as train_mrp.Data)."""
        use = [i for i, s in enumerate(self.seqs) if s["n_tokens"] - s["n_prompt"] >= 2]
        train = [i for i in use if self.seqs[i]["prompt_id"] % holdout_mod != 0]
        held = [i for i in use if self.seqs[i]["prompt_id"] % holdout_mod == 0]
        return train, held

    @torch.no_grad()
    def teacher_stats(self, E, rows=4096):
        """pE_j = softmax(E h_j) . E (bf16 product on a GPU, f32 on the CPU) and H_j = entropy, for
        every stored position. The logits are f32 with TF32 products on a GPU (train_mrp's
        cache: exact f32): ~1e-3 relative logit error, which H (a constant of the loss) and pE (an
        average over the vocabulary) take without harm; the metrics use exact f32."""
        n, d = self.n, self.hidden.shape[1]
        self.pE = torch.empty(n, d, dtype=torch.bfloat16, device=self.device)
        self.H = torch.empty(n, dtype=torch.float32, device=self.device)
        Eb = E.bfloat16() if E.is_cuda else E  # a CPU without bf16 units is slow at bf16 products
        tf32 = set_tf32(True)  # 4x the f32 rate; only the loss reads these
        try:
            for a in range(0, n, rows):
                h = self.hidden[a:min(a + rows, n)].float()
                z = h @ E.t()
                m = torch.logsumexp(z, -1)
                p = torch.exp(z - m[:, None])
                self.pE[a:a + rows] = p.to(Eb.dtype) @ Eb
                self.H[a:a + rows] = m - (p * z).sum(-1)
        finally:
            set_tf32(tf32)

    def gather(self, idx, max_len=0):
        """Sequences idx as a padded batch: x [B, L] long, h [B, L, d] f32, pE [B, L, d] f32 and
        H [B, L] (None before teacher_stats), n [B], n_prompt [B]; padding repeats the last row."""
        dev = self.device
        off = torch.tensor([self.seqs[i]["offset"] for i in idx], device=dev)
        n = torch.tensor([self.seqs[i]["n_tokens"] for i in idx], device=dev)
        if max_len:
            n = n.clamp(max=max_len)
        npr = torch.tensor([self.seqs[i]["n_prompt"] for i in idx], device=dev)
        L = int(n.max())
        col = torch.arange(L, device=dev)
        rows = off[:, None] + torch.minimum(col[None, :], n[:, None] - 1)
        x = self.tokens[rows]
        h = self.hidden[rows].float()
        pE = self.pE[rows].float() if self.pE is not None else None
        H = self.H[rows] if self.H is not None else None
        return x, h, pE, H, n, npr

    def batches(self, idx, batch_tokens, rng, max_len=0):
        """One epoch of batches over idx: sequences sorted by length (little padding), cut into
        batches of about batch_tokens padded tokens, in random order."""
        lens = {i: min(self.seqs[i]["n_tokens"], max_len or 1 << 30) for i in idx}
        order = sorted(idx, key=lambda i: (lens[i], rng.random()))
        out, cur = [], []
        for i in order:
            if cur and (len(cur) + 1) * lens[i] > batch_tokens:
                out.append(cur)
                cur = []
            cur.append(i)
        if cur:
            out.append(cur)
        rng.shuffle(out)
        return out


def unrolled_padded(head, E, x, h, K, tcols):
    """The K-step drafting pass on a padded batch for drafting columns tcols [M] (each a committed
    row t, the same columns in every sequence). Committed rows j = 0..L-2 (y = x_{j+1}, g = h_j,
    position j + 1) run as one causal pass; step k >= 2 adds a speculative row per (sequence, t) at
    position t + k with y = x_{t+k} (teacher forcing) and g = h_t + hp_1 + ... + hp_{k-1}, which
    sees the committed rows j' <= t and its own earlier speculative rows (train_mrp.unrolled).
    Rows past a sequence's end compute garbage that no valid row sees (causal) and no metric reads.
    Returns [x_1 .. x_K], each [B, M, d] with z_k = E . x_k."""
    B, L = x.shape
    dev = x.device
    j = torch.arange(L - 1, device=dev)
    u = head.inputs(E[x[:, 1:]], h[:, :-1])
    hp_c, kv_c = head(u, j + 1, None, j[None, :] <= j[:, None])
    ht = h[:, tcols]
    acc = hp_c[:, tcols]
    outs = [ht + acc]
    past = [kv_c]
    vis = j[None, :] <= tcols[:, None]
    eye = torch.eye(tcols.shape[0], dtype=torch.bool, device=dev)
    for k in range(2, K + 1):
        tk = (tcols + k).clamp(max=L - 1)
        u = head.inputs(E[x[:, tk]], ht + acc)
        hpk, kvk = head(u, tcols + k, past, torch.cat([vis] + [eye] * (k - 1), 1))
        past.append(kvk)
        acc = acc + hpk
        outs.append(ht + acc)
    return outs


def drafting_valid(tcols, n, npr, K):
    """[B, M] per k: drafting row t of a sequence counts for step k (t >= n_prompt - 1 and
    t + k <= n - 1)."""
    t = tcols[None, :]
    base = t >= (npr[:, None] - 1)
    return [base & (t + k <= n[:, None] - 1) for k in range(1, K + 1)]


def train_loss_padded(head, E, Ed, batch, K, stride, offset, chunk):
    """train_mrp.train_loss on a padded batch (x, h, pE, H, n, npr): returns (loss, [kl_k])."""
    x, h, pE, H, n, npr = batch
    L = x.shape[1]
    tcols = torch.arange(offset % stride, L - 1, stride, device=x.device)
    if tcols.numel() == 0:
        return None, [None] * K
    valid = drafting_valid(tcols, n, npr, K)
    outs = unrolled_padded(head, E, x, h, K, tcols)
    losses = []
    for k in range(K):
        v = valid[k]
        if not bool(v.any()):
            losses.append(None)
            continue
        xk = outs[k][v]
        tk = (tcols + k + 1).clamp(max=L - 1)
        te_p, te_h = pE[:, tk][v], H[:, tk][v]
        lse = VocabLSE.apply(xk, E, Ed, chunk)
        kl = lse - (te_p * xk).sum(-1) - te_h
        losses.append(kl.mean())
    real = [l for l in losses if l is not None]
    if not real:
        return None, [None] * K
    return sum(real), [None if l is None else float(l.detach()) for l in losses]


@torch.no_grad()
def heldout_agreement(head, E, corpus, idx, K, seqs_per_batch=64, chunk=4096, max_len=0):
    """train_mrp.evaluate's held-out metrics over every drafting row of sequences idx, f32 logits:
    per k (1..K) n, top1 (argmax z_k == the target's argmax at t + k: draft k's acceptance under
    greedy verification on the teacher-forced path), kl (KL(target || head)), cond (acceptance of
    draft k given drafts 1..k-1 were accepted on a greedy path), and base_* for the no-head
    drafter z_k = zA_t. The teacher comes from the stored hidden states: zA_j = E . h_j.
    head = None evaluates only the baseline (reported in the base_* fields). E: the target's token
    embedding [vocab, d] f32 on the corpus' device."""
    agg = {k: {"n": 0, "top1": 0, "kl": 0.0, "base_top1": 0, "base_kl": 0.0,
               "cond_n": 0, "cond": 0, "base_cond_n": 0, "base_cond": 0} for k in range(1, K + 1)}
    seen = 0
    for a in range(0, len(idx), seqs_per_batch):
        x, h, _, _, n, npr = corpus.gather(idx[a:a + seqs_per_batch], max_len)
        B, L = x.shape
        seen += int(n.sum())
        # the teacher at every column: lse, argmax, pE (f32), entropy
        hf = h.reshape(B * L, -1)
        lse_t = torch.empty(B * L, device=x.device)
        arg_t = torch.empty(B * L, dtype=torch.long, device=x.device)
        pE_t = torch.empty_like(hf)
        H_t = torch.empty(B * L, device=x.device)
        for c in range(0, B * L, chunk):
            z = hf[c:c + chunk] @ E.t()
            m = torch.logsumexp(z, -1)
            p = torch.exp(z - m[:, None])
            lse_t[c:c + chunk], arg_t[c:c + chunk] = m, z.argmax(-1)
            pE_t[c:c + chunk] = p @ E
            H_t[c:c + chunk] = m - (p * z).sum(-1)
        lse_t, arg_t = lse_t.view(B, L), arg_t.view(B, L)
        pE_t, H_t = pE_t.view(B, L, -1), H_t.view(B, L)
        tcols = torch.arange(L - 1, device=x.device)
        valid = drafting_valid(tcols, n, npr, K)
        outs = unrolled_padded(head, E, x, h, K, tcols) if head is not None else None
        A_t = arg_t[:, :-1]
        # the decided token x_{t+1} is the greedy one
        chain = (x[:, 1:] == A_t)
        bchain = chain.clone()
        for k in range(1, K + 1):
            v = valid[k - 1]
            tk = (tcols + k).clamp(max=L - 1)
            A_k = arg_t[:, tk]
            bkl = lse_t[:, :-1] - (pE_t[:, tk] * h[:, :-1]).sum(-1) - H_t[:, tk]
            bhit = A_t == A_k
            g = agg[k]
            g["n"] += int(v.sum())
            g["base_top1"] += int((bhit & v).sum())
            g["base_kl"] += float(bkl[v].sum())
            g["base_cond_n"] += int((bchain & v).sum())
            g["base_cond"] += int((bchain & v & bhit).sum())
            nxt = x.gather(1, torch.minimum(tcols[None, :] + k + 1, n[:, None] - 1))
            bchain = bchain & bhit & (A_t == nxt) & v
            if outs is None:
                continue
            xk = outs[k - 1].reshape(B * (L - 1), -1)
            lse = torch.empty(xk.shape[0], device=x.device)
            dk = torch.empty(xk.shape[0], dtype=torch.long, device=x.device)
            for c in range(0, xk.shape[0], chunk):
                z = xk[c:c + chunk] @ E.t()
                lse[c:c + chunk], dk[c:c + chunk] = torch.logsumexp(z, -1), z.argmax(-1)
            lse, dk = lse.view(B, L - 1), dk.view(B, L - 1)
            kl = lse - (pE_t[:, tk] * outs[k - 1]).sum(-1) - H_t[:, tk]
            hit = dk == A_k
            g["top1"] += int((hit & v).sum())
            g["kl"] += float(kl[v].sum())
            g["cond_n"] += int((chain & v).sum())
            g["cond"] += int((chain & v & hit).sum())
            chain = chain & hit & (dk == nxt) & v
    return summarize(agg, seen)


def mean_rms(corpus, idx, limit=20000):
    """Mean RMS of the target hidden over response rows (train_mrp's --out-norm-init auto)."""
    rows = []
    for i in idx:
        s = corpus.seqs[i]
        rows.append(torch.arange(s["offset"] + s["n_prompt"], s["offset"] + s["n_tokens"]))
        if sum(r.numel() for r in rows) >= limit:
            break
    r = torch.cat(rows)[:limit].to(corpus.device)
    h = corpus.hidden[r].float()
    return float(h.pow(2).mean(-1).sqrt().mean())


def token_counts(corpus, holdout_mod, n_vocab):
    """export_mrp.draft_vocab's counts over the corpus: response tokens of the training split,
    all tokens of those sequences, response tokens held out (numpy int64 [n_vocab] each)."""
    dev = corpus.device
    n_tok = torch.tensor([s["n_tokens"] for s in corpus.seqs], device=dev)
    start = torch.tensor([s["offset"] + s["n_prompt"] for s in corpus.seqs], device=dev)
    held_seq = torch.tensor([s["prompt_id"] % holdout_mod == 0 for s in corpus.seqs], device=dev)
    seq_of = torch.repeat_interleave(torch.arange(len(corpus.seqs), device=dev), n_tok)
    tok = corpus.tokens[:corpus.n]
    resp_tok = torch.arange(corpus.n, device=dev) >= start[seq_of]
    held_tok = held_seq[seq_of]

    def count(mask):
        return torch.bincount(tok[mask], minlength=n_vocab).cpu().numpy()

    return count(resp_tok & ~held_tok), count(~held_tok), count(resp_tok & held_tok)
