"""Fused partitions: the one partition a pattern makes of a whole graph, checked
against what its plan should be, and the Dequantize ops that quantized patterns
start from."""
from __future__ import annotations

__all__ = ["dequantize", "one_partition"]


def one_partition(g, pattern, shape="anchor", anchors=None, scratch=(), registers=(), calls=()):
    """The one partition of ``g`` under the fusion policy, returned after checking
    that ``pattern`` formed it of every op of ``g`` and that its plan is a kernel
    of ``shape`` whose anchors are ops of the kinds ``anchors`` (in order; any
    when None), which writes exactly the tensors ``scratch`` (ids) to scratch
    memory (none by default: every other value stays in registers or is an
    output), keeps the outputs of its ops of the kinds ``registers`` in registers,
    and whose compiled source calls every function named in ``calls``."""
    (p,) = g.get_partitions("fusion")
    assert p.pattern == pattern and len(p.ops) == len(g.ops), p
    assert p.plan.shape == shape, p.plan.describe()
    if anchors is not None:
        assert [g.ops[a].kind for a in p.plan.anchors] == list(anchors), p.plan.describe()
    assert sorted(t for t, r in p.plan.roles.items() if r == "scratch") == sorted(scratch), p.plan.describe()
    for kind in registers:
        kept = [t.id for o in g.ops.values() if o.kind == kind for t in o.outputs]
        assert kept and all(p.plan.roles[t] == "register" for t in kept), (kind, p.plan.describe())
    if calls:
        source = p.compile().source
        assert all(f"{name}(" in source for name in calls), calls
    return p


def dequantize(b, x, attrs, dt="f32"):
    """The output of a Dequantize of ``x`` (a tensor of GraphBuilder ``b``) to
    ``dt``, quantization attributes ``attrs``."""
    return b.op("Dequantize", [x], out=[(dt, list(x.shape))], attrs=attrs)[0]
