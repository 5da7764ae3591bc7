"""The binding drives the real model through specd's own runtime: token-identical to
`specd generate`, by specd_spec_run and by a Python host loop over the host API v2 with logits
in f32 (padded rows), bf16 (uint16 view) and f16."""
import numpy as np
import pytest

import specd
from conftest import N_TOKENS, PROMPT, cli_generate, host_loop, open_like_cli

CASES = [("none", 0.0, 0), ("ngram", 0.0, 0), ("ngram", 0.8, 3), ("none", 0.8, 3)]


def padded(rows, pad=40, fill=np.nan, dtype=np.float32):
    """rows in a wider buffer (row stride n_vocab + pad) whose padding is NaN: specd must never
    read it (a NaN it read would be SPECD_E_NUMERIC)."""
    n, v = rows.shape
    buf = np.full((n, v + pad), fill, dtype=dtype)
    buf[:, :v] = rows
    return buf


@pytest.mark.parametrize("policy,temp,seed", CASES)
def test_spec_run_matches_specd_generate(model, tok, ctx, policy, temp, seed):
    ids = tok.encode_chat(PROMPT)
    with specd.Spec(n_vocab=model.n_vocab, max_draft=8, max_seqs=1, target=model) as spec:
        open_like_cli(spec, tok, ids, policy, temp, seed)
        streamed = []
        stats = spec.run(0, ctx, on_tokens=streamed.extend)
        out = spec.output(0)
        s = spec.stats(0)
    assert streamed == out and stats["n_emitted"] == len(out) > 0
    if policy == "ngram" and temp == 0:
        assert s["n_accepted"] > 0, s  # speculation really ran
    want = cli_generate("-p", PROMPT, "-n", str(N_TOKENS), "--policy", policy, "--temp",
                        str(temp), "--seed", str(seed))
    assert tok.decode_bytes(out) + b"\n" == want


@pytest.mark.parametrize("policy,temp,seed", CASES[1:3])
def test_host_loop_padded_f32_matches_spec_run(model, tok, ctx, policy, temp, seed):
    ids = tok.encode_chat(PROMPT)
    # The guard is off: it weighs wall-clock cost, so on a loaded machine it may fall back to
    # plain steps for the whole run and the "drafts were accepted" check below would be luck.
    with specd.Spec(n_vocab=model.n_vocab, max_draft=8, max_seqs=1, target=model) as spec:
        open_like_cli(spec, tok, ids, policy, temp, seed, adaptive=False)
        spec.run(0, ctx)
        want = spec.output(0)
        spec.close_seq(0)
        open_like_cli(spec, tok, ids, policy, temp, seed, adaptive=False)
        got, steps = host_loop(spec, ctx, ids, lambda r: padded(r))
    assert got == want
    if policy == "ngram":
        assert steps < len(got)  # some steps emitted more than one token


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.parametrize("temp,seed", [(0.0, 0), (0.8, 5)])
def test_host_loop_half_precision_logits(model, tok, ctx, dtype, temp, seed):
    """bf16 (as uint16 bits) and f16 rows with a padded stride give the tokens that the same
    values widened to f32 give: the dtype and stride reach specd as given."""
    ids = tok.encode_chat(PROMPT)
    if dtype == "bf16":
        narrow = lambda r: padded(specd.bf16_bits(r), fill=0x7FC0, dtype=np.uint16)  # NaN bits
        wide = lambda r: specd.bf16_to_f32(specd.bf16_bits(r))
    else:
        narrow = lambda r: padded(r.astype(np.float16), dtype=np.float16)
        wide = lambda r: r.astype(np.float16).astype(np.float32)
    runs = []
    for to_block in (narrow, wide):
        with specd.Spec(n_vocab=model.n_vocab, max_draft=8, max_seqs=1, target=model) as spec:
            open_like_cli(spec, tok, ids, "ngram", temp, seed, n=24)
            runs.append(host_loop(spec, ctx, ids, to_block)[0])
    assert runs[0] == runs[1] and len(runs[0]) > 0


def test_errors_carry_status_name_and_message(model, tok):
    with specd.Spec(n_vocab=model.n_vocab, max_draft=4, max_seqs=2) as spec:
        with pytest.raises(specd.SpecdError) as e:
            spec.open(5, [1, 2], policy="none")
        assert e.value.name == "SPECD_E_INVALID_ARG" and "5" in e.value.message
        spec.open(0, tok.encode("hello"), policy="none")
        batch = spec.layout([0])
        bad = np.zeros((batch.n_rows, model.n_vocab), np.float32)
        bad[0, 7] = np.nan
        with pytest.raises(specd.SpecdError) as e:
            spec.verify(bad)
        assert e.value.name == "SPECD_E_NUMERIC"
        assert e.value.outcomes[0].status == "SPECD_E_NUMERIC"
        # the sequence stays laid out: corrected rows verify
        bad[0, 7] = 1.0
        [o] = spec.verify(bad)
        assert o.status == "SPECD_OK" and o.emitted == [7]
        with pytest.raises(ValueError):
            spec.verify(np.zeros((1, model.n_vocab - 1), np.float32))  # narrower than the vocab
    with pytest.raises(specd.SpecdError) as e:
        specd.Model("/nonexistent.gguf")
    assert e.value.name == "SPECD_E_IO"


def test_status_names_match_libspecd():
    from specd.errors import STATUS_NAMES, status_name
    assert [status_name(i) for i in range(len(STATUS_NAMES))] == list(STATUS_NAMES)


def test_tokenizer_round_trip(tok):
    text = "Speculative decoding, 1 2 3: ça va?"
    assert tok.decode(tok.encode(text)) == text
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert chat.endswith("<|im_start|>assistant\n") and "hi" in chat


def test_torch_tensor_zero_copy(model, tok, ctx):
    torch = pytest.importorskip("torch")
    ids = tok.encode_chat(PROMPT)
    runs = []
    for to_block in (lambda r: torch.from_numpy(padded(r))[:, :model.n_vocab],
                     lambda r: r):
        with specd.Spec(n_vocab=model.n_vocab, max_draft=8, max_seqs=1, target=model) as spec:
            open_like_cli(spec, tok, ids, "ngram", 0.8, 1, n=16)
            runs.append(host_loop(spec, ctx, ids, to_block)[0])
    assert runs[0] == runs[1]


def test_torch_cuda_side_stream(model, tok, ctx):
    """Logits written on a torch side stream and handed over under it are read after the write
    lands: the block is NaN until a copy queued behind a long sleep kernel fills it, so a read
    that did not wait would be SPECD_E_NUMERIC or other tokens. Needs torch with a CUDA device
    (not run on a machine without one)."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device here")
    ids = tok.encode_chat(PROMPT)
    side = torch.cuda.Stream()
    runs = []
    for on_device in (True, False):
        with specd.Spec(n_vocab=model.n_vocab, max_draft=8, max_seqs=1, target=model) as spec:
            open_like_cli(spec, tok, ids, "ngram", 0.8, 1, n=16)
            ctx.kv_truncate(0, 0)
            ctx.extend(0, ids[:-1], want_logits=False)
            while not spec.done(0):
                before = ctx.kv_len(0)
                plan = spec.layout([0]).seqs[0]
                rows = ctx.extend(0, plan.tokens, pos=plan.pos, rows=plan.rows)
                if on_device:
                    host = torch.from_numpy(padded(rows, fill=0.0)).pin_memory()
                    with torch.cuda.stream(side):
                        block = torch.full(host.shape, float("nan"), device="cuda")
                        torch.cuda._sleep(20_000_000)  # the copy lands well after verify starts
                        block.copy_(host, non_blocking=True)
                        [out] = spec.verify(block[:, :model.n_vocab])
                else:
                    [out] = spec.verify(rows)
                ctx.kv_keep(0, before, [before + k for k in out.keep])
            runs.append(spec.output(0))
    assert runs[0] == runs[1]
