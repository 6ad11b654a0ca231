"""Memory-bound cases of the shared benchdnn op corpus: graphc against torch eager
and against this machine's bandwidth, as a user of `graphc bench` sees them.

    python benchmarks/bench_corpus.py [--case TEXT ...] [--repeat N] [--rounds R] [--markdown]

Each row is one corpus case (a JSON file of GRAPHC_SHARED/onednn/benchdnn/
inputs/graph with the harness line's knobs).  Contenders, each in its own
subprocess (numba's and torch's thread pools starve each other in one
process), in --rounds interleaved rounds, the fastest run of all counting:
  graphc  ``python -m graphc bench --mode=P --fix-times-per-prb=N <knobs>
          --case=FILE``: the driver's time of CompiledGraph.run (outputs
          allocated per run) and its cost line: the bytes a run moves (every
          kernel's inputs and outputs once; graphc.bench.cost) and its share of
          a numba triad moving the same bytes, timed in that process before and
          after the case ("%triad": the machine's limit for these bytes, which
          on this machine's large L3 is often a cache's, not DRAM's)
  torch   the same math in torch eager (oneDNN / ATen kernels: there is no
          oneDNN binary here) on the same generated inputs (graphc.fill,
          seed 0), with torch's default threads, its first output checked
          against graphc's reference, its inputs in the case's memory layout
          (strides) as graphc's are; its "%triad" is the same bytes over its
          time against the triad of graphc's process.
torch/gc > 1 means graphc is faster.  A case whose JSON file is not in the
corpus on this machine is listed as such.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(os.environ.get("GRAPHC_SHARED", "/work/shared")) / "onednn/benchdnn/inputs/graph"


# ------------------------------------------------------------------ torch's math per case
def bnorm_bwd(torch, op, t):
    x, dy = t["src"], t["diff_dst"]
    if op.attr("data_format") == "NXC":   # the same bytes as a channels-last NCHW tensor
        x, dy = x.permute(0, 3, 1, 2), dy.permute(0, 3, 1, 2)
    eps = op.attr("epsilon")
    invstd = 1 / torch.sqrt(t["variance"] + eps)   # torch's API takes it for the variance
    return lambda: torch.ops.aten.native_batch_norm_backward(dy, x, t["gamma"], None, None, t["mean"], invstd,
                                                             True, eps, [True, True, True])


def _normalized(op, x):
    return list(x.shape[op.attr("begin_norm_axis") % x.ndim:])


def lnorm(torch, op, t):
    x = t["src"]
    return lambda: torch.nn.functional.layer_norm(x, _normalized(op, x), t.get("gamma"), t.get("beta"),
                                                  op.attr("epsilon"))


def lnorm_bwd(torch, op, t):
    x, dy = t["src"], t["diff_dst"]
    dims = _normalized(op, x)
    stats = [*x.shape[:x.ndim - len(dims)], *[1] * len(dims)]
    mean, rstd = t["mean"].reshape(stats), (1 / torch.sqrt(t["variance"] + op.attr("epsilon"))).reshape(stats)
    return lambda: torch.ops.aten.native_layer_norm_backward(dy, x, dims, mean, rstd, None, None,
                                                             [True, False, False])


def softmax(torch, op, t):
    return lambda: torch.softmax(t["src"], op.attr("axis"))


def softmax_bwd(torch, op, t):
    return lambda: torch.ops.aten._softmax_backward_data(t["diff_dst"], t["dst"], op.attr("axis"), torch.float32)


def gnorm(torch, op, t):
    assert op.attr("data_format") == "NCX"
    return lambda: torch.nn.functional.group_norm(t["src"], op.attr("groups"), t.get("gamma"), t.get("beta"),
                                                  op.attr("epsilon"))


def reducesum(torch, op, t):
    return lambda: t["src"].sum(dim=list(op.attr("axes")), keepdim=bool(op.attr("keep_dims")))


def add(torch, op, t):
    a, b = t["src_0"], t["src_1"]
    return lambda: torch.add(a, b)


NXC_SHAPES = "--in-shapes=0:2x71x71x192+1:2x71x71x192"
#: name -> (the harness knobs and case, torch's math; None: not written yet, graphc alone is timed)
CASES = {
    "bnorm_bwd NCX": (["--case=op/f32/bnorm_bwd.json"], bnorm_bwd),
    "bnorm_bwd NXC": ([NXC_SHAPES, "--op-attrs=0:data_format:NXC", "--case=op/f32/bnorm_bwd.json"], bnorm_bwd),
    "lnorm": (["--case=op/f32/lnorm.json"], lnorm),
    "lnorm_bwd": (["--case=op/f32/lnorm_bwd.json"], lnorm_bwd),
    "softmax": (["--case=op/f32/softmax.json"], softmax),
    "softmax_bwd": (["--case=op/f32/softmax_bwd.json"], softmax_bwd),
    "gnorm": (["--case=op/f32/gnorm.json"], gnorm),
    "reducesum": (["--case=op/f32/reducesum.json"], reducesum),
    "add": (["--in-shapes=0:64x128x28x28+1:64x128x28x28", "--op-attrs=0:auto_broadcast:none",
             "--case=op/f32/add.json"], add),
    "lnorm_gelu": (["--case=pattern/f32/lnorm_gelu.json"], None),
    "binary_post_ops_chain": (["--case=pattern/f32/binary_post_ops_chain.json"], None),
}


def case_file(knobs) -> Path:
    return CORPUS / knobs[-1].split("=", 1)[1]


# ------------------------------------------------------------------ the contenders
def graphc_child(knobs, repeat) -> dict:
    """graphc bench -P in its own process: {ms, bytes, gbs, triad (%)}."""
    p = subprocess.run([sys.executable, "-m", "graphc", "bench", "--mode=P", f"--fix-times-per-prb={repeat}",
                        f"--inputs-dir={CORPUS}", *knobs], capture_output=True, text=True, cwd=ROOT)
    perf = [ln.split(",") for ln in p.stdout.splitlines() if ln.startswith("perf,")]
    cost = [ln.split(",") for ln in p.stdout.splitlines() if ln.startswith("cost,")]
    if p.returncode or not perf or not cost:
        raise SystemExit(f"graphc bench {' '.join(knobs)} failed:\n{p.stdout}{p.stderr}")
    nbytes, _gflop, gbs, triad, _peak = cost[0][-5:]
    return {"ms": float(perf[0][-2]), "bytes": int(nbytes), "gbs": float(gbs), "triad": float(triad)}


def torch_child(name, repeat) -> float:
    """torch's fastest time (ms) on the case's generated inputs; runs in the child."""
    import torch

    from graphc.bench.cost import best_time
    from graphc.bench.driver import Run
    from graphc.bench.knobs import parse
    from graphc.fill import make_inputs
    knobs, math = CASES[name]
    run = Run(parse([f"--inputs-dir={CORPUS}", *knobs]))
    graph, why = run.graph(run.cases[0])
    if graph is None:
        raise SystemExit(why)
    (op,) = graph.topo_ops()
    feeds = make_inputs(graph, 0)
    named = {n: _laid_out(torch, feeds[t.id], t) for n, t in zip(op.input_names, op.inputs)}
    torch.set_num_threads(os.cpu_count() or 1)
    with torch.no_grad():
        fn = math(torch, op, named)
        check(graph, op, feeds, fn())
        return best_time(fn, repeat) * 1e3


def _laid_out(torch, a, lt):
    """``a`` as a torch tensor in the tensor's own memory layout (its strides, as graphc
    runs it: e.g. gnorm's NCX src is channels-last in memory), not a dense copy."""
    t = torch.from_numpy(a)
    if lt.strides is None or lt.is_dense:
        return t
    return torch.empty_strided(lt.shape, lt.strides, dtype=t.dtype).copy_(t)


def check(graph, op, feeds, result) -> None:
    """torch's first output against graphc's reference: the same math."""
    from graphc import reference
    from graphc.tolerances import compare
    got = result[0] if isinstance(result, tuple) else result
    lt = op.outputs[0]
    if tuple(got.shape) != lt.shape:    # an NXC tensor torch saw as channels-last NCHW
        got = got.permute(0, *range(2, got.ndim), 1)
    ok, err = compare(got.numpy(), reference.run(graph, feeds)[lt.id], lt.dtype)
    if not ok:
        raise SystemExit(f"torch's math differs from the reference: scaled error {err:.3g}")


def spawn(name, who, repeat):
    p = subprocess.run([sys.executable, __file__, "--child", name, who, "--repeat", str(repeat)],
                       capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{name} / {who} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def measure(name, repeat, rounds) -> dict:
    """graphc's and torch's best over the rounds, alternating contenders."""
    knobs, math = CASES[name]
    best = None
    for _ in range(rounds):
        gc = graphc_child(knobs, repeat)
        if best is None or gc["ms"] < best["ms"]:
            best = dict(gc, torch=best["torch"] if best else float("inf"))
        if math is not None:
            best["torch"] = min(best["torch"], spawn(name, "torch", repeat))
    return best


def row(name, r) -> list[str]:
    triad_gbs = r["gbs"] / (r["triad"] / 100)          # the triad's GB/s on these bytes
    torch = [f"{r['torch']:.2f}", f"{r['torch'] / r['ms']:.2f}"] if r["torch"] < float("inf") else ["n/a"] * 2
    torch_triad = f"{r['bytes'] / r['torch'] / 1e6 / triad_gbs:.0%}" if r["torch"] < float("inf") else "n/a"
    return [name, f"{r['bytes'] / 1e6:.1f}", f"{r['ms']:.2f}", *torch, f"{r['gbs']:.1f}", f"{triad_gbs:.1f}",
            f"{r['triad']:.0f}%", torch_triad]


HEAD = ["case", "MB moved", "graphc ms", "torch ms", "torch/gc", "graphc GB/s", "triad GB/s", "graphc %triad",
        "torch %triad"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", action="append", default=[], help="run the cases whose name contains TEXT")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(torch_child(args.child[0], args.repeat)))
        return
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; "
          f"fastest of {args.rounds} x {args.repeat} runs per contender")
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "---|" * len(HEAD))
    for name, (knobs, math) in CASES.items():
        if args.case and not any(c in name for c in args.case):
            continue
        if not case_file(knobs).is_file():
            print(f"| {name} | not in the corpus here ({knobs[-1][7:]}) |" + " |" * (len(HEAD) - 2), flush=True)
            continue
        try:
            r = measure(name, args.repeat, args.rounds)
        except SystemExit as e:        # a contender failed: say so in its row (the whole text on stderr), go on
            print(str(e.code), file=sys.stderr)
            lines = [ln for ln in str(e.code).splitlines() if ln.strip()] or ["failed"]
            said = lines[0] + (" " + lines[-1] if len(lines) > 1 else "")
            print(f"| {name} | {said} |" + " |" * (len(HEAD) - 2), flush=True)
            continue
        print("| " + " | ".join(row(name, r)) + " |", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
