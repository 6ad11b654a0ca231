"""Generated kernels of the seed ops (AddBackward, Embedding, EmbeddingBackward, SwiGlu, SwiGluGrad)
against graphc's numpy reference with the COMPILED tolerances: f32/bf16/f16 (c64 for
AddBackward), broadcasting on either side, rank 0, output subsets, every split dim,
repeated and padding indices, non-contiguous tensors, sizes that take the parallel
paths, data faults, and every JSON under specs/ with a seed op or a distributed
LayerNorm op."""
import json

import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.fill import make_inputs
from support import SPECS as SPEC_DIR, assert_same, check_compiled, one_op

SEED_KINDS = {"AddBackward", "Embedding", "EmbeddingBackward", "SwiGlu", "SwiGluGrad", "LayerNormPreAllGather",
              "AllGather", "LayerNormPostAllGather"}
#: the JSON graphs under specs/ with a seed op (the others belong to other families' tests)
SPECS = [p for p in sorted(SPEC_DIR.glob("*.json"))
         if SEED_KINDS & {op["kind"] for op in json.loads(p.read_text())["graph"]}]
FLOATS = ("f32", "bf16", "f16")


# ------------------------------------------------------------------ AddBackward
def add_bw(dt, dy, a, b=None, required=(True, True), dy_strides=None, out_strides=()):
    ins = [(dt, dy, dy_strides), (dt, a)] + ([(dt, b)] if b is not None else [])
    shapes = [s for s, r in zip((a, b), required) if r]
    outs = [(dt, s, out_strides[i] if i < len(out_strides) else None) for i, s in enumerate(shapes)]
    return one_op("AddBackward", ins, outs, {"are_required_outputs": list(required)})


ADD_CASES = {
    "spec": ([2, 3, 4], [2, 1, 4], [3, 1]),
    "src_0-broadcast": ([3, 5], [1, 5], [3, 5]),
    "src_1-broadcast": ([3, 5], [3, 5], [3, 1]),
    "lower-rank": ([2, 3, 5], [5], [2, 3, 5]),
    "rowsum-colsum": ([3, 4, 21], [3, 4, 1], [21]),                  # row sums in lanes, with a remainder
    "rank-0": ([], [], []),
}
#: shapes for the parallel paths
ADD_PARALLEL = {
    "both-partial": ([2, 256, 256], [1, 256, 256], [2, 1, 256]),  # too much scratch for one pass: a pass each
    "bias": ([40, 30], [40, 30], [30]),                         # a copy + chunked column sums
    "rowsum-colsum": ([8, 4, 20], [8, 4, 1], [20]),             # row sums in lanes + chunked column sums
    "all-to-one": ([10000], [1], [10000]),                      # a long dim split in rows, chunked sums
}


@pytest.mark.parametrize("dt", FLOATS + ("c64",))
@pytest.mark.parametrize("case", list(ADD_CASES))
def test_add_bw(dt, case):
    if dt != "f32" and case in ("src_0-broadcast", "lower-rank"):
        pytest.skip("f32 covers the shape; other dtypes share the loop nest")
    check_compiled(add_bw(dt, *ADD_CASES[case]))


@pytest.mark.parametrize("dt", ["f32", "bf16", "c64"])
@pytest.mark.parametrize("case", list(ADD_PARALLEL))
def test_add_bw_parallel(dt, case, parallel):
    if dt != "f32" and case == "all-to-one":
        pytest.skip("f32 covers the shape")
    check_compiled(add_bw(dt, *ADD_PARALLEL[case]), parallel=True)


@pytest.mark.parametrize("required", [(True, False), (False, True)])
def test_add_bw_required_subset(required):
    g = add_bw("f32", [6, 7, 9], [6, 1, 9], [7, 1], required)
    assert len(check_compiled(g)) == 1


def test_add_bw_scalar_operand():
    # src_1 was a scalar: no src_1, only diff_src_0
    g = one_op("AddBackward", [("bf16", [4, 33]), ("bf16", [4, 33])], [("bf16", [4, 33])],
               {"are_required_outputs": [True, False]})
    check_compiled(g)


def test_add_bw_empty_diff_dst_gives_zero_sums():
    g = add_bw("f32", [0, 4], [1, 4], [0, 1])
    got = check_compiled(g)
    assert not got[3].any()


def test_add_bw_strided():
    # diff_dst transposed in memory, diff_src_0 written with gaps between rows
    g = add_bw("f32", [5, 6, 7], [5, 6, 7], [6, 1], dy_strides=[1, 35, 5], out_strides=([84, 14, 1],))
    check_compiled(g)


def test_add_bw_one_pass_matches_numpy(parallel):
    g = add_bw("f32", [2, 128, 256], [2, 128, 256], [256])
    x = np.random.default_rng(3).standard_normal((2, 128, 256)).astype(np.float32)
    got = graphc.compile(g).run({0: x, 1: x, 2: x[0, 0]})
    assert np.array_equal(got[3], x)
    np.testing.assert_allclose(got[4], x.astype(np.float64).sum(axis=(0, 1)), rtol=1e-6, atol=1e-5)


# ------------------------------------------------------------ EmbeddingBackward
def emb_bw(it, wdt, odt, idx_shape, rows, dim, dy_shape=None, pad=None, idx_strides=None, dy_strides=None):
    dy_shape = list(idx_shape) + [dim] if dy_shape is None else dy_shape
    attrs = {"dtype": odt} | ({} if pad is None else {"padding_idx": pad})
    return one_op("EmbeddingBackward", [(it, idx_shape, idx_strides), (wdt, [rows, dim]), (wdt, dy_shape, dy_strides)],
                  [(odt, [rows, dim])], attrs)


def emb_inputs(g, rows, repeats=True, seed=0):
    rng = np.random.default_rng(seed)
    inputs = make_inputs(g, seed)
    idx = g.tensors[0]
    hi = max(1, rows // 3) if repeats else rows   # few distinct rows: many repeats
    inputs[0] = rng.integers(0, hi, size=idx.shape).astype(idx.dtype.np)
    return inputs


@pytest.mark.parametrize("wdt, odt", [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f16"),
                                      ("f16", "f32")])
def test_embedding_bw_dtypes(wdt, odt):
    g = emb_bw("s32", wdt, odt, [3, 40], 12, 24, pad=1)
    check_compiled(g, emb_inputs(g, 12))


@pytest.mark.parametrize("pad", [None, 0, 5])
def test_embedding_bw_repeats_and_padding_parallel(pad, parallel):
    g = emb_bw("u32", "f32", "f32", [2, 300], 50, 64, pad=pad)
    inputs = emb_inputs(g, 50)
    got = check_compiled(g, inputs, parallel=True)
    if pad is not None:
        assert not got[3][pad].any()
    assert_same(got[3], graphc.compile(g).run(inputs)[3], "no races: the same bits every run")


def test_embedding_bw_flattened_diff_dst():
    g = emb_bw("u32", "bf16", "f32", [2, 8], 10, 16, dy_shape=[1, 1, 16, 16], pad=0)
    check_compiled(g, emb_inputs(g, 10))


@pytest.mark.parametrize("idx_shape, rows, dim", [([3, 4], 5, 0), ([0, 4], 5, 8), ([0, 4], 0, 8)])
def test_embedding_bw_empty(idx_shape, rows, dim):
    """A dim of 0 (the reference failed to reshape diff_dst), no index, or no row."""
    g = emb_bw("s32", "f32", "f32", idx_shape, rows, dim)
    (got,) = check_compiled(g, emb_inputs(g, max(rows, 1))).values()
    assert got.shape == (rows, dim) and not got.any()


def test_embedding_bw_rank_0_indices():
    g = emb_bw("s32", "f32", "f32", [], 5, 8)
    check_compiled(g)


def test_embedding_bw_strided():
    # indices transposed, diff_dst with a gap after each row
    g = emb_bw("s32", "f32", "f32", [4, 6], 7, 9, idx_strides=[1, 4], dy_strides=[6 * 12, 12, 1])
    check_compiled(g, emb_inputs(g, 7))


@pytest.mark.parametrize("it, bad", [("s32", -1), ("s32", 7), ("u32", 1000)])
def test_embedding_bw_index_out_of_range(it, bad):
    g = emb_bw(it, "f32", "f32", [3, 4], 7, 5)
    inputs = emb_inputs(g, 7, repeats=False)
    idx = inputs[0]
    idx[2, 1] = bad
    idx[2, 3] = bad  # the first bad position is reported
    with pytest.raises(graphc.RuntimeFault) as ref_err:
        reference.run(g, inputs)
    cp = g.get_partitions()[0].compile()
    out = np.full((7, 5), 3.25, np.float32)
    with pytest.raises(graphc.RuntimeFault) as err:
        cp.execute(inputs, outputs=[out])
    assert str(err.value) == str(ref_err.value)
    assert "position [2, 1]" in str(err.value) and f"found {bad}" in str(err.value)
    assert (out == 3.25).all()  # the caller's output is left untouched


# ------------------------------------------------------------------ Embedding
def emb(it, wdt, idx_shape, rows, dim, idx_strides=None, w_strides=None, out_strides=None):
    return one_op("Embedding", [(it, idx_shape, idx_strides), (wdt, [rows, dim], w_strides)],
                  [(wdt, list(idx_shape) + [dim], out_strides)])


@pytest.mark.parametrize("it", ["s32", "u32", "s64"])
@pytest.mark.parametrize("wdt", FLOATS)
def test_embedding_dtypes(it, wdt):
    """Rows copied bit for bit (the reference's rows, every weight and index dtype)."""
    g = emb(it, wdt, [3, 40], 12, 24)
    check_compiled(g, emb_inputs(g, 12), exact=True)


def test_embedding_parallel_strided(parallel):
    """Tokens in parallel; indices transposed, weight rows and dst rows with gaps."""
    g = emb("s32", "bf16", [4, 60], 50, 16, idx_strides=[1, 4], w_strides=[20, 1], out_strides=[60 * 18, 18, 1])
    check_compiled(g, emb_inputs(g, 50), exact=True, parallel=True)


@pytest.mark.parametrize("idx_shape, rows, dim", [([], 5, 8), ([3, 4], 5, 0), ([0, 4], 5, 8), ([0, 4], 0, 8)])
def test_embedding_rank_0_and_empty(idx_shape, rows, dim):
    g = emb("s64", "f32", idx_shape, rows, dim)
    (got,) = check_compiled(g, emb_inputs(g, max(rows, 1)), exact=True).values()
    assert got.shape == tuple(idx_shape) + (dim,)


@pytest.mark.parametrize("it, bad", [("s32", -1), ("s32", 7), ("u32", 1000), ("s64", 2**40)])
def test_embedding_index_out_of_range(it, bad, parallel):
    """The reference's RuntimeFault (the first bad position), raised before a row
    is copied, on the parallel path too: the caller's output is left untouched."""
    for shape in ([3, 4], [30, 40]):
        g = emb(it, "f32", shape, 7, 5)
        inputs = emb_inputs(g, 7, repeats=False)
        inputs[0][2, 1] = inputs[0][2, 3] = bad
        with pytest.raises(graphc.RuntimeFault) as ref_err:
            reference.run(g, inputs)
        out = np.full(shape + [5], 3.25, np.float32)
        with pytest.raises(graphc.RuntimeFault) as err:
            g.get_partitions()[0].compile().execute(inputs, outputs=[out])
        assert str(err.value) == str(ref_err.value)
        assert "position [2, 1]" in str(err.value) and f"found {bad}" in str(err.value)
        assert (out == 3.25).all()
        with pytest.raises(graphc.RuntimeFault):
            graphc.run(g, inputs)


# --------------------------------------------------------------- SwiGlu family
def swiglu(kind, dt, shape, dim, strides=None):
    half = list(shape)
    half[dim] //= 2
    if kind == "SwiGlu":
        return one_op(kind, [(dt, shape, strides)], [(dt, half)], {"dim": dim})
    return one_op(kind, [(dt, half), (dt, shape, strides)], [(dt, shape)], {"dim": dim})


@pytest.mark.parametrize("kind", ["SwiGlu", "SwiGluGrad"])
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("dim", [-3, -2, -1, 0, 1, 2])
def test_swiglu_every_dim(kind, dt, dim):
    if dt != "f32" and dim < 0:
        pytest.skip("f32 covers negative dims")
    check_compiled(swiglu(kind, dt, [4, 6, 10], dim))


@pytest.mark.parametrize("kind", ["SwiGlu", "SwiGluGrad"])
def test_swiglu_parallel(kind, parallel):
    check_compiled(swiglu(kind, "bf16", [2000], 0), parallel=True)
    check_compiled(swiglu(kind, "f16", [40, 30], 1), parallel=True)


@pytest.mark.parametrize("kind", ["SwiGlu", "SwiGluGrad"])
def test_swiglu_strided(kind):
    check_compiled(swiglu(kind, "f32", [6, 8], 0, strides=[1, 6]))


@pytest.mark.parametrize("kind", ["SwiGlu", "SwiGluGrad"])
def test_swiglu_extreme_values(kind):
    # large |A| (exp underflow and saturation), +-inf and NaN
    g = swiglu(kind, "f32", [2, 16], -1)
    inputs = make_inputs(g)
    src = g.input_ports[-1]
    a = np.array([-100, -88, -87, -20, -1e-3, 0, 1e-3, 20, 87, 100, np.inf, -np.inf, np.nan, 3, -3, 0.5],
                 np.float32)
    inputs[src] = np.stack([a, a[::-1]]).astype(np.float32)
    check_compiled(g, inputs)


# ------------------------------------------------------------------------ specs
@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_spec(path):
    check_compiled(graphc.load_graph(path), seed=7)
