"""f16 against bf16: the same graph in each of the two 16-bit float types.

    python benchmarks/bench_f16.py [--case TEXT] [--repeat N]

Each (case, dtype) runs in its own process: the fastest ``CompiledGraph.run`` of
--repeat runs after two warm-ups, on one partition.  ``bf16/f16`` above 1 means
the f16 graph is the faster.  f16 values convert to and from f32 in hardware
where the CPU has F16C (graphc.codegen.cpu.has_f16c); with no AVX512-FP16 on
the CPU, f16 arithmetic runs in f32 after the conversion, as bf16's does on the
vector units.  bf16 MatMuls run on graphc's AVX512-BF16 tile (``vdpbf16ps``);
no instruction of this kind multiplies f16, so an f16 MatMul widens to f32 and
runs on the f32 GEMM: that row shows the cost of the missing instruction.
"""
from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compute import _graph, graphc_time, inputs  # noqa: E402
from children import load_average, run_child  # noqa: E402


def unary(kind, shape, **attrs):
    def build(b, dt):
        b.op(kind, [b.tensor(dt, shape)], attrs=attrs)
    return build


def add(shape):
    def build(b, dt):
        b.op("Add", [b.tensor(dt, shape), b.tensor(dt, shape)])
    return build


def layer_norm(rows, h):
    def build(b, dt):
        b.op("LayerNorm", [b.tensor(dt, [rows, h]), b.tensor("f32", [h]), b.tensor("f32", [h])],
             attrs={"keep_stats": False})
    return build


def swiglu_grad(shape):
    def build(b, dt):
        half = shape[:-1] + [shape[-1] // 2]
        b.op("SwiGluGrad", [b.tensor(dt, half), b.tensor(dt, shape)], out=[(dt, [-1] * len(shape))],
             attrs={"dim": -1})
    return build


def matmul(m, k, n):
    def build(b, dt):
        b.op("MatMul", [b.tensor(dt, [m, k]), b.tensor(dt, [k, n])], out=[(dt, [m, n])])
    return build


CASES = {
    "Add 16x1024x1024": add([16, 1024, 1024]),
    "GELU 16x1024x1024": unary("GELU", [16, 1024, 1024]),
    "SoftMax 4096x1024": unary("SoftMax", [4096, 1024], axis=-1),
    "LayerNorm 4096x1024": layer_norm(4096, 1024),
    "SwiGluGrad 2x1024x8192": swiglu_grad([2, 1024, 8192]),
    "MatMul 1024x1024x1024": matmul(1024, 1024, 1024),
}


def child(case: str, dt: str, repeat: int) -> float:
    g = _graph(lambda b: CASES[case](b, dt))
    return graphc_time(g, inputs(g), repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import json
        print(json.dumps(child(args.child[0], args.child[1], args.repeat)))
        return
    print(f"load average before: {load_average()}; fastest of {args.repeat} runs, ms")
    print("| case | bf16 | f16 | bf16/f16 |")
    print("|---|---|---|---|")
    for case in CASES:
        if args.case not in case:
            continue
        t = {dt: run_child(__file__, "--child", case, dt, "--repeat", str(args.repeat)) for dt in ("bf16", "f16")}
        print(f"| {case} | {t['bf16'] * 1e3:.2f} | {t['f16'] * 1e3:.2f} | {t['bf16'] / t['f16']:.2f} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
