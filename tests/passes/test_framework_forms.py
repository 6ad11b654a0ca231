"""The forms frameworks dump around a compute op (oneDNN's pattern and
complex-fusion corpus), each one partition through the catalog's patterns:
constant weights quantized in the graph, TypeCasts among the post-ops,
smooth-quant, int8 sums, Select and Dropout after a MatMul, int8 pools with a
view, depthwise weights reshaped around their quantization, gated MLPs of int4
weights joined by any binary op, binary-MatMul-binary, a one-element frame.
Their compiled results: tests/codegen/test_framework_forms_compiled.py."""
import json

import pytest

import graphc
from conftest import SHARED
from graphc.builder import GraphBuilder
from support.fusion import dequantize
from support.framework_forms import FORMS

GRAPH_CORPUS = SHARED / "onednn" / "benchdnn" / "inputs" / "graph"


@pytest.mark.parametrize("name", sorted(FORMS))
def test_one_partition(name):
    build, pattern = FORMS[name]
    g, _ = build()
    parts = g.get_partitions()
    assert [p.pattern for p in parts] == [pattern], [(p.pattern, [o.kind for o in p.ops]) for p in parts]
    assert len(parts[0].ops) == len(g.ops)


def test_constant_ops_fold_apart_unless_a_gemm_reads_them():
    """A constant op stays a partition of its own (computed once by the constant
    tensor cache) unless it converts the weights a MatMul or convolution packs."""
    b = GraphBuilder()
    w = b.tensor("s8", [8, 4], property_type="constant")
    dw = dequantize(b, w, {"qtype": "per_tensor", "scales": [0.5], "zps": [0]})
    e = b.op("Exp", [dw])[0]
    b.op("Add", [e, b.tensor("f32", [8, 4])])
    parts = b.finalize().get_partitions()
    assert [([o.kind for o in p.ops], p.constant) for p in parts] == \
        [(["Dequantize"], True), (["Exp"], True), (["Add"], False)]


def test_int8_sum_of_a_shared_dequantize_leaves_it_apart():
    """The int8 sum's Dequantize joins the partition only when nothing else reads it."""
    g, _ = FORMS["int8_sum"][0]()
    b = GraphBuilder()
    x, other = b.tensor("u8", [6, 16]), b.tensor("s8", [6, 8])
    dx = dequantize(b, x, {"qtype": "per_tensor", "scales": [0.25], "zps": [2]})
    do = dequantize(b, other, {"qtype": "per_tensor", "scales": [0.25], "zps": [0]})
    y = b.op("MatMul", [dx, b.tensor("f32", [16, 8])], out=[("f32", [6, 8])])[0]
    b.op("Add", [y, do])
    b.op("ReLU", [do])
    kinds = sorted(tuple(o.kind for o in p.ops) for p in b.finalize().get_partitions())
    assert ("Dequantize", "MatMul", "Add") in kinds and ("Dequantize", "ReLU") in kinds, kinds


# ------------------------------------------------------------------ the corpus itself
#: files of the pattern and complex-fusion corpus that take no knob, one partition each
CORPUS_FILES = [
    "pattern/int8/int8_bf16_matmul.json", "pattern/int8/int8_conv_post_ops_int8_add_fusion.json",
    "pattern/int8/int8_bf16_matmul_mul_w_smooth_quant_fusion.json",
    "pattern/int8/int8_bf16_matmul_tc_add_quant_fusion.json", "pattern/int8/int8_bf16_matmul_sum_add_mul_relu.json",
    "pattern/int8/int8_avgpool_transpose_fusion.json", "pattern/int8/int8_depthwise_conv_fusion.json",
    "pattern/int8/int8_bf16_conv_add_fusion.json", "pattern/f8/f8_bf16_matmul_sum_add_mul_relu.json",
    "pattern/f8/f8_conv_post_ops_int8_add_fusion.json", "pattern/f32/matmul_select.json",
    "pattern/f32/matmul_dropout.json", "pattern/bf16/bf16_matmul_post_ops_chain_fusion.json",
    "complex_fusion/bmb/binary-matmul-binary-f32.json", "complex_fusion/bmb/binary-matmul-binary-bf16.json",
    "complex_fusion/mlp/gated-mlp-int4.json",
]


@pytest.mark.parametrize("path", CORPUS_FILES)
def test_corpus_file_is_one_partition(path):
    f = GRAPH_CORPUS / path
    if not f.is_file():
        pytest.skip(f"benchdnn corpus not found at {GRAPH_CORPUS} (set GRAPHC_SHARED)")
    g = graphc.load_graph(json.loads(f.read_text()))
    parts = g.get_partitions()
    assert len(parts) == 1, [(p.pattern, [o.kind for o in p.ops]) for p in parts]
