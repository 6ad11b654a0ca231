"""Validation rules, shape inference and data faults of the distributed LayerNorm ops
(LayerNormPreAllGather, AllGather, LayerNormPostAllGather)."""
import numpy as np
import pytest

import graphc
from graphc import InvalidDataType, InvalidGraphOp, InvalidShape, LogicalTensor, Op, RuntimeFault
from graphc.builder import single_op_graph
from support import run_single


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
