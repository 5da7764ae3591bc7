"""A small llama forward in PyTorch for ISD training: GGUF weights, gated LoRA, explicit masks.

Weights come straight from the GGUF file specd runs (dequantized with the `gguf` package), so the
model trained here is the model served. GGUF keeps Q/K rows in llama.cpp's order (each head's
halves interleaved for adjacent-pair RoPE), so this forward uses adjacent-pair RoPE as llama.cpp
does; LoRA B rows of q_proj/k_proj are therefore in GGUF order and `export` converts them back to
the HF order PEFT files use (specd's loader applies the same permutation when it loads them).

Gating: a forward call runs either the base weights (gate 0: clean rows) or base + LoRA (gate 1:
[MASK] rows), which is the paper's per-token gate W x + 1[j in M] B A x (Appendix G) for the two
row kinds kept in separate passes."""
import math

import numpy as np
import torch
import torch.nn.functional as F

PROJ = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GGUF_NAME = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v", "o_proj": "attn_output",
             "gate_proj": "ffn_gate", "up_proj": "ffn_up", "down_proj": "ffn_down"}


class Cfg:
    pass


def load_gguf(path):
    import gguf
    r = gguf.GGUFReader(path)

    def kv(name):
        f = r.fields[name]
        v = f.parts[f.data[0]]
        return v.tolist()[0] if v.size == 1 else bytes(v).decode()

    arch = kv("general.architecture")
    c = Cfg()
    c.n_layer = kv(f"{arch}.block_count")
    c.n_embd = kv(f"{arch}.embedding_length")
    c.n_ff = kv(f"{arch}.feed_forward_length")
    c.n_head = kv(f"{arch}.attention.head_count")
    c.n_kv = kv(f"{arch}.attention.head_count_kv")
    c.eps = kv(f"{arch}.attention.layer_norm_rms_epsilon")
    c.rope_base = kv(f"{arch}.rope.freq_base")
    c.head_dim = c.n_embd // c.n_head
    w = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type)
        shape = [int(x) for x in reversed(t.shape.tolist())]  # GGUF ne is innermost-first
        w[t.name] = torch.from_numpy(np.array(a, dtype=np.float32).reshape(shape))
    c.n_vocab = w["token_embd.weight"].shape[0]
    return c, w


class LoRA(torch.nn.Module):
    def __init__(self, n_in, n_out, r):
        super().__init__()
        self.A = torch.nn.Parameter(torch.empty(r, n_in))
        self.B = torch.nn.Parameter(torch.zeros(n_out, r))
        torch.nn.init.kaiming_uniform_(self.A, a=math.sqrt(5))  # PEFT's default init


class Model(torch.nn.Module):
    def __init__(self, path, rank=16, alpha=32, targets=PROJ):
        super().__init__()
        c, w = load_gguf(path)
        self.c = c
        self.rank, self.alpha, self.targets = rank, alpha, list(targets)
        self.scale = alpha / rank
        self.emb = w["token_embd.weight"]
        self.out = w.get("output.weight", self.emb)
        self.norm = w["output_norm.weight"]
        self.layers = []
        self.lora = torch.nn.ModuleList()
        for l in range(c.n_layer):
            L = {"attn_norm": w[f"blk.{l}.attn_norm.weight"], "ffn_norm": w[f"blk.{l}.ffn_norm.weight"]}
            d = torch.nn.ModuleDict()
            for p in PROJ:
                L[p] = w[f"blk.{l}.{GGUF_NAME[p]}.weight"]  # [out, in]
                if p in self.targets:
                    d[p] = LoRA(L[p].shape[1], L[p].shape[0], rank)
            self.layers.append(L)
            self.lora.append(d)
        i = torch.arange(0, c.head_dim, 2, dtype=torch.float64)
        self.inv_freq = (1.0 / (c.rope_base ** (i / c.head_dim))).float()

    def rms(self, x, g):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.c.eps) * g

    def rope(self, x, pos):
        # x [T, H, D]; adjacent pairs (2i, 2i+1) rotate by pos * inv_freq[i] (llama.cpp NORM mode)
        ang = pos.float()[:, None] * self.inv_freq[None, :]
        cos, sin = ang.cos()[:, None, :], ang.sin()[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1).flatten(-2)

    def lin(self, l, p, x, gated):
        y = x @ self.layers[l][p].t()
        if gated and p in self.lora[l]:
            m = self.lora[l][p]
            y = y + self.scale * ((x @ m.A.t()) @ m.B.t())
        return y

    def forward(self, x_emb, pos, mask, gated, past=None, want_kv=False):
        """x_emb [T, n_embd]; pos [T]; mask [T, P+T] bool (True = may attend) over past then new
        keys; past: list per layer of (k, v) [P, n_kv, D] or None. Returns logits [T, vocab] and,
        with want_kv, this pass's per-layer (k, v)."""
        c = self.c
        h = x_emb
        T = h.shape[0]
        kvs = []
        bias = torch.zeros(mask.shape, dtype=h.dtype).masked_fill(~mask, float("-inf"))
        rep = c.n_head // c.n_kv
        for l in range(c.n_layer):
            L = self.layers[l]
            a = self.rms(h, L["attn_norm"])
            q = self.rope(self.lin(l, "q_proj", a, gated).view(T, c.n_head, c.head_dim), pos)
            k = self.rope(self.lin(l, "k_proj", a, gated).view(T, c.n_kv, c.head_dim), pos)
            v = self.lin(l, "v_proj", a, gated).view(T, c.n_kv, c.head_dim)
            if want_kv:
                kvs.append((k.detach(), v.detach()))
            if past is not None:
                k = torch.cat((past[l][0], k), 0)
                v = torch.cat((past[l][1], v), 0)
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            o = F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1),
                                               v.transpose(0, 1), attn_mask=bias)
            h = h + self.lin(l, "o_proj", o.transpose(0, 1).reshape(T, c.n_embd), gated)
            f = self.rms(h, L["ffn_norm"])
            g = F.silu(self.lin(l, "gate_proj", f, gated)) * self.lin(l, "up_proj", f, gated)
            h = h + self.lin(l, "down_proj", g, gated)
        logits = self.rms(h, self.norm) @ self.out.t()
        return (logits, kvs) if want_kv else logits


def hf_rows(b, head_dim):
    """LoRA B rows from GGUF (llama.cpp) order back to HF order: HF row h*hd + j*hd/2 + i is GGUF
    row h*hd + 2i + j (the inverse of the permutation specd's LoRA loader applies)."""
    out = torch.empty_like(b)
    n = b.shape[0]
    for row in range(n):
        h, w = divmod(row, head_dim)
        src = h * head_dim + (w % 2) * (head_dim // 2) + w // 2  # HF index of GGUF row `row`
        out[src] = b[row]
    return out


def gguf_rows(b, head_dim):
    """The inverse of hf_rows: HF-order rows (a PEFT file's q_proj/k_proj lora_B) to GGUF order,
    the permutation specd's LoRA loader applies (GGUF row h*hd + 2i + j <- HF row h*hd + j*hd/2 + i)."""
    out = torch.empty_like(b)
    for row in range(b.shape[0]):
        h, w = divmod(row, head_dim)
        out[row] = b[h * head_dim + (w % 2) * (head_dim // 2) + w // 2]
    return out
