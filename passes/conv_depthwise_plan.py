"""Legality of the ``conv_depthwise`` kernel shape: a 1x1 Convolution, its
[BiasAdd] and post-ops, then a depthwise Convolution with its [BiasAdd] and
post-ops, as one kernel (graphc/codegen/conv_depthwise.py; oneDNN's
``fp_conv_postops_depthwise_postops_cpu``).

The pattern (passes/catalog/basic.py: ``conv_depthwise``) binds the two
convolutions as ``pw`` and ``dw``.  What the kernel does not do is refused
here with a reason, and the ops then take the convolution patterns of their
own: data other than f32, channels last, other than 2 spatial dims, shapes
unknown or empty before compile, a first convolution other than 1x1 at unit
strides without padding, a second one other than one channel per group and
per output channel, a window of more taps than the direct loop unrolls, and
the values between the two convolutions leaving the partition or read after
the second (they live only in the kernel's tile)."""
from __future__ import annotations

from ..ops.common import is_pointwise
from ..ops.conv import split_data, split_weights, window
from ..types import DataType
from .catalog.pieces import one_frame
from .kernel_plan import FusionPlan, Illegal, bound_once

#: taps of the depthwise window at most (each an unrolled term of the direct loop)
MAX_TAPS = 64


def _shapes_known(op) -> None:
    for t in [*op.inputs, *op.outputs]:
        if t.unknown_rank or any(d <= 0 for d in t.shape):
            raise Illegal(f"op {op.id} ({op.kind}): tensor {t.id} has shape {t.shape}: the fused kernel "
                          "takes shapes known and non-empty before compile")


def _conv(op, produced):
    """(N, C, spatial) of src, (OC, I, kernel) of the weights, (N, OC, spatial) of dst."""
    if op.attr("data_format") != "NCX":
        raise Illegal(f"op {op.id} ({op.kind}) has data_format {op.attr('data_format')}, not NCX")
    if len(op.inputs[0].shape) != 4:
        raise Illegal(f"op {op.id} ({op.kind}) has {len(op.inputs[0].shape) - 2} spatial dims, not 2")
    _shapes_known(op)
    for t in op.inputs[1:]:
        if t.id in produced:
            raise Illegal(f"op {op.id} ({op.kind}): its weights or bias ({t.id}) are computed in the partition")
    return (split_data(op, op.inputs[0].shape), split_weights(op, op.inputs[1].shape),
            split_data(op, op.outputs[0].shape))


def conv_depthwise_plan(graph, ops, roles, produced, leaving) -> FusionPlan:
    pw, dw = bound_once(roles, "pw", "conv_depthwise"), bound_once(roles, "dw", "conv_depthwise")
    for o in ops:
        for t in [*o.inputs, *o.outputs]:
            if t.dtype is not DataType.f32:
                raise Illegal(f"op {o.id} ({o.kind}): tensor {t.id} is {t.dtype.value}; the fused kernel is f32")
        if o not in (pw, dw) and not is_pointwise(o):
            raise Illegal(f"op {o.id} ({o.kind}) is neither one of the convolutions nor pointwise")
    (n, c, big), (_, _, kernel), (_, oc, small) = _conv(pw, produced)
    win = window(pw, big, kernel)
    if pw.attr("groups") != 1 or any(k != 1 for k in kernel) or any(s != 1 for s in win.strides) \
            or any(win.begin) or tuple(small) != tuple(big):
        raise Illegal(f"op {pw.id} (Convolution) is no 1x1 convolution at unit strides without padding "
                      f"(groups {pw.attr('groups')}, window {list(kernel)}, strides {list(win.strides)}, "
                      f"pads_begin {list(win.begin)})")
    (_, c2, _), (o2, i2, kernel2), (_, oc2, _) = _conv(dw, produced)
    if dw.attr("groups") != c2 or oc2 != c2 or i2 != 1 or o2 != c2:
        raise Illegal(f"op {dw.id} (Convolution) is not depthwise: groups {dw.attr('groups')}, "
                      f"{c2} input and {oc2} output channels")
    if kernel2[0] * kernel2[1] > MAX_TAPS:
        raise Illegal(f"op {dw.id} (Convolution) has a window of {kernel2[0] * kernel2[1]} taps, "
                      f"more than {MAX_TAPS}")
    # the values from the 1x1 convolution to the depthwise one's src live in the tile only
    ids = {o.id for o in ops}
    between, frontier = set(), [pw.outputs[0].id]
    while frontier:
        tid = frontier.pop()
        if tid in between:
            continue
        between.add(tid)
        for c_, _ in graph.consumers.get(tid, []):
            if c_ != dw.id and c_ in ids:
                frontier.extend(t.id for t in graph.ops[c_].outputs)
    if dw.inputs[0].id not in between:
        raise Illegal(f"op {dw.id} (Convolution)'s src is not computed from op {pw.id}'s dst")
    for tid in between:
        if tid in leaving:
            raise Illegal(f"tensor {tid}, between the two convolutions, leaves the partition")
    after, epilogue = {dw.outputs[0].id}, set()
    for o in ops:   # ops are in topological order
        if o.id != dw.id and any(t.id in after for t in o.inputs):
            epilogue.add(o.id)
            after.update(t.id for t in o.outputs)
            if any(t.id in between for t in o.inputs):
                raise Illegal(f"op {o.id} ({o.kind}) after the depthwise convolution reads a value from "
                              "before it")
            for t in o.outputs:
                if t.id in leaving and not one_frame(t.shape, dw.outputs[0].shape):
                    raise Illegal(f"epilogue tensor {t.id} has shape {list(t.shape)}, not the depthwise "
                                  f"convolution's {list(dw.outputs[0].shape)}")
    for o in ops:
        if o.id not in epilogue and o not in (pw, dw):
            if not any(t.id in between for t in o.outputs) and any(t.id in leaving for t in o.outputs):
                raise Illegal(f"tensor of op {o.id} ({o.kind}), a side branch, leaves the partition")
    roles_ = {tid: ("written" if tid in leaving else "register") for tid in produced}
    prologue = {o.id for o in ops if o.id not in epilogue and o not in (pw, dw)}
    return FusionPlan("conv_depthwise", [pw.id, dw.id], roles_, prologue, epilogue)


__all__ = ["conv_depthwise_plan", "MAX_TAPS"]
