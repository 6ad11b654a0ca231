"""Loop helpers for lowerings: flat index splits, row-major loop nests
and offsets from explicit strides."""
from __future__ import annotations

import math
from contextlib import contextmanager


def unravel(kb, flat: str, shape) -> list:
    """Emit lines splitting the row-major index ``flat`` over ``shape``; returns one
    index name per dim (None for size-1 dims, whose index is 0)."""
    ivars = [None] * len(shape)
    big = [k for k, d in enumerate(shape) if d != 1]
    if not big:
        return ivars
    q = kb.fresh("q")
    kb.line(f"{q} = {flat}")
    for k in reversed(big):
        ivars[k] = kb.fresh("i")
        if k == big[0]:
            kb.line(f"{ivars[k]} = {q}")
        else:
            # fresh names: numba's parfors reject overwriting what aliases the prange index
            kb.line(f"{ivars[k]} = {q} % {shape[k]}")
            q, prev = kb.fresh("q"), q
            kb.line(f"{q} = {prev} // {shape[k]}")
    return ivars


@contextmanager
def index_nest(kb, shape, parallel: bool):
    """Loops over every multi-index of ``shape``: a flat loop over the leading dims
    (prange when ``parallel``; none when they hold one row) around a loop over the
    last dim (prange when ``parallel`` and there is one row).  Yields one index
    name per dim (None for size-1 dims)."""
    shape = list(shape)
    last = shape[-1] if shape else 1
    rows = math.prod(shape[:-1])
    with _rows(kb, rows, parallel) as r:
        ivars = unravel(kb, r, shape[:-1]) if r else [None] * (len(shape) - 1)
        if last == 1:
            yield ivars + [None] * (len(shape) - len(ivars))
            return
        j = kb.fresh("j")
        with kb.loop(j, last, parallel and rows == 1):
            yield ivars + [j]


@contextmanager
def _rows(kb, rows: int, parallel: bool):
    """The loop over the rows of an index_nest (yields its index), or nothing (None) for one row."""
    if rows == 1:
        yield None
        return
    r = kb.fresh("r")
    with kb.loop(r, rows, parallel):
        yield r


@contextmanager
def memory_order_nest(kb, shape, strides, parallel: bool):
    """:func:`index_nest` over ``shape`` visiting dims in decreasing ``strides``
    (innermost: the smallest); yields the index names in ``shape``'s dim order."""
    order = sorted(range(len(shape)), key=lambda k: -strides[k])
    with index_nest(kb, [shape[k] for k in order], parallel) as nest_vars:
        ivars = [None] * len(shape)
        for k, v in zip(order, nest_vars):
            ivars[k] = v
        yield ivars


def linear(ivars, strides, base: str = "") -> str:
    """``base + i0 * s0 + ...`` skipping zero strides and None indices; "0" when empty."""
    terms = [base] if base and base != "0" else []
    terms += [v if s == 1 else f"{v} * {s}" for v, s in zip(ivars, strides) if s and v is not None]
    return " + ".join(terms) if terms else "0"
