"""Request/reply client for specd-drafter and specd-verifier, as ipc/client.c speaks to them:
one ZeroMQ DEALER socket, one packed specd_wire.Envelope per message, Hello first (protocol
major, schema hash, the model's vocabulary size and tokenizer hash), then requests each answered
by the reply named for it or by an Error envelope. Sequences belong to this connection: the
daemons drop them when it closes.

Logits for Verify travel inline (f32, (len(draft) + 1) x vocab): at SmolLM2's 49,152-token
vocabulary a 1 MiB frame (the daemons' default --max-frame) carries drafts of up to 4 tokens."""
import os
from dataclasses import dataclass
from typing import List

import numpy as np
import zmq

from ..errors import SpecdError, status_name_static
from . import specd_pb2 as pb
from ._schema import SCHEMA_HASH

PROTOCOL_MAJOR = 1
RULES = {"coupled": pb.ACCEPT_COUPLED, "greedy": pb.ACCEPT_GREEDY,
         "rejection": pb.ACCEPT_REJECTION, "rs": pb.ACCEPT_REJECTION}
ROLES = {"drafter": pb.ROLE_DRAFTER, "verifier": pb.ROLE_VERIFIER}


@dataclass
class VerifyResult:
    accepted: int              # draft tokens accepted
    emitted: List[int]         # tokens appended to the sequence (accepted drafts + one more)
    accept_prob: List[float]   # per examined draft position
    position_accepted: List[bool]


class Client:
    """A connection to one daemon. role: "drafter" or "verifier" (what the daemon must be), or
    None to accept either. Raises SpecdError (status name and the daemon's message) on an Error
    reply and SPECD_E_TIMEOUT when no reply comes within timeout_ms."""

    def __init__(self, endpoint, vocab_size, tokenizer_hash=0, role=None, timeout_ms=5000,
                 context=None):
        self.endpoint, self.timeout_ms = endpoint, timeout_ms
        self._ctx = context or zmq.Context.instance()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.connect(endpoint)
        self._next_id = 1
        hello = pb.Envelope()
        h = hello.hello
        h.major, h.schema_hash, h.role, h.pid = PROTOCOL_MAJOR, SCHEMA_HASH, pb.ROLE_HOST, os.getpid()
        h.model.vocab_size, h.model.tokenizer_hash = vocab_size, tokenizer_hash
        ok = self._request(hello, "hello_ok").hello_ok
        if role is not None and ok.role != ROLES[role]:
            self.close()
            raise SpecdError(7, "SPECD_E_MISMATCH",
                             f"{endpoint} is a {pb.Role.Name(ok.role)}, not a {role}")
        self.role = {v: k for k, v in ROLES.items()}.get(ok.role)
        self.instance = ok.instance

    def close(self):
        if self._sock is not None:
            self._sock.close(0)
            self._sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, env, want):
        if self._sock is None:
            raise ValueError("client is closed")
        env.request_id = self._next_id
        self._next_id += 1
        self._sock.send(env.SerializeToString())
        while True:
            if not self._sock.poll(self.timeout_ms, zmq.POLLIN):
                raise SpecdError(9, "SPECD_E_TIMEOUT",
                                 f"{self.endpoint}: no reply in {self.timeout_ms} ms")
            reply = pb.Envelope.FromString(self._sock.recv())
            if reply.request_id != env.request_id:
                continue  # the answer to a request that timed out earlier
            body = reply.WhichOneof("body")
            if body == "error":
                raise SpecdError(reply.error.code, status_name_static(reply.error.code),
                                 reply.error.message)
            if body != want:
                raise SpecdError(8, "SPECD_E_PROTOCOL", f"reply {body}, want {want}")
            return reply

    def open_seq(self, seq_id, prompt, temperature=0.0, top_k=0, top_p=1.0, min_p=0.0, seed=0,
                 policy=None, max_draft=None, rule="coupled"):
        """Opens a sequence with its prompt. policy (drafter): "name" or "name:options"."""
        env = pb.Envelope()
        o = env.open_seq
        o.seq_id, o.seed, o.rule = seq_id, seed, RULES[rule]
        o.prompt.extend(int(t) for t in prompt)
        s = o.sampling
        s.temperature, s.top_k, s.top_p, s.min_p = temperature, top_k, top_p, min_p
        if policy is not None:
            o.policy = policy
        if max_draft is not None:
            o.max_draft = max_draft
        self._request(env, "ack")

    def close_seq(self, seq_id):
        env = pb.Envelope()
        env.close_seq.seq_id = seq_id
        self._request(env, "ack")

    def propose(self, seq_id, step, commit_tokens=(), max_draft=None):
        """Drafter: appends commit_tokens (what was emitted since the last call) to the
        sequence and returns the draft for what follows."""
        env = pb.Envelope()
        p = env.propose
        p.seq_id, p.step = seq_id, step
        p.commit_tokens.extend(int(t) for t in commit_tokens)
        if max_draft is not None:
            p.max_draft = max_draft
        d = self._request(env, "draft").draft
        if d.seq_id != seq_id or d.step != step:
            raise SpecdError(8, "SPECD_E_PROTOCOL", "draft does not match the request")
        return list(d.tokens)

    def verify(self, seq_id, step, draft, logits):
        """Verifier: decides draft from the target's logits at the pending token and at each
        draft token ((len(draft) + 1) x vocab, converted to f32); the emitted tokens are
        appended to the verifier's copy of the sequence."""
        rows = np.ascontiguousarray(logits, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(draft) + 1:
            raise ValueError(f"logits of shape {rows.shape}: want ({len(draft) + 1}, vocab)")
        env = pb.Envelope()
        v = env.verify
        v.seq_id, v.step = seq_id, step
        v.draft_tokens.extend(int(t) for t in draft)
        v.inline_logits = rows.tobytes()
        r = self._request(env, "result").result
        if r.seq_id != seq_id or r.step != step or len(r.emitted) > len(draft) + 1:
            raise SpecdError(8, "SPECD_E_PROTOCOL", "result does not match the request")
        return VerifyResult(accepted=r.accepted, emitted=list(r.emitted),
                            accept_prob=[s.accept_prob for s in r.stats],
                            position_accepted=[s.accepted for s in r.stats])

    def commit(self, seq_id, tokens, rollback_to=None):
        """Appends tokens decided elsewhere (plain steps) to the daemon's copy of the sequence."""
        env = pb.Envelope()
        c = env.commit
        c.seq_id = seq_id
        c.tokens.extend(int(t) for t in tokens)
        if rollback_to is not None:
            c.rollback_to = rollback_to
        self._request(env, "ack")

    def seq_info(self, seq_id):
        """(length, tokens_hash) of the daemon's copy of the sequence."""
        env = pb.Envelope()
        env.seq_info_request.seq_id = seq_id
        i = self._request(env, "seq_info").seq_info
        return i.length, i.tokens_hash

    def stats(self):
        env = pb.Envelope()
        env.stats_request.SetInParent()
        s = self._request(env, "stats").stats
        return {f.name: getattr(s, f.name) for f in s.DESCRIPTOR.fields}

    def ping(self):
        env = pb.Envelope()
        env.ping.SetInParent()
        self._request(env, "pong")
