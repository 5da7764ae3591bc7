"""device= on Context and Spec: names as specd_device_parse reads them, the runtime's refusal of a
device it cannot run, and the Spec's device reaching the contexts its policies make."""
import pytest

import specd
from conftest import MODEL, PROMPT


def cuda_runs(model):
    try:
        with specd.Context(model, n_ctx=64, n_batch=8, device="cuda"):
            return True
    except specd.SpecdError:
        return False


def test_context_device_names(model):
    with specd.Context(model, n_ctx=64, n_batch=8, device="cpu") as c:
        assert c.device == "cpu"
        assert c.device_memory() == {"weights": 0, "kv": 0, "scratch": 0}
    for bad in ("tpu", "cuda:x", "CPU", ""):
        with pytest.raises(specd.SpecdError, match="INVALID_ARG"):
            specd.Context(model, n_ctx=64, device=bad)
    with pytest.raises(specd.SpecdError, match="INVALID_ARG"):
        specd.Spec(n_vocab=model.n_vocab, device="tpu")


def test_cuda_refused_or_on_the_device(model):
    if cuda_runs(model):
        with specd.Context(model, n_ctx=64, n_batch=8, device="cuda:0") as c:
            assert c.device == "cuda" and c.device_memory()["weights"] > 0
    else:
        with pytest.raises(specd.SpecdError, match="UNSUPPORTED"):
            specd.Context(model, n_ctx=64, device="cuda")


def test_spec_device_reaches_the_draft_model(model, tok, monkeypatch):
    """With SPECD_DEVICE naming a device this library cannot run, a draft model's context left
    on the default would fail the open; Spec(device="cpu") puts it on the CPU."""
    if cuda_runs(model):
        pytest.skip("CUDA runs here: no device to be refused")
    monkeypatch.setenv("SPECD_DEVICE", "cuda")
    ids = tok.encode_chat(PROMPT)
    with specd.Spec(n_vocab=model.n_vocab, max_seqs=1, target=model) as spec:
        with pytest.raises(specd.SpecdError, match="UNSUPPORTED"):
            spec.open(0, ids, policy="draft", policy_options=f"model={MODEL}", max_tokens=4)
    with specd.Spec(n_vocab=model.n_vocab, max_seqs=1, target=model, device="cpu") as spec:
        spec.open(0, ids, policy="draft", policy_options=f"model={MODEL}", max_tokens=4)
        spec.close_seq(0)
