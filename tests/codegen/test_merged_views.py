"""merged_views.merged_views: the softmax family runs over views whose dims around
the axis are merged where every tensor is contiguous across them (SoftMax over
the channels of NCHW: lanes of H*W), checked against the reference, and left
alone where a tensor is not contiguous or a ref is fused."""
import pytest

from graphc.builder import GraphBuilder
from graphc.codegen.merged_views import MergedView, merged_views
from graphc.codegen.kernel import ArrayRef
from graphc.types import LogicalTensor

from support import check_compiled, one_op, strides


def _ref(name, shape, st=None):
    return ArrayRef(name, LogicalTensor(0, "f32", shape, strides=st))


def test_merges_contiguous_dims_around_the_axis():
    src, stats = _ref("a0", (2, 6, 5, 7)), _ref("o1", (2, 1, 5, 7))
    (v, s), where = merged_views([src, stats], {1})
    assert where == [0, 1, 2, 2] and isinstance(v, MergedView)
    assert v.shape == (2, 6, 35) and v.strides == (210, 35, 1)
    assert s.shape == (2, 1, 35) and s.strides == (35, 35, 1)


def test_a_dim_not_contiguous_in_one_tensor_stays_apart():
    shape = (3, 5, 8)
    padded = _ref("a1", shape, tuple(strides(list(shape), [0, 1, 2], pad=2)))
    refs, where = merged_views([_ref("a0", shape), padded], {0})
    assert where == [0, 1, 2] and [r.shape for r in refs] == [shape, shape]


def test_a_fused_ref_keeps_the_tensor_dims():
    class Fused:
        shape, strides = (2, 6, 5, 7), (210, 35, 7, 1)
    refs, where = merged_views([_ref("a0", (2, 6, 5, 7)), Fused()], {1})
    assert where == [0, 1, 2, 3] and refs[0].shape == (2, 6, 5, 7)


def test_dims_apart_are_never_merged():
    (v,), where = merged_views([_ref("a0", (2, 3, 4, 5))], {0, 1})
    assert v.shape == (2, 3, 20) and where == [0, 1, 2, 2]


@pytest.mark.parametrize("kind", ["SoftMax", "LogSoftmax"])
@pytest.mark.parametrize("shape,axis", [([2, 6, 5, 7], 1), ([3, 4, 5, 6, 2], 2), ([64, 40, 9, 9], 1)])
def test_compiled_over_merged_dims(kind, shape, axis):
    check_compiled(one_op(kind, [("f32", shape)], [("f32", shape)], {"axis": axis}))


def test_backward_over_merged_dims_bf16():
    shape = [4, 12, 6, 6]
    check_compiled(one_op("SoftMaxBackward", [("bf16", shape), ("bf16", shape)], [("bf16", shape)], {"axis": 1}))


def test_fused_broadcast_epilogue_keeps_its_indices():
    """SoftMax over channels with a Multiply by a [1, 1, 1, W] tensor after it (an
    epilogue indexing the broadcast tensor by W alone): the dims stay unmerged."""
    b = GraphBuilder()
    shape = [2, 6, 5, 7]
    x, w = b.tensor("f32", shape), b.tensor("f32", [1, 1, 1, 7])
    y = b.op("SoftMax", [x], out=[("f32", shape)], attrs={"axis": 1})[0]
    b.op("Multiply", [y, w], out=[("f32", shape)])
    check_compiled(b.finalize())
