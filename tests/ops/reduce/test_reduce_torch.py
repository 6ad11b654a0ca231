"""Reduction references against PyTorch CPU, each dtype computed by torch in its own
precision."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from graphc.types import DataType
from support import NP, assert_close, run_single, to_numpy, to_torch, uniform

torch = pytest.importorskip("torch")


# ------------------------------------------------------------------- reductions
def torch_prod(x, dims, keepdim):
    for d in sorted((d % x.dim() for d in dims), reverse=True):
        x = torch.prod(x, dim=d, keepdim=keepdim)
    return x


REDUCE_TORCH = {
    "ReduceL1": lambda x, d, k: torch.linalg.vector_norm(x, ord=1, dim=d, keepdim=k),
    "ReduceL2": lambda x, d, k: torch.linalg.vector_norm(x, ord=2, dim=d, keepdim=k),
    "ReduceMax": lambda x, d, k: torch.amax(x, dim=d, keepdim=k),
    "ReduceMin": lambda x, d, k: torch.amin(x, dim=d, keepdim=k),
    "ReduceMean": lambda x, d, k: torch.mean(x, dim=d, keepdim=k),
    "ReduceProd": torch_prod,
    "ReduceSum": lambda x, d, k: torch.sum(x, dim=d, keepdim=k),
}


@pytest.mark.parametrize("kind", list(REDUCE_TORCH))
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("axes", [[1], [-1], [0, 2], [-3, -1, 1], [0, 1, 2]])
@pytest.mark.parametrize("keep_dims", [False, True])
def test_reduce_vs_torch(kind, dt, axes, keep_dims):
    # values near 1 keep ReduceProd away from under- and overflow
    sign = np.where(uniform((3, 4, 5), "f32", 13) > 0, 1, -1).astype(NP[dt])
    x = uniform((3, 4, 5), dt, 12, low=0.6, high=1.4) * sign
    rank = 3 if keep_dims else 3 - len(axes)
    (y,) = run_single(kind, [x], [(dt, [-1] * rank)], {"axes": axes, "keep_dims": keep_dims})
    expect = to_numpy(REDUCE_TORCH[kind](to_torch(x), axes, keep_dims))
    assert y.shape == expect.shape
    assert_close(y, expect, DataType(dt), ORACLE, what=f"{kind} {dt} {axes} {keep_dims}")


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMax", "ReduceL2"])
def test_reduce_axes_input_vs_torch(kind):
    x = uniform((2, 3, 4), "f32", 14)
    axes = np.array([-1, 0], np.int32)
    (y,) = run_single(kind, [x, axes], [("f32", [-1, -1, -1])], {"keep_dims": True})
    expect = to_numpy(REDUCE_TORCH[kind](to_torch(x), [-1, 0], True))
    assert_close(y, expect, DataType.f32, ORACLE, what=kind)
