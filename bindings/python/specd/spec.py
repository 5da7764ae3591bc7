"""Host API v2 (specd/spec.h, specd/spec_batch.h): a host engine lays out each step, runs its
target over the step's tokens, and hands the scored rows' logits back for verification."""
import ctypes
from ctypes import c_int32, c_int64, c_void_p
from dataclasses import dataclass, field
from typing import List, Optional

import numpy as np

from . import _lib
from .errors import SpecdError, check, status_name
from .logits import as_specd_logits
from .runtime import _Handle, _i32, parse_device

RULES = {"coupled": 0, "greedy": 1, "rejection": 2, "rs": 2}  # specd_accept_rule
STREAM_KEY_SLOT = 2**64 - 1


def _array(ptr, n, dtype=np.int32):
    if n <= 0 or not ptr:
        return np.zeros(0, dtype=dtype)
    return np.ctypeslib.as_array(ptr, shape=(n,)).astype(dtype, copy=True)


@dataclass
class StepPlan:
    """One sequence's step in a batch (copied out of specd: valid after the next call)."""
    seq: int
    tokens: np.ndarray        # ids the target runs
    pos: np.ndarray           # their position ids
    rows: np.ndarray          # indices into tokens whose logits specd needs back
    token_offset: int         # first token in the packed batch
    row_offset: int           # first row in the logits block
    visible: Optional[np.ndarray]  # None = causal; else (n_tokens, n_cached + n_tokens) uint8
    lora_path: Optional[str]
    # float-vector input rows (specd_step_layout.input_embd): None, or (n_tokens, n_embd) float32
    # fed in place of the token embeddings of the rows input_embd_rows flags (None: every row),
    # e.g. R-ISD's trained mask embedding on its mask rows
    input_embd: Optional[np.ndarray] = None
    input_embd_rows: Optional[np.ndarray] = None


@dataclass
class Batch:
    seqs: List[StepPlan]
    n_tokens: int
    n_rows: int
    needs_lora: bool
    needs_hidden: bool
    needs_embd: bool = False  # some step has input_embd: the host must feed it, or not run it


@dataclass
class Outcome:
    """What one verified step decided. status is specd's status name ("SPECD_OK" when it was
    verified); emitted/keep are empty otherwise."""
    seq: int
    status: str = "SPECD_OK"
    emitted: List[int] = field(default_factory=list)
    keep: List[int] = field(default_factory=list)   # step rows whose KV entries to commit
    n_drafted: int = 0
    n_accepted: int = 0
    lossy: bool = False

    @classmethod
    def from_c(cls, seq, o, status=0):
        if status != 0:
            return cls(seq=seq, status=status_name(status))
        return cls(seq=seq, emitted=_array(o.emitted, o.n_emitted).tolist(),
                   keep=_array(o.keep, o.n_keep).tolist(), n_drafted=o.n_drafted,
                   n_accepted=o.n_accepted, lossy=bool(o.lossy))


class Spec(_Handle):
    """A speculative-decoding session over up to max_seqs sequences (specd_spec)."""
    _destroy = "specd_spec_destroy"

    def __init__(self, n_vocab, max_draft=8, max_seqs=64, target=None, target_path=None,
                 verifier_endpoint=None, verifier_timeout_ms=1000, verifier_tokenizer_hash=0,
                 max_step_rows=0, n_embd=0, device=None):
        """device: where the contexts the sequences' policies make for themselves live (a draft
        model's, a head's): "cpu", "cuda" or "cuda:N"; None = SPECD_DEVICE's choice. Give the
        target's Context the same."""
        lib, err, h = _lib.load(), _lib.Error(), c_void_p()
        p = lib.specd_spec_default_params()
        if device is not None:
            p.device, p.device_index = parse_device(device)
        p.n_vocab, p.max_draft, p.max_seqs = n_vocab, max_draft, max_seqs
        self._keep = [s.encode() if s else None for s in (target_path, verifier_endpoint)]
        p.target = target.handle if target is not None else None
        p.target_path, p.verifier_endpoint = self._keep
        p.verifier_timeout_ms = verifier_timeout_ms
        p.verifier_tokenizer_hash = verifier_tokenizer_hash
        p.max_step_rows, p.n_embd = max_step_rows, n_embd
        check(lib.specd_spec_create(ctypes.byref(p), ctypes.byref(h), ctypes.byref(err)), err)
        super().__init__(h)
        self.n_vocab = n_vocab
        self.n_embd = n_embd or (target.info["n_embd"] if target is not None else 0)
        self.target = target  # must outlive the spec

    @property
    def max_draft(self):
        return _lib.load().specd_spec_max_draft(self.handle)

    @property
    def max_step_rows(self):
        return _lib.load().specd_spec_max_step_rows(self.handle)

    def open(self, seq, prompt, policy="none", policy_options=None, temperature=0.0, top_k=0,
             top_p=1.0, min_p=0.0, seed=0, stream_key=STREAM_KEY_SLOT, rule="coupled", tau=0.0,
             adaptive=True, max_tokens=256, stop_tokens=()):
        """Opens sequence seq with its prompt ids. After open, the host's KV cache for seq must
        hold the prompt minus its last token."""
        lib, err = _lib.load(), _lib.Error()
        p = lib.specd_seq_default_params()
        pol = policy.encode()
        opts = policy_options.encode() if policy_options else None
        p.policy, p.policy_options = pol, opts
        p.sampling.temperature, p.sampling.top_k = temperature, top_k
        p.sampling.top_p, p.sampling.min_p = top_p, min_p
        p.seed, p.stream_key = seed, stream_key
        p.rule = RULES[rule] if isinstance(rule, str) else int(rule)
        p.tau, p.adaptive, p.max_tokens = tau, int(bool(adaptive)), max_tokens
        stops = _i32(list(stop_tokens))
        p.stop_tokens = stops.ctypes.data_as(ctypes.POINTER(c_int32)) if stops.size else None
        p.n_stop_tokens = stops.size
        ids = _i32(prompt)
        check(lib.specd_spec_seq_open(self.handle, seq, ids.ctypes.data_as(ctypes.POINTER(c_int32)),
                                      ids.size, ctypes.byref(p), ctypes.byref(err)), err)

    def close_seq(self, seq):
        _lib.load().specd_spec_seq_close(self.handle, seq)

    def done(self, seq):
        return bool(_lib.load().specd_spec_seq_done(self.handle, seq))

    def output(self, seq):
        n = c_int64(0)
        ptr = _lib.load().specd_spec_seq_output(self.handle, seq, ctypes.byref(n))
        return _array(ptr, n.value).tolist()

    def stats(self, seq):
        s, err = _lib.SeqStats(), _lib.Error()
        check(_lib.load().specd_spec_seq_stats(self.handle, seq, ctypes.byref(s),
                                               ctypes.byref(err)), err)
        out = {name: getattr(s, name) for name, _ in s._fields_
               if name not in ("accepted_at", "drafted_at")}
        n = max((i + 1 for i in range(_lib.MAX_DRAFT) if s.drafted_at[i]), default=0)
        out["accepted_at"] = list(s.accepted_at[:n])
        out["drafted_at"] = list(s.drafted_at[:n])
        return out

    def layout(self, seqs, n_cached=None):
        """Lays out the next step of every listed sequence (specd_spec_batch_layout). n_cached:
        {seq: rows in the host's KV cache}, needed only to copy out explicit visibility rows."""
        lib, err, b = _lib.load(), _lib.Error(), _lib.Batch()
        ids = _i32(list(seqs))
        check(lib.specd_spec_batch_layout(self.handle, ids.ctypes.data_as(ctypes.POINTER(c_int32)),
                                          ids.size, ctypes.byref(b), ctypes.byref(err)), err)
        plans = []
        for i in range(b.n_seqs):
            s = b.seqs[i]
            lay = s.layout
            visible = None
            if lay.visible:
                if not n_cached or s.seq not in n_cached:
                    raise ValueError(f"sequence {s.seq}'s step has explicit visibility rows: "
                                     "pass n_cached={seq: kv rows} to copy them out")
                width = n_cached[s.seq] + lay.n_tokens
                visible = _array(lay.visible, lay.n_tokens * width, np.uint8).reshape(
                    lay.n_tokens, width)
            embd = rows = None
            if lay.input_embd:
                if not self.n_embd:
                    raise ValueError(f"sequence {s.seq}'s step feeds float-vector input rows "
                                     "(input_embd): create the Spec with n_embd= (or target=) "
                                     "to copy them out")
                embd = _array(lay.input_embd, lay.n_tokens * self.n_embd, np.float32).reshape(
                    lay.n_tokens, self.n_embd)
                if lay.input_embd_rows:
                    rows = _array(lay.input_embd_rows, lay.n_tokens, np.uint8)
            plans.append(StepPlan(seq=s.seq, tokens=_array(lay.tokens, lay.n_tokens),
                                  pos=_array(lay.pos, lay.n_tokens),
                                  rows=_array(lay.rows, lay.n_rows),
                                  token_offset=s.token_offset, row_offset=s.row_offset,
                                  visible=visible,
                                  lora_path=lay.lora_path.decode() if lay.lora_path else None,
                                  input_embd=embd, input_embd_rows=rows))
        return Batch(seqs=plans, n_tokens=b.n_tokens, n_rows=b.n_rows,
                     needs_lora=bool(b.needs_lora), needs_hidden=bool(b.needs_hidden),
                     needs_embd=bool(b.needs_embd))

    def verify(self, logits):
        """Verifies the batch laid out last from its logits block (numpy or torch, rows of the
        padded vocabulary; see specd.logits). Returns one Outcome per sequence; raises
        SpecdError when any sequence failed (the error's `outcomes` lists them all: failed
        sequences stay laid out, so the host may call again with corrected rows)."""
        lib, err, res = _lib.load(), _lib.Error(), _lib.BatchResult()
        block, owner = as_specd_logits(logits, self.n_vocab)
        st = lib.specd_spec_batch_verify(self.handle, ctypes.byref(block), ctypes.byref(res),
                                         ctypes.byref(err))
        del owner
        outcomes = [Outcome.from_c(res.seq[i], res.outcome[i], res.status[i])
                    for i in range(res.n_seqs)]
        if st != 0:
            e = SpecdError(st, status_name(st), err.message.decode("utf-8", "replace"))
            e.outcomes = outcomes
            raise e
        return outcomes

    def verify_seq(self, seq, logits):
        """Verifies one laid-out sequence from a block whose row 0 is its first scored row."""
        lib, err, o = _lib.load(), _lib.Error(), _lib.StepOutcome()
        block, owner = as_specd_logits(logits, self.n_vocab)
        check(lib.specd_spec_seq_verify_logits(self.handle, seq, ctypes.byref(block),
                                               ctypes.byref(o), ctypes.byref(err)), err)
        del owner
        return Outcome.from_c(seq, o)

    def run(self, seq, ctx, kv_seq=0, on_tokens=None):
        """Runs open sequence seq to completion on specd's own runtime (specd_spec_run): ctx's
        KV slot kv_seq is cleared and prefilled. on_tokens(list_of_ids) sees each step's
        emitted tokens. Returns the run's stats as a dict."""
        lib, err, stats = _lib.load(), _lib.Error(), _lib.RunStats()
        failure = []

        def relay(ptr, n, _user):
            try:
                on_tokens(_array(ptr, n).tolist())
            except BaseException as e:  # raised again below: a callback cannot unwind C
                failure.append(e)

        fn = _lib.TOKENS_FN(relay) if on_tokens else _lib.TOKENS_FN()
        check(lib.specd_spec_run(self.handle, seq, ctx.handle, kv_seq, fn, None,
                                 ctypes.byref(stats), ctypes.byref(err)), err)
        if failure:
            raise failure[0]
        return {name: getattr(stats, name) for name, _ in stats._fields_}
