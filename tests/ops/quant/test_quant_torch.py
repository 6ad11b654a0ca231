"""The references of MatMul, the quantization ops, Interpolate and
InterpolateBackward against PyTorch (CPU).

Interpolate ``nearest`` with half_pixel picks src index floor((x + 0.5) * src/dst),
the doc's coordinate rounded half up; that is torch's 'nearest-exact'.  Torch's
'nearest' floors x * src/dst instead (a different rule, see
test_torch_nearest_is_a_different_rule); align_corners nearest has no torch
counterpart and is checked against hand values in tests/ops/interpolate.
"""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import NP, assert_close, run_one, to_numpy, to_torch, torch_dtype

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
F = torch.nn.functional
RNG = np.random.default_rng(11)
INT_RANGE = {"s4": (-8, 8), "u4": (0, 16), "u8": (0, 256), "s8": (-128, 128), "s32": (-300, 300)}


# ======================================================================== MatMul
@pytest.mark.parametrize("src, wei, ta, tb, bias", [
    ([3, 4], [4, 5], False, False, None),
    ([4, 3], [5, 4], True, True, [5]),
    ([2, 1, 3, 4], [5, 6, 4], False, True, [1, 6]),
    ([6, 3, 4], [4, 2], False, False, [6, 3, 2]),
    ([4], [2, 4, 5], True, False, None),
    ([2, 3, 4], [4], False, True, [3]),
    ([7], [7], False, False, None),
])
@pytest.mark.parametrize("dt, dst_dt", [("f32", "f32"), ("bf16", "bf16"), ("bf16", "f32"), ("f16", "f16")])
def test_matmul_vs_torch(src, wei, ta, tb, bias, dt, dst_dt):
    arrays = [RNG.standard_normal(s).astype(NP[dt]) for s in [src, wei] + ([bias] if bias else [])]
    ins = [(dt, s) for s in [src, wei] + ([bias] if bias else [])]
    got = run_one("MatMul", ins, [(dst_dt, None)], {"transpose_a": ta, "transpose_b": tb}, *arrays)
    a, b = (torch.from_numpy(x.astype(np.float32)).double() for x in arrays[:2])
    a = a.transpose(-1, -2) if ta and a.dim() > 1 else a
    b = b.transpose(-1, -2) if tb and b.dim() > 1 else b
    want = torch.matmul(a, b)
    if bias:
        want = want + torch.from_numpy(arrays[2].astype(np.float64))
    assert_close(got, to_numpy(want.to(torch_dtype(dst_dt)), np.float32), dst_dt, ORACLE, "MatMul")


# =================================================================== quantization
# power-of-two scales: torch multiplies by 1/scale, graphc divides; both exact then
@pytest.mark.parametrize("qdt, tdt, zp", [("u8", torch.quint8, 100), ("s8", torch.qint8, -3)])
def test_quantize_dequantize_per_tensor_vs_torch(qdt, tdt, zp):
    x = (RNG.standard_normal((2, 3, 5)) * 40).astype(np.float32)
    x[0, 0, :4] = [0.125, 0.375, -0.625, 1000.0]   # ties (to even) and saturation
    got = run_one("Quantize", [("f32", [2, 3, 5])], [(qdt, [2, 3, 5])], {"scales": [0.25], "zps": [zp]}, x)
    q = torch.quantize_per_tensor(torch.from_numpy(x), 0.25, zp, tdt)
    np.testing.assert_array_equal(got.astype(np.int64), q.int_repr().numpy().astype(np.int64))
    back = run_one("Dequantize", [(qdt, [2, 3, 5])], [("f32", [2, 3, 5])], {"scales": [0.25], "zps": [zp]}, got)
    np.testing.assert_array_equal(back, q.dequantize().numpy())


@pytest.mark.parametrize("axis", [0, 2, -1])
def test_quantize_dequantize_per_channel_vs_torch(axis):
    shape = (3, 2, 3)
    x = (RNG.standard_normal(shape) * 30).astype(np.float32)
    scales = [0.5, 0.125, 2.0]
    zps = [5, -7, 0]
    attrs = {"qtype": "per_channel", "axis": axis, "scales": scales, "zps": zps}
    got = run_one("Quantize", [("f32", list(shape))], [("s8", list(shape))], attrs, x)
    q = torch.quantize_per_channel(torch.from_numpy(x), torch.tensor(scales, dtype=torch.float64),
                                   torch.tensor(zps), axis % 3, torch.qint8)
    np.testing.assert_array_equal(got, q.int_repr().numpy())
    back = run_one("Dequantize", [("s8", list(shape))], [("f32", list(shape))], attrs, got)
    np.testing.assert_array_equal(back, q.dequantize().numpy())


@pytest.mark.parametrize("f8, tdt", [("f8_e4m3", torch.float8_e4m3fn), ("f8_e5m2", torch.float8_e5m2)])
def test_quantize_f8_vs_torch_cast(f8, tdt):
    x = RNG.uniform(-100, 100, (4, 16)).astype(np.float32)
    got = run_one("Quantize", [("f32", [4, 16])], [(f8, [4, 16])], {"scales": [0.5]}, x)
    want = (torch.from_numpy(x) / 0.5).to(tdt)
    np.testing.assert_array_equal(got.astype(np.float32), want.float().numpy())
    back = run_one("Dequantize", [(f8, [4, 16])], [("f32", [4, 16])], {"scales": [0.5]}, got)
    np.testing.assert_array_equal(back, (want.float() * 0.5).numpy())


def test_dynamic_quantize_per_channel_vs_torch():
    x = (RNG.standard_normal((2, 4, 3)) * 50).astype(np.float32)
    scales = np.array([0.25, 1.0, 0.5, 4.0], np.float32)
    zps = np.array([0, 100, 128, 255], np.int32)
    got = run_one("DynamicQuantize", [("f32", [2, 4, 3]), ("f32", [4]), ("s32", [4])], [("u8", [2, 4, 3])],
                  {"qtype": "per_channel", "axis": 1}, x, scales, zps)
    q = torch.quantize_per_channel(torch.from_numpy(x), torch.from_numpy(scales).double(),
                                   torch.from_numpy(zps).long(), 1, torch.quint8)
    np.testing.assert_array_equal(got, q.int_repr().numpy())


@pytest.mark.parametrize("src_dt, zp_dt, dst_dt", [("s4", "s4", "f32"), ("u4", "u4", "bf16"), ("u8", "s32", "f16"),
                                                   ("s8", "u8", "f32")])
def test_dynamic_dequantize_per_group_vs_torch_math(src_dt, zp_dt, dst_dt):
    src = RNG.integers(*INT_RANGE[src_dt], (1, 3, 8, 4)).astype(NP[src_dt])
    scales = RNG.uniform(0.01, 1, (1, 3, 2, 4)).astype(NP[dst_dt])
    zps = RNG.integers(*INT_RANGE[zp_dt], (1, 3, 2, 4)).astype(NP[zp_dt])
    got = run_one("DynamicDequantize", [(src_dt, [1, 3, 8, 4]), (dst_dt, [1, 3, 2, 4]), (zp_dt, [1, 3, 2, 4])],
                  [(dst_dt, [1, 3, 8, 4])], {"qtype": "per_group", "group_shape": [1, 1, 4, 1], "axis": 2},
                  src, scales, zps)
    s = torch.from_numpy(scales.astype(np.float64)).repeat_interleave(4, dim=2)
    z = torch.from_numpy(zps.astype(np.int64)).repeat_interleave(4, dim=2)
    want = ((torch.from_numpy(src.astype(np.int64)) - z) * s).to(torch_dtype(dst_dt))
    assert_close(got, to_numpy(want, np.float32), dst_dt, ORACLE, "DynamicDequantize")


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
