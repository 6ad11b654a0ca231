"""Start time and cold kernel compile time.

    python benchmarks/bench_start.py [--runs N] [--skip-start] [--skip-compile] [--worker]

Warm start: a fresh process times ``import graphc`` (and lists which of numba,
networkx, scipy, torch it loaded), graphc.load_graph of the corpus
op/f32/bnorm_bwd.json (BatchNormTrainingBackward, 2x192x71x71), graphc.compile
and the first run, with a warm kernel cache (a temporary GRAPHC_CACHE_DIR one
run has filled) and warm bytecode (a temporary PYTHONPYCACHEPREFIX, even when
PYTHONDONTWRITEBYTECODE is set here); median of --runs processes.

Cold compile: a fresh process with an empty GRAPHC_CACHE_DIR compiles the
corpus graphs of CASES (their kernels: harness-sized, so more of them parallel
than the test suite's small ones) after numba's one-time start (a trivial
kernel), timing each kernel's source generation (graphc.lowering.build_kernel)
and numba compile (graphc's compile_kernel), and splitting numba's time into
its pipeline stages (numba's per-pass timings of each compiled function, and
LLVM's module optimisation and machine code from numba's code library);
median over --runs processes of the per-kernel mean.  CPU time of the
compiling thread, so that other load on the machine counts little; wall time
beside it.  With --worker, the same kernels compiled by graphc's compile
worker process (every kernel past the first: COLD_IN_PROCESS = 0) give the
worker round-trip: wall per kernel against in process.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OP = Path(os.environ.get("GRAPHC_SHARED", "/work/shared")) / "onednn/benchdnn/inputs/graph/op"
START_CASE = OP / "f32/bnorm_bwd.json"
#: corpus graphs compiled cold: elementwise, binary, pooling, norms, softmax,
#: reductions, quantization, layout, interpolation, matmul and convolution
CASES = ["f32/abs.json", "f32/add.json", "f32/gelu.json", "f32/prelu_bwd.json", "f32/avgpool.json",
         "f32/maxpool_bwd.json", "f32/bnorm_bwd.json", "f32/lnorm.json", "f32/softmax.json",
         "f32/logsoftmax_bwd.json", "f32/reducesum.json", "f32/quantize.json", "f32/reorder.json",
         "f32/static_transpose.json", "f32/interpolate.json", "f32/matmul.json", "f32/conv_2d.json",
         "bf16/typecast.json", "f16/dynamicdq_s4.json"]
HEAVY = ("numba", "networkx", "scipy", "torch")


# ------------------------------------------------------------------ children

def child_start() -> None:
    t0 = time.perf_counter()
    import graphc
    t1 = time.perf_counter()
    heavy = [m for m in HEAVY if m in sys.modules]
    from graphc.fill import make_inputs
    g = graphc.load_graph(START_CASE)
    inputs = make_inputs(g, seed=0)
    t2 = time.perf_counter()
    cg = graphc.compile(g)
    t3 = time.perf_counter()
    cg.run(inputs)
    t4 = time.perf_counter()
    print(json.dumps({"import": t1 - t0, "load": t2 - t1, "compile": t3 - t2, "run": t4 - t3, "total": t4 - t0,
                      "cpu": time.process_time(), "import_loaded": heavy}))


def child_compile(in_process: bool) -> None:
    import warnings
    warnings.simplefilter("ignore")
    import numba
    from numba.core import codegen
    import graphc
    import graphc.compiler.jit as jit
    import graphc.lowering as lowering
    from graphc.codegen import cache_worker
    from graphc.codegen.outline import runs_parallel

    cache_worker.COLD_IN_PROCESS = 10 ** 9 if in_process else 0
    numba.njit(lambda x: x + 1)(1)          # numba's one-time start, not a kernel's
    clock = time.thread_time
    llvm = [0.0, 0]                          # (seconds, nesting)

    def finalize(self, _orig=codegen.CPUCodeLibrary.finalize):
        llvm[1] += 1
        t = clock()
        try:
            return _orig(self)
        finally:
            llvm[1] -= 1
            if not llvm[1]:
                llvm[0] += clock() - t

    codegen.CPUCodeLibrary.finalize = finalize
    rows, cur = [], {}

    def build_kernel(*a, _orig=lowering.build_kernel, **k):
        t = clock()
        out = _orig(*a, **k)
        cur["source"] = cur.get("source", 0.0) + clock() - t
        return out

    def compile_kernel(fn, sig, _orig=jit.compile_kernel):
        llvm[0] = 0.0
        c, w = clock(), time.perf_counter()
        kids = _worker_cpu(cache_worker)
        _orig(fn, sig)
        kids2 = _worker_cpu(cache_worker)
        row = {"source": cur.pop("source", 0.0), "compile_cpu": clock() - c, "compile_wall": time.perf_counter() - w,
               "llvm": llvm[0], "parallel": runs_parallel(fn.py_func.__globals__.get("__graphc_source__")),
               "worker_cpu": kids2 - kids if kids2 >= kids else kids2}   # (a new worker: from 0)
        stages = {}
        ns = fn.py_func.__globals__
        for disp in [v for v in ns.values() if getattr(getattr(v, "py_func", None), "__globals__", None) is ns]:
            for cres in disp.overloads.values():
                for passes in (cres.metadata or {}).get("pipeline_times", {}).values():
                    for name, t in passes.items():
                        stage = _stage(name.split("_", 1)[-1])
                        stages[stage] = stages.get(stage, 0.0) + t.init + t.run + t.finalize
        row["stages"] = stages
        rows.append(row)

    lowering.build_kernel = build_kernel
    jit.compile_kernel = compile_kernel
    failed = 0
    for case in CASES:
        try:
            graphc.compile(graphc.load_graph(OP / case))
        except graphc.GraphcError:
            failed += 1
    print(json.dumps({"rows": rows, "failed": failed}))


def _worker_cpu(cache_worker) -> float:
    """CPU seconds of graphc's compile worker process so far (0 without one)."""
    w = cache_worker._worker
    if w is None:
        return 0.0
    try:
        with open(f"/proc/{w.proc.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def _stage(name: str) -> str:
    if "type_inference" in name:
        return "type inference"
    if "parfor" in name and "lowering" not in name:
        return "parfor passes"
    if "lowering" in name:
        return "lowering (incl. LLVM)"
    return "other numba passes"


# ------------------------------------------------------------------- parent
def _spawn(args, env) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], check=True, capture_output=True, text=True,
                         cwd=ROOT, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(extra)
    return env


def bench_start(runs: int, tmp: str) -> None:
    env = _env(GRAPHC_CACHE_DIR=os.path.join(tmp, "kernels"), PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
    _spawn(["--child-start"], env)          # fills the kernel cache and the bytecode
    res = [_spawn(["--child-start"], env) for _ in range(runs)]
    med = {k: statistics.median(r[k] for r in res) for k in ("import", "load", "compile", "run", "total", "cpu")}
    print(f"warm start, bnorm_bwd.json (median of {runs} fresh processes, warm kernel cache and bytecode):")
    print(f"  import graphc {med['import']:.3f} s (loaded: {', '.join(res[0]['import_loaded']) or 'none of ' + ', '.join(HEAVY)})")
    print(f"  load_graph + inputs {med['load']:.3f} s, compile {med['compile']:.3f} s, first run {med['run']:.3f} s")
    every = ", ".join(f"{r['total']:.3f}" for r in res)
    print(f"  total {med['total']:.3f} s (all: {every}); process CPU {med['cpu']:.3f} s")


def bench_compile(runs: int, tmp: str, worker: bool) -> None:
    modes = [True, False] if worker else [True]
    for in_process in modes:
        per_run = []
        for i in range(runs):
            env = _env(GRAPHC_CACHE_DIR=os.path.join(tmp, f"cold-{in_process}-{i}"),
                       PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
            per_run.append(_spawn(["--child-compile", "in" if in_process else "worker"], env))
        n = len(per_run[0]["rows"])
        par = sum(r["parallel"] for r in per_run[0]["rows"])

        def med(key, rows_of=lambda r: r["rows"]):
            return statistics.median(statistics.fmean(key(x) for x in rows_of(r)) for r in per_run)

        where = "in process" if in_process else "by the compile worker"
        print(f"\ncold compile {where}: {n} kernels ({par} parallel) of {len(CASES) - per_run[0]['failed']} "
              f"corpus graphs; per kernel, median of {runs} processes:")
        if in_process:
            cpu = med(lambda x: x["compile_cpu"])
            print(f"  numba compile {cpu:.3f} s CPU ({med(lambda x: x['compile_wall']):.3f} s wall), "
                  f"source generation {med(lambda x: x['source']):.4f} s")
            stages = sorted({s for r in per_run for x in r["rows"] for s in x["stages"]})
            passes = med(lambda x: sum(x["stages"].values()))
            print(f"  numba's passes (their own wall clock: {passes:.3f} s per kernel), shares:")
            for s in stages:
                v = med(lambda x: x["stages"].get(s, 0.0))
                print(f"    {s:24s} {v / passes:4.0%}")
            v = med(lambda x: x["llvm"])
            print(f"  LLVM optimisation and machine code (in lowering) {v:.3f} s CPU ({v / cpu:.0%} of the compile)")
            for kind in (False, True):
                sub = [statistics.fmean(x["compile_cpu"] for x in r["rows"] if x["parallel"] == kind)
                       for r in per_run if any(x["parallel"] == kind for x in r["rows"])]
                if sub:
                    print(f"    {'parallel' if kind else 'serial'} kernels: {statistics.median(sub):.3f} s CPU each")
        else:
            print(f"  wall {med(lambda x: x['compile_wall']):.3f} s per kernel (worker CPU "
                  f"{med(lambda x: x['worker_cpu']):.3f} s, this process {med(lambda x: x['compile_cpu']):.3f} s "
                  f"loading it from the cache)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="fresh processes per figure (median)")
    ap.add_argument("--skip-start", action="store_true")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--worker", action="store_true", help="also time the compile worker's round-trip")
    ap.add_argument("--child-start", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-compile", choices=("in", "worker"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_start:
        return child_start()
    if args.child_compile:
        return child_compile(args.child_compile == "in")
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_start:
            bench_start(args.runs, tmp)
        if not args.skip_compile:
            bench_compile(max(1, args.runs // 2), tmp, args.worker)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
