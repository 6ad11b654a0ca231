"""The three convolution kinds alone (forward, data gradient, weight gradient) in
graphc and in torch eager (oneDNN inside torch), on the ResNet training block's
convolution (benchmarks/bench_training.py): 8x64x56x56, 64 output channels, 3x3,
pad 1, unit strides, NCX and NXC.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_conv.py [--cases fwd-NCX,...] [--dtype f32|bf16]
        [--repeat N] [--rounds R] [--threads T] [--n 8 --c 64 --hw 56] [--baseline DIR]

Each (case, contender) runs in a process of its own (numba's and torch's thread
pools starve each other in one process) with the same seeded inputs, 2 warm-up
calls then --repeat timed ones; the children run in --rounds interleaved rounds
(graphc, torch, graphc, torch, ...) so that a burst of load on the shared machine
hits both, and the table gives the fastest call of all rounds (ms).  graphc runs
its one-op graph compiled (``CompiledGraph.run``, the output allocated per call
as a caller gets it); torch runs ``torch.nn.functional.conv2d`` or
``torch.ops.aten.convolution_backward`` (what autograd calls) on contiguous NCHW
tensors (NCX) or channels_last ones (NXC, the same bytes as graphc's NXC), under
no_grad, with as many threads as cores (or --threads).  torch / graphc > 1: graphc is faster.
GFLOP/s counts 2 per multiply-add of the direct convolution.  The machine's load
average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from children import fastest, load_average, run_child

KINDS = ("fwd", "bwd_data", "bwd_weights")
FORMATS = ("NCX", "NXC")


def _shapes(fmt, n, c, oc, hw, k, o):
    """(src, weights, dst) shapes in graphc's layout for ``fmt`` (dst o x o)."""
    if fmt == "NXC":
        return (n, hw, hw, c), (k, k, c, oc), (n, o, o, oc)
    return (n, c, hw, hw), (oc, c, k, k), (n, oc, o, o)


def build(kind, fmt, dt, n, c, oc, hw, k=3, pad=1, stride=1):
    """The one-op graph of ``kind`` (by default dst the same size as src: pad (k - 1) / 2)."""
    from graphc.builder import GraphBuilder
    xs, ws, ys = _shapes(fmt, n, c, oc, hw, k, (hw + 2 * pad - k) // stride + 1)
    attrs = dict(strides=(stride, stride), dilations=(1, 1), pads_begin=(pad, pad), pads_end=(pad, pad),
                 data_format=fmt, weights_format="XIO" if fmt == "NXC" else "OIX")
    b = GraphBuilder()
    if kind == "fwd":
        b.op("Convolution", [b.tensor(dt, xs), b.tensor(dt, ws)], out=[(dt, ys)], attrs=attrs)
    elif kind == "bwd_data":
        b.op("ConvolutionBackwardData", [b.tensor(dt, ys), b.tensor(dt, ws)], out=[(dt, xs)],
             attrs=dict(attrs, dst_shape=list(xs)))
    else:
        b.op("ConvolutionBackwardWeights", [b.tensor(dt, xs), b.tensor(dt, ys)], out=[(dt, ws)],
             attrs=dict(attrs, weights_shape=list(ws)))
    return b.finalize()



def _graphc(g, feeds, repeat):
    import graphc
    cg = graphc.compile(g)
    assert len(cg.compiled) == 1, "one partition"
    return dict(s=fastest(lambda: cg.run(feeds), repeat), impl=cg.compiled[0].get_impl_info())


def _torch(kind, fmt, dt, g, feeds, repeat, k=3, pad=1):
    import torch
    torch.set_num_threads(int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1)))
    arrays = []
    for tid in g.input_ports:
        t = torch.from_numpy(np.ascontiguousarray(feeds[tid]).astype(np.float32))
        arrays.append(t.to(torch.bfloat16) if dt == "bf16" else t)
    nxc = fmt == "NXC"

    def data(t):          # graphc's NXC bytes as torch's channels_last NCHW view
        return t.permute(0, 3, 1, 2) if nxc else t

    def weights(t):       # XIO -> OIHW in channels_last (oneDNN's preferred layout for it)
        return t.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last) if nxc else t
    if kind == "fwd":
        x, w = data(arrays[0]), weights(arrays[1])
        fn = lambda: torch.nn.functional.conv2d(x, w, padding=pad)  # noqa: E731
    else:
        if kind == "bwd_data":
            dy, w = data(arrays[0]), weights(arrays[1])
            n, c, h, wd = dy.shape[0], w.shape[1], dy.shape[2], dy.shape[3]
            x = torch.zeros((n, h, wd, c) if nxc else (n, c, h, wd), dtype=dy.dtype)
            x = data(x)
            mask = [True, False, False]
        else:
            x, dy = data(arrays[0]), data(arrays[1])
            w = torch.zeros((dy.shape[1], x.shape[1], k, k), dtype=x.dtype)
            if nxc:
                w = w.contiguous(memory_format=torch.channels_last)
            mask = [False, True, False]
        fn = lambda: torch.ops.aten.convolution_backward(  # noqa: E731
            dy, x, w, None, [1, 1], [pad, pad], [1, 1], False, [0, 0], 1, mask)
    with torch.no_grad():
        return dict(s=fastest(fn, repeat))


def child(case, who, dt, repeat, n, c, hw):
    from graphc.fill import make_inputs
    kind, fmt = case.rsplit("-", 1)
    g = build(kind, fmt, dt, n, c, c, hw)
    feeds = make_inputs(g, 0)
    return _graphc(g, feeds, repeat) if who == "graphc" else _torch(kind, fmt, dt, g, feeds, repeat)


def _run(case, who, common, baseline):
    """One child's result; ``base``: graphc imported from the checkout ``baseline``."""
    if who != "base":
        return run_child(__file__, "--child", case, who, *common)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [baseline, os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, __file__, "--child", case, "graphc", *common], capture_output=True,
                       text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{case} / base failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(f"{k}-{f}" for k in KINDS for f in FORMATS))
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--c", type=int, default=64)
    ap.add_argument("--hw", type=int, default=56)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of each contender (NUMBA_NUM_THREADS; torch.set_num_threads)")
    ap.add_argument("--baseline", metavar="DIR", help="also time graphc imported from the checkout DIR "
                    "(e.g. a `git archive` of the base commit), interleaved with the others")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "WHO"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.dtype, args.repeat, args.n, args.c, args.hw)))
        return
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    flops = 2 * args.n * args.c * args.c * args.hw * args.hw * 9
    print(f"load average before: {load_average()}; {os.cpu_count()} cores, {args.threads} threads each; {args.dtype}, "
          f"{args.n}x{args.c}x{args.hw}x{args.hw}, 3x3 pad 1, {args.c} out channels; best of "
          f"{args.rounds} x {args.repeat} calls, ms")
    extra = (" base ms | base / graphc |", "---|---|") if args.baseline else ("", "")
    print(f"| case | graphc ms | torch ms | torch / graphc |{extra[0]} graphc GFLOP/s | graphc impl |")
    print(f"|---|---|---|---|{extra[1]}---|---|")
    common = ["--dtype", args.dtype, "--repeat", str(args.repeat), "--n", str(args.n), "--c", str(args.c),
              "--hw", str(args.hw)]
    for case in args.cases.split(","):
        best = {"graphc": float("inf"), "torch": float("inf")} | ({"base": float("inf")} if args.baseline else {})
        impl = ""
        for _ in range(args.rounds):
            for who in best:
                r = _run(case, who, common, args.baseline)
                best[who] = min(best[who], r["s"])
                impl = r.get("impl", impl) if who == "graphc" else impl
        gc, tc = best["graphc"], best["torch"]
        base = f" {best['base'] * 1e3:.2f} | {best['base'] / gc:.2f} |" if args.baseline else ""
        print(f"| {case} | {gc * 1e3:.2f} | {tc * 1e3:.2f} | {tc / gc:.2f} |{base} {flops / gc / 1e9:.0f} "
              f"| {impl} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
