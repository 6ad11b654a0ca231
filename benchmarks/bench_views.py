"""Views inside a fused partition: a transformer's head split and merge
(reshape to heads, transpose, MatMul, transpose back, reshape) against the same
MatMul on tensors already laid out by heads.  The reshapes and transposes are
views, folded into the GEMM's leading dimensions, so both partitions move the
same bytes (counted by graphc.bench.cost, as ``graphc bench -P`` counts them)
and should run within 10% of each other.  Also the standalone corpus views
(static_reshape / static_transpose shapes), which return numpy views.

Each contender runs in its own subprocess.

    python benchmarks/bench_views.py [--repeat N]
"""
from __future__ import annotations

import argparse
import json

from children import load_average, run_child

B, S, H, D = 4, 512, 16, 64


def heads_graph(with_views: bool):
    from graphc import Graph, LogicalTensor as LT, Op
    g = Graph()
    w = LT(1, "f32", [H, D, D])
    if not with_views:
        g.add_op(Op(0, "MatMul", [LT(0, "f32", [B, H, S, D]), w], [LT(2, "f32", [B, H, S, D])]))
        return g.finalize()
    g.add_op(Op(0, "StaticReshape", [LT(0, "f32", [B, S, H * D])], [LT(2, "f32", [B, S, H, D])],
                {"shape": [B, S, H, D], "special_zero": False}))
    g.add_op(Op(1, "StaticTranspose", [LT(2, "f32", [B, S, H, D])], [LT(3, "f32", [B, H, S, D])],
                {"order": [0, 2, 1, 3]}))
    g.add_op(Op(2, "MatMul", [LT(3, "f32", [B, H, S, D]), w], [LT(4, "f32", [B, H, S, D])]))
    g.add_op(Op(3, "StaticTranspose", [LT(4, "f32", [B, H, S, D])], [LT(5, "f32", [B, S, H, D])],
                {"order": [0, 2, 1, 3]}))
    g.add_op(Op(4, "StaticReshape", [LT(5, "f32", [B, S, H, D])], [LT(6, "f32", [B, S, H * D])],
                {"shape": [B, S, H * D], "special_zero": False}))
    return g.finalize()


def view_graph(kind: str):
    """The corpus cases' shapes: reshape 65536x1024 -> 128x512x16x64 and transpose
    224x12x384x64 (0, 2, 1, 3), with the strides the corpus gives their outputs."""
    from graphc import Graph, LogicalTensor as LT, Op
    g = Graph()
    if kind == "reshape":
        g.add_op(Op(0, "StaticReshape", [LT(0, "f32", [65536, 1024])], [LT(1, "f32", [128, 512, 16, 64])],
                    {"shape": [128, 512, 16, 64], "special_zero": False}))
    else:
        g.add_op(Op(0, "StaticTranspose", [LT(0, "f32", [224, 12, 384, 64])],
                    [LT(1, "f32", [224, 384, 12, 64], [294912, 64, 24576, 1])], {"order": [0, 2, 1, 3]}))
    return g.finalize()


CASES = {
    "heads MatMul with reshape/transpose views": lambda: heads_graph(True),
    "heads MatMul on a heads layout (no views)": lambda: heads_graph(False),
    "StaticReshape 65536x1024 (256 MB)": lambda: view_graph("reshape"),
    "StaticTranspose 224x12x384x64 (264 MB)": lambda: view_graph("transpose"),
}


def child(case: str, repeat: int) -> dict:
    import graphc
    from graphc.bench.cost import best_time, bytes_moved
    from graphc.fill import make_inputs
    g = CASES[case]()
    cg = graphc.compile(g)
    assert len(cg.compiled) == 1, "one partition"
    feeds = make_inputs(g, 0)
    return {"s": best_time(lambda: cg.run(feeds), repeat), "bytes": bytes_moved(cg)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.repeat)))
        return
    print(f"load average before: {load_average()}")
    res = {case: run_child(__file__, "--child", case, "--repeat", str(args.repeat)) for case in CASES}
    print("| case | graphc (ms) | bytes moved |")
    print("|---|---|---|")
    for case, r in res.items():
        print(f"| {case} | {r['s'] * 1e3:.3f} | {r['bytes'] / 1e6:.1f} MB |")
    a, b = (res[c]["s"] for c in list(CASES)[:2])
    print(f"views / no views: {a / b:.3f} (time), bytes {res[list(CASES)[0]]['bytes']} vs "
          f"{res[list(CASES)[1]]['bytes']}")


if __name__ == "__main__":
    main()
