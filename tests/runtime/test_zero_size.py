"""Every op family through its zero-size shapes: each bundled spec and corpus
graph with a dim of one input set to 0 (with every dim of the same extent in
every tensor, so that shapes stay consistent, or that dim alone), the outputs'
shapes inferred again.  The schema may refuse such a graph (a GraphcError when
it is loaded); one it accepts must, compiled, give the reference's answer, or
raise a GraphcError: never another exception, and never an answer where the
reference has none (the reference failed on Convolution with C = 0 or N = 0;
MatMul with M = 0 or N = 0 raised ZeroDivisionError).

The suite runs the specs and one corpus graph per op family, dims of one extent
zeroed together; ``GRAPHC_ZERO_SIZE_ALL=1`` runs every corpus graph (f32, bf16,
f16) both ways (about 2,500 graphs, four minutes once the kernel cache is warm)::

    GRAPHC_ZERO_SIZE_ALL=1 .venv/bin/pytest -q -n 2 tests/runtime/test_zero_size.py
"""
import copy
import json
import os
import warnings

import pytest

import graphc
from graphc import reference
from graphc.errors import GraphcError
from graphc.fill import make_inputs

from conftest import OP_CORPUS
from support import SPECS, assert_outputs

ALL = os.environ.get("GRAPHC_ZERO_SIZE_ALL") == "1"
#: one corpus graph (op/f32) per op family: what the suite runs
FAMILY_CASES = ["abs_bwd", "add", "avgpool_bwd", "biasadd_bwd", "bnorm_bwd", "concat_2", "conv_bwd_w_2d", "deconv",
                "dequantize_s8", "dynamicdq", "genindex", "gnorm", "interpolate_bwd", "lnorm_bwd", "logsoftmax_bwd",
                "matmul", "maxpool_bwd", "prelu_bwd", "quantize", "reducesum", "reorder", "rmsnorm", "select",
                "softmax_w_stats", "static_transpose", "typecast"]


def _sources():
    specs = sorted(SPECS.glob("*.json"))
    if not OP_CORPUS.is_dir():
        return specs
    if ALL:
        return specs + sorted(p for dt in ("f32", "bf16", "f16") for p in (OP_CORPUS / dt).glob("*.json"))
    return specs + [OP_CORPUS / "f32" / f"{name}.json" for name in FAMILY_CASES]


def zero_size_variants(d, together_only=True):
    """(name, graph dict) for each input dim of JSON graph ``d`` set to 0: with every
    dim of the same extent (above 1) in every tensor, and (unless ``together_only``)
    alone; strides dropped, output shapes left to inference."""
    seen = set()
    for op in d["graph"]:
        for t in op["inputs"]:
            for axis, extent in enumerate(t["shape"]):
                ways = (["together"] if extent > 1 else []) + ([] if together_only else ["alone"])
                for way in ways:
                    key = (t["id"], axis, way) if way == "alone" else (extent,)
                    if extent <= 0 or key in seen:
                        continue
                    seen.add(key)
                    yield f"tensor {t['id']} dim {axis} ({extent}) {way}", _zeroed(d, t["id"], axis, extent, way)


def _zeroed(d, tid, axis, extent, way):
    out = copy.deepcopy(d)
    for op in out["graph"]:
        for t in op["inputs"] + op["outputs"]:
            t.pop("stride", None)
            t["layout_type"] = "strided"
            if way == "alone" and t["id"] == tid:
                t["shape"][axis] = 0
            elif way == "together":
                t["shape"] = [0 if x == extent else x for x in t["shape"]]
        for t in op["outputs"]:
            t["shape"] = [-1] * len(t["shape"])
    return out


def outcome(d) -> str:
    """How graph ``d`` fares: "refused" by the schema, "raises" a GraphcError
    compiled, or "ok" (the compiled outputs are the reference's); an
    AssertionError for anything else."""
    try:
        g = graphc.load_graph(d)
    except GraphcError:
        return "refused"
    inputs = make_inputs(g, 0)
    try:
        want, why = reference.run(g, inputs), None
    except GraphcError as e:
        want, why = None, e
    try:
        got = graphc.compile(g).run(inputs)
    except GraphcError:
        return "raises"
    assert want is not None, f"compiled answers where the reference raised {why!r}"
    assert_outputs(got, want, {t: g.tensors[t].dtype for t in want})
    return "ok"


@pytest.mark.parametrize("path", _sources(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_zero_size_shapes(path):
    d = json.loads(path.read_text())
    if "graph" not in d:
        pytest.skip("not a graph")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # (the reference's means of nothing)
        for name, variant in zero_size_variants(d, together_only=not ALL):
            try:
                outcome(variant)
            except AssertionError as e:
                raise AssertionError(f"{path.stem}, {name}: {e}") from None
