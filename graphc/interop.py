"""Tensors of other libraries as numpy arrays over the same memory, and back.

graphc's runtime works on numpy arrays whose dtype is the storage type of a
graphc dtype (``DataType.np``: ml_dtypes types for bf16 and the f8 formats).
``as_array`` takes a numpy array, a torch tensor or any object with
``__dlpack__`` and returns such an array sharing the object's memory and
keeping its strides: no copy.  torch's bf16 and f8 tensors, which numpy's
DLPack import refuses, are seen as integers of their width (a torch view),
then as numpy, then as the ml_dtypes type (a numpy view).  ``to_torch`` is the
way back: a numpy array (ml_dtypes types included) as a torch tensor over the
same memory.

torch is imported only when a torch tensor is met (graphc imports without it):
an object is a torch tensor only if torch is already imported."""
from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from .errors import InvalidArguments

#: torch dtype name -> (torch integer dtype name of its width, numpy storage type),
#: for the dtypes torch cannot hand to numpy itself
_VIA_INTEGER = {
    "bfloat16": ("int16", ml_dtypes.bfloat16),
    "float8_e4m3fn": ("uint8", ml_dtypes.float8_e4m3fn),
    "float8_e5m2": ("uint8", ml_dtypes.float8_e5m2),
    "float8_e8m0fnu": ("uint8", ml_dtypes.float8_e8m0fnu),
}
#: numpy storage type -> (torch dtype name, numpy integer type of its width), the way back
_FROM_STORAGE = {np.dtype(np_t): (name, np.dtype(np.uint16 if via == "int16" else np.uint8))
                 for name, (via, np_t) in _VIA_INTEGER.items()}


def is_torch_tensor(obj) -> bool:
    """``obj`` is a torch tensor (False without importing torch if it is not loaded)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def as_array(obj, what: str = "tensor"):
    """``obj`` as a numpy array over the same memory with the same strides: a
    numpy array as it is, a torch tensor (detached; CPU only) or any
    ``__dlpack__`` object; anything else is returned unchanged (the caller's
    checks say what is wrong with it).  ``what`` names it in errors."""
    if isinstance(obj, np.ndarray):
        return obj
    if is_torch_tensor(obj):
        return _from_torch(obj, what)
    if hasattr(obj, "__dlpack__"):
        try:
            return np.from_dlpack(obj)
        except (RuntimeError, TypeError, BufferError, ValueError) as e:
            # numpy's import refuses bf16 and f8: torch's takes them (when torch is installed)
            try:
                import torch
            except ImportError:
                raise InvalidArguments(f"{what} cannot be read through DLPack", expected="a CPU tensor of a "
                                       "dtype numpy reads (bf16 and f8 need torch installed)",
                                       found=f"{type(obj).__name__}: {e}") from None
            return _from_torch(torch.from_dlpack(obj), what)
    return obj


def _from_torch(t, what: str) -> np.ndarray:
    if t.device.type != "cpu":
        raise InvalidArguments(f"{what} is a torch tensor on {t.device}", expected="a CPU tensor",
                               found=str(t.device))
    t = t.detach()
    if t.is_conj() or t.is_neg():
        raise InvalidArguments(f"{what} is a torch tensor with a lazy conjugate or negation bit: its memory does "
                               "not hold its values", expected="a tensor after resolve_conj() / resolve_neg()",
                               found=str(t.dtype))
    name = str(t.dtype).rpartition(".")[2]
    via = _VIA_INTEGER.get(name)
    try:
        if via is None:
            return t.numpy()
        import torch
        return t.view(getattr(torch, via[0])).numpy().view(via[1])
    except (TypeError, RuntimeError) as e:
        raise InvalidArguments(f"{what} is a torch tensor numpy cannot share", expected="a graphc dtype",
                               found=f"{t.dtype}: {e}") from None


def to_torch(a: np.ndarray):
    """The numpy array ``a`` (ml_dtypes bf16 and f8 included) as a torch tensor
    over the same memory and strides (a read-only array gives a tensor torch may
    write: the caller must not)."""
    import torch
    a = np.asarray(a)
    back = _FROM_STORAGE.get(a.dtype)
    if back is not None:
        return _torch_from_numpy(a.view(back[1])).view(getattr(torch, back[0]))
    return _torch_from_numpy(a)


def _torch_from_numpy(a: np.ndarray):
    import torch
    if a.flags.writeable:
        return torch.from_numpy(a)
    import warnings
    with warnings.catch_warnings():   # (torch warns that it cannot mark tensors read-only)
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(a)
