"""Loop helpers for lowerings: flat index splits, row-major loop nests,
offsets from explicit strides, bounded indices and scratch arrays."""
from __future__ import annotations

import math
from contextlib import contextmanager

from . import ir
from .kernel import KernelBuilder, _ix


def unravel(kb, flat, shape) -> list:
    """Emit lets splitting the row-major index ``flat`` over ``shape``; returns one
    index expression per dim (None for size-1 dims, whose index is 0)."""
    ivars = [None] * len(shape)
    big = [k for k, d in enumerate(shape) if d != 1]
    if not big:
        return ivars
    q = kb.let(_ix(flat), "q")
    for k in reversed(big):
        if k == big[0]:
            ivars[k] = kb.let(q, "i")
        else:
            # fresh names: numba's parfors reject overwriting what aliases the prange index
            ivars[k] = kb.let(q % shape[k], "i")
            q = kb.let(q // shape[k], "q")
    return ivars


@contextmanager
def index_nest(kb, shape, parallel: bool):
    """Loops over every multi-index of ``shape``: a flat loop over the leading dims
    (prange when ``parallel``; none when they hold one row) around a loop over the
    last dim (prange when ``parallel`` and there is one row).  Yields one index
    expression per dim (None for size-1 dims)."""
    shape = list(shape)
    last = shape[-1] if shape else 1
    rows = math.prod(shape[:-1])
    with _rows(kb, rows, parallel) as r:
        ivars = unravel(kb, r, shape[:-1]) if r is not None else [None] * (len(shape) - 1)
        if last == 1:
            yield ivars + [None] * (len(shape) - len(ivars))
            return
        with kb.for_(last, "j", parallel and rows == 1) as j:
            yield ivars + [j]


@contextmanager
def _rows(kb, rows: int, parallel: bool):
    """The loop over the rows of an index_nest (yields its index), or nothing (None) for one row."""
    if rows == 1:
        yield None
        return
    with kb.for_(rows, "r", parallel) as r:
        yield r


@contextmanager
def memory_order_nest(kb, shape, strides, parallel: bool):
    """:func:`index_nest` over ``shape`` visiting dims in decreasing ``strides``
    (innermost: the smallest); yields the index expressions in ``shape``'s dim order."""
    order = sorted(range(len(shape)), key=lambda k: -strides[k])
    with index_nest(kb, [shape[k] for k in order], parallel) as nest_vars:
        ivars = [None] * len(shape)
        for k, v in zip(order, nest_vars):
            ivars[k] = v
        yield ivars


def linear(ivars, strides, base=None) -> ir.Expr:
    """``base + i0 * s0 + ...`` skipping zero strides and None indices; 0 when empty."""
    total = _ix(base) if base is not None and not (isinstance(base, str) and base in ("", "0")) else None
    for v, s in zip(ivars, strides):
        if not s or v is None:
            continue
        t = _ix(v) if s == 1 else _ix(v) * s
        total = t if total is None else total + t
    return total if total is not None else ir.const(0)


def aligned(ivars, shape, tshape) -> list:
    """The index of a tensor of ``tshape`` broadcast (numpy rules) into ``shape``
    at ``ivars``: trailing dims align, size-1 dims at 0 (None)."""
    lead = len(shape) - len(tshape)
    return [None if d == 1 else ivars[lead + k] for k, d in enumerate(tshape)]


def i64(v: ir.Expr) -> ir.Expr:
    """``np.int64(v)`` even for an int-typed name (a prange index LLVM cannot bound)."""
    return ir.Expr("cast", ("int", v), "int")


def min_of(*xs) -> ir.Expr:
    return ir.call("min", *xs)


def clamp(v, hi: int) -> ir.Expr:
    return min_of(ir.call("max", v, 0), hi)


def let_array(kb: KernelBuilder, target: ir.Expr, shape, fill=None) -> ir.Let:
    """Bind ``target`` (an array variable) to a new scratch array (see KernelBuilder.alloc);
    returns the statement."""
    elem = target.dt[4:]
    t = ir.typename(elem)
    if fill is None:
        value = ir.call("np.empty", shape, t)
    else:
        value = ir.call("np.zeros", shape, t)
    stmt = ir.Let(target, value)
    kb.emit(stmt)
    return stmt


def window_index(o, k: int, s: int, d: int, b: int, size: int, osize: int, inside: bool = False):
    """(index, condition) of tap ``k`` of the window at output ``o`` along one axis
    (stride ``s``, dilation ``d``, pads_begin ``b``; ``size`` the big side's,
    ``osize`` the outputs' count): the big-side index ``o * s + k * d - b``, clamped
    into [0, size) where some output's tap leaves it (a load there is always
    valid), and the condition that it lies inside (None: for every output, or
    when the caller knows it, ``inside``)."""
    p = o * s + (k * d - b)
    lo_ok, hi_ok = k * d - b >= 0, (osize - 1) * s + k * d - b < size
    if (lo_ok and hi_ok) or inside:
        return p, None
    ok = None if lo_ok else p >= 0
    if not hi_ok:
        ok = (p < size) if ok is None else ok & (p < size)
    return ir.call("min", ir.call("max", p, 0), size - 1), ok
