"""Generated kernels of the binary ops (Add ... the comparisons, the logical ops, Select)
against graphc's numpy reference: every op in every dtype its schema allows, broadcasting
on either side, rank 0 and 1, non-dense strides, NaN and integer wrapping edge cases, and
the corpus graphs."""
import numpy as np
import pytest

import graphc
from graphc.fill import make_inputs

from support import check_compiled, corpus_files, one_op

COMPARISONS = ["GreaterEqual", "Greater", "Less", "LessEqual", "Equal", "NotEqual"]
BINARY = ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference"] + COMPARISONS
FLOATS = ["f32", "bf16", "f16"]
# (src_0 shape, src_1 shape, dst shape): size-1 dims broadcast on either side, ranks differ
BROADCASTS = [
    ([3, 1, 5], [4, 1], [3, 4, 5]),
    ([2, 3], [2, 3], [2, 3]),
    ([1, 6], [5, 1], [5, 6]),
    ([7], [2, 1, 1], [2, 1, 7]),
]


def _dst_dtype(kind, dt):
    return "boolean" if kind in COMPARISONS else dt


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


@pytest.mark.parametrize("dt", ["s32", "s64"])
@pytest.mark.parametrize("kind", ["Add", "Subtract", "Multiply"] + COMPARISONS)
def test_binary_integers_exact_and_wrapping(kind, dt):
    """Integer kernels compute in the integer type: exact beyond 2^24 (an s64 through f32
    is not), wrapping past the type's range as numpy does; comparisons of extremes."""
    g = one_op(kind, [(dt, [2, 4]), (dt, [4])], [(_dst_dtype(kind, dt), [2, 4])])
    np_dt = np.int32 if dt == "s32" else np.int64
    big, small = np.iinfo(np_dt).max, np.iinfo(np_dt).min
    a = np.array([[big, small, big, 5], [small, (1 << 24) + 1, 0, 7]], np_dt)
    b = np.array([big, 3, small, -5], np_dt)
    got = check_compiled(g, {0: a, 1: b}, exact=True, what=f"{kind} {dt}")
    with np.errstate(over="ignore"):
        want = {"Add": a + b, "Subtract": a - b, "Multiply": a * b, "GreaterEqual": a >= b, "Greater": a > b,
                "Less": a < b, "LessEqual": a <= b, "Equal": a == b, "NotEqual": a != b}[kind]
    np.testing.assert_array_equal(got[2], want)
    if dt == "s64" and kind == "Add":
        a[0, 0], b[0] = 2 ** 53 + 1, 2   # (f64 would round these too)
        assert check_compiled(g, {0: a, 1: b}, exact=True)[2][0, 0] == 2 ** 53 + 3


def test_integer_chain_fuses_and_wraps():
    """(a * b + c) in s32, one kernel: the product wraps before the sum, as numpy's int32."""
    from graphc import LogicalTensor, Op
    from support import graph_of
    t = [LogicalTensor(i, "s32", [4]) for i in range(5)]
    g = graph_of(Op(0, "Multiply", [t[0], t[1]], [t[2]]), Op(1, "Add", [t[2], t[3]], [t[4]]))
    a = np.array([1 << 20, 1 << 16, -3, 7], np.int32)
    got = check_compiled(g, {0: a, 1: a, 3: np.array([1, 2, 3, 4], np.int32)}, exact=True)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got[4], a * a + np.array([1, 2, 3, 4], np.int32))


@pytest.mark.parametrize("kind", ["LogicalAnd", "LogicalOr", "LogicalNot"])
def test_logical(kind):
    ins = [("boolean", [3, 1, 4])] + ([("boolean", [2, 4])] if kind != "LogicalNot" else [])
    g = one_op(kind, ins, [("boolean", [3, 2, 4] if kind != "LogicalNot" else [3, 1, 4])])
    check_compiled(g, exact=True, what=kind)


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
