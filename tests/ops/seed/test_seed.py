"""Validation rules, shape inference and data faults of the seed ops
(AddBackward, EmbeddingBackward, SwiGlu, SwiGluGrad) and the distributed
LayerNorm ops (LayerNormPreAllGather, AllGather, LayerNormPostAllGather)."""
import numpy as np
import pytest

import graphc
from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, LogicalTensor, Op, RuntimeFault
from graphc.builder import single_op_graph
from graphc.reference import run
from support import SPECS, inferred_shape, run_single


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


# ------------------------------------------------------------ distributed LayerNorm
def post(src=("f32", [2, 8]), stats=("f32", [2, 4]), extra=(), attrs=None, out=None):
    return single_op_graph("LayerNormPostAllGather", [src, stats, *extra], [out or (src[0], [-1, -1])], attrs)


def test_pre_all_gather_shape():
    g = single_op_graph("LayerNormPreAllGather", [("bf16", [3, 5, 8])], [("f32", [-1, -1, -1])])
    assert g.ops[0].outputs[0].shape == (3, 5, 2)


@pytest.mark.parametrize("shape", [[], [3, 0]])
def test_pre_all_gather_needs_rows(shape):
    with pytest.raises(InvalidShape):
        single_op_graph("LayerNormPreAllGather", [("f32", shape)], [("f32", [-1] * max(len(shape), 1))])


def test_pre_all_gather_stats_dtype():
    with pytest.raises(InvalidDataType):
        single_op_graph("LayerNormPreAllGather", [("f32", [3, 8])], [("bf16", [3, 2])])


@pytest.mark.parametrize("stats", [[2, 3], [2, 0], [3, 4], [2, 2, 2]])
def test_post_all_gather_stats_shape(stats):
    with pytest.raises(InvalidShape, match="stats"):
        post(stats=("f32", stats))


def test_post_all_gather_gamma_without_beta():
    with pytest.raises(InvalidGraphOp, match="both or neither"):
        post(extra=[("f32", [8])])


@pytest.mark.parametrize("gamma", [[4], [8, 1]])
def test_post_all_gather_gamma_shape(gamma):
    with pytest.raises(InvalidShape, match="gamma"):
        post(extra=[("f32", gamma), ("f32", [8])])


@pytest.mark.parametrize("kw", [
    {"src": ("bf16", [2, 8]), "stats": ("f16", [2, 4])},
    {"src": ("bf16", [2, 8]), "extra": [("f16", [8]), ("f16", [8])]},
    {"src": ("f32", [2, 8]), "out": ("bf16", [2, 8])},
])
def test_post_all_gather_dtypes(kw):
    with pytest.raises(InvalidDataType):
        post(**kw)


def test_post_all_gather_epsilon_range():
    with pytest.raises(InvalidGraphOp, match="epsilon"):
        post(attrs={"epsilon": -1.0})


@pytest.mark.parametrize("out_dim, ok", [(-1, True), (4, True), (12, True), (6, False), (0, False)])
def test_all_gather_output_dim(out_dim, ok):
    def make():
        return single_op_graph("AllGather", [("f32", [4, 3])], [("f32", [out_dim, 3])], {"axis": 0})
    if ok:
        assert make().ops[0].outputs[0].shape == (out_dim, 3)
    else:
        with pytest.raises(InvalidShape, match="multiple"):
            make()


def test_all_gather_output_dim_checked_at_finalize():
    g = graphc.Graph()
    x, stats = LogicalTensor(0, "f32", [2, 4, 8]), LogicalTensor(1, "f32", [-1, -1, -1])
    g.add_op(Op(0, "AllGather", [stats], [LogicalTensor(2, "f32", [-1, -1, 3])]))  # added before stats' producer
    g.add_op(Op(1, "LayerNormPreAllGather", [x], [stats]))
    with pytest.raises(InvalidShape, match="multiple"):
        g.finalize()


def test_all_gather_axis_out_of_range():
    with pytest.raises(InvalidGraphOp, match="axis"):
        single_op_graph("AllGather", [("f32", [4, 3])], [("f32", [-1, -1])], {"axis": 2})


class FakeComm:
    """An mpi4py-like communicator of ``size`` members: member r holds src + 100 r."""

    def __init__(self, size):
        self.size = size

    def Get_size(self):
        return self.size

    def allgather(self, x):
        return [x + 100 * r for r in range(self.size)]


def test_all_gather_concatenates_in_rank_order():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (y,) = run_single("AllGather", [x], [("f32", [2, -1])], {"axis": 1}, comm=FakeComm(3))
    np.testing.assert_array_equal(y, np.concatenate([x, x + 100, x + 200], axis=1))
    (y,) = run_single("AllGather", [x], [("f32", [-1, 3])], {"axis": 0})
    np.testing.assert_array_equal(y, x)


def test_all_gather_group_size_mismatch_is_a_runtime_fault():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(RuntimeFault, match="group size"):
        run_single("AllGather", [x], [("f32", [2, 3])], comm=FakeComm(2))
    with pytest.raises(RuntimeFault, match="group size"):
        run_single("AllGather", [x], [("f32", [2, 6])])


# ----------------------------------------------------------------------- specs
@pytest.mark.parametrize("name", ["add_bw", "add_bw_scalar", "embedding_bw", "swiglu", "swiglu_grad",
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
