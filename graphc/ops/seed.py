"""Seed ops from other frameworks' docs: AddBackward (ttnn.add_bw), Embedding
(ttnn.embedding) and EmbeddingBackward (ttnn.embedding_bw), SwiGlu and SwiGluGrad
(aclnnSwiGluGrad).  Their lowering is graphc/codegen/rules/seed.py."""
from __future__ import annotations

import numpy as np

from ..errors import InvalidDataType, InvalidGraphOp, RuntimeFault
from .common import AUTO_BROADCAST, F, binary_shape, merged_shape, unbroadcast
from .eltwise import _sigmoid
from .schema import (Attr, DtypeTable, In, OpSchema, Out, bad_shape, dims_equal, non_negative, norm_axis,
                     same_dtype)

_DIFF_SRCS = ("diff_src_0", "diff_src_1")


def _shapes_agree(a, b) -> bool:
    return len(a) == len(b) and all(dims_equal(x, y) for x, y in zip(a, b))


# ------------------------------------------------------------------ AddBackward
class AddBackward(OpSchema):
    kind = "AddBackward"
    family = "binary_bwd"
    doc = "Gradients of src_0 + src_1 (ttnn.add_bw): diff_dst summed over the broadcast dims of each src."
    inputs = (In("diff_dst"), In("src_0"), In("src_1", optional=True, doc="absent when the operand was a scalar"))
    outputs = (Out("diff_src_0", optional=True), Out("diff_src_1", optional=True))
    attrs = (AUTO_BROADCAST,
             Attr("are_required_outputs", "bool[]", None, check=lambda v: len(v) == 2 and any(v),
                  check_doc="two booleans (diff_src_0, diff_src_1), at least one true",
                  doc="default: a gradient for each operand given ([true, true], or [true, false] "
                      "without src_1: a scalar operand has no gradient tensor)"))
    dtypes = same_dtype("diff_dst|src_0|src_1|diff_src_0|diff_src_1", F + ",c64")

    def required_outputs(self, op) -> tuple[bool, bool]:
        """are_required_outputs as given, else one gradient per operand present."""
        spec = self.attr_spec("are_required_outputs")
        if spec.name not in op.raw_attrs:
            return (True, len(op.inputs) >= 3)
        return tuple(spec.coerce(op.raw_attrs[spec.name], op))

    def output_names(self, op, n):
        # called before and after attribute coercion: coerce the raw value here
        required = self.required_outputs(op)
        names = [name for name, r in zip(_DIFF_SRCS, required) if r]
        if required[1] and len(op.inputs) < 3:
            raise InvalidGraphOp("diff_src_1 is required but src_1 is absent (a scalar operand has no gradient)",
                                 op=op, where="attribute 'are_required_outputs'",
                                 expected="[true, false] without src_1", found=str(list(required)).lower())
        if n != len(names):
            raise InvalidGraphOp("wrong number of outputs for are_required_outputs", op=op,
                                 expected=f"{len(names)} ({', '.join(names)})", found=n)
        return names

    def check(self, op):
        a, b = op.input("src_0").shape, op.input("src_1")
        expected = binary_shape(op, a, b.shape) if b is not None else a
        dy = op.input("diff_dst").shape
        if not _shapes_agree(dy, expected):
            raise bad_shape(op, "diff_dst must have the broadcast shape of src_0 and src_1", where="port 'diff_dst'",
                            expected=list(expected), found=list(dy))

    def infer(self, op):
        return [op.input(name[len("diff_"):]).shape for name in op.output_names]

    def reference(self, op, dy, a, b=None):
        srcs = {"diff_src_0": a, "diff_src_1": b}
        return tuple(unbroadcast(dy, srcs[name].shape) for name in op.output_names)


# ---------------------------------------------------- Embedding, EmbeddingBackward
class _RowsByIndex(OpSchema):
    """An op reading the rows of a [num_embeddings, dim] weight by ``indices``:
    indices are checked against num_embeddings before any row is touched."""

    def input_range(self, op, index):
        """Indices in range; with no row (or rows unknown) none is: the default data."""
        num = op.input("weight").shape[0] if op.input("weight").ndim else 0
        if op.input_names[index] == "indices" and num > 0:
            return (0, num - 1, "int")
        return None

    def weight_dims(self, op):
        """(num_embeddings, dim) of a weight of rank 2, else InvalidShape naming the port."""
        w = op.input("weight")
        if w.ndim != 2:
            raise bad_shape(op, "weight must be [num_embeddings, dim]", where="port 'weight'", found=list(w.shape))
        return w.shape

    def index_fault(self, op, idx, position: int) -> RuntimeFault:
        """The error for the out-of-range index at flat ``position`` of ``idx``."""
        pos = np.unravel_index(position, idx.shape)
        return RuntimeFault("index out of range", op=op, where=f"port 'indices', position {list(map(int, pos))}",
                            expected=f"[0, {op.input('weight').shape[0]})", found=int(idx.reshape(-1)[position]))

    def checked_indices(self, op, idx, num):
        """``idx`` flattened, each in [0, num), else the first bad one's RuntimeFault."""
        flat = idx.reshape(-1)
        bad = np.flatnonzero((flat < 0) | (flat >= num))
        if bad.size:
            raise self.index_fault(op, idx, int(bad[0]))
        return flat


class Embedding(_RowsByIndex):
    """graphc's extension op, the forward twin of EmbeddingBackward (as
    ttnn.embedding, torch.nn.functional.embedding): dst[i..., :] = weight[indices[i...], :].

    Every index is checked before a row is read: one outside [0, num_embeddings)
    is a RuntimeFault naming its position and value (no output is written).  The
    kernel copies rows (their bits: no rounding), tokens in parallel when many.
    There is no padding_idx: it changes only the gradient (EmbeddingBackward's)."""

    kind = "Embedding"
    family = "embedding"
    doc = ("graphc's extension op (ttnn.embedding, torch's embedding): dst[i..., :] = weight[indices[i...], :], "
           "each index checked in [0, num_embeddings)")
    inputs = (In("indices", doc="any shape; each in [0, num_embeddings), checked at run"),
              In("weight", doc="[num_embeddings, dim]"))
    outputs = (Out("dst", doc="[*indices.shape, dim], of weight's dtype"),)
    grad_inputs = ("weight",)
    dtypes = DtypeTable(["indices", "weight|dst"], [("s32,u32,s64", F)])

    def check(self, op):
        self.weight_dims(op)

    def infer(self, op):
        return [tuple(op.input("indices").shape) + (self.weight_dims(op)[1],)]

    def reference(self, op, idx, w):
        flat = self.checked_indices(op, idx, w.shape[0])
        return (np.take(w, flat, axis=0).reshape(idx.shape + w.shape[1:]),)

    def vjp(self, op, em):
        """d weight = EmbeddingBackward(indices, weight, dy); indices get none."""
        idx, w = op.inputs
        dy = em.grad(op.outputs[0])
        if dy is None or not em.wants(w):
            return (None, None)
        return (None, em.one("EmbeddingBackward", [idx, w, dy], dtype=w.dtype))


class EmbeddingBackward(_RowsByIndex):
    kind = "EmbeddingBackward"
    family = "embedding_bwd"
    doc = "Gradient of an embedding lookup (ttnn.embedding_bw): diff_dst rows summed into the rows of their indices."
    inputs = (In("indices"), In("weight", doc="[num_embeddings, dim]; only its shape is used"),
              In("diff_dst", doc="[*indices.shape, dim], or any shape [..., dim] with as many elements"))
    outputs = (Out("diff_weight"),)
    attrs = (Attr("dtype", "string", None, choices=tuple(F.split(",")), doc="dtype of diff_weight"),
             Attr("padding_idx", "s64", None, check=non_negative, check_doc="in [0, num_embeddings)",
                  doc="the row that gets no gradient"))
    dtypes = DtypeTable(["indices", "weight|diff_dst", "diff_weight"], [("s32,u32,s64", F, F)])

    def check(self, op):
        idx, w, dy, dw = op.input("indices"), op.input("weight"), op.input("diff_dst"), op.output("diff_weight")
        want = op.attr("dtype") or w.dtype.value
        if dw.dtype.value != want:
            raise InvalidDataType("diff_weight must have the dtype attribute's type, or weight's without it", op=op,
                                  where="port 'diff_weight'", expected=want, found=str(dw.dtype))
        num, dim = self.weight_dims(op)
        pad = op.attr("padding_idx")
        if pad is not None and num != -1 and pad >= num:
            raise InvalidGraphOp("padding_idx out of range", op=op, where="attribute 'padding_idx'",
                                 expected=f"[0, {num})", found=pad)
        if dy.ndim == 0 or not dims_equal(dy.shape[-1], dim):
            raise bad_shape(op, "the last dim of diff_dst must be weight's dim", where="port 'diff_dst'",
                            expected=f"[..., {dim}]", found=list(dy.shape))
        if idx.is_complete and dy.is_complete and dim != -1 and dy.nelems != idx.nelems * dim:
            raise bad_shape(op, "diff_dst must hold one row of dim elements per index", where="port 'diff_dst'",
                            expected=f"{idx.nelems} x {dim} elements", found=list(dy.shape))

    def infer(self, op):
        return [op.input("weight").shape]

    def reference(self, op, idx, w, dy):
        num, dim = w.shape
        flat = self.checked_indices(op, idx, num)
        dw = np.zeros((num, dim))
        np.add.at(dw, flat, dy.reshape(flat.size, dim))   # (not -1: a dim of 0 leaves it open)
        if op.attr("padding_idx") is not None:
            dw[op.attr("padding_idx")] = 0.0
        return (dw,)


# --------------------------------------------------------------- SwiGlu family
def _swish_halves(x, axis):
    a, b = np.split(x, 2, axis=axis)
    return a, b, _sigmoid(a)


class _SwiGluBase(OpSchema):
    """src x splits along ``dim`` into halves A and B; y = A * sigmoid(A) * B."""

    family = "swiglu"
    attrs = (Attr("dim", "s64", -1, doc="the dim to split in halves, in [-rank, rank-1]"),)

    def split_axis(self, op) -> int:
        x = op.input("src")
        if x.ndim == 0:
            raise bad_shape(op, "src must have rank >= 1", where="port 'src'", found=[])
        for name, t in zip(op.input_names, op.inputs):
            if 0 in t.shape:
                raise bad_shape(op, "empty tensors are not supported", where=f"port '{name}'", found=list(t.shape))
        axis = norm_axis(op, op.attr("dim"), x.ndim, attr="dim")
        if x.shape[axis] != -1 and x.shape[axis] % 2:
            raise bad_shape(op, "the split dim of src must be even", where="port 'src'",
                            expected=f"an even dim {axis}", found=list(x.shape))
        return axis

    def half_shape(self, op):
        axis = self.split_axis(op)
        shape = list(op.input("src").shape)
        shape[axis] = -1 if shape[axis] == -1 else shape[axis] // 2
        return tuple(shape)


class SwiGlu(_SwiGluBase):
    kind = "SwiGlu"
    doc = "dst = A * sigmoid(A) * B, with A and B the halves of src along dim."
    inputs = (In("src"),)
    outputs = (Out("dst"),)
    dtypes = same_dtype("src|dst")

    def check(self, op):
        self.split_axis(op)

    def infer(self, op):
        return [self.half_shape(op)]

    def reference(self, op, x):
        a, b, s = _swish_halves(x, self.split_axis(op))
        return (a * s * b,)

    def vjp(self, op, em):
        return em.like("SwiGluGrad", [em.grad(op.outputs[0]), op.inputs[0]], op)


class SwiGluGrad(_SwiGluBase):
    kind = "SwiGluGrad"
    doc = "Gradient of SwiGlu with respect to src (aclnnSwiGluGrad)."
    inputs = (In("diff_dst", doc="src's shape with dim halved"), In("src"))
    outputs = (Out("diff_src"),)
    dtypes = same_dtype("diff_dst|src|diff_src")

    def check(self, op):
        expected, dy = self.half_shape(op), op.input("diff_dst").shape
        if not _shapes_agree(dy, expected):
            raise bad_shape(op, "diff_dst must have src's shape with the split dim halved", where="port 'diff_dst'",
                            expected=list(expected), found=list(dy))

    def infer(self, op):
        axis = self.split_axis(op)
        dy = list(op.input("diff_dst").shape)
        dy[axis] = -1 if dy[axis] == -1 else 2 * dy[axis]
        return [merged_shape(op.input("src").shape, dy)]

    def reference(self, op, dy, x):
        axis = self.split_axis(op)
        a, b, s = _swish_halves(x, axis)
        da = dy * b * s * (1.0 + a * (1.0 - s))
        db = dy * a * s
        return (np.concatenate([da, db], axis=axis),)
