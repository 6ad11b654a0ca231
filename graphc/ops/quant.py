"""Linear (de)quantization ops (docs: Quantize.md, Dequantize.md,
DynamicQuantize.md, DynamicDequantize.md).

Quantize computes ``src / scale + zp`` and Dequantize ``(src - zp) * scale``
in float64; the executor then rounds once to the dst dtype (integers: round
half to even, then saturate).  Scales and zero points apply per tensor (one
value), per channel (one value per index of ``axis``) or, for
DynamicDequantize, per group (one value per ``group_shape`` block of src).
The static ops take them as attributes, the dynamic ops as input tensors.

Per-tensor Quantize and Dequantize are pointwise (each dst element from its
src element alone); per-channel static ops and the dynamic ops are *indexed*
(dst at a multi-index from src there and the index).  Their lowering is
graphc/codegen/rules/quant.py.

Beyond the doc's table, DynamicDequantize takes oneDNN's MX element formats
(f4_e2m1, f4_e3m0 src, no zero points) with e8m0 scales; a scale or zero point
may be a host_scalar tensor (one value).
"""
from __future__ import annotations

import math

import numpy as np

from ..errors import InvalidGraphOp, RuntimeFault
from ..types import DataType, PropertyType, f4_e3m0_decode
from .common import Elementwise
from .schema import Attr, DtypeTable, In, Out, all_positive, bad_shape, dims_equal, norm_axis

QTYPE = Attr("qtype", "string", "per_tensor", choices=("per_tensor", "per_channel"))
AXIS = Attr("axis", "s64", 1, doc="the channel axis of per_channel (de)quantization")
F8 = ("f8_e4m3", "f8_e5m2")


def param_shape(op, src_shape) -> tuple | None:
    """The shape scales / zps must have for src of ``src_shape`` (-1 for
    unknown dims), or None for per_tensor (any shape of one element)."""
    qtype = op.attr("qtype")
    if qtype == "per_channel":
        return (src_shape[norm_axis(op, op.attr("axis"), len(src_shape))],)
    if qtype == "per_group":
        groups = op.attr("group_shape")
        if groups is None:
            raise InvalidGraphOp("per_group quantization needs a group shape", op=op,
                                 where="attribute 'group_shape'", expected="an s64 list, one entry per src dim")
        if len(groups) != len(src_shape):
            raise InvalidGraphOp("group_shape must have one entry per src dim", op=op,
                                 where="attribute 'group_shape'", expected=len(src_shape), found=len(groups))
        return tuple(-1 if d == -1 else d // g for d, g in zip(src_shape, groups))
    return None


def fits(shape, expected, one=False) -> bool:
    """Does a scales / zps shape agree with ``param_shape``'s answer (-1 dims agree with anything)?
    ``one``: a 1-D tensor of one element fits too (oneDNN's per_channel DynamicDequantize zero
    points: "zps should be 1 or equals to scales size", one zero point for every channel)."""
    if expected is None or one and len(shape) == 1 and dims_equal(shape[0], 1):
        return -1 in shape or math.prod(shape) == 1
    return len(shape) == len(expected) and all(map(dims_equal, shape, expected))


def one_zp(op, where) -> bool:
    """Whether the zero points at ``where`` may be one value for every channel (dynamic
    per_channel ops' zps port)."""
    return op.attr("qtype") == "per_channel" and where == "port 'zps'"


def check_params(op, src_shape, named_shapes):
    """Check each (where, shape) of scales / zps against the src shape (the dynamic ops'
    per_channel zps may be one value, :func:`one_zp`)."""
    expected = param_shape(op, src_shape)
    if op.attr("qtype") == "per_group" and any(d != -1 and d % g for d, g in zip(src_shape, op.attr("group_shape"))):
        raise bad_shape(op, "group sizes must divide the src dims", where="attribute 'group_shape'",
                        expected=f"divisors of {list(src_shape)}", found=list(op.attr("group_shape")))
    for where, shape in named_shapes:
        if not fits(shape, expected, one_zp(op, where)):
            raise bad_shape(op, f"{op.attr('qtype')} scales and zero points have the wrong shape", where=where,
                            expected="one element" if expected is None else list(expected), found=list(shape))


def expand(op, p: np.ndarray, src_shape, one=False) -> np.ndarray:
    """Broadcast a scales / zps array ``p`` against src of the actual ``src_shape`` (``one``:
    as :func:`fits`)."""
    expected = param_shape(op, src_shape)
    if not fits(p.shape, expected, one):
        raise RuntimeFault("scales or zero points do not match src", op=op,
                           expected="one element" if expected is None else list(expected), found=list(p.shape))
    if expected is None:
        return p.reshape(())
    if op.attr("qtype") == "per_channel":
        axis = norm_axis(op, op.attr("axis"), len(src_shape))
        return p.reshape([-1 if i == axis else 1 for i in range(len(src_shape))])
    for axis, g in enumerate(op.attr("group_shape")):
        p = np.repeat(p, g, axis=axis)
    if p.shape != src_shape:
        raise RuntimeFault("group sizes do not divide the src dims", op=op, where="attribute 'group_shape'",
                           expected=f"divisors of {list(src_shape)}", found=list(op.attr("group_shape")))
    return p


class _StaticQuant(Elementwise):
    """Quantize / Dequantize: scales and zero points as attributes.  Per tensor,
    an elementwise expression of src (fused kernels substitute it)."""

    family = "quant"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    attrs = (QTYPE, AXIS, Attr("scales", "f32[]"),
             Attr("zps", "s64[]", None, doc="zero points; zero when omitted"))
    #: the port holding the quantized tensor
    quantized = ""

    def check(self, op):
        params = [("attribute 'scales'", (len(op.attr("scales")),))]
        zps = op.attr("zps")
        if zps is not None:
            params.append(("attribute 'zps'", (len(zps),)))
            if op.ports(self.quantized)[0].dtype.value in F8 and any(zps):
                raise InvalidGraphOp("zero points are not supported for f8 (de)quantization", op=op,
                                     where="attribute 'zps'", expected="no zero points", found=list(zps))
        check_params(op, op.inputs[0].shape, params)

    def infer(self, op):
        return [op.inputs[0].shape]

    def pointwise(self, op) -> bool:
        """Per tensor, each dst element depends on its src element alone; per
        channel, the scale varies with an index an expression of src does not know."""
        return op.attr("qtype") == "per_tensor"

    def indexed(self, op) -> bool:
        """Per channel, dst at a multi-index is an expression of src there and of
        the channel index (``source_at``)."""
        return op.attr("qtype") == "per_channel"

    def params(self, op, src):
        scales = expand(op, np.asarray(op.attr("scales"), dtype=np.float64), src.shape)
        zps = op.attr("zps")
        return scales, (0.0 if zps is None else expand(op, np.asarray(zps, dtype=np.float64), src.shape))


class Quantize(_StaticQuant):
    kind = "Quantize"
    doc = "dst = round(src / scale + zp) to s8/u8 (saturated) or f8"
    quantized = "dst"
    dtypes = DtypeTable(["src", "dst"], [("f32", "s8,u8,f8_e4m3,f8_e5m2")])

    def reference(self, op, src):
        scales, zps = self.params(op, src)
        return (src / scales + zps,)


class Dequantize(_StaticQuant):
    kind = "Dequantize"
    doc = "dst = (src - zp) * scale, from s8/u8/f8 to f32"
    quantized = "src"
    dtypes = DtypeTable(["src", "dst"], [("s8,u8,f8_e4m3,f8_e5m2", "f32")])

    def reference(self, op, src):
        scales, zps = self.params(op, src)
        return ((src - zps) * scales,)


class _DynamicQuant(Elementwise):
    """DynamicQuantize / DynamicDequantize: scales and zero points as inputs.

    Not pointwise (the scale is picked by the element's index), but indexed:
    a fused kernel that knows the multi-index (the GEMM packing loop of a
    MatMul whose weights this dequantizes) computes it in registers."""

    family = "quant"
    inputs = (In("src"), In("scales"), In("zps", optional=True, doc="zero points; zero when omitted"))
    outputs = (Out("dst"),)
    attrs = (QTYPE, AXIS)

    def check(self, op):
        params = [(n, t) for n, t in op.named_ports() if n in ("scales", "zps")]
        for n, t in params:
            if t.property_type is PropertyType.host_scalar and t.nelems not in (-1, 1):
                raise bad_shape(op, "a host_scalar tensor holds one value", where=f"port '{n}'",
                                expected="one element (shape [] or [1])", found=list(t.shape))
        zps = op.input("zps")
        if zps is not None and self.quantized_src and op.inputs[0].dtype.is_float:
            raise InvalidGraphOp("zero points are not supported for a float src", op=op, where="port 'zps'",
                                 expected="no zps input", found=f"zps of {zps.dtype}")
        check_params(op, op.inputs[0].shape, [(f"port '{n}'", t.shape) for n, t in params])

    #: DynamicDequantize: src is the quantized tensor (its float formats take no zero points)
    quantized_src = False

    def infer(self, op):
        return [op.inputs[0].shape]

    def params(self, op, src, scales, zps=None):
        return expand(op, scales, src.shape), (0.0 if zps is None else expand(op, zps, src.shape, one=True))

    def pointwise(self, op) -> bool:
        return False

    def indexed(self, op) -> bool:
        return True

    def input_dims(self, op, port: int):
        """src runs along dst; per tensor the one scale / zp is read at index 0,
        per channel along ``axis``; per group along every dim (``source_at``
        then moves the read to the group of the index)."""
        if port == 0:
            return None
        qtype = op.attr("qtype")
        if qtype == "per_tensor":
            return ()
        rank = len(op.inputs[0].shape)
        if qtype == "per_channel":
            return (norm_axis(op, op.attr("axis"), rank),)
        return tuple(range(rank))


class DynamicQuantize(_DynamicQuant):
    kind = "DynamicQuantize"
    doc = "dst = round(src / scales + zps) to s8/u8 (saturated), scales and zps given as tensors"
    dtypes = DtypeTable(["src", "scales", "zps", "dst"],
                        [("f32", "f32", "s8,u8,s32", "s8"), ("f32", "f32", "s8,u8,s32", "u8")])

    def reference(self, op, src, scales, zps=None):
        s, z = self.params(op, src, scales, zps)
        return (src / s + z,)


class DynamicDequantize(_DynamicQuant):
    kind = "DynamicDequantize"
    doc = "dst = (src - zps) * scales from s8/u8/s4/u4 (or f4_e2m1/f4_e3m0, e8m0 scales), per tensor, channel or group"
    attrs = (Attr("qtype", "string", "per_tensor", choices=("per_tensor", "per_channel", "per_group")), AXIS,
             Attr("group_shape", "s64[]", None, check=all_positive, check_doc="positive group sizes",
                  doc="per_group: the group size of each src dim (1 where not grouped)"))
    # the doc's table (scales and dst of one dtype) with zero points of any integer
    # type (oneDNN's op schema takes them apart from src: u4 weights with u8 zps), and
    # beyond it oneDNN's MX formats: f4_e2m1 / f4_e3m0 src with e8m0 scales (or scales
    # of dst's dtype), no zps
    dtypes = DtypeTable(["src", "dst", "scales", "zps"],
                        [(src, d, d, "s4,u4,s8,u8,s32") for src in ("s8", "u8", "s4", "u4")
                         for d in ("f16", "bf16", "f32")] +
                        [("f4_e2m1,f4_e3m0", d, f"{d},e8m0", "s32") for d in ("f16", "bf16", "f32")])
    quantized_src = True

    def reference(self, op, src, scales, zps=None):
        if op.inputs[0].dtype is DataType.f4_e3m0:
            src = f4_e3m0_decode(src)   # widened codes (numpy has no f4_e3m0 type)
        s, z = self.params(op, src, scales, zps)
        return ((src - z) * s,)
