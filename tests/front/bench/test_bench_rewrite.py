"""graphc bench: knobs applied to graph JSONs."""
import json

import pytest

from graphc.bench.knobs import parse
from graphc.bench.rewrite import attr_value, build_graph
from graphc.errors import GraphcError, InvalidArguments
from graphc.types import DataType, PropertyType


def graph(corpus, name, *knobs):
    doc = json.loads((corpus / "f32" / name).read_text())
    case = parse(list(knobs) + [f"--case={name}"]).cases[0]
    assert case.error is None
    return build_graph(doc, case.values)


def lt(g, tid):
    return g.tensors[tid]


def test_no_knobs_keeps_the_file(corpus):
    g = graph(corpus, "reorder.json")
    assert lt(g, 0).strides == (1, 2, 384, 128) and lt(g, 1).strides == (576, 9, 3, 1)


def test_new_input_shape_is_dense_and_propagates(corpus):
    g = graph(corpus, "abs.json", "--in-shapes=0:2x3x5")
    assert lt(g, 0).shape == (2, 3, 5) and lt(g, 0).is_dense
    assert lt(g, 1).shape == (2, 3, 5)


@pytest.mark.parametrize("knob, strides", [("--in-shapes=0:2x3x4x5*acdb", (60, 1, 15, 3)),
                                           ("--in-shapes=0:2x3x4x5*dcba", (1, 2, 6, 24)),
                                           ("--in-shapes=0:2x3x4x5*60x20x5x1", (60, 20, 5, 1))])
def test_strides_from_tag_or_numbers(corpus, knob, strides):
    assert lt(graph(corpus, "abs.json", knob), 0).strides == strides


def test_strides_only_keeps_shape_and_unchanged_outputs_keep_their_layout(corpus):
    g = graph(corpus, "reorder.json", "--in-shapes=0:*abcd")
    assert lt(g, 0).shape == (2, 64, 3, 3) and lt(g, 0).strides == (576, 9, 3, 1)
    assert lt(g, 1).strides == (576, 9, 3, 1)


def test_rank_changes(corpus):
    g = graph(corpus, "bnorm_fwd_d.json", "--in-shapes=0:2x192")
    assert lt(g, 5).shape == (2, 192)
    assert lt(graph(corpus, "add.json", "--in-shapes=0:-"), 2).shape == (1, 1, 1, 1)
    assert lt(graph(corpus, "abs.json", "--in-shapes=0:0"), 1).shape == (0,)


def test_attribute_change_reinfers_outputs(corpus):
    assert lt(graph(corpus, "reducesum.json"), 1).shape == (1, 1, 150, 150)
    assert lt(graph(corpus, "reducesum.json", "--op-attrs=0:keep_dims:0"), 1).shape == (1, 150, 150)
    g = graph(corpus, "reducesum.json", "--in-shapes=0:2x3x4x5", "--op-attrs=0:axes:1x2*keep_dims:false")
    assert lt(g, 1).shape == (2, 5)
    assert g.ops[0].attr("axes") == (1, 2)


@pytest.mark.parametrize("typ, text, value", [("s64", "-3", -3), ("f32", "0.5", 0.5), ("bool", "1", True),
                                              ("bool", "false", False), ("bool", "True", True),
                                              ("string", "NXC", "NXC"), ("s64[]", "1x2x3", [1, 2, 3]),
                                              ("s64[]", "-1", [-1]), ("f32[]", "0.5x2", [0.5, 2.0]),
                                              ("bool[]", "1x0", [True, False])])
def test_attr_values_follow_the_schema_type(typ, text, value):
    assert attr_value(typ, text) == value


@pytest.mark.parametrize("typ, text", [("s64", "1.5"), ("f32", "x"), ("bool", "2"), ("s64[]", "1xy")])
def test_attr_values_that_do_not_fit_the_type(typ, text):
    with pytest.raises(ValueError):
        attr_value(typ, text)


@pytest.mark.parametrize("knob", ["--op-attrs=0:alpha:abc", "--op-attrs=0:no_such_attr:1",
                                  "--op-attrs=0:alpha:-1", "--op-attrs=5:alpha:1"])
def test_bad_attributes_are_invalid(corpus, knob):
    with pytest.raises(GraphcError):
        graph(corpus, "elu.json", knob)


def test_global_dt_turns_f32_into_dt(corpus):
    g = graph(corpus, "bnorm_fwd_d.json", "--dt=bf16")
    assert {t.dtype for t in g.tensors.values()} == {DataType.bf16}


def test_global_dt_keeps_statistics_f32_where_the_op_needs_it(corpus):
    g = graph(corpus, "bnorm_fwd_d.json", "--dt=f16")
    op = g.ops[0]
    assert op.input("src").dtype == DataType.f16 and op.output("dst").dtype == DataType.f16
    assert op.input("gamma").dtype == DataType.f32 and op.input("mean").dtype == DataType.f32


def test_dt_per_tensor(corpus):
    g = graph(corpus, "add.json", "--dt=0:bf16+2:f32")
    assert (lt(g, 0).dtype, lt(g, 1).dtype, lt(g, 2).dtype) == (DataType.bf16, DataType.f32, DataType.f32)
    with pytest.raises(InvalidArguments):
        graph(corpus, "add.json", "--dt=9:bf16")


def test_tensor_property(corpus):
    assert lt(graph(corpus, "add.json", "--tensor-property=1:constant"), 1).property_type == PropertyType.constant
    with pytest.raises(InvalidArguments):
        graph(corpus, "add.json", "--tensor-property=9:constant")


def test_op_kind(corpus):
    assert graph(corpus, "add.json", "--op-kind=0:Divide").ops[0].kind == "Divide"
    with pytest.raises(InvalidArguments, match="eltwise"):
        graph(corpus, "add.json", "--op-kind=0:MatMul")
    with pytest.raises(InvalidArguments, match="eltwise"):
        graph(corpus, "matmul.json", "--op-kind=0:Add")


def test_mb_rewrites_data_inputs_only_and_keeps_layout(corpus):
    g = graph(corpus, "conv_2d.json", "--mb=4")
    assert lt(g, 0).shape == (4, 32, 28, 28) and lt(g, 0).strides == (25088, 1, 896, 32)
    assert lt(g, 1).shape == (128, 32, 2, 2)
    assert lt(g, 2).shape == (4, 128, 14, 14)


def tiny_chain():
    """ReLU(0) -> 1; Add(1, 2) -> 3; Add(4, 5) -> 6."""
    def t(i, shape=(2, 3)):
        return {"id": i, "dtype": "f32", "shape": list(shape), "stride": [], "layout_type": "strided",
                "property_type": "undef"}
    return {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "graph": [
        {"id": 0, "name": "relu", "kind": "ReLU", "attrs": {}, "inputs": [t(0)], "outputs": [t(1)]},
        {"id": 1, "name": "add", "kind": "Add", "attrs": {}, "inputs": [t(1), t(2)], "outputs": [t(3)]},
        {"id": 2, "name": "add2", "kind": "Add", "attrs": {}, "inputs": [t(4), t(5)], "outputs": [t(6)]}]}


def chain_graph(*knobs):
    return build_graph(tiny_chain(), parse(list(knobs) + ["--case=x.json"]).cases[0].values)


def test_undef_removes_a_unary_op():
    g = chain_graph("--op-kind=0:undef")
    assert sorted(op.kind for op in g.ops.values()) == ["Add", "Add"]
    assert g.ops[1].inputs[0].id == 0
    assert sorted(g.input_ports) == [0, 2, 4, 5]


def test_undef_passes_the_produced_input_of_a_binary_op():
    g = chain_graph("--op-kind=1:undef")
    assert sorted(op.id for op in g.ops.values()) == [0, 2]
    assert 1 in g.output_ports and 3 not in g.tensors


def test_undef_binary_op_needs_exactly_one_produced_input():
    with pytest.raises(InvalidArguments, match="passes through"):
        chain_graph("--op-kind=2:undef")


def test_attr_fpmath_sets_the_graph_mode(corpus):
    assert graph(corpus, "matmul.json").get_fpmath_mode() == ("strict", False)
    assert graph(corpus, "matmul.json", "--attr-fpmath=bf16").get_fpmath_mode() == ("bf16", False)
    assert graph(corpus, "matmul.json", "--attr-fpmath=tf32:true").get_fpmath_mode() == ("tf32", True)
    doc = tiny_chain()
    doc["fpmath_mode"], doc["fpmath_mode_apply_to_int"] = "f16", "true"
    values = parse(["--case=x.json"]).cases[0].values
    assert build_graph(doc, values).get_fpmath_mode() == ("f16", True)   # unset: the file's
    values = parse(["--attr-fpmath=strict", "--case=x.json"]).cases[0].values
    assert build_graph(doc, values).get_fpmath_mode() == ("strict", False)


# ------------------------------------------------ files read as benchdnn reads them
def values(*knobs):
    return parse(list(knobs) + ["--case=x.json"]).cases[0].values


def test_a_file_dumped_on_a_gpu_engine_runs_on_the_cpu():
    doc = tiny_chain()
    doc["engine_kind"] = "gpu"
    assert build_graph(doc, values()).engine_kind == "cpu"


def test_strides_of_another_rank_are_dense():
    # benchdnn's strides2memory_tag takes strides whose rank differs from the shape's
    # as the plain tag; oneDNN's unknown marker means the same
    doc = tiny_chain()
    doc["graph"][0]["outputs"][0]["stride"] = [1]
    doc["graph"][1]["inputs"][0]["stride"] = [1]
    doc["graph"][1]["inputs"][1]["stride"] = [3, 1, 1]
    doc["graph"][1]["outputs"][0]["stride"] = [-2 ** 63]
    for g in (build_graph(doc, values()), build_graph(doc, values("--in-shapes=0:2x3*ba"))):
        assert all(g.tensors[i].is_dense for i in (1, 2, 3))


def test_declared_input_ports_no_op_consumes_are_left_out():
    doc = tiny_chain()
    doc["input_ports"] = [0, 2, 4, 5, 9]
    assert sorted(build_graph(doc, values()).input_ports) == [0, 2, 4, 5]


def quant_doc(kind="Dequantize", dt="s8", qtype="per_channel", axis=1, scales=(1, 2, 0.5, 4), zps=(0, 1, 2, 3)):
    """One static (de)quantization op of a 2x4x3 tensor 0 into tensor 1."""
    def t(i, dtype):
        return {"id": i, "dtype": dtype, "shape": [2, 4, 3], "stride": [], "layout_type": "strided",
                "property_type": "undef"}
    attrs = {"qtype": {"type": "string", "value": qtype}, "axis": {"type": "s64", "value": axis},
             "scales": {"type": "f32[]", "value": list(scales)}}
    if zps is not None:
        attrs["zps"] = {"type": "s64[]", "value": list(zps)}
    ins, outs = (dt, "f32") if kind == "Dequantize" else ("f32", dt)
    return {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "graph": [
        {"id": 7, "name": "q", "kind": kind, "attrs": attrs, "inputs": [t(0, ins)], "outputs": [t(1, outs)]}]}


def params(g):
    op = g.ops[7]
    return list(op.attr("scales")), op.attr("zps") and list(op.attr("zps"))


@pytest.mark.parametrize("kind", ["Dequantize", "Quantize"])
def test_per_channel_parameters_follow_the_channel_count(kind):
    # benchdnn's quantized_graph_rewrite: scales repeated in turn, int8 zero points
    # padded with zeros, both as many as the channels after --in-shapes
    doc = quant_doc(kind)
    assert params(build_graph(doc, values())) == ([1, 2, 0.5, 4], [0, 1, 2, 3])
    assert params(build_graph(doc, values("--in-shapes=0:2x6x3"))) == ([1, 2, 0.5, 4, 1, 2], [0, 1, 2, 3, 0, 0])
    assert params(build_graph(doc, values("--in-shapes=0:2x2x3"))) == ([1, 2], [0, 1])
    assert params(build_graph(doc, values("--in-shapes=0:5x2"))) == ([1, 2], [0, 1])   # rank 2: axis 1 still
    assert doc["graph"][0]["attrs"]["scales"]["value"] == [1, 2, 0.5, 4]   # the document is left as it was


def test_per_channel_axis_counts_from_the_end_and_files_are_fitted_too():
    g = build_graph(quant_doc(axis=-1, scales=(3, 5), zps=(1,)), values())   # written for another count
    assert params(g) == ([3, 5, 3], [1, 0, 0])
    assert params(build_graph(quant_doc(axis=-1), values("--in-shapes=0:2x4x5"))) == ([1, 2, 0.5, 4, 1],
                                                                                   [0, 1, 2, 3, 0])


def test_per_channel_f8_has_its_scales_fitted_without_zero_points():
    g = build_graph(quant_doc(dt="f8_e4m3", zps=None), values("--in-shapes=0:2x5x3"))
    assert params(g) == ([1, 2, 0.5, 4, 1], None)


def test_per_channel_int8_without_zero_points_and_per_tensor_are_left():
    # as benchdnn: an int8 op without zps is not rewritten (and so does not fit)
    with pytest.raises(GraphcError, match="wrong shape"):
        build_graph(quant_doc(zps=None), values("--in-shapes=0:2x5x3"))
    g = build_graph(quant_doc(qtype="per_tensor", scales=(0.5,), zps=(2,)), values("--in-shapes=0:2x5x3"))
    assert params(g) == ([0.5], [2])


def group_doc():
    """DynamicDequantize per group (1x4 blocks) of an 8x8 s8 tensor 0, scales 1, zps 2."""
    def t(i, dtype, shape):
        return {"id": i, "dtype": dtype, "shape": list(shape), "stride": [], "layout_type": "strided",
                "property_type": "undef"}
    attrs = {"qtype": {"type": "string", "value": "per_group"}, "axis": {"type": "s64", "value": 1},
             "group_shape": {"type": "s64[]", "value": [1, 4]}}
    return {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "graph": [
        {"id": 7, "name": "dq", "kind": "DynamicDequantize", "attrs": attrs,
         "inputs": [t(0, "s8", (8, 8)), t(1, "f32", (8, 2)), t(2, "s8", (8, 2))], "outputs": [t(3, "f32", (8, 8))]}]}


def test_per_group_shapes_follow_the_group_shape_and_back():
    # benchdnn's rewrite_linked_shape_and_attr
    g = build_graph(group_doc(), values("--in-shapes=0:8x16+1:8x2+2:8x2"))
    assert g.ops[7].attr("group_shape") == (1, 8)
    g = build_graph(group_doc(), values("--op-attrs=7:group_shape:2x2"))
    assert g.tensors[1].shape == (4, 4) and g.tensors[2].shape == (4, 4)
    g = build_graph(group_doc(), values("--in-shapes=0:8x16+1:4x4+2:4x4", "--op-attrs=7:group_shape:2x4"))
    assert g.ops[7].attr("group_shape") == (2, 4) and g.tensors[1].shape == (4, 4)
    with pytest.raises(GraphcError):   # both given and not in step: the op says so
        build_graph(group_doc(), values("--in-shapes=0:8x16", "--op-attrs=7:group_shape:2x2"))
