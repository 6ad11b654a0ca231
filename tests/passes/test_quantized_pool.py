"""Quantized pooling as one partition (oneDNN's x8_pool_post_ops and
x8_pool_add_post_ops_cpu, pool_post_ops.cpp): an int8 per-tensor Dequantize ->
AvgPool/MaxPool -> [Add of a Dequantize'd tensor] -> post-ops -> int8 Quantize,
one anchor kernel that dequantizes each tap as the pool loads it and quantizes
where the pool stores, compared with graphc's reference.

Scales are powers of two, so dequantized values, window sums and maxima are
exact in f32; an average is one correctly rounded division, and a quantized
average lands on a .5 tie only when the exact quotient is that tie (then
representable in f32 too), so the u8/s8 outputs equal the reference bit for bit."""
import pytest

import graphc
from graphc.builder import GraphBuilder
from support import check_compiled
from support.compiled import kernel_params
from support.fusion import dequantize, one_partition

IN_Q = {"u8": {"qtype": "per_tensor", "scales": [2.0 ** -3], "zps": [3]},
        "s8": {"qtype": "per_tensor", "scales": [2.0 ** -4], "zps": [-2]}}
OUT_Q = {"u8": {"qtype": "per_tensor", "scales": [2.0 ** -2], "zps": [5]},
         "s8": {"qtype": "per_tensor", "scales": [2.0 ** -3], "zps": [1]}}


def _pool_attrs(kind, fmt, **kw):
    a = {"kernel": [3, 3], "strides": [2, 2], "pads_begin": [1, 1], "pads_end": [1, 1], "data_format": fmt,
         "rounding_type": "floor"}
    if kind == "AvgPool":
        a["exclude_pad"] = True
    return {**a, **kw}


def _shape(fmt, n=2, c=5, h=7, w=6):
    return [n, c, h, w] if fmt == "NCX" else [n, h, w, c]


def _qpool(kind="AvgPool", fmt="NCX", dt="u8", posts=(), add=None, **pool):
    """u8/s8 src -> Dequantize -> pool -> [Add(pool, Dequantize(other dtype ``add``))] ->
    post-ops (unary kinds, or "Multiply" by a per-channel f32 tensor) -> Quantize to ``dt``."""
    b = GraphBuilder()
    xs = _shape(fmt)
    x = b.tensor(dt, xs)
    y = b.op(kind, [dequantize(b, x, IN_Q[dt])], attrs=_pool_attrs(kind, fmt, **pool))[0]
    ys = list(y.shape)
    if add is not None:
        other = dequantize(b, b.tensor(add, ys), IN_Q[add])
        y = b.op("Add", [other, y] if add == "s8" else [y, other])[0]   # either order
    for post in posts:
        if post == "Multiply":
            c = b.tensor("f32", [ys[1], 1, 1] if fmt == "NCX" else [ys[-1]])
            y = b.op("Multiply", [y, c])[0]
        else:
            y = b.op(post, [y])[0]
    b.op("Quantize", [y], out=[(dt, ys)], attrs=OUT_Q[dt])
    return b.finalize()


@pytest.mark.parametrize("dt", ["u8", "s8"])
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
@pytest.mark.parametrize("kind", ["AvgPool", "MaxPool"])
def test_dequantize_pool_quantize_is_one_kernel(kind, fmt, dt):
    """int8 src with a zero point -> Dequantize -> pool -> Quantize (another zero
    point): one kernel reading the int8 src and writing the int8 dst, nothing else."""
    g = _qpool(kind, fmt, dt)
    one_partition(g, "x8_pool_post_ops", anchors=[kind])
    cg = graphc.compile(g, "fusion")
    (params,) = kernel_params(cg)
    # the int8 src and dst, no f32 copy: the only other argument is the window's accumulator row
    assert [n[0] for n in params if not n.startswith("acc")] == ["a", "o"], params
    check_compiled(g, exact=True, seed=1)


@pytest.mark.parametrize("kind,fmt", [("AvgPool", "NXC"), ("MaxPool", "NCX")])
def test_post_ops_between_pool_and_quantize(kind, fmt):
    """Unary and binary (a per-channel f32 tensor) post-ops before the Quantize."""
    g = _qpool(kind, fmt, "u8", posts=("ReLU", "Multiply", "Abs"))
    one_partition(g, "x8_pool_post_ops", anchors=[kind])
    check_compiled(g, exact=True, seed=2)


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
@pytest.mark.parametrize("kind", ["AvgPool", "MaxPool"])
@pytest.mark.parametrize("other", ["u8", "s8"])
def test_add_of_a_dequantized_tensor(kind, fmt, other):
    """Dequantize -> pool -> Add(Dequantize of another int8 tensor, either order) ->
    ReLU -> Quantize: the other tensor dequantized where the pool stores."""
    g = _qpool(kind, fmt, "s8", posts=("ReLU",), add=other)
    p = one_partition(g, "x8_pool_add_post_ops", anchors=[kind])
    assert len(p.ops) == 6
    check_compiled(g, exact=True, seed=3)


@pytest.mark.parametrize("kind,pool", [("AvgPool", {"rounding_type": "ceil"}),
                                       ("AvgPool", {"exclude_pad": False, "kernel": [2, 3]}),
                                       ("MaxPool", {"rounding_type": "ceil", "dilations": [2, 1]})])
def test_pool_attributes(kind, pool):
    """ceil rounding (exclude_pad true), the kernel's size as divisor, dilations."""
    g = _qpool(kind, "NCX", "u8", **pool)
    one_partition(g, "x8_pool_post_ops", anchors=[kind])
    check_compiled(g, exact=True, seed=4)


def test_avgpool_ceil_without_exclude_pad_is_not_a_quantized_pool():
    """oneDNN's rule: AvgPool with rounding_type ceil and exclude_pad false is no
    quantized pool partition; the graph still compiles and equals the reference."""
    g = _qpool("AvgPool", "NXC", "u8", rounding_type="ceil", exclude_pad=False)
    parts = g.get_partitions("fusion")
    assert not any(p.pattern.startswith("x8_pool") for p in parts), [p.pattern for p in parts]
    check_compiled(g, exact=True, seed=5)


def test_per_channel_dequantize_is_not_a_quantized_pool():
    """Only per-tensor int8 quantization (oneDNN's is_int8_quantization) fuses."""
    b = GraphBuilder()
    xs = _shape("NCX")
    x = b.tensor("u8", xs)
    d = dequantize(b, x, {"qtype": "per_channel", "axis": 1, "scales": [2.0 ** -k for k in range(5)],
                          "zps": [0] * 5})
    y = b.op("MaxPool", [d], attrs=_pool_attrs("MaxPool", "NCX"))[0]
    b.op("Quantize", [y], out=[("u8", list(y.shape))], attrs=OUT_Q["u8"])
    g = b.finalize()
    assert not any(p.pattern.startswith("x8_pool") for p in g.get_partitions("fusion"))
    check_compiled(g, exact=True, seed=6)
