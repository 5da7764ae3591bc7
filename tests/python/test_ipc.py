"""specd.ipc.Client against real specd-drafter and specd-verifier daemons: a Python host engine
(specd's runtime as its target) uses them as a sidecar and decodes token-identically to plain
decoding; the committed generated module matches ipc/specd.proto."""
import filecmp
import os
import subprocess
import tempfile
import time

import numpy as np
import pytest

import specd
import specd.ipc
from conftest import BUILD, PROMPT, SOURCE
from specd.ipc import Client

MAX_DRAFT = 4  # (4 + 1) rows of 49,152 f32 logits fit the daemons' default 1 MiB frame
# A typed fingerprint (the daemons' --tokenizer-hash): this host brings its own tokenizer check.
TOKHASH = 0x5eed5eed12345678


@pytest.fixture(scope="module")
def daemons(model):
    d = tempfile.mkdtemp(prefix="specd-pyipc.")
    os.chmod(d, 0o700)
    eps = {name: f"ipc://{d}/{name}.sock" for name in ("drafter", "verifier")}
    procs = {name: subprocess.Popen([os.path.join(BUILD, f"specd-{name}"), "--endpoint", ep,
                                     "--vocab", str(model.n_vocab),
                                     "--tokenizer-hash", f"{TOKHASH:016x}"],
                                    stderr=open(os.path.join(d, f"{name}.log"), "w"))
             for name, ep in eps.items()}
    try:
        for name, p in procs.items():  # listening once the socket file is there
            deadline = time.monotonic() + 60
            while not os.path.exists(f"{d}/{name}.sock"):
                assert p.poll() is None, f"specd-{name} exited: " + open(f"{d}/{name}.log").read()
                assert time.monotonic() < deadline, f"specd-{name} never listened"
                time.sleep(0.05)
        yield eps
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(timeout=10)


def sidecar_decode(model, ctx, drafter, verifier, ids, n_tokens, seq_id=0):
    """Greedy decoding of ids where specd-drafter proposes and specd-verifier decides; the
    target (specd's runtime) runs here. Plain steps (an empty draft) take the argmax here and
    are committed to the verifier."""
    drafter.open_seq(seq_id, ids, policy="ngram", max_draft=MAX_DRAFT)
    verifier.open_seq(seq_id, ids)
    ctx.kv_truncate(0, 0)
    ctx.extend(0, ids[:-1], want_logits=False)
    out, pending, new, step, accepted = [], ids[-1], [], 0, 0
    while len(out) < n_tokens:
        step += 1
        draft = drafter.propose(seq_id, step, commit_tokens=new)[:MAX_DRAFT]
        before = ctx.kv_len(0)
        logits = ctx.extend(0, [pending] + draft)
        if draft:
            r = verifier.verify(seq_id, step, draft, logits)
            new, accepted = r.emitted, accepted + r.accepted
        else:
            new = [int(np.argmax(logits[0]))]
            verifier.commit(seq_id, new)
        # keep the pending token's row and the accepted drafts' rows
        ctx.kv_keep(0, before, list(range(before, before + len(new))))
        out += new
        pending = new[-1]
    drafter.close_seq(seq_id)
    verifier.close_seq(seq_id)
    return out[:n_tokens], step, accepted


def test_sidecar_decoding_matches_plain(model, tok, ctx, daemons):
    ids = tok.encode_chat(PROMPT)
    with specd.Spec(n_vocab=model.n_vocab, max_draft=8, max_seqs=1, target=model) as spec:
        spec.open(0, ids, policy="none", temperature=0.0, max_tokens=48)  # no stop token
        spec.run(0, ctx)
        plain = spec.output(0)
    with Client(daemons["drafter"], model.n_vocab, TOKHASH, role="drafter") as dr, \
         Client(daemons["verifier"], model.n_vocab, TOKHASH, role="verifier") as vr:
        got, steps, accepted = sidecar_decode(model, ctx, dr, vr, ids, len(plain))
        assert got == plain
        assert accepted > 0 and steps < len(plain)  # the daemons' drafts were accepted
        ds, vs = dr.stats(), vr.stats()
        assert ds["proposes"] >= steps and vs["verifies"] > 0
        assert ds["sequences_open"] == 0 and vs["sequences_open"] == 0


def test_daemon_errors_carry_status(model, daemons):
    with pytest.raises(specd.SpecdError) as e:
        Client(daemons["verifier"], model.n_vocab + 1, TOKHASH)
    assert e.value.name == "SPECD_E_MISMATCH" and "vocab" in e.value.message
    with pytest.raises(specd.SpecdError) as e:
        Client(daemons["drafter"], model.n_vocab, TOKHASH, role="verifier")
    assert e.value.name == "SPECD_E_MISMATCH"
    with pytest.raises(specd.SpecdError) as e:
        Client(daemons["verifier"], model.n_vocab)  # another tokenizer
    assert e.value.name == "SPECD_E_MISMATCH" and "tokenizer hash" in e.value.message
    with Client(daemons["verifier"], model.n_vocab, TOKHASH, role="verifier") as vr:
        vr.ping()
        with pytest.raises(specd.SpecdError) as e:
            vr.propose(1, 1)  # a verifier drafts nothing
        assert e.value.name.startswith("SPECD_E_")
        with pytest.raises(specd.SpecdError) as e:
            vr.verify(9, 1, [1], np.zeros((2, model.n_vocab), np.float32))  # never opened
        assert e.value.name == "SPECD_E_STATE"


def test_generated_module_matches_proto(tmp_path):
    """specd_pb2.py and _schema.py are what regenerate.sh makes from ipc/specd.proto now."""
    pkg = os.path.dirname(specd.ipc.__file__)
    script = os.path.join(SOURCE, "bindings", "python", "specd", "ipc", "regenerate.sh")
    subprocess.run(["bash", script, str(tmp_path)], check=True,
                   env={**os.environ, "PYTHON": os.path.join(BUILD, "pyenv", "bin", "python")})
    for name in ("specd_pb2.py", "_schema.py"):
        assert filecmp.cmp(tmp_path / name, os.path.join(pkg, name), shallow=False), \
            f"{name} is stale: run bindings/python/specd/ipc/regenerate.sh"
