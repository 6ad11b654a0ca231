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


COMPARE_TORCH = {"Greater": torch.gt, "Less": torch.lt, "LessEqual": torch.le, "Equal": torch.eq,
                 "NotEqual": torch.ne, "GreaterEqual": torch.ge}
INT_TORCH = {"Add": torch.add, "Subtract": torch.sub, "Multiply": torch.mul, **COMPARE_TORCH}


@pytest.mark.parametrize("dt", ["s32", "s64"])
@pytest.mark.parametrize("kind", list(INT_TORCH))
def test_integers_vs_torch(kind, dt):
    """torch's integer ops in the same type: exact, wrapping past its range."""
    a, b = uniform((3, 4), dt, 5), uniform((3, 1), dt, 6)
    info = np.iinfo(NP[dt])
    a[0, :3], b[0, 0] = [info.max, info.min, info.max // 2 + 7], info.max   # (a[0] op b[0] wraps)
    b[1, 0] = a[1, 1]   # (equal operands)
    out_dt = "boolean" if kind in COMPARE_TORCH else dt
    (y,) = run_single(kind, [a, b], [(out_dt, [-1, -1])])
    expect = INT_TORCH[kind](to_torch(a), to_torch(b)).numpy()
    assert y.dtype == expect.dtype
    np.testing.assert_array_equal(y, expect)


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("kind", [k for k in COMPARE_TORCH if k != "GreaterEqual"])
def test_comparisons_vs_torch(kind, dt):
    a, b = uniform((2, 3, 4), dt, 1), uniform((4,), dt, 2)
    a[0, 0] = b   # (equal operands)
    a.reshape(-1)[5] = np.nan
    (y,) = run_single(kind, [a, b], [("boolean", [-1, -1, -1])])
    np.testing.assert_array_equal(y, COMPARE_TORCH[kind](to_torch(a), to_torch(b)).numpy())


@pytest.mark.parametrize("kind,fn", [("LogicalAnd", torch.logical_and), ("LogicalOr", torch.logical_or),
                                     ("LogicalNot", torch.logical_not)])
def test_logical_vs_torch(kind, fn):
    rng = np.random.default_rng(3)
    ins = [rng.random((3, 1, 4)) > 0.5] + ([rng.random((2, 4)) > 0.5] if kind != "LogicalNot" else [])
    (y,) = run_single(kind, ins, [("boolean", [-1] * 3)])
    np.testing.assert_array_equal(y, fn(*[torch.from_numpy(x) for x in ins]).numpy())


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
