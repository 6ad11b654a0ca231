"""The derivatives of Concat (a StaticSlice of diff_dst per src) and of
StaticSlice (diff_dst padded back with zeros, by Concat), compiled, against
torch.autograd in float64 in f32 and bf16 at the dtype's ORACLE tolerance."""
import pytest

from support.training import chain, check_training

torch = pytest.importorskip("torch")

DTYPES = ["f32", "bf16"]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("axis", [1, -1, 0])
def test_concat(dt, axis):
    shapes = {1: [(2, 3, 4), (2, 1, 4), (2, 5, 4)], -1: [(2, 3, 2), (2, 3, 5), (2, 3, 1)],
              0: [(1, 3, 4), (3, 3, 4), (2, 3, 4)]}[axis]
    g, ts = chain([(dt, s) for s in shapes], [("Concat", [0, 1, 2], {"axis": axis}), ("Tanh", [3], {})])
    tr, _ = check_training(g, [t.id for t in ts[:3]], lambda *xs: torch.tanh(torch.cat(xs, axis)),
                           outputs=[ts[4].id])
    assert [op.kind for op in tr.graph.ops.values()].count("StaticSlice") == 3


@pytest.mark.parametrize("dt", DTYPES)
def test_concat_with_one_input_wanted(dt):
    """Only src_1 wants a gradient: one StaticSlice, the others get none."""
    g, ts = chain([(dt, (2, 3)), (dt, (2, 4)), (dt, (2, 2))], [("Concat", [0, 1, 2], {"axis": 1})])
    tr, _ = check_training(g, [ts[1].id], lambda a, b, c: torch.cat([a, b, c], 1))
    assert [op.kind for op in tr.graph.ops.values()].count("StaticSlice") == 1


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("attrs,index", [
    ({"begin": [1, 1], "end": [3, 3]}, (slice(1, 3), slice(1, 3))),
    ({"begin": [-3], "end": [-1], "axes": [-1]}, (slice(None), slice(None), slice(5, 7))),
    ({"begin": [0, 1], "end": [2, 4], "axes": [2, 0]}, (slice(1, 4), slice(None), slice(0, 2))),
    ({"begin": [0], "end": [4]}, (slice(0, 4),)),
], ids=["two-axes", "negative", "axes", "whole"])
def test_static_slice(dt, attrs, index):
    g, ts = chain([(dt, (4, 3, 8))], [("StaticSlice", [0], attrs), ("Sigmoid", [1], {})])
    check_training(g, [ts[0].id], lambda x: torch.sigmoid(x[index]), outputs=[ts[2].id])
