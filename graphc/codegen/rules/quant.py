"""Lowering of the (de)quantization ops (graphc/ops/quant.py).

Kernels compute in float64 like the reference, so they match it bit for bit:
integer stores round half to even and saturate, narrow float stores round to
odd in f32 first (as graphc.numerics does) and then to nearest even.  Per-tensor
Quantize and Dequantize are elementwise, so fused kernels substitute their
expression (per-channel ones need the channel index, which an elementwise
expression does not see: they lower alone).  Per-channel static ops and the
dynamic ops are *indexed*: a fused kernel that knows the multi-index (the GEMM
packing loop) computes them in registers, reading a per-group scale at the
index divided by the group shape (the weight-only-quantized MatMul).  The
kernel pieces they share with the integer GEMMs are graphc/codegen/quant.py.
"""
from __future__ import annotations

from .. import ir
from ..fused_values import NotFusable
from ..kernel import as_stored, offset_expr
from ..quant import as_f64, dequantize_expr, emit_quant, pick, quantize_expr
from ...ops.schema import norm_axis
from ...types import LogicalTensor
from . import ElementwiseRule


class _StaticQuant(ElementwiseRule):
    """Quantize / Dequantize: scales and zero points as attributes.  Per tensor,
    an elementwise expression of src (fused kernels substitute it)."""

    #: quantize_expr or dequantize_expr
    formula = staticmethod(quantize_expr)

    def expr(self, op, x):
        """The dst value in float64 (as the reference), as the dst dtype holds it
        (saturated and rounded: what a consumer in a fused kernel must see)."""
        if not op.schema.pointwise(op):
            raise NotFusable()
        zps = op.attr("zps")
        z = None if zps is None or (op.schema.quantized == "src" and zps[0] == 0) else float(zps[0])
        v = self.formula(as_f64(x), ir.const(float(op.attr("scales")[0]), "f64"),
                         None if z is None else ir.const(z, "f64"))
        return as_stored(v, op.outputs[0].dtype)

    def source_at(self, op, kb, ivars, x):
        """``expr`` with the scale and zero point of the channel ``ivars`` names."""
        channel = ivars[norm_axis(op, op.attr("axis"), len(op.inputs[0].shape))]
        zps = op.attr("zps")
        z = None if zps is None or not any(zps) else pick(kb, zps, channel)
        v = self.formula(as_f64(x), pick(kb, op.attr("scales"), channel), z)
        return as_stored(v, op.outputs[0].dtype)

    def lower(self, op, kb, ins, outs, values):
        emit_quant(kb, op, self.formula, outs[0], ins[0], op.attr("scales"), op.attr("zps"))


class Quantize(_StaticQuant):
    kinds = ("Quantize",)


class Dequantize(_StaticQuant):
    kinds = ("Dequantize",)
    formula = staticmethod(dequantize_expr)


class _DynamicQuant(ElementwiseRule):
    """DynamicQuantize / DynamicDequantize: scales and zero points as inputs.

    Not pointwise (the scale is picked by the element's index), but indexed:
    a fused kernel that knows the multi-index (the GEMM packing loop of a
    MatMul whose weights this dequantizes) computes it in registers
    (``source_at``); alone it lowers to one elementwise pass (``emit_quant``)."""

    #: quantize_expr or dequantize_expr
    formula = staticmethod(quantize_expr)

    def lower(self, op, kb, ins, outs, values):
        emit_quant(kb, op, self.formula, outs[0], *ins)

    # -- computed in a fused kernel's registers where the multi-index is known
    def expr(self, op, *values):
        raise NotFusable()   # never pointwise: see source_at

    def source_at(self, op, kb, ivars, x, s, z=None):
        """``formula`` at multi-index ``ivars`` with the scale and zp read there
        (per group: at ``ivars // group_shape``), computed in float64 as the reference."""
        if op.attr("qtype") == "per_group":
            groups = op.attr("group_shape")
            s = _regroup(s, op.inputs[1], ivars, groups)
            z = None if z is None else _regroup(z, op.inputs[2], ivars, groups)
        return as_stored(self.formula(as_f64(x), as_f64(s), None if z is None else as_f64(z)), op.outputs[0].dtype)


class DynamicQuantize(_DynamicQuant):
    kinds = ("DynamicQuantize",)


class DynamicDequantize(_DynamicQuant):
    kinds = ("DynamicDequantize",)
    formula = staticmethod(dequantize_expr)


def _regroup(value: ir.Expr, lt: LogicalTensor, ivars, groups) -> ir.Expr:
    """``value``, the load of a scales / zps element at the dst index ``ivars``
    (widened by its dtype's conversion), moved to the element of the group that
    index is in.  Raises NotFusable unless ``value`` reads one kernel argument
    once (a partition input: the catalog's patterns take scales from outside)."""
    loads = [e for e in ir.walk(value) if e.op == "load"]
    if len(loads) != 1:
        raise NotFusable()
    idx = [None if v is None else (v if g == 1 else v // g) for v, g in zip(ivars, groups)]
    moved = ir.load(loads[0].args[0], ir.u64(offset_expr(idx, lt.shape, lt.strides)))

    def rebuild(e):
        if e is loads[0] or e == loads[0]:
            return moved
        if not e.children:
            return e
        args = tuple(rebuild(a) if isinstance(a, ir.Expr) else
                     tuple(rebuild(x) if isinstance(x, ir.Expr) else x for x in a) if isinstance(a, tuple) else a
                     for a in e.args)
        return ir.Expr(e.op, args, e.dt)
    return rebuild(value)
