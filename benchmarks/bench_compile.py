"""Cold compile time per kernel, split by phase, on a representative set of kernels.

    python benchmarks/bench_compile.py [--runs N] [--src DIR ...] [--per-kernel] [--profile N] [--trampolines-made]
    python benchmarks/bench_compile.py --corpus BATCH [--corpus BATCH ...] [--runs N] [--src DIR ...] [--trampolines-made]

Each run is a fresh process with an empty kernel cache (a temporary
GRAPHC_CACHE_DIR) that compiles the graphs of CASES, test-suite sized
(elementwise chains, narrow floats, norms, softmax, reductions, pooling,
quantization, a transpose, MatMul with epilogues, convolutions, attention; a
few large enough for parallel loops), after numba's one-time start (a trivial
function and one warm-up kernel, not counted).  Every kernel is compiled in
process (no compile worker).  Times are CPU seconds of the compiling thread
(other load on the machine counts little), each phase exclusive of the phases
nested in it (a kernel's helpers compile inside its type inference; LLVM runs
inside lowering):

- source: graphc's source generation (graphc.lowering.build_kernel);
- bytecode/IR: numba's untyped passes (bytecode to IR, inlining closures...);
- type inference; parfor passes (prange to parfors, fusion, pre-lowering);
- other typed passes (IR-level inlining, rewrites, annotations...);
- lowering: numba IR to LLVM IR (parfors outlined into gufuncs);
- LLVM function passes, LLVM module optimisation, machine code;
- cache write: numba saving the overload to its on-disk cache;
- rest: numba's dispatcher around all this (and whatever is not above).

``--corpus BATCH`` (repeatable) compiles the graphs of a ``graphc bench``
batch file instead (e.g. ../shared/onednn/benchdnn/inputs/graph/op/harness_f32_ci:
the shared corpus' cases, at their sizes, most of them large enough for
parallel loops), each tree building them with its own driver; a kernel two
cases share is compiled once, and a case a tree cannot compile is left out for
every tree.

``--trampolines-made`` makes, in each process's start, the trampolines of
kernels of 1 to 16 flat arrays (graphc.codegen.entry; a tree without them
makes none): they are compiled once per kernel cache, not per kernel, so this
times the kernels alone.

``--src DIR`` (repeatable) times the graphc tree in DIR instead of this one
(e.g. ``git archive HEAD | tar -x -C /tmp/base``): one column per tree, over
the cases every tree compiles (an older tree lacks some ops' kernels).
Medians over --runs processes of the per-kernel means; ``--per-kernel`` lists
each kernel's total (median over runs); ``--profile N`` prints the N functions
of largest cumulative time under cProfile (one extra process; cProfile slows
Python-heavy phases, so read it for where, not how much).
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

PHASES = ["source", "bytecode/IR", "type inference", "parfor passes", "other typed passes", "lowering",
          "LLVM function passes", "LLVM module opt", "machine code", "cache write", "rest"]


# ------------------------------------------------------------------ the cases
def _chain(b):
    x = b.tensor("f32", [4, 16, 32])
    bias, scale, res = b.tensor("f32", [32]), b.tensor("f32", [32]), b.tensor("f32", [4, 16, 32])
    y = b.op("Add", [x, bias])[0]
    y = b.op("ReLU", [y])[0]
    y = b.op("Multiply", [y, scale])[0]
    b.op("Add", [y, res])


def _chain_big(b):                      # large enough for a parallel loop
    x, res = b.tensor("f32", [256, 1024]), b.tensor("f32", [256, 1024])
    y = b.op("Sigmoid", [x])[0]
    y = b.op("Multiply", [x, y])[0]
    b.op("Add", [y, res])


def _unary(kind, dt, shape, attrs=None):
    def build(b):
        b.op(kind, [b.tensor(dt, shape)], attrs=attrs)
    return build


def _typecast(b):
    b.op("TypeCast", [b.tensor("f32", [8, 33])], out=[("bf16", [8, 33])])


def _layernorm(shape):
    def build(b):
        x, g, s = b.tensor("f32", shape), b.tensor("f32", shape[-1:]), b.tensor("f32", shape[-1:])
        b.op("LayerNorm", [x, g, s], out=[("f32", shape)], attrs={"keep_stats": False})
    return build


def _bnorm_train(b):
    x = b.tensor("f32", [2, 8, 5, 5])
    m, v, g, s = (b.tensor("f32", [8]) for _ in range(4))
    b.op("BatchNormForwardTraining", [x, m, v, g, s],
         out=[("f32", [2, 8, 5, 5]), ("f32", [8]), ("f32", [8]), ("f32", [8]), ("f32", [8])],
         attrs={"epsilon": 1e-5, "momentum": 0.1, "data_format": "NCX"})


def _softmax(dt, shape, kind="SoftMax"):
    def build(b):
        b.op(kind, [b.tensor(dt, shape)], attrs={"axis": -1})
    return build


def _reduce(kind, axes, shape=(4, 6, 10)):
    def build(b):
        b.op(kind, [b.tensor("f32", list(shape))], out=[("f32", None)], attrs={"axes": axes, "keep_dims": True})
    return build


def _pool(kind, **attrs):
    def build(b):
        b.op(kind, [b.tensor("f32", [2, 4, 9, 9])], out=[("f32", None)],
             attrs={"strides": [2, 2], "kernel": [3, 3], "pads_begin": [1, 1], "pads_end": [1, 1],
                    "data_format": "NCX", **attrs})
    return build


def _quantize(b):
    x = b.tensor("f32", [4, 8, 6])
    b.op("Quantize", [x], out=[("u8", [4, 8, 6])], attrs={"scales": [0.05], "zps": [3], "qtype": "per_tensor",
                                                           "axis": 1})


def _dequant_matmul(b):
    q = b.tensor("s8", [16, 32])
    x = b.op("Dequantize", [q], out=[("f32", [16, 32])],
             attrs={"scales": [0.1], "zps": [0], "qtype": "per_tensor", "axis": 0})[0]
    w = b.tensor("f32", [32, 8])
    b.op("MatMul", [x, w], out=[("f32", [16, 8])])


def _transpose(b):
    b.op("StaticTranspose", [b.tensor("f32", [3, 5, 7])], out=[("f32", [7, 3, 5])], attrs={"order": [2, 0, 1]})


def _matmul_epilogue(b):
    a, w, bias = b.tensor("f32", [16, 32]), b.tensor("f32", [32, 24]), b.tensor("f32", [24])
    y = b.op("MatMul", [a, w, bias], out=[("f32", [16, 24])])[0]
    b.op("ReLU", [y])


def _matmul_bf16(b):
    a, w = b.tensor("bf16", [2, 8, 16]), b.tensor("bf16", [2, 16, 12])
    y = b.op("MatMul", [a, w], out=[("bf16", [2, 8, 12])])[0]
    b.op("GELU", [y])


def _conv(dt, kind="Convolution"):
    def build(b):
        x, w = b.tensor(dt, [1, 8, 10, 10]), b.tensor(dt, [16, 8, 3, 3])
        bias = b.tensor(dt, [16])
        y = b.op(kind, [x, w, bias], out=[(dt, None)],
                 attrs={"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1],
                        "groups": 1, "data_format": "NCX", "weights_format": "OIX"})[0]
        b.op("ReLU", [y])
    return build


def _conv_bwd_data(b):
    dy, w = b.tensor("f32", [1, 16, 8, 8]), b.tensor("f32", [16, 8, 3, 3])
    b.op("ConvolutionBackwardData", [dy, w], out=[("f32", [1, 8, 8, 8])],
         attrs={"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1], "groups": 1,
                "data_format": "NCX", "weights_format": "OIX", "dst_shape": [1, 8, 8, 8]})


def _sdpa(b):
    n, h, s, d = 1, 2, 32, 16
    q, k, v = (b.tensor("f32", [n, h, s, d]) for _ in range(3))
    f = b.tensor("f32", [1])
    x = b.op("MatMul", [q, k], out=[("f32", [n, h, s, s])], attrs={"transpose_b": True})[0]
    x = b.op("Multiply", [x, f])[0]
    p = b.op("SoftMax", [x], out=[("f32", [n, h, s, s])], attrs={"axis": -1})[0]
    b.op("MatMul", [p, v], out=[("f32", [n, h, s, d])])


def _matmul_big(b):                     # GEMM tiles over threads
    a, w = b.tensor("f32", [256, 192]), b.tensor("f32", [192, 256])
    b.op("MatMul", [a, w], out=[("f32", [256, 256])])


CASES = [
    ("Abs f32", _unary("Abs", "f32", [2, 3, 8, 8])),
    ("Add-ReLU-Mul-Add chain", _chain),
    ("Sigmoid-Mul-Add 256x1024 (parallel)", _chain_big),
    ("GELU bf16", _unary("GELU", "bf16", [4, 64])),
    ("Exp f16", _unary("Exp", "f16", [4, 65])),
    ("Tanh f32", _unary("Tanh", "f32", [3, 70])),
    ("TypeCast f32->bf16", _typecast),
    ("LayerNorm", _layernorm([4, 16, 32])),
    ("LayerNorm 512x768 (parallel)", _layernorm([512, 768])),
    ("BatchNormForwardTraining", _bnorm_train),
    ("SoftMax", _softmax("f32", [4, 8, 64])),
    ("SoftMax 256x1024 (parallel)", _softmax("f32", [256, 1024])),
    ("LogSoftmax bf16", _softmax("bf16", [4, 8, 48], "LogSoftmax")),
    ("ReduceSum", _reduce("ReduceSum", [1])),
    ("ReduceSum 512x1024 rows (parallel)", _reduce("ReduceSum", [1], [512, 1024])),
    ("ReduceMax", _reduce("ReduceMax", [0, 2])),
    ("MaxPool", _pool("MaxPool")),
    ("AvgPool", _pool("AvgPool", exclude_pad=False)),
    ("Quantize", _quantize),
    ("StaticTranspose", _transpose),
    ("MatMul+bias+ReLU", _matmul_epilogue),
    ("MatMul bf16+GELU", _matmul_bf16),
    ("MatMul 256x192x256 (parallel)", _matmul_big),
    ("Dequantize+MatMul", _dequant_matmul),
    ("Convolution+bias+ReLU", _conv("f32")),
    ("ConvolutionBackwardData", _conv_bwd_data),
    ("SDPA f32", _sdpa),
]


# ------------------------------------------------------------------ the child
class _Clock:
    """Exclusive CPU time per phase: a phase's time excludes the phases nested in it."""

    def __init__(self):
        self.stack = []            # [phase, start, nested]
        self.acc = {}

    def wrap(self, owner, name, phase):
        orig = getattr(owner, name)
        clock = self

        def timed(*a, **k):
            ph = phase(*a) if callable(phase) else phase
            clock.stack.append([ph, time.thread_time(), 0.0])
            try:
                return orig(*a, **k)
            finally:
                ph, t0, nested = clock.stack.pop()
                dt = time.thread_time() - t0
                clock.acc[ph] = clock.acc.get(ph, 0.0) + dt - nested
                if clock.stack:
                    clock.stack[-1][2] += dt
        setattr(owner, name, timed)


#: numba passes by a part of their name, first match (parfor lowering is lowering)
_PASS_PHASES = (("type_inference", "type inference"), ("parfor_lowering", "lowering"),
                ("parfor", "parfor passes"), ("lowering", "lowering"))


def _pass_phase(_pm, _index, pss, _state):
    name = pss.name()
    untyped = pss.__module__.endswith("untyped_passes")
    return next((ph for part, ph in _PASS_PHASES if part in name),
                "bytecode/IR" if untyped else "other typed passes")


def _phase_clock() -> _Clock:
    """A clock of the phases of PHASES around numba's and graphc's functions."""
    from numba.core import caching, codegen, compiler_machinery
    try:
        import graphc.compiler.jit as jit      # where the compile step calls compile_kernel
    except ImportError:                        # an older tree (--src)
        import graphc.compiled as jit
    import graphc.lowering as lowering
    clock = _Clock()
    clock.wrap(compiler_machinery.PassManager, "_runPass", _pass_phase)
    clock.wrap(codegen.CPUCodeLibrary, "_optimize_functions", "LLVM function passes")
    clock.wrap(codegen.CPUCodeLibrary, "_optimize_final_module", "LLVM module opt")
    clock.wrap(codegen.JITCodeLibrary, "_finalize_specific", "machine code")
    clock.wrap(caching.Cache, "save_overload", "cache write")
    clock.wrap(lowering, "build_kernel", "source")
    clock.wrap(jit, "compile_kernel", "rest")
    return clock


def _make_trampolines() -> None:
    """The trampolines of kernels of 1 to 16 flat arrays, made (if this tree has them)."""
    if not os.environ.get("BENCH_TRAMPOLINES_MADE"):
        return
    try:
        from numba import types
        from graphc.codegen.entry import Span, _trampoline
    except ImportError:
        return
    for n in range(1, 17):
        _trampoline((types.int64, types.Tuple((Span(),) * n)))


def child(profile: int) -> None:
    import warnings
    warnings.simplefilter("ignore")
    import numba
    import graphc
    from graphc.builder import GraphBuilder
    from graphc.codegen import cache, cache_worker

    cache_worker.COLD_IN_PROCESS = 10 ** 9   # every kernel here, none by the compile worker
    numba.njit(lambda x: x + 1)(1)
    b = GraphBuilder()                       # numba's first-kernel costs (registries, parfor setup)
    b.op("Abs", [b.tensor("f32", [600, 1000])])
    graphc.compile(b.finalize())
    _make_trampolines()

    clock = _phase_clock()
    prof = None
    if profile:
        import cProfile
        prof = cProfile.Profile()
    rows = []
    for name, build in CASES:
        b = GraphBuilder()
        build(b)
        g = b.finalize()
        clock.acc = {}
        n0 = len(cache._mem)
        if prof:
            prof.enable()
        try:
            graphc.compile(g)
        except graphc.GraphcError:           # an older tree (--src) without this op's kernel
            rows.append({"case": name, "kernels": 0, "parallel": 0, "phases": {}, "skipped": True})
            continue
        finally:
            if prof:
                prof.disable()
        new = [fn.py_func.__globals__.get("__graphc_source__") or "" for fn in list(cache._mem.values())[n0:]]
        rows.append({"case": name, "kernels": len(new), "parallel": sum("prange(" in s or "launch(" in s for s in new),
                     "phases": clock.acc})
    if prof:
        import io
        import pstats
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("cumulative").print_stats(profile)
        print(s.getvalue(), file=sys.stderr)
    print(json.dumps(rows))


def child_corpus(batches: list) -> None:
    """Cold compile of every case of the batch files: per case, the CPU time of
    graphc.compile and the kernels it compiled (new sources in the in-process cache)."""
    import warnings
    warnings.simplefilter("ignore")
    import numba
    import graphc
    from graphc.bench.driver import Run, parse
    from graphc.builder import GraphBuilder
    from graphc.codegen import cache, cache_worker

    cache_worker.COLD_IN_PROCESS = 10 ** 9   # every kernel here, none by the compile worker
    numba.njit(lambda x: x + 1)(1)
    b = GraphBuilder()                       # numba's first-kernel costs (registries, threads)
    b.op("Abs", [b.tensor("f32", [600, 1000])])
    graphc.compile(b.finalize())
    _make_trampolines()
    clock = _phase_clock()
    rows = []
    for batch in batches:
        run = Run(parse([f"--batch={batch}"]))
        for i, case in enumerate(run.cases):
            key = f"{Path(batch).name}:{i}"
            graph, _ = run.graph(case)
            if graph is None:
                rows.append({"case": key, "skipped": True})
                continue
            n0 = len(cache._mem)
            clock.acc = {}
            t0 = time.thread_time()
            try:
                graphc.compile(graph)
            except graphc.GraphcError:
                rows.append({"case": key, "skipped": True})
                continue
            dt = time.thread_time() - t0
            new = [fn.py_func.__globals__.get("__graphc_source__") or "" for fn in list(cache._mem.values())[n0:]]
            rows.append({"case": key, "kernels": len(new), "seconds": dt, "phases": clock.acc,
                         "parallel": sum("prange(" in s or "launch(" in s for s in new)})
    print(json.dumps(rows))


def _spawn_corpus(src: Path, tmp: str, i: int, batches: list) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR")}
    env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["GRAPHC_CACHE_DIR"] = os.path.join(tmp, f"cold-{i}")
    cmd = [sys.executable, __file__, *[a for b in batches for a in ("--child-corpus", str(b))]]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp, env=env)
    if out.returncode:
        sys.exit(f"child failed ({src}):\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def corpus(srcs: list, batches: list, runs: int) -> None:
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(runs):
            for j, src in enumerate(srcs):
                results.setdefault(src, []).append(_spawn_corpus(src, tmp, r * len(srcs) + j, batches))
    cases = [row["case"] for row in results[srcs[0]][0]]
    common = [k for k, c in enumerate(cases)
              if all(not run[k].get("skipped") for s in srcs for run in results[s])]
    print(f"{', '.join(Path(b).name for b in batches)}: {len(common)} of {len(cases)} cases compiled by every "
          f"tree; CPU s, median of {runs} cold processes")
    print(f"{'tree':40s}{'kernels':>8s}{'parallel':>9s}{'total s':>9s}{'s/kernel':>9s}")
    for s in srcs:
        totals = [sum(run[k]["seconds"] for k in common) for run in results[s]]
        kernels = sum(results[s][0][k]["kernels"] for k in common)
        par = sum(results[s][0][k]["parallel"] for k in common)
        med = statistics.median(totals)
        print(f"{str(s)[-40:]:40s}{kernels:8d}{par:9d}{med:9.2f}{med / max(1, kernels):9.3f}")
    print(f"\n{'phase (s per kernel)':22s}" + "".join(f"{str(s)[-14:]:>15s}" for s in srcs))
    for ph in PHASES:
        vals = []
        for s in srcs:
            kernels = max(1, sum(results[s][0][k]["kernels"] for k in common))
            vals.append(statistics.median(sum(run[k]["phases"].get(ph, 0.0) for k in common)
                                          for run in results[s]) / kernels)
        print(f"{ph:22s}" + "".join(f"{v:15.4f}" for v in vals))
    print(f"load average {os.getloadavg()[0]:.2f}")


# ------------------------------------------------------------------ the parent
def _spawn(src: Path, tmp: str, i: int, profile: int = 0) -> list:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "NUMBA_CACHE_DIR")}
    env["PYTHONPATH"] = str(src) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["GRAPHC_CACHE_DIR"] = os.path.join(tmp, f"cold-{i}")
    out = subprocess.run([sys.executable, __file__, "--child", "--profile", str(profile)], capture_output=True,
                         text=True, cwd=tmp, env=env)
    if out.returncode:
        sys.exit(f"child failed ({src}):\n{out.stderr[-4000:]}")
    if profile:
        print(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3, help="fresh processes per tree (median)")
    ap.add_argument("--src", action="append", type=Path, help="graphc tree(s) to time (default: this one)")
    ap.add_argument("--per-kernel", action="store_true", help="each case's compile time")
    ap.add_argument("--profile", type=int, default=0, help="print the N top cumulative functions (cProfile)")
    ap.add_argument("--corpus", action="append", type=Path, help="compile the cases of this bench batch file")
    ap.add_argument("--trampolines-made", action="store_true",
                    help="make the trampolines before timing (once per kernel cache, not per kernel)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--child-corpus", action="append", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.trampolines_made:
        os.environ["BENCH_TRAMPOLINES_MADE"] = "1"
    if args.child:
        return child(args.profile)
    if args.child_corpus:
        return child_corpus(args.child_corpus)
    srcs = [p.resolve() for p in (args.src or [ROOT])]
    if args.corpus:
        return corpus(srcs, [b.resolve() for b in args.corpus], args.runs)
    print(f"load average {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.runs):               # trees interleaved: load changes hit them alike
            for j, src in enumerate(srcs):
                results.setdefault(src, []).append(_spawn(src, tmp, r * len(srcs) + j))
        if args.profile:
            _spawn(srcs[-1], tmp, 10 ** 6, args.profile)
    # the cases every tree compiles (an older tree may lack some ops' kernels)
    common = [i for i in range(len(CASES)) if all(not results[s][0][i].get("skipped") for s in srcs)]
    for s in srcs:
        results[s] = [[run[i] for i in common] for run in results[s]]
    first = results[srcs[0]][0]
    n = sum(r["kernels"] for r in first)
    par = max(sum(r["parallel"] for r in results[s][0]) for s in srcs)   # (an old tree may not tell)
    print(f"{len(common)} graphs, {n} kernels ({par} parallel); CPU s per kernel, median of {args.runs} "
          f"cold processes")
    if len(common) < len(CASES):
        print("left out (not compiled by every tree): "
              + ", ".join(CASES[i][0] for i in range(len(CASES)) if i not in common))
    cols = [str(s) if len(srcs) > 1 else "" for s in srcs]
    width = max(12, *(len(c) for c in cols))
    print(f"{'phase':22s}" + "".join(f"{c:>{width}s}" for c in cols))

    def per_kernel(runs, pick):
        return statistics.median(sum(pick(r) for r in run) / max(1, sum(r["kernels"] for r in run)) for run in runs)

    for ph in PHASES + ["total"]:
        vals = [per_kernel(results[s], (lambda r: sum(r["phases"].values())) if ph == "total"
                           else (lambda r, ph=ph: r["phases"].get(ph, 0.0))) for s in srcs]
        print(f"{ph:22s}" + "".join(f"{v:{width}.4f}" for v in vals))
    if args.per_kernel:
        print(f"\n{'case':38s}{'kernels':>8s}" + "".join(f"{c[-10:]:>12s}" for c in cols))
        for i, k in enumerate(first):
            name = k["case"]
            vals = [statistics.median(sum(run[i]["phases"].values()) for run in results[s]) for s in srcs]
            print(f"{name:38s}{k['kernels']:>5d}{'p' * k['parallel']:>3s}" + "".join(f"{v:12.3f}" for v in vals))
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
