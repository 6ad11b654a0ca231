"""BatchNormTrainingBackward on 2x192x71x71 f32 (corpus op/f32/bnorm_bwd.json):
graphc's compiled kernel against torch eager and numpy, NCX and NXC.

    python benchmarks/bench_bnorm_bwd.py [--repeat N] [--rounds R]

Contenders, each timed in its OWN subprocess on the same data (numba's and
torch's thread pools starve each other in one process: torch's BN backward went
from 0.66 ms to 10 ms after a numba parallel kernel had run), every one with its
library's default thread count:
  graphc  graphc.compile(g) once, then CompiledGraph.run(inputs) (allocates its outputs)
  torch   torch.ops.aten.native_batch_norm_backward(dy, x, gamma, None, None, mean,
          invstd, True, eps, [True] * 3) on tensors of the same layout (invstd
          precomputed, torch's API takes it in place of the variance)
  numpy   the same math in f32 numpy: per-channel sums, then diff_src
  triad   a numba parallel a = b + s * c over three arrays of the tensor's size
          (the bytes BN backward has to move at least: read src and diff_dst,
          write diff_src), to express graphc's speed as a fraction of the
          machine's bandwidth
The parent runs the contenders in --rounds interleaved rounds and keeps, per
contender, the fastest and the median of all its timed runs (the machine may be
shared: the fastest is the least disturbed).

Cold start: a fresh process with a warm kernel cache times ``import graphc``,
then graphc.load_graph + graphc.compile(g) + one run of bnorm_bwd.json (must be
< 0.5 s); the graphc rounds have filled the cache before.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("GRAPHC_SHARED", "/work/shared")) / "onednn/benchdnn/inputs/graph/op/f32/bnorm_bwd.json"
N, C, H, W = 2, 192, 71, 71
EPS = 0.0625
CONTENDERS = ("graphc", "torch", "numpy", "triad")


# ----------------------------------------------------------------- workers
def _data(path, layout):
    """(src, diff_dst, mean, variance, gamma); src/diff_dst dense in ``layout``."""
    d = np.load(path)
    x, dy = d["src"], d["diff_dst"]
    if layout == "NXC":
        x, dy = (np.ascontiguousarray(a.transpose(0, 2, 3, 1)) for a in (x, dy))
    return x, dy, d["mean"], d["variance"], d["gamma"]


def _graph(layout):
    import graphc
    from graphc.builder import single_op_graph
    if layout == "NCX":
        return graphc.load_graph(CORPUS)
    shape, ch = (N, H, W, C), (C,)
    return single_op_graph("BatchNormTrainingBackward",
                           [("f32", shape), ("f32", shape), ("f32", ch), ("f32", ch), ("f32", ch)],
                           [("f32", shape), ("f32", ch), ("f32", ch)],
                           {"epsilon": EPS, "data_format": "NXC"})


def _contender(name, layout, path):
    """A function running one BN backward (or the triad) on the data."""
    x, dy, mean, var, gamma = _data(path, layout)
    if name == "graphc":
        import graphc
        g = _graph(layout)
        cg = graphc.compile(g)
        inputs = dict(zip(g.input_ports, (x, dy, mean, var, gamma)))
        return lambda: cg.run(inputs)
    if name == "torch":
        import torch
        tx, tdy = torch.from_numpy(x), torch.from_numpy(dy)
        if layout == "NXC":  # the same bytes seen as a channels-last NCHW tensor
            tx, tdy = (t.permute(0, 3, 1, 2) for t in (tx, tdy))
            assert tx.is_contiguous(memory_format=torch.channels_last)
        tm, tg = torch.from_numpy(mean), torch.from_numpy(gamma)
        invstd = 1.0 / torch.sqrt(torch.from_numpy(var) + EPS)
        return lambda: torch.ops.aten.native_batch_norm_backward(tdy, tx, tg, None, None, tm, invstd, True, EPS,
                                                                 [True, True, True])
    if name == "numpy":
        axes = (0, 2, 3) if layout == "NCX" else (0, 1, 2)
        view = (1, C, 1, 1) if layout == "NCX" else (1, 1, 1, C)
        count = np.float32(x.size // C)
        inv = (1.0 / np.sqrt(var + np.float32(EPS))).astype(np.float32)
        m, i, gm = (a.reshape(view) for a in (mean, inv, gamma))

        def numpy_bwd():
            xm = x - m
            diff_beta = dy.sum(axis=axes)
            diff_gamma = (dy * xm).sum(axis=axes) * inv
            dx = gm * i * (dy - diff_beta.reshape(view) / count - xm * i * diff_gamma.reshape(view) / count)
            return dx, diff_gamma, diff_beta
        return numpy_bwd
    if name == "triad":
        from numba import njit, prange

        @njit(parallel=True, nogil=True)
        def triad(a, b, c, s):
            for k in prange(a.shape[0]):
                a[k] = b[k] + s * c[k]
        b, c = x.reshape(-1), dy.reshape(-1)
        a = np.empty_like(b)
        s = np.float32(0.5)
        return lambda: triad(a, b, c, s)
    raise ValueError(name)


def worker(name, layout, path, repeat):
    fn = _contender(name, layout, path)
    for _ in range(5):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    print(json.dumps(times))


def cold_start():
    t0 = time.perf_counter()
    import graphc
    from graphc.fill import make_inputs
    t1 = time.perf_counter()
    g = graphc.load_graph(CORPUS)
    inputs = make_inputs(g, seed=0)
    t2 = time.perf_counter()
    graphc.compile(g).run(inputs)
    t3 = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "compile_run": t3 - t2}))


# ------------------------------------------------------------------ parent
def _spawn(*args) -> object:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=50, help="timed runs per contender per round")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds of every contender")
    ap.add_argument("--worker", nargs=3, metavar=("CONTENDER", "LAYOUT", "DATA"), help=argparse.SUPPRESS)
    ap.add_argument("--cold-start", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(*args.worker, args.repeat)
    if args.cold_start:
        return cold_start()

    rng = np.random.default_rng(0)
    x = (np.round(rng.uniform(-4, 4, (N, C, H, W)) * 64) / 64).astype(np.float32)
    dy = (np.round(rng.uniform(-4, 4, (N, C, H, W)) * 64) / 64).astype(np.float32)
    data = dict(src=x, diff_dst=dy, mean=x.mean(axis=(0, 2, 3), dtype=np.float64).astype(np.float32),
                variance=x.var(axis=(0, 2, 3), dtype=np.float64).astype(np.float32),
                gamma=rng.uniform(-2, 2, C).astype(np.float32))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bnorm_bwd.npz")
        np.savez(path, **data)
        times = {}
        for r in range(args.rounds):
            for layout in ("NCX", "NXC"):
                for name in CONTENDERS:
                    t = _spawn("--worker", name, layout, path, "--repeat", str(args.repeat))
                    times.setdefault((layout, name), []).extend(t)
        cold = [_spawn("--cold-start") for _ in range(3)]

    nbytes = 3 * x.nbytes
    print(f"BatchNormTrainingBackward f32 {N}x{C}x{H}x{W}, eps {EPS}; fastest / median of "
          f"{args.rounds} x {args.repeat} runs, each contender in its own process")
    print(f"{'layout':7}{'contender':10}{'min ms':>9}{'median ms':>11}{'GB/s':>8}")
    for layout in ("NCX", "NXC"):
        for name in CONTENDERS:
            t = times[(layout, name)]
            print(f"{layout:7}{name:10}{min(t) * 1e3:9.3f}{np.median(t) * 1e3:11.3f}{nbytes / min(t) / 1e9:8.1f}")
    print()
    for layout in ("NCX", "NXC"):
        best = {name: min(times[(layout, name)]) for name in CONTENDERS}
        med = {name: float(np.median(times[(layout, name)])) for name in CONTENDERS}
        print(f"{layout}: torch / graphc = {best['torch'] / best['graphc']:.2f} (medians "
              f"{med['torch'] / med['graphc']:.2f}), numpy / graphc = {best['numpy'] / best['graphc']:.1f} "
              f"(medians {med['numpy'] / med['graphc']:.1f}), graphc at {best['triad'] / best['graphc']:.0%} "
              f"of the triad's bandwidth ({nbytes / best['triad'] / 1e9:.1f} GB/s over {nbytes / 1e6:.1f} MB)")
    imp = min(c["import"] for c in cold)
    cr = [c["compile_run"] for c in cold]
    print(f"\ncold start (fresh process, warm kernel cache, best of 3): import graphc {imp:.3f} s; "
          f"graphc.compile(g) + first run of bnorm_bwd.json {min(cr):.3f} s (all: {', '.join(f'{v:.3f}' for v in cr)})")


if __name__ == "__main__":
    main()
