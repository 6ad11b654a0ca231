"""int8 MatMul and Convolution accumulate as oneDNN does, in s32: the kernels
multiply the integers ``q - zp`` and apply the scales to the exact sums
(graphc.codegen.quant.Factored).  The sums here pass 2^24, where an f32
accumulator (the GEMM of the dequantized values) loses bits: each test first
shows that, then that the compiled result equals the exact integer sum scaled,
computed independently with int64 numpy."""
import numpy as np
import pytest

import graphc
from graphc.builder import GraphBuilder
from graphc.codegen.conv_int8 import MIN_OCG
from graphc.codegen.quant import F32_EXACT

from support.fusion import dequantize

SX, ZX = 2.0 ** -6, 3           # src: u8, per tensor
ZW = [1, 0, -1, 2]              # weights: s8, per output channel (cycled)


def _scales(n):
    return [2.0 ** -(3 + i % 3) for i in range(n)]


def _big_ints(rng, shape, lo, hi, dtype):
    """Integers near the top of their range: products all of one sign, sums large."""
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


def _f32_gemm_is_inexact(xi, wi):
    """The f32 GEMM of the integers (what a kernel accumulating in f32 computes)
    differs from the exact sum: the test can tell the two apart."""
    exact = xi.astype(np.int64) @ wi.astype(np.int64)
    assert np.abs(exact).max() > F32_EXACT
    assert not np.array_equal((xi.astype(np.float32) @ wi.astype(np.float32)).astype(np.int64), exact)
    return exact


@pytest.mark.parametrize("transpose_b", [False, True])
def test_int8_matmul_sums_exactly_past_2_to_24(transpose_b):
    M, K, N = 12, 3000, 20
    rng = np.random.default_rng(0)
    x = _big_ints(rng, (M, K), 230, 255, np.uint8)
    w = _big_ints(rng, (K, N), 100, 127, np.int8)
    zw = [ZW[i % 4] for i in range(N)]
    b = GraphBuilder()
    tx, tw = b.tensor("u8", [M, K]), b.tensor("s8", [N, K] if transpose_b else [K, N])
    dx = dequantize(b, tx, {"qtype": "per_tensor", "scales": [SX], "zps": [ZX]})
    dw = dequantize(b, tw, {"qtype": "per_channel", "axis": 0 if transpose_b else 1, "scales": _scales(N),
                            "zps": zw})
    b.op("MatMul", [dx, dw], out=[("f32", [M, N])], attrs={"transpose_b": transpose_b})
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert len(p.ops) == 3
    exact = _f32_gemm_is_inexact(x.astype(np.int64) - ZX, w.astype(np.int64) - np.array(zw))
    want = exact.astype(np.float64) * SX * np.array(_scales(N))
    got = graphc.compile(g).run({tx.id: x, tw.id: np.ascontiguousarray(w.T) if transpose_b else w})
    (y,) = got.values()
    np.testing.assert_array_equal(y, want.astype(np.float32))


def test_int8_matmul_quantized_output_matches_the_reference():
    """The same sums -> ReLU -> Quantize u8: the reference (float64) and the kernel agree bit for bit."""
    M, K, N = 8, 2100, 16
    rng = np.random.default_rng(1)
    x = _big_ints(rng, (M, K), 200, 255, np.uint8)
    w = rng.integers(-128, 128, size=(K, N)).astype(np.int8)
    b = GraphBuilder()
    tx, tw = b.tensor("u8", [M, K]), b.tensor("s8", [K, N])
    dx = dequantize(b, tx, {"qtype": "per_tensor", "scales": [SX], "zps": [ZX]})
    dw = dequantize(b, tw, {"qtype": "per_tensor", "scales": [2.0 ** -4]})
    y = b.op("MatMul", [dx, dw], out=[("f32", [M, N])])[0]
    y = b.op("ReLU", [y])[0]
    b.op("Quantize", [y], out=[("u8", [M, N])], attrs={"qtype": "per_tensor", "scales": [2.0 ** 6], "zps": [0]})
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert len(p.ops) == 5
    inputs = {tx.id: x, tw.id: w}
    want = graphc.reference.run(g, inputs)
    got = graphc.compile(g).run(inputs)
    for tid in want:
        np.testing.assert_array_equal(got[tid], want[tid])


def _conv_int64(xi, wi):
    """Exact int64 3x3 convolution, pad 1, NCHW x OIHW (the integers q - zp; the
    padding is a dequantized 0, so an integer 0)."""
    n, c, h, w = xi.shape
    xp = np.pad(xi, ((0, 0), (0, 0), (1, 1), (1, 1)))
    out = np.zeros((n, wi.shape[0], h, w), np.int64)
    for ky in range(3):
        for kx in range(3):
            out += np.einsum("nchw,oc->nohw", xp[:, :, ky:ky + h, kx:kx + w], wi[:, :, ky, kx])
    return out


@pytest.mark.parametrize("fmt,C", [("NCX", 96), ("NXC", 96), ("NXC", 24)], ids=["NCX-runs", "NXC-runs", "NXC-one-run"])
def test_int8_convolution_sums_exactly(fmt, C):
    """The exact f32 roads (the int8 tile's convolutions: tests/ops/conv/test_conv_int8_compiled.py;
    6 output channels are too few for it): C = 96: K = 864 integers per sum, past one
    exact run (im2col in runs); C = 24: one run (the shifted GEMMs, no Winograd for
    integers)."""
    N, H, W, O = 2, 5, 6, 6
    assert O < MIN_OCG
    rng = np.random.default_rng(2)
    x = _big_ints(rng, (N, C, H, W), 230, 255, np.uint8)
    wt = _big_ints(rng, (O, C, 3, 3), 100, 127, np.int8)
    zw = [ZW[i % 4] for i in range(O)]
    xi = x.astype(np.int64) - ZX
    exact = _conv_int64(xi, wt.astype(np.int64) - np.array(zw)[:, None, None, None])
    if C == 96:
        assert np.abs(exact).max() > F32_EXACT
    want = exact * SX * np.array(_scales(O))[None, :, None, None]
    b = GraphBuilder()
    xs = [N, C, H, W] if fmt == "NCX" else [N, H, W, C]
    ys = [N, O, H, W] if fmt == "NCX" else [N, H, W, O]
    tx, tw = b.tensor("u8", xs), b.tensor("s8", [O, C, 3, 3])
    dx = dequantize(b, tx, {"qtype": "per_tensor", "scales": [SX], "zps": [ZX]})
    dw = dequantize(b, tw, {"qtype": "per_channel", "axis": 0, "scales": _scales(O), "zps": zw})
    b.op("Convolution", [dx, dw], out=[("f32", ys)],
         attrs={"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1],
                "groups": 1, "data_format": fmt, "weights_format": "OIX"})
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert len(p.ops) == 3
    xin = x if fmt == "NCX" else np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    (y,) = graphc.compile(g).run({tx.id: xin, tw.id: wt}).values()
    y = y if fmt == "NCX" else y.transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(y, want.astype(np.float32))


def _conv_transpose_int64(xi, wi, s):
    """Exact int64 ConvTranspose, no pads: x [N, C, H, W], OIX weights [O, C, 3, 3]."""
    n, c, h, w = xi.shape
    out = np.zeros((n, wi.shape[0], (h - 1) * s + 3, (w - 1) * s + 3), np.int64)
    for ky in range(3):
        for kx in range(3):
            out[:, :, ky:ky + (h - 1) * s + 1:s, kx:kx + (w - 1) * s + 1:s] += \
                np.einsum("nchw,oc->nohw", xi, wi[:, :, ky, kx])
    return out


@pytest.mark.parametrize("stride,C", [(2, 600), (2, 40), (1, 96)], ids=["strided-runs", "strided", "unit-runs"])
def test_int8_conv_transpose_sums_exactly(stride, C):
    """Strided: col2im of exact column sums (in runs past 2^24 / bound products) into
    an f64 accumulator; unit strides: the forward roads in exact runs."""
    N, H, W, O = 1, 3, 4, 6
    rng = np.random.default_rng(3)
    x = _big_ints(rng, (N, C, H, W), 230, 255, np.uint8)
    wt = _big_ints(rng, (O, C, 3, 3), 100, 127, np.int8)
    zw = [ZW[i % 4] for i in range(O)]
    exact = _conv_transpose_int64(x.astype(np.int64) - ZX, wt.astype(np.int64) - np.array(zw)[:, None, None, None],
                                  stride)
    if C != 40:
        assert np.abs(exact).max() > F32_EXACT
    want = exact * SX * np.array(_scales(O))[None, :, None, None]
    b = GraphBuilder()
    tx, tw = b.tensor("u8", [N, C, H, W]), b.tensor("s8", [O, C, 3, 3])
    dx = dequantize(b, tx, {"qtype": "per_tensor", "scales": [SX], "zps": [ZX]})
    dw = dequantize(b, tw, {"qtype": "per_channel", "axis": 0, "scales": _scales(O), "zps": zw})
    b.op("ConvTranspose", [dx, dw], out=[("f32", list(want.shape))],
         attrs={"strides": [stride] * 2, "pads_begin": [0, 0], "pads_end": [0, 0], "dilations": [1, 1],
                "data_format": "NCX", "weights_format": "OIX"})
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert len(p.ops) == 3
    (y,) = graphc.compile(g).run({tx.id: x, tw.id: wt}).values()
    np.testing.assert_array_equal(y, want.astype(np.float32))


@pytest.mark.parametrize("src_dt,w_dt", [("s8", "s8"), ("u8", "u8"), ("s8", "u8")])
def test_int8_matmul_every_signedness(src_dt, w_dt):
    """MKL's int8 GEMM takes u8 x s8: other pairs are shifted by 128 into it and the
    shift folded into the zero points; sums past 2^24, batched src, bit for bit."""
    B, M, K, N = 2, 9, 1500, 12
    rng = np.random.default_rng(4)
    lo_x, hi_x = (100, 127) if src_dt == "s8" else (200, 255)
    lo_w, hi_w = (-128, -100) if w_dt == "s8" else (220, 255)
    x = _big_ints(rng, (B, M, K), lo_x, hi_x, np.dtype(src_dt.replace("s", "int").replace("u", "uint")))
    w = _big_ints(rng, (K, N), lo_w, hi_w, np.dtype(w_dt.replace("s", "int").replace("u", "uint")))
    zx, zw = -2 if src_dt == "s8" else 5, [ZW[i % 4] + (0 if w_dt == "s8" else 7) for i in range(N)]
    exact = (x.astype(np.int64) - zx) @ (w.astype(np.int64) - np.array(zw))
    assert np.abs(exact).max() > F32_EXACT
    b = GraphBuilder()
    tx, tw = b.tensor(src_dt, [B, M, K]), b.tensor(w_dt, [K, N])
    dx = dequantize(b, tx, {"qtype": "per_tensor", "scales": [SX], "zps": [zx]})
    dw = dequantize(b, tw, {"qtype": "per_channel", "axis": 1, "scales": _scales(N), "zps": zw})
    b.op("MatMul", [dx, dw], out=[("f32", [B, M, N])])
    g = b.finalize()
    (y,) = graphc.compile(g).run({tx.id: x, tw.id: w}).values()
    np.testing.assert_array_equal(y, (exact * SX * np.array(_scales(N))).astype(np.float32))


def test_int8_matmul_sums_past_s32_whatever_the_zero_points():
    """The tile sums u8 x s8 products of the quantized values themselves (the zero
    points compensated after): with src's zero point 128 the centred values are
    small, yet 255 x -128 summed 70,000 times passes s32. The sum stays exact."""
    M, K, N = 2, 70000, 8
    b = GraphBuilder()
    tx, tw = b.tensor("u8", [M, K]), b.tensor("s8", [K, N])
    dx = dequantize(b, tx, {"qtype": "per_tensor", "scales": [2.0 ** -4], "zps": [128]})
    dw = dequantize(b, tw, {"qtype": "per_tensor", "scales": [2.0 ** -4], "zps": [0]})
    b.op("MatMul", [dx, dw], out=[("f32", [M, N])])
    g = b.finalize()
    x, w = np.full((M, K), 255, np.uint8), np.full((K, N), -128, np.int8)
    (y,) = graphc.compile(g).run({tx.id: x, tw.id: w}).values()
    np.testing.assert_array_equal(y, np.full((M, N), 127.0 * -128 * K * 2.0 ** -8, np.float32))
