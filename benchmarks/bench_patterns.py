"""Every fusion-catalog pattern: fused (one partition, one kernel) against the
debug policy (one partition per op), side by side in one run.

Each case builds a graph that the catalog pattern of the same name matches
whole; the script checks that the fusion policy gives one partition with that
pattern, then times ``CompiledGraph.run`` under both policies on the same seeded
inputs.  Each (case, policy) runs in its own subprocess (fresh thread pool,
nothing else in the process), one after the other; the table gives the
fastest of the repeated runs and the ratio debug / fused (> 1: fusion wins).

    python benchmarks/bench_patterns.py [--case NAME ...] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

# ~4M-element activations: past the caches, so the bytes fusion saves show
N, C = 4096, 1024
IMG = (8, 64, 64, 64)      # NCX images: 2M elements


def _b():
    from graphc.builder import GraphBuilder
    return GraphBuilder()


def relu_bwd_bnorm_bwd():
    b = _b()
    shape, c = [2, 192, 71, 71], 192
    src, rsrc, dy = (b.tensor("f32", shape) for _ in range(3))
    mean, var, gamma = (b.tensor("f32", [c]) for _ in range(3))
    d = b.op("ReLUBackward", [rsrc, dy], attrs={"use_dst": False})[0]
    b.op("BatchNormTrainingBackward", [src, d, mean, var, gamma], out=[("f32", shape), ("f32", [c]), ("f32", [c])],
         attrs={"epsilon": 0.0625, "data_format": "NCX"})
    return b


def bnorm_inference_relu():
    b = _b()
    x = b.tensor("f32", IMG)
    params = [b.tensor("f32", [IMG[1]]) for _ in range(4)]
    y = b.op("BatchNormInference", [x] + params, attrs={"epsilon": 0.001, "data_format": "NCX"})[0]
    b.op("ReLU", [y])
    return b


def bnorm_fwd_train_relu():
    b = _b()
    x = b.tensor("f32", IMG)
    mean, var = b.tensor("f32", [IMG[1]]), b.tensor("f32", [IMG[1]])
    c = [IMG[1]]
    outs = b.op("BatchNormForwardTraining", [x, mean, var], out=[("f32", IMG)] + [("f32", c)] * 4,
                attrs={"epsilon": 0.001, "data_format": "NCX"})
    b.op("ReLU", [outs[0]])
    return b


def norm_post_ops():
    b = _b()
    x, g, be, r = b.tensor("f32", [N, C]), b.tensor("f32", [C]), b.tensor("f32", [C]), b.tensor("f32", [N, C])
    y = b.op("LayerNorm", [x, g, be], out=[("f32", [N, C])], attrs={"keep_stats": False})[0]
    y = b.op("GELU", [y])[0]
    b.op("Add", [y, r])
    return b


def norm_swish():
    b = _b()
    x, g, be = b.tensor("f32", [N, C]), b.tensor("f32", [C]), b.tensor("f32", [C])
    y = b.op("LayerNorm", [x, g, be], out=[("f32", [N, C])], attrs={"keep_stats": False})[0]
    s = b.op("Sigmoid", [y])[0]
    b.op("Multiply", [y, s])
    return b


def softmax_post_ops():
    b = _b()
    x, s = b.tensor("f32", [N, C]), b.tensor("f32", [1])
    y = b.op("SoftMax", [x], attrs={"axis": -1})[0]
    b.op("Multiply", [y, s])
    return b


def reduction_post_ops():
    b = _b()
    x = b.tensor("f32", [N, C])
    y = b.op("ReduceL2", [x], out=[("f32", [N, 1])], attrs={"axes": [-1], "keep_dims": True})[0]
    b.op("ReLU", [y])
    return b


def swiglu_prologue_epilogue():
    b = _b()
    x, s = b.tensor("f32", [N, 2 * C]), b.tensor("f32", [C])
    y = b.op("GELU", [x])[0]
    y = b.op("SwiGlu", [y], out=[("f32", [N, C])])[0]
    b.op("Multiply", [y, s])
    return b


def swiglu_post_ops():
    b = _b()
    x, s = b.tensor("f32", [N, 2 * C]), b.tensor("f32", [C])
    y = b.op("SwiGlu", [x], out=[("f32", [N, C])])[0]
    b.op("Multiply", [y, s])
    return b


def ln_post_all_gather_post_ops():
    b = _b()
    x, st = b.tensor("f32", [N, C]), b.tensor("f32", [N, 8])
    y = b.op("LayerNormPostAllGather", [x, st])[0]
    b.op("ReLU", [y])
    return b


def dequant_eltwise_quant():
    b = _b()
    x = b.tensor("u8", [N, C])
    y = b.op("Dequantize", [x], out=[("f32", [N, C])], attrs={"scales": [0.05], "zps": [128]})[0]
    y = b.op("ReLU", [y])[0]
    b.op("Quantize", [y], out=[("u8", [N, C])], attrs={"scales": [0.05], "zps": [0]})
    return b


def eltwise_chain():
    b = _b()
    x, bias, s, res = b.tensor("f32", [N, C]), b.tensor("f32", [C]), b.tensor("f32", [C]), b.tensor("f32", [N, C])
    y = b.op("Add", [x, bias])[0]
    y = b.op("ReLU", [y])[0]
    y = b.op("Multiply", [y, s])[0]
    b.op("Add", [y, res])
    return b


def swish():
    b = _b()
    x = b.tensor("f32", [N, C])
    s = b.op("Sigmoid", [x])[0]
    b.op("Multiply", [x, s])
    return b


def two_branches():
    b = _b()
    x = b.tensor("f32", [N, C])
    e = b.op("Exp", [x])[0]
    t = b.op("Tanh", [x])[0]
    b.op("Subtract", [e, t])
    return b


def x8_reorder():
    b = _b()
    x = b.tensor("s8", [N, C], strides=[1, N])
    q = {"scales": [0.05], "zps": [0]}
    y = b.op("Dequantize", [x], out=[("f32", [N, C])], attrs=q)[0]
    y = b.op("Reorder", [y], out=[("f32", [N, C])])[0]
    b.op("Quantize", [y], out=[("s8", [N, C])], attrs=q)
    return b


def int8_concat():
    b = _b()
    q = {"scales": [0.05], "zps": [3]}
    xs = [b.tensor("u8", [N // 4, C]) for _ in range(4)]
    ds = [b.op("Dequantize", [x], out=[("f32", [N // 4, C])], attrs=q)[0] for x in xs]
    y = b.op("Concat", ds, out=[("f32", [N, C])], attrs={"axis": 0})[0]
    b.op("Quantize", [y], out=[("u8", [N, C])], attrs=q)
    return b


def s8f32s8_bnorm():
    b = _b()
    q = {"scales": [0.05], "zps": [0]}
    x = b.tensor("s8", IMG)
    y = b.op("Dequantize", [x], out=[("f32", IMG)], attrs=q)[0]
    params = [b.tensor("f32", [IMG[1]]) for _ in range(4)]
    y = b.op("BatchNormInference", [y] + params, attrs={"epsilon": 0.001, "data_format": "NCX"})[0]
    y = b.op("ReLU", [y])[0]
    b.op("Quantize", [y], out=[("s8", IMG)], attrs=q)
    return b


def typecast_quantize():
    b = _b()
    x = b.tensor("bf16", [N, C])
    y = b.op("TypeCast", [x], out=[("f32", [N, C])])[0]
    b.op("Quantize", [y], out=[("s8", [N, C])], attrs={"scales": [0.05], "zps": [0]})
    return b


def reorder_sum():
    b = _b()
    x, r = b.tensor("f32", [N, C], strides=[1, N]), b.tensor("f32", [N, C])
    y = b.op("Reorder", [x], out=[("f32", [N, C])])[0]
    b.op("Add", [y, r])
    return b


def eltwise_dropout():
    b = _b()
    x = b.tensor("f32", [N, C])
    y = b.op("GELU", [x])[0]
    seed, off, prob = b.tensor("s32", [1]), b.tensor("s32", [1]), b.tensor("f32", [1])
    b.op("Dropout", [y, seed, off, prob], out=[("f32", [N, C]), ("u8", [N, C])])
    return b


CASES = {f.__name__: f for f in (
    relu_bwd_bnorm_bwd, bnorm_inference_relu, bnorm_fwd_train_relu, norm_post_ops, norm_swish, softmax_post_ops,
    reduction_post_ops, swiglu_prologue_epilogue, swiglu_post_ops, ln_post_all_gather_post_ops,
    dequant_eltwise_quant, eltwise_chain, swish, two_branches, typecast_quantize, reorder_sum,
    x8_reorder, int8_concat, s8f32s8_bnorm, eltwise_dropout)}
#: cases named for what they show rather than for the catalog pattern that fuses them
PATTERN = {"swish": "eltwise_chain"}


def timeit(fn, repeat):
    fn()
    fn()
    ts = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return min(ts) * 1e3


def child(case, policy, repeat):
    import graphc
    from graphc.fill import make_inputs
    g = CASES[case]().finalize()
    parts = g.get_partitions(policy)
    pattern = parts[0].pattern if len(parts) == 1 else None
    from graphc.compiler.layout import into_layout
    # inputs in the layouts their tensors declare, as a caller passes them
    inputs = {tid: into_layout(a, g.tensors[tid]) for tid, a in make_inputs(g, seed=0).items()}
    for op in g.ops.values():   # a dropout probability in [0, 1]
        if op.kind == "Dropout":
            inputs[op.input("probability").id] = np.array([0.25], np.float32)
    cg = graphc.compile(g, policy=policy)
    ms = timeit(lambda: cg.run(inputs), repeat)
    print(json.dumps({"ms": ms, "partitions": len(parts), "pattern": pattern}))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", action="append", choices=sorted(CASES))
    ap.add_argument("--policy")
    ap.add_argument("--repeat", type=int, default=10)
    args = ap.parse_args()
    if args.policy:
        child(args.case[0], args.policy, args.repeat)
        return
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    print("| case | fused ms | partitions (debug) | debug ms | debug / fused |")
    print("|---|---|---|---|---|")
    for case in args.case or list(CASES):
        res = {}
        for policy in ("fusion", "debug"):
            p = subprocess.run([sys.executable, __file__, "--case", case, "--policy", policy,
                                "--repeat", str(args.repeat)], capture_output=True, text=True, env=dict(os.environ))
            if p.returncode != 0:
                err = p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"exit {p.returncode}"
                res[policy] = {"error": err}
            else:
                res[policy] = json.loads(p.stdout.strip().splitlines()[-1])
        f, d = res["fusion"], res["debug"]
        if "error" in f or "error" in d:
            print(f"| {case} | {f.get('error', '')} | | {d.get('error', '')} | |")
            continue
        note = "" if f["partitions"] == 1 and f["pattern"] == PATTERN.get(case, case) else \
            f" (fusion gave {f['partitions']} partitions, {f['pattern']})"
        print(f"| {case}{note} | {f['ms']:.2f} | {d['partitions']} | {d['ms']:.2f} | {d['ms'] / f['ms']:.2f}x |",
              flush=True)


if __name__ == "__main__":
    main()
