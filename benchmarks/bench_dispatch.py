"""Dispatch: the cost of one run of a tiny compiled partition (a 16-element f32
Add), where the kernel's work is nothing and graphc's own per-run work is all:
``CompiledGraph.run`` (a dict in, a dict out), ``CompiledPartition.execute``
into fresh outputs, and ``execute`` into caller-given outputs (reused every
run); and ``CompiledGraph.run`` of a 16-element Reorder whose input is
strided (element strides 1, 2: every other element of a 32-element buffer,
read where it lies).  torch eager's ``torch.add`` of the same tensors, and ``out=``, for
scale.  Each contender runs in its own subprocess; the figure is the best of
several rounds of the mean over many calls.

    python benchmarks/bench_dispatch.py [--calls N]
"""
from __future__ import annotations

import argparse
import json
import time

from children import load_average, run_child


def best_per_call(fn, calls: int, rounds: int = 7) -> float:
    for _ in range(1000):
        fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - t) / calls)
    return best


def child(who: str, calls: int) -> float:
    import numpy as np
    a, b = np.ones(16, np.float32), np.ones(16, np.float32)
    if who.startswith("torch"):
        import torch
        torch.set_num_threads(1)
        x, y, out = torch.from_numpy(a), torch.from_numpy(b), torch.empty(16)
        fn = (lambda: torch.add(x, y, out=out)) if who == "torch out=" else (lambda: torch.add(x, y))
        return best_per_call(fn, calls)
    return best_per_call(_graphc_call(who, a, b), calls)


def _graphc_call(who: str, a, b):
    """The call ``who`` times, on a freshly compiled graph."""
    import numpy as np

    import graphc
    from graphc import Graph, LogicalTensor, Op
    g = Graph()
    if who == "run, strided input":
        g.add_op(Op(0, "Reorder", [LogicalTensor(0, "f32", [2, 8], [1, 2])], [LogicalTensor(1, "f32", [2, 8])]))
        cg = graphc.compile(g.finalize())
        x = np.lib.stride_tricks.as_strided(np.arange(32, dtype=np.float32), shape=(2, 8), strides=(4, 8))
        return lambda: cg.run({0: x})
    g.add_op(Op(0, "Add", [LogicalTensor(0, "f32", [16]), LogicalTensor(1, "f32", [16])],
                [LogicalTensor(2, "f32", [16])]))
    cg = graphc.compile(g.finalize())
    cp = cg.compiled[0]
    out = np.empty(16, np.float32)
    feeds, ins, outs = {0: a, 1: b}, [a, b], [out]
    return {"CompiledGraph.run": lambda: cg.run(feeds),
            "CompiledPartition.execute": lambda: cp.execute(ins),
            "execute, caller outputs": lambda: cp.execute(ins, outs)}[who]


CONTENDERS = ["CompiledGraph.run", "CompiledPartition.execute", "execute, caller outputs", "run, strided input",
              "torch.add", "torch out="]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.calls)))
        return
    print(f"load average before: {load_average()}")
    print("| call | us per call |")
    print("|---|---|")
    for who in CONTENDERS:
        print(f"| {who} | {run_child(__file__, '--child', who, '--calls', str(args.calls)) * 1e6:.2f} |")


if __name__ == "__main__":
    main()
