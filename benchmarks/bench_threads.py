"""Two thread pools in one process: numba's (graphc's kernels) and torch's
intra-op pool (its ATen ops), as graphc.torch runs them side by side.

    python benchmarks/bench_threads.py [--repeat N]

Each arrangement runs in its OWN process (thread pools cannot be reset):
  numba threading layer   NUMBA_THREADING_LAYER = omp (the OpenMP runtime torch also
                          links), workqueue (numba's own threads), or numba's default
  OMP_WAIT_POLICY         unset, PASSIVE (idle threads sleep), ACTIVE (they spin)
The child times, as medians of --repeat runs:
  torch before   torch's BatchNorm backward (2x64x56x56) and a 512^2 GEMM, before
                 any numba kernel has run in the process
  graphc         a graphc kernel (SoftMax over 512x4096 f32, numba-parallel)
  torch after    the same torch ops after graphc's kernel has run
  interleaved    torch BN backward, graphc SoftMax, torch GEMM in turn (the
                 backend's pattern: regions between ATen calls), per round
The machine's load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from children import call_times

ARRANGEMENTS = [
    ("numba default, OMP_WAIT_POLICY unset", {}),
    ("numba default, OMP_WAIT_POLICY=PASSIVE", {"OMP_WAIT_POLICY": "PASSIVE"}),
    ("numba omp, unset", {"NUMBA_THREADING_LAYER": "omp"}),
    ("numba omp, PASSIVE", {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "PASSIVE"}),
    ("numba omp, ACTIVE", {"NUMBA_THREADING_LAYER": "omp", "OMP_WAIT_POLICY": "ACTIVE"}),
    ("numba workqueue, unset", {"NUMBA_THREADING_LAYER": "workqueue"}),
    ("numba workqueue, PASSIVE", {"NUMBA_THREADING_LAYER": "workqueue", "OMP_WAIT_POLICY": "PASSIVE"}),
]


def _median_ms(fn, repeat: int) -> float:
    times = call_times(fn, repeat, warmup=1)
    return 1e3 * times[len(times) // 2]


def child(repeat: int) -> dict:
    import numpy as np
    import torch
    aten = torch.ops.aten
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 64, 56, 56, generator=g)
    dy = torch.randn_like(x)
    w = torch.ones(64)
    mean, invstd = x.mean((0, 2, 3)), 1 / (x.var((0, 2, 3)) + 1e-5).sqrt()
    a, b = torch.randn(512, 512, generator=g), torch.randn(512, 512, generator=g)

    def bn():
        aten.native_batch_norm_backward(dy, x, w, None, None, mean, invstd, True, 1e-5, [True] * 3)

    def mm():
        torch.mm(a, b)

    out = {"torch threads": torch.get_num_threads()}
    out["bn before"], out["mm before"] = _median_ms(bn, repeat), _median_ms(mm, repeat)
    import graphc
    from graphc import Graph, LogicalTensor, Op
    gr = Graph()
    gr.add_op(Op(0, "SoftMax", [LogicalTensor(0, "f32", [512, 4096])], [LogicalTensor(1, "f32", [512, 4096])],
                 {"axis": 1}))
    cg = graphc.compile(gr.finalize())
    s = {0: np.random.default_rng(0).standard_normal((512, 4096)).astype(np.float32)}
    out["graphc"] = _median_ms(lambda: cg.run(s), repeat)
    out["bn after"], out["mm after"] = _median_ms(bn, repeat), _median_ms(mm, repeat)

    def turn():
        bn()
        cg.run(s)
        mm()
    out["interleaved"] = _median_ms(turn, repeat)
    import numba
    out["numba layer"] = numba.threading_layer()
    out["numba threads"] = numba.get_num_threads()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--child", action="store_true")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.repeat)))
        return
    print(f"load average before: {os.getloadavg()}")
    cols = ["bn before", "bn after", "mm before", "mm after", "graphc", "interleaved"]
    print(f"{'arrangement':42} {'layer':10} " + " ".join(f"{c:>11}" for c in cols) + "   (ms, medians)")
    for name, env in ARRANGEMENTS:
        e = {k: v for k, v in os.environ.items() if k not in ("NUMBA_THREADING_LAYER", "OMP_WAIT_POLICY")}
        e.update(env)
        res = subprocess.run([sys.executable, __file__, "--child", "--repeat", str(args.repeat)], env=e,
                             capture_output=True, text=True)
        if res.returncode != 0:
            print(f"{name:42} failed: {res.stderr.strip().splitlines()[-1]}")
            continue
        r = json.loads(res.stdout.strip().splitlines()[-1])
        print(f"{name:42} {r['numba layer']:10} " + " ".join(f"{r[c]:11.2f}" for c in cols))
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
