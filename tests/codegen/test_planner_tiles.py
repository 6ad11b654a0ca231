"""The Reduce ops over merged dims (codegen.rules.reduce._merged: adjacent dims
of src both reduced, or both kept and contiguous in dst too, run as one planner dim, e.g.
ReduceSum over the channels of NCHW: kept lanes of H*W cut into tiles), checked
against the reference where dims merge and where they must not (strided,
permuted, fused); and BatchNorm (forward, inference, backward) over channels
last and first with channel counts around the planner's tiles, large enough to
run in parallel, on data offset far from 0."""
import numpy as np
import pytest

from graphc.builder import GraphBuilder
from graphc.codegen.kernel import ArrayRef
from graphc.codegen.rules.reduce import _merged
from graphc.fill import make_inputs
from graphc.types import LogicalTensor

from support import check_compiled, compiled_vs_reference, one_op, strides

FLOATS = ["f32", "bf16", "f16"]


def _ref(name, shape, st=None):
    return ArrayRef(name, LogicalTensor(0, "f32", shape, strides=st))


def _reduced(shape, axes, keep):
    return [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes]


def _offset(g, shift, seed=0):
    """make_inputs with every float input moved by ``shift`` (a mean far from 0)."""
    x = make_inputs(g, seed=seed)
    return {t: (a.astype(np.float32) + shift).astype(a.dtype) for t, a in x.items()}


# ---------------------------------------------------------------- which dims merge
def test_kept_dims_contiguous_in_src_and_dst_merge():
    sv, dv, axes = _merged(_ref("a0", (1, 8, 150, 150)), _ref("o1", (1, 1, 150, 150)), (1,), True)
    assert sv.shape == (8, 22500) and sv.strides == (22500, 1) and axes == {0}
    assert dv.shape == (1, 22500) and dv.strides[1] == 1


def test_reduced_dims_merge_and_dst_without_kept_dims():
    sv, dv, axes = _merged(_ref("a0", (40, 6, 5, 7)), _ref("o1", (40,)), (1, 2, 3), False)
    assert sv.shape == (40, 210) and axes == {1} and dv.shape == (40, 1) and dv.strides[0] == 1


def test_kept_and_reduced_neighbours_do_not_merge():
    assert _merged(_ref("a0", (4, 6, 5)), _ref("o1", (4, 1, 5)), (1,), True) is None


def test_no_merge_into_few_groups_of_longer_lanes():
    """1 group of 3136 kept lanes (rows mode, partials per lane) instead of 56
    groups of 56; rows of up to 4096 reduced lanes instead of 56: unmerged."""
    assert _merged(_ref("a0", (1, 256, 56, 56)), _ref("o1", (1, 1, 56, 56)), (1,), True) is None
    assert _merged(_ref("a0", (1, 512, 56, 56)), _ref("o1", (1,)), (1, 2, 3), False) is None
    assert _merged(_ref("a0", (64, 2048, 7, 7)), _ref("o1", (64, 2048)), (2, 3), False) is not None


def test_a_dim_not_contiguous_in_src_or_dst_stays_apart():
    shape = (3, 5, 8)
    padded = _ref("a0", shape, tuple(strides(list(shape), [0, 1, 2], pad=2)))
    assert _merged(padded, _ref("o1", (1, 5, 8)), (0,), True) is None
    dst = _ref("o1", (1, 5, 8), tuple(strides([1, 5, 8], [0, 2, 1])))   # kept dims permuted in dst
    assert _merged(_ref("a0", shape), dst, (0,), True) is None


def test_a_fused_ref_keeps_the_tensor_dims():
    class Fused(ArrayRef):
        pass
    src = Fused("a0", LogicalTensor(0, "f32", (2, 6, 5, 7)))
    assert _merged(src, _ref("o1", (2, 1, 5, 7)), (1,), True) is None


# ---------------------------------------------------------------- compiled vs reference
# (shape, src strides or None, axes, keep_dims): merging kept lanes longer than the
# planner's tiles, merging reduced dims, nothing to merge, permuted src, size-1 dims
REDUCE_CASES = [
    ([1, 6, 150, 150], None, [1], True),
    ([2, 3, 100, 90], None, [1], False),
    ([6, 5, 40, 3], None, [1, 2], True),
    ([6, 5, 40, 3], None, [0, 1], False),
    ([3, 4, 5, 6], None, [1, 3], True),
    ([2, 24, 70, 75], strides([2, 24, 70, 75], [0, 2, 3, 1]), [1], True),
    ([8, 30, 40], strides([8, 30, 40], [2, 0, 1]), [0], False),
    ([1, 1, 33, 70, 1], None, [2], True),
]


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMean", "ReduceMax"])
@pytest.mark.parametrize("case", range(len(REDUCE_CASES)))
def test_reduce_over_merged_dims(kind, case):
    shape, st, axes, keep = REDUCE_CASES[case]
    dt = FLOATS[case % 3]
    g = one_op(kind, [(dt, shape) if st is None else (dt, shape, st)], [(dt, _reduced(shape, axes, keep))],
               {"axes": axes, "keep_dims": keep})
    check_compiled(g, _offset(g, 3.0, case), what=f"{kind} {dt} {shape} {axes}")


def test_merged_lane_is_tiled_in_parallel():
    """ReduceSum over the channels of NCHW: one lane of H*W cut into tiles."""
    g = one_op("ReduceSum", [("f32", [1, 32, 150, 150])], [("f32", [1, 1, 150, 150])], {"axes": [1], "keep_dims": True})
    cg, _ = compiled_vs_reference(g, parallel=True)
    assert "22500" in cg.source


def test_fused_prologue_and_epilogue_keep_their_indices():
    """Abs before and a Multiply by a [W] tensor after: the kernel's refs are fused."""
    b = GraphBuilder()
    x = b.tensor("f32", [2, 12, 9, 10])
    a = b.op("Abs", [x], [("f32", [2, 12, 9, 10])])[0]
    s = b.op("ReduceSum", [a], [("f32", [2, 1, 9, 10])], {"axes": [1], "keep_dims": True})[0]
    w = b.tensor("f32", [10])
    b.op("Multiply", [s, w], [("f32", [2, 1, 9, 10])])
    check_compiled(b.finalize())


# ---------------------------------------------------------------- BatchNorm
def _bn_shape(fmt, n, c, hw):
    return [n, hw, hw, c] if fmt == "NXC" else [n, c, hw, hw]


BN_CASES = [(16, 3), (48, 9), (192, 20), (200, 3), (200, 20)]


def _bn_graph(kind, dt, shape, c, fmt):
    data, chan = (dt, shape), ("f32", [c])
    ports = {"BatchNormTrainingBackward": ([data, data] + [chan] * 3, [data, chan, chan]),
             "BatchNormForwardTraining": ([data] + [chan] * 4, [data] + [chan] * 4),
             "BatchNormInference": ([data] + [chan] * 4, [data])}[kind]
    return one_op(kind, *ports, {"epsilon": 0.0625, "data_format": fmt})


@pytest.mark.parametrize("kind,shift", [("BatchNormTrainingBackward", 0.5), ("BatchNormForwardTraining", 100.0),
                                        ("BatchNormInference", 2.0)])
@pytest.mark.parametrize("fmt", ["NXC", "NCX"])
@pytest.mark.parametrize("case", range(len(BN_CASES)))
def test_batchnorm(kind, shift, fmt, case):
    c, hw = BN_CASES[case]
    dt = FLOATS[(case + len(kind)) % 3]
    shape = _bn_shape(fmt, 2, c, hw)
    g = _bn_graph(kind, dt, shape, c, fmt)
    x = _offset(g, shift, case)
    if kind == "BatchNormInference":
        var = g.ops[0].inputs[4].id
        x[var] = np.abs(x[var])   # a variance
    check_compiled(g, x, what=f"{kind} {fmt} {dt} {shape}")
