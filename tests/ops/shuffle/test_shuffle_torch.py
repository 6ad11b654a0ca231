"""Shuffle references (Concat, StaticReshape, StaticTranspose, TypeCast) against PyTorch
CPU, each dtype computed by torch in its own precision."""
import numpy as np
import pytest

from support import NP, run_single, to_numpy, to_torch, torch_dtype, uniform

torch = pytest.importorskip("torch")


# ---------------------------------------------------------------------- shuffle
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_concat_vs_torch(dt, axis):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, s in enumerate(shapes):
        s[axis] += i
    srcs = [uniform(s, dt, 20 + i) for i, s in enumerate(shapes)]
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
    x = uniform((2, 3, 4), "f32", 30)
    (y,) = run_single("StaticReshape", [x], [("f32", [-1] * len(shape))],
                      {"shape": shape, "special_zero": special_zero})
    np.testing.assert_array_equal(y, torch.reshape(to_torch(x), torch_shape).numpy())


@pytest.mark.parametrize("order", [[0, 2, 1, 3], [3, 2, 1, 0], [-1, 0, -3, 2], [-4, -3, -2, -1]])
def test_transpose_vs_torch(order):
    x = uniform((2, 3, 4, 5), "bf16", 31)
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


@pytest.mark.parametrize("dt", ["s32", "s64", "boolean"])
def test_integer_views_and_casts_vs_torch(dt):
    """graphc's extension rows: integer and boolean views, and their cast to f32 (past 2^24:
    rounded to nearest even as torch converts)."""
    rng = np.random.default_rng(33)
    x = rng.random((2, 3, 4)) > 0.5 if dt == "boolean" else rng.integers(-(1 << 40), 1 << 40, (2, 3, 4)).astype(
        NP[dt])
    t = torch.from_numpy(x)
    (y,) = run_single("StaticTranspose", [x], [(dt, [-1] * 3)], {"order": [2, 0, 1]})
    np.testing.assert_array_equal(y, t.permute(2, 0, 1).numpy())
    (y,) = run_single("StaticReshape", [x], [(dt, [-1, -1])], {"shape": [6, -1], "special_zero": False})
    np.testing.assert_array_equal(y, t.reshape(6, -1).numpy())
    (y,) = run_single("TypeCast", [x], [("f32", [-1] * 3)])
    np.testing.assert_array_equal(y, t.float().numpy())
