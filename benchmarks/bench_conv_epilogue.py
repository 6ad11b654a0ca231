"""Convolutions with their fused post-ops against the bare convolution and torch:
the oneDNN benchdnn corpus' convolution pattern cases (pattern/f32/conv_*.json)
and small op cases, each timed three ways on the same shapes:

* ``graphc``: the case's graph compiled (one partition, its post-ops fused);
* ``bare``: the same graph cut after its first op (the convolution alone);
* ``torch``: the graph's ops run one by one in torch eager (conv2d, then each
  post-op; oneDNN inside torch);
* ``base`` (with ``--baseline DIR``): the case's graph in graphc imported from
  the checkout DIR (e.g. a ``git archive`` of the commit before a change).

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_conv_epilogue.py [--cases a.json,b.json]
        [--repeat N] [--rounds R] [--threads T] [--corpus DIR] [--who graphc,bare,torch] [--baseline DIR]

Each (case, contender) runs in a process of its own, --rounds interleaved
rounds; the table gives the fastest call (ms) of all rounds.  The FLOP limit is
the direct convolution's multiply-adds at 210 GFLOP/s a core (the fastest
sgemm rate measured on this machine, docs/performance.md), the memory limit the bytes the graph must read and write
(every input and output once) at --gbs GB/s; the load average is printed
before and after.
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import subprocess
import sys

import numpy as np

from children import fastest, load_average, run_child

CORPUS = os.environ.get("GRAPHC_BENCHDNN_INPUTS", "/work/shared/onednn/benchdnn/inputs/graph")
CASES = ",".join(f"pattern/f32/{c}.json" for c in (
    "conv_post_ops_fusion", "conv_bias_post_ops_fusion", "conv_bias_add_fusion", "conv_bias_sum_fusion",
    "conv_bias_sum_fusion_2", "conv_add_swish_relu_fusion", "conv_bias_swish_fusion",
    "conv_bias_post_ops_chain_fusion", "conv_depthwise_fusion_cpu",
    "conv_bias_relu_depthwise_bias_relu_fusion_cpu")) + ",op/f32/conv_2d.json"
GFLOPS_PER_CORE = 210.0


def _load(case, corpus):
    with open(os.path.join(corpus, case)) as f:
        return json.load(f)


def bare(d: dict) -> dict:
    """The graph ``d`` cut after its first op."""
    d = copy.deepcopy(d)
    d["graph"] = d["graph"][:1]
    d.pop("input_ports", None)
    d.pop("output_ports", None)
    return d


def _sizes(d):
    """(input ids, output ids) of the JSON graph: tensors no op writes / no op reads."""
    written = {t["id"] for op in d["graph"] for t in op["outputs"]}
    read = {t["id"] for op in d["graph"] for t in op["inputs"]}
    ins, outs = {}, {}
    for op in d["graph"]:
        for t in op["inputs"]:
            if t["id"] not in written:
                ins[t["id"]] = t
        for t in op["outputs"]:
            if t["id"] not in read:
                outs[t["id"]] = t
    return ins, outs


def limits(d, cores):
    """(ms at the FLOP limit, MB moved) of the JSON graph ``d``."""
    flops = 0
    for op in d["graph"]:
        if op["kind"] == "Convolution":
            w, y = op["inputs"][1]["shape"], op["outputs"][0]["shape"]
            flops += 2 * math.prod(y) * math.prod(w) // w[0] if op["attrs"]["weights_format"]["value"] == "OIX" \
                else 2 * math.prod(y) * math.prod(w) // w[-1]
    ins, outs = _sizes(d)
    nbytes = sum(4 * math.prod(t["shape"]) for t in (*ins.values(), *outs.values()))
    return flops / (GFLOPS_PER_CORE * 1e9 * cores) * 1e3, nbytes / 1e6, flops


def _graphc(d, repeat):
    import graphc
    from graphc.fill import make_inputs
    from graphc.jsonio import load_graph
    g = load_graph(d)
    cg = graphc.compile(g)
    feeds = make_inputs(g, 0)
    return dict(s=fastest(lambda: cg.run(feeds), repeat),
                impl=" + ".join(p.get_impl_info() for p in cg.compiled))


def _torch_ops():
    import torch
    F = torch.nn.functional

    def conv(op, x, w, b=None):
        a = {k: v["value"] for k, v in op["attrs"].items()}
        assert a["data_format"] == "NCX" and a["weights_format"] == "OIX", "NCX/OIX cases only"
        return F.conv2d(x, w, b, stride=a["strides"], padding=a["pads_begin"], dilation=a["dilations"],
                        groups=a["groups"])
    return {"Convolution": conv, "ReLU": lambda op, x: torch.relu(x), "Sigmoid": lambda op, x: torch.sigmoid(x),
            "Add": lambda op, a, b: a + b, "Multiply": lambda op, a, b: a * b}


def _torch(d, repeat):
    import torch
    torch.set_num_threads(int(os.environ.get("NUMBA_NUM_THREADS", os.cpu_count() or 1)))
    table = _torch_ops()
    ins, _ = _sizes(d)
    rng = np.random.default_rng(0)
    feeds = {i: torch.from_numpy(rng.standard_normal(t["shape"], dtype=np.float32)) for i, t in ins.items()}

    def run():
        vals = dict(feeds)
        for op in d["graph"]:
            vals[op["outputs"][0]["id"]] = table[op["kind"]](op, *(vals[t["id"]] for t in op["inputs"]))
        return vals
    with torch.no_grad():
        return dict(s=fastest(run, repeat))


def child(case, who, repeat, corpus):
    d = _load(case, corpus)
    if who == "base_bare":
        return _graphc(bare(d), repeat)
    if who == "bare":
        return _graphc(bare(d), repeat)
    return _graphc(d, repeat) if who == "graphc" else _torch(d, repeat)


def _run(case, who, common, baseline):
    """One child's result; ``base`` / ``base_bare``: graphc imported from the checkout ``baseline``."""
    if not who.startswith("base"):
        return run_child(__file__, "--child", case, who, *common)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [baseline, os.environ.get("PYTHONPATH")])))
    p = subprocess.run([sys.executable, __file__, "--child", case, "graphc" if who == "base" else who, *common],
                       capture_output=True, text=True, env=env)
    if p.returncode:
        raise SystemExit(f"{case} / {who} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=CASES)
    ap.add_argument("--who", default="graphc,bare,torch")
    ap.add_argument("--corpus", default=CORPUS)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gbs", type=float, default=40.0, help="the memory bandwidth of the limit (GB/s)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                    help="threads of each contender (NUMBA_NUM_THREADS; torch.set_num_threads)")
    ap.add_argument("--baseline", metavar="DIR", help="also time graphc imported from the checkout DIR (who "
                    "'base': the case, 'base_bare': its convolution alone)")
    ap.add_argument("--child", nargs=2, metavar=("CASE", "WHO"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.repeat, args.corpus)))
        return
    if not os.path.isdir(args.corpus):
        raise SystemExit(f"no benchdnn corpus at {args.corpus} (set GRAPHC_BENCHDNN_INPUTS)")
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)
    who = args.who.split(",")
    print(f"load average before: {load_average()}; {os.cpu_count()} cores, {args.threads} threads each; best of "
          f"{args.rounds} x {args.repeat} calls, ms; limits: {GFLOPS_PER_CORE:.0f} GFLOP/s a thread, "
          f"{args.gbs:.0f} GB/s")
    print(f"| case | {' | '.join(who)} | FLOP limit | memory limit | impl |")
    print(f"|---|{'---|' * len(who)}---|---|---|")
    common = ["--repeat", str(args.repeat), "--corpus", args.corpus]
    for case in args.cases.split(","):
        best = {w: float("inf") for w in who}
        impl = ""
        for _ in range(args.rounds):
            for w in who:
                r = _run(case, w, common, args.baseline)
                best[w] = min(best[w], r["s"])
                impl = r.get("impl", impl) if w == "graphc" else impl
        fl_ms, mb, _ = limits(_load(case, args.corpus), args.threads)
        cells = " | ".join(f"{best[w] * 1e3:.3f}" for w in who)
        print(f"| {case.split('/')[-1][:-5]} | {cells} | {fl_ms:.3f} | {mb / args.gbs:.3f} | {impl} |", flush=True)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
