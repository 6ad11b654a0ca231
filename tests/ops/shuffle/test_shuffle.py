"""Shuffle ops (Concat, StaticReshape, StaticTranspose, Reorder, TypeCast): rules,
inference, values."""
import ml_dtypes
import numpy as np
import pytest

from graphc.builder import GraphBuilder, single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape
from graphc.op import Op
from graphc.reference import run
from support import inferred_shape, run_single


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
    for src, dst in (("f32", "f32"), ("bf16", "f16"), ("bf16", "bf16"), ("s32", "bf16"), ("f32", "s64"),
                     ("boolean", "f16"), ("s8", "f32")):
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
