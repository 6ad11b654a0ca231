"""Load, validate and partition time, and peak memory, against the number of
ops: chains and fan-outs of 1k, 10k and 100k ops, each size in a process of
its own, and the growth from one size to the next (10x the ops: about 10x the
time when the work is linear).

    python benchmarks/bench_scaling.py [--sizes 1000,10000,100000] [--shapes chain,fanout] [--repeat N]

The graphs (f32 [4, 4] tensors, written to a JSON file the child reads):

- chain: op i reads op i-1's output; the kinds cycle MatMul (weights from
  outside), Add (an outside operand), ReLU, SoftMax, Multiply (an outside
  operand), Sigmoid, Abs, Tanh, so that the fusion patterns find their anchors
  and post-ops all along (about a quarter of the ops read a graph input);
- fanout: one ReLU whose output every other op reads; the kinds cycle Add (an
  outside operand), ReLU, Sigmoid, Multiply (an outside operand), Abs, MatMul
  (weights from outside); every op's output is a graph output.

Phases (CPU seconds of the child, the fastest of --repeat children: the
machine may be shared, and CPU time is what other load changes least):

- load: read the file, parse the JSON and add every op to a graph (each op
  checked against its schema: graphc.load_graph up to Graph.finalize);
- validate: Graph.finalize (unique ids, one producer per tensor, no cycle, every
  shape inferred), which load_graph ends with;
- partition: graphc.partition.partition_graph (the pass pipeline: dead ops,
  constants, pattern matching, legality, grouping).

Peak memory is the most Python allocations held at once from reading the file
to the partitions made (tracemalloc), measured in a second child of its own,
since tracing allocations slows the run that it watches.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

from children import load_average, run_child

SHAPE = [4, 4]
CHAIN_KINDS = ("MatMul", "Add", "ReLU", "SoftMax", "Multiply", "Sigmoid", "Abs", "Tanh")
FANOUT_KINDS = ("Add", "ReLU", "Sigmoid", "Multiply", "Abs", "MatMul")
BINARY = ("MatMul", "Add", "Multiply")


def _lt(tid: int) -> dict:
    return {"id": tid, "dtype": "f32", "shape": SHAPE, "stride": [], "layout_type": "strided",
            "property_type": "undef"}


def _op(oid: int, kind: str, inputs: list, out: int) -> dict:
    attrs = {"axis": {"type": "s64", "value": -1}} if kind == "SoftMax" else {}
    return {"id": oid, "name": f"{kind.lower()}_{oid}", "kind": kind, "attrs": attrs,
            "inputs": [_lt(t) for t in inputs], "outputs": [_lt(out)]}


def chain(n: int) -> dict:
    """Tensor ids: op i reads 2i (its producer's output; 0 is the input), writes
    2i + 2, and an outside operand (binary kinds) is 2i + 1."""
    ops, inputs = [], [0]
    for i in range(n):
        kind = CHAIN_KINDS[i % len(CHAIN_KINDS)]
        ins = [2 * i, 2 * i + 1] if kind in BINARY else [2 * i]
        inputs += ins[1:]
        ops.append(_op(i, kind, ins, 2 * i + 2))
    return {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "input_ports": inputs,
            "output_ports": [2 * n], "graph": ops}


def fanout(n: int) -> dict:
    """Op 0 is ReLU(0) -> 1; op i >= 1 reads 1 (and 2i + 1 for binary kinds) and
    writes 2i + 2."""
    ops, inputs, outputs = [_op(0, "ReLU", [0], 1)], [0], []
    for i in range(1, n):
        kind = FANOUT_KINDS[i % len(FANOUT_KINDS)]
        ins = [1, 2 * i + 1] if kind in BINARY else [1]
        inputs += ins[1:]
        outputs.append(2 * i + 2)
        ops.append(_op(i, kind, ins, 2 * i + 2))
    return {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "input_ports": inputs,
            "output_ports": outputs, "graph": ops}


SHAPES = {"chain": chain, "fanout": fanout}


# -------------------------------------------------------------------- the child
def child(path: str, mode: str) -> dict:
    """Times of each phase (mode "time"), or the peak of Python allocations over
    all three (mode "memory")."""
    import tracemalloc

    import graphc
    from graphc import graph as core
    from graphc.jsonio import load_graph_file
    from graphc.partition import partition_graph

    partition_graph(graphc.load_graph(chain(len(CHAIN_KINDS))))   # code generation's rules imported
    spent = {"validate": 0.0}
    finalize = core.Graph.finalize

    def timed_finalize(self):
        t = time.process_time()
        try:
            return finalize(self)
        finally:
            spent["validate"] += time.process_time() - t
    core.Graph.finalize = timed_finalize
    if mode == "memory":
        tracemalloc.start()
    t0 = time.process_time()
    g = load_graph_file(path)
    t1 = time.process_time()
    core.Graph.finalize = finalize
    parts = partition_graph(g)
    t2 = time.process_time()
    if mode == "memory":
        return {"peak_mb": tracemalloc.get_traced_memory()[1] / 2 ** 20}
    return {"ops": len(g.ops), "partitions": len(parts), "load": t1 - t0 - spent["validate"],
            "validate": spent["validate"], "partition": t2 - t1, "json_mb": os.path.getsize(path) / 2 ** 20}


# ------------------------------------------------------------------- the parent
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--shapes", default="chain,fanout")
    ap.add_argument("--repeat", type=int, default=3, help="timed children per size (the fastest is shown)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child)))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"load average {load_average()} (1 minute) before the runs; CPU seconds, the fastest of {args.repeat} "
          "children; peak MB of Python allocations (tracemalloc, a child of its own); x: growth over the size "
          "before")
    head = f"{'graph':8s} {'ops':>7s} {'JSON MB':>8s} {'parts':>7s} | {'load s':>7s} {'x':>5s} | " \
           f"{'valid. s':>8s} {'x':>5s} | {'part. s':>7s} {'x':>5s} | {'total s':>7s} {'x':>5s} | " \
           f"{'peak MB':>7s} {'x':>5s}"
    print(head)
    print("-" * len(head))
    for shape in args.shapes.split(","):
        before = None
        for n in sizes:
            with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                json.dump(SHAPES[shape](n), f)
            try:
                runs = [run_child(__file__, "--child", f.name, "time") for _ in range(max(1, args.repeat))]
                r = {k: min(run[k] for run in runs) for k in runs[0]}
                r.update(run_child(__file__, "--child", f.name, "memory"))
            finally:
                os.unlink(f.name)
            r["total"] = r["load"] + r["validate"] + r["partition"]

            def cell(key, width):
                x = f"{r[key] / before[key]:5.1f}" if before and before[key] > 0 else "     "
                return f"{r[key]:{width}.2f} {x}"
            print(f"{shape:8s} {r['ops']:7d} {r['json_mb']:8.1f} {r['partitions']:7d} | {cell('load', 7)} | "
                  f"{cell('validate', 8)} | {cell('partition', 7)} | {cell('total', 7)} | {cell('peak_mb', 7)}")
            sys.stdout.flush()
            before = r
    print(f"load average {load_average()} after the runs")


if __name__ == "__main__":
    main()
