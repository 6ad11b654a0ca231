"""Row-wise ops along the last dim: graphc's kernels against torch eager, each contender in its own process.

    python benchmarks/bench_norm_softmax.py [--repeat N] [--threads T] [--only TEXT]

LayerNorm (gamma, beta), RMSNorm (gamma), SoftMax and LogSoftmax over rows of
f32 and bf16, 4096x1024 (the sizes of issue 17's goals) and 2048x4096.  Each
(case, contender) runs in a subprocess of its own, one after the other: numba's
and torch's thread pools starve each other in one process.  Contenders:
"graphc" is CompiledGraph.run (the kernel plus allocating the outputs, as torch
allocates its own), "kernel" the compiled kernel alone into outputs allocated
once, "torch" torch eager (its own bf16 kernels for bf16), "triad" a numba
parallel triad a = b + s * c moving the op's least traffic (every input read
once, every output written once).  Times are the best of --repeat runs after
two warm-up runs; torch/gc above 1 means graphc is faster; "GB/s" is the least
traffic over the kernel's time and "triad" the kernel's share of the triad's
bandwidth.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from children import fastest as timeit  # noqa: E402

EPS = 1e-5
SHAPES = [(4096, 1024), (2048, 4096)]


def rand(shape, dt, seed):
    from graphc.types import DataType
    x = np.random.default_rng(seed).uniform(-4, 4, size=shape).astype(np.float32)
    return x.astype(DataType(dt).np)


def case_inputs(kind, rows, h, dt):
    """(graphc input specs, arrays, attrs) of one case."""
    x = rand((rows, h), dt, 0)
    ins, arrays = [(dt, [rows, h])], [x]
    if kind in ("LayerNorm", "RMSNorm"):
        for k in range(2 if kind == "LayerNorm" else 1):
            ins.append(("f32", [h]))
            arrays.append(rand((h,), "f32", 1 + k))
        attrs = {"epsilon": EPS} | ({"keep_stats": False} if kind == "LayerNorm" else {})
    else:
        attrs = {"axis": -1}
    return ins, arrays, attrs


def child(kind, rows, h, dt, who, repeat, threads):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    ins, arrays, attrs = case_inputs(kind, rows, h, dt)
    if who == "torch":
        import torch
        torch.set_num_threads(threads)
        tdt = torch.bfloat16 if dt == "bf16" else torch.float32
        x, *p = [torch.from_numpy(a.astype(np.float32)).to(tdt) for a in arrays]
        fn = {"LayerNorm": lambda: torch.nn.functional.layer_norm(x, (h,), p[0], p[1], EPS),
              "RMSNorm": lambda: torch.nn.functional.rms_norm(x, (h,), p[0], EPS),
              "SoftMax": lambda: torch.softmax(x, -1),
              "LogSoftmax": lambda: torch.log_softmax(x, -1)}[kind]
        with torch.no_grad():
            return timeit(fn, repeat)
    import numba
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    import graphc
    from graphc.builder import single_op_graph
    g = single_op_graph(kind, ins, [(dt, [-1, -1])], attrs)
    cg = graphc.compile(g)
    feed = dict(zip(g.input_ports, arrays))
    (cp,) = cg.compiled
    given = cg.run(feed)
    nbytes = sum(a.nbytes for a in arrays) + sum(a.nbytes for a in given.values())
    if who == "graphc":
        return timeit(lambda: cg.run(feed), repeat)
    if who == "kernel":
        return [timeit(lambda: cp.execute(feed, outputs=given), repeat), nbytes]
    return timeit(triad(nbytes), repeat)


def triad(nbytes):
    """A numba parallel triad over three float32 arrays moving ``nbytes`` in all."""
    import numba

    @numba.njit(parallel=True, nogil=True)
    def run(a, b, c, s):
        for k in numba.prange(a.shape[0]):
            a[k] = b[k] + s * c[k]
    n = max(1, nbytes // 12)
    a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.full(n, 2, np.float32)
    return lambda: run(a, b, c, np.float32(0.5))


CASES = [(kind, rows, h, dt) for rows, h in SHAPES
         for kind, dts in (("LayerNorm", ("f32", "bf16")), ("RMSNorm", ("f32",)), ("SoftMax", ("f32", "bf16")),
                           ("LogSoftmax", ("f32",)))
         for dt in dts]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--only", default="", help="run the cases whose name contains this text")
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        kind, rows, h, dt, who = args.child
        print(json.dumps(child(kind, int(rows), int(h), dt, who, args.repeat, args.threads)))
        return

    def run(case, who):
        cmd = [sys.executable, __file__, "--child", *map(str, case), who, "--repeat", str(args.repeat),
               "--threads", str(args.threads)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"{case} / {who} failed:\n{p.stderr}")
        return json.loads(p.stdout.strip().splitlines()[-1])
    print(f"threads {args.threads}, load average {os.getloadavg()[0]:.2f}; best of {args.repeat} runs, ms")
    head = (f"{'op':<24} {'dtype':<5} {'graphc':>8} {'torch':>8} {'torch/gc':>8} {'kernel':>8} {'GB/s':>6}"
            f" {'triad':>6}")
    print(head)
    print("-" * len(head))
    for case in CASES:
        kind, rows, h, dt = case
        name = f"{kind} {rows}x{h}"
        if args.only not in name:
            continue
        t_gc, t_torch = run(case, "graphc"), run(case, "torch")
        t_kernel, nbytes = run(case, "kernel")
        t_triad = run(case, "triad")
        print(f"{name:<24} {dt:<5} {t_gc * 1e3:8.2f} {t_torch * 1e3:8.2f} {t_torch / t_gc:8.2f} "
              f"{t_kernel * 1e3:8.2f} {nbytes / t_kernel / 1e9:6.1f} {t_triad / t_kernel:6.0%}", flush=True)


if __name__ == "__main__":
    main()
