"""The reference of MatMul against PyTorch (CPU)."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import NP, assert_close, run_one, to_numpy, torch_dtype

torch = pytest.importorskip("torch")
RNG = np.random.default_rng(11)


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
