"""libspecd loads into a Python started the plain way (no GLIBC_TUNABLES, no LD_PRELOAD): the
shared library does not link jemalloc, whose static TLS a late dlopen cannot get."""
import os
import subprocess
import sys

from conftest import MODEL

# a fresh interpreter: imports specd, opens the model, tokenizes and decodes a few ngram tokens
SCRIPT = r"""
import sys
import specd
text = "The quick brown fox jumps over the lazy dog."
with specd.Model(sys.argv[1]) as model, model.tokenizer() as tok, \
     specd.Context(model, n_ctx=512, n_batch=64) as ctx, \
     specd.Spec(n_vocab=model.n_vocab, max_draft=4, max_seqs=1, target=model) as spec:
    assert tok.decode(tok.encode(text, add_special=False)) == text
    spec.open(0, tok.encode_chat("Say hello."), policy="ngram", temperature=0.0, seed=1,
              max_tokens=8, stop_tokens=tok.eog_tokens())
    spec.run(0, ctx)
    out = spec.output(0)
    assert len(out) > 0
    print(repr(tok.decode(out)))
"""


def test_plain_python_imports_and_uses_specd():
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "LD_PRELOAD")}
    r = subprocess.run([sys.executable, "-c", SCRIPT, MODEL], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip(), "no generated text"
