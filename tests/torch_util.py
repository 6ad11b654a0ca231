"""Helpers for tests against PyTorch: storage-typed random data and exact
float64 torch copies of it (torch computes the oracle in float64 from the very
values graphc reads)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

STORAGE = {"f32": np.float32, "f16": np.float16, "bf16": np.dtype(ml_dtypes.bfloat16)}


def data(rng, shape, dt="f32", positive=False):
    """Standard-normal data (|.| + 0.5 when positive) stored as ``dt``."""
    x = rng.standard_normal(shape)
    if positive:
        x = np.abs(x) + 0.5
    return x.astype(STORAGE[dt])


def t64(a, grad=False):
    """A float64 torch tensor holding exactly the values of ``a``."""
    import torch
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def n64(t):
    """A torch tensor as a float64 numpy array."""
    return t.detach().numpy().astype(np.float64)
