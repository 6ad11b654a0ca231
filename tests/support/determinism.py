"""Determinism runs: graphs of every family with a reduction (one benchdnn
corpus case each, the attention pattern from tests/support/sdpa.py) compiled and
run many times in this process, each output hashed.  Run as a program (in a
process of its own per numba thread count: NUMBA_NUM_THREADS is read once):

    python tests/support/determinism.py [--deterministic] [--runs N] NAME...

prints one JSON object {name: {"hashes": [sha256 per output], "same": bool}},
``same`` saying whether every run gave the first run's bits."""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

#: a corpus case of each family whose kernels sum (file under op/f32 of the benchdnn corpus)
CORPUS_CASES = {
    "reduce": "reducesum.json", "reduce_l2": "reducel2.json", "softmax_bwd": "softmax_bwd.json",
    "layernorm_bwd": "lnorm_bwd.json", "batchnorm_bwd": "bnorm_bwd.json", "groupnorm": "gnorm.json",
    "matmul": "matmul.json", "conv": "conv_2d.json", "conv_bwd_weights": "conv_bwd_w_2d.json",
    "deconv_bwd_weights": "deconv_bwd_w.json", "avgpool_bwd": "avgpool_bwd.json", "bias_bwd": "biasadd_bwd.json",
    "interpolate_bwd": "interpolate_bwd.json", "prelu_bwd": "prelu_bwd_dw_5d.json",
}
#: the attention pattern's kernels (forward and training backward), built in tests/support/sdpa.py
SDPA_CASES = ("sdpa", "sdpa_bwd")


def corpus_dir() -> Path:
    shared = Path(os.environ.get("GRAPHC_SHARED", Path(__file__).resolve().parents[3] / "shared"))
    return shared / "onednn" / "benchdnn" / "inputs" / "graph" / "op" / "f32"


def graph_and_inputs(name: str, deterministic: bool):
    from graphc import load_graph
    from graphc.fill import make_inputs
    if name in CORPUS_CASES:
        g = load_graph(json.loads((corpus_dir() / CORPUS_CASES[name]).read_text()))
        g.set_deterministic(deterministic)
        return g, make_inputs(g, 0)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from support.sdpa import sdpa_backward_graph, sdpa_backward_inputs, sdpa_graph, sdpa_inputs
    if name == "sdpa":
        g, ids = sdpa_graph(n=2, hq=4, sq=256, skv=256, d=64)
        inputs = sdpa_inputs(g, ids)
    else:
        g, ids = sdpa_backward_graph(n=2, h=4, sq=128, skv=256, d=32)
        inputs = sdpa_backward_inputs(g, ids)
    g.set_deterministic(deterministic)
    return g, inputs


def run(name: str, deterministic: bool, runs: int) -> dict:
    import graphc
    g, inputs = graph_and_inputs(name, deterministic)
    cg = graphc.compile(g)
    first, same = None, True
    for _ in range(runs):
        out = cg.run(inputs)
        bits = [np.ascontiguousarray(out[t]).view(np.uint8).tobytes() for t in sorted(out)]
        if first is None:
            first = bits
        same = same and bits == first
    return {"hashes": [hashlib.sha256(b).hexdigest()[:16] for b in first], "same": same,
            "impls": [cp.get_impl_info() for cp in cg.compiled if cp is not None]}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--deterministic", action="store_true")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("names", nargs="+")
    args = ap.parse_args(argv)
    print(json.dumps({n: run(n, args.deterministic, args.runs) for n in args.names}))


if __name__ == "__main__":
    main()
