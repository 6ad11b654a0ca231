"""Data for tests against PyTorch: graphc dtype names to storage types, random
data stored in them, and exact torch copies of numpy arrays and back (torch
computes the oracle from the very values graphc reads)."""
from __future__ import annotations

import numpy as np

from graphc.types import DataType


class _Storage(dict):
    """graphc dtype name -> numpy storage type (ml_dtypes for bf16, f8, s4, u4)."""

    def __missing__(self, dt):
        return self.setdefault(dt, DataType.parse(dt).np)


NP = _Storage()


def data(rng, shape, dt="f32", positive=False):
    """Standard-normal data (|.| + 0.5 when positive) stored as
    ``dt`` (a graphc dtype name or a numpy dtype); complex parts for c64."""
    np_dt = NP[dt] if isinstance(dt, str) else np.dtype(dt)
    if np_dt == np.complex64:
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
    x = rng.standard_normal(shape)
    if positive:
        x = np.abs(x) + 0.5
    return x.astype(np_dt)


def uniform(shape, dt, seed, low=-2.0, high=2.0):
    """Data uniform in [low, high) stored as graphc dtype ``dt`` (s32, s64: integers in
    [-1000, 1000)), from a generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    if dt in ("s32", "s64"):
        return rng.integers(-1000, 1000, size=shape).astype(NP[dt])
    return rng.uniform(low, high, size=shape).astype(NP[dt])


def _torch():
    import torch
    return torch


def torch_dtype(dt):
    """The torch dtype of graphc dtype ``dt``."""
    torch = _torch()
    return {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
            "s32": torch.int32, "s64": torch.int64, "s8": torch.int8, "u8": torch.uint8, "boolean": torch.bool,
            "c64": torch.complex64}[DataType.parse(dt).value]


def to_torch(a, dt=None, grad=False):
    """A torch tensor with exactly the values of ``a``: of ``a``'s own dtype (bf16
    through f32), or with ``dt`` of that graphc dtype (the values read as f32
    first); requires_grad when ``grad``."""
    torch = _torch()
    a = np.asarray(a)
    if dt is not None:
        t = torch.from_numpy(a.astype(np.float32)).to(torch_dtype(dt))
    elif a.dtype == NP["bf16"]:
        t = torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
    else:
        t = torch.from_numpy(np.ascontiguousarray(a))
    return t.requires_grad_(grad) if grad else t


def to_numpy(t, dtype=None):
    """A torch tensor as numpy (bf16 as float32), or cast to numpy ``dtype``."""
    torch = _torch()
    t = t.detach()
    a = t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()
    return a if dtype is None else a.astype(dtype)


def t64(a, grad=False):
    """A float64 torch tensor holding exactly the values of ``a``."""
    return _torch().tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def n64(t):
    """A torch tensor as a float64 numpy array."""
    return to_numpy(t, np.float64)
