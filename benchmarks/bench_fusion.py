"""Fused vs debug (one partition per op) vs PyTorch, side by side in one run.

Cases:
  * eltwise chain: Add (a [C] bias) -> ReLU -> Multiply (by a [C] scale) -> Add
    (a residual of the full shape) on 16M f32 elements;
  * ReLUBackward -> BatchNormTrainingBackward on 2x192x71x71 f32 (NCX).

Peers: torch eager and torch.compile (CPU, inductor) on the same math, numpy.

Thread pools: numba's and torch's OpenMP pools starve each other in one
process, so every contender is timed in its own subprocess on the same seeded
data (this script re-invokes itself with ``--contender NAME``); the parent
prints one table with ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

CHAIN_SHAPE = (16, 1024, 1024)   # 16M elements, C = last dim
BN_SHAPE = (2, 192, 71, 71)
EPS = 0.0625


def timeit(fn, warmup=2, repeat=10):
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3, float(np.median(ts)) * 1e3


# ----------------------------------------------------------------- data
def chain_data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(CHAIN_SHAPE, dtype=np.float32)
    b = rng.standard_normal(CHAIN_SHAPE[-1:], dtype=np.float32)
    s = rng.standard_normal(CHAIN_SHAPE[-1:], dtype=np.float32)
    res = rng.standard_normal(CHAIN_SHAPE, dtype=np.float32)
    return x, b, s, res


def bn_data():
    rng = np.random.default_rng(0)
    src = rng.standard_normal(BN_SHAPE, dtype=np.float32)
    relu_src = rng.standard_normal(BN_SHAPE, dtype=np.float32)
    dy = rng.standard_normal(BN_SHAPE, dtype=np.float32)
    c = BN_SHAPE[1]
    mean = src.mean(axis=(0, 2, 3)).astype(np.float32)
    var = src.var(axis=(0, 2, 3)).astype(np.float32)
    gamma = rng.uniform(0.5, 1.5, c).astype(np.float32)
    return src, relu_src, dy, mean, var, gamma


# ----------------------------------------------------------------- graphc
def chain_graph():
    from graphc.builder import GraphBuilder
    bld = GraphBuilder()
    x = bld.tensor("f32", CHAIN_SHAPE)
    b = bld.tensor("f32", CHAIN_SHAPE[-1:])
    s = bld.tensor("f32", CHAIN_SHAPE[-1:])
    res = bld.tensor("f32", CHAIN_SHAPE)
    a = bld.op("Add", [x, b])[0]
    r = bld.op("ReLU", [a])[0]
    m = bld.op("Multiply", [r, s])[0]
    bld.op("Add", [m, res])
    return bld.finalize(), (x.id, b.id, s.id, res.id)


def bn_graph():
    from graphc.builder import GraphBuilder
    bld = GraphBuilder()
    f = "f32"
    c = BN_SHAPE[1]
    src, rsrc, dy = (bld.tensor(f, BN_SHAPE) for _ in range(3))
    mean, var, gamma = (bld.tensor(f, [c]) for _ in range(3))
    d = bld.op("ReLUBackward", [rsrc, dy], attrs={"use_dst": False})[0]
    bld.op("BatchNormTrainingBackward", [src, d, mean, var, gamma],
           out=[(f, list(BN_SHAPE)), (f, [c]), (f, [c])], attrs={"epsilon": EPS, "data_format": "NCX"})
    return bld.finalize(), (src.id, rsrc.id, dy.id, mean.id, var.id, gamma.id)


def graphc_case(case, policy):
    import graphc
    g, ids = chain_graph() if case == "chain" else bn_graph()
    data = chain_data() if case == "chain" else bn_data()
    inputs = dict(zip(ids, data))
    cg = graphc.compile(g, policy=policy)
    return lambda: cg.run(inputs), len(cg.partitions)


# ----------------------------------------------------------------- torch / numpy
def torch_case(case, compiled):
    import torch
    torch.set_num_threads(2)
    if case == "chain":
        args = tuple(torch.from_numpy(a) for a in chain_data())

        def f(x, b, s, res):
            return torch.relu(x + b) * s + res
    else:
        src, rsrc, dy, mean, var, gamma = (torch.from_numpy(a) for a in bn_data())
        invstd = torch.rsqrt(var + EPS)

        def f(src, rsrc, dy, mean, invstd, gamma):
            d = torch.where(rsrc > 0, dy, torch.zeros_like(dy))
            return torch.ops.aten.native_batch_norm_backward(d, src, gamma, None, None, mean, invstd, True, EPS,
                                                             [True, True, True])
        args = (src, rsrc, dy, mean, invstd, gamma)
    if compiled:
        f = torch.compile(f)
    with torch.no_grad():
        f(*args)
    return lambda: f(*args), 0


def numpy_case(case):
    if case == "chain":
        x, b, s, res = chain_data()

        def f():
            return np.maximum(x + b, 0) * s + res
    else:
        src, rsrc, dy, mean, var, gamma = bn_data()

        def f():
            d = np.where(rsrc > 0, dy, 0)
            ax = (0, 2, 3)
            m = mean[None, :, None, None]
            inv = 1 / np.sqrt(var + EPS)[None, :, None, None]
            xhat = (src - m) * inv
            db = d.sum(axis=ax)
            dg = (d * xhat).sum(axis=ax)
            n = src.size / src.shape[1]
            dx = gamma[None, :, None, None] * inv * (d - db[None, :, None, None] / n - xhat * dg[None, :, None, None] / n)
            return dx, dg, db
    return f, 0


CONTENDERS = {
    "graphc fused": lambda case: graphc_case(case, "fusion"),
    "graphc debug": lambda case: graphc_case(case, "debug"),
    "torch eager": lambda case: torch_case(case, False),
    "torch.compile": lambda case: torch_case(case, True),
    "numpy": numpy_case,
}


def child(case, name):
    fn, nparts = CONTENDERS[name](case)
    mn, med = timeit(fn)
    print(json.dumps({"min_ms": mn, "median_ms": med, "partitions": nparts}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--contender")
    ap.add_argument("--case", choices=("chain", "bnorm"), action="append")
    args = ap.parse_args()
    if args.contender:
        child(args.case[0], args.contender)
        return
    for case in args.case or ["chain", "bnorm"]:
        rows = {}
        for name in CONTENDERS:
            p = subprocess.run([sys.executable, __file__, "--contender", name, "--case", case],
                               capture_output=True, text=True, env=dict(os.environ))
            if p.returncode != 0:
                rows[name] = None
                print(f"  {name}: failed: {p.stderr.strip().splitlines()[-1] if p.stderr else p.returncode}",
                      file=sys.stderr)
                continue
            rows[name] = json.loads(p.stdout.strip().splitlines()[-1])
        base = rows.get("graphc fused")
        title = {"chain": f"Add->ReLU->Multiply->Add, f32 {'x'.join(map(str, CHAIN_SHAPE))}",
                 "bnorm": f"ReLUBackward->BatchNormTrainingBackward, f32 {'x'.join(map(str, BN_SHAPE))} NCX"}[case]
        print(f"\n{title}")
        print(f"| {'contender':14s} | min ms | median ms | partitions | time / graphc fused |")
        print("|---|---|---|---|---|")
        for name, r in rows.items():
            if r is None:
                print(f"| {name:14s} | failed | | | |")
                continue
            ratio = r["median_ms"] / base["median_ms"] if base else float("nan")
            parts = r["partitions"] or ""
            print(f"| {name:14s} | {r['min_ms']:.2f} | {r['median_ms']:.2f} | {parts} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()
