"""benchdnn's transposed convolution and its data gradient (op/f32/deconv.json,
deconv_bwd_d.json: 1x32x28x28 src, IOX weights 32x128x3x3, strides 2, pads_end
41, so that the 57x57 output of the full transposed convolution is cropped to
16x16) in graphc and in torch eager, NCX and NXC.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_deconv.py [--cases deconv-NCX,...]
        [--repeat N] [--rounds R] [--threads T]

Each (case, contender) runs in a process of its own with the same seeded inputs,
2 warm-up calls then --repeat timed ones, in --rounds interleaved rounds; the
table gives the fastest call of all rounds (ms).  torch has no asymmetric
padding for its transposed convolution, so it runs the case twice:
``torch``, as a user writes it (deconv: ``conv_transpose2d`` to the 57x57 output,
then the 16x16 corner made contiguous; bwd_d: ``conv2d`` of diff_dst padded by
41 at the end), and ``torch by hand``, on the part that matters (deconv: the
8x8 src positions that reach the corner; bwd_d: diff_dst padded by 1, then the
8x8 result padded with zeros to 28x28).  torch / graphc > 1: graphc is faster.
The machine's load average is printed before and after.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

from children import fastest, load_average, run_child

CASES = ("deconv-NCX", "deconv-NXC", "deconv_bwd_d-NCX", "deconv_bwd_d-NXC")
WHO = ("graphc", "torch", "torch_hand")
SRC, OC, HW, CROP, PAD_END = 32, 128, 28, 16, 41


def build(kind, fmt):
    """The benchdnn case's one-op graph (data_format ``fmt``, IOX weights)."""
    from graphc.builder import GraphBuilder
    small, big = (1, HW, HW, SRC) if fmt == "NXC" else (1, SRC, HW, HW), (1, CROP, CROP, OC) if fmt == "NXC" \
        else (1, OC, CROP, CROP)
    attrs = dict(strides=(2, 2), dilations=(1, 1), pads_begin=(0, 0), pads_end=(PAD_END, PAD_END), data_format=fmt,
                 weights_format="IOX")
    b = GraphBuilder()
    w = b.tensor("f32", [SRC, OC, 3, 3])
    if kind == "deconv":
        b.op("ConvTranspose", [b.tensor("f32", small), w], out=[("f32", big)], attrs=attrs)
    else:
        b.op("ConvTransposeBackwardData", [b.tensor("f32", big), w], out=[("f32", small)], attrs=attrs)
    return b.finalize()


def _torch(kind, fmt, g, feeds, repeat, hand):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1)))
    x, w = (torch.from_numpy(np.ascontiguousarray(feeds[t])) for t in g.input_ports)
    if fmt == "NXC":      # graphc's NXC bytes as torch's channels_last NCHW view
        x = x.permute(0, 3, 1, 2)
    if kind == "deconv":
        if hand:          # src rows and columns 0..7 reach the 16x16 corner (2 * 7 + 2 = 16)
            xs = x[:, :, :8, :8]
            fn = lambda: F.conv_transpose2d(xs, w, stride=2)[:, :, :CROP, :CROP].contiguous()  # noqa: E731
        else:
            fn = lambda: F.conv_transpose2d(x, w, stride=2)[:, :, :CROP, :CROP].contiguous()  # noqa: E731
    elif hand:            # diff_src rows 0..7 meet diff_dst (2 * 7 = 14 < 16), the rest is 0
        fn = lambda: F.pad(F.conv2d(F.pad(x, (0, 1, 0, 1)), w, stride=2), (0, HW - 8, 0, HW - 8))  # noqa: E731
    else:
        fn = lambda: F.conv2d(F.pad(x, (0, PAD_END, 0, PAD_END)), w, stride=2)  # noqa: E731
    with torch.no_grad():
        return dict(s=fastest(fn, repeat))


def child(case, who, repeat):
    import graphc
    from graphc.fill import make_inputs
    kind, fmt = case.rsplit("-", 1)
    g = build(kind, fmt)
    feeds = make_inputs(g, 0)
    if who != "graphc":
        return _torch(kind, fmt, g, feeds, repeat, who == "torch_hand")
    cg = graphc.compile(g)
    assert len(cg.compiled) == 1, "one partition"
    return dict(s=fastest(lambda: cg.run(feeds), repeat), impl=cg.compiled[0].get_impl_info())


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of each contender (NUMBA_NUM_THREADS; torch.set_num_threads)")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "WHO"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.repeat)))
        return
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    print(f"load average before: {load_average()}; {os.cpu_count()} cores, {args.threads} threads each; best of "
          f"{args.rounds} x {args.repeat} calls, ms")
    print("| case | graphc ms | torch ms | torch by hand ms | torch / graphc | by hand / graphc | graphc impl |")
    print("|---|---|---|---|---|---|---|")
    for case in args.cases.split(","):
        best, impl = dict.fromkeys(WHO, float("inf")), ""
        for _ in range(args.rounds):
            for who in WHO:
                r = run_child(__file__, "--child", case, who, "--repeat", str(args.repeat))
                best[who] = min(best[who], r["s"])
                impl = r.get("impl", impl)
        gc, tc, th = best["graphc"], best["torch"], best["torch_hand"]
        print(f"| {case} | {gc * 1e3:.3f} | {tc * 1e3:.3f} | {th * 1e3:.3f} | {tc / gc:.2f} | {th / gc:.2f} "
              f"| {impl} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
