"""oneDNN's benchdnn and graphc side by side on the same benchdnn --graph cases.

    BENCHDNN=/path/to/benchdnn python benchmarks/bench_onednn.py --batch op/harness_f32_ci
        [--batch pattern/harness_f32_ci ...] [--set compute] [--set anchors] [--line TEXT] [--limit N]

Each harness line (knobs and ``--case=FILE``, read from GRAPHC_SHARED/onednn/benchdnn/
inputs/graph, where both programs run) is timed in performance mode by
``$BENCHDNN --graph --mode=P <line>`` and by ``python -m graphc bench --mode=P <line>``,
each in a process of its own, one after the other; the minimum time of each
("total perf: min(ms)") is compared: ratio = oneDNN / graphc, above 1 when graphc
is faster, and their geometric mean over the lines both timed.  The machine's
load average is printed with every row.

``--set`` names a list of lines kept here: ``compute`` (convolutions, deconvolutions,
pooling, interpolation, MatMul and their fusions; the attention, MLP and
binary-MatMul graphs of complex_fusion) and ``anchors`` (memory-bound
normalization, softmax, reduction and binary cases); each set gets its own
geomean.

BENCHDNN may name several builds joined by ':' (an older build that cannot read a
newer case, then a newer one): each line is timed by the first that times it, and
the table says which (#1, #2).

Without a benchdnn (BENCHDNN unset or not executable) the script says so and
prints graphc's times alone: build oneDNN from its sources (cmake with
``-DDNNL_BUILD_TESTS=ON``) and point BENCHDNN at ``build/tests/benchdnn/benchdnn``.
"""
from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
from pathlib import Path

from children import load_average

CORPUS = Path(os.environ.get("GRAPHC_SHARED", "/work/shared")) / "onednn/benchdnn/inputs/graph"
PERF = re.compile(r"total perf: min\(ms\):([0-9.eE+-]+)")

#: the cases of each set; each runs as the first line of the corpus' harness files that
#: names it (its knobs: shapes, attributes, expected partitions), else as --case alone
SETS = {
    "compute": [
        "op/f32/conv_2d.json", "op/f32/conv_3d.json", "op/f32/conv_bwd_d_2d.json", "op/f32/conv_bwd_w_2d.json",
        "op/f32/deconv.json", "op/f32/deconv_bwd_d.json", "op/f32/deconv_bwd_w.json", "op/f32/matmul.json",
        "op/f32/avgpool.json", "op/f32/maxpool.json", "op/f32/interpolate.json",
        "pattern/f32/conv_bias_post_ops_fusion.json", "pattern/f32/conv_bias_post_ops_chain_fusion.json",
        "pattern/f32/conv_bias_sum_fusion.json", "pattern/f32/conv_bias_swish_fusion.json",
        "pattern/f32/conv_post_ops_fusion.json", "pattern/f32/conv_depthwise_fusion_cpu.json",
        "pattern/f32/conv_bias_relu_depthwise_bias_relu_fusion_cpu.json",
        "pattern/f32/convtranspose_post_ops_fusion.json", "pattern/f32/maxpool_chain_fusion.json",
        "pattern/f32/avgpool_3d_chain_fusion.json", "pattern/f32/interpolate_post_ops_chain_fusion.json",
        "pattern/f32/matmul_post_ops_chain_fusion.json", "pattern/f32/matmul_bias_post_ops_chain_fusion.json",
        "pattern/bf16/bf16_matmul_bias_post_ops_chain_fusion.json",
        "complex_fusion/mlp/gated-mlp-f32.json", "complex_fusion/mlp/gated-mlp-f16-f32.json",
        "complex_fusion/mha/MHA-bert_large-inf-fp32-bs1.json", "complex_fusion/mha/MHA-GPT-inf-fp32-bs1.json",
        "complex_fusion/mha/MHA-stable_diffusion-inf-fp32-bs1.json", "complex_fusion/mha/GQA-f32.json",
        "complex_fusion/mha/sdpa-plain-training-forward-bf16-f32.json",
        "complex_fusion/bmb/binary-matmul-binary-f32.json"],
    "anchors": [
        "op/f32/softmax.json", "op/f32/softmax_bwd.json", "op/f32/reducesum.json", "op/f32/lnorm.json",
        "op/f32/lnorm_bwd.json", "op/f32/bnorm.json", "op/f32/bnorm_bwd.json", "op/f32/gnorm.json",
        "op/f32/add.json", "pattern/f32/lnorm_gelu.json", "pattern/f32/bn_bwd_relu_bwd_fusion.json",
        "pattern/f32/binary_post_ops_chain_fusion.json"],
}


def line_for(case: str) -> str:
    """The first line of the corpus' harness files that runs ``case`` (those of the case's
    data type first, then the CI ones)."""
    dtype = case.split("/")[1] if case.count("/") > 1 else ""
    harnesses = sorted(CORPUS.glob("*/harness_*"),
                       key=lambda p: (dtype not in p.name, not p.name.endswith("_ci"), str(p)))
    for path in harnesses:
        for line in harness_lines(str(path.relative_to(CORPUS))):
            if line.split()[-1] == f"--case={case}":
                return line
    return f"--reset --case={case}"


def harness_lines(batch: str) -> list[str]:
    """The problem lines of a harness file (comments and blank lines left out)."""
    text = (CORPUS / batch).read_text()
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def min_ms(cmd: list[str]) -> float | str:
    """The 'total perf: min(ms)' a benchdnn-style run prints, or why there is none."""
    p = subprocess.run(cmd, cwd=CORPUS, capture_output=True, text=True)
    m = PERF.search(p.stdout)
    if p.returncode or m is None:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-1:] or ["no output"]
        return f"rc {p.returncode}: {tail[0][:80]}"
    if float(m.group(1)) <= 0:   # (every problem skipped: e.g. a data type this CPU lacks)
        return "skipped"
    return float(m.group(1))


def benchdnns() -> list[str]:
    """The benchdnn programs in $BENCHDNN (one path, or several joined by ':'), runnable ones only."""
    paths = [p for p in os.environ.get("BENCHDNN", "").split(os.pathsep) if p]
    return [p for p in paths if os.access(p, os.X_OK)]


def onednn_ms(programs: list[str], knobs: list[str]) -> tuple[float | str, str]:
    """(min ms, the program that timed it) from the first of ``programs`` that times
    the line (an older build may not read a newer case), else (why not, "")."""
    why = "-"
    for i, program in enumerate(programs):
        got = min_ms([program, "--graph", "--mode=P", *knobs])
        if isinstance(got, float):
            return got, f"#{i + 1}"
        why = got
    return why, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", action="append", default=[], help="a harness file under inputs/graph")
    ap.add_argument("--set", action="append", default=[], choices=sorted(SETS), help="a set of lines kept here")
    ap.add_argument("--line", action="append", default=[], help="one harness line (knobs and --case=...)")
    ap.add_argument("--limit", type=int, default=0, help="at most N lines per harness")
    args = ap.parse_args()
    groups = [(name, [line_for(c) for c in SETS[name]]) for name in args.set]
    for batch in args.batch:
        got = harness_lines(batch)
        groups.append((batch, got[:args.limit] if args.limit else got))
    if args.line:
        groups.append(("lines", list(args.line)))
    if not groups:
        ap.error("give --set, --batch or --line")
    programs = benchdnns()
    if not programs:
        print("oneDNN's benchdnn not found (set BENCHDNN to the benchdnn binary of a oneDNN build): "
              "graphc's times alone")
    for i, program in enumerate(programs):
        print(f"oneDNN #{i + 1}: {program}")
    print(f"load average at the start: {load_average()}")
    summaries = []
    for name, lines in groups:
        print(f"\n### {name}\n\n| case | oneDNN min ms | graphc min ms | oneDNN / graphc | load |\n"
              "|---|---|---|---|---|")
        ratios = []
        for line in lines:
            knobs = [k for k in line.split() if k != "--reset"]
            gc = min_ms([sys.executable, "-m", "graphc", "bench", "--mode=P", *knobs])
            ref, which = onednn_ms(programs, knobs)
            ratio = ""
            if isinstance(gc, float) and isinstance(ref, float) and gc > 0:
                ratios.append(ref / gc)
                ratio = f"{ref / gc:.2f}"
            fmt = (lambda v: f"{v:.4f}" if isinstance(v, float) else v)
            shown_ref = f"{fmt(ref)} ({which})" if which and len(programs) > 1 else fmt(ref)
            print(f"| {' '.join(knobs)} | {shown_ref} | {fmt(gc)} | {ratio} | {load_average()} |", flush=True)
        if ratios:
            summaries.append((name, ratios))
    print(f"\nload average at the end: {load_average()}")
    for name, ratios in summaries:
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        print(f"{name}: geomean oneDNN / graphc over {len(ratios)} lines {geo:.2f}; "
              f"graphc ahead on {sum(r > 1 for r in ratios)}, behind on {sum(r < 1 for r in ratios)}; "
              f"lowest {min(ratios):.2f}")

if __name__ == "__main__":
    main()
