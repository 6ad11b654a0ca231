"""Scaled dot-product attention: graphc's one-partition flash-style kernel
against torch eager attention (matmul, softmax, matmul: the S x S scores in
memory) and torch's fused scaled_dot_product_attention; with a compressed
(int8, grouped scales and zero points) KV cache also against graphc's f32 SDPA.

Each (case, contender) runs in its own subprocess, one after the other (numba's
and torch's thread pools starve each other in one process).  FLOPs count the
two GEMMs (2 per multiply-add); eager/graphc > 1 means graphc is faster.

    python benchmarks/bench_sdpa.py [--case TEXT] [--repeat N]
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_compute import THREADS  # noqa: E402
from children import fastest as timeit  # noqa: E402

CONTENDERS = ("graphc", "eager", "fused")


def sdpa(n, h, s, d, dt="f32", mask=None):
    """(build, torch eager, torch fused, flops) of MHA [n, h, s, d] with a scale
    by Multiply and an optional mask ("causal": the implicit top-left one)."""
    ids = {}

    def build(b):
        q, k, v = (b.tensor(dt, [n, h, s, d]) for _ in range(3))
        f = b.tensor("f32", [1])
        ids.update(qkv=[q.id, k.id, v.id], scale=f.id)
        x = b.op("MatMul", [q, k], out=[("f32", [n, h, s, s])], attrs={"transpose_b": True})[0]
        x = b.op("Multiply", [x, f])[0]
        if mask == "causal":
            row = b.op("GenIndex", [x], out=[("s32", [n, h, s, s])], attrs={"axis": -2})[0]
            col = b.op("GenIndex", [x], out=[("s32", [n, h, s, s])], attrs={"axis": -1})[0]
            cond = b.op("GreaterEqual", [row, col], out=[("boolean", [n, h, s, s])])[0]
            fill = b.tensor("f32", [1])
            ids["fill"] = fill.id
            x = b.op("Select", [cond, x, fill], out=[("f32", [n, h, s, s])])[0]
        p = b.op("SoftMax", [x], out=[(dt, [n, h, s, s])], attrs={"axis": -1})[0]
        b.op("MatMul", [p, v], out=[(dt, [n, h, s, d])])

    def feeds(g):
        from graphc.fill import make_inputs
        ins = make_inputs(g, 0)
        ins[ids["scale"]] = np.array([1 / math.sqrt(d)], np.float32)
        if mask == "causal":
            ins[ids["fill"]] = np.array([-np.inf], np.float32)
        return ins, ids["qkv"]

    def eager(torch, q, k, v):
        causal = torch.ones(s, s, dtype=torch.bool).tril() if mask == "causal" else None

        def run():
            x = torch.matmul(q, k.transpose(-1, -2)) * (1 / math.sqrt(d))
            if causal is not None:
                x = x.masked_fill(~causal, -math.inf)
            return torch.matmul(torch.softmax(x, -1), v)
        return run

    def fused(torch, q, k, v):
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=mask == "causal")
    return build, feeds, eager, fused, 2 * 2 * n * h * s * s * d


def sdpa_compressed(n, h, s, d, qdt="s8", group=32, sq=None):
    """(build, eager, fused, flops) of MHA (queries [n, h, sq, d], keys and values
    [n, h, s, d]) with a compressed KV cache (sdpa_with_compressed_kv.md): K and V
    ``qdt`` with per-group f32 scales and zero points along the head dim (groups of
    ``group``), DynamicDequantize'd in the graph (graphc: one partition,
    dequantized while the K/V tiles are packed); torch dequantizes them in each
    run, then eager attention / fused SDPA.  ``qdt`` None: f32 K/V (the baseline)."""
    ids = {}
    sq = s if sq is None else sq
    lo = -128 if qdt == "s8" else 0

    def build(b):
        q = b.tensor("f32", [n, h, sq, d])
        ids["qkv"] = [q.id]

        def operand():
            if qdt is None:
                x = b.tensor("f32", [n, h, s, d])
                ids["qkv"].append(x.id)
                return x
            x, sc, zp = b.tensor(qdt, [n, h, s, d]), b.tensor("f32", [n, h, s, d // group]), \
                b.tensor(qdt, [n, h, s, d // group])
            ids["qkv"] += [x.id, sc.id, zp.id]
            return b.op("DynamicDequantize", [x, sc, zp], out=[("f32", [n, h, s, d])],
                        attrs={"qtype": "per_group", "group_shape": [1, 1, 1, group]})[0]
        k, v = operand(), operand()
        f = b.tensor("f32", [1])
        ids["scale"] = f.id
        x = b.op("MatMul", [q, k], out=[("f32", [n, h, sq, s])], attrs={"transpose_b": True})[0]
        p = b.op("SoftMax", [b.op("Multiply", [x, f])[0]], out=[("f32", [n, h, sq, s])], attrs={"axis": -1})[0]
        b.op("MatMul", [p, v], out=[("f32", [n, h, sq, d])])

    def feeds(g):
        from graphc.fill import make_inputs
        ins = make_inputs(g, 0)
        rng = np.random.default_rng(0)
        for x, sc, zp in (ids["qkv"][1:4], ids["qkv"][4:7]) if qdt else ():
            ins[x] = rng.integers(lo, lo + 256, ins[x].shape).astype(ins[x].dtype)
            ins[sc] = rng.uniform(0.005, 0.01, ins[sc].shape).astype(np.float32)
            ins[zp] = rng.integers(lo + 120, lo + 136, ins[zp].shape).astype(ins[zp].dtype)
        ins[ids["scale"]] = np.array([1 / math.sqrt(d)], np.float32)
        return ins, ids["qkv"]

    def dequantize(x, sc=None, zp=None):
        return x if sc is None else (x - zp.repeat_interleave(group, -1)) * sc.repeat_interleave(group, -1)

    def kv(args):
        half = len(args) // 2
        return dequantize(*args[:half]), dequantize(*args[half:])

    def eager(torch, q, *args):
        def run():
            k, v = kv(args)
            x = torch.matmul(q, k.transpose(-1, -2)) * (1 / math.sqrt(d))
            return torch.matmul(torch.softmax(x, -1), v)
        return run

    def fused(torch, q, *args):
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, *kv(args))
    return build, feeds, eager, fused, 2 * 2 * n * h * sq * s * d


def sdpa_training(n, h, s, d, dt="f32"):
    """(build, eager, fused, flops) of one training step of MHA [n, h, s, d] (scale by
    Multiply, no mask): sdpa.md's forward exporting the stats and its backward graph
    in one graph (two partitions: the attention forward and backward kernels),
    against torch's forward + autograd backward (eager attention / fused SDPA)."""
    ids = {}

    def build(b):
        sh, ss, st = [n, h, s, d], [n, h, s, s], [n, h, s, 1]
        q, k, v, do = (b.tensor(dt, sh) for _ in range(4))
        f = b.tensor("f32", [1])
        ids.update(qkv=[q.id, k.id, v.id, do.id], scale=f.id)

        def scores():
            x = b.op("MatMul", [q, k], out=[("f32", ss)], attrs={"transpose_b": True})[0]
            return b.op("Multiply", [x, f], out=[("f32", ss)])[0]

        def cast(x):
            return b.op("TypeCast", [x], out=[(dt, list(x.shape))])[0] if dt != "f32" else x
        p, stats = b.op("SoftMax", [scores()], out=[(dt, ss), ("f32", st)], attrs={"axis": -1})
        o = b.op("MatMul", [p, v], out=[(dt, sh)])[0]
        pr = b.op("Exp", [b.op("Subtract", [scores(), stats], out=[("f32", ss)])[0]], out=[("f32", ss)])[0]
        b.op("MatMul", [cast(pr), do], out=[(dt, sh)], attrs={"transpose_a": True})
        dp = b.op("MatMul", [do, v], out=[("f32", ss)], attrs={"transpose_b": True})[0]
        r = b.op("ReduceSum", [b.op("Multiply", [o, do], out=[(dt, sh)])[0]], out=[(dt, st)],
                 attrs={"axes": [-1], "keep_dims": True})[0]
        ds = b.op("Multiply", [pr, b.op("Subtract", [dp, r], out=[("f32", ss)])[0]], out=[("f32", ss)])[0]
        ds = cast(b.op("Multiply", [ds, f], out=[("f32", ss)])[0])
        b.op("MatMul", [ds, k], out=[(dt, sh)])
        b.op("MatMul", [ds, q], out=[(dt, sh)], attrs={"transpose_a": True})

    def feeds(g):
        from graphc.fill import make_inputs
        ins = make_inputs(g, 0)
        ins[ids["scale"]] = np.array([1 / math.sqrt(d)], np.float32)
        return ins, ids["qkv"]

    def eager(torch, q, k, v, do):
        q, k, v = (x.clone().requires_grad_() for x in (q, k, v))

        def run():
            x = torch.matmul(q, k.transpose(-1, -2)) * (1 / math.sqrt(d))
            torch.matmul(torch.softmax(x, -1), v).backward(do)
        return run

    def fused(torch, q, k, v, do):
        q, k, v = (x.clone().requires_grad_() for x in (q, k, v))
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v).backward(do)
    return build, feeds, eager, fused, 2 * 2 * n * h * s * s * d * 3.5   # forward 2 GEMMs, backward 5


CASES = {
    "SDPA 2x16x512x64 f32": sdpa(2, 16, 512, 64),
    "SDPA 2x16x512x64 f32 causal": sdpa(2, 16, 512, 64, mask="causal"),
    "SDPA 2x16x512x64 bf16": sdpa(2, 16, 512, 64, "bf16"),
    "SDPA 2x16x512x64 s8 KV g32": sdpa_compressed(2, 16, 512, 64),
    "decode 1x32x1x4096x128 f32 KV": sdpa_compressed(1, 32, 4096, 128, None, sq=1),
    "decode 1x32x1x4096x128 s8 KV g32": sdpa_compressed(1, 32, 4096, 128, sq=1),
    "SDPA train fwd+bwd 2x16x512x64 f32": sdpa_training(2, 16, 512, 64),
    "SDPA train fwd+bwd 2x16x512x64 bf16": sdpa_training(2, 16, 512, 64, "bf16"),
}

#: compressed-KV case -> the f32 case of its shape
BASELINES = {"SDPA 2x16x512x64 s8 KV g32": "SDPA 2x16x512x64 f32",
             "decode 1x32x1x4096x128 s8 KV g32": "decode 1x32x1x4096x128 f32 KV"}


def child(case, who, repeat):
    from graphc.builder import GraphBuilder
    build, feeds, eager, fused, _ = CASES[case]
    b = GraphBuilder()
    build(b)
    g = b.finalize()
    ins, qkv = feeds(g)
    if who == "graphc":
        import graphc
        cg = graphc.compile(g)
        assert len(cg.compiled) == (2 if "train" in case else 1), "one partition (forward, backward)"
        return timeit(lambda: cg.run(ins), repeat)
    import torch
    torch.set_num_threads(THREADS)
    dt = torch.bfloat16 if g.tensors[qkv[0]].dtype.name == "bf16" else torch.float32
    args = [torch.from_numpy(np.ascontiguousarray(ins[t]).astype(np.float32)).to(dt) for t in qkv]
    fn = (eager if who == "eager" else fused)(torch, *args)
    if "train" in case:   # autograd on
        return timeit(fn, repeat)
    with torch.no_grad():
        return timeit(fn, repeat)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", default="", help="run the cases whose name contains this text")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs per contender (the best counts)")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return print(json.dumps(child(*args.child, args.repeat)))
    print(f"machine: {THREADS} cores, load average {os.getloadavg()[0]:.2f}; best of {args.repeat} runs, ms")
    head = (f"{'case':<30} {'graphc':>8} {'eager':>8} {'fused':>8} {'eager/gc':>9} {'fused/gc':>9} "
            f"{'GFLOP/s':>8}")
    print(head + "\n" + "-" * len(head))
    done = {}
    for case, (*_, flops) in CASES.items():
        if args.case not in case:
            continue
        t = {}
        for who in CONTENDERS:   # each in its own process, one after the other
            p = subprocess.run([sys.executable, __file__, "--child", case, who, "--repeat", str(args.repeat)],
                               capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(f"{case} / {who} failed:\n{p.stderr}")
            t[who] = json.loads(p.stdout.strip().splitlines()[-1])
        print(f"{case:<30} {t['graphc'] * 1e3:8.2f} {t['eager'] * 1e3:8.2f} {t['fused'] * 1e3:8.2f} "
              f"{t['eager'] / t['graphc']:9.2f} {t['fused'] / t['graphc']:9.2f} {flops / t['graphc'] / 1e9:8.0f}",
              flush=True)
        done[case] = t["graphc"]
    for case, base in BASELINES.items():   # a compressed KV cache against f32 K/V of that shape
        if case in done and base in done:
            print(f"{case}: graphc {done[case] * 1e3:.2f} ms against f32 K/V {done[base] * 1e3:.2f} ms "
                  f"({done[case] / done[base]:.2f}x the time)")


if __name__ == "__main__":
    main()
