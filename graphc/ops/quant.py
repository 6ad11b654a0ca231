"""Linear (de)quantization ops (docs: Quantize.md, Dequantize.md,
DynamicQuantize.md, DynamicDequantize.md).

Quantize computes ``src / scale + zp`` and Dequantize ``(src - zp) * scale``
in float64; the executor then rounds once to the dst dtype (integers: round
half to even, then saturate).  Scales and zero points apply per tensor (one
value), per channel (one value per index of ``axis``) or, for
DynamicDequantize, per group (one value per ``group_shape`` block of src).
The static ops take them as attributes, the dynamic ops as input tensors.

Kernels compute in float64 like the reference, so they match it bit for bit:
integer stores round half to even and saturate, narrow float stores round to
odd in f32 first (as graphc.numerics does) and then to nearest even.  Per-tensor
Quantize and Dequantize are elementwise, so fused kernels substitute their
expression (per-channel ones need the channel index, which an elementwise
expression does not see: they lower alone).  Per-channel static ops and the
dynamic ops are *indexed*: a fused kernel that knows the multi-index (the GEMM
packing loop) computes them in registers, reading a per-group scale at the
index divided by the group shape (the weight-only-quantized MatMul).

Beyond the doc's table, DynamicDequantize takes oneDNN's MX element formats
(f4_e2m1, f4_e3m0 src, no zero points) with e8m0 scales; a scale or zero point
may be a host_scalar tensor (one value).
"""
from __future__ import annotations

import math

import numpy as np

from ..codegen import ir
from ..codegen.elementwise import emit_elementwise
from ..codegen.kernel import ArrayRef, as_stored, offset_expr
from ..errors import InvalidGraphOp, RuntimeFault
from ..types import DataType, LogicalTensor, PropertyType, f4_e3m0_decode
from .common import Elementwise
from .schema import Attr, DtypeTable, In, OpSchema, Out, all_positive, bad_shape, dims_equal, norm_axis

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


def fits(shape, expected) -> bool:
    """Does a scales / zps shape agree with ``param_shape``'s answer (-1 dims agree with anything)?"""
    if expected is None:
        return -1 in shape or math.prod(shape) == 1
    return len(shape) == len(expected) and all(map(dims_equal, shape, expected))


def check_params(op, src_shape, named_shapes):
    """Check each (where, shape) of scales / zps against the src shape."""
    expected = param_shape(op, src_shape)
    if op.attr("qtype") == "per_group" and any(d != -1 and d % g for d, g in zip(src_shape, op.attr("group_shape"))):
        raise bad_shape(op, "group sizes must divide the src dims", where="attribute 'group_shape'",
                        expected=f"divisors of {list(src_shape)}", found=list(op.attr("group_shape")))
    for where, shape in named_shapes:
        if not fits(shape, expected):
            raise bad_shape(op, f"{op.attr('qtype')} scales and zero points have the wrong shape", where=where,
                            expected="one element" if expected is None else list(expected), found=list(shape))


def expand(op, p: np.ndarray, src_shape) -> np.ndarray:
    """Broadcast a scales / zps array ``p`` against src of the actual ``src_shape``."""
    expected = param_shape(op, src_shape)
    if not fits(p.shape, expected):
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


# ------------------------------------------------------------------ lowering


class _View(ArrayRef):
    """A kernel argument (or constant array) seen through its own shape and strides;
    floats load as float64 (quantization computes in f64 like the reference)."""

    def load(self, idx) -> ir.Expr:
        return _f64(super().load(idx))


def _f64(x: ir.Expr) -> ir.Expr:
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


def _pick(kb, values, index) -> ir.Expr:
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

    #: quantize_expr or dequantize_expr
    formula = staticmethod(quantize_expr)

    def pointwise(self, op) -> bool:
        """Per tensor, each dst element depends on its src element alone; per
        channel, the scale varies with an index an expression of src does not know."""
        return op.attr("qtype") == "per_tensor"

    def expr(self, op, x):
        """The dst value in float64 (as the reference), as the dst dtype holds it
        (saturated and rounded: what a consumer in a fused kernel must see)."""
        if not self.pointwise(op):
            from ..codegen.fusion import NotFusable
            raise NotFusable()
        zps = op.attr("zps")
        z = None if zps is None or (self.quantized == "src" and zps[0] == 0) else float(zps[0])
        v = self.formula(_f64(x), ir.const(float(op.attr("scales")[0]), "f64"), None if z is None else ir.const(z, "f64"))
        return as_stored(v, op.outputs[0].dtype)

    def indexed(self, op) -> bool:
        """Per channel, dst at a multi-index is an expression of src there and of
        the channel index (``source_at``)."""
        return op.attr("qtype") == "per_channel"

    def source_at(self, op, kb, ivars, x):
        """``expr`` with the scale and zero point of the channel ``ivars`` names."""
        channel = ivars[norm_axis(op, op.attr("axis"), len(op.inputs[0].shape))]
        zps = op.attr("zps")
        z = None if zps is None or not any(zps) else _pick(kb, zps, channel)
        v = self.formula(_f64(x), _pick(kb, op.attr("scales"), channel), z)
        return as_stored(v, op.outputs[0].dtype)

    def lower(self, op, kb, ins, outs):
        emit_quant(kb, op, self.formula, outs[0], ins[0], op.attr("scales"), op.attr("zps"))

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

    formula = staticmethod(dequantize_expr)

    def reference(self, op, src):
        scales, zps = self.params(op, src)
        return ((src - zps) * scales,)


class _DynamicQuant(Elementwise):
    """DynamicQuantize / DynamicDequantize: scales and zero points as inputs.

    Not pointwise (the scale is picked by the element's index), but indexed:
    a fused kernel that knows the multi-index (the GEMM packing loop of a
    MatMul whose weights this dequantizes) computes it in registers
    (``source_at``); alone it lowers to one elementwise pass (``emit_quant``)."""

    family = "quant"
    inputs = (In("src"), In("scales"), In("zps", optional=True, doc="zero points; zero when omitted"))
    outputs = (Out("dst"),)
    attrs = (QTYPE, AXIS)
    #: quantize_expr or dequantize_expr
    formula = staticmethod(quantize_expr)

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
        return expand(op, scales, src.shape), (0.0 if zps is None else expand(op, zps, src.shape))

    def lower(self, op, kb, ins, outs):
        emit_quant(kb, op, self.formula, outs[0], *ins)

    # -- computed in a fused kernel's registers where the multi-index is known
    def expr(self, op, *values):
        from ..codegen.fusion import NotFusable
        raise NotFusable()   # never pointwise: see source_at

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

    def source_at(self, op, kb, ivars, x, s, z=None):
        """``formula`` at multi-index ``ivars`` with the scale and zp read there
        (per group: at ``ivars // group_shape``), computed in float64 as the reference."""
        if op.attr("qtype") == "per_group":
            groups = op.attr("group_shape")
            s = _regroup(s, op.inputs[1], ivars, groups)
            z = None if z is None else _regroup(z, op.inputs[2], ivars, groups)
        return as_stored(self.formula(_f64(x), _f64(s), None if z is None else _f64(z)), op.outputs[0].dtype)


def _regroup(value: ir.Expr, lt: LogicalTensor, ivars, groups) -> ir.Expr:
    """``value``, the load of a scales / zps element at the dst index ``ivars``
    (widened by its dtype's conversion), moved to the element of the group that
    index is in.  Raises NotFusable unless ``value`` reads one kernel argument
    once (a partition input: the catalog's patterns take scales from outside)."""
    from ..codegen.fusion import NotFusable
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
    # the doc's table (scales and dst of one dtype), and beyond it oneDNN's MX
    # formats: f4_e2m1 / f4_e3m0 src with e8m0 scales (or scales of dst's dtype), no zps
    dtypes = DtypeTable(["src", "dst", "scales", "zps"],
                        [(src, d, d, zps) for src, zps in (("s8", "s8,u8,s32"), ("u8", "s8,u8,s32"),
                                                           ("s4", "s4,u4,s32"), ("u4", "s4,u4,s32"))
                         for d in ("f16", "bf16", "f32")] +
                        [("f4_e2m1,f4_e3m0", d, f"{d},e8m0", "s32") for d in ("f16", "bf16", "f32")])
    formula = staticmethod(dequantize_expr)
    quantized_src = True

    def reference(self, op, src, scales, zps=None):
        if op.inputs[0].dtype is DataType.f4_e3m0:
            src = f4_e3m0_decode(src)   # widened codes (numpy has no f4_e3m0 type)
        s, z = self.params(op, src, scales, zps)
        return ((src - z) * s,)


# ==== integer GEMM operands (issue 14: int8 accumulates exactly, as in s32) ====
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
        return _pick(self.kb, self.op.attr("scales"), None if self.axis is None else channel)

    def zero(self, channel) -> ir.Expr:
        """The zero point (f64) at index ``channel`` of the axis (ignored per tensor)."""
        if self.zps is None:
            return ir.const(0.0, "f64")
        return _pick(self.kb, self.zps, None if self.axis is None else channel)


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
        x = _f64(f.values.at(f.q.id, f.q, list(ivars), tuple(f.q.shape)))
        if f.zps is None or not self.centred:
            return x
        return x - _pick(f.kb, f.zps, None if f.axis is None else ivars[f.axis])


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
# ==== end of integer GEMM operands ====
