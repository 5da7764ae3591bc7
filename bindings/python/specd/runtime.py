"""specd's own CPU runtime (specd/runtime.h) and tokenizer (specd/tokenizer.h)."""
import ctypes
from ctypes import POINTER, c_float, c_int32, c_size_t, c_uint8, c_void_p

import numpy as np

from . import _lib
from .errors import check


def _i32(a):
    return np.ascontiguousarray(a, dtype=np.int32)


def _ptr(a, ctype):
    return None if a is None else a.ctypes.data_as(POINTER(ctype))


class _Handle:
    """An owned C object: close() (or leaving a with block) releases it once."""
    _destroy = None

    def __init__(self, handle):
        self._h = handle

    @property
    def handle(self):
        if not self._h:
            raise ValueError(f"{type(self).__name__} is closed")
        return self._h

    def close(self):
        if self._h:
            getattr(_lib.load(), self._destroy)(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class Model(_Handle):
    """A GGUF model, memory-mapped (specd_model_create)."""
    _destroy = "specd_model_destroy"

    def __init__(self, path):
        lib, err, h = _lib.load(), _lib.Error(), c_void_p()
        check(lib.specd_model_create(str(path).encode(), ctypes.byref(h), ctypes.byref(err)), err)
        super().__init__(h)
        self.path = str(path)

    @property
    def info(self):
        i = _lib.load().specd_model_get_info(self.handle).contents
        return {name: getattr(i, name) for name, _ in i._fields_}

    @property
    def n_vocab(self):
        return _lib.load().specd_model_get_info(self.handle).contents.n_vocab

    def tokenizer(self):
        return Tokenizer(self)


class Tokenizer(_Handle):
    """The model's byte-level BPE tokenizer (token-identical to llama.cpp's)."""
    _destroy = "specd_tokenizer_destroy"
    ADD_SPECIAL, PARSE_SPECIAL, EXACT_BYTES = 1, 2, 4
    RENDER_SPECIAL, REMOVE_SPECIAL = 1, 2

    def __init__(self, model):
        lib, err, h = _lib.load(), _lib.Error(), c_void_p()
        check(lib.specd_tokenizer_create_from_gguf(lib.specd_model_gguf(model.handle),
                                                   ctypes.byref(h), ctypes.byref(err)), err)
        super().__init__(h)

    @property
    def vocab_size(self):
        return _lib.load().specd_tokenizer_vocab_size(self.handle)

    @property
    def eos(self):
        return _lib.load().specd_tokenizer_eos(self.handle)

    def is_eog(self, token):
        return bool(_lib.load().specd_tokenizer_is_eog(self.handle, token))

    def eog_tokens(self):
        """Every id that ends generation (EOS, EOT, end-of-turn tokens), ascending."""
        return [t for t in range(self.vocab_size) if self.is_eog(t)]

    def encode(self, text, add_special=True, parse_special=False):
        data = text.encode() if isinstance(text, str) else bytes(text)
        flags = (self.ADD_SPECIAL if add_special else 0) | (self.PARSE_SPECIAL if parse_special else 0)
        lib, err, need = _lib.load(), _lib.Error(), c_size_t(0)
        lib.specd_tokenizer_encode(self.handle, data, len(data), flags, None, 0,
                                   ctypes.byref(need), None)
        ids = np.zeros(max(need.value, 1), dtype=np.int32)
        check(lib.specd_tokenizer_encode(self.handle, data, len(data), flags,
                                         _ptr(ids, c_int32), ids.size, ctypes.byref(need),
                                         ctypes.byref(err)), err)
        return ids[:need.value].tolist()

    def decode_bytes(self, ids, render_special=False):
        arr = _i32(ids)
        flags = self.RENDER_SPECIAL if render_special else 0
        lib, err, need = _lib.load(), _lib.Error(), c_size_t(0)
        # sizing call: "too small" is its expected answer; real errors repeat below
        lib.specd_tokenizer_decode(self.handle, _ptr(arr, c_int32), arr.size, flags, None, 0,
                                   ctypes.byref(need), None)
        buf = ctypes.create_string_buffer(max(need.value, 1))
        check(lib.specd_tokenizer_decode(self.handle, _ptr(arr, c_int32), arr.size, flags, buf,
                                         need.value, ctypes.byref(need), ctypes.byref(err)), err)
        return buf.raw[:need.value]

    def decode(self, ids, render_special=False):
        return self.decode_bytes(ids, render_special).decode("utf-8", "replace")

    def apply_chat_template(self, messages, add_generation_prompt=True):
        """messages: [(role, content), ...] or [{"role": ..., "content": ...}, ...]; returns the
        rendered text (encode it with parse_special=True)."""
        pairs = [(m["role"], m["content"]) if isinstance(m, dict) else m for m in messages]
        arr = (_lib.ChatMessage * max(len(pairs), 1))()
        keep = []
        for i, (role, content) in enumerate(pairs):
            r, c = role.encode(), content.encode()
            keep += [r, c]
            arr[i].role, arr[i].content = r, c
        lib, err, need = _lib.load(), _lib.Error(), c_size_t(0)
        lib.specd_tokenizer_apply_chat_template(self.handle, arr, len(pairs),
                                                int(add_generation_prompt), None, 0,
                                                ctypes.byref(need), None)  # sizing call
        buf = ctypes.create_string_buffer(max(need.value, 1))
        check(lib.specd_tokenizer_apply_chat_template(self.handle, arr, len(pairs),
                                                      int(add_generation_prompt), buf, need.value,
                                                      ctypes.byref(need), ctypes.byref(err)), err)
        return buf.raw[:need.value].decode()

    def encode_chat(self, prompt):
        """What `specd generate --chat` feeds the model for a one-message user prompt."""
        return self.encode(self.apply_chat_template([("user", prompt)]), add_special=True,
                           parse_special=True)


def parse_device(name):
    """(specd_device, ordinal) for "cpu", "cuda" or "cuda:N" (specd_device_parse); raises
    specd.SpecdError (INVALID_ARG) for any other name."""
    lib, err = _lib.load(), _lib.Error()
    device, index = c_int32(0), c_int32(0)
    check(lib.specd_device_parse(name.encode(), ctypes.byref(device), ctypes.byref(index),
                                 ctypes.byref(err)), err)
    return device.value, index.value


class Context(_Handle):
    """KV caches and scratch for running a model (specd_context_create). device: "cpu", "cuda"
    or "cuda:N"; None = SPECD_DEVICE's choice (unset: cpu)."""
    _destroy = "specd_context_destroy"

    def __init__(self, model, n_seq=1, n_ctx=2048, n_batch=512, n_threads=0, n_layers=0,
                 device=None):
        lib, err, h = _lib.load(), _lib.Error(), c_void_p()
        p = lib.specd_context_default_params()
        p.n_seq, p.n_ctx, p.n_batch, p.n_threads, p.n_layers = n_seq, n_ctx, n_batch, n_threads, n_layers
        if device is not None:
            p.device, p.device_index = parse_device(device)
        check(lib.specd_context_create(model.handle, ctypes.byref(p), ctypes.byref(h),
                                       ctypes.byref(err)), err)
        super().__init__(h)
        self.model = model  # the model must outlive the context
        self.n_vocab = model.n_vocab

    @property
    def device(self):
        """The backend it runs on: "cpu" or "cuda"."""
        lib = _lib.load()
        return lib.specd_device_name(lib.specd_context_device(self.handle)).decode()

    def device_memory(self):
        """Device memory it holds, in bytes: {"weights", "kv", "scratch"} (0 on the CPU)."""
        w, kv, sc = c_size_t(0), c_size_t(0), c_size_t(0)
        _lib.load().specd_context_device_memory(self.handle, ctypes.byref(w), ctypes.byref(kv),
                                                ctypes.byref(sc))
        return {"weights": w.value, "kv": kv.value, "scratch": sc.value}

    def kv_len(self, seq=0):
        return _lib.load().specd_context_kv_len(self.handle, seq)

    def extend(self, seq, tokens, pos=None, visible=None, rows=None, want_logits=True,
               embd=None, embd_rows=None):
        """Runs tokens of one sequence at positions pos (None: kv_len + i) under visibility rows
        (None: causal); returns the logits of `rows` (indices into tokens; None: every row) as an
        (n_rows, n_vocab) float32 array, or None with want_logits=False. embd (n_tokens, n_embd)
        feeds float vectors in place of the token embeddings of the rows embd_rows flags (None:
        every row): a StepPlan's input_embd and input_embd_rows."""
        lib, err = _lib.load(), _lib.Error()
        t = _i32(tokens)
        p = None if pos is None else _i32(pos)
        v = None if visible is None else np.ascontiguousarray(visible, dtype=np.uint8)
        e = None if embd is None else np.ascontiguousarray(embd, dtype=np.float32)
        er = None if embd_rows is None else np.ascontiguousarray(embd_rows, dtype=np.uint8)
        if e is not None and e.shape != (t.size, self.model.info["n_embd"]):
            raise ValueError(f"embd has shape {e.shape}, want ({t.size}, n_embd)")
        b = _lib.SeqBatch(seq=seq, n_tokens=t.size, tokens=_ptr(t, c_int32),
                          pos=_ptr(p, c_int32), visible=_ptr(v, c_uint8),
                          embd=_ptr(e, c_float), embd_rows=_ptr(er, c_uint8))
        out, logits = None, None
        if want_logits:
            r = np.arange(t.size, dtype=np.int32) if rows is None else _i32(rows)
            logits = np.empty((r.size, self.n_vocab), dtype=np.float32)
            out = _lib.ExtendOut(n_rows=r.size, rows=_ptr(r, c_int32),
                                 logits=_ptr(logits, c_float))
        if out is not None and out.n_rows == 0:
            out = None
        check(lib.specd_context_extend(self.handle, ctypes.byref(b), 1,
                                       None if out is None else ctypes.byref(out),
                                       ctypes.byref(err)), err)
        return logits

    def kv_truncate(self, seq, n):
        err = _lib.Error()
        check(_lib.load().specd_context_kv_truncate(self.handle, seq, n, ctypes.byref(err)), err)

    def kv_keep(self, seq, start, rows):
        """Keeps cache rows [0, start) plus the listed absolute rows (ascending, >= start)."""
        err, r = _lib.Error(), _i32(rows)
        check(_lib.load().specd_context_kv_keep(self.handle, seq, start, r.size, _ptr(r, c_int32),
                                                ctypes.byref(err)), err)
