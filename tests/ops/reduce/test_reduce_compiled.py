"""Generated kernels of the Reduce ops against graphc's numpy reference: every op in
f32, bf16 and f16, rank 0 and 1, non-dense strides, NaN and reductions over no
elements, fused post-ops, long products, and the corpus graphs."""
import numpy as np
import pytest

import graphc
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs

from support import check_compiled, compiled_vs_reference, corpus_files, kernel_params, one_op

FLOATS = ["f32", "bf16", "f16"]


# ------------------------------------------------------------------------ Reduce
REDUCE = ["ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"]
# (src shape, axes, keep_dims): a kept dim of smaller stride than the reduced ones
# (lanes), two reduced loops, the innermost dim reduced, lane tiles (300 > 256),
# empty axes (a copy), every axis, a size-1 reduced axis
REDUCE_CASES = [
    ([3, 4, 5], [1], True),
    ([3, 4, 5], [0, 2], False),
    ([2, 3, 4], [-1], False),
    ([4, 300], [0], False),
    ([2, 3, 4], [], True),
    ([2, 3, 4], [0, 1, 2], True),
    ([2, 1, 5], [-2, 0], False),
]


def _reduced(shape, axes, keep):
    axes = [a % len(shape) for a in axes]
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


def _reduce_inputs(g, kind, seed):
    x = make_inputs(g, seed=seed)
    if kind == "ReduceProd":  # keep products of up to 300 values in range
        x[0] = (1 + x[0].astype(np.float32) / 64).astype(x[0].dtype)
    return x


@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("kind", REDUCE)
def test_reduce(kind, dt):
    shape, axes, keep = REDUCE_CASES[(REDUCE.index(kind) + 3 * FLOATS.index(dt)) % len(REDUCE_CASES)]
    g = one_op(kind, [(dt, shape)], [(dt, _reduced(shape, axes, keep))], {"axes": axes, "keep_dims": keep})
    check_compiled(g, _reduce_inputs(g, kind, REDUCE.index(kind)), what=f"{kind} {dt} {axes}")


@pytest.mark.parametrize("kind", ["ReduceMax", "ReduceMin"])
def test_reduce_max_min_propagate_nan(kind):
    g = one_op(kind, [("f32", [3, 6])], [("f32", [3])], {"axes": [1]})
    x = make_inputs(g)
    x[0][1, 0] = np.nan  # first in its row: later values must not replace it
    x[0][2, 4] = np.nan
    got = check_compiled(g, x, what=kind)
    assert np.isnan(got[1][1:]).all() and not np.isnan(got[1][0])


def test_reduce_rank_0_and_1():
    g = one_op("ReduceSum", [("f32", [])], [("f32", [])], {"axes": []})
    check_compiled(g, exact=True)
    g = one_op("ReduceMean", [("bf16", [9])], [("bf16", [])], {"axes": [-1]})
    check_compiled(g)


def test_reduce_non_dense_strides():
    # channels-last src reduced over H, W (lanes over C); the kept N, C land in a strided dst
    g = one_op("ReduceMean", [("f32", [2, 5, 3, 4], [60, 1, 20, 5])], [("f32", [2, 5, 1, 1], [1, 2, 1, 1])],
               {"axes": [2, 3], "keep_dims": True})
    check_compiled(g)
    g = one_op("ReduceL2", [("f16", [4, 6], [1, 8])], [("f16", [6])], {"axes": [0]})
    check_compiled(g)


@pytest.mark.filterwarnings("ignore:Mean of empty slice")
@pytest.mark.parametrize("kind,expected", [("ReduceMax", -np.inf), ("ReduceSum", 0.0), ("ReduceMean", np.nan)])
def test_reduce_over_no_elements(kind, expected):
    g = one_op(kind, [("f32", [0, 3])], [("f32", [3])], {"axes": [0]})
    got = check_compiled(g, {0: np.zeros((0, 3), np.float32)})
    np.testing.assert_array_equal(got[1], np.full(3, expected, np.float32))


@pytest.mark.parametrize("path", corpus_files([k.lower() for k in REDUCE]), ids=lambda p: p.stem)
def test_reduce_corpus(path, corpus):
    g = graphc.load_graph(path)
    check_compiled(g, what=path.name)


def test_reduce_anchors_fused_post_ops():
    # the reduction's store_nd runs the post-ops: one kernel, no scratch buffer
    b = GraphBuilder()
    x, y = b.tensor("f32", [4, 3, 50]), b.tensor("f32", [4, 1, 50])
    t = b.op("ReduceMax", [x], [("f32", [-1, -1, -1])], {"axes": [1], "keep_dims": True})[0]
    t = b.op("Multiply", [t, y])[0]
    b.op("ReLU", [t])
    g = b.finalize()
    cg, _ = compiled_vs_reference(g)
    assert len(cg.compiled) == 1 and not [p for p in kernel_params(cg)[0] if p.startswith("t")]


def test_long_products_are_defined_in_any_order():
    """ReduceProd over 16384 factors of a channels-last tensor: the generated data
    keeps the product finite and away from inf * 0, whose NaN-or-zero depends
    on the order of the multiplications."""
    shape = (64, 256, 2, 2)
    g = one_op("ReduceProd", [("f32", shape, (256 * 4, 1, 2 * 256, 256))], [("f32", (1, 1, 2, 2))],
               {"axes": [0, 1], "keep_dims": True})
    cg, got = compiled_vs_reference(g)
    assert all(np.isfinite(v).all() for v in got.values())


# ------------------------------------------------- sums near the f32 maximum
# (src shape, axes): the issue's two values; direct sums over a row (fsum32's runs,
# one and several); short rows (the reassociating helper's f32 partial); a kept
# lane over rows (f32 lanes, folded into f64); rows spread over chunks
EXTREME_CASES = [([1, 2], [1]), ([3, 2500], [1]), ([2048, 20], [1]), ([300, 5], [0]), ([2, 700, 3], [0, 1]),
                 ([1, 40000], [1])]


def _extreme(shape, kind, seed=0):
    """Values whose f32 partial sums overflow where the f64 sum does not: 2^126,
    2^127 and 1.5 * 2^127 (2.6e38) in random signs, whose sums are multiples of
    2^126, exact in f32 and f64 while finite (the test is of the range, not of the
    rounding of sums that cancel); for ReduceL2 2^64 .. 1.5 * 2^65 (5.5e19), whose
    f32 squares overflow and f64 ones do not."""
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=shape)
    top = 65 if kind == "ReduceL2" else 127
    return (signs * rng.choice(np.array([2.0 ** (top - 1), 2.0 ** top, 1.5 * 2.0 ** top]), size=shape)).astype(
        np.float32)


@pytest.mark.parametrize("shape, axes", EXTREME_CASES, ids=str)
@pytest.mark.parametrize("kind", ["ReduceMean", "ReduceSum", "ReduceL2"])
def test_sums_near_f32_max(kind, shape, axes, parallel):
    """ReduceMean and ReduceL2 of values near the f32 maximum (ReduceL2: whose
    squares pass it) are finite, and ReduceSum finite wherever the reference's is:
    partial sums in f32 must not overflow."""
    g = one_op(kind, [("f32", shape)], [("f32", _reduced(shape, axes, False))], {"axes": axes})
    got = check_compiled(g, {0: _extreme(shape, kind)}, what=f"{kind} {shape} {axes}")
    if kind != "ReduceSum":
        assert np.isfinite(got[1]).all()


def test_mean_of_two_values_near_f32_max():
    """The mean of [3e38, 3e38] is 3e38 (it was inf)."""
    g = one_op("ReduceMean", [("f32", [1, 2])], [("f32", [1])], {"axes": [1]})
    x = np.full((1, 2), 3e38, np.float32)
    np.testing.assert_array_equal(check_compiled(g, {0: x})[1], x[:, 0])


@pytest.mark.parametrize("kind", ["ReduceMean", "ReduceL2"])
def test_sums_near_f32_max_fused(kind):
    """The same through a fused reduction with post-ops (one kernel)."""
    b = GraphBuilder()
    x, y = b.tensor("f32", [4, 300, 5]), b.tensor("f32", [4, 1, 5])
    t = b.op(kind, [x], [("f32", [-1, -1, -1])], {"axes": [1], "keep_dims": True})[0]
    b.op("Multiply", [t, y])
    g = b.finalize()
    cg, got = compiled_vs_reference(g, {0: _extreme([4, 300, 5], kind), 1: np.full([4, 1, 5], 0.5, np.float32)})
    assert len(cg.compiled) == 1 and np.isfinite(got[3]).all()
