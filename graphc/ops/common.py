"""Shared bases for op families: same-shape unary ops, backward ops of them,
and numpy-broadcasting binary ops."""
from __future__ import annotations

import numpy as np

from ..errors import Unimplemented
from ..types import DataType
from .schema import Attr, DtypeTable, In, OpSchema, Out, bad_shape, broadcast_shapes, get_schema, same_dtype

F = "f32,bf16,f16"


def same_shape_as(op, a: str, b: str):
    """Check two ports have equal shapes (where known)."""
    ta, tb = op.input(a) or op.output(a), op.input(b) or op.output(b)
    if ta is None or tb is None:
        return
    if len(ta.shape) != len(tb.shape) or any(x != y and x != -1 and y != -1 for x, y in zip(ta.shape, tb.shape)):
        raise bad_shape(op, f"'{a}' and '{b}' must have the same shape", expected=list(ta.shape),
                        found=list(tb.shape), where=f"port '{b}'")


def merged_shape(*shapes):
    out = list(shapes[0])
    for s in shapes[1:]:
        out = [y if x == -1 else x for x, y in zip(out, s)]
    return tuple(out)


class Elementwise(OpSchema):
    """An op computing each output element from the matching (broadcast) input
    elements.  Its lowering rule (graphc.codegen.rules) gives the element's
    expression, which fused kernels substitute for its output."""

    def input_dims(self, op, port: int):
        """The dims of dst along which input ``port``'s dims run, when not numpy's
        trailing alignment (BiasAdd's bias runs along the channel dim); None for
        numpy broadcasting."""
        return None

    def pointwise(self, op) -> bool:
        """Whether each output element depends on the matching input elements
        alone (False for per-channel Quantize/Dequantize)."""
        return True

    def indexed(self, op) -> bool:
        """Whether an op that is not pointwise still computes each output element
        from its input element and the element's multi-index alone: per-channel
        Quantize/Dequantize, whose scale is picked by the channel index."""
        return False


def is_pointwise(op) -> bool:
    """Whether ``op`` computes each output element from the matching input elements
    alone (fusion substitutes its expression into its consumers): an Elementwise
    op, unless its ``pointwise(op)`` says otherwise (per-channel
    Quantize/Dequantize).  A semantic fact: whether this build lowers it is code
    generation's (graphc.codegen.rules.can_lower), which legality also asks."""
    return isinstance(op.schema, Elementwise) and bool(op.schema.pointwise(op))


def is_indexed(op) -> bool:
    """Whether ``op`` is elementwise given the output index: not pointwise, but a
    fused kernel that knows the index it loads or stores at may compute it in
    registers (its rule's ``source_at``).  Legality decides where it may."""
    return isinstance(op.schema, Elementwise) and not is_pointwise(op) and op.schema.indexed(op)


class Unary(Elementwise):
    """dst = f(src), elementwise; f32/bf16/f16 with src and dst alike."""

    family = "eltwise"
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    dtypes = DtypeTable(["src|dst"], [("f32",), ("bf16",), ("f16",)])

    def infer(self, op):
        return [op.inputs[0].shape]

    #: the backward op of this op (graphc.grad): read by ``vjp``
    backward: str = ""
    #: whether ``vjp`` gives the backward op dst (``use_dst``) where it takes it
    backward_reads_dst: bool = True

    def fn(self, op, x):
        raise NotImplementedError

    def reference(self, op, src):
        return (self.fn(op, src),)

    def vjp(self, op, em):
        """The backward op, given the forward's attributes it takes; reading dst
        (``use_dst``) where the backward op can."""
        if not self.backward:
            raise Unimplemented("this op has no derivative", op=op)
        use_dst = self.backward_reads_dst and get_schema(self.backward).attr_spec("use_dst") is not None
        x = op.outputs[0] if use_dst else op.inputs[0]
        return em.like(self.backward, [x, em.grad(op.outputs[0])], op, **({"use_dst": True} if use_dst else {}))


class UnaryBackward(Elementwise):
    """diff_src = diff_dst * f'(src or dst)."""

    family = "eltwise_bwd"
    inputs = (In("src"), In("diff_dst"))
    outputs = (Out("diff_src"),)
    dtypes = DtypeTable(["src|diff_dst|diff_src"], [("f32",), ("bf16",), ("f16",)])
    #: the forward kind whose gradient this is (for finite-difference tests)
    forward: str = ""

    def check(self, op):
        same_shape_as(op, self.inputs[0].name, "diff_dst")

    def infer(self, op):
        return [merged_shape(op.inputs[0].shape, op.inputs[1].shape)]

    def grad(self, op, x, dy):
        raise NotImplementedError

    def reference(self, op, x, dy):
        return (self.grad(op, x, dy),)


AUTO_BROADCAST = Attr("auto_broadcast", "string", "numpy", choices=("none", "numpy"))


def binary_shape(op, a, b):
    if op.attr("auto_broadcast") == "none":
        if len(a) != len(b) or any(x != y and x != -1 and y != -1 for x, y in zip(a, b)):
            raise bad_shape(op, "shapes must match when auto_broadcast is 'none'", where="inputs",
                            expected=list(a), found=list(b))
        return merged_shape(a, b)
    return broadcast_shapes(op, a, b)


#: the integer rows of the arithmetic binary ops (Add, Subtract, Multiply): all three ports
#: s32, or all three s64 -- graphc's extension to oneDNN's tables (its Add, Subtract and
#: Multiply take floats only), for frameworks' index arithmetic.  The result wraps modulo
#: 2^32 or 2^64, as numpy's and torch's integers do (:func:`wrapped`).
INT_ROWS = [("s32", "s32", "s32"), ("s64", "s64", "s64")]


def wrapped(v: np.ndarray, dt: DataType) -> np.ndarray:
    """An integer result (computed in int64, whose arithmetic numpy wraps) wrapped to
    ``dt``'s width, as numpy's and torch's integer arithmetic in that type gives it;
    other results as they are."""
    return np.asarray(v).astype(dt.np) if dt.is_int else v


class Binary(Elementwise):
    """dst = f(src_0, src_1) with numpy broadcasting (or none)."""

    family = "binary"
    inputs = (In("src_0"), In("src_1"))
    outputs = (Out("dst"),)
    attrs = (AUTO_BROADCAST,)
    #: any floating types (oneDNN's Add/Subtract schemas: T1, T2, T3 independent), or
    #: integers (:data:`INT_ROWS`)
    dtypes = DtypeTable(["src_0", "src_1", "dst"], [("f32,bf16,f16", "f32,bf16,f16", "f32,bf16,f16")] + INT_ROWS)

    def infer(self, op):
        return [binary_shape(op, op.inputs[0].shape, op.inputs[1].shape)]

    def fn(self, op, a, b):
        raise NotImplementedError

    def reference(self, op, a, b):
        return (wrapped(self.fn(op, a, b), op.outputs[0].dtype),)

    def partials(self, op, em, dy):
        """The gradients of src_0 and src_1 in dst's shape (before summing over
        broadcast dims), emitted through ``em``."""
        raise Unimplemented("this op has no derivative", op=op)

    def vjp(self, op, em):
        partials = self.partials(op, em, summed_in_f32(op, em))
        return [None if g is None or not em.wants(t) else em.sum_to(g, t.shape) for g, t in zip(partials, op.inputs)]


class Predicate(Binary):
    """dst = a boolean of src_0 and src_1: the comparisons (GreaterEqual, Equal, ...)
    and the logical ops on booleans.  No derivative, no wrapping; never a post-op of a
    numeric chain (the fusion catalog's BINARY list leaves them out)."""


def summed_in_f32(op, em):
    """The gradient reaching ``op``'s dst, in f32 when it is of a narrower type and
    an operand's gradient sums it over broadcast dims (products and sums in f32,
    one rounding at the end)."""
    dy = em.grad(op.outputs[0])
    if dy.dtype.info.low_precision and any(em.wants(t) and t.shape != dy.shape for t in op.inputs[-2:]):
        return em.cast(dy, DataType.f32)
    return dy


def unbroadcast(g: np.ndarray, shape) -> np.ndarray:
    """Sum ``g`` over the dims that broadcasting expanded to reach g.shape from ``shape``."""
    shape = tuple(shape)
    lead = g.ndim - len(shape)
    if lead > 0:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, d in enumerate(shape) if d == 1 and g.shape[i] != 1)
    if axes:
        g = g.sum(axis=axes, keepdims=True)
    return g.reshape(shape)


__all__ = ["is_pointwise", "is_indexed", "Elementwise", "Unary", "UnaryBackward", "Binary", "Predicate",
           "AUTO_BROADCAST", "binary_shape", "unbroadcast", "wrapped", "INT_ROWS", "same_shape_as", "merged_shape",
           "same_dtype", "F"]
