"""int8 forward convolutions (static u8/s8 Dequantizes of src and weights) on graphc's
u8 x s8 tile (graphc.codegen.conv_int8) against graphc's numpy reference, bit for
bit: the scales are powers of two, so the exact integer sums scaled are the
reference's float64 values.  Every signedness (s8 src and u8 weights shifted into
u8 x s8), zero points on both sides (src's in the padding), windows, strides,
dilations, groups, both layouts, T*Cg off the tile's steps, 1x1 NXC src read in
place, post-ops and a Quantize; and the convolutions the tile does not take (few
output channels per group, sums past s32) on the exact f32 roads."""
import numpy as np
import pytest

from graphc.builder import GraphBuilder
from graphc.codegen.blas_import import int8_tile_gemm
from graphc.codegen.conv_int8 import MIN_OCG
from graphc.codegen.gemm_int8 import fits_s32

from support import check_compiled
from support.compiled import only_compiled
from support.fusion import dequantize
from support.graphs import strides

ON_TILE = int8_tile_gemm()


def _qconv(n, c, oc, hw, k, *, src="u8", wei="s8", fmt="NCX", stride=1, pad=0, dil=1, groups=1, zx=3,
           wzps=True, post=False, bias=False, gaps=False):
    """Dequantize(src, per tensor) x Dequantize(weights, per output channel) ->
    Convolution [-> BiasAdd -> ReLU -> Quantize u8]; ``gaps``: src laid out with
    every dim twice as far apart as a dense layout puts it (junk between)."""
    b = GraphBuilder()
    xs = [n, c, *hw] if fmt == "NCX" else [n, *hw, c]
    x = b.tensor(src, xs, strides(xs, range(len(xs)), pad=2) if gaps else None)
    w = b.tensor(wei, [oc, c // groups, *k])
    dx = dequantize(b, x, {"qtype": "per_tensor", "scales": [2.0 ** -5], "zps": [zx]})
    shift = 128 if wei == "u8" else 0
    dw = dequantize(b, w, {"qtype": "per_channel", "axis": 0, "scales": [2.0 ** -(3 + j % 3) for j in range(oc)],
                           "zps": [(j % 3 - 1 if wzps else 0) + shift for j in range(oc)]})
    nd = len(hw)
    ins = [dx, dw] + ([b.tensor("f32", [oc])] if bias else [])
    out = [((h + 2 * pad - dil * (kk - 1) - 1) // stride + 1) for h, kk in zip(hw, k)]
    ys = [n, oc, *out] if fmt == "NCX" else [n, *out, oc]
    y = b.op("Convolution", ins, out=[("f32", ys)],
             attrs={"strides": [stride] * nd, "pads_begin": [pad] * nd, "pads_end": [pad] * nd,
                    "dilations": [dil] * nd, "groups": groups, "data_format": fmt, "weights_format": "OIX"})[0]
    if post:
        y = b.op("ReLU", [y])[0]
        b.op("Quantize", [y], out=[("u8", ys)], attrs={"qtype": "per_tensor", "scales": [2.0 ** 2], "zps": [1]})
    return b.finalize()


CASES = {
    "3x3-pad": dict(n=2, c=16, oc=32, hw=(7, 6), k=(3, 3), pad=1),
    "3x3-stride2-dil": dict(n=1, c=24, oc=40, hw=(11, 9), k=(3, 3), pad=2, stride=2, dil=2),
    "1x1": dict(n=2, c=64, oc=64, hw=(9, 10), k=(1, 1)),
    "7x7-s2-c3": dict(n=1, c=3, oc=16, hw=(20, 17), k=(7, 7), pad=3, stride=2),
    "groups": dict(n=1, c=64, oc=96, hw=(6, 6), k=(3, 3), pad=1, groups=4),
    "1d": dict(n=2, c=20, oc=9, hw=(30,), k=(5,), pad=2),
    "3d": dict(n=1, c=8, oc=16, hw=(4, 5, 6), k=(2, 3, 3), pad=1),
    "k-past-a-step": dict(n=1, c=70, oc=33, hw=(5, 5), k=(1, 1)),
    "windows-in-padding-alone": dict(n=1, c=16, oc=16, hw=(4, 5), k=(3, 3), pad=4),
}


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
@pytest.mark.parametrize("case", list(CASES))
def test_int8_convolutions_exact(case, fmt):
    g = _qconv(**CASES[case], fmt=fmt)
    check_compiled(g, exact=True, seed=len(case))
    if ON_TILE:
        assert "int8_gemm" in only_compiled(g).get_impl_info()


@pytest.mark.parametrize("src,wei", [("s8", "s8"), ("u8", "u8"), ("s8", "u8"), ("u8", "s8")])
@pytest.mark.parametrize("wzps", [True, False])
def test_every_signedness_and_zero_points(src, wei, wzps):
    """s8 src (+128) and u8 weights (-128) are shifted into the tile's u8 x s8, their
    shifts folded into the zero points; src's zero point fills the padding."""
    g = _qconv(1, 32, 32, (6, 7), (3, 3), src=src, wei=wei, pad=1, zx=-5 if src == "s8" else 7, wzps=wzps,
               post=True, bias=True)
    check_compiled(g, exact=True, seed=3)
    if ON_TILE:
        assert "int8_gemm" in only_compiled(g).get_impl_info()


#: channels per group whole steps of AMX-INT8's tile (64 of k) and weights without zero points
EVERY_TAP = {
    "3x3-pad": dict(n=2, c=64, oc=40, hw=(9, 10), k=(3, 3), pad=1, post=True, bias=True),
    "groups-dil": dict(n=1, c=128, oc=64, hw=(8, 7), k=(3, 3), pad=2, dil=2, groups=2),
    "s8-src": dict(n=1, c=64, oc=32, hw=(6, 7), k=(3, 3), pad=1, src="s8", zx=-5),
    "1d": dict(n=2, c=64, oc=32, hw=(30,), k=(5,), pad=2),
    "3d": dict(n=1, c=64, oc=16, hw=(3, 4, 5), k=(2, 3, 3), pad=1),
    "windows-in-padding-alone": dict(n=1, c=64, oc=16, hw=(4, 5), k=(3, 3), pad=4),
}


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
@pytest.mark.parametrize("case", list(EVERY_TAP))
def test_every_tap_summed_in_the_tile(case, fmt):
    """Unit strides, s8 weights without zero points, a group's channels whole steps
    of AMX's tile: virtual rows of one position each (src's zero point in the
    padding), every tap a row offset, and one tile call sums a tile of C's taps
    in the tile registers (``u8s8_taps``); exact as the im2col road is."""
    from graphc.codegen import int8_gemm
    g = _qconv(**EVERY_TAP[case], fmt=fmt, wzps=False)
    check_compiled(g, exact=True, seed=len(case))
    if ON_TILE:
        cp = only_compiled(g)
        assert "int8_gemm" in cp.get_impl_info()
        assert ("u8s8_taps(" in cp.source) == int8_gemm.AMX


def test_nxc_1x1_src_read_in_place():
    """A 1x1 window over NXC u8 src: the tile reads src's rows, no panel of columns."""
    g = _qconv(2, 64, 64, (8, 8), (1, 1), fmt="NXC", post=True)
    check_compiled(g, exact=True, seed=5)
    if ON_TILE:
        cp = only_compiled(g)
        assert "int8_gemm" in cp.get_impl_info() and "u8s8_block(" in cp.source
        assert "cols" not in cp.source


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
@pytest.mark.parametrize("k,pad", [(1, 0), (3, 1)])
def test_src_with_gaps(fmt, k, pad):
    """src whose dims lie apart (junk between): read through its strides, in place
    where the tile can (1x1 NXC: rows twice a row's channels apart)."""
    g = _qconv(2, 32, 32, (6, 5), (k, k), pad=pad, fmt=fmt, gaps=True, post=True)
    check_compiled(g, exact=True, seed=k)
    if ON_TILE:
        assert "int8_gemm" in only_compiled(g).get_impl_info()


def test_few_output_channels_per_group_stay_on_the_exact_roads():
    g = _qconv(1, 8, MIN_OCG - 1, (6, 6), (3, 3), pad=1)
    check_compiled(g, exact=True, seed=6)
    assert "int8_gemm" not in only_compiled(g).get_impl_info()


def test_sums_past_s32_stay_on_the_exact_roads():
    """255 * 128 * K past 2^31: the tile's s32 sums could wrap; the exact f32 runs take it,
    with extreme values that would overflow s32."""
    c, oc = 66000, MIN_OCG
    assert not fits_s32(c) and fits_s32(c // 2)
    b = GraphBuilder()
    x, w = b.tensor("u8", [1, c, 1, 1]), b.tensor("s8", [oc, c, 1, 1])
    dx = dequantize(b, x, {"qtype": "per_tensor", "scales": [2.0 ** -5], "zps": [0]})
    dw = dequantize(b, w, {"qtype": "per_tensor", "scales": [2.0 ** -3], "zps": [0]})
    b.op("Convolution", [dx, dw], out=[("f32", [1, oc, 1, 1])],
         attrs={"strides": [1, 1], "pads_begin": [0, 0], "pads_end": [0, 0], "dilations": [1, 1], "groups": 1,
                "data_format": "NCX", "weights_format": "OIX"})
    g = b.finalize()
    inputs = {x.id: np.full((1, c, 1, 1), 255, np.uint8), w.id: np.full((oc, c, 1, 1), -128, np.int8)}
    (y,) = check_compiled(g, inputs, exact=True).values()
    np.testing.assert_array_equal(y.reshape(-1), np.full(oc, 255.0 * -128 * c * 2.0 ** -8, np.float32))
    assert "int8_gemm" not in only_compiled(g).get_impl_info()
