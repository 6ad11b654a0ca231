"""The derivatives of ReduceProd (zeros in a group handled as torch does) and of
ReduceMax/ReduceMin with ties (shared evenly, as torch's amax/amin), compiled,
against torch.autograd in float64 in f32 and bf16 at the dtype's ORACLE tolerance."""
import numpy as np
import pytest

from graphc import DataType
from support import uniform
from support.training import chain, check_training

torch = pytest.importorskip("torch")

DTYPES = ["f32", "bf16"]
X = (4, 3, 5)


def _with_zeros(dt, seed):
    """src of X, uniform in [0.5, 1.5] with random signs, reduced over axis 2 (and
    over axes (0, 2)): row r of every [i, r] group holds r zeros (0, 1, 2), one
    [i, 1] row among them holding its zero at the last element."""
    x = uniform(X, dt, seed, 0.5, 1.5).astype(np.float32)
    x *= np.where(np.random.default_rng(seed).random(X) < 0.5, -1.0, 1.0).astype(np.float32)
    x[:, 1, 2] = 0.0
    x[:, 2, 0] = x[:, 2, 3] = 0.0
    x[1, 1, 2], x[1, 1, 4] = 0.75, 0.0
    return x.astype(DataType.parse(dt).np)


@pytest.mark.parametrize("dt", DTYPES)
def test_reduce_prod_with_zeros(dt):
    """Groups with no zero, one zero and two zeros (over axis 2), and groups over
    axes (0, 2) whose counts add up over the batch (no zero, 4 and 8)."""
    g, ts = chain([(dt, X)], [("ReduceProd", [0], {"axes": [2]}),
                              ("ReduceProd", [0], {"axes": [0, 2], "keep_dims": True})])
    x = _with_zeros(dt, 3)
    check_training(g, [ts[0].id], lambda x: (x.prod(2), x.prod(2, keepdim=True).prod(0, keepdim=True)),
                   inputs={ts[0].id: x})


@pytest.mark.parametrize("dt", DTYPES)
def test_reduce_prod_with_one_zero_in_a_group_of_the_whole(dt):
    g, ts = chain([(dt, (2, 3))], [("ReduceProd", [0], {"axes": [0, 1]})])
    x = np.array([[0.5, -1.25, 1.0], [0.0, 0.75, 1.5]], np.float32).astype(DataType.parse(dt).np)
    tr, got = check_training(g, [ts[0].id], lambda x: x.prod(), inputs={ts[0].id: x})
    assert np.count_nonzero(got[tr.grad_out(ts[0].id)]) == 1


def _ties(dt):
    """src of X on a coarse grid (values -2..2): most groups have ties at their
    max and min; row [0, 0] all equal."""
    x = np.random.default_rng(11).integers(-2, 3, X).astype(np.float32)
    x[0, 0] = 1.0
    return x.astype(DataType.parse(dt).np)


@pytest.mark.parametrize("dt", DTYPES)
def test_reduce_max_min_ties_share_the_gradient(dt):
    g, ts = chain([(dt, X)], [("ReduceMax", [0], {"axes": [2]}),
                              ("ReduceMin", [0], {"axes": [0, 2], "keep_dims": True})])
    x = _ties(dt)
    tr, got = check_training(g, [ts[0].id], lambda x: (x.amax(2), x.amin((0, 2), keepdim=True)),
                             inputs={ts[0].id: x})
    counts = (x.astype(np.float32) == x.astype(np.float32).max(2, keepdims=True)).sum(2)
    assert counts.max() > 1 and counts[0, 0] == 5      # the data has ties
