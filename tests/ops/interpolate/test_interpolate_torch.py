"""The references of Interpolate and InterpolateBackward against PyTorch (CPU).

Interpolate ``nearest`` with half_pixel picks src index floor((x + 0.5) * src/dst),
the doc's coordinate rounded half up; that is torch's 'nearest-exact'.  Torch's
'nearest' floors x * src/dst instead (a different rule, see
test_torch_nearest_is_a_different_rule); align_corners nearest has no torch
counterpart and is checked against hand values in test_interpolate.py.
"""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import NP, assert_close, run_one, to_numpy, to_torch, torch_dtype

torch = pytest.importorskip("torch")
F = torch.nn.functional
RNG = np.random.default_rng(11)


# =================================================================== Interpolate
def _torch_mode(mode, nspatial):
    if mode == "nearest":
        return "nearest-exact"
    return {1: "linear", 2: "bilinear", 3: "trilinear"}[nspatial]


CASES = [  # (NCX src shape, dst spatial dims)
    ([2, 3, 5], [9]), ([2, 3, 9], [4]), ([1, 2, 3, 11], [5, 11]), ([2, 2, 7, 4], [6, 9]),
    ([1, 2, 2, 4, 6], [4, 3, 7]), ([1, 1, 3, 5, 2], [2, 8, 2]),
]


@pytest.mark.parametrize("shape, sizes", CASES)
@pytest.mark.parametrize("mode, ctm", [("nearest", "half_pixel"), ("linear", "half_pixel"),
                                       ("linear", "align_corners"), ("bilinear", "half_pixel"),
                                       ("trilinear", "align_corners")])
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_interpolate_and_backward_vs_torch(shape, sizes, mode, ctm, fmt):
    n = len(shape)
    x = RNG.standard_normal(shape)
    tx = torch.tensor(x, requires_grad=True)
    align = None if mode == "nearest" else ctm == "align_corners"
    ty = F.interpolate(tx, size=sizes, mode=_torch_mode(mode, n - 2), align_corners=align)
    dy = RNG.standard_normal(ty.shape)
    ty.backward(torch.tensor(dy))
    # NXC: channels last
    perm = [0, *range(2, n), 1] if fmt == "NXC" else list(range(n))
    inv = list(np.argsort(perm))
    attrs = {"mode": mode, "coordinate_transformation_mode": ctm, "sizes": sizes, "data_format": fmt}
    xs, dys = x.transpose(perm).astype(np.float32), dy.transpose(perm).astype(np.float32)
    got = run_one("Interpolate", [("f32", list(xs.shape))], [("f32", [-1] * n)], attrs, xs)
    assert_close(got.transpose(inv), ty.detach().numpy(), "f32", ORACLE, "Interpolate")
    dx = run_one("InterpolateBackward", [("f32", list(xs.shape)), ("f32", list(dys.shape))], [("f32", [-1] * n)],
                 attrs, xs, dys)
    assert_close(dx.transpose(inv), tx.grad.numpy(), "f32", ORACLE, "InterpolateBackward")


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_interpolate_low_precision_vs_torch(dt):
    x = RNG.standard_normal((2, 3, 4, 6)).astype(NP[dt])
    got = run_one("Interpolate", [(dt, [2, 3, 4, 6])], [(dt, [2, 3, 7, 3])],
                  {"mode": "bilinear", "sizes": [7, 3], "data_format": "NCX"}, x)
    want = F.interpolate(to_torch(x.astype(np.float32), "f32"), size=[7, 3], mode="bilinear", align_corners=False)
    assert_close(got, to_numpy(want.to(torch_dtype(dt)), np.float32), dt, ORACLE, "Interpolate")


@pytest.mark.parametrize("shape, scales", [([2, 3, 3, 11], [1.66667, 1.0]), ([1, 2, 21], [0.809524]),
                                           ([1, 1, 2, 8, 12], [1.5, 0.625, 0.583333])])
def test_interpolate_scales_vs_torch_recomputed_scale(shape, scales):
    # the doc's coordinate map uses dst_dim / src_dim, i.e. torch's recompute_scale_factor=True
    x = RNG.standard_normal(shape).astype(np.float32)
    got = run_one("Interpolate", [("f32", shape)], [("f32", [-1] * len(shape))],
                  {"mode": "linear", "scales": scales, "data_format": "NCX"}, x)
    want = F.interpolate(to_torch(x), scale_factor=scales, mode=_torch_mode("linear", len(scales)), align_corners=False,
                         recompute_scale_factor=True)
    assert_close(got, to_numpy(want, np.float32), "f32", ORACLE, "Interpolate")


def test_torch_nearest_is_a_different_rule():
    # 3 -> 5: graphc (doc coordinate rounded half up) picks 0 0 1 2 2; torch 'nearest' floors x * 3/5: 0 0 1 1 2
    x = np.array([[[10.0, 20.0, 40.0]]], np.float32)
    got = run_one("Interpolate", [("f32", [1, 1, 3])], [("f32", [1, 1, 5])],
                  {"mode": "nearest", "sizes": [5], "data_format": "NCX"}, x)
    np.testing.assert_array_equal(got.ravel(), F.interpolate(to_torch(x), size=5, mode="nearest-exact").numpy().ravel())
    np.testing.assert_array_equal(F.interpolate(to_torch(x), size=5, mode="nearest").numpy().ravel(),
                                  [10, 10, 20, 20, 40])
