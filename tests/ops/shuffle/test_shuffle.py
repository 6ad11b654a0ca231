"""Shuffle ops (Concat, StaticReshape, StaticTranspose, Reorder, TypeCast) and
misc ops (GenIndex, Dropout, End, Wildcard): rules, inference, values."""
import ml_dtypes
import numpy as np
import pytest

from graphc.builder import GraphBuilder, single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape, RuntimeFault, Unimplemented
from graphc.op import Op
from graphc.ops.misc import philox4x32_10
from graphc.ops.schema import get_schema
from graphc.reference import run
from support import assert_grad_close, inferred_shape, numeric_grad, run_single


# ----------------------------------------------------------------------- Concat
def test_concat_inference():
    ins = [("f32", [2, 3, 4]), ("f32", [2, 5, 4]), ("f32", [2, 1, 4])]
    assert inferred_shape("Concat", ins, ("f32", [-1] * 3), {"axis": 1}) == (2, 9, 4)
    assert inferred_shape("Concat", ins, ("f32", [-1] * 3), {"axis": -2}) == (2, 9, 4)
    ins = [("f32", [-1, 3]), ("f32", [2, -1])]
    assert inferred_shape("Concat", ins, ("f32", [-1, -1]), {"axis": 1}) == (2, -1)
    assert inferred_shape("Concat", [("f32", [4, 3])], ("f32", [-1, -1]), {"axis": 0}) == (4, 3)


def test_concat_rules():
    with pytest.raises(InvalidShape):
        single_op_graph("Concat", [("f32", [2, 3]), ("f32", [2, 3, 1])], [("f32", [-1, -1])], {"axis": 0})
    with pytest.raises(InvalidShape):
        single_op_graph("Concat", [("f32", [2, 3]), ("f32", [4, 4])], [("f32", [-1, -1])], {"axis": 0})
    with pytest.raises(InvalidGraphOp):
        single_op_graph("Concat", [("f32", [2, 3]), ("f32", [2, 3])], [("f32", [-1, -1])], {"axis": 2})
    with pytest.raises(InvalidGraphOp):
        single_op_graph("Concat", [("f32", [2, 3])], [("f32", [-1, -1])])
    with pytest.raises(InvalidGraphOp):
        single_op_graph("Concat", [], [("f32", [-1, -1])], {"axis": 0})
    with pytest.raises(InvalidDataType):
        single_op_graph("Concat", [("f32", [2, 3]), ("bf16", [2, 3])], [("f32", [-1, -1])], {"axis": 0})
    with pytest.raises(InvalidDataType):
        single_op_graph("Concat", [("s32", [2, 3]), ("s32", [2, 3])], [("s32", [-1, -1])], {"axis": 0})


def test_concat_values():
    a = np.array([[1, 2]], np.float32)
    b = np.array([[3], [4]], np.float32).T
    (y,) = run_single("Concat", [a, b, a], [("f32", [-1, -1])], {"axis": 1})
    np.testing.assert_array_equal(y, [[1, 2, 3, 4, 1, 2]])


# ---------------------------------------------------------------- StaticReshape
@pytest.mark.parametrize("shape,special_zero,src,dst", [
    ([4, -1], False, [2, 3, 4], (4, 6)),
    ([0, -1], True, [2, 3, 4], (2, 12)),
    ([0, 0, 2, 2], True, [2, 3, 4], (2, 3, 2, 2)),
    ([0, 5], False, [0, 7], (0, 5)),           # 0 is a zero-size dim without special_zero
    ([-1], False, [-1, 3], (-1,)),             # unknown src dims: -1 stays unknown
    ([0, 3], True, [-1, 3], (-1, 3)),          # the copied dim is unknown
    ([6, 2], False, [-1, 4], (6, 2)),
])
def test_reshape_inference(shape, special_zero, src, dst):
    assert inferred_shape("StaticReshape", [("f32", src)], ("f32", [-1] * len(dst)),
                    {"shape": shape, "special_zero": special_zero}) == dst


@pytest.mark.parametrize("shape,special_zero,src,error", [
    ([-1, -1], False, [2, 3], InvalidGraphOp),   # more than one -1
    ([2, -2], False, [2, 2], InvalidGraphOp),
    ([5, 2], False, [2, 3], InvalidShape),       # element count differs
    ([4, -1], False, [2, 3], InvalidShape),      # -1 cannot make it whole
    ([0, -1], False, [2, 3], InvalidShape),      # a 0-size dim next to -1: ambiguous
    ([1, 0, 6], True, [2, 3], InvalidShape),     # 0 at an index src lacks
])
def test_reshape_rules(shape, special_zero, src, error):
    with pytest.raises(error):
        single_op_graph("StaticReshape", [("f32", src)], [("f32", [-1] * len(shape))],
                        {"shape": shape, "special_zero": special_zero})


def test_reshape_requires_both_attributes():
    with pytest.raises(InvalidGraphOp):
        single_op_graph("StaticReshape", [("f32", [6])], [("f32", [-1, -1])], {"shape": [2, 3]})


def test_reshape_values_with_unknown_dims():
    b = GraphBuilder()
    x = b.tensor("f32", [-1, 3])
    b.op("StaticReshape", [x], [("f32", [-1, -1])], {"shape": [-1, 2], "special_zero": False})
    g = b.finalize()
    src = np.arange(12, dtype=np.float32).reshape(4, 3)
    (y,) = run(g, {x.id: src}).values()
    np.testing.assert_array_equal(y, np.arange(12, dtype=np.float32).reshape(6, 2))


# -------------------------------------------------------------- StaticTranspose
def test_transpose():
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert inferred_shape("StaticTranspose", [("f32", [2, -1, 4])], ("f32", [-1] * 3),
                          {"order": [2, 0, 1]}) == (4, 2, -1)
    (y,) = run_single("StaticTranspose", [src], [("f32", [-1] * 3)], {"order": [-1, 0, -2]})
    assert y.shape == (4, 2, 3)
    assert y[3, 1, 2] == src[1, 2, 3]
    for order in ([0, 1], [0, 1, 1], [0, 1, 3], [0, 1, -4], []):
        with pytest.raises(InvalidGraphOp):
            single_op_graph("StaticTranspose", [("f32", [2, 3, 4])], [("f32", [-1] * 3)], {"order": order})


# ------------------------------------------------------------- Reorder, TypeCast
def test_reorder_changes_strides_not_values():
    b = GraphBuilder()
    x = b.tensor("bf16", [2, 3, 4])
    y = b.tensor("bf16", [2, 3, 4], strides=[12, 1, 3])
    b.graph.add_op(Op(0, "Reorder", [x], [y]))
    g = b.finalize()
    src = np.arange(24, dtype=np.float32).reshape(2, 3, 4).astype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(run(g, {x.id: src})[y.id], src)
    with pytest.raises(InvalidShape):
        single_op_graph("Reorder", [("f32", [2, 3])], [("f32", [3, 2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("Reorder", [("f32", [2, 3])], [("bf16", [2, 3])])


def test_typecast_rules():
    for src, dst in (("f32", "f32"), ("bf16", "f16"), ("bf16", "bf16"), ("s32", "f32")):
        with pytest.raises(InvalidDataType):
            single_op_graph("TypeCast", [(src, [2])], [(dst, [2])])
    with pytest.raises(InvalidShape):
        single_op_graph("TypeCast", [("f32", [2])], [("bf16", [3])])


def test_typecast_rounds_to_nearest_even():
    # ties between two bf16 (7 fraction bits) and two f16 (10 fraction bits) neighbours
    x = np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11, 1 + 3 * 2 ** -11], np.float32)
    (bf,) = run_single("TypeCast", [x], [("bf16", [4])])
    (hf,) = run_single("TypeCast", [x], [("f16", [4])])
    np.testing.assert_array_equal(bf.view(np.uint16), [0x3F80, 0x3F82, 0x3F80, 0x3F80])
    np.testing.assert_array_equal(hf.view(np.uint16), [0x3C04, 0x3C0C, 0x3C00, 0x3C02])
    (back,) = run_single("TypeCast", [bf], [("f32", [4])])
    np.testing.assert_array_equal(back, [1, 1 + 2 ** -6, 1, 1])


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
