"""Attention as frameworks dump it (oneDNN's complex-fusion corpus): the ops on the scores in
any order (GPT's Select -> Divide -> Add, DistilBERT's Divide -> Select with the scores in
the else branch, Gemma-2's soft-capping Multiply -> Tanh -> Multiply), TypeCasts around the
probabilities' Quantize -> Dequantize (int8-bf16), a Reorder after the output's transpose:
each one partition of the one ``sdpa`` pattern, equal to the reference."""
import json

import pytest

from conftest import SHARED
from graphc.builder import GraphBuilder
from graphc.codegen.rules import can_lower
from graphc.jsonio import load_graph_file
from graphc.passes.catalog.attention import sdpa
from graphc.passes.legality import accept
from graphc.passes.pattern import match_all
from support.sdpa import check_mqa_rows, check_sdpa, mqa_rows_graph

N, H, SQ, SKV, D = 2, 3, 40, 72, 16


def framework_sdpa(steps, dt="f32", probs=(), out=("transpose", "reorder"), jax=False, sq=SQ, pv_attrs=None):
    """Q [N, H, SQ, D] @ K [N, H, D, SKV] -> ``steps`` on the scores -> SoftMax -> ``probs``
    (("typecast", dtype) or ("quant", dtype): a per-tensor Quantize -> Dequantize) -> @ V ->
    ``out`` ("transpose" to [N, SQ, H, D], "reorder", ("typecast", dtype)); ``jax``: JAX's
    O^T = V^T [N, H, D, SKV] @ (P transposed, reordered), transposed to [N, SQ, H, D].  Steps: "mul",
    "div" (each by a scalar of its own), "add" (mask [N, 1, 1, SKV]), "select" (Select(mask,
    scores, fill)), "select_else" (Select(mask, fill, scores)), "tanh"; ``pv_attrs``: the second
    MatMul's attributes."""
    b = GraphBuilder()
    sshape = [N, H, sq, SKV]
    q, k, v = b.tensor(dt, [N, H, sq, D]), b.tensor(dt, [N, H, D, SKV]), b.tensor(dt, [N, H, D, SKV] if jax else
                                                                                    [N, H, SKV, D])
    ids = {"q": q.id, "k": k.id, "v": v.id}
    x = b.op("MatMul", [q, k], out=[(dt, sshape)])[0]
    for step in steps:
        if step in ("mul", "div"):
            f = b.tensor(dt, [] if "scale" in ids else [1])   # the first set by sdpa_inputs, others rank 0
            ids.setdefault("scale", f.id)
            x = b.op("Multiply" if step == "mul" else "Divide", [x, f], out=[(dt, sshape)])[0]
        elif step == "add":
            x = b.op("Add", [x, b.tensor(dt, [N, 1, 1, SKV])], out=[(dt, sshape)])[0]
        elif step in ("select", "select_else"):
            m, fill = b.tensor("boolean", [N, 1, 1, SKV]), b.tensor(dt, [1])
            ids["fill"] = fill.id
            x = b.op("Select", [m, x, fill] if step == "select" else [m, fill, x], out=[(dt, sshape)])[0]
        else:
            x = b.op("Tanh", [x], out=[(dt, sshape)])[0]
    p = b.op("SoftMax", [x], out=[(dt, sshape)], attrs={"axis": -1, "mode": "inf_as_zero"})[0]
    for kind, pdt in probs:
        if kind == "typecast":
            p = b.op("TypeCast", [p], out=[(pdt, sshape)])[0]
        else:
            attrs = {"qtype": "per_tensor", "scales": [1 / 255], "zps": [0]}
            p = b.op("Dequantize", [b.op("Quantize", [p], out=[(pdt, sshape)], attrs=attrs)[0]],
                     out=[("f32", sshape)], attrs=attrs)[0]
    if jax:
        p = b.op("StaticTranspose", [p], out=[(p.dtype, [N, H, SKV, sq])], attrs={"order": [0, 1, 3, 2]})[0]
        p = b.op("Reorder", [p], out=[(p.dtype, [N, H, SKV, sq])])[0]
        o = b.op("MatMul", [v, p], out=[(dt, [N, H, D, sq])], attrs=pv_attrs or {})[0]
    else:
        o = b.op("MatMul", [p, v], out=[(dt, [N, H, sq, D])], attrs=pv_attrs or {})[0]
    for step in out:
        if step == "transpose":
            o = b.op("StaticTranspose", [o], out=[(o.dtype, [N, sq, H, D])],
                     attrs={"order": [0, 3, 1, 2] if jax else [0, 2, 1, 3]})[0]
        elif step == "reorder":
            o = b.op("Reorder", [o], out=[(o.dtype, list(o.shape))])[0]
        else:
            o = b.op("TypeCast", [o], out=[(step[1], list(o.shape))])[0]
    ids["out"] = o.id
    return b.finalize(), ids


@pytest.mark.parametrize("steps", [
    ["select", "div", "add"],               # GPT-2 (MHA-GPT-inf)
    ["div", "select_else"],                 # DistilBERT
    ["mul", "tanh", "mul", "select"],       # Gemma-2's soft-capping
    ["add", "mul"],                         # the mask before the scale
    ["div", "add", "select_else"],
], ids="-".join)
def test_score_ops_in_any_order(steps):
    g, ids = framework_sdpa(steps)
    check_sdpa(g, ids)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_jax_transposed_probabilities(dt):
    """JAX-MHA: O^T = V^T @ P^T (the probabilities transposed and reordered into the second
    MatMul's input 1), the output transposed back: the kernel computes O = P @ V and stores
    it transposed."""
    g, ids = framework_sdpa(["div", "add"], dt, jax=True)
    check_sdpa(g, ids)


def test_transposed_probabilities_with_transpose_b_are_refused():
    """V^T @ (P^T)^T (the second MatMul transposing the transposed probabilities back) is
    no attention the kernel computes: legality says why."""
    g, _ = framework_sdpa(["div"], jax=True, sq=SKV, pv_attrs={"transpose_b": True})
    rejected = []
    assert not match_all(g, [sdpa()], accept(g, can_lower, rejected=rejected))
    assert rejected and "transposed into the second MatMul" in rejected[0][1]


def test_bf16_probabilities_cast_around_their_quantization():
    """int8-bf16 attention (MHA-GPT-inf-int8): SoftMax bf16 -> TypeCast f32 -> Quantize u8 ->
    Dequantize -> TypeCast bf16 -> @V, the output transposed, reordered, cast to f32."""
    g, ids = framework_sdpa(["div", "add"], "bf16", probs=[("typecast", "f32"), ("quant", "u8"),
                                                          ("typecast", "bf16")],
                            out=("transpose", "reorder", ("typecast", "f32")))
    check_sdpa(g, ids)


def test_each_round_of_score_ops_binds_its_own_scale():
    """Two Multiply steps read two different scale tensors (a repeated step's outside
    tensor is bound afresh in each round)."""
    g, ids = framework_sdpa(["mul", "mul"])
    scales = {o.inputs[1].id for o in g.ops.values() if o.kind == "Multiply"}
    assert len(scales) == 2
    check_sdpa(g, ids)


@pytest.mark.parametrize("dt,m", [("f32", 40), ("f32", 150), ("bf16", 70)])
def test_jax_mqa_contracts_the_softmax_rows(dt, m):
    """JAX-MQA: the scores split by heads before the SoftMax and merged back after it, and
    O = V @ P summed over the queries: one ``attention_rows`` kernel (blocks of whole rows;
    several blocks of queries summed into the output when m > 64)."""
    check_mqa_rows(mqa_rows_graph(dt, m=m))


def test_scores_split_by_heads_into_p_at_v_are_refused():
    """Scores split by heads (the views of JAX-MQA) into an ordinary O = P @ V: the rows
    kernel does not take them and legality says why."""
    b = GraphBuilder()
    q, k, v = b.tensor("f32", [2, 8, 4]), b.tensor("f32", [2, 4, 3 * 6]), b.tensor("f32", [2, 3, 6, 5])
    s = b.op("MatMul", [q, k], out=[("f32", [2, 8, 18])])[0]
    s = b.op("StaticReshape", [s], out=[("f32", [2, 8, 3, 6])], attrs={"shape": [2, 8, 3, 6], "special_zero": False})[0]
    s = b.op("StaticTranspose", [s], out=[("f32", [2, 3, 8, 6])], attrs={"order": [0, 2, 1, 3]})[0]
    p = b.op("SoftMax", [s], out=[("f32", [2, 3, 8, 6])], attrs={"axis": -1})[0]
    b.op("MatMul", [p, v], out=[("f32", [2, 3, 8, 5])])
    g = b.finalize()
    rejected = []
    assert not match_all(g, [sdpa()], accept(g, can_lower, rejected=rejected))
    assert rejected and "split by heads" in rejected[0][1]


# -- the corpus's files, as dumped ---------------------------------------------------------------
MHA = SHARED / "onednn" / "benchdnn" / "inputs" / "graph" / "complex_fusion" / "mha"
FORMS = ["JAX-MHA-inf-fp32", "JAX-MQA-inf-fp32", "MHA-bert_large-inf-fp32-bs1", "MHA-GPT-inf-fp32-bs1", "MHA-distill_bert-inf-fp32-bs1", "gemma2-bf16-f32",
         "MHA-GPT-inf-int8-bs1", "MHA-distill_bert-inf-int8-bs1", "sdpa-plain-wo-scale-int8-bs1",
         "MHA-bert_large-inf-int8-bs1"]


@pytest.mark.skipif(not MHA.is_dir(), reason=f"benchdnn corpus not found at {MHA} (set GRAPHC_SHARED)")
@pytest.mark.parametrize("name", FORMS)
def test_corpus_forms_are_one_attention_partition(name):
    g = load_graph_file(MHA / f"{name}.json")
    parts = g.get_partitions("fusion")
    assert [(p.pattern, p.plan.shape) for p in parts] == [("sdpa", "attention_rows" if "MQA" in name else "attention")], \
        [(p.pattern, [o.kind for o in p.ops]) for p in parts]
    assert len(parts[0].ops) == len(json.loads((MHA / f"{name}.json").read_text())["graph"])
