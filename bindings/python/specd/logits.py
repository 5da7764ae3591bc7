"""Logits blocks from numpy arrays and torch tensors, borrowed zero-copy as specd_logits.

A block is 2-D (rows x padded vocabulary): elements within a row must be contiguous, rows may be
any stride apart (>= n_vocab; the columns from n_vocab on are padding specd never reads).
dtypes: float32, float16, and bfloat16 given as a uint16 view of the bits (numpy has no bf16),
ml_dtypes' bfloat16, or torch.bfloat16. Torch tensors may live on a CUDA device: specd verifies
them there or copies them to the host through the CUDA runtime the process has loaded; without
one the call fails with SPECD_E_UNSUPPORTED. specd reads a device block on CUDA's legacy default
stream, which does not wait for torch's non-blocking side streams: a tensor made under
`torch.cuda.stream(s)` is waited for (s is synchronized) before specd is given it."""
import numpy as np

from . import _lib

F32, F16, BF16 = 0, 1, 2
HOST, CUDA = 0, 1

_NUMPY_DTYPES = {np.dtype(np.float32): F32, np.dtype(np.float16): F16, np.dtype(np.uint16): BF16}


def _from_numpy(a):
    dtype = _NUMPY_DTYPES.get(a.dtype)
    if dtype is None and a.dtype.name == "bfloat16":  # ml_dtypes
        dtype = BF16
    if dtype is None:
        raise TypeError(f"logits dtype {a.dtype}: want float32, float16 or bfloat16 "
                        "(as a uint16 view)")
    item = a.dtype.itemsize
    if a.strides[1] != item or a.strides[0] % item or a.strides[0] < 0:
        raise ValueError("logits: each row must be contiguous and rows evenly spaced "
                         f"(strides {a.strides})")
    stride = a.strides[0] // item if a.shape[0] > 1 else a.shape[1]
    return a.ctypes.data, stride, dtype, HOST


def _from_torch(t):
    import torch
    dtypes = {torch.float32: F32, torch.float16: F16, torch.bfloat16: BF16}
    if t.dtype not in dtypes:
        raise TypeError(f"logits dtype {t.dtype}: want float32, float16 or bfloat16")
    if t.stride(1) != 1:
        raise ValueError(f"logits: each row must be contiguous (strides {t.stride()})")
    device = {"cpu": HOST, "cuda": CUDA}.get(t.device.type)
    if device is None:
        raise ValueError(f"logits on device {t.device}: specd reads host or CUDA memory")
    stride = t.stride(0) if t.shape[0] > 1 else t.shape[1]
    if device == CUDA:
        _wait_for_torch_stream(torch, t.device)
    return t.data_ptr(), stride, dtypes[t.dtype], device


def _wait_for_torch_stream(torch, device):
    """Kernels on torch's default stream are ordered before specd's reads (the legacy default
    stream); a side stream's are not: wait for it."""
    stream = torch.cuda.current_stream(device)
    if stream != torch.cuda.default_stream(device):
        stream.synchronize()


def as_specd_logits(block, n_vocab):
    """(specd_logits, owner): owner is the object whose memory it points into; keep it alive for
    the call."""
    if type(block).__module__.startswith("torch"):
        t = block if block.dim() == 2 else block.reshape(1, -1)
        ptr, stride, dtype, device = _from_torch(t)
        n_rows, width = t.shape
    else:
        a = np.asarray(block)
        if a.ndim == 1:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise ValueError(f"logits of {a.ndim} dimensions: want (rows, vocabulary)")
        ptr, stride, dtype, device = _from_numpy(a)
        n_rows, width = a.shape
        t = a
    if width < n_vocab:
        raise ValueError(f"logits rows of {width} elements, the vocabulary has {n_vocab}")
    return _lib.Logits(data=ptr, row_stride=stride, n_rows=n_rows, dtype=dtype,
                       device=device), t


def bf16_bits(a):
    """float32 array -> its bfloat16 values' bits as uint16 (round to nearest even), the layout
    specd reads for BF16 logits. -inf stays -inf."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = u + np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def bf16_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)
