"""An ATen FX graph lowered: the nodes the mapping table takes are grouped into
regions (torch's capability partitioner: no region both feeds and reads a node
left out), each region is built as a graphc graph and compiled with the fusion
catalog, and replaces its nodes by one call (a GraphcRegion).  A node graphc
does not take stays an ATen call in the same graph; a region graphc refuses at
compile time (a GraphcError: a dtype combination, a shape, no kernel) stays in
ATen too, with a warning naming its first node and the reason."""
from __future__ import annotations

import operator
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field

import torch
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_by_partitions

from ..errors import GraphcError
from .build import RegionBuilder, dense_strides, meta
from .region import GraphcRegion
from .table import EXPAND_OPS, TABLE, reason_not_taken
from .table_index import CONSTANT_OPS, SLICES


class GraphcFallbackWarning(UserWarning):
    """A region graphc refused at compile time runs in ATen."""


@dataclass
class LowerReport:
    """What lowering one FX graph did (graphc.torch.explain adds them up)."""
    aten_nodes: int = 0                 # ATen op calls in the graph (getitem not counted)
    in_graphc: int = 0                  # of them, run in graphc regions
    fallback: Counter = field(default_factory=Counter)   # ATen op -> count left in torch
    reasons: dict = field(default_factory=dict)          # ATen op -> why (the first reason met)
    regions: int = 0
    constant_inputs: int = 0            # region inputs that are constant tensors (parameters in inference)
    partitions: int = 0
    kernels: int = 0
    graphc_ops: Counter = field(default_factory=Counter)  # graphc op kind -> count, over the regions
    compile_seconds: float = 0.0


class _Taken(OperatorSupportBase):
    def __init__(self, reasons: dict):
        self.reasons = reasons

    def is_node_supported(self, submodules, node) -> bool:
        return node in self.reasons and self.reasons[node] is None


def _is_aten(node) -> bool:
    return node.op == "call_function" and node.target is not operator.getitem


def _computes(nodes) -> bool:
    """A region worth a graphc call: it has an op that is not a view (nor a constant)."""
    views = {"StaticReshape", "StaticTranspose", "StaticReshape (identity)", EXPAND_OPS, CONSTANT_OPS, *SLICES}
    return any(_is_aten(n) and TABLE[n.target].ops not in views for n in nodes)


#: how many times lowering starts again with the nodes graphc refused at compile left out
RETRIES = 4


def lower(gm: torch.fx.GraphModule, constants=frozenset()) -> tuple[torch.fx.GraphModule, LowerReport]:
    """``gm`` with graphc regions in place of the nodes graphc takes, and the
    report; the placeholders named in ``constants`` (parameters in inference)
    are constant tensors.  A node graphc refuses at compile is left out and the regions are
    formed again (at most RETRIES times; then a refused region runs in ATen)."""
    start = time.perf_counter()
    why_not = {n.name: reason_not_taken(n) for n in gm.graph.nodes if n.op == "call_function"}
    for attempt in range(RETRIES + 1):
        fused, report, refused = _lower_once(_copy(gm), why_not, constants, final=attempt == RETRIES)
        if not refused:
            break
        why_not.update(refused)
    report.compile_seconds = time.perf_counter() - start
    return fused, report


def _copy(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` whose graph fusing may change (node metadata shared)."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def _lower_once(gm, why_not: dict, constants, final: bool):
    """(the lowered module, its report, {node name: reason} of nodes graphc
    refused at compile: lowering again without them is better than leaving
    their regions in ATen, unless ``final``)."""
    report, refused = LowerReport(), {}
    taken = {n: why_not.get(n.name) for n in gm.graph.nodes if n.op == "call_function"}
    parts = CapabilityBasedPartitioner(gm, _Taken(taken), allows_single_node_partition=True).propose_partitions()
    parts = [p for p in parts if _computes(p.nodes)]
    fused = fuse_by_partitions(gm, [dict.fromkeys(p.nodes) for p in parts], prefix="graphc_",
                               always_return_tuple=True) if parts else gm
    for node in list(fused.graph.nodes):
        if node.op == "call_module" and str(node.target).startswith("graphc_"):
            sub = getattr(fused, node.target)
            region, at, reason = _compile_region(sub, node, constants, warn=final)
            if region is not None:
                setattr(fused, node.target, region)
                report.regions += 1
                report.constant_inputs += region.constant_inputs
                report.partitions += region.partitions
                report.kernels += region.kernels
                report.graphc_ops.update(op.kind for op in region.compiled.graph.ops.values())
                report.in_graphc += region.aten_nodes
                continue
            if at is not None and not final:
                refused[at] = f"refused at compile: {reason}"
            for n in sub.graph.nodes:   # it runs in ATen
                if _is_aten(n):
                    report.fallback[n.target.name()] += 1
                    report.reasons.setdefault(n.target.name(), "refused at compile")
        elif _is_aten(node):
            report.fallback[node.target.name()] += 1
            report.reasons.setdefault(node.target.name(), why_not.get(node.name) or "not in a region")
    report.aten_nodes = report.in_graphc + sum(report.fallback.values())
    fused.recompile()
    return fused, report, refused


def _convert(b: RegionBuilder, node):
    """The node's ops added by its row's converter; a converter meeting arguments
    it was not written for raises Unimplemented (the node then stays in ATen)."""
    try:
        return TABLE[node.target].convert(b, node)
    except GraphcError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        from ..errors import Unimplemented
        raise Unimplemented(f"graphc.torch cannot convert these arguments ({type(e).__name__}: {e})") from e


def _computed(b: RegionBuilder, node, lt):
    """A region output ``lt`` of ``node``: a constant tensor (arange, full) is copied
    into a tensor of its own (the constant tensor cache computes it once)."""
    if lt is None or isinstance(lt, tuple) or lt.id not in b.constants:
        return lt
    b.current = node
    return b.op("StaticReshape", [lt], [b.out(node)], shape=list(lt.shape), special_zero=False)


def _compile_region(sub: torch.fx.GraphModule, call, constants, warn: bool):
    """(the region ``sub`` (called by node ``call``) compiled, None, None), or
    when graphc refuses it (None, the name of the node it refused or None, the
    reason).  Every refusal warns, naming the node and the reason."""
    import graphc
    b = RegionBuilder()
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]
    (out_node,) = [n for n in sub.graph.nodes if n.op == "output"]
    results = list(out_node.args[0])
    for ph, arg in zip(placeholders, call.args):   # (inputs made as used: an empty operand left out is not)
        ph.meta.setdefault("val", meta(arg))
        if getattr(arg, "op", None) == "placeholder" and arg.name in constants:
            b.constant_nodes.add(ph)
    b.wanted = {r for r in results if isinstance(r, torch.fx.Node)}
    node = None
    try:
        for node in sub.graph.nodes:
            if node.op != "call_function":
                continue
            if node.target is operator.getitem:
                b.env[node] = b.env[node.args[0]][node.args[1]]
            else:
                b.current = node
                b.env[node] = _convert(b, node)
        outs = [_computed(b, r, b.env.get(r)) for r in results]
        inputs = {tid for _, tid in b.inputs}
        # an expand folded away is its input (computed here or the region's): the region
        # returns it expanded, a torch view (as eager's expand is)
        views = [tuple(meta(r).shape) if getattr(r, "target", None) is torch.ops.aten.expand.default and
                 tuple(meta(r).shape) != tuple(o.shape) else None for r, o in zip(results, outs)]
        if any(o is None or isinstance(o, tuple) or r.op == "placeholder" or o.id in b.constants or
               (o.id in inputs and getattr(r, "target", None) is not torch.ops.aten.expand.default)
               for o, r in zip(outs, results)):
            raise graphc.Unimplemented("a region output graphc does not compute")
        computed = list(dict.fromkeys(o.id for o in outs if o.id not in inputs))
        read = {t.id for op in b.graph.ops.values() for t in op.inputs}   # (an input only returned, expanded, is not)
        b.graph.set_ports(inputs=[tid for _, tid in b.inputs if tid in read] + [t for t in b.constants if t in read],
                          outputs=computed)
        compiled = graphc.compile(b.graph)
    except GraphcError as e:
        at = b.origin.get(getattr(getattr(e, "op", None), "id", None), node)
        known = at is not None and at.op == "call_function"
        where = f"{at.target.name()} (node {at.name})" if known else "its output"
        what = f"a region of {sum(map(_is_aten, sub.graph.nodes))} ATen ops" if warn or not known else "the node"
        warnings.warn(f"graphc leaves {what} to torch at {where}: {e}", GraphcFallbackWarning, stacklevel=2)
        return None, at.name if known else None, str(e)
    region = GraphcRegion(compiled, [b.env[ph].id if ph in b.env else None for ph in placeholders],
                          [o.id for o in outs], b.constants, sum(map(_is_aten, sub.graph.nodes)), views)
    region.constant_inputs = sum(b.env[ph].property_type == "constant" for ph in placeholders if ph in b.env)
    return region, None, None
