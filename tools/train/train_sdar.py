#!/usr/bin/env python3
"""SDAR-style block-diffusion training of a gated adapter for a GGUF llama model, on CPU: the model
specd's `sdar` policy runs with `adapter=DIR,block=B` (policy/dlm/sdar.c).

Same data, block sampling and memory pass as train_wedlm.py (this script reuses its main loop,
options, checkpointing and --init/--resume/--max-minutes; only the layout, the loss and the
evaluation differ, swapped in below). Per sequence x_0 = prompt + the base model's continuation;
the response is cut into blocks of B tokens (random phase < B); block k gets gamma_k ~ U(0, 1]
and masks each position with probability gamma_k (at least one).

Layout of block k starting at l0 (what policy/dlm/sdar.c lays out on a denoise step):
  memory   x_0[0..l0-1] at 0..l0-1: one strict causal pass over the clean sequence, BASE weights
           (the committed KV in specd is always base-causal: the prompt prefilled by the session,
           each finished block refreshed through base causal rows). The pending token l0-1 is
           memory, as the policy's pending row (base, causal) is.
  block    the B rows at l0..l0+B-1, all with the LoRA ON: a masked position enters as the trained
           mask embedding, an unmasked one as its token's embedding; every row sees the memory
           before l0 and EVERY row of its own block (bidirectional within the block), nothing of
           other blocks.
Unshifted: the block row at position j is trained on x_0[j].

Loss: sum_k (1/gamma_k) sum_{j masked in k} -log P(x_0[j] | ...), over the number of block
positions (the masked-diffusion ELBO weighting; its expectation is the mean per-token
cross-entropy). Unmasked block rows carry no loss but are gated, as in the policy.

Held-out evaluation (fixed masks from --seed): top-1 agreement of each masked row with the data
token, by slot d = j - l0 within the block (the policy fills slot 0 from the exact pending row, so
d >= 1 is what the adapter decides), the same against the base model's greedy token there (argmax
of the clean row before it: what lossless mode verifies against), and the losses.

Export: export_adapter.py --ckpt OUT.pt --out DIR writes "specd_objective": "sdar" and
"specd_block"."""
import os, random, sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_wedlm as W  # noqa: E402


def build(blocks, T):
    """Block rows of all blocks and their attention mask [R, T+R] over memory then block rows.
    Returns pos [R], blk [R], masked [R] bool, gamma [R], slot [R], mask."""
    pos, blk, msk, gam, slot, starts = [], [], [], [], [], []
    for b, (l0, gamma, rows) in enumerate(blocks):
        starts.append(l0)
        for p, m in rows:
            pos.append(p); blk.append(b); msk.append(m); gam.append(gamma); slot.append(p - l0)
    pos = torch.tensor(pos, dtype=torch.long)
    blk = torch.tensor(blk, dtype=torch.long)
    start = torch.tensor(starts, dtype=torch.long)
    mem = torch.arange(T)[None, :] < start[blk][:, None]   # memory before the block
    own = blk[:, None] == blk[None, :]                     # the whole block, both directions
    return (pos, blk, torch.tensor(msk), torch.tensor(gam), torch.tensor(slot),
            torch.cat((mem, own), 1))


def forward_blocks(model, mask_emb, x, blocks):
    """Memory pass (base, causal, no grad) then one gated pass over every block's rows."""
    T = x.shape[0]
    pos, blk, masked, gam, slot, mask = build(blocks, T)
    with torch.no_grad():
        clog, kv = model(model.emb[x], torch.arange(T), torch.ones(T, T, dtype=torch.bool).tril(),
                         gated=False, want_kv=True)
    inp = torch.where(masked[:, None], mask_emb.expand(pos.shape[0], -1), model.emb[x[pos]])
    blog = model(inp, pos, mask, gated=True, past=kv)
    return blog, (pos, masked, gam, slot), clog


def seq_loss(model, mask_emb, x, s, B, phase, rng):
    """train_wedlm.seq_loss's contract: loss, stats, and per masked row its slot, agreement with
    the data, agreement with the base model's greedy token and NLL."""
    T = x.shape[0]
    blocks = W.sample_blocks(T, s, B, phase, rng)
    blog, (pos, masked, gam, slot), clog = forward_blocks(model, mask_emb, x, blocks)
    mpos, mgam, mslot = pos[masked], gam[masked], slot[masked]
    logq = F.log_softmax(blog[masked].float(), -1)
    nll = -logq.gather(1, x[mpos][:, None])[:, 0]           # unshifted: row j predicts x_0[j]
    n_block = pos.shape[0]
    loss = (nll / mgam).sum() / n_block                      # 1/gamma weighted, per block position
    with torch.no_grad():
        l_clean = F.cross_entropy(clog[s - 1:T - 1].float(), x[s:T]).item()
        top = logq.argmax(-1)
        agree = (top == x[mpos]).float()
        agree_base = (top == clog[mpos - 1].argmax(-1)).float()
    return loss, dict(loss=loss.item(), nll=nll.mean().item(), l_clean=l_clean,
                      n_mask=int(mpos.shape[0]), mask_frac=mpos.shape[0] / n_block), \
        mslot, agree, agree_base, nll.detach()


def main():
    # the shared loop with this objective's layout and loss (train_wedlm.evaluate calls seq_loss
    # too, so its "agree_by_dist" bins are this layout's slots within the block)
    W.seq_loss = seq_loss
    save = W.save

    def save_sdar(path, model, mask_emb, a, *rest):
        a.objective = "sdar"  # export_adapter.py writes the SDAR config keys
        save(path, model, mask_emb, a, *rest)

    W.save = save_sdar
    # this objective's defaults, before the caller's options (argparse keeps the last)
    sys.argv[1:1] = ["--out", ".train/sdar.pt", "--block", "4"]
    W.main()


if __name__ == "__main__":
    main()
