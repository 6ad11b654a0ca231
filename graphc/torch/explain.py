"""``explain(model, *inputs)``: what graphc does with a model: the share of its
ATen nodes run in graphc kernels, the ATen ops left in torch, the regions,
partitions and kernels, and the compile time."""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field

import torch


@dataclass
class Explanation:
    coverage: float                      # ATen nodes run in graphc / all ATen nodes, 0..1
    fallback: dict                       # ATen op -> count left in torch
    reasons: dict = field(default_factory=dict)   # ATen op -> why it stayed (the first reason met)
    graphs: int = 0                      # FX graphs compiled (forward, backward, graph breaks)
    aten_nodes: int = 0
    regions: int = 0
    partitions: int = 0
    kernels: int = 0
    compile_seconds: float = 0.0         # lowering the FX graphs (graphc's compile included)
    first_call_seconds: float = 0.0      # the first call, tracing included

    def __str__(self) -> str:
        rows = [("coverage", f"{self.coverage:.1%} of {self.aten_nodes} ATen nodes"),
                ("graphs / regions", f"{self.graphs} / {self.regions}"),
                ("partitions / kernels", f"{self.partitions} / {self.kernels}"),
                ("compile (graphc)", f"{self.compile_seconds:.2f} s"),
                ("first call", f"{self.first_call_seconds:.2f} s")]
        rows += [(f"fallback {op}", f"{n}  ({self.reasons.get(op, '')})")
                 for op, n in sorted(self.fallback.items(), key=lambda kv: -kv[1])]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def explain(model, *inputs, train: bool = False) -> Explanation:
    """Compile ``model`` with the graphc backend and call it on ``inputs`` once
    (with ``train``: a backward of the sum of its first output too); report what ran where."""
    from .backend import REPORTS, graphc
    torch._dynamo.reset()
    first = len(REPORTS)
    compiled = torch.compile(model, backend=graphc)
    start = time.perf_counter()
    if train:
        out = compiled(*inputs)
        out = out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)
        out.sum().backward()
    else:
        with torch.no_grad():
            compiled(*inputs)
    seconds = time.perf_counter() - start
    reports = REPORTS[first:]
    fallback, reasons = Counter(), {}
    for r in reports:
        fallback.update(r.fallback)
        for k, v in r.reasons.items():
            reasons.setdefault(k, v)
    total = sum(r.aten_nodes for r in reports)
    return Explanation(coverage=sum(r.in_graphc for r in reports) / total if total else 0.0,
                       fallback=dict(fallback), reasons=reasons, graphs=len(reports), aten_nodes=total,
                       regions=sum(r.regions for r in reports), partitions=sum(r.partitions for r in reports),
                       kernels=sum(r.kernels for r in reports),
                       compile_seconds=sum(r.compile_seconds for r in reports), first_call_seconds=seconds)
