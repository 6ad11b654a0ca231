"""Kernel pieces of linear (de)quantization (the ops: graphc/ops/quant.py; their
lowering rules: graphc/codegen/rules/quant.py).

Quantization computes in float64 like the reference, so kernels match it bit
for bit: ``as_f64`` widens every loaded value, ``emit_quant`` is the one
elementwise pass of an op lowered alone (scales and zero points per tensor,
channel or group), ``pick`` reads a static op's per-channel value.

The integer GEMM operands (issue 14: int8 accumulates exactly, as in s32):
a MatMul's or convolution's operand computed in the kernel by a static s8/u8
Dequantize is :class:`Factored`, so the kernel multiplies the integers and
applies the scales to the sums (``integer_operands``, ``exact_chunk``).
"""
from __future__ import annotations

import math

import numpy as np

from . import ir
from .elementwise import emit_elementwise
from .kernel import ArrayRef
from ..ops.schema import norm_axis
from ..types import DataType, LogicalTensor


class _View(ArrayRef):
    """A kernel argument (or constant array) seen through its own shape and strides;
    floats load as float64 (quantization computes in f64 like the reference)."""

    def load(self, idx) -> ir.Expr:
        return as_f64(super().load(idx))


def as_f64(x: ir.Expr) -> ir.Expr:
    """A value as float64 (quantization computes in f64, as the reference): integers
    too, since numba computes u8 - u8 in uint64 (a src below its zero point wraps)."""
    return x if x.dt == "f64" else ir.f64(x)


def view(ref: ArrayRef, shape, strides) -> _View:
    return _View(ref.name, LogicalTensor(ref.lt.id, ref.dtype, tuple(shape), tuple(strides)))


def grouping(op, shape) -> tuple:
    """How many consecutive src elements along each dim share one scale / zp."""
    qtype = op.attr("qtype")
    if qtype == "per_group":
        return tuple(op.attr("group_shape"))
    if qtype == "per_channel":
        axis = norm_axis(op, op.attr("axis"), len(shape))
        return tuple(1 if k == axis else d for k, d in enumerate(shape))
    return tuple(shape)


def blocked(ref: ArrayRef, groups) -> _View:
    """src / dst with each dim d split into (d / g, g): the outer dim steps over groups."""
    return view(ref, [n for d, g in zip(ref.shape, groups) for n in (d // g, g)],
                [t for s, g in zip(ref.strides, groups) for t in (s * g, s)])


def emit_quant(kb, op, expr, dst: ArrayRef, src: ArrayRef, scales, zps=None) -> None:
    """One elementwise pass ``dst = expr(src, scale, zp)``.  ``scales`` / ``zps`` are
    ArrayRefs (dynamic ops), lists of numbers (static ops) or None (no zps).
    Scales and zps vary over the outer dims of ``blocked`` and broadcast over the
    inner ones; a single value is read (or baked) once before the loop."""
    if 0 in src.shape:
        return
    groups = grouping(op, src.shape)
    ins = [blocked(src, groups)]

    def bind(p):
        """The expression of a fixed value, or the index in ``ins`` of a varying one."""
        if p is None:
            return None
        if not isinstance(p, ArrayRef):
            if len(p) == 1:
                return ir.const(float(p[0]), "f64")
            # a module-level array of constants (see KernelBuilder.const_array)
            arr = kb.const_array([float(v) for v in p], "f64")
            p = ArrayRef(arr.args[0], LogicalTensor(0, DataType.f64, (len(p),)))
        elif math.prod(p.shape) == 1:
            return kb.let(view(p, (), ()).load(0), "p")
        if op.attr("qtype") == "per_group":
            strides = p.strides
        else:
            axis = norm_axis(op, op.attr("axis"), len(groups))
            strides = [p.strides[0] if k == axis else 0 for k in range(len(groups))]
        ins.append(view(p, [n for d, g in zip(src.shape, groups) for n in (d // g, 1)],
                        [t for s in strides for t in (s, 0)]))
        return len(ins) - 1

    s, z = bind(scales), bind(zps)

    def compute(kb_, vals):
        return [expr(vals[0], *(vals[b] if isinstance(b, int) else b for b in (s, z)))]

    emit_elementwise(kb, [blocked(dst, groups)], ins, compute)


def pick(kb, values, index) -> ir.Expr:
    """values[index] in float64: a literal when all values are equal, else a load
    from a constant array (``index`` None: the dim has size 1, index 0)."""
    if len(set(values)) == 1:
        return ir.const(float(values[0]), "f64")
    arr = kb.const_array([float(v) for v in values], "f64")
    table = _View(arr.args[0], LogicalTensor(0, DataType.f64, (len(values),)))
    return table.load(ir.const(0) if index is None else index)


def quantize_expr(x, s, z) -> ir.Expr:
    # adding a zero zp like the reference maps -0.0 to +0.0 (visible in f8)
    return x / s + (0.0 if z is None else z)


def dequantize_expr(x, s, z) -> ir.Expr:
    return x * s if z is None else (x - z) * s


# ------------------------------------------------------- integer GEMM operands
#: the largest magnitude up to which every integer is exact in f32
F32_EXACT = 1 << 24


class Factored:
    """A GEMM operand that is a static Dequantize of integers, ``(q - z) * s``, with
    s per tensor or per channel: the kernel multiplies the integers ``q - z``
    (``ints``, exact in f32) and applies the scales to the sums (``scale``), as
    oneDNN does with int8 accumulated in s32.  ``bound`` is the largest |q - z|
    the quantized dtype allows; ``axis`` the dim the scale (and zero point) runs
    along, None per tensor."""

    def __init__(self, kb, op, values):
        self.op, self.kb, self.values = op, kb, values
        q = op.inputs[0]
        self.q, self.lt = q, op.outputs[0]
        self.axis = None if op.attr("qtype") == "per_tensor" else norm_axis(op, op.attr("axis"), len(q.shape))
        zps = op.attr("zps") or [0]
        info = np.iinfo(q.dtype.np)
        self.zps = zps if any(zps) else None
        self.bound = max(max(abs(int(info.min) - z), abs(int(info.max) - z)) for z in zps)
        self.ints = _Ints(self, True)
        #: the quantized values q themselves (f64), for an int8 GEMM (zero points apart)
        self.raw = _Ints(self, False)

    def scale(self, channel) -> ir.Expr:
        """The scale (f64) at index ``channel`` of the axis (ignored per tensor)."""
        return pick(self.kb, self.op.attr("scales"), None if self.axis is None else channel)

    def argument(self):
        """The quantized tensor q as the kernel argument it is (an ArrayRef: its
        buffer and strides, for a GEMM to read in place), or None when the kernel
        computes q or the argument is a view of another layout."""
        values = self.values
        op = values.producer.get(self.q.id)
        ref = values.refs.get(self.q.id)
        if (op is not None and values.computed(op)) or type(ref) is not ArrayRef or ref.strides is None:
            return None
        return ref

    def zero(self, channel) -> ir.Expr:
        """The zero point (f64) at index ``channel`` of the axis (ignored per tensor)."""
        if self.zps is None:
            return ir.const(0.0, "f64")
        return pick(self.kb, self.zps, None if self.axis is None else channel)


class _Ints:
    """The integers ``q - z`` (``centred``) or ``q`` of a :class:`Factored` operand
    at a multi-index, in f64 (a virtual ref: only ``load_nd``, like the
    PrologueRef it replaces)."""

    def __init__(self, f: Factored, centred: bool):
        self.f, self.centred = f, centred
        self.lt = f.lt

    dtype = property(lambda self: DataType.f32)
    shape = property(lambda self: self.lt.shape)
    strides = property(lambda self: self.lt.strides)

    def load_nd(self, ivars) -> ir.Expr:
        f = self.f
        x = as_f64(f.values.at(f.q.id, f.q, list(ivars), tuple(f.q.shape)))
        if f.zps is None or not self.centred:
            return x
        return x - pick(f.kb, f.zps, None if f.axis is None else ivars[f.axis])


def factored(kb, ref) -> Factored | None:
    """``ref`` as a :class:`Factored` operand when it is computed in the kernel by a
    static s8/u8 Dequantize into f32, else None."""
    values = getattr(ref, "values", None)
    producer = getattr(values, "producer", None)
    if producer is None:
        return None
    op = producer.get(ref.lt.id)
    if op is None or op.kind != "Dequantize" or op.outputs[0].dtype is not DataType.f32:
        return None
    if not op.inputs[0].dtype.is_int:
        return None
    return Factored(kb, op, values)


def integer_operands(kb, src, weights, out_axis: int):
    """(src, weights) as :class:`Factored` operands of an integer GEMM: both static
    s8/u8 Dequantizes computed in the kernel, src per tensor and the weights per
    tensor or along ``out_axis`` (their dim that becomes dst's channel), so that
    the scales factor out of the sums; else None."""
    fa, fb = factored(kb, src), factored(kb, weights)
    if fa is None or fb is None or fa.axis is not None or fb.axis not in (None, out_axis):
        return None
    return fa, fb


def exact_chunk(a: Factored, b: Factored) -> int:
    """The longest run of K whose sum of products of ``a`` and ``b`` integers stays
    exact in an f32 GEMM (every partial sum at most 2^24 in magnitude)."""
    return max(1, F32_EXACT // (a.bound * b.bound))
