"""Training steps: graphc.grad's compiled training graph against torch eager
autograd and torch.compile (inductor) of the same step, on a ResNet block and a
transformer block (tests/support/blocks.py) at the sizes of a real layer.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_training.py [--repeat N] [--cases resnet-NCX,...]
    python benchmarks/bench_training.py --profile CASE   (graphc's per-partition times)

One step = the forward and the backward of the block, the loss being
sum(seed * output) with one fixed seed gradient: graphc runs
graphc.compile(graphc.grad(g, wrt).graph) on the forward inputs and the seed;
torch runs the block's function on leaf tensors needing grad and
``out.backward(seed)`` (inductor: torch.compile of the function, the backward
through AOTAutograd).  Each (case, contender) runs in a process of its own: two
warm-up steps, then the fastest and the median of --repeat steps (ms).  The
children run in --rounds interleaved rounds; the table gives the fastest step of
all rounds and the median of the rounds' medians.  graphc's row also gives its
partition count (len(compiled.partitions)), how many of them ran as fused
kernels (more than one op in one kernel), and its first step (compile included;
the kernels come from numba's cache when it is warm).  The machine's load
average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from children import call_times, load_average, run_child

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

#: "model-format": (builder in tests/support/blocks.py, its sizes): a ResNet stage-1 block (batch 8,
#: 64 channels, 56x56) in both data formats; a transformer block (batch 4, sequence 128, hidden 256,
#: 4 heads, SwiGlu hidden 1024) on row-major [batch, sequence, hidden] tensors
CASES = {
    "resnet-NCX": ("resnet_block", dict(fmt="NCX", n=8, c=64, hw=56)),
    "resnet-NXC": ("resnet_block", dict(fmt="NXC", n=8, c=64, hw=56)),
    "transformer-rows": ("transformer_block", dict(b=4, s=128, h=4, d=64, f=1024)),
}


def _case(name: str):
    """(forward graph, training graph, feed {id: array}, wrt, output id, torch fn)."""
    import graphc
    from support import blocks
    from support.training import training_inputs
    builder, kw = CASES[name]
    g, wrt, y, fn = getattr(blocks, builder)(**kw)
    tr = graphc.grad(g, wrt, outputs=[y])
    return g, tr, training_inputs(g, tr), wrt, y, fn


def _times(step, repeat: int) -> dict:
    times = call_times(step, repeat)
    return {"best_ms": 1e3 * times[0], "median_ms": 1e3 * times[len(times) // 2]}


def _graphc(name: str, repeat: int) -> dict:
    import warnings
    import graphc
    from graphc.lowering import FusionFallbackWarning
    g, tr, feed, wrt, y, fn = _case(name)
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", FusionFallbackWarning)
        cg = graphc.compile(tr.graph)
        cg.run(feed)
    first = time.perf_counter() - t0
    out = _times(lambda: cg.run(feed), repeat)
    fell_back = sum(1 for w in caught if issubclass(w.category, FusionFallbackWarning))
    fused = sum(1 for p in cg.partitions if len(p.ops) > 1 and not getattr(p.plan, "one_at_a_time", None)) - fell_back
    return dict(out, first_s=first, partitions=len(cg.partitions), fused=fused)


def _torch(name: str, repeat: int, inductor: bool) -> dict:
    import torch
    g, tr, feed, wrt, y, fn = _case(name)
    args = [torch.from_numpy(feed[tid]).requires_grad_(tid in wrt) for tid in g.input_ports]
    seed = torch.from_numpy(feed[tr.grad_in(y)])
    f = torch.compile(fn, backend="inductor") if inductor else fn

    def step():
        for a in args:
            a.grad = None
        f(*args).backward(seed)
    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    return dict(_times(step, repeat), first_s=first)


def profile(name: str, repeat: int) -> None:
    """Print CompiledGraph.profile of graphc's step on case ``name``."""
    import graphc
    g, tr, feed, wrt, y, fn = _case(name)
    print(graphc.compile(tr.graph).profile(feed, repeat=repeat))


def child(name: str, contender: str, repeat: int) -> dict:
    if contender == "graphc":
        return _graphc(name, repeat)
    return _torch(name, repeat, contender == "inductor")


def _rounds(name: str, rounds: int, repeat: int) -> dict:
    """{contender: result} over ``rounds`` rounds, each running every contender's
    child once in turn (so that a burst of load on the shared machine hits all
    alike): the fastest step of all rounds, the median of the rounds' medians,
    graphc's counts and first step of its first round."""
    runs: dict = {c: [] for c in ("graphc", "eager", "inductor")}
    for _ in range(rounds):
        for c, rs in runs.items():
            rs.append(run_child(__file__, "--child", name, c, "--repeat", str(repeat)))
    out = {}
    for c, rs in runs.items():
        medians = sorted(r["median_ms"] for r in rs)
        out[c] = dict(rs[0], best_ms=min(r["best_ms"] for r in rs), median_ms=medians[len(medians) // 2])
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="each contender's child runs this many times, interleaved")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "CONTENDER"), help=argparse.SUPPRESS)
    ap.add_argument("--profile", metavar="CASE", help="print graphc's per-partition times on CASE")
    args = ap.parse_args()
    if args.profile:
        profile(args.profile, args.repeat)
        return
    if args.child:
        print(json.dumps(child(*args.child, args.repeat)))
        return
    print(f"load average before: {load_average()}")
    print("| model | format | graphc ms (best / median) | eager ms | inductor ms | eager / graphc | inductor / graphc "
          "| partitions (fused) | graphc first step s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.cases.split(","):
        r = _rounds(name, args.rounds, args.repeat)
        gc, ea, ind = r["graphc"], r["eager"], r["inductor"]
        print(f"| {name.replace('-', ' | ')} | {gc['best_ms']:.1f} / {gc['median_ms']:.1f} "
              f"| {ea['best_ms']:.1f} / {ea['median_ms']:.1f} | {ind['best_ms']:.1f} / {ind['median_ms']:.1f} "
              f"| {ea['best_ms'] / gc['best_ms']:.2f}x | {ind['best_ms'] / gc['best_ms']:.2f}x "
              f"| {gc['partitions']} ({gc['fused']}) | {gc['first_s']:.1f} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
