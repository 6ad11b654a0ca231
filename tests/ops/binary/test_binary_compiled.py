"""Generated kernels of the binary ops (Add ... GreaterEqual, Select) against graphc's
numpy reference: every op in every dtype its schema allows, broadcasting on either
side, rank 0 and 1, non-dense strides, NaN and saturation edge cases, and the corpus
graphs."""
import numpy as np
import pytest

import graphc
from graphc.fill import make_inputs

from support import check_compiled, corpus_files, one_op

BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference", "GreaterEqual"]
FLOATS = ["f32", "bf16", "f16"]
# (src_0 shape, src_1 shape, dst shape): size-1 dims broadcast on either side, ranks differ
BROADCASTS = [
    ([3, 1, 5], [4, 1], [3, 4, 5]),
    ([2, 3], [2, 3], [2, 3]),
    ([1, 6], [5, 1], [5, 6]),
    ([7], [2, 1, 1], [2, 1, 7]),
]


def _dst_dtype(kind, dt):
    return "boolean" if kind == "GreaterEqual" else dt


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("kind", BINARY)
def test_binary_float(kind, dt):
    a, b, out = BROADCASTS[(BINARY.index(kind) + FLOATS.index(dt)) % len(BROADCASTS)]
    g = one_op(kind, [(dt, a), (dt, b)], [(_dst_dtype(kind, dt), out)])
    inputs = make_inputs(g, seed=BINARY.index(kind))
    inputs[1].reshape(-1)[0] = 0  # a zero divisor, equal operands for GreaterEqual
    inputs[0].reshape(-1)[0] = 0
    if dt == "f32" and kind in ("Maximum", "Minimum"):
        inputs[0].reshape(-1)[1] = np.nan
        inputs[1].reshape(-1)[-1] = np.nan
    check_compiled(g, inputs, what=f"{kind} {dt}")


@pytest.mark.parametrize("kind,dts", [("Add", ("f32", "bf16", "f32")), ("Multiply", ("f16", "f32", "f32")),
                                      ("Divide", ("bf16", "f32", "f32")), ("Subtract", ("f32", "f16", "f32")),
                                      ("Multiply", ("bf16", "bf16", "f32")), ("Multiply", ("f16", "f16", "f32")),
                                      ("Divide", ("bf16", "f32", "bf16")), ("Add", ("bf16", "f16", "f16"))])
def test_binary_mixed_precision(kind, dts):
    """Mixed rows (the corpus's bf16 * bf16 -> f32 O * dO, bf16 / f32 -> bf16 scale): the
    product of the widened inputs rounded once to dst, as the reference computes it."""
    g = one_op(kind, [(dts[0], [4, 3]), (dts[1], [3])], [(dts[2], [4, 3])])
    check_compiled(g, what=f"{kind} {dts}")


@pytest.mark.parametrize("kind", ["Add", "Subtract", "GreaterEqual"])
def test_binary_s32_saturates(kind):
    g = one_op(kind, [("s32", [2, 4]), ("s32", [4])], [(_dst_dtype(kind, "s32"), [2, 4])])
    big, small = 2 ** 31 - 1, -(2 ** 31)
    a = np.array([[big, small, big, 5], [small, -3, 0, 7]], np.int32)
    b = np.array([big, big, small, -5], np.int32)
    got = check_compiled(g, {0: a, 1: b}, exact=True, what=kind)
    if kind == "Add":
        np.testing.assert_array_equal(got[2], [[big, -1, -1, 0], [-1, big - 3, small, 2]])
    if kind == "Subtract":
        np.testing.assert_array_equal(got[2], [[0, small, big, 10], [small, small, big, 12]])


@pytest.mark.parametrize("kind,a,b", [("Add", [], []), ("Multiply", [], [5]), ("Maximum", [1], [6]),
                                      ("GreaterEqual", [4], [])])
def test_binary_rank_0_and_1(kind, a, b):
    out = list(np.broadcast_shapes(tuple(a), tuple(b)))
    g = one_op(kind, [("f32", a), ("f32", b)], [(_dst_dtype(kind, "f32"), out)])
    check_compiled(g, what=kind)


def test_binary_non_dense_strides():
    # src_0 in a channels-last order, src_1 a strided slice, dst channels-last
    g = one_op("SquaredDifference", [("f32", [2, 3, 4, 5], [60, 1, 15, 3]), ("f32", [3, 1, 5], [20, 7, 2])],
               [("f32", [2, 3, 4, 5], [60, 1, 15, 3])])
    check_compiled(g, what="SquaredDifference strided")
    g = one_op("Divide", [("bf16", [6, 4], [1, 6]), ("bf16", [6, 4], [8, 2])], [("bf16", [6, 4], [1, 6])])
    check_compiled(g, what="Divide strided")


def test_binary_no_broadcast():
    g = one_op("Minimum", [("f16", [3, 4]), ("f16", [3, 4])], [("f16", [3, 4])], {"auto_broadcast": "none"})
    check_compiled(g, what="Minimum none")


@pytest.mark.parametrize("dt,cond,a,b,out", [
    ("f32", [1, 4], [1], [3, 4], [3, 4]),
    ("bf16", [3, 1], [3, 4], [4], [3, 4]),
    ("f16", [], [2, 1, 4], [3, 1], [2, 3, 4]),
])
def test_select(dt, cond, a, b, out):
    g = one_op("Select", [("boolean", cond), (dt, a), (dt, b)], [(dt, out)])
    check_compiled(g, exact=True, what=f"Select {dt}")


def test_select_strided_and_rank_0():
    g = one_op("Select", [("boolean", [4, 3], [1, 4]), ("f32", [4, 3], [6, 2]), ("f32", [3])],
               [("f32", [4, 3], [1, 4])])
    check_compiled(g, exact=True, what="Select strided")
    g = one_op("Select", [("boolean", []), ("f32", []), ("f32", [])], [("f32", [])],
               {"auto_broadcast": "none"})
    for c in (True, False):
        got = check_compiled(g, {0: np.array(c), 1: np.array(1.5, np.float32), 2: np.array(-2.0, np.float32)},
                             exact=True)
        assert got[3] == (1.5 if c else -2.0)


@pytest.mark.parametrize("path", corpus_files(["add", "select", "greaterequal"]), ids=lambda p: p.stem)
def test_binary_corpus(path, corpus):
    g = graphc.load_graph(path)
    check_compiled(g, what=path.name)
