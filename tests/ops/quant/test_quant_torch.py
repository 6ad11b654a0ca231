"""The references of the quantization ops against PyTorch (CPU)."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import NP, assert_close, run_one, to_numpy, torch_dtype

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:torch.quantize_per_tensor:UserWarning")
RNG = np.random.default_rng(11)
INT_RANGE = {"s4": (-8, 8), "u4": (0, 16), "u8": (0, 256), "s8": (-128, 128), "s32": (-300, 300)}


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
