"""Binary, reduction and shuffle references against PyTorch CPU, each dtype
computed by torch in its own precision."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidShape
from graphc.tolerances import ORACLE
from graphc.types import DataType
from support import NP, assert_close, run_single, to_numpy, to_torch, torch_dtype

torch = pytest.importorskip("torch")

def rand(shape, dt, seed, low=-2.0, high=2.0):
    rng = np.random.default_rng(seed)
    if dt == "s32":
        return rng.integers(-1000, 1000, size=shape).astype(np.int32)
    return rng.uniform(low, high, size=shape).astype(NP[dt])


BINARY_TORCH = {
    "Add": torch.add, "Subtract": torch.sub, "Multiply": torch.mul, "Divide": torch.div,
    "Maximum": torch.maximum, "Minimum": torch.minimum,
    "SquaredDifference": lambda a, b: torch.nn.functional.mse_loss(*torch.broadcast_tensors(a, b), reduction="none"),
    "GreaterEqual": torch.ge,
}
SHAPES = [((2, 3, 4), (4,)), ((4,), (2, 3, 4)), ((2, 1, 5), (1, 3, 1)), ((1,), (3, 2)), ((2, 3), (2, 3))]


@pytest.mark.parametrize("kind", list(BINARY_TORCH))
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("shapes", SHAPES)
def test_binary_vs_torch(kind, dt, shapes):
    a, b = rand(shapes[0], dt, 1), rand(shapes[1], dt, 2)
    if kind == "Divide":
        b = np.where(np.abs(b.astype(np.float32)) < 0.25, 1.0, b).astype(NP[dt])
    out_dt = "boolean" if kind == "GreaterEqual" else dt
    rank = max(len(shapes[0]), len(shapes[1]))
    (y,) = run_single(kind, [a, b], [(out_dt, [-1] * rank)])
    expect = to_numpy(BINARY_TORCH[kind](to_torch(a), to_torch(b)))
    assert y.shape == expect.shape
    if kind == "GreaterEqual":
        np.testing.assert_array_equal(y, expect)
    else:
        assert_close(y, expect, DataType(dt), ORACLE, what=f"{kind} {dt} {shapes}")


@pytest.mark.parametrize("kind", ["Add", "Subtract", "Multiply", "Divide"])
@pytest.mark.parametrize("dts", [("f32", "bf16"), ("f16", "f32")])
def test_mixed_precision_vs_torch(kind, dts):
    a, b = rand((3, 4), dts[0], 3), rand((4,), dts[1], 4, low=0.5, high=2.0)
    (y,) = run_single(kind, [a, b], [("f32", [-1, -1])])
    expect = to_numpy(BINARY_TORCH[kind](to_torch(a), to_torch(b)))  # torch promotes to f32
    assert_close(y, expect, DataType.f32, ORACLE, what=kind)


@pytest.mark.parametrize("kind", ["Add", "Subtract", "GreaterEqual"])
def test_s32_vs_torch(kind):
    a, b = rand((3, 4), "s32", 5), rand((3, 1), "s32", 6)
    (y,) = run_single(kind, [a, b], [("boolean" if kind == "GreaterEqual" else "s32", [-1, -1])])
    np.testing.assert_array_equal(y, BINARY_TORCH[kind](to_torch(a), to_torch(b)).numpy())


@pytest.mark.parametrize("kind", list(BINARY_TORCH))
def test_auto_broadcast_none_rejects_broadcasting(kind):
    out_dt = "boolean" if kind == "GreaterEqual" else "f32"
    for shapes in SHAPES[:-1]:
        with pytest.raises(InvalidShape):
            single_op_graph(kind, [("f32", shapes[0]), ("f32", shapes[1])], [(out_dt, [-1] * 3)],
                            {"auto_broadcast": "none"})
    a, b = rand((2, 3), "f32", 7), rand((2, 3), "f32", 8)
    (y,) = run_single(kind, [a, b], [(out_dt, [2, 3])], {"auto_broadcast": "none"})
    assert_close(y, to_numpy(BINARY_TORCH[kind](to_torch(a), to_torch(b))), DataType(out_dt), ORACLE, what=kind)


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("shapes", [((3, 1, 5), (2, 1, 4, 5), (3, 1, 5)), ((1, 1, 1, 8), (1,), (1, 3, 4, 8)),
                                    ((4, 5), (2, 3, 4, 5), (5,))])
def test_select_vs_torch(dt, shapes):
    cond = np.random.default_rng(9).random(shapes[0]) > 0.5
    a, b = rand(shapes[1], dt, 10), rand(shapes[2], dt, 11)
    (y,) = run_single("Select", [cond, a, b], [(dt, [-1] * 4)])
    expect = to_numpy(torch.where(torch.from_numpy(cond), to_torch(a), to_torch(b)))
    np.testing.assert_array_equal(y.astype(np.float32), expect.astype(np.float32))


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
    x = rand((3, 4, 5), dt, 12, low=0.6, high=1.4) * np.where(rand((3, 4, 5), "f32", 13) > 0, 1, -1).astype(NP[dt])
    rank = 3 if keep_dims else 3 - len(axes)
    (y,) = run_single(kind, [x], [(dt, [-1] * rank)], {"axes": axes, "keep_dims": keep_dims})
    expect = to_numpy(REDUCE_TORCH[kind](to_torch(x), axes, keep_dims))
    assert y.shape == expect.shape
    assert_close(y, expect, DataType(dt), ORACLE, what=f"{kind} {dt} {axes} {keep_dims}")


@pytest.mark.parametrize("kind", ["ReduceSum", "ReduceMax", "ReduceL2"])
def test_reduce_axes_input_vs_torch(kind):
    x = rand((2, 3, 4), "f32", 14)
    axes = np.array([-1, 0], np.int32)
    (y,) = run_single(kind, [x, axes], [("f32", [-1, -1, -1])], {"keep_dims": True})
    expect = to_numpy(REDUCE_TORCH[kind](to_torch(x), [-1, 0], True))
    assert_close(y, expect, DataType.f32, ORACLE, what=kind)


# ---------------------------------------------------------------------- shuffle
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_vs_torch(dt, axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] += i
    srcs = [rand(s, dt, 20 + i) for i, s in enumerate(shapes)]
    (y,) = run_single("Concat", srcs, [(dt, [-1] * 3)], {"axis": axis})
    expect = to_numpy(torch.cat([to_torch(s) for s in srcs], dim=axis))
    np.testing.assert_array_equal(y.astype(np.float32), expect.astype(np.float32))


@pytest.mark.parametrize("shape,special_zero,torch_shape", [
    ([0, -1], True, (2, 12)),
    ([0, 0, 2, 2], True, (2, 3, 2, 2)),
    ([-1, 0], True, (8, 3)),
    ([4, 6], False, (4, 6)),
    ([-1], False, (24,)),
    ([3, -1, 2], False, (3, 4, 2)),
])
def test_reshape_vs_torch(shape, special_zero, torch_shape):
    x = rand((2, 3, 4), "f32", 30)
    (y,) = run_single("StaticReshape", [x], [("f32", [-1] * len(shape))],
                      {"shape": shape, "special_zero": special_zero})
    np.testing.assert_array_equal(y, torch.reshape(to_torch(x), torch_shape).numpy())


@pytest.mark.parametrize("order", [[0, 2, 1, 3], [3, 2, 1, 0], [-1, 0, -3, 2], [-4, -3, -2, -1]])
def test_transpose_vs_torch(order):
    x = rand((2, 3, 4, 5), "bf16", 31)
    (y,) = run_single("StaticTranspose", [x], [("bf16", [-1] * 4)], {"order": order})
    np.testing.assert_array_equal(y.astype(np.float32), to_numpy(to_torch(x).permute(*order)))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_typecast_vs_torch(dt):
    rng = np.random.default_rng(32)
    # random bits over a wide range, plus exact ties between neighbours of the narrow type
    x = np.concatenate([rng.standard_normal(4096) * np.exp2(rng.integers(-20, 20, 4096)),
                        1 + (2 * np.arange(64) + 1) * 2.0 ** -11, [0.0, -0.0, np.inf, -np.inf, 1e6, 7e4]])
    x = x.astype(np.float32)
    (y,) = run_single("TypeCast", [x], [(dt, [-1])])
    expect = torch.from_numpy(x).to(torch_dtype(dt))
    np.testing.assert_array_equal(y.view(np.uint16), expect.view(torch.int16).numpy().view(np.uint16))
    (back,) = run_single("TypeCast", [y], [("f32", [-1])])
    np.testing.assert_array_equal(back, expect.float().numpy())
