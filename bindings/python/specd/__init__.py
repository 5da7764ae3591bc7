"""Python bindings of specd, the speculative-decoding coprocessor.

    specd.Spec          host API v2: lay out steps, verify logits (numpy / torch)
    specd.Model, specd.Context, specd.Tokenizer
                        specd's own CPU runtime, to run a GGUF model from Python
    specd.ipc.Client    a client for the specd-drafter / specd-verifier daemons
Errors are specd.SpecdError (status name and message). libspecd is found through `path` of
specd.load(), $SPECD_LIBRARY or pkg-config (`pkg-config --variable=libdir specd`)."""
from ._lib import load
from .errors import SpecdError
from .logits import bf16_bits, bf16_to_f32
from .runtime import Context, Model, Tokenizer
from .spec import Batch, Outcome, Spec, StepPlan

__all__ = ["load", "SpecdError", "Spec", "Batch", "StepPlan", "Outcome", "Model", "Context",
           "Tokenizer", "bf16_bits", "bf16_to_f32"]
__version__ = "0.1.0"
