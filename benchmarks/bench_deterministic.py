"""Deterministic mode's cost: each family of tests/support/determinism.py (a
benchdnn corpus case per family with a reduction, and the attention pattern)
run with and without ``deterministic``, on this machine's numba threads; the
fastest of the repeated runs (ms), each contender in its own process.

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


def child(name: str, deterministic: bool, runs: int) -> float:
    import graphc
    from support.determinism import graph_and_inputs
    g, inputs = graph_and_inputs(name, deterministic)
    cg = graphc.compile(g)
    cg.run(inputs)
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        cg.run(inputs)
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def main():
    from support.determinism import CORPUS_CASES, SDPA_CASES
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--deterministic", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("names", nargs="*")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.deterministic, args.runs)))
        return
    print(f"load average before: {load_average()}")
    print("| family | default ms | deterministic ms | ratio |")
    print("|---|---|---|---|")
    for name in args.names or [*CORPUS_CASES, *SDPA_CASES]:
        base = run_child(__file__, "--child", name, "--runs", str(args.runs))
        det = run_child(__file__, "--child", name, "--runs", str(args.runs), "--deterministic")
        print(f"| {name} | {base:.3f} | {det:.3f} | {det / base:.2f} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
