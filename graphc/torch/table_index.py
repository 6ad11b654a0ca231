"""The mapping table's rows of index and mask arithmetic (added to
graphc.torch.table's TABLE when graphc.torch is imported): integer add, sub and
mul (s32 and s64, wrapping as torch's integers), the comparisons and boolean
logic, ``arange`` and ``full`` as constant tensors, and the slicing views
(``slice``, ``select``, ``split``) as StaticSlice."""
from __future__ import annotations

import numpy as np
import torch

from ..interop import as_array
from ..types import DataType
from .build import DTYPES, FLOAT, meta
from .table import ANY, BROADCASTING, _binary, _binary_guard, _users_of_outputs, row

aten = torch.ops.aten
INT = ("s32", "s64")


def _dtype(x):
    """The graphc dtype name of an FX argument: a node's tensor, or a Python number's kind."""
    if isinstance(x, torch.fx.Node):
        return DTYPES.get(meta(x).dtype)
    return "bool" if isinstance(x, bool) else "int" if isinstance(x, int) else "float" if isinstance(x, float) \
        else None


def _operands_guard(n, result_of):
    """Why not (or None) for a binary node whose tensor operands must be of one dtype
    and whose number operands must fit it (an integer tensor takes integers only);
    ``result_of(dtype)``: the result's dtype graphc gives for operands of ``dtype``."""
    args = n.args[:2]
    tensors = {_dtype(a) for a in args if isinstance(a, torch.fx.Node)}
    if not tensors:
        return "no tensor operand"
    if len(tensors) > 1:
        return f"operands of dtypes {sorted(tensors)}"
    (dt,) = tensors
    if any(_dtype(a) == "float" for a in args) and dt not in FLOAT:
        return "a float number with an integer tensor"
    if any(_dtype(a) == "bool" for a in args):
        return "a bool number"
    if dt in INT:
        info = np.iinfo(DataType(dt).np)
        if any(_dtype(a) == "int" and not info.min <= a <= info.max for a in args):
            return f"a number out of {dt}'s range"
    out = DTYPES.get(meta(n).dtype)
    return None if out == result_of(dt) else f"a result of dtype {out} from {dt} operands"


def _number(b, v, like):
    """A number operand: a constant tensor of no dims (broadcasting adds none) of ``like``'s dtype."""
    return b.constant(np.array(v, dtype=like.dtype.np))


# ------------------------------------------------------------------ arithmetic
_TENSOR_ARITH = {aten.add.Tensor: "Add", aten.sub.Tensor: "Subtract", aten.mul.Tensor: "Multiply"}
_ARITH = {**_TENSOR_ARITH, aten.add.Scalar: "Add", aten.sub.Scalar: "Subtract", aten.mul.Scalar: "Multiply"}


def _arith_guard(n):
    if n.kwargs.get("alpha", 1) != 1:
        return "alpha != 1"
    if DTYPES.get(meta(n).dtype) in FLOAT:   # (floats of any kinds, as the Add / ... rows took them)
        if any(_dtype(a) not in FLOAT for a in n.args[:2] if isinstance(a, torch.fx.Node)):
            return "an integer operand with a float result"
        return _binary_guard(n) if n.target in _TENSOR_ARITH else None
    return _operands_guard(n, lambda dt: dt)


@row(list(_ARITH), "Add / Subtract / Multiply (integers wrap as torch's)", dtypes=FLOAT + INT,
     says="alpha = 1; a number operand is a constant tensor; integers: operands of the result's dtype",
     guard=_arith_guard)
def _arith(b, n):
    out = b.out(n)
    if out.dtype.is_float and n.target in _TENSOR_ARITH:   # (as table.py's floating binary ops)
        return _binary(b, n)
    x, y = (b.value(a) if isinstance(a, torch.fx.Node) else _number(b, a, out) for a in n.args[:2])
    return b.op(_ARITH[n.target], [x, y], [out])


# ------------------------------------------------------------------ comparisons, boolean logic
_COMPARE = {"eq": "Equal", "ne": "NotEqual", "ge": "GreaterEqual", "gt": "Greater", "le": "LessEqual",
            "lt": "Less"}
_COMPARE_TARGETS = {getattr(getattr(aten, k), o): kind for k, kind in _COMPARE.items() for o in ("Tensor", "Scalar")}


@row(list(_COMPARE_TARGETS), "Equal / NotEqual / GreaterEqual / Greater / LessEqual / Less",
     dtypes=FLOAT + INT + ("boolean",), says="operands of one float or integer dtype (an integer tensor: integers)",
     guard=lambda n: _operands_guard(n, lambda dt: "boolean" if dt in FLOAT + INT else None))
def _compare(b, n):
    x = b.value(n.args[0])
    y = b.value(n.args[1]) if isinstance(n.args[1], torch.fx.Node) else _number(b, n.args[1], x)
    return b.op(_COMPARE_TARGETS[n.target], [x, y], [b.out(n)])


_LOGICAL = {aten.bitwise_and.Tensor: "LogicalAnd", aten.bitwise_or.Tensor: "LogicalOr",
            aten.logical_and.default: "LogicalAnd", aten.logical_or.default: "LogicalOr",
            aten.bitwise_not.default: "LogicalNot", aten.logical_not.default: "LogicalNot"}


def _logical_guard(n):
    ins = [a for a in n.args[:2] if isinstance(a, torch.fx.Node)]
    if len(ins) != (1 if _LOGICAL[n.target] == "LogicalNot" else 2) or len(n.args) > len(ins):
        return "a number operand"
    return None if all(meta(a).dtype is torch.bool for a in ins) and meta(n).dtype is torch.bool else "not bool"


@row(list(_LOGICAL), "LogicalAnd / LogicalOr / LogicalNot", dtypes=("boolean",), says="bool tensors",
     guard=_logical_guard)
def _logical(b, n):
    return b.op(_LOGICAL[n.target], [b.value(a) for a in n.args[:2] if isinstance(a, torch.fx.Node)], [b.out(n)])


BROADCASTING.update(t for t in list(_COMPARE_TARGETS) + list(_LOGICAL) if t.name().endswith(".Tensor") or
                    t in (aten.logical_and.default, aten.logical_or.default))


# ------------------------------------------------------------------ constants
_SIZED = (aten.full.default, aten.zeros.default, aten.ones.default)   # (their first argument: a size)


def _numbers_guard(n):
    if n.kwargs.get("layout") not in (None, torch.strided):
        return "layout"
    if any(not isinstance(a, (int, float, bool)) for a in (n.args[1:] if n.target in _SIZED else n.args)):
        return "not numbers"
    if n.target in _SIZED and not all(isinstance(d, int) for d in n.args[0]):
        return "not a static size"
    return None


#: what the constant rows become (a region of them alone is left to torch: graphc.torch.lower)
CONSTANT_OPS = "a constant tensor"


def _eager(fn, *args, **kw) -> np.ndarray:
    """A real tensor torch computes (outside the fake tensor mode compiling runs in), as numpy."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():
        return np.array(as_array(fn(*args, **kw)))


@row([aten.arange.start_step, aten.arange.start, aten.arange.default], CONSTANT_OPS, dtypes=FLOAT + INT,
     says="numbers", guard=_numbers_guard)
def _arange(b, n):
    """Its values as torch computes them (start + i * step, in the result's dtype)."""
    return b.constant(_eager(torch.arange, *n.args, dtype=meta(n).dtype))


@row(list(_SIZED), CONSTANT_OPS, dtypes=FLOAT + INT + ("boolean",),
     says="a number and a static size", guard=_numbers_guard)
def _full(b, n):
    t = meta(n)
    v = n.args[1] if n.target is aten.full.default else 0 if n.target is aten.zeros.default else 1
    one = _eager(torch.tensor, v, dtype=t.dtype)   # (the number as torch rounds it to the dtype)
    return b.constant(np.broadcast_to(one, tuple(t.shape)), strides=[0] * t.ndim)


# ------------------------------------------------------------------ slicing views
def _window(n, dim, start, end):
    """StaticSlice's attributes for src[start:end] on ``dim`` (torch's clamping: a
    bound past the dim is the dim, a negative one counts from its end)."""
    size = meta(n.args[0]).shape[dim]
    start, end = (0 if start is None else start), (size if end is None else end)
    start, end = (max(0, min(size, v + size if v < 0 else v)) for v in (start, end))
    return {"begin": [start], "end": [max(start, end)], "axes": [dim]}


def _dim(n, at=1):
    return (n.args[at] if len(n.args) > at else n.kwargs.get("dim", 0)) % meta(n.args[0]).ndim


def _slice_guard(n):
    step = n.args[4] if len(n.args) > 4 else n.kwargs.get("step", 1)
    if step != 1:
        return "step != 1"
    bounds = n.args[2:4]
    return None if all(v is None or isinstance(v, int) for v in bounds) else "bounds not numbers"


#: what the slicing rows become (views in torch: a region of them and views alone is left to torch)
SLICES = ("StaticSlice", "StaticSlice, StaticReshape", "StaticSlice (one per output read)")


@row([aten.slice.Tensor], SLICES[0], dtypes=ANY, says="step 1", guard=_slice_guard)
def _slice(b, n):
    args = list(n.args) + [None] * (4 - len(n.args))
    return b.op("StaticSlice", [b.value(n.args[0])], [b.out(n)], **_window(n, _dim(n), args[2], args[3]))


@row([aten.select.int], SLICES[1], dtypes=ANY,
     guard=lambda n: None if isinstance(n.args[2], int) else "index not a number")
def _select(b, n):
    x, dim, i = b.value(n.args[0]), _dim(n), n.args[2]
    i = i + x.shape[dim] if i < 0 else i
    one = b.op("StaticSlice", [x], [b.tmp(x, [1 if d == dim else s for d, s in enumerate(x.shape)])],
               **_window(n, dim, i, i + 1))
    out = b.out(n)
    return b.op("StaticReshape", [one], [out], shape=list(out.shape), special_zero=False)


def _sizes(n):
    size = meta(n.args[0]).shape[_dim(n, 2)]
    if n.target is aten.split_with_sizes.default:
        return list(n.args[1])
    step = n.args[1]
    return [min(step, size - s) for s in range(0, size, step)] or [0]


@row([aten.split_with_sizes.default, aten.split.Tensor], SLICES[2],
     dtypes=ANY, says="static sizes",
     guard=lambda n: None if all(isinstance(s, int) for s in _sizes(n)) else "sizes not numbers")
def _split(b, n):
    x, dim, used = b.value(n.args[0]), _dim(n, 2), _users_of_outputs(n)
    outs, start = [], 0
    for i, s in enumerate(_sizes(n)):
        outs.append(b.op("StaticSlice", [x], [b.out(n, i)], **_window(n, dim, start, start + s)) if i in used
                    else None)
        start += s
    return tuple(outs)
