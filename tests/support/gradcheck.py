"""Finite-difference gradients of reference functions, in float64, judged by
graphc.tolerances.GRADCHECK."""
from __future__ import annotations

import numpy as np

from graphc.tolerances import GRADCHECK

from .graphs import reference64


def numeric_grad(f, x: np.ndarray, dy: np.ndarray, eps: float = 1e-6) -> np.ndarray:
    """d/dx of sum(dy * f(x)) by central differences; f maps float64 -> float64."""
    x = np.array(x, dtype=np.float64, copy=True)
    g = np.zeros_like(x)
    flat = x.reshape(-1)
    gf = g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        fp = np.sum(dy * f(x))
        flat[i] = old - eps
        fm = np.sum(dy * f(x))
        flat[i] = old
        gf[i] = (fp - fm) / (2 * eps)
    return g


def assert_grad_close(analytic, numeric, what=""):
    """The analytic gradient is the finite-difference one within GRADCHECK (scaled
    by the larger of 1 and the gradient's magnitude; central differences in
    float64 carry about ten times the step's rounding)."""
    rtol, atol = GRADCHECK
    analytic = np.asarray(analytic, dtype=np.float64)
    numeric = np.asarray(numeric, dtype=np.float64)
    assert analytic.shape == numeric.shape, (what, analytic.shape, numeric.shape)
    scale = max(1.0, float(np.max(np.abs(numeric))) if numeric.size else 1.0)
    err = float(np.max(np.abs(analytic - numeric))) if numeric.size else 0.0
    assert err <= atol + rtol * scale * 10, f"{what}: gradient mismatch {err:.3g}"


def grads_match(forward_kind, args, wrt, backward_kind, backward_args, attrs, backward_attrs=None, rng=None):
    """d/d args[wrt] of sum(dy * forward(args)) == backward(backward_args(dy)): the
    float64 references of one op and of its backward op, dy standard-normal (from
    ``rng``, a fixed seed by default)."""
    y = reference64(forward_kind, args, attrs=attrs)
    dy = (np.random.default_rng(0) if rng is None else rng).standard_normal(y.shape)

    def f(v):
        return reference64(forward_kind, [v if i == wrt else a for i, a in enumerate(args)], attrs=attrs)

    numeric = numeric_grad(f, args[wrt], dy)
    analytic = reference64(backward_kind, backward_args(dy), attrs=dict(attrs, **(backward_attrs or {})))
    assert_grad_close(analytic, numeric, what=backward_kind)
