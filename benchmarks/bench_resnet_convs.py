"""ResNet-50's convolution shapes (batch 2, channels first, bf16 by default) in graphc and
in torch eager: the forward convolution, its data gradient and its weight gradient.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_resnet_convs.py [--only TEXT]
        [--kinds fwd,bwd_data,bwd_weights] [--dtype bf16|f32] [--rounds R] [--repeat N]

Each (shape, kind, contender) runs in a process of its own (numba's and torch's thread
pools starve each other in one process) on the same seeded inputs, 2 warm-up calls then
--repeat timed ones; --rounds interleaves the contenders (graphc, torch, graphc, ...) and
the table gives the fastest call of all rounds (ms).  graphc runs its one-op graph
compiled; torch runs ``torch.nn.functional.conv2d`` or
``torch.ops.aten.convolution_backward`` (what autograd calls) on contiguous NCHW tensors,
under no_grad, with as many threads as cores.  torch / graphc > 1: graphc is faster.  The
machine's load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from bench_conv import build
from children import fastest, load_average, run_child

#: name -> (N, C, OC, H = W, kernel, stride, pad): the network's distinct convolutions
SHAPES = {
    "1x1 256->64 @56": (2, 256, 64, 56, 1, 1, 0),
    "1x1 64->256 @56": (2, 64, 256, 56, 1, 1, 0),
    "1x1 512->128 @28": (2, 512, 128, 28, 1, 1, 0),
    "1x1 1024->256 @14": (2, 1024, 256, 14, 1, 1, 0),
    "1x1 2048->512 @7": (2, 2048, 512, 7, 1, 1, 0),
    "1x1 stride 2 512->1024 @28": (2, 512, 1024, 28, 1, 2, 0),
    "3x3 stride 2 128 @56": (2, 128, 128, 56, 3, 2, 1),
    "3x3 stride 2 512 @14": (2, 512, 512, 14, 3, 2, 1),
    "3x3 256 @14": (2, 256, 256, 14, 3, 1, 1),
    "3x3 512 @7": (2, 512, 512, 7, 3, 1, 1),
    "7x7 stride 2 3->64 @224": (2, 3, 64, 224, 7, 2, 3),
}
KINDS = ("fwd", "bwd_data", "bwd_weights")


def child(name, kind, who, dt, repeat):
    from graphc.fill import make_inputs
    n, c, oc, hw, k, s, p = SHAPES[name]
    g = build(kind, "NCX", dt, n, c, oc, hw, k, p, s)
    feeds = make_inputs(g, 0)
    if who == "graphc":
        import graphc
        cg = graphc.compile(g)
        assert len(cg.compiled) == 1, "one partition"
        return dict(s=fastest(lambda: cg.run(feeds), repeat), impl=cg.compiled[0].get_impl_info())
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    tdt = torch.bfloat16 if dt == "bf16" else torch.float32
    a, b = (torch.from_numpy(np.ascontiguousarray(feeds[t]).astype(np.float32)).to(tdt) for t in g.input_ports)
    if kind == "fwd":
        fn = lambda: torch.nn.functional.conv2d(a, b, stride=s, padding=p)  # noqa: E731
    elif kind == "bwd_data":
        x = torch.zeros((n, c, hw, hw), dtype=tdt)
        fn = lambda: torch.ops.aten.convolution_backward(a, x, b, None, [s, s], [p, p], [1, 1], False,  # noqa: E731
                                                         [0, 0], 1, [True, False, False])
    else:
        w = torch.zeros((oc, c, k, k), dtype=tdt)
        fn = lambda: torch.ops.aten.convolution_backward(b, a, w, None, [s, s], [p, p], [1, 1], False,  # noqa: E731
                                                         [0, 0], 1, [False, True, False])
    with torch.no_grad():
        return dict(s=fastest(fn, repeat))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="the shapes whose name contains this text")
    ap.add_argument("--kinds", default=",".join(KINDS))
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--child", nargs=3, metavar=("SHAPE", "KIND", "WHO"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.dtype, args.repeat)))
        return
    print(f"load average before: {load_average()}; {os.cpu_count()} cores; {args.dtype}, NCX, best of "
          f"{args.rounds} x {args.repeat} calls, ms")
    print("| convolution | kind | graphc ms | torch ms | torch / graphc | graphc impl |")
    print("|---|---|---|---|---|---|")
    total = {"graphc": 0.0, "torch": 0.0}
    for name in SHAPES:
        if args.only not in name:
            continue
        for kind in args.kinds.split(","):
            best, impl = {"graphc": float("inf"), "torch": float("inf")}, ""
            for _ in range(args.rounds):
                for who in best:
                    r = run_child(__file__, "--child", name, kind, who, "--dtype", args.dtype, "--repeat",
                                  str(args.repeat))
                    best[who] = min(best[who], r["s"])
                    impl = r.get("impl", impl)
            for who in total:
                total[who] += best[who]
            print(f"| {name} | {kind} | {best['graphc'] * 1e3:.2f} | {best['torch'] * 1e3:.2f} | "
                  f"{best['torch'] / best['graphc']:.2f} | {impl} |", flush=True)
    print(f"| all | | {total['graphc'] * 1e3:.2f} | {total['torch'] * 1e3:.2f} | "
          f"{total['torch'] / total['graphc']:.2f} | |")
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
