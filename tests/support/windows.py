"""Sliding windows (convolution, pooling) against PyTorch: random float64 data, pads
in F.pad's order, ONNX SAME pads, and channels-last views of channels-first arrays."""
from __future__ import annotations

import numpy as np


def randn_from(seed):
    """``randn(*shape)``: standard-normal float64 arrays, one generator seeded with ``seed``."""
    rng = np.random.default_rng(seed)
    return lambda *shape: rng.standard_normal(shape)


def torch_pads(pb, pe):
    """F.pad's argument: last spatial dim first."""
    return [p for b, e in zip(reversed(pb), reversed(pe)) for p in (b, e)]


def same_pads(size, k, s, d, mode):
    """ONNX SAME padding of a forward window scan: out = ceil(size / s)."""
    total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
    lo = total // 2 if mode == "SAME_UPPER" else total - total // 2
    return lo, total - lo


def nxc(a):
    return np.moveaxis(a, 1, -1)


def from_nxc(a):
    return np.moveaxis(a, -1, 1)
