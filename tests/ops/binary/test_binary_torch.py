"""Binary op references against PyTorch CPU, each dtype computed by torch in its own
precision."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidShape
from graphc.tolerances import ORACLE
from graphc.types import DataType
from support import NP, assert_close, run_single, to_numpy, to_torch, uniform

torch = pytest.importorskip("torch")


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
    a, b = uniform(shapes[0], dt, 1), uniform(shapes[1], dt, 2)
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
    a, b = uniform((3, 4), dts[0], 3), uniform((4,), dts[1], 4, low=0.5, high=2.0)
    (y,) = run_single(kind, [a, b], [("f32", [-1, -1])])
    expect = to_numpy(BINARY_TORCH[kind](to_torch(a), to_torch(b)))  # torch promotes to f32
    assert_close(y, expect, DataType.f32, ORACLE, what=kind)


@pytest.mark.parametrize("kind", ["Add", "Subtract", "GreaterEqual"])
def test_s32_vs_torch(kind):
    a, b = uniform((3, 4), "s32", 5), uniform((3, 1), "s32", 6)
    (y,) = run_single(kind, [a, b], [("boolean" if kind == "GreaterEqual" else "s32", [-1, -1])])
    np.testing.assert_array_equal(y, BINARY_TORCH[kind](to_torch(a), to_torch(b)).numpy())


@pytest.mark.parametrize("kind", list(BINARY_TORCH))
def test_auto_broadcast_none_rejects_broadcasting(kind):
    out_dt = "boolean" if kind == "GreaterEqual" else "f32"
    for shapes in SHAPES[:-1]:
        with pytest.raises(InvalidShape):
            single_op_graph(kind, [("f32", shapes[0]), ("f32", shapes[1])], [(out_dt, [-1] * 3)],
                            {"auto_broadcast": "none"})
    a, b = uniform((2, 3), "f32", 7), uniform((2, 3), "f32", 8)
    (y,) = run_single(kind, [a, b], [(out_dt, [2, 3])], {"auto_broadcast": "none"})
    assert_close(y, to_numpy(BINARY_TORCH[kind](to_torch(a), to_torch(b))), DataType(out_dt), ORACLE, what=kind)


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("shapes", [((3, 1, 5), (2, 1, 4, 5), (3, 1, 5)), ((1, 1, 1, 8), (1,), (1, 3, 4, 8)),
                                    ((4, 5), (2, 3, 4, 5), (5,))])
def test_select_vs_torch(dt, shapes):
    cond = np.random.default_rng(9).random(shapes[0]) > 0.5
    a, b = uniform(shapes[1], dt, 10), uniform(shapes[2], dt, 11)
    (y,) = run_single("Select", [cond, a, b], [(dt, [-1] * 4)])
    expect = to_numpy(torch.where(torch.from_numpy(cond), to_torch(a), to_torch(b)))
    np.testing.assert_array_equal(y.astype(np.float32), expect.astype(np.float32))
