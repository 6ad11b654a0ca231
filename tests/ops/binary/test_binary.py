"""Binary ops (Add ... SquaredDifference, the comparisons, the logical ops, Select):
schema rules, shape inference, reference values, JSON."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape
from support import inferred_shape, run_single

BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference"]


# ----------------------------------------------------------------------- dtypes
COMPARISONS = ["GreaterEqual", "Greater", "Less", "LessEqual", "Equal", "NotEqual"]


@pytest.mark.parametrize("dt", ["s32", "s64"])
@pytest.mark.parametrize("kind", ["Add", "Subtract", "Multiply"])
def test_arithmetic_accepts_integers(kind, dt):
    """graphc's extension rows: s32 and s64 (index arithmetic), all three ports alike."""
    assert inferred_shape(kind, [(dt, [2]), (dt, [2])], (dt, [-1])) == (2,)
    other = "s64" if dt == "s32" else "s32"
    for ins, out in [((dt, other), dt), ((dt, dt), other), ((dt, "f32"), "f32")]:
        found = f"found src_0={ins[0]}, src_1={ins[1]}, dst={out}"
        with pytest.raises(InvalidDataType, match=rf"(?s)op 0 \({kind}\).*{found}"):
            single_op_graph(kind, [(ins[0], [2]), (ins[1], [2])], [(out, [2])])


@pytest.mark.parametrize("dt", ["s32", "s64"])
@pytest.mark.parametrize("kind", ["Divide", "Maximum", "Minimum", "SquaredDifference"])
def test_integers_only_for_add_subtract_multiply(kind, dt):
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [(dt, [2]), (dt, [2])], [(dt, [2])])


@pytest.mark.parametrize("kind", ["Add", "Subtract", "Multiply", "Divide"])
def test_mixed_precision_rows(kind):
    """oneDNN's schemas: src_0, src_1 and dst each of any floating type (bf16 * bf16 -> f32 is
    training's O * dO, bf16 / f32 -> bf16 a scale kept in f32); never s32 with a float."""
    for a, b, d in [("f32", "bf16", "f32"), ("f16", "f32", "f32"), ("bf16", "bf16", "f32"), ("f16", "f16", "f32"),
                    ("bf16", "f32", "bf16"), ("f32", "f32", "f16"), ("bf16", "f16", "f32")]:
        single_op_graph(kind, [(a, [2]), (b, [2])], [(d, [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("f32", [2]), ("s32", [2])], [("f32", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("s32", [2]), ("s32", [2])], [("f32", [2])])


@pytest.mark.parametrize("kind", ["Maximum", "Minimum", "SquaredDifference"])
def test_same_dtype_only(kind):
    single_op_graph(kind, [("bf16", [2]), ("bf16", [2])], [("bf16", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph(kind, [("f32", [2]), ("bf16", [2])], [("f32", [2])])


@pytest.mark.parametrize("kind", COMPARISONS)
def test_comparison_dtypes(kind):
    for dt in ("f32", "bf16", "f16", "s32", "s64"):
        single_op_graph(kind, [(dt, [2]), (dt, [2])], [("boolean", [2])])
    with pytest.raises(InvalidDataType, match=rf"(?s)op 0 \({kind}\).*dst=f32"):
        single_op_graph(kind, [("f32", [2]), ("f32", [2])], [("f32", [2])])
    with pytest.raises(InvalidDataType, match=r"src_0=f32, src_1=bf16"):
        single_op_graph(kind, [("f32", [2]), ("bf16", [2])], [("boolean", [2])])
    with pytest.raises(InvalidDataType, match=r"src_0=s32, src_1=s64"):
        single_op_graph(kind, [("s32", [2]), ("s64", [2])], [("boolean", [2])])
    with pytest.raises(InvalidDataType, match=r"src_0=boolean"):
        single_op_graph(kind, [("boolean", [2]), ("boolean", [2])], [("boolean", [2])])


@pytest.mark.parametrize("kind", ["LogicalAnd", "LogicalOr"])
def test_logical_dtypes(kind):
    assert inferred_shape(kind, [("boolean", [3, 1]), ("boolean", [4])], ("boolean", [-1, -1])) == (3, 4)
    for ins, out in [(("boolean", "s32"), "boolean"), (("boolean", "boolean"), "s32"), (("f32", "f32"), "boolean")]:
        with pytest.raises(InvalidDataType, match=rf"(?s)op 0 \({kind}\).*found src_0={ins[0]}, src_1={ins[1]}"):
            single_op_graph(kind, [(ins[0], [2]), (ins[1], [2])], [(out, [2])])
    with pytest.raises(InvalidDataType, match=r"(?s)op 0 \(LogicalNot\).*found src=f32"):
        single_op_graph("LogicalNot", [("f32", [2])], [("boolean", [2])])
    assert inferred_shape("LogicalNot", [("boolean", [3, 2])], ("boolean", [-1, -1])) == (3, 2)


def test_select_dtypes():
    single_op_graph("Select", [("boolean", [2]), ("f16", [2]), ("f16", [2])], [("f16", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("Select", [("f32", [2]), ("f32", [2]), ("f32", [2])], [("f32", [2])])
    with pytest.raises(InvalidDataType):
        single_op_graph("Select", [("boolean", [2]), ("f32", [2]), ("bf16", [2])], [("f32", [2])])


# ----------------------------------------------------------------------- shapes
@pytest.mark.parametrize("kind", BINARY)
def test_binary_broadcast_inference(kind):
    assert inferred_shape(kind, [("f32", [2, 1, 4]), ("f32", [3, 1])], ("f32", [-1, -1, -1])) == (2, 3, 4)
    assert inferred_shape(kind, [("f32", [5]), ("f32", [2, 3, 5])], ("f32", [-1, -1, -1])) == (2, 3, 5)
    # unknown dims stay unknown unless the other side fixes them
    assert inferred_shape(kind, [("f32", [-1, 4]), ("f32", [3, -1])], ("f32", [-1, -1])) == (3, 4)
    assert inferred_shape(kind, [("f32", [-1, 4]), ("f32", [1, 4])], ("f32", [-1, -1])) == (-1, 4)


@pytest.mark.parametrize("kind", BINARY + COMPARISONS)
def test_binary_incompatible_shapes(kind):
    out = "boolean" if kind in COMPARISONS else "f32"
    with pytest.raises(InvalidShape):
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [4, 3])], [(out, [-1, -1])])
    with pytest.raises(InvalidShape):  # no broadcasting with auto_broadcast none
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [1, 3])], [(out, [-1, -1])], {"auto_broadcast": "none"})
    with pytest.raises(InvalidShape):
        single_op_graph(kind, [("f32", [3]), ("f32", [1, 3])], [(out, [-1, -1])], {"auto_broadcast": "none"})
    with pytest.raises(InvalidShape):  # declared output disagrees
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [3])], [(out, [3, 3])])
    with pytest.raises(InvalidGraphOp):
        single_op_graph(kind, [("f32", [2, 3]), ("f32", [3])], [(out, [-1, -1])], {"auto_broadcast": "bidirectional"})


def test_auto_broadcast_none_merges_unknown_dims():
    assert inferred_shape("Add", [("f32", [-1, 3]), ("f32", [2, -1])], ("f32", [-1, -1]),
                    {"auto_broadcast": "none"}) == (2, 3)


def test_select_one_way_broadcast():
    ins = [("boolean", [3, 1, 5]), ("f32", [2, 1, 4, 5]), ("f32", [3, 1, 5])]
    assert inferred_shape("Select", ins, ("f32", [-1] * 4)) == (2, 3, 4, 5)
    assert inferred_shape("Select", [("boolean", [4, 5]), ("f32", [2, 3, 4, 5]), ("f32", [1])],
                    ("f32", [-1] * 4)) == (2, 3, 4, 5)
    # a known cond dim fixes an unknown dst dim; an unknown cond dim is fine
    assert inferred_shape("Select", [("boolean", [3, 5]), ("f32", [-1, 5]), ("f32", [1])], ("f32", [-1, -1])) == (3, 5)
    assert inferred_shape("Select", [("boolean", [-1, 5]), ("f32", [3, 5]), ("f32", [1])], ("f32", [-1, -1])) == (3, 5)
    for cond in ([3, 5], [2, 2, 3, 4, 5], [1, 3, 4, 6]):  # doc example, cond rank too big, dim clash
        with pytest.raises(InvalidShape):
            single_op_graph("Select", [("boolean", cond), ("f32", [2, 3, 4, 5]), ("f32", [1])], [("f32", [-1] * 4)])


def test_select_auto_broadcast_none():
    ins = [("boolean", [2, 3]), ("f32", [2, 3]), ("f32", [2, 3])]
    assert inferred_shape("Select", ins, ("f32", [-1, -1]), {"auto_broadcast": "none"}) == (2, 3)
    for bad in (0, 1, 2):
        shapes = [[2, 3], [2, 3], [2, 3]]
        shapes[bad] = [1, 3]
        with pytest.raises(InvalidShape):
            single_op_graph("Select", [(dt, s) for (dt, _), s in zip(ins, shapes)], [("f32", [-1, -1])],
                            {"auto_broadcast": "none"})


# ---------------------------------------------------------------------- values
def test_binary_values():
    a = np.array([[1.0, -2.0, 6.0]], np.float32)
    b = np.array([[2.0], [-4.0]], np.float32)
    expect = {
        "Add": [[3, 0, 8], [-3, -6, 2]],
        "Subtract": [[-1, -4, 4], [5, 2, 10]],
        "Multiply": [[2, -4, 12], [-4, 8, -24]],
        "Divide": [[0.5, -1, 3], [-0.25, 0.5, -1.5]],
        "Maximum": [[2, 2, 6], [1, -2, 6]],
        "Minimum": [[1, -2, 2], [-4, -4, -4]],
        "SquaredDifference": [[1, 16, 16], [25, 4, 100]],
    }
    for kind, e in expect.items():
        (y,) = run_single(kind, [a, b], [("f32", [-1, -1])])
        np.testing.assert_array_equal(y, np.array(e, np.float32), err_msg=kind)


@pytest.mark.parametrize("dt", [np.int32, np.int64])
def test_integer_arithmetic_wraps(dt):
    """As numpy's and torch's integers: exact, wrapping past the type's range."""
    big, small = np.iinfo(dt).max, np.iinfo(dt).min
    a = np.array([big, small, 5, 3 << 20], dt)
    b = np.array([1, -1, -7, 3 << 20], dt)
    name = "s32" if dt == np.int32 else "s64"
    with np.errstate(over="ignore"):
        for kind, want in [("Add", [small, big, -2, 6 << 20]), ("Subtract", [big - 1, small + 1, 12, 0]),
                           ("Multiply", [big, small, -35, np.array(9 << 40).astype(dt)])]:
            (y,) = run_single(kind, [a, b], [(name, [4])])
            assert y.dtype == dt
            np.testing.assert_array_equal(y, np.array(want).astype(dt), err_msg=kind)


def test_s64_beyond_f32_is_exact():
    a = np.array([2 ** 53 + 1, 2 ** 24 + 1], np.int64)
    (y,) = run_single("Add", [a, np.array([2], np.int64)], [("s64", [2])])
    np.testing.assert_array_equal(y, [2 ** 53 + 3, 2 ** 24 + 3])


def test_comparison_values():
    a = np.array([[1, 2, 3]], np.int64)
    b = np.array([[2], [3]], np.int64)
    expect = {"GreaterEqual": [[0, 1, 1], [0, 0, 1]], "Greater": [[0, 0, 1], [0, 0, 0]],
              "Less": [[1, 0, 0], [1, 1, 0]], "LessEqual": [[1, 1, 0], [1, 1, 1]],
              "Equal": [[0, 1, 0], [0, 0, 1]], "NotEqual": [[1, 0, 1], [1, 1, 0]]}
    for kind, e in expect.items():
        (y,) = run_single(kind, [a, b], [("boolean", [2, 3])])
        assert y.dtype == np.bool_
        np.testing.assert_array_equal(y, np.array(e, bool), err_msg=kind)


def test_logical_values():
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    (y,) = run_single("LogicalAnd", [a, b], [("boolean", [4])])
    np.testing.assert_array_equal(y, [True, False, False, False])
    (y,) = run_single("LogicalOr", [a, b], [("boolean", [4])])
    np.testing.assert_array_equal(y, [True, True, True, False])
    (y,) = run_single("LogicalNot", [a], [("boolean", [4])])
    np.testing.assert_array_equal(y, [False, False, True, True])


def test_new_ops_round_trip_through_json():
    """graphc's own ops load and save in oneDNN JSON like any op."""
    from graphc.jsonio import dump_graph, load_graph
    for kind, ins, out in [("Equal", ["s64", "s64"], "boolean"), ("LogicalOr", ["boolean", "boolean"], "boolean"),
                           ("LogicalNot", ["boolean"], "boolean"), ("Multiply", ["s32", "s32"], "s32")]:
        g = single_op_graph(kind, [(dt, [2, 3]) for dt in ins], [(out, [2, 3])])
        d = dump_graph(g)
        assert [op["kind"] for op in d["graph"]] == [kind]
        assert dump_graph(load_graph(d)) == d


def test_select_values():
    cond = np.array([True, False, True])
    a = np.array([[1.0], [2.0]], np.float32)
    b = np.array([10.0, 20.0, 30.0], np.float32)
    (y,) = run_single("Select", [cond, a, b], [("f32", [-1, -1])])
    np.testing.assert_array_equal(y, [[1, 20, 1], [2, 20, 2]])
