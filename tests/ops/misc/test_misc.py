"""Misc ops (GenIndex, Dropout, End, Wildcard): rules, inference, values."""
import numpy as np
import pytest

from graphc.builder import GraphBuilder, single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault, Unimplemented
from graphc.ops.misc import philox4x32_10
from graphc.ops.schema import get_schema
from graphc.reference import run
from support import assert_grad_close, numeric_grad, run_single


# --------------------------------------------------------------------- GenIndex
def test_genindex():
    src = np.zeros((2, 3, 4), np.float32)
    (y,) = run_single("GenIndex", [src], [("s32", [-1] * 3)], {"axis": -2})
    assert y.dtype == np.int32 and y.shape == (2, 3, 4)
    np.testing.assert_array_equal(y[1, :, 2], [0, 1, 2])
    np.testing.assert_array_equal(y[:, 2, :], np.full((2, 4), 2))
    with pytest.raises(InvalidGraphOp):
        single_op_graph("GenIndex", [("f32", [2, 3])], [("s32", [-1, -1])], {"axis": 2})
    with pytest.raises(InvalidDataType):
        single_op_graph("GenIndex", [("f32", [2, 3])], [("f32", [-1, -1])], {"axis": 0})


# ---------------------------------------------------------------------- Dropout
def test_philox_known_answers():
    # Random123's kat_vectors for philox4x32_10
    cases = [((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
             ((0xffffffff,) * 4, (0xffffffff,) * 2, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
             ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
              (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for ctr, key, expect in cases:
        assert tuple(int(w) for w in philox4x32_10(ctr, key)) == expect


def dropout(src, seed, offset, p, outs=2):
    arrays = [src, np.array([seed], np.int32), np.array([offset], np.int32), np.array([p], np.float32)]
    return run_single("Dropout", arrays, [("f32", list(src.shape)), ("u8", list(src.shape))][:outs])


def test_dropout_mask_and_scale():
    src = np.random.default_rng(0).standard_normal((64, 80)).astype(np.float32)
    dst, mask = dropout(src, 7, 3, 0.25)
    assert mask.dtype == np.uint8 and set(np.unique(mask)) <= {0, 1}
    np.testing.assert_allclose(dst, np.where(mask == 1, src / np.float32(0.75), 0), rtol=1e-7)
    assert abs(mask.mean() - 0.75) < 0.02
    (only_dst,) = dropout(src, 7, 3, 0.25, outs=1)
    np.testing.assert_array_equal(only_dst, dst)


def test_dropout_is_deterministic_in_seed_and_offset():
    src = np.ones((16, 16), np.float32)
    _, m = dropout(src, 1, 0, 0.5)
    np.testing.assert_array_equal(dropout(src, 1, 0, 0.5)[1], m)
    assert not np.array_equal(dropout(src, 2, 0, 0.5)[1], m)
    assert not np.array_equal(dropout(src, 1, 1, 0.5)[1], m)


def test_dropout_edge_probabilities():
    src = np.arange(1, 9, dtype=np.float32)
    np.testing.assert_array_equal(dropout(src, 5, 0, 0.0)[0], src)
    np.testing.assert_array_equal(dropout(src, 5, 0, 1.0)[0], np.zeros(8))
    for p in (-0.1, 1.5):
        with pytest.raises(RuntimeFault):
            dropout(src, 5, 0, p)


def test_dropout_backward_is_dropout_of_diff_dst():
    """d/dsrc sum(dy * dropout(src)) equals dropout(dy) with the same seed and offset."""
    rng = np.random.default_rng(1)
    x, dy = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    g = single_op_graph("Dropout", [("f32", [3, 5]), ("s32", [1]), ("s32", [1]), ("f32", [1])], [("f32", [3, 5])])
    op = g.ops[0]
    seed, offset, p = np.array([11]), np.array([4]), np.array([0.4])
    f = lambda v: op.schema.reference(op, v, seed, offset, p)[0]  # noqa: E731
    assert_grad_close(f(dy), numeric_grad(f, x, dy), what="Dropout")


def test_dropout_rules():
    ok = [("f32", [4]), ("s32", [1]), ("u32", []), ("f32", [1])]
    single_op_graph("Dropout", ok, [("f32", [4]), ("u8", [4])])
    with pytest.raises(InvalidDataType):  # float seed
        single_op_graph("Dropout", [ok[0], ("f32", [1]), ok[2], ok[3]], [("f32", [4])])
    with pytest.raises(InvalidDataType):  # mask must be u8
        single_op_graph("Dropout", ok, [("f32", [4]), ("s32", [4])])
    with pytest.raises(InvalidDataType):
        single_op_graph("Dropout", [ok[0], ok[1], ok[2], ("bf16", [1])], [("f32", [4])])
    with pytest.raises(InvalidShape):
        single_op_graph("Dropout", [ok[0], ("s32", [2]), ok[2], ok[3]], [("f32", [4])])
    with pytest.raises(InvalidShape):
        single_op_graph("Dropout", ok, [("f32", [5])])
    with pytest.raises(InvalidGraphOp):
        single_op_graph("Dropout", ok[:3], [("f32", [4])])


# ------------------------------------------------------------------ End, Wildcard
def test_end_marks_an_output():
    assert not get_schema("End").executable
    b = GraphBuilder()
    x = b.tensor("f32", [3])
    (y,) = b.op("ReLU", [x])
    assert b.op("End", [y], []) == []
    g = b.finalize()
    assert g.output_ports == [y.id]
    out = run(g, {x.id: np.array([-1, 0, 2], np.float32)})
    np.testing.assert_array_equal(out[y.id], [0, 0, 2])
    with pytest.raises(InvalidGraphOp):
        single_op_graph("End", [("f32", [3])], [("f32", [3])])
    with pytest.raises(InvalidDataType):
        single_op_graph("End", [("s32", [3])], [])


def test_wildcard_takes_anything_but_does_not_run():
    assert not get_schema("Wildcard").executable
    g = single_op_graph("Wildcard", [("s8", [2]), ("f32", [3, 3]), ("boolean", [])], [("u8", [7]), ("f16", [1])])
    assert [t.shape for t in g.ops[0].outputs] == [(7,), (1,)]
    single_op_graph("Wildcard", [], [("f32", [1])])
    single_op_graph("Wildcard", [("f32", [1])], [])
    with pytest.raises(Unimplemented):
        run_single("Wildcard", [np.ones(2, np.float32)], [("f32", [2])])
