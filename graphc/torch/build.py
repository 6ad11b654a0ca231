"""One region of an ATen FX graph built as a graphc graph: logical tensors from
the nodes' fake-tensor metadata (shape, dtype, strides), ops added by the
mapping table's converters (graphc.torch.table), Python scalars as constant
tensors the region feeds at every run."""
from __future__ import annotations

import operator

import numpy as np
import torch

from .. import Graph, LogicalTensor, Op
from ..errors import Unimplemented
from ..types import dense_strides as _dense

#: torch dtype -> graphc dtype name
DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16", torch.float64: "f64",
          torch.int32: "s32", torch.int64: "s64", torch.int8: "s8", torch.uint8: "u8", torch.bool: "boolean"}
FLOAT = ("f32", "bf16", "f16")


def meta(node):
    """The fake tensor (or tuple of them) a node computes, or None."""
    return node.meta.get("val") if hasattr(node, "meta") else None


def static_dims(t) -> bool:
    return all(isinstance(d, int) for d in t.shape) and all(isinstance(s, int) for s in t.stride())


def dense_strides(t) -> bool:
    """Strides with one place per element (no zero strides, no overlap): what a graphc output can have."""
    order = sorted((s, d) for s, d in zip(t.stride(), t.shape) if d != 1)
    step = 1
    for s, d in order:
        if s != step:
            return False
        step *= d
    return True


class RegionBuilder:
    """Builds the graphc graph of one region: ``value`` gives the logical tensor
    of an FX argument (a node of the region, an input of the region, a scalar),
    ``out`` a new tensor for a node's result, ``op`` adds an op."""

    def __init__(self):
        self.graph = Graph()
        self.env: dict = {}           # fx node -> LogicalTensor (or tuple for multi-output nodes)
        self.inputs: list = []        # (fx node, tensor id): the region's tensor inputs, as first used
        self.constant_nodes: set = set()   # placeholders that are constant tensors (parameters in inference)
        self.constants: dict = {}     # tensor id -> numpy array fed at every run
        self._ids = 0
        self.wanted: set = set()      # fx nodes whose results leave the region (they keep torch's strides)
        self.current = None           # the fx node being converted
        self.origin: dict = {}        # graphc op id -> the fx node it comes from
        self.folded: dict = {}        # fx node -> the tensor an earlier node's ops computed for it

    def _id(self) -> int:
        self._ids += 1
        return self._ids - 1

    def lt(self, t, strides=False, constant=False) -> LogicalTensor:
        """A logical tensor of fake tensor ``t``'s dtype and shape (its strides if asked)."""
        dt = DTYPES.get(t.dtype)
        if dt is None:
            raise Unimplemented(f"no graphc dtype for {t.dtype}")
        return LogicalTensor(self._id(), dt, list(t.shape), list(t.stride()) if strides else None, "strided",
                             "constant" if constant else "undef")

    def input(self, node) -> LogicalTensor:
        """The region input for FX node ``node`` (made once, when first used), with its strides."""
        if node not in self.env:
            lt = self.lt(meta(node), strides=True, constant=node in self.constant_nodes)
            self.env[node] = lt
            self.inputs.append((node, lt.id))
        return self.env[node]

    def value(self, arg, like=None) -> LogicalTensor:
        """The logical tensor of ``arg``: an FX node, or a Python number made a
        constant tensor of shape [1] and the dtype of ``like`` (a logical tensor)."""
        if isinstance(arg, torch.fx.Node):
            return self.env[arg] if arg in self.env else self.input(arg)
        if isinstance(arg, (bool, int, float)):
            dt = like.dtype if like is not None else "f32"
            return self.constant(np.array([arg], dtype=dt.np if hasattr(dt, "np") else np.float32))
        raise Unimplemented(f"argument {arg!r} is not a tensor or a number")

    def constant(self, array: np.ndarray, strides=None) -> LogicalTensor:
        """A constant tensor fed ``array`` at every run (of ``strides``, in elements:
        a broadcast array's zero strides, say; default dense)."""
        from ..types import DataType
        if strides is None and 0 in array.strides:   # (a broadcast array, read for its shape alone, keeps its zero strides)
            strides = [st // array.itemsize for st in array.strides]
        lt = LogicalTensor(self._id(), DataType.from_numpy(array.dtype), list(array.shape), strides, "strided",
                           "constant")
        self.constants[lt.id] = array
        return lt

    def out(self, node, index=None) -> LogicalTensor:
        """A new tensor for (output ``index`` of) ``node``'s result."""
        t = meta(node) if index is None else meta(node)[index]
        leaves = node in self.wanted if index is None else \
            any(u in self.wanted and u.args[1] == index for u in node.users if u.target is operator.getitem)
        return self.lt(t, strides=leaves and dense_strides(t))

    def tmp(self, like: LogicalTensor, shape=None, dtype=None, dense=False) -> LogicalTensor:
        """A new tensor of ``like``'s dtype (or ``dtype``) and ``shape`` (default its own);
        ``dense``: laid out densely (never a view of another)."""
        shape = list(like.shape if shape is None else shape)
        return LogicalTensor(self._id(), dtype or like.dtype, shape, _dense(shape) if dense else None)

    def cast(self, t: LogicalTensor, dtype) -> LogicalTensor:
        """``t`` in ``dtype``: itself where it has it (or ``dtype`` is None), else a
        TypeCast of it into a new tensor."""
        return t if dtype is None or t.dtype == dtype else self.op("TypeCast", [t], [self.tmp(t, dtype=dtype)])

    def rstd(self, var: LogicalTensor, eps: float, out: LogicalTensor | None = None) -> LogicalTensor:
        """1 / sqrt(var + eps) (Add, Pow), into ``out`` or a new tensor of var's shape:
        the statistic torch's norms save, and batch norm's scale before gamma."""
        shifted = self.op("Add", [var, self.value(float(eps), like=var)], [self.tmp(var)])
        return self.op("Pow", [shifted], [out if out is not None else self.tmp(var)], beta=-0.5)

    def op(self, kind, ins, outs, **attrs):
        """Add op ``kind``; returns its single output or the list of them."""
        oid = self._id()
        self.origin[oid] = self.current
        self.graph.add_op(Op(oid, kind, list(ins), list(outs), attrs))
        return outs[0] if len(outs) == 1 else outs
