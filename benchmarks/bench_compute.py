"""Compute-bound ops: graphc's MatMul and Convolution kernels against torch eager
(oneDNN inside torch), with each kernel's share of this machine's FMA peak.

Each (case, contender) runs in its own subprocess, one after the other (numba's
and torch's thread pools starve each other in one process); "peak" is the
fastest f32 GEMM rate this machine reaches (scipy's OpenBLAS sgemm on
2048x2048x2048, one call per core in parallel from numba, the same road graphc's
kernels take), measured in its own subprocess too.  FLOPs count 2 per
multiply-add; torch/graphc > 1 means graphc is faster.

    python benchmarks/bench_compute.py [--case TEXT] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import numpy as np

from children import fastest

THREADS = os.cpu_count() or 1


def _graph(build):
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    build(b)
    return b.finalize()


def matmul(m, k, n, dt, post=False):
    def build(b):
        x, w = b.tensor(dt, [m, k]), b.tensor(dt, [k, n])
        ins = [x, w] + ([b.tensor(dt, [n])] if post else [])
        y = b.op("MatMul", ins, out=[(dt, [m, n])])[0]
        if post:
            b.op("GELU", [y])

    def torch_fn(torch, arrays):
        x, w, *bias = arrays
        if post:
            return lambda: torch.nn.functional.gelu(torch.addmm(bias[0], x, w))
        return lambda: torch.matmul(x, w)
    return build, torch_fn, 2 * m * k * n


def gelu(m, n, dt, mode="gelu_erf"):
    """GELU alone over the MatMul's output shape: the cost of the fused epilogue."""
    def build(b):
        b.op("GELU", [b.tensor(dt, [m, n])], attrs={"mode": mode})

    def torch_fn(torch, arrays):
        approximate = "tanh" if mode == "gelu_tanh" else "none"
        return lambda: torch.nn.functional.gelu(arrays[0], approximate=approximate)
    return build, torch_fn, 0


def conv(n, c, oc, hw, k, pad, dt, fmt):
    def build(b):
        x = b.tensor(dt, [n, *hw, c] if fmt == "NXC" else [n, c, *hw])
        w = b.tensor(dt, [*k, c, oc] if fmt == "NXC" else [oc, c, *k])
        b.op("Convolution", [x, w], out=[(dt, [-1] * 4)],
             attrs=dict(strides=(1, 1), dilations=(1, 1), pads_begin=(pad, pad), pads_end=(pad, pad),
                        data_format=fmt, weights_format="XIO" if fmt == "NXC" else "OIX"))

    def torch_fn(torch, arrays):
        x, w = arrays
        if fmt == "NXC":   # torch's channels_last: the same bytes, NCHW indexing
            x = x.permute(0, 3, 1, 2)
            w = w.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        return lambda: torch.nn.functional.conv2d(x, w, padding=pad)
    out = [(h + 2 * pad - kk + 1) for h, kk in zip(hw, k)]
    return build, torch_fn, 2 * n * oc * c * int(np.prod(out)) * int(np.prod(k))


def conv_grad(kind, n, c, oc, hw, k, pad, dt):
    """ConvolutionBackwardData / ConvolutionBackwardWeights of an NXC convolution."""
    out = [h + 2 * pad - kk + 1 for h, kk in zip(hw, k)]
    attrs = dict(strides=(1, 1), dilations=(1, 1), pads_begin=(pad, pad), pads_end=(pad, pad), data_format="NXC",
                 weights_format="XIO")

    def build(b):
        dy = b.tensor(dt, [n, *out, oc])
        if kind == "data":
            w = b.tensor(dt, [*k, c, oc])
            b.op("ConvolutionBackwardData", [dy, w], out=[(dt, [n, *hw, c])], attrs=dict(attrs, dst_shape=[n, *hw, c]))
        else:
            x = b.tensor(dt, [n, *hw, c])
            b.op("ConvolutionBackwardWeights", [x, dy], out=[(dt, [*k, c, oc])],
                 attrs=dict(attrs, weights_shape=[*k, c, oc]))

    def torch_fn(torch, arrays):
        """aten's convolution_backward (what autograd calls), channels-last tensors."""
        cl = torch.channels_last
        if kind == "data":
            dy, w = arrays
            x = torch.zeros((n, *hw, c)).permute(0, 3, 1, 2)
            w = w.permute(3, 2, 0, 1).contiguous(memory_format=cl)
        else:
            x, dy = arrays
            x = x.permute(0, 3, 1, 2)
            w = torch.zeros((oc, c, *k)).contiguous(memory_format=cl)
        dy = dy.permute(0, 3, 1, 2)
        mask = [kind == "data", kind != "data", False]
        return lambda: torch.ops.aten.convolution_backward(dy, x, w, None, [1, 1], [pad, pad], [1, 1], False,
                                                           [0, 0], 1, mask)
    return build, torch_fn, 2 * n * oc * c * int(np.prod(out)) * int(np.prod(k))


CASES = {
    "MatMul 1024x1024x1024 f32": matmul(1024, 1024, 1024, "f32"),
    "MatMul 1024x1024x1024 bf16": matmul(1024, 1024, 1024, "bf16"),
    "MatMul+bias+GELU 512x1024x4096 f32": matmul(512, 1024, 4096, "f32", post=True),
    "MatMul+bias+GELU 512x1024x4096 bf16": matmul(512, 1024, 4096, "bf16", post=True),
    "GELU 512x4096 f32 (the epilogue alone)": gelu(512, 4096, "f32"),
    "GELU tanh 512x4096 f32": gelu(512, 4096, "f32", "gelu_tanh"),
    "Conv 3x3 N2 C64 K64 56x56 pad1 NCX f32": conv(2, 64, 64, (56, 56), (3, 3), 1, "f32", "NCX"),
    "Conv 3x3 N2 C64 K64 56x56 pad1 NXC f32": conv(2, 64, 64, (56, 56), (3, 3), 1, "f32", "NXC"),
    "Conv 3x3 N2 C64 K64 56x56 pad1 NXC bf16": conv(2, 64, 64, (56, 56), (3, 3), 1, "bf16", "NXC"),
    "Conv 1x1 N2 C256 K64 56x56 NXC f32": conv(2, 256, 64, (56, 56), (1, 1), 0, "f32", "NXC"),
    "ConvBwdData 3x3 N2 C64 K64 56x56 NXC f32": conv_grad("data", 2, 64, 64, (56, 56), (3, 3), 1, "f32"),
    "ConvBwdWeights 3x3 N2 C64 K64 56x56 NXC f32": conv_grad("weights", 2, 64, 64, (56, 56), (3, 3), 1, "f32"),
}



def inputs(g):
    from graphc.fill import make_inputs
    return make_inputs(g, 0)


def graphc_time(g, feeds, repeat):
    """The best time of ``CompiledGraph.run`` on a graph that must be one partition."""
    import graphc
    cg = graphc.compile(g)
    assert len(cg.compiled) == 1, "one partition"
    return fastest(lambda: cg.run(feeds), repeat)


def torch_arrays(torch, g, feeds):
    """The graph's inputs as torch tensors (bf16 ones as torch.bfloat16), with torch's threads set."""
    torch.set_num_threads(THREADS)
    arrays = []
    for tid in g.input_ports:
        t = torch.from_numpy(np.ascontiguousarray(feeds[tid]).astype(np.float32))
        arrays.append(t.to(torch.bfloat16) if g.tensors[tid].dtype.name == "bf16" else t)
    return arrays


def child(case, who, repeat):
    if who == "peak":
        return peak(repeat)
    build, torch_fn, flops = CASES[case]
    g = _graph(build)
    feeds = inputs(g)
    if who == "graphc":
        return graphc_time(g, feeds, repeat)
    import torch
    arrays = torch_arrays(torch, g, feeds)
    with torch.no_grad():
        return fastest(torch_fn(torch, arrays), repeat)


def peak(repeat):
    """Seconds per FLOP at the fastest sgemm rate (graphc.bench.cost.fma_peak: one
    2048^3 single-threaded GEMM per thread, in parallel)."""
    from graphc.bench.cost import fma_peak
    return 1 / fma_peak(2048, max(3, repeat // 3))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.repeat)))
        return

    def run(case, who):
        p = subprocess.run([sys.executable, __file__, "--child", case, who, "--repeat", str(args.repeat)],
                           capture_output=True, text=True)
        if p.returncode:
            raise SystemExit(f"{case} / {who} failed:\n{p.stderr}")
        return json.loads(p.stdout.strip().splitlines()[-1])
    spf = run("", "peak")
    print(f"machine: {THREADS} cores, load average {os.getloadavg()[0]:.2f}; FMA peak (sgemm) "
          f"{1 / spf / 1e9:.0f} GFLOP/s; best of {args.repeat} runs, ms")
    head = f"{'case':<42} {'graphc':>8} {'torch':>8} {'torch/gc':>8} {'GFLOP/s':>8} {'peak':>6}"
    print(head)
    print("-" * len(head))
    for case, (_, _, flops) in CASES.items():
        if args.case not in case:
            continue
        t_gc, t_torch = run(case, "graphc"), run(case, "torch")
        print(f"{case:<42} {t_gc * 1e3:8.2f} {t_torch * 1e3:8.2f} {t_torch / t_gc:8.2f} {flops / t_gc / 1e9:8.0f} "
              f"{flops * spf / t_gc:6.0%}", flush=True)


if __name__ == "__main__":
    main()
