"""Gated MLP, int8 MatMul and int8 Convolution: graphc's one-partition kernels against torch.

* Gated MLP (gated_mlp.md: (x @ W_up) * swish(x @ W_gate) @ W_down), one graphc
  partition (a staged kernel), against torch eager and torch.compile.
* int8 Convolution (u8 NXC src with a zero point, s8 weights with
  per-channel scales, Quantize to u8: one graphc partition on the same u8 x s8
  tile, graphc.codegen.conv_int8) against torch's quantized Conv2d (its
  default engine, ``x86``: oneDNN's or FBGEMM's int8 convolution; channels-last
  quint8 in and out, the requantization inside).
* int8 MatMul (u8 src with a zero point, s8 weights with per-channel scales
  and zero points, ReLU, Quantize to u8: one graphc partition, the u8 x s8
  products summed exactly in s32 on graphc's AVX512-VNNI tile, or MKL's int8
  GEMM, the zero points compensated and the scales applied where the tile is
  stored) against graphc's f32 MatMul of the same shape, and torch's f32
  matmul and int8 ``torch._int_mm`` (s8 x s8 -> s32, nothing else) where this
  torch has it.

Each (case, contender) runs in its own subprocess (see bench_compute.py);
ratios > 1 mean graphc is faster.

    python benchmarks/bench_mlp_int8.py [--case TEXT] [--repeat N] [--threads N]

``--threads 1`` runs every contender on one thread (numba's pool and torch's):
on a machine other jobs load, two-thread wall times wait for whichever
thread the cores descheduled.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compute  # noqa: E402
from bench_compute import THREADS, _graph, graphc_time, inputs, torch_arrays  # noqa: E402
from children import fastest as timeit  # noqa: E402


def gated_mlp(m, h, f, dt):
    def build(b):
        x, w1, w2, w3 = b.tensor(dt, [m, h]), b.tensor(dt, [h, f]), b.tensor(dt, [h, f]), b.tensor(dt, [f, h])
        up = b.op("MatMul", [x, w1], out=[("f32", [m, f])])[0]
        gate = b.op("MatMul", [x, w2], out=[("f32", [m, f])])[0]
        y = b.op("Multiply", [up, b.op("Multiply", [gate, b.op("Sigmoid", [gate])[0]])[0]])[0]
        if dt != "f32":
            y = b.op("TypeCast", [y], out=[(dt, [m, f])])[0]
        b.op("MatMul", [y, w3], out=[(dt, [m, h])])

    def torch_fn(torch, arrays):
        def mlp(x, w1, w2, w3):
            return ((x @ w1) * torch.nn.functional.silu(x @ w2)) @ w3
        return mlp
    return build, torch_fn, 3 * 2 * m * h * f


def int8_matmul(m, k, n):
    def build(b):
        x, w = b.tensor("u8", [m, k]), b.tensor("s8", [k, n])
        dx = b.op("Dequantize", [x], out=[("f32", [m, k])],
                  attrs={"qtype": "per_tensor", "scales": [0.02], "zps": [128]})[0]
        dw = b.op("Dequantize", [w], out=[("f32", [k, n])],
                  attrs={"qtype": "per_channel", "axis": 1, "scales": [0.01 + 1e-5 * j for j in range(n)],
                         "zps": [j % 3 - 1 for j in range(n)]})[0]
        y = b.op("ReLU", [b.op("MatMul", [dx, dw], out=[("f32", [m, n])])[0]])[0]
        b.op("Quantize", [y], out=[("u8", [m, n])], attrs={"qtype": "per_tensor", "scales": [0.5], "zps": [0]})

    def torch_fn(torch, arrays):
        x, w = (a.to(torch.int8) for a in arrays)
        return lambda x_, w_: torch._int_mm(x, w)
    return build, torch_fn, 2 * m * k * n


def int8_conv(n, c, k, hw, win, pad):
    """u8 NXC src (zero point 128) x s8 weights (per output channel) -> Convolution
    -> Quantize u8; torch: its quantized Conv2d on the same integers and scales."""
    xs, scale_x, scale_w, scale_y = [n, hw, hw, c], 0.02, [0.01 + 1e-5 * j for j in range(k)], 0.5
    out = hw + 2 * pad - win + 1

    def build(b):
        x, w = b.tensor("u8", xs), b.tensor("s8", [k, c, win, win])
        dx = b.op("Dequantize", [x], out=[("f32", xs)],
                  attrs={"qtype": "per_tensor", "scales": [scale_x], "zps": [128]})[0]
        dw = b.op("Dequantize", [w], out=[("f32", [k, c, win, win])],
                  attrs={"qtype": "per_channel", "axis": 0, "scales": scale_w, "zps": [0] * k})[0]
        y = b.op("Convolution", [dx, dw], out=[("f32", [n, out, out, k])],
                 attrs={"strides": [1, 1], "pads_begin": [pad] * 2, "pads_end": [pad] * 2, "dilations": [1, 1],
                        "groups": 1, "data_format": "NXC", "weights_format": "OIX"})[0]
        b.op("Quantize", [y], out=[("u8", [n, out, out, k])],
             attrs={"qtype": "per_tensor", "scales": [scale_y], "zps": [0]})

    def torch_fn(torch, arrays):
        x8, w8 = (a.to(torch.int32) for a in arrays)
        qx = torch._make_per_tensor_quantized_tensor(x8.to(torch.uint8).permute(0, 3, 1, 2), scale_x, 128)
        qw = torch._make_per_channel_quantized_tensor(w8.to(torch.int8), torch.tensor(scale_w, dtype=torch.double),
                                                      torch.zeros(k, dtype=torch.long), 0)
        conv = torch.ao.nn.quantized.Conv2d(c, k, win, padding=pad)
        conv.set_weight_bias(qw, None)
        conv.scale, conv.zero_point = scale_y, 0
        return lambda x_, w_: conv(qx)
    return build, torch_fn, 2 * n * out * out * k * c * win * win


def f32_matmul(m, k, n):
    def build(b):
        b.op("MatMul", [b.tensor("f32", [m, k]), b.tensor("f32", [k, n])], out=[("f32", [m, n])])

    def torch_fn(torch, arrays):
        return lambda x, w: x @ w
    return build, torch_fn, 2 * m * k * n


MLP = (256, 1024, 2816)
MM = (512, 1024, 1024)
CASES = {
    f"gated MLP {'x'.join(map(str, MLP))} f32": gated_mlp(*MLP, "f32"),
    f"gated MLP {'x'.join(map(str, MLP))} bf16": gated_mlp(*MLP, "bf16"),
    f"int8 MatMul {'x'.join(map(str, MM))} +ReLU+Quantize": int8_matmul(*MM),
    "int8 Conv 3x3 N2 C64 K64 56x56 NXC +Quantize": int8_conv(2, 64, 64, 56, 3, 1),
    "int8 Conv 1x1 N50 C64 K64 56x56 NXC +Quantize": int8_conv(50, 64, 64, 56, 1, 0),
    f"f32 MatMul {'x'.join(map(str, MM))}": f32_matmul(*MM),
}


def child(case, who, repeat):
    build, torch_fn, _ = CASES[case]
    g = _graph(build)
    feeds = inputs(g)
    if who == "graphc":
        return graphc_time(g, feeds, repeat)
    import torch
    arrays = torch_arrays(torch, g, feeds)
    fn = torch_fn(torch, arrays)
    if who == "torch.compile":
        fn = torch.compile(fn)
    with torch.no_grad():
        try:
            return timeit(lambda: fn(*arrays), repeat)
        except Exception as e:   # e.g. no torch._int_mm on this build / CPU
            return f"n/a ({type(e).__name__})"


def spawn(case, who, repeat, threads=None):
    """One contender in its own process (on ``threads`` threads, else every
    core): its best time in seconds, or why it did not run."""
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads)) if threads else None
    p = subprocess.run([sys.executable, __file__, "--child", case, who, "--repeat", str(repeat)]
                       + (["--threads", str(threads)] if threads else []), capture_output=True, text=True, env=env)
    lines = p.stdout.strip().splitlines() if p.returncode == 0 else []
    return json.loads(lines[-1]) if lines else f"failed: {(p.stderr.strip().splitlines() or ['?'])[-1]}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag, kw in (("--case", {"default": ""}), ("--repeat", {"type": int, "default": 10}),
                     ("--threads", {"type": int, "default": None}),
                     ("--child", {"nargs": 2, "help": argparse.SUPPRESS})):
        ap.add_argument(flag, **kw)
    args = ap.parse_args()
    if args.threads:
        bench_compute.THREADS = args.threads     # (torch's threads: torch_arrays reads it)
    if args.child:
        return print(json.dumps(child(*args.child, args.repeat)))

    def run(case, who):
        return spawn(case, who, args.repeat, args.threads)

    def ms(t):
        return f"{t * 1e3:8.2f}" if isinstance(t, float) else f"{'n/a':>8}"

    def ratio(a, b):
        return f"{a / b:8.2f}" if isinstance(a, float) and isinstance(b, float) else f"{'n/a':>8}"
    print(f"machine: {THREADS} cores ({args.threads or THREADS} threads a contender), load average {os.getloadavg()[0]:.2f}; best of {args.repeat} runs, ms")
    head = (f"{'case':<42} {'graphc':>8} {'torch':>8} {'compile':>8} {'torch/gc':>8} {'comp/gc':>8} "
            f"{'GFLOP/s':>8}")
    print(head)
    print("-" * len(head))
    times, int_mm = {}, {}
    for case, (_, _, flops) in CASES.items():
        if args.case not in case:
            continue
        t_gc, t_torch = run(case, "graphc"), run(case, "torch")
        t_comp = run(case, "torch.compile") if case.startswith("gated") else None
        times[case] = t_gc
        if case.startswith("int8 MatMul"):
            int_mm["t"] = t_torch
        gf = f"{flops / t_gc / 1e9:8.0f}" if isinstance(t_gc, float) else f"{'n/a':>8}"
        print(f"{case:<42} {ms(t_gc)} {ms(t_torch)} {ms(t_comp)} {ratio(t_torch, t_gc)} {ratio(t_comp, t_gc)} {gf}",
              flush=True)
        for t in (t_gc, t_torch, t_comp):
            if isinstance(t, str):
                print(f"    {t}")
    i8 = [t for c, t in times.items() if c.startswith("int8 MatMul")]
    f32 = [t for c, t in times.items() if c.startswith("f32")]
    if i8 and f32:
        print(f"graphc int8 MatMul (+ReLU+Quantize) vs graphc f32 MatMul: f32/int8 = {ratio(f32[0], i8[0]).strip()}")
    if i8 and isinstance(int_mm.get("t"), float) and isinstance(i8[0], float):
        print(f"graphc int8 MatMul (+ReLU+Quantize) vs torch._int_mm alone: graphc/_int_mm = "
              f"{i8[0] / int_mm['t']:.2f} (issue 35's goal: at most 1.5)")


if __name__ == "__main__":
    main()
