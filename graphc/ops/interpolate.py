"""Interpolate and InterpolateBackward (docs: Interpolate.md, InterpolateBackward.md).

Resizes the spatial dims of src to ``sizes`` (the optional sizes input, else
the attribute) or to ``floor(src_dim * scales)``.  Each spatial axis is
resized independently, as a (dst_dim x src_dim) weight matrix, by the doc's
coordinate map of dst index x to a src coordinate:

* half_pixel: ``(x + 0.5) / scale - 0.5`` with ``scale = dst_dim / src_dim``;
* align_corners: ``x * (src_dim - 1) / (dst_dim - 1)``, 0 when dst_dim is 1.

``nearest`` takes the src element at the coordinate rounded half up (for
half_pixel that is ``floor((x + 0.5) / scale)``); ``linear``, ``bilinear`` and
``trilinear`` are all multilinear over every spatial dim, the coordinate
clamped to [0, src_dim - 1].  The backward op applies the transposed
matrices to diff_dst.

InterpolateBackward takes the dst dims from diff_dst, as oneDNN does (its
shape inference is the identity, and its kernel reads the resize factors from
the src and diff_dst dims): ``sizes`` / ``scales`` (attributes or input) must
be given but are not checked against diff_dst, whose rank, batch and channel
dims must be src's.  So the corpus' diff_dst of 21 for src 17 and scales
1.235294 (floor(20.999998) = 20 in the forward) runs as oneDNN runs it.

Their lowering is graphc/codegen/rules/interpolate.py.
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidGraphOp, RuntimeFault
from .schema import Attr, DtypeTable, In, OpSchema, Out, all_positive, bad_shape, dims_equal

ATTRS = (
    Attr("mode", "string", choices=("nearest", "linear", "bilinear", "trilinear")),
    Attr("coordinate_transformation_mode", "string", "half_pixel", choices=("half_pixel", "align_corners")),
    Attr("sizes", "s64[]", None, check=all_positive, check_doc="positive values", doc="dst spatial dims"),
    Attr("scales", "f32[]", None, check=all_positive, check_doc="positive values",
         doc="dst spatial dim = floor(src spatial dim * scale); ignored when sizes are given"),
    Attr("data_format", "string", "NXC", choices=("NCX", "NXC")),
)
#: the backward op's: sizes and scales unchecked, as diff_dst gives the dst dims
BWD_ATTRS = tuple(Attr(a.name, a.type, a.default, doc="unused: diff_dst's spatial dims are the dst dims")
                  if a.name in ("sizes", "scales") else a for a in ATTRS)
SIZES = In("sizes", optional=True, doc="1-D s32 tensor of dst spatial dims, at run time")


def spatial_axes(op, rank: int) -> list[int]:
    first = 2 if op.attr("data_format") == "NCX" else 1
    return list(range(first, first + rank - 2))


def dst_spatial(op, src_shape, sizes=None) -> list[int]:
    """dst spatial dims (-1 unknown) from the sizes input values (at run time),
    the sizes attribute or the scales attribute."""
    n = len(src_shape) - 2
    spatial = [src_shape[i] for i in spatial_axes(op, len(src_shape))]
    if sizes is not None:
        if sizes.shape != (n,) or np.any(sizes <= 0):
            raise RuntimeFault("the sizes input must hold one positive value per spatial dim", op=op,
                               where="port 'sizes'", expected=n, found=sizes.tolist())
        return [int(s) for s in sizes]
    if op.input("sizes") is not None:
        return [-1] * n   # data: known once a kernel is specialised on them (check_values)
    for name in ("sizes", "scales"):
        values = op.attr(name)
        if values is None:
            continue
        if len(values) != n:
            raise InvalidGraphOp(f"{name} must have one value per spatial dim", op=op, where=f"attribute '{name}'",
                                 expected=n, found=len(values))
        if name == "sizes":
            return list(values)
        with np.errstate(over="ignore"):  # f32 arithmetic, as the attribute's type; overflow caught below
            dims = [np.floor(np.float32(d) * np.float32(s)) for d, s in zip(spatial, values)]
        if not all(v < 2 ** 63 for v in dims):
            raise bad_shape(op, "scales give a dst dim out of range", where="attribute 'scales'",
                            found=list(values))
        return [-1 if d == -1 else int(v) for d, v in zip(spatial, dims)]
    raise InvalidGraphOp("either sizes or scales must be given", op=op, where="attributes 'sizes' and 'scales'",
                         expected="one of them, or a sizes input")


def check_src(op, src_shape):
    if len(src_shape) < 3:
        raise bad_shape(op, "src needs batch, channel and at least one spatial dim", where="port 'src'",
                        expected="rank >= 3", found=list(src_shape))
    if any(src_shape[i] == 0 for i in spatial_axes(op, len(src_shape))):
        raise bad_shape(op, "src spatial dims must not be empty", where="port 'src'", found=list(src_shape))
    sizes = op.input("sizes")
    if sizes is not None and (sizes.ndim != 1 or sizes.shape[0] not in (-1, len(src_shape) - 2)):
        raise bad_shape(op, "the sizes input must be 1-D with one value per spatial dim", where="port 'sizes'",
                        expected=[len(src_shape) - 2], found=list(sizes.shape))


def same_dims(a, b) -> bool:
    return len(a) == len(b) and all(map(dims_equal, a, b))


def with_spatial(op, shape, spatial) -> tuple:
    out = list(shape)
    for i, d in zip(spatial_axes(op, len(shape)), spatial):
        out[i] = d
    return tuple(out)


def weights(op, src_dim: int, dst_dim: int) -> np.ndarray:
    """The (dst_dim x src_dim) matrix resizing one spatial axis."""
    x = np.arange(dst_dim)
    align = op.attr("coordinate_transformation_mode") == "align_corners"
    w = np.zeros((dst_dim, src_dim))
    if op.attr("mode") == "nearest":
        # integer arithmetic: exact ties, rounded up
        if not align:
            idx = ((2 * x + 1) * src_dim) // (2 * dst_dim)
        elif dst_dim > 1:
            idx = (2 * x * (src_dim - 1) + dst_dim - 1) // (2 * (dst_dim - 1))
        else:
            idx = np.zeros_like(x)
        w[x, idx] = 1.0
        return w
    if not align:
        c = (x + 0.5) * src_dim / dst_dim - 0.5
    elif dst_dim > 1:
        c = x * (src_dim - 1) / (dst_dim - 1)
    else:
        c = np.zeros(dst_dim)
    c = np.clip(c, 0, src_dim - 1)
    lo = np.floor(c).astype(np.int64)
    hi = np.minimum(lo + 1, src_dim - 1)
    frac = c - lo
    np.add.at(w, (x, lo), 1.0 - frac)
    np.add.at(w, (x, hi), frac)
    return w


def resize(op, a: np.ndarray, src_dims, dst_dims, transpose=False) -> np.ndarray:
    """Apply each spatial axis' (dst x src) weight matrix to ``a``; transposed
    (``a`` is then diff_dst) for the backward op."""
    for axis, s, d in zip(spatial_axes(op, a.ndim), src_dims, dst_dims):
        w = weights(op, s, d)
        a = np.moveaxis(np.tensordot(w.T if transpose else w, a, axes=(1, axis)), 0, axis)
    return a


class Interpolate(OpSchema):
    kind = "Interpolate"
    family = "interpolate"
    doc = "resize the spatial dims (nearest or multilinear)"
    inputs = (In("src"), SIZES)
    outputs = (Out("dst"),)
    attrs = ATTRS
    dtypes = DtypeTable(["src|dst", "sizes"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])
    value_inputs = ("sizes",)   # the dst shape: kernels specialise on the sizes given at run time

    def check(self, op):
        check_src(op, op.inputs[0].shape)

    def infer(self, op):
        src = op.inputs[0].shape
        return [with_spatial(op, src, dst_spatial(op, src))]

    def check_values(self, op, values):
        src = op.inputs[0].shape
        return [with_spatial(op, src, dst_spatial(op, src, np.asarray(values["sizes"])))]

    def reference(self, op, src, sizes=None):
        axes = spatial_axes(op, src.ndim)
        return (resize(op, src, [src.shape[i] for i in axes], dst_spatial(op, src.shape, sizes)),)

    def vjp(self, op, em):
        return em.like("InterpolateBackward", [op.inputs[0], em.grad(op.outputs[0])] + op.inputs[1:], op)


class InterpolateBackward(OpSchema):
    kind = "InterpolateBackward"
    family = "interpolate"
    doc = "diff_src of Interpolate: the transposed resize of diff_dst"
    inputs = (In("src"), In("diff_dst"), SIZES)
    outputs = (Out("diff_src"),)
    attrs = BWD_ATTRS
    dtypes = DtypeTable(["src|diff_dst|diff_src", "sizes"], [("f32", "s32"), ("bf16", "s32"), ("f16", "s32")])

    def check(self, op):
        src, diff_dst = op.inputs[0].shape, op.inputs[1].shape
        check_src(op, src)
        if op.input("sizes") is None and op.attr("sizes") is None and op.attr("scales") is None:
            raise InvalidGraphOp("either sizes or scales must be given", op=op,
                                 where="attributes 'sizes' and 'scales'", expected="one of them, or a sizes input")
        spatial = spatial_axes(op, len(src))
        if len(diff_dst) != len(src) or not all(dims_equal(d, s) for k, (d, s) in enumerate(zip(diff_dst, src))
                                                if k not in spatial):
            expected = [s if k not in spatial else "*" for k, s in enumerate(src)]
            raise bad_shape(op, "diff_dst must have src's rank, batch and channel dims", where="port 'diff_dst'",
                            expected=expected, found=list(diff_dst))

    def infer(self, op):
        return [op.inputs[0].shape]

    def reference(self, op, src, diff_dst, sizes=None):
        axes = spatial_axes(op, src.ndim)
        return (resize(op, diff_dst, [src.shape[i] for i in axes], [diff_dst.shape[i] for i in axes],
                       transpose=True),)
