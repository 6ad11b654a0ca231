"""Views: ops that change how a buffer is seen, never the bytes in it.

StaticReshape, StaticTranspose and a Reorder into the layout it reads are
*views* when the strides allow: their dst is the src buffer seen with another
shape and other strides (as ``np.reshape`` / ``np.transpose`` give when they
need no copy).  graphc moves no data for them:

* a partition of views only runs no kernel: it returns a numpy view of its
  input (graphc/compiler/executables/view.py);
* inside a fused partition, a view of a partition input is read through the
  composed strides, and a computed value whose only use is a view chain into a
  partition output is stored through the inverse strides of that output
  (passes/legality.py decides, graphc/lowering.py binds the buffers);
* a tensor with layout ``any`` gets the strides that make the views around it
  free (graphc/compiler/any_layout.py).

This module is the one place that knows which ops are views and what strides a
view has.
"""
from __future__ import annotations

import math

import numpy as np

#: the op kinds that may be views (a Reorder only into the layout it reads)
VIEW_KINDS = ("StaticReshape", "StaticTranspose", "Reorder")


def may_be_view(op) -> bool:
    """``op`` is a view when the strides allow: a reshape or transpose, or a
    Reorder whose dst strides are its src's (or not fixed: layout ``any``)."""
    if op.kind in ("StaticReshape", "StaticTranspose"):
        return True
    if op.kind != "Reorder":
        return False
    src, dst = op.inputs[0], op.outputs[0]
    return dst.strides is None or (src.strides is not None and same_layout(dst.shape, src.strides, dst.strides))


def is_view_chain(ops) -> bool:
    """``ops`` are views one after another, each reading the one before."""
    return bool(ops) and all(may_be_view(o) for o in ops) and \
        all(b.inputs[0].id == a.outputs[0].id for a, b in zip(ops, ops[1:]))


def same_layout(shape, a, b) -> bool:
    """Strides ``a`` and ``b`` place every element of ``shape`` alike (dims of size
    1 never move, so their strides do not matter)."""
    return all(d <= 1 or x == y for d, x, y in zip(shape, a, b))


def reshape_strides(shape, strides, new_shape):
    """Strides viewing the elements of (``shape``, ``strides``) in row-major order
    as ``new_shape`` without a copy (numpy's no-copy reshape), or None."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    new = list(new_shape)
    if math.prod(shape) != math.prod(new):
        return None
    if math.prod(new) == 0:
        return tuple(0 for _ in new)
    out = [0] * len(new)
    oi = ni = 0
    while ni < len(new) and oi < len(old):
        np_, op_ = new[ni], old[oi][0]
        nj, oj = ni + 1, oi + 1
        while np_ != op_:
            if np_ < op_:
                np_ *= new[nj]
                nj += 1
            else:
                op_ *= old[oj][0]
                oj += 1
        for k in range(oi, oj - 1):
            if old[k][1] != old[k + 1][0] * old[k + 1][1]:
                return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, oi = nj, oj
    return tuple(out)


def transpose_order(op) -> tuple:
    rank = op.inputs[0].ndim
    return tuple(o + rank if o < 0 else o for o in op.attr("order"))


def view_strides(op, shape, strides, forward=True):
    """The strides of a view ``op``'s dst seeing its src laid out as (``shape``,
    ``strides``) (``forward``), or of its src seeing its dst so laid out (not
    ``forward``: a value stored through the view); None when no view exists."""
    src, dst = tuple(op.inputs[0].shape), tuple(op.outputs[0].shape)
    if op.kind == "Reorder":
        return tuple(strides)
    if op.kind == "StaticReshape":
        return reshape_strides(shape, strides, dst if forward else src)
    order = transpose_order(op)
    if forward:
        return tuple(strides[k] for k in order)
    back = [0] * len(order)
    for i, k in enumerate(order):
        back[k] = strides[i]
    return tuple(back)


def chain_strides(ops, strides, forward=True):
    """The strides after the view ``ops`` (a chain, in order) starting from
    ``strides`` of the first op's src (``forward``), or, not ``forward``, the
    strides of the first op's src given ``strides`` of the last op's dst; None
    when some step is no view."""
    if forward:
        for op in ops:
            if strides is None:
                return None
            strides = view_strides(op, tuple(op.inputs[0].shape), strides)
        return strides
    for op in reversed(ops):
        if strides is None:
            return None
        strides = view_strides(op, tuple(op.outputs[0].shape), strides, forward=False)
    return strides


def as_view(arr: np.ndarray, shape, strides) -> np.ndarray:
    """``arr``'s buffer (from its first element) seen with ``shape`` and element
    ``strides``: shares memory with ``arr``, writeable when ``arr`` is."""
    dt = arr.dtype
    if math.prod(shape) == 0:
        return np.empty(shape, dtype=dt)
    if arr.flags.c_contiguous:   # (an ndarray over its buffer, which numpy checks the view fits: 1/10 of as_strided)
        return np.ndarray(tuple(shape), dt, buffer=arr, strides=[s * dt.itemsize for s in strides])
    # as_strided does not take ml_dtypes types (bf16, f8): stride the bits
    bits = arr.view(np.dtype(f"u{dt.itemsize}")) if dt.itemsize in (1, 2, 4, 8) else arr
    v = np.lib.stride_tricks.as_strided(bits, shape=tuple(shape), strides=[s * dt.itemsize for s in strides])
    return v.view(dt) if v.dtype != dt else v


__all__ = ["VIEW_KINDS", "may_be_view", "is_view_chain", "same_layout", "reshape_strides", "transpose_order",
           "view_strides", "chain_strides", "as_view"]
