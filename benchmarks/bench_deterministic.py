"""Deterministic mode's cost: each family of tests/support/determinism.py (a
benchdnn corpus case per family with a reduction, and the attention pattern)
compiled with and without ``deterministic`` and run on this machine's numba
threads; the fastest of the repeated runs (ms).  Both contenders are graphc on
one thread pool: they run in one process per family (its own), alternating run
by run, so that a burst of load on the shared machine hits both alike.  The
ratio is deterministic over default; "same kernels" says whether the flag
changed the generated source at this thread count at all.

    python benchmarks/bench_deterministic.py [--runs N] [NAME...]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from children import load_average, run_child

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def child(name: str, runs: int) -> list:
    import graphc
    from support.determinism import graph_and_inputs
    compiled = []
    for deterministic in (False, True):
        g, inputs = graph_and_inputs(name, deterministic)
        cg = graphc.compile(g)
        cg.run(inputs)
        compiled.append((cg, inputs))
    best = [float("inf"), float("inf")]
    for _ in range(runs):
        for i, (cg, inputs) in enumerate(compiled):
            t0 = time.perf_counter()
            cg.run(inputs)
            best[i] = min(best[i], time.perf_counter() - t0)
    return [best[0] * 1e3, best[1] * 1e3, compiled[0][0].source == compiled[1][0].source]


def main():
    from support.determinism import CORPUS_CASES, SDPA_CASES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.runs)))
        return
    print(f"load average before: {load_average()}")
    print("| family | default ms | deterministic ms | ratio | same kernels |")
    print("|---|---|---|---|---|")
    for name in args.names or [*CORPUS_CASES, *SDPA_CASES]:
        base, det, same = run_child(__file__, "--child", name, "--runs", str(args.runs))
        print(f"| {name} | {base:.3f} | {det:.3f} | {det / base:.2f} | {'yes' if same else 'no'} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
