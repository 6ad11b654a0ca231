"""oneDNN's complex-fusion CI cases (attention and gated MLP) in graphc against torch eager.

    python benchmarks/bench_complex.py [--harness NAME ...] [--case TEXT ...] [--f32 | --not-f32]
                                       [--repeat N] [--limit N]

The cases are the lines of GRAPHC_SHARED/onednn/benchdnn/inputs/graph/
complex_fusion/harness_mha_ci and harness_mlp_ci (read by graphc.bench's own
parser, a knob with several values giving one case per value; the graph built
by its driver with the line's knobs).  Contenders, each in its own subprocess:
  graphc  ``python -m graphc bench --mode=P --fix-times-per-prb=N <knobs>``:
          the driver's fastest CompiledGraph.run (bench_corpus.graphc_child).
  torch   the same graph's math in torch eager: a small interpreter maps each
          op of the built graph to torch calls, on the same generated inputs
          (graphc.fill.make_inputs, seed 0, dense), torch's default threads,
          torch.inference_mode, two warm-ups then the fastest of N runs.  Its
          outputs are checked once against graphc's numpy reference with the
          ORACLE tolerances; a case whose torch outputs disagree, or which uses
          an op or data type the interpreter lacks (Dropout: torch's RNG is not
          graphc's Philox; f8, int4), is marked so and not timed.
torch/gc > 1 means graphc is faster.
"""
from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from bench_corpus import CORPUS, graphc_child
from children import run_child

HARNESSES = ("harness_mha_ci", "harness_mlp_ci")


# ------------------------------------------------------------------ the cases
def load_cases(harnesses) -> list[tuple[str, list[str]]]:
    """(short name, knobs) per case of the harness files, as graphc bench reads them."""
    from graphc.bench.knobs import parse
    out = []
    for h in harnesses:
        parsed = parse([f"--inputs-dir={CORPUS}", f"--batch=complex_fusion/{h}"])
        out += [(short(c), c.knobs_repro().split()) for c in parsed.cases]
    return out


def short(case) -> str:
    """The file's stem and the knobs' values in brief, e.g. 'GQA-f32-v2 dt:f16'."""
    tags = []
    for knob in ("dt", "op-kind", "op-attrs", "tensor-property", "in-shapes"):
        raw = case.raw[knob]
        if knob == "dt" and raw != "undef":
            tags.append("dt:" + "/".join(sorted({e.split(":")[-1] for e in raw.split("+")})))
        elif knob in ("op-kind", "op-attrs") and raw:
            tags.append(raw.replace("mode:", ""))
        elif knob == "tensor-property" and raw:
            tags.append(raw.split(":")[-1].split("+")[0])
        elif knob == "in-shapes" and raw:
            tags.append("in-shapes")
    return " ".join([Path(case.path).stem, *tags])


def is_f32(name: str) -> bool:
    """An f32 graph: an f32 file (not an f16/bf16-f32 one) without --dt, or --dt=...:f32 alone."""
    stem, *tags = name.split()
    dts = [t for t in tags if t.startswith("dt:")]
    if dts:
        return dts == ["dt:f32"]
    return bool(re.search(r"f(p)?32", stem)) and not re.search(r"f16-f32|int|fp8", stem)


def build(knobs):
    """The case's graph as graphc bench builds it."""
    from graphc.bench.driver import Run
    from graphc.bench.knobs import parse
    run = Run(parse([f"--inputs-dir={CORPUS}", *knobs]))
    graph, why = run.graph(run.cases[0])
    if graph is None:
        raise Unsupported(f"not built: {why}")
    return graph


# ------------------------------------------------------------------ the torch interpreter
class Unsupported(Exception):
    """An op or data type the interpreter lacks."""


def torch_dtype(torch, dt):
    table = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "s8": torch.int8,
             "u8": torch.uint8, "s32": torch.int32, "boolean": torch.bool}
    if dt.value not in table:
        raise Unsupported(f"data type {dt.value}")
    return table[dt.value]


def to_torch(torch, a, dt):
    import numpy as np
    if dt.value == "bf16":   # ml_dtypes' bfloat16: the same bits
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16)
    torch_dtype(torch, dt)
    return torch.from_numpy(np.ascontiguousarray(a))


def _matmul(torch, op, x):
    a, b = x[0], x[1]
    if op.attr("transpose_a") and a.ndim > 1:
        a = a.transpose(-1, -2)
    if op.attr("transpose_b") and b.ndim > 1:
        b = b.transpose(-1, -2)
    if a.dtype != b.dtype:
        common = torch.promote_types(a.dtype, b.dtype)
        a, b = a.to(common), b.to(common)
    out = torch.matmul(a, b)
    return [out + x[2] if len(x) > 2 else out]


def _softmax(torch, op, x):
    src = x[0].float()
    axis = op.attr("axis")
    dst = torch.softmax(src, axis)
    if op.attr("mode") == "inf_as_zero":
        dst = torch.nan_to_num(dst, nan=0.0)
    if len(op.outputs) == 1:
        return [dst]
    return [dst, torch.logsumexp(src, axis, keepdim=True)]


def _gelu(torch, op, x):
    approx = "tanh" if op.attr("mode") == "gelu_tanh" else "none"
    return [torch.nn.functional.gelu(x[0].float(), approximate=approx)]


def _reshape(torch, op, x):
    shape = list(op.attr("shape"))
    if op.attr("special_zero"):
        shape = [x[0].shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [x[0].reshape(shape)]


def _genindex(torch, op, x):
    src = x[0]
    axis = op.attr("axis") % src.ndim
    index = torch.arange(src.shape[axis], dtype=torch.int32)
    return [index.reshape([-1 if i == axis else 1 for i in range(src.ndim)]).expand(src.shape)]


def _params(torch, op, src, p):
    """Scales or zero points ``p`` broadcast against src (per tensor, channel or group)."""
    qtype = op.attr("qtype")
    if qtype == "per_tensor":
        return p.reshape(())
    if qtype == "per_channel":
        axis = op.attr("axis") % src.ndim
        return p.reshape([-1 if i == axis else 1 for i in range(src.ndim)])
    for axis, g in enumerate(op.attr("group_shape")):
        p = p.repeat_interleave(g, dim=axis)
    return p


def _static_params(torch, op, src):
    scales = _params(torch, op, src, torch.tensor(op.attr("scales"), dtype=torch.float32))
    zps = op.attr("zps")
    return scales, (0.0 if zps is None else _params(torch, op, src, torch.tensor(zps, dtype=torch.float32)))


def _dequantize(torch, op, x):
    s, z = _static_params(torch, op, x[0])
    return [(x[0].float() - z) * s]


def _dynamic_dequantize(torch, op, x):
    src = x[0].float()
    s = _params(torch, op, src, x[1].float())
    z = _params(torch, op, src, x[2].float()) if len(x) > 2 else 0.0
    return [(src - z) * s]


def _quantize(torch, op, x):
    s, z = _static_params(torch, op, x[0])
    info = torch.iinfo(torch_dtype(torch, op.outputs[0].dtype))
    return [torch.clamp(torch.round(x[0].float() / s + z), info.min, info.max)]


def _reduce_sum(torch, op, x):
    return [x[0].sum(dim=list(op.attr("axes")), keepdim=bool(op.attr("keep_dims")))]


def ops(torch):
    """graphc op kind -> fn(torch, op, inputs) -> outputs (cast to the output dtypes after)."""
    unary = {"Exp": torch.exp, "Tanh": torch.tanh, "Sigmoid": torch.sigmoid, "ReLU": torch.relu}
    binary = {"Add": torch.add, "Subtract": torch.sub, "Multiply": torch.mul, "Divide": torch.div,
              "Maximum": torch.maximum, "Minimum": torch.minimum, "GreaterEqual": torch.ge,
              "Greater": torch.gt, "LessEqual": torch.le, "Less": torch.lt, "Equal": torch.eq}
    table = {k: (lambda f: lambda torch, op, x: [f(x[0].float())])(f) for k, f in unary.items()}
    table.update({k: (lambda f: lambda torch, op, x: [f(x[0], x[1])])(f) for k, f in binary.items()})
    table.update({
        "MatMul": _matmul, "SoftMax": _softmax, "GELU": _gelu, "StaticReshape": _reshape,
        "StaticTranspose": lambda torch, op, x: [x[0].permute(list(op.attr("order")))],
        "TypeCast": lambda torch, op, x: [x[0]], "Reorder": lambda torch, op, x: [x[0]],
        "Select": lambda torch, op, x: [torch.where(x[0], x[1], x[2])],
        "GenIndex": _genindex, "ReduceSum": _reduce_sum, "Quantize": _quantize, "Dequantize": _dequantize,
        "DynamicDequantize": _dynamic_dequantize,
    })
    return table


def interpreter(torch, graph):
    """fn(feeds as torch tensors) -> {output tensor id: torch tensor}: the graph's math in torch eager.
    Raises Unsupported for an op or data type the interpreter lacks."""
    table = ops(torch)
    steps = []
    for op in graph.topo_ops():
        if op.kind == "End":
            continue
        if op.kind not in table:
            raise Unsupported(f"no torch for {op.kind}")
        outs = [(t.id, torch_dtype(torch, t.dtype)) for t in op.outputs]
        steps.append((table[op.kind], op, [t.id for t in op.inputs], outs))
    outputs = list(graph.output_ports)

    def run(feeds):
        values = dict(feeds)
        for fn, op, ins, outs in steps:
            got = fn(torch, op, [values[i] for i in ins])
            for (tid, dt), v in zip(outs, got):
                values[tid] = v if v.dtype == dt else v.to(dt)
        return {tid: values[tid] for tid in outputs}
    return run


def check(graph, feeds_np, got) -> str:
    """'' when torch's outputs match graphc's reference (ORACLE tolerances), else why not."""
    from graphc import reference
    from graphc.tolerances import ORACLE, compare
    ref = reference.run(graph, feeds_np)
    worst = 0.0
    for tid, want in ref.items():
        t = got[tid]
        a = t.float().numpy() if t.is_floating_point() else t.numpy()
        ok, err = compare(a, want, graph.tensors[tid].dtype, table=ORACLE)
        if not ok:
            worst = max(worst, err)
    return f"torch differs from the reference (scaled error {worst:.3g})" if worst else ""


def torch_child(knobs, repeat) -> dict:
    """{ms} or {skip: why}: the case in torch eager; runs in the child."""
    import torch

    from graphc.bench.cost import best_time
    from graphc.fill import make_inputs
    try:
        graph = build(knobs)
        run = interpreter(torch, graph)
        feeds_np = make_inputs(graph, 0)
        feeds = {tid: to_torch(torch, a, graph.tensors[tid].dtype) for tid, a in feeds_np.items()}
    except Unsupported as e:
        return {"skip": str(e)}
    with torch.inference_mode():
        why = check(graph, feeds_np, run(feeds))
        if why:
            return {"skip": why}
        return {"ms": best_time(lambda: run(feeds), repeat) * 1e3}


# ------------------------------------------------------------------ the table
def row(name, knobs, repeat) -> str:
    try:
        gc = f"{graphc_child(knobs, repeat)['ms']:.2f}"
    except SystemExit as e:        # e.g. more partitions than the harness expects: the reason in the cell
        print(str(e.code), file=sys.stderr)
        found = re.search(r"FAILED \((.*?)\)", str(e.code))
        gc = f"failed: {found.group(1)}" if found else "failed"
    try:
        t = run_child(__file__, f"--child={' '.join(knobs)}", f"--repeat={repeat}")
    except SystemExit as e:
        print(str(e.code), file=sys.stderr)
        t = {"skip": "torch child failed"}
    if "skip" in t:
        return f"| {name} | {gc} | {t['skip']} | |"
    ratio = f"{t['ms'] / float(gc):.2f}" if not gc.startswith("failed") else ""
    return f"| {name} | {gc} | {t['ms']:.2f} | {ratio} |"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--harness", action="append", default=[], help="a harness of complex_fusion/ (default: both)")
    ap.add_argument("--case", action="append", default=[], help="run the cases whose name contains TEXT")
    ap.add_argument("--f32", action="store_true", help="only the f32 cases (f32 files without a --dt knob)")
    ap.add_argument("--not-f32", action="store_true", help="only the cases --f32 leaves out")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--limit", type=int, default=0, help="at most N cases")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        import json
        print(json.dumps(torch_child(args.child.split(), args.repeat)))
        return
    if not (CORPUS / "complex_fusion").is_dir():
        print(f"the complex-fusion corpus is not at {CORPUS / 'complex_fusion'}: nothing to run")
        return
    cases = load_cases(args.harness or HARNESSES)
    cases = [c for c in cases if (not args.case or any(t in c[0] for t in args.case))
             and (not args.f32 or is_f32(c[0])) and (not args.not_f32 or not is_f32(c[0]))]
    cases = cases[:args.limit] if args.limit else cases
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at the start; "
          f"fastest of {args.repeat} runs per contender, ms")
    print("| case | graphc ms | torch ms | torch/gc |\n|---|---|---|---|", flush=True)
    for name, knobs in cases:
        print(row(name, knobs, args.repeat), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
