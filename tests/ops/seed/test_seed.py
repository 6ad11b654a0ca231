"""Validation rules, shape inference and data faults of the seed ops (AddBackward,
Embedding, EmbeddingBackward, SwiGlu, SwiGluGrad); the seed documents' specs (the distributed
LayerNorm's too) load and run."""
import numpy as np
import pytest

import graphc
from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault
from graphc.builder import single_op_graph
from graphc.reference import run
from graphc.dtypes import DataType
from support import SPECS, inferred_shape


# ------------------------------------------------------------------ AddBackward
def test_add_bw_binds_outputs_per_required_flags():
    g = single_op_graph("AddBackward", [("f32", [2, 3]), ("f32", [2, 3]), ("f32", [3])], [("f32", [-1])],
              {"are_required_outputs": [False, True]})
    op = g.ops[0]
    assert op.output_names == ["diff_src_1"]
    assert op.outputs[0].shape == (3,)


def test_add_bw_infers_src_shapes_with_unknown_dims():
    g = single_op_graph("AddBackward", [("f32", [2, -1, 4]), ("f32", [-1, 1, 4]), ("f32", [-1, 1])],
              [("f32", [-1, -1, -1]), ("f32", [-1, -1])])
    assert [t.shape for t in g.ops[0].outputs] == [(-1, 1, 4), (-1, 1)]


@pytest.mark.parametrize("attrs, n_out", [
    ({}, 1),                                                   # default [true, true] needs two outputs
    ({"are_required_outputs": [True, False]}, 2),
    ({"are_required_outputs": [False, True]}, 2),
])
def test_add_bw_output_count_must_match_required(attrs, n_out):
    with pytest.raises(InvalidGraphOp, match="wrong number of outputs"):
        single_op_graph("AddBackward", [("f32", [2, 3])] * 3, [("f32", [2, 3])] * n_out, attrs)


@pytest.mark.parametrize("flags", [[False, False], [True], [True, True, False]])
def test_add_bw_required_outputs_value(flags):
    with pytest.raises(InvalidGraphOp, match="are_required_outputs"):
        single_op_graph("AddBackward", [("f32", [2, 3])] * 3, [("f32", [2, 3])], {"are_required_outputs": flags})


@pytest.mark.parametrize("attrs, n_out", [({"are_required_outputs": [True, True]}, 2),
                                           ({"are_required_outputs": [False, True]}, 1)])
def test_add_bw_diff_src_1_needs_src_1(attrs, n_out):
    with pytest.raises(InvalidGraphOp, match="src_1 is absent"):
        single_op_graph("AddBackward", [("f32", [2, 3])] * 2, [("f32", [2, 3])] * n_out, attrs)


def test_add_bw_scalar_operand():
    g = single_op_graph("AddBackward", [("f32", [2, 3])] * 2, [("f32", [-1, -1])],
                        {"are_required_outputs": [True, False]})
    assert g.ops[0].outputs[0].shape == (2, 3)


@pytest.mark.parametrize("shapes", [
    ([2, 3], [2, 3], [4]),            # srcs not broadcast-compatible
    ([2, 3, 4], [3, 4], [1, 4]),      # diff_dst bigger than the broadcast shape
    ([3, 4], [3, 4], [2, 3, 4]),      # diff_dst smaller than the broadcast shape
    ([2, 3], [2, 4], None),           # scalar case: diff_dst must be src_0's shape
])
def test_add_bw_shapes(shapes):
    ins = [("f32", s) for s in shapes if s is not None]
    outs = [("f32", [-1] * len(s)) for s in shapes[1:] if s is not None]
    attrs = None if shapes[2] is not None else {"are_required_outputs": [True, False]}
    with pytest.raises(InvalidShape):
        single_op_graph("AddBackward", ins, outs, attrs)


def test_add_bw_no_broadcast_mode():
    with pytest.raises(InvalidShape):
        single_op_graph("AddBackward", [("f32", [2, 3]), ("f32", [2, 3]), ("f32", [1, 3])],
                        [("f32", [2, 3]), ("f32", [1, 3])], {"auto_broadcast": "none"})


@pytest.mark.parametrize("dts", [("f32", "f32", "bf16"), ("c64", "f32", "f32"), ("s32", "s32", "s32")])
def test_add_bw_dtypes(dts):
    with pytest.raises(InvalidDataType):
        single_op_graph("AddBackward", [(d, [2, 3]) for d in dts], [(dts[0], [2, 3])] * 2)


# ------------------------------------------------------------------ Embedding
def emb_fwd(idx=("s32", [2, 3]), w=("f32", [5, 4]), out=("f32", [-1, -1, -1])):
    return single_op_graph("Embedding", [idx, w], [out])


@pytest.mark.parametrize("idx, out", [([2, 3], (2, 3, 4)), ([], (4,)), ([7], (7, 4)), ([0, 3], (0, 3, 4)),
                                      ([2, -1], (2, -1, 4))])
def test_embedding_infers_indices_shape_then_dim(idx, out):
    g = emb_fwd(idx=("s64", idx), out=("f32", [-1] * (len(idx) + 1)))
    assert g.ops[0].outputs[0].shape == out


@pytest.mark.parametrize("kw, found", [
    ({"idx": ("f32", [2, 3])}, "indices=f32"),
    ({"idx": ("s8", [2, 3])}, "indices=s8"),
    ({"idx": ("boolean", [2, 3])}, "indices=boolean"),
    ({"out": ("bf16", [2, 3, 4])}, "dst=bf16"),                            # dst not weight's dtype
    ({"w": ("s32", [5, 4]), "out": ("s32", [2, 3, 4])}, "weight=s32"),     # integer weight
])
def test_embedding_dtypes_name_op_and_port(kw, found):
    with pytest.raises(InvalidDataType) as e:
        emb_fwd(**kw)
    assert "op 0 (Embedding)" in str(e.value) and found in str(e.value), str(e.value)


@pytest.mark.parametrize("kw, where", [
    ({"w": ("f32", [5, 4, 1])}, "port 'weight'"),
    ({"w": ("f32", [20])}, "port 'weight'"),
    ({"out": ("f32", [2, 3, 5])}, "(dst, tensor 2)"),                   # not weight's dim
    ({"out": ("f32", [3, 2, 4])}, "(dst, tensor 2)"),                   # not the indices' shape
    ({"out": ("f32", [6, 4])}, "(dst, tensor 2)"),                      # flattened: the rank differs
])
def test_embedding_shapes_name_op_and_port(kw, where):
    with pytest.raises(InvalidShape) as e:
        emb_fwd(**kw)
    assert "op 0 (Embedding)" in str(e.value) and where in str(e.value), str(e.value)


def test_embedding_reference_takes_rows_by_index():
    w = np.arange(20, dtype=np.float32).reshape(5, 4)
    idx = np.array([[4, 0, 4], [1, 1, 3]], np.int64)
    (dst,) = run(emb_fwd(idx=("s64", [2, 3])), {0: idx, 1: w}).values()
    assert dst.dtype == np.float32 and dst.shape == (2, 3, 4)
    assert np.array_equal(dst, w[idx])


@pytest.mark.parametrize("it, bad, pos", [("s32", 5, [1, 0]), ("s32", -2, [0, 2]), ("s64", 2**40, [1, 2]),
                                          ("u32", 2**31, [0, 0])])
def test_embedding_index_out_of_range_is_a_runtime_fault(it, bad, pos):
    idx = np.array([[0, 1, 2], [3, 4, 4]], DataType(it).np)
    idx[tuple(pos)] = bad
    with pytest.raises(RuntimeFault) as e:
        run(emb_fwd(idx=(it, [2, 3])), {0: idx, 1: np.zeros((5, 4), np.float32)})
    text = str(e.value)
    assert "op 0 (Embedding)" in text and "port 'indices'" in text and f"found {bad}" in text and str(pos) in text


def test_embedding_json_round_trip():
    g = graphc.load_graph(SPECS / "embedding.json")
    again = graphc.load_graph(graphc.dump_graph(g))
    (a,), (b,) = g.ops.values(), again.ops.values()
    assert (a.kind, a.name, b.kind, b.name) == ("Embedding", "embedding", "Embedding", "embedding")
    assert [(t.dtype, t.shape) for t in a.inputs + a.outputs] == [(t.dtype, t.shape) for t in b.inputs + b.outputs]
    assert [str(t.dtype) for t in b.inputs + b.outputs] == ["s64", "bf16", "bf16"]


# ------------------------------------------------------------ EmbeddingBackward
def emb(idx=("s32", [2, 3]), w=("f32", [5, 4]), dy=("f32", [2, 3, 4]), out=("f32", [-1, -1]), attrs=None):
    return single_op_graph("EmbeddingBackward", [idx, w, dy], [out], attrs)


def test_embedding_bw_infers_weight_shape_and_accepts_flattened_diff_dst():
    g = emb(dy=("f32", [1, 1, 6, 4]))
    assert g.ops[0].outputs[0].shape == (5, 4)


@pytest.mark.parametrize("dt", ["f32", "s8", "u8", "boolean"])
def test_embedding_bw_index_dtype(dt):
    with pytest.raises(InvalidDataType):
        emb(idx=(dt, [2, 3]))


@pytest.mark.parametrize("kw", [
    {"dy": ("bf16", [2, 3, 4])},                                  # weight and diff_dst differ
    {"out": ("bf16", [5, 4])},                                    # diff_weight not weight's dtype
    {"out": ("f32", [5, 4]), "attrs": {"dtype": "bf16"}},         # diff_weight not the dtype attribute
    {"w": ("s32", [5, 4]), "dy": ("s32", [2, 3, 4]), "out": ("s32", [5, 4])},
])
def test_embedding_bw_dtypes(kw):
    with pytest.raises(InvalidDataType):
        emb(**kw)


def test_embedding_bw_dtype_attr_sets_output_dtype():
    g = emb(w=("bf16", [5, 4]), dy=("bf16", [2, 3, 4]), out=("f32", [5, 4]), attrs={"dtype": "f32"})
    assert g.ops[0].outputs[0].dtype.value == "f32"


@pytest.mark.parametrize("dy", [[2, 3, 5], [1, 1, 5, 4], [2, 4, 4], [24]])
def test_embedding_bw_diff_dst_shape(dy):
    with pytest.raises(InvalidShape):
        emb(dy=("f32", dy))


def test_embedding_bw_weight_rank():
    with pytest.raises(InvalidShape):
        emb(w=("f32", [5, 4, 1]))


@pytest.mark.parametrize("pad", [-1, 5, 7])
def test_embedding_bw_padding_idx_range(pad):
    with pytest.raises(InvalidGraphOp, match="padding_idx"):
        emb(attrs={"padding_idx": pad})


@pytest.mark.parametrize("bad, pos", [(5, [1, 0]), (-2, [0, 2])])
def test_embedding_bw_index_out_of_range_is_a_runtime_fault(bad, pos):
    idx = np.array([[0, 1, 2], [3, 4, 4]], np.int32)
    idx[tuple(pos)] = bad
    g = emb()
    with pytest.raises(RuntimeFault) as e:
        run(g, {0: idx, 1: np.zeros((5, 4), np.float32), 2: np.ones((2, 3, 4), np.float32)})
    text = str(e.value)
    assert "EmbeddingBackward" in text and str(bad) in text and str(pos) in text


# --------------------------------------------------------------------- SwiGlu
def test_swiglu_infers_halved_dim():
    assert inferred_shape("SwiGlu", [("f32", [2, 6, 3])], ("f32", [-1, -1, -1]), {"dim": 1}) == (2, 3, 3)
    assert inferred_shape("SwiGlu", [("f32", [2, -1])], ("f32", [-1, -1])) == (2, -1)
    g = single_op_graph("SwiGluGrad", [("f32", [2, 3]), ("f32", [-1, -1])], [("f32", [-1, -1])], {"dim": 0})
    assert g.ops[0].outputs[0].shape == (4, 3)


@pytest.mark.parametrize("kind, ins", [
    ("SwiGlu", [[2, 5]]),
    ("SwiGluGrad", [[2, 2], [2, 5]]),
])
def test_swiglu_odd_split_dim(kind, ins):
    with pytest.raises(InvalidShape, match="even"):
        single_op_graph(kind, [("f32", s) for s in ins], [("f32", [-1, -1])])


@pytest.mark.parametrize("kind, ins", [
    ("SwiGlu", [[0, 4]]),
    ("SwiGluGrad", [[0, 2], [0, 4]]),
    ("SwiGluGrad", [[3, 0], [3, 4]]),
])
def test_swiglu_empty_tensor(kind, ins):
    with pytest.raises(InvalidShape, match="empty"):
        single_op_graph(kind, [("f32", s) for s in ins], [("f32", [-1, -1])])


def test_swiglu_rank_0():
    with pytest.raises(InvalidShape, match="rank"):
        single_op_graph("SwiGlu", [("f32", [])], [("f32", [])])


@pytest.mark.parametrize("dim", [2, -3])
def test_swiglu_dim_out_of_range(dim):
    with pytest.raises(InvalidGraphOp, match="dim"):
        single_op_graph("SwiGlu", [("f32", [2, 4])], [("f32", [-1, -1])], {"dim": dim})


@pytest.mark.parametrize("dy", [[2, 4], [4, 2], [2, 2, 1]])
def test_swiglu_grad_diff_dst_shape(dy):
    with pytest.raises(InvalidShape):
        single_op_graph("SwiGluGrad", [("f32", dy), ("f32", [2, 4])], [("f32", [-1, -1])])


def test_swiglu_dtypes():
    with pytest.raises(InvalidDataType):
        single_op_graph("SwiGluGrad", [("bf16", [2, 2]), ("f32", [2, 4])], [("f32", [2, 4])])


# ----------------------------------------------------------------------- specs
@pytest.mark.parametrize("name", ["add_bw", "add_bw_scalar", "embedding", "embedding_bw", "swiglu", "swiglu_grad",
                                  "layernorm_pre_all_gather", "all_gather", "layernorm_post_all_gather",
                                  "layernorm_distributed"])
def test_spec_loads_and_runs(name):
    g = graphc.load_graph(SPECS / f"{name}.json")
    rng = np.random.default_rng(0)
    inputs = {}
    for tid in g.input_ports:
        t = g.tensors[tid]
        if t.dtype.is_int:
            inputs[tid] = rng.integers(0, 10, t.shape).astype(t.dtype.np)
        else:
            inputs[tid] = rng.uniform(0.5, 1.5, t.shape).astype(t.dtype.np)  # positive: valid M2 in the stats
    out = run(g, inputs)
    assert set(out) == set(g.output_ports)
    for tid, v in out.items():
        assert v.shape == g.tensors[tid].shape and np.isfinite(v.astype(np.float64)).all()
