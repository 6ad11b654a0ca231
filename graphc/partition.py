"""Partitions: groups of ops compiled together."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .types import LogicalTensor

if TYPE_CHECKING:
    from .compiler.compiled_partition import CompiledPartition


class Partition:
    """A set of ops of one graph with its input and output logical tensors."""

    def __init__(self, pid: int, graph, ops: list, kind: str = "", plan=None):
        self.id = pid
        self.plan = plan       # passes.legality.FusionPlan of a fused partition (None: one op)
        self.graph = graph
        self.ops = list(ops)
        self.pattern = kind
        self.constant = False  # computed from constant-property tensors only: run once, cached
        self.kind = "+".join(op.kind for op in self.ops)
        ids = {op.id for op in self.ops}
        produced = {t.id for op in self.ops for t in op.outputs}
        ins: list[LogicalTensor] = []
        seen = set()
        for op in self.ops:
            for t in op.inputs:
                if t.id not in produced and t.id not in seen:
                    seen.add(t.id)
                    ins.append(graph.tensors[t.id])
        outs: list[LogicalTensor] = []
        graph_outs = graph.output_port_set
        for op in self.ops:
            for t in op.outputs:
                used_outside = any(c not in ids for c, _ in graph.consumers.get(t.id, []))
                if used_outside or t.id in graph_outs or not graph.consumers.get(t.id):
                    outs.append(graph.tensors[t.id])
        self.inputs = ins
        self.outputs = outs

    def is_supported(self) -> bool:
        """True when graphc can compile this partition to machine code."""
        from .compiler.build import can_compile
        return can_compile(self)

    # oneDNN's accessor names
    def get_id(self) -> int:
        return self.id

    def get_engine_kind(self) -> str:
        return self.graph.engine_kind

    def get_ops(self) -> list[int]:
        """The ids of the partition's ops (oneDNN's get_ops)."""
        return [op.id for op in self.ops]

    def get_ops_num(self) -> int:
        return len(self.ops)

    def get_input_ports(self) -> list[LogicalTensor]:
        return list(self.inputs)

    def get_output_ports(self) -> list[LogicalTensor]:
        return list(self.outputs)

    def compile(self, inputs: list[LogicalTensor] | None = None,
                outputs: list[LogicalTensor] | None = None) -> "CompiledPartition":
        """Compile for concrete input (and optionally output) logical tensors."""
        from .compiler.build import compile_partition
        return compile_partition(self, inputs, outputs)

    def __repr__(self) -> str:
        return (f"Partition({self.id}, {self.kind}, ops={[op.id for op in self.ops]}, "
                f"in={[t.id for t in self.inputs]}, out={[t.id for t in self.outputs]})")


def require_jit() -> None:
    """Raise Unimplemented, naming the setting, when numba's compiler is off
    (``NUMBA_DISABLE_JIT=1`` turns ``njit`` into plain Python functions): code
    generation compiles its helpers when it is imported and every kernel after,
    so partitioning and compiling cannot work; ``graphc.reference.run`` runs a
    graph in numpy without numba."""
    import os

    from numba import config
    if config.DISABLE_JIT:
        from .errors import Unimplemented
        raise Unimplemented("graphc compiles kernels with numba, and NUMBA_DISABLE_JIT turns numba's compiler off",
                            expected="NUMBA_DISABLE_JIT unset or 0 (graphc.reference.run runs a graph in numpy "
                                     "without it)",
                            found=f"NUMBA_DISABLE_JIT={os.environ.get('NUMBA_DISABLE_JIT', config.DISABLE_JIT)}")


def run_passes(graph, policy: str = "fusion", verbose: bool = False, out=None):
    """The pass pipeline (graphc.passes) over ``graph`` finalized, with code
    generation's lowering rules deciding which ops have kernels (numba's
    compiler must be on: :func:`require_jit`)."""
    from .errors import InvalidArguments, short
    if policy not in ("fusion", "debug"):
        raise InvalidArguments("unknown partition policy", expected="'fusion' or 'debug'", found=short(policy))
    from .graph import ensure_graph
    ensure_graph(graph, "partitioning")
    if getattr(graph.finalize(), "rank_pending", False):
        from .errors import InvalidArguments
        tid = graph.unknown_rank_inputs()[0] if graph.unknown_rank_inputs() else None
        raise InvalidArguments("the graph has inputs of unknown rank: its partitions depend on their ranks",
                               where=f"tensor {tid}", expected="g.with_input_ranks({id: ndim}).get_partitions(), "
                               "or graphc.compile / graphc.run, which take the ranks from the arrays",
                               found="ndims -1")
    require_jit()
    from .codegen.rules import can_lower
    from .passes import run_pipeline
    return run_pipeline(graph.finalize(), policy, can_lower, verbose=verbose, out=out)


def partition_graph(graph, policy: str = "fusion") -> list[Partition]:
    """Partitions from the pass pipeline (passes/): fused patterns under
    policy "fusion", one op per partition under "debug"."""
    ctx = run_passes(graph, policy)
    parts = [Partition(i, graph, ops, kind=name, plan=plan) for i, (name, ops, plan) in enumerate(ctx.groups)]
    for p in parts:
        p.constant = all(op.id in ctx.constant_ops for op in p.ops)
    return parts
