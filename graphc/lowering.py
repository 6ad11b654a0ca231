"""Lowering partitions to one generated kernel each.

Each op kind has a lowering rule (graphc/codegen/rules, registered by kind);
this module assigns kernel arguments (partition inputs, outputs, and scratch
buffers for intermediates) and asks each op's rule, in order, to emit its code.
"""
from __future__ import annotations

import os
import warnings

from . import verbose
from .codegen import rules
from .codegen.fused_values import NotFusable
from .codegen.fusion import lower_fused
from .codegen import kernel
from .codegen.kernel import ArrayRef, KernelBuilder
from .errors import InternalError
from .types import LogicalTensor
from .views import view_strides


def op_lowerable(op) -> bool:
    return rules.can_lower(op)


def lower_op(op, kb, refs_in, refs_out, values: dict) -> None:
    """``op``'s code by its rule; ``values`` ({op id: {port name: tuple}}) as in build_kernel."""
    rules.lower(op, kb, refs_in, refs_out, values.get(op.id, {}))


def value_inputs(ops) -> list[tuple]:
    """(op, port name, tensor) for each input whose values the kernel is specialised
    on: the ports an op schema names in ``value_inputs`` (small s32/s64 tensors
    such as ReduceX's axes), when the op has them."""
    return [(op, name, t) for op in ops for name, t in zip(op.input_names, op.inputs)
            if name in op.schema.value_inputs]


def can_lower(partition) -> bool:
    """Every op has a kernel, and every value input comes from outside the
    partition (its values are read before the kernel is generated)."""
    ins = {t.id for t in partition.inputs}
    return all(op_lowerable(op) for op in partition.ops) and \
        all(t.id in ins for _, _, t in value_inputs(partition.ops))


def _builder(in_lts, out_lts):
    """A fresh KernelBuilder with the partition's inputs and outputs as arguments."""
    kb = KernelBuilder()
    refs = {}
    plan = []
    for i, lt in enumerate(in_lts):
        refs[lt.id] = kb.arg(lt, "a")
        plan.append(("in", i))
    for i, lt in enumerate(out_lts):
        refs[lt.id] = kb.arg(lt, "o")
        plan.append(("out", i))
    return kb, refs, plan


def build_kernel(partition, ops, in_lts, out_lts, values: dict):
    """(source, arg plan) of the one kernel of ``partition``: ``ops`` are its
    ops specialised for the inputs ``in_lts`` (and values), writing ``out_lts``.
    ``values`` ({op id: {port name: tuple}}) are the values of value inputs the
    kernel is specialised on; each op's rule receives its own.

    A fused partition lowers as its plan says (passes/legality.py accepted it, so
    code generation does not refuse it: a refusal is an :class:`InternalError`).
    It lowers one op at a time, through scratch buffers, only when its plan says
    so (``one_at_a_time``, shown in the pass log), or when it is compiled for
    strides other than the graph's that make its folded views no views; either
    is an InternalError under ``GRAPHC_STRICT_FUSION=1`` (the test suite)."""
    graph = getattr(partition, "graph", None)
    with kernel.deterministic(getattr(graph, "deterministic", False)):
        return _build_kernel(partition, ops, in_lts, out_lts, values)


def _build_kernel(partition, ops, in_lts, out_lts, values: dict):
    fusion = getattr(partition, "plan", None)
    if fusion is not None and len(ops) > 1:
        why, planned = fusion.one_at_a_time, True
        if not why:
            lower = _views_kernel if fusion.shape == "views" else _fused_kernel
            built = lower(partition, ops, fusion, in_lts, out_lts, values)
            if built is not None:
                return built
            why, planned = "its views are no views of the buffers as compiled (strides other than the graph's)", False
        text = f"partition {partition.id} ({partition.kind}) lowers one op at a time: {why}"
        if os.environ.get(STRICT_FUSION) == "1":
            raise InternalError(f"{text} ({STRICT_FUSION}=1)", op=ops[0])
        verbose.emit(2, "fallback", verbose.graph_id(partition.graph), partition.id, "op_by_op", why)
        if not planned:   # (a planned one is in the pass log already)
            warnings.warn(text, FusionFallbackWarning, stacklevel=3)
    return _one_op_at_a_time(ops, in_lts, out_lts, values)


#: set to 1 (the test suite does) to make a fused partition lowering one op at a time an error
STRICT_FUSION = "GRAPHC_STRICT_FUSION"


class FusionFallbackWarning(UserWarning):
    """A fused partition compiled for strides that make its folded views no
    views lowers one op at a time."""


def _fused_kernel(partition, ops, fusion, in_lts, out_lts, values):
    """The kernel of a fused plan, or None when its folded views are no views of
    the buffers as compiled."""
    kb, refs, plan = _builder(in_lts, out_lts)
    folded = fold_views(ops, refs, fusion.views_in, fusion.views_out)
    if folded is None:
        return None
    ops = [op for op in ops if op.id not in folded]
    for op in ops:
        for t in op.outputs:
            if t.id not in refs and fusion.roles.get(t.id) == "scratch":
                refs[t.id] = kb.arg(t, "t")
                plan.append(("tmp", t))
    try:
        lower_fused(kb, ops, refs, fusion, values)
    except NotFusable as e:
        raise InternalError(f"code generation refused the {fusion.shape} plan legality accepted for partition "
                            f"{partition.id} ({partition.kind}): {e}", op=ops[0]) from e
    return kb.source(), plan + workspace_plan(kb)


def _views_kernel(partition, ops, fusion, in_lts, out_lts, values):
    """A chain of views that is no view of its input as compiled: one copy, in the
    last op, reading the input through the views before it; None when those are
    no views either."""
    kb, refs, plan = _builder(in_lts, out_lts)
    if fold_views(ops, refs, fusion.views_in[:-1], []) is None:
        return None
    last = ops[-1]
    lower_op(last, kb, [refs[t.id] for t in last.inputs], [refs[t.id] for t in last.outputs], values)
    kb.ret(-1)
    return kb.source(), plan + workspace_plan(kb)


def _one_op_at_a_time(ops, in_lts, out_lts, values):
    """One op after another, through scratch buffers."""
    kb, refs, plan = _builder(in_lts, out_lts)
    for op in ops:
        for t in op.outputs:
            if t.id not in refs:
                refs[t.id] = kb.arg(t, "t")
                plan.append(("tmp", t))
        lower_op(op, kb, [refs[t.id] for t in op.inputs], [refs[t.id] for t in op.outputs], values)
    kb.ret(-1)
    return kb.source(), plan + workspace_plan(kb)


def fold_views(ops, refs, views_in, views_out):
    """Bind the views a plan folds (passes/legality.py: ``views_in`` read through
    strides of an input's buffer, ``views_out`` a value stored through the inverse
    strides of an output's buffer) to ArrayRefs over those buffers in ``refs``;
    the ids of the folded ops, or None when some view's strides do not allow it
    (the partition then lowers op by op, the views as copies)."""
    bound, by_id = {}, {op.id: op for op in ops}   # (the plan holds the graph's ops; these have the shapes)

    def bind(t, ref, strides):
        if strides is None:
            return False
        bound[t.id] = ArrayRef(ref.name, LogicalTensor(t.id, t.dtype, tuple(t.shape), tuple(strides)))
        return True

    for op in (by_id[o.id] for o in views_in):
        src = bound.get(op.inputs[0].id) or refs[op.inputs[0].id]
        if not bind(op.outputs[0], src, view_strides(op, tuple(src.shape), tuple(src.strides))):
            return None
    for op in (by_id[o.id] for o in reversed(views_out)):
        dst = bound.get(op.outputs[0].id) or refs[op.outputs[0].id]
        if not bind(op.inputs[0], dst, view_strides(op, tuple(dst.shape), tuple(dst.strides), forward=False)):
            return None
    refs.update(bound)
    return {op.id for op in list(views_in) + list(views_out)}


def workspace_plan(kb) -> list:
    """Arg plan entries of kb's workspaces (the kernel's last parameters)."""
    return [("ws", (n, elem)) for _, n, elem in kb.workspaces]
