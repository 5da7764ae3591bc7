"""ctypes declarations of libspecd's public C API (include/specd/*.h) and the library loader.

Only what the Python layer uses is declared; every struct mirrors its C definition field for
field (the C headers are the reference: keep the order and types in step with them)."""
import ctypes
import ctypes.util
import os
import subprocess
from ctypes import (POINTER, Structure, c_char, c_char_p, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint8, c_uint32, c_uint64, c_void_p)

ERROR_MESSAGE_MAX = 256
MAX_DRAFT = 64


class Error(Structure):
    _fields_ = [("status", c_int), ("message", c_char * ERROR_MESSAGE_MAX)]


class SamplingParams(Structure):
    _fields_ = [("temperature", c_float), ("top_k", c_int32), ("top_p", c_float),
                ("min_p", c_float), ("bias", c_void_p), ("n_bias", c_size_t)]


class SpecParams(Structure):
    _fields_ = [("n_vocab", c_int32), ("max_draft", c_int32), ("max_seqs", c_int32),
                ("target", c_void_p), ("target_path", c_char_p),
                ("verifier_endpoint", c_char_p), ("verifier_timeout_ms", c_int32),
                ("verifier_tokenizer_hash", c_uint64), ("max_step_rows", c_int32),
                ("n_embd", c_int32), ("device", c_int32), ("device_index", c_int32)]


class PenaltiesParams(Structure):
    _fields_ = [("presence_penalty", c_float), ("frequency_penalty", c_float),
                ("repetition_penalty", c_float)]


class RowProcessor(Structure):  # specd/processor.h: callbacks not exposed, only the layout
    _fields_ = [("apply", c_void_p), ("admit", c_void_p), ("forced", c_void_p),
                ("commit", c_void_p), ("user", c_void_p)]


class SeqParams(Structure):
    _fields_ = [("policy", c_char_p), ("policy_ops", c_void_p), ("policy_options", c_char_p),
                ("policy_user", c_void_p), ("sampling", SamplingParams), ("seed", c_uint64),
                ("stream_key", c_uint64), ("rule", c_int), ("tau", c_float),
                ("adaptive", c_int), ("max_tokens", c_int32),
                ("stop_tokens", POINTER(c_int32)), ("n_stop_tokens", c_int32),
                ("penalties", PenaltiesParams), ("processor", RowProcessor)]


class StepLayout(Structure):
    _fields_ = [("n_tokens", c_int32), ("tokens", POINTER(c_int32)), ("pos", POINTER(c_int32)),
                ("visible", POINTER(c_uint8)), ("lora_gate", POINTER(c_float)),
                ("lora", c_void_p), ("n_rows", c_int32), ("rows", POINTER(c_int32)),
                ("lora_path", c_char_p), ("input_embd", POINTER(c_float)),
                ("input_embd_rows", POINTER(c_uint8)),
                # keyed chains (policy ABI 2): the C side zeroes the whole struct, so every
                # field must be here or it writes past a short one
                ("n_chain", c_int32), ("chain_draft", POINTER(c_int32)),
                ("chain_key", POINTER(c_int32)), ("chain_q", POINTER(c_float)),
                ("chain_bonus", c_int32), ("chain_keep", POINTER(c_int32))]


class StepOutcome(Structure):
    _fields_ = [("n_emitted", c_int32), ("emitted", POINTER(c_int32)), ("n_keep", c_int32),
                ("keep", POINTER(c_int32)), ("n_drafted", c_int32), ("n_accepted", c_int32),
                ("lossy", c_int)]


class Logits(Structure):
    _fields_ = [("data", c_void_p), ("row_stride", c_int64), ("n_rows", c_int32),
                ("dtype", c_int), ("device", c_int)]


class BatchSeq(Structure):
    _fields_ = [("seq", c_int32), ("layout", StepLayout), ("token_offset", c_int32),
                ("row_offset", c_int32)]


class Batch(Structure):
    _fields_ = [("n_seqs", c_int32), ("seqs", POINTER(BatchSeq)), ("n_tokens", c_int32),
                ("n_rows", c_int32), ("needs_lora", c_int), ("needs_hidden", c_int),
                ("needs_embd", c_int)]


class BatchResult(Structure):
    _fields_ = [("n_seqs", c_int32), ("seq", POINTER(c_int32)),
                ("outcome", POINTER(StepOutcome)), ("status", POINTER(c_int)),
                ("n_failed", c_int32)]


class SeqStats(Structure):
    _fields_ = [("n_steps", c_int64), ("n_emitted", c_int64), ("n_drafts", c_int64),
                ("n_draft_tokens", c_int64), ("n_accepted", c_int64),
                ("accepted_at", c_int64 * MAX_DRAFT), ("drafted_at", c_int64 * MAX_DRAFT),
                ("n_backoffs", c_int64), ("n_guard_plain", c_int64),
                ("n_remote_verified", c_int64), ("n_remote_fallback", c_int64),
                ("n_rows", c_int64), ("n_tokens_run", c_int64), ("n_empty_steps", c_int64),
                ("n_commit_steps", c_int64), ("lossy", c_int), ("propose_ns", c_uint64),
                ("verify_ns", c_uint64), ("n_draft_cut", c_int64), ("n_forced", c_int64),
                ("n_shadow_drafts", c_int64), ("n_shadow_accepted", c_int64)]


class ModelInfo(Structure):
    _fields_ = [("arch", c_int), ("n_layer", c_int32), ("n_embd", c_int32), ("n_ff", c_int32),
                ("n_head", c_int32), ("n_head_kv", c_int32), ("head_dim", c_int32),
                ("n_rot", c_int32), ("n_vocab", c_int32), ("n_ctx_train", c_int32),
                ("rms_eps", c_float), ("rope_freq_base", c_float), ("tied_output", c_int),
                ("weight_bytes", c_uint64)]


class ContextParams(Structure):
    _fields_ = [("n_seq", c_int32), ("n_ctx", c_int32), ("n_batch", c_int32),
                ("n_threads", c_int32), ("n_layers", c_int32), ("device", c_int32),
                ("device_index", c_int32), ("numerics", c_int32)]


class SeqBatch(Structure):
    _fields_ = [("seq", c_int32), ("n_tokens", c_int32), ("tokens", POINTER(c_int32)),
                ("pos", POINTER(c_int32)), ("visible", POINTER(c_uint8)),
                ("lora_gate", POINTER(c_float)), ("commit", POINTER(c_uint8)),
                ("embd", POINTER(c_float)), ("embd_rows", POINTER(c_uint8))]


class ExtendOut(Structure):
    _fields_ = [("n_rows", c_int32), ("rows", POINTER(c_int32)), ("logits", POINTER(c_float)),
                ("hidden", POINTER(c_float)),
                ("device_logits", c_void_p)]  # const float **, NULL: logits to the host only


class RunStats(Structure):
    _fields_ = [("n_prompt", c_int64), ("n_emitted", c_int64), ("n_steps", c_int64),
                ("prefill_ns", c_uint64), ("decode_ns", c_uint64), ("forward_ns", c_uint64),
                ("prepare_ns", c_uint64), ("verify_ns", c_uint64), ("trim_ns", c_uint64)]


class ChatMessage(Structure):
    _fields_ = [("role", c_char_p), ("content", c_char_p)]


TOKENS_FN = ctypes.CFUNCTYPE(None, POINTER(c_int32), c_int32, c_void_p)

ST = c_int  # specd_status
E = POINTER(Error)
P = c_void_p  # opaque handles

# name: (restype, argtypes)
_SIGNATURES = {
    "specd_status_name": (c_char_p, [c_int]),
    "specd_spec_default_params": (SpecParams, []),
    "specd_spec_create": (ST, [POINTER(SpecParams), POINTER(P), E]),
    "specd_spec_destroy": (None, [P]),
    "specd_seq_default_params": (SeqParams, []),
    "specd_sampling_default_params": (SamplingParams, []),
    "specd_spec_seq_open": (ST, [P, c_int32, POINTER(c_int32), c_int64, POINTER(SeqParams), E]),
    "specd_spec_seq_close": (None, [P, c_int32]),
    "specd_spec_seq_layout": (ST, [P, c_int32, POINTER(StepLayout), E]),
    "specd_spec_seq_done": (c_int, [P, c_int32]),
    "specd_spec_seq_output": (POINTER(c_int32), [P, c_int32, POINTER(c_int64)]),
    "specd_spec_seq_stats": (ST, [P, c_int32, POINTER(SeqStats), E]),
    "specd_spec_max_draft": (c_int32, [P]),
    "specd_spec_max_step_rows": (c_int32, [P]),
    "specd_spec_batch_layout": (ST, [P, POINTER(c_int32), c_int32, POINTER(Batch), E]),
    "specd_spec_batch_verify": (ST, [P, POINTER(Logits), POINTER(BatchResult), E]),
    "specd_spec_seq_verify_logits": (ST, [P, c_int32, POINTER(Logits), POINTER(StepOutcome), E]),
    "specd_spec_run": (ST, [P, c_int32, P, c_int32, TOKENS_FN, c_void_p, POINTER(RunStats), E]),
    "specd_policy_find": (c_void_p, [c_char_p]),
    "specd_model_create": (ST, [c_char_p, POINTER(P), E]),
    "specd_model_destroy": (None, [P]),
    "specd_model_get_info": (POINTER(ModelInfo), [P]),
    "specd_model_gguf": (P, [P]),
    "specd_context_default_params": (ContextParams, []),
    "specd_device_parse": (ST, [c_char_p, POINTER(c_int32), POINTER(c_int32), E]),
    "specd_device_name": (c_char_p, [c_int32]),
    "specd_context_device": (c_int32, [P]),
    "specd_context_device_memory": (None, [P, POINTER(c_size_t), POINTER(c_size_t),
                                           POINTER(c_size_t)]),
    "specd_context_create": (ST, [P, POINTER(ContextParams), POINTER(P), E]),
    "specd_context_destroy": (None, [P]),
    "specd_context_n_batch": (c_int32, [P]),
    "specd_context_extend": (ST, [P, POINTER(SeqBatch), c_int32, POINTER(ExtendOut), E]),
    "specd_context_kv_len": (c_int32, [P, c_int32]),
    "specd_context_kv_truncate": (ST, [P, c_int32, c_int32, E]),
    "specd_context_kv_keep": (ST, [P, c_int32, c_int32, c_int32, POINTER(c_int32), E]),
    "specd_tokenizer_create_from_gguf": (ST, [P, POINTER(P), E]),
    "specd_tokenizer_destroy": (None, [P]),
    "specd_tokenizer_vocab_size": (c_int32, [P]),
    "specd_tokenizer_bos": (c_int32, [P]),
    "specd_tokenizer_eos": (c_int32, [P]),
    "specd_tokenizer_is_eog": (c_int, [P, c_int32]),
    "specd_tokenizer_encode": (ST, [P, c_char_p, c_size_t, c_uint32, POINTER(c_int32), c_size_t,
                                    POINTER(c_size_t), E]),
    "specd_tokenizer_decode": (ST, [P, POINTER(c_int32), c_size_t, c_uint32, c_char_p, c_size_t,
                                    POINTER(c_size_t), E]),
    "specd_tokenizer_apply_chat_template": (ST, [P, POINTER(ChatMessage), c_size_t, c_int,
                                                 c_char_p, c_size_t, POINTER(c_size_t), E]),
}


def _candidates(path):
    if path:
        yield path
    env = os.environ.get("SPECD_LIBRARY")
    if env:
        yield env
    try:
        libdir = subprocess.run(["pkg-config", "--variable=libdir", "specd"], check=True,
                                capture_output=True, text=True).stdout.strip()
        if libdir:
            yield os.path.join(libdir, "libspecd.so")
    except (OSError, subprocess.CalledProcessError):
        pass
    found = ctypes.util.find_library("specd")
    if found:
        yield found


_lib = None


def load(path=None):
    """Loads libspecd: `path`, else $SPECD_LIBRARY, else pkg-config's libdir for specd, else the
    system's search path. The first library that loads is kept for the process."""
    global _lib
    if _lib is not None and path is None:
        return _lib
    tried = []
    for cand in _candidates(path):
        try:
            lib = ctypes.CDLL(cand)
        except OSError as e:
            tried.append(f"{cand}: {e}")
            continue
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib = lib
        return lib
    raise OSError("libspecd not found (set SPECD_LIBRARY, or make `pkg-config --variable=libdir "
                  "specd` name its directory); tried: " + ("; ".join(tried) or "nothing"))
