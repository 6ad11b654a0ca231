"""Reductions over short contiguous rows (the planner's short lanes: a pass of
sums as a reassociating helper over the lane, the lane loops to a bound hidden
from LLVM) against graphc's numpy reference: LayerNorm, LayerNormBackward,
RMSNorm, SoftMax and ReduceSum over last dims of 1 to 64 elements, f32 / bf16 /
f16, data with a large common offset, NaN and inf in rows, statistics outputs,
affine and not, many groups (threads) and few."""
import numpy as np
import pytest

from graphc.fill import make_inputs

from support import check_compiled, one_op

LENGTHS = [1, 3, 7, 28, 33, 63, 64]


@pytest.fixture(autouse=True)
def _short_lanes_at_any_size(monkeypatch):
    """The short-lane plan for these small shapes too (it starts at SHORT_WORK elements)."""
    from graphc.codegen import grouped
    monkeypatch.setattr(grouped, "SHORT_WORK", 0)
DTYPES = ["f32", "bf16", "f16"]
EPS = {"epsilon": 0.0625}
#: a common offset each src element gets: large against the spread of a row
OFFSET = {"f32": 1000.0, "bf16": 100.0, "f16": 100.0}


def offset(inputs, tid, dt):
    """Input ``tid`` moved by OFFSET[dt] (in its own dtype)."""
    x = inputs[tid]
    inputs[tid] = (x.astype(np.float64) + OFFSET[dt]).astype(x.dtype)
    return inputs


def nan_inf_rows(x):
    """Row 0 with a NaN, row 1 with +inf, row 2 with -inf and +inf, row 3 all +inf
    (rows along the last dim of x, flattened over the others; x has >= 4 rows)."""
    rows = x.reshape(-1, x.shape[-1])
    rows[0, -1] = np.nan
    rows[1, 0] = np.inf
    rows[2, 0] = -np.inf
    rows[2, -1] = np.inf
    rows[3] = np.inf
    return x


def layer_norm(dt, n, affine=True, stats=True, groups=(3, 5)):
    shape = [*groups, n]
    sdt = "f32"
    ins = [(dt, shape)] + ([(sdt, [n])] * 2 if affine else [])
    outs = [(dt, shape)] + ([(sdt, list(groups))] * 2 if stats else [])
    return one_op("LayerNorm", ins, outs, {**EPS, "begin_norm_axis": -1, "keep_stats": stats, "use_affine": affine})


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", DTYPES)
def test_layer_norm_short_rows(dt, n):
    g = layer_norm(dt, n, affine=n % 2 == 1, stats=n != 28)
    check_compiled(g, offset(make_inputs(g), 0, dt), what=f"{dt} {n}")


@pytest.mark.parametrize("n", [3, 28, 64])
@pytest.mark.parametrize("stats", [True, False])
def test_layer_norm_nan_inf_rows(n, stats):
    g = layer_norm("f32", n, affine=stats, stats=stats)
    x = make_inputs(g)
    nan_inf_rows(x[0])
    got = check_compiled(g, x, what=f"{n}")
    assert np.isnan(got[g.output_ports[0]].reshape(-1, n)[:4]).all()


def test_layer_norm_short_rows_many_groups():
    """Enough rows to spread over threads (in blocks, the last one shorter)."""
    g = layer_norm("f32", 28, groups=(37, 301))
    check_compiled(g, offset(make_inputs(g), 0, "f32"), parallel=True)


def layer_norm_backward(dt, n, affine, groups=(3, 5)):
    shape = [*groups, n]
    ins = [(dt, shape), (dt, shape), ("f32", list(groups)), ("f32", list(groups))]
    ins += [("f32", [n])] * 2 if affine else []
    outs = [(dt, shape)] + ([("f32", [n])] * 2 if affine else [])
    return one_op("LayerNormBackward", ins, outs, {**EPS, "begin_norm_axis": -1, "use_affine": affine})


def backward_inputs(g, dt, n):
    """src with an offset, and its own mean and variance (as LayerNorm kept them)."""
    x = offset(make_inputs(g), 0, dt)
    src = x[0].astype(np.float64)
    x[2] = src.mean(axis=-1).astype(np.float32)
    x[3] = src.var(axis=-1).astype(np.float32)
    return x


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", DTYPES)
def test_layer_norm_backward_short_rows(dt, n):
    g = layer_norm_backward(dt, n, affine=n % 2 == 0)
    check_compiled(g, backward_inputs(g, dt, n), what=f"{dt} {n}")


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_nan_inf_rows(affine):
    g = layer_norm_backward("f32", 28, affine)
    x = backward_inputs(g, "f32", 28)
    nan_inf_rows(x[1])
    check_compiled(g, x)


@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_backward_short_rows_many_groups(affine):
    """Threads over blocks of rows (a last block shorter), diff_gamma and diff_beta
    summed over the threads' columns."""
    g = layer_norm_backward("f32", 28, affine, groups=(37, 301))
    check_compiled(g, backward_inputs(g, "f32", 28), parallel=True)


def last_dim_op(kind, dt, n):
    """RMSNorm (with gamma for odd n), SoftMax or ReduceSum over the last dim of [3, 5, n]."""
    shape = [3, 5, n]
    if kind == "RMSNorm":
        gamma = [("f32", [n])] if n % 2 else []
        return one_op(kind, [(dt, shape)] + gamma, [(dt, shape)], {**EPS, "begin_norm_axis": -1})
    if kind == "SoftMax":
        return one_op(kind, [(dt, shape)], [(dt, shape)], {"axis": -1})
    return one_op(kind, [(dt, shape)], [(dt, [3, 5])], {"axes": [-1], "keep_dims": False})


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", ["RMSNorm", "SoftMax", "ReduceSum"])
def test_last_dim_ops_short_rows(kind, dt, n):
    """Offset data (not for ReduceSum, whose sum would hide the terms), NaN and inf
    rows in f32."""
    g = last_dim_op(kind, dt, n)
    x = make_inputs(g) if kind == "ReduceSum" else offset(make_inputs(g), 0, dt)
    if dt == "f32" and n > 1:
        nan_inf_rows(x[0])
    check_compiled(g, x, what=f"{kind} {dt} {n}")


def test_short_row_sums_are_helpers_over_a_hidden_bound():
    """The plan itself: LayerNorm over rows of 28 sums in reassociating helpers
    looping to the hidden lane bound, and no lane loop runs to the constant."""
    import graphc
    cg = graphc.compile(layer_norm("f32", 28, groups=(40, 300)))
    src = cg.compiled[0].source
    assert "hidden_int(28)" in src and src.count("fastmath={'reassoc'}") == 2, src
    assert "in range(28)" not in src, src


def test_small_short_row_kernels_keep_plain_loops(monkeypatch):
    """Under SHORT_WORK elements the plan keeps its plain loops (no helper functions
    to compile with the kernel), with the same results."""
    import graphc
    from graphc.codegen import grouped
    monkeypatch.setattr(grouped, "SHORT_WORK", 1 << 14)
    g = layer_norm("f32", 28)
    assert "fastmath={'reassoc'}" not in graphc.compile(g).compiled[0].source
    check_compiled(g, offset(make_inputs(g), 0, "f32"))
