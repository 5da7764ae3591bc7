"""Fixtures: the real default model through specd's runtime, the build's binaries."""
import os
import subprocess

import pytest

import specd

BUILD = os.environ.get("SPECD_BUILD_DIR", "build")
SOURCE = os.environ.get("SPECD_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
MODEL = os.environ.get("SPECD_TEST_MODEL") or os.path.expanduser(
    "~/.cache/specd/models/SmolLM2-135M-Instruct.Q4_1.gguf")
# The checks that ngram's drafts get accepted lean on llama.cpp's greedy answer to PROMPT, which
# repeats the list; the default fast numerics answers it in 12 tokens without a repeat. Every
# context of this process, and the `specd generate` it runs, reads SPECD_NUMERICS.
os.environ["SPECD_NUMERICS"] = "llama"
# repetitive, so that ngram drafts get accepted
PROMPT = "Repeat the following list exactly three times: apple, banana, cherry, date, elderberry."
N_TOKENS = 40


@pytest.fixture(scope="session")
def model():
    with specd.Model(MODEL) as m:
        yield m


@pytest.fixture(scope="session")
def tok(model):
    with model.tokenizer() as t:
        yield t


@pytest.fixture(scope="session")
def ctx(model):
    # as `specd generate` makes it (cli/cli_common.c)
    with specd.Context(model, n_ctx=4096, n_batch=256) as c:
        yield c


def cli_generate(*args):
    """stdout bytes of `specd generate` (the emitted tokens' pieces, then a newline)."""
    r = subprocess.run([os.path.join(BUILD, "specd"), "generate", *args], capture_output=True,
                       check=True, timeout=120)
    return r.stdout


def open_like_cli(spec, tok, ids, policy, temperature, seed, n=N_TOKENS, adaptive=True):
    """Opens seq 0 with `specd generate`'s defaults (top-k 40, top-p 0.95, min-p 0.05,
    coupled, adaptive, EOG stop tokens)."""
    spec.open(0, ids, policy=policy, temperature=temperature, top_k=40, top_p=0.95, min_p=0.05,
              seed=seed, max_tokens=n, stop_tokens=tok.eog_tokens(), adaptive=adaptive)


def host_loop(spec, ctx, ids, to_block, seq=0):
    """Python as the host engine: lays out each step, runs specd's runtime over it, hands the
    scored rows to specd as to_block(f32 rows) makes them, commits the kept KV rows."""
    ctx.kv_truncate(0, 0)
    ctx.extend(0, ids[:-1], want_logits=False)
    steps = 0
    while not spec.done(seq):
        before = ctx.kv_len(0)
        batch = spec.layout([seq], n_cached={seq: before})
        plan = batch.seqs[0]
        assert (plan.token_offset, plan.row_offset) == (0, 0)
        logits = ctx.extend(0, plan.tokens, pos=plan.pos, visible=plan.visible, rows=plan.rows,
                            embd=plan.input_embd, embd_rows=plan.input_embd_rows)
        [out] = spec.verify(to_block(logits))
        ctx.kv_keep(0, before, [before + k for k in out.keep])
        steps += 1
    return spec.output(seq), steps
