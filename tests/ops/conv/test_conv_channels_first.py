"""The channels-first forward convolution (graphc/codegen/conv_cf.py: NCX data,
1x1 and strided windows; dst's channels as the GEMM's rows) against the
reference: odd channel counts, groups, strides and pads, 1-3 spatial dims,
images joined into one GEMM or cut in row blocks and last-dim blocks, src read
and dst written in place, bias or none, fused post-op chains (sums with
broadcast, eltwise, swish), fpmath rounding; NXC data keeps the positions-major
road."""
import pytest

from graphc.builder import GraphBuilder
from support.compiled import compiled_vs_reference, normal_inputs
from support.graphs import one_op, strides

GEOMS = [
    # (N, C, OC, spatial, kernel, extra attrs)
    (2, 7, 5, (9, 11), (1, 1), {}),                                           # odd channels, src in place
    (7, 33, 19, (9, 9), (1, 1), {"strides": (2, 2)}),                          # images joined
    (3, 12, 9, (8, 7), (1, 1), {"groups": 3}),
    (2, 8, 6, (10, 9), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)}),
    (2, 6, 9, (11, 10), (3, 3), {"strides": (2, 2), "groups": 3, "pads_begin": (1, 0), "pads_end": (0, 1)}),
    (2, 5, 4, (300,), (1,), {}),                                               # one spatial dim
    (1, 6, 4, (4, 5, 6), (1, 2, 2), {"strides": (1, 2, 2), "dilations": (1, 1, 2)}),
    (1, 40, 24, (64, 64), (1, 1), {}),                                         # row blocks of one image
    (1, 70, 66, (4500,), (1,), {}),                                            # blocks of the last dim
    (2, 4, 6, (13, 9), (2, 2), {"strides": (3, 2), "pads_begin": (2, 1), "pads_end": (2, 1)}),   # taps in pads
    (2, 16, 8, (12, 11), (2, 2), {}),                   # unit strides, a window of few taps (SHIFTED_MIN_TAPS)
    (1, 6, 5, (7, 8), (1, 2), {"pads_begin": (0, 1), "pads_end": (0, 0)}),
]


def _attrs(geom, fmt="NCX"):
    _, _, _, sp, _, extra = geom
    nsp = len(sp)
    return {"strides": (1,) * nsp, "dilations": (1,) * nsp, "pads_begin": (0,) * nsp, "pads_end": (0,) * nsp,
            "data_format": fmt, "weights_format": "OIX" if fmt == "NCX" else "XIO", **extra}


def conv(geom, bias=True, post=(), fmt="NCX", dt="f32", **graph_kw):
    """Convolution of ``geom`` (NCX / OIX, or NXC / XIO) over ``dt`` tensors with
    ``post``: a chain of (kind, other input's shape or None) post-ops."""
    n, c, oc, sp, k, extra = geom
    g = extra.get("groups", 1)
    b = GraphBuilder(**graph_kw)
    x = b.tensor(dt, [n, c, *sp] if fmt == "NCX" else [n, *sp, c])
    w = b.tensor(dt, [oc, c // g, *k] if fmt == "NCX" else [*k, c // g, oc], property_type="constant")
    ins = [x, w] + ([b.tensor(dt, [oc], property_type="constant")] if bias else [])
    y = b.op("Convolution", ins, out=[(dt, [-1] * (len(sp) + 2))], attrs=_attrs(geom, fmt))[0]
    for kind, shape in post:
        if shape == "y":
            other = y
        elif shape is not None:
            other = b.tensor(dt, shape)
        y = b.op(kind, [y] if shape is None else [y, other])[0]
    return b.finalize()


def _road(cg):
    return cg.compiled[0].get_impl_info()


def test_windows_of_nine_taps_keep_the_shifted_gemms():
    """At unit strides a 3x3 window (as many taps as SHIFTED_MIN_TAPS) runs the shifted GEMMs."""
    geom = (2, 8, 6, (10, 9), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)})
    cg, _ = compiled_vs_reference(conv(geom), what=str(geom))
    assert "shifted_gemm" in _road(cg), _road(cg)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
def test_channels_first(geom, bias):
    cg, _ = compiled_vs_reference(conv(geom, bias), what=str(geom))
    assert "channels_first" in _road(cg), _road(cg)


def test_one_by_one_writes_dst_in_place():
    """No bias and no post-ops at a 1x1 unit-stride window: the GEMM writes dst
    where it lies (no tile)."""
    cg, _ = compiled_vs_reference(conv(GEOMS[0], bias=False), what="in place")
    assert "channels_first" in _road(cg) and "tile" not in cg.compiled[0].source


def _dst(geom):
    """dst's NCX shape."""
    g = conv(geom, bias=False)
    return list(g.ops[0].outputs[0].shape)


POSTS = {
    "relu": lambda d: [("ReLU", None)],
    "sum": lambda d: [("Add", d)],
    "sum_scalar": lambda d: [("Add", [1] * len(d))],
    "sum_channel": lambda d: [("Add", [1, d[1]] + [1] * (len(d) - 2))],
    "sum_relu": lambda d: [("Add", d), ("ReLU", None)],
    "swish": lambda d: [("Sigmoid", None), ("Multiply", "y")],
    "add_swish_relu": lambda d: [("Add", [1] * len(d)), ("Sigmoid", None), ("Multiply", "y"), ("ReLU", None)],
    "mul_tanh": lambda d: [("Multiply", [1, d[1]] + [1] * (len(d) - 2)), ("Tanh", None)],
}


@pytest.mark.parametrize("post", sorted(POSTS))
@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[1], GEOMS[4]], ids=lambda g: f"c{g[1]}{g[3]}k{g[4]}")
def test_post_op_chains(geom, post):
    """The post-ops run where the tile is stored, along dst's rows: one partition."""
    g = conv(geom, post=POSTS[post](_dst(geom)))
    cg, _ = compiled_vs_reference(g, what=f"{geom} {post}")
    assert len(cg.compiled) == 1 and "channels_first" in _road(cg), _road(cg)


@pytest.mark.parametrize("mode", ["tf32", "bf16"])
@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[3]], ids=lambda g: f"{g[3]}k{g[4]}")
def test_fpmath_rounding_packs_src(geom, mode):
    """Under fpmath_mode tf32 or bf16, src and weights are read rounded (packed,
    never read in place) and multiplied in f32: products of bf16 values are exact
    there, as on the bf16 tile.  Normal inputs: sums the rounding changes."""
    g = conv(geom, post=[("Add", _dst(geom))], fpmath_mode=mode)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=mode)
    assert "channels_first" in _road(cg) and "cols" in cg.compiled[0].source


@pytest.mark.parametrize("geom", [GEOMS[0], GEOMS[3]], ids=lambda g: f"{g[3]}k{g[4]}")
def test_nxc_keeps_the_positions_major_road(geom):
    cg, _ = compiled_vs_reference(conv(geom, fmt="NXC"), what=str(geom))
    assert "channels_first" not in _road(cg) and "im2col" in _road(cg), _road(cg)


def _mixed(geom, dfmt, wfmt, dt="f32"):
    """Convolution of ``geom`` with data_format ``dfmt`` and weights_format ``wfmt``."""
    n, c, oc, sp, k, extra = geom
    g = extra.get("groups", 1)
    b = GraphBuilder()
    x = b.tensor(dt, [n, c, *sp] if dfmt == "NCX" else [n, *sp, c])
    w = b.tensor(dt, [oc, c // g, *k] if wfmt == "OIX" else [*k, c // g, oc])
    b.op("Convolution", [x, w, b.tensor(dt, [oc])], out=[(dt, [-1] * (len(sp) + 2))],
         attrs=dict(_attrs(geom, dfmt), weights_format=wfmt))
    return b.finalize()


@pytest.mark.parametrize("dfmt", ["NCX", "NXC"])
@pytest.mark.parametrize("geom", [GEOMS[3], GEOMS[4], GEOMS[6], GEOMS[9]], ids=lambda g: f"{g[3]}k{g[4]}")
def test_oix_weights_read_in_place(geom, dfmt):
    """OIX weights of a window of several taps: the GEMM's K runs channel after
    channel, as their rows lie, so they are read in place (no weights panel packed
    at every call), on the channels-first road (NCX) and on im2col (NXC)."""
    cg, _ = compiled_vs_reference(_mixed(geom, dfmt, "OIX"), what=f"{geom} {dfmt}")
    road = "channels_first" if dfmt == "NCX" else "im2col"
    assert road in _road(cg) and "wp" not in cg.compiled[0].source, _road(cg)


def test_xio_weights_keep_taps_first():
    """XIO weights lie taps first: read in place in that order."""
    cg, _ = compiled_vs_reference(_mixed(GEOMS[3], "NCX", "XIO"), what="XIO")
    assert "channels_first" in _road(cg) and "wp" not in cg.compiled[0].source


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dst_order", [(0, 1, 2, 3), (0, 2, 3, 1)])
def test_channels_last_src_by_its_dst(dst_order, bias):
    """NCX src laid out channels last (conv_2d.json's strides): the road follows
    dst, channels first when dst's channels are outer (its rows written in order),
    else im2col (channels-last src and dst)."""
    x, w, y = [2, 6, 9, 8], [7, 6, 3, 3], [2, 7, 4, 3]
    attrs = dict(_attrs((2, 6, 7, (9, 8), (3, 3), {}), "NCX"), strides=(2, 3), pads_begin=(1, 1),
                 pads_end=(0, 1))
    ins = [("f32", x, strides(x, (0, 2, 3, 1))), ("f32", w)] + [("f32", [7])] * bias
    g = one_op("Convolution", ins, [("f32", y, strides(y, dst_order))], attrs)
    cg, _ = compiled_vs_reference(g, what=f"{dst_order} {bias}")
    road = "channels_first" if dst_order == (0, 1, 2, 3) else "im2col"
    assert road in _road(cg), _road(cg)


DEPTHWISE = [
    # (N, C, OC, spatial, kernel, extra attrs): groups = C
    (2, 6, 6, (11, 10), (3, 3), {"groups": 6, "strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 5, 5, (9, 12), (3, 3), {"groups": 5, "pads_begin": (1, 1), "pads_end": (1, 1)}),
    (2, 4, 8, (10, 9), (3, 2), {"groups": 4, "dilations": (2, 1), "pads_begin": (2, 0), "pads_end": (1, 1)}),
    (1, 3, 3, (17,), (5,), {"groups": 3, "strides": (3,), "pads_begin": (2,), "pads_end": (2,)}),
    (1, 4, 4, (5, 6, 7), (3, 1, 3), {"groups": 4, "pads_begin": (0, 0, 1), "pads_end": (2, 0, 1)}),
]


@pytest.mark.parametrize("post", [(), (("ReLU", None),)], ids=["", "relu"])
@pytest.mark.parametrize("geom", DEPTHWISE, ids=lambda g: f"oc{g[2]}{g[3]}k{g[4]}")
def test_depthwise_direct(geom, post):
    """One src channel per group (depthwise, depth multipliers 1 and 2): the direct
    loop, taps clamped into src and zeroed in the padding."""
    cg, _ = compiled_vs_reference(conv(geom, post=post), what=str(geom))
    assert "depthwise_direct" in _road(cg), _road(cg)


@pytest.mark.parametrize("mode", ["strict", "tf32"])
def test_depthwise_direct_rounds_under_fpmath(mode):
    g = conv(DEPTHWISE[0], fpmath_mode=mode)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=mode)
    assert "depthwise_direct" in _road(cg), _road(cg)


BF16_GEOMS = [
    # (N, C, OC, spatial, kernel, extra attrs): groups of 16 channels at least (conv_cf.BF16_MIN_C/_OC)
    (2, 64, 32, (9, 11), (1, 1), {}),
    (3, 48, 40, (10, 9), (1, 1), {"strides": (2, 2)}),                         # images joined, edges of the tile
    (2, 32, 64, (11, 10), (3, 3), {"strides": (2, 2), "groups": 2, "pads_begin": (1, 0), "pads_end": (0, 1)}),
    (1, 40, 24, (64, 64), (1, 1), {}),                                         # row blocks of one image
    (1, 70, 66, (4500,), (1,), {}),                                            # blocks of the last dim
    (1, 17, 19, (4, 5, 6), (1, 2, 2), {"strides": (1, 2, 2), "dilations": (1, 1, 2)}),
    (2, 576, 33, (7, 7), (1, 1), {}),                                          # K past a block of the tile's pairs
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("geom", BF16_GEOMS, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
def test_bf16_on_the_tile(geom, bias):
    """bf16 NCX data at 1x1 and strided windows: the weights packed once a call as
    the bf16 tile's A, each work item's columns as its B (im2col gathered one
    value a cache line; 2x256x56x56 1x1 -> 64: 1.03 -> 0.44 ms)."""
    cg, _ = compiled_vs_reference(conv(geom, bias, dt="bf16"), what=str(geom))
    assert "channels_first" in _road(cg) and "bf16_gemm" in _road(cg), _road(cg)


@pytest.mark.parametrize("wfmt", ["OIX", "XIO"])
def test_bf16_weights_of_several_taps(wfmt):
    """Weights of several taps are packed as the tile's A from where they lie,
    never copied first: OIX as their rows lie (K channel after channel, each
    channel's taps; the columns copied in that order), XIO as an A stored
    transposed (K taps first)."""
    cg, _ = compiled_vs_reference(_mixed(BF16_GEOMS[2], "NCX", wfmt, "bf16"), what=wfmt)
    assert "channels_first" in _road(cg) and "wbits" not in cg.compiled[0].source, _road(cg)


@pytest.mark.parametrize("geom", [BF16_GEOMS[0], BF16_GEOMS[2]], ids=lambda g: f"{g[3]}k{g[4]}")
def test_bf16_post_ops(geom):
    """A post-op chain runs where the f32 tile is stored, along dst's rows: one partition."""
    g = conv(geom, dt="bf16", post=POSTS["add_swish_relu"](_dst(geom)))
    cg, _ = compiled_vs_reference(g, what="post-ops")
    assert len(cg.compiled) == 1 and "channels_first" in _road(cg), _road(cg)


@pytest.mark.parametrize("geom", [(2, 3, 64, (23, 23), (7, 7), {"strides": (2, 2)}), (2, 64, 8, (9, 9), (1, 1), {})],
                         ids=["3 channels", "8 outputs"])
def test_bf16_few_channels_keep_im2col(geom):
    """Few input channels (a stem's window over RGB) or output channels: im2col."""
    cg, _ = compiled_vs_reference(conv(geom, dt="bf16"), what=str(geom))
    assert "im2col" in _road(cg), _road(cg)


@pytest.mark.parametrize("weights_format", ["OIX", "XIO"])
def test_bf16_data_gradient_of_a_1x1_window(weights_format):
    """A 1x1 window's data gradient at unit strides is the forward convolution of
    dy by the weights transposed: the same road, the weights read in place as
    the tile's A (stored transposed where OIX, in its rows where XIO), never
    copied first."""
    dy, w, dx = [2, 48, 9, 11], [48, 64, 1, 1], [2, 64, 9, 11]
    if weights_format == "XIO":
        w = [1, 1, 64, 48]
    attrs = dict(_attrs((2, 64, 48, (9, 11), (1, 1), {})), weights_format=weights_format, dst_shape=dx)
    g = one_op("ConvolutionBackwardData", [("bf16", dy), ("bf16", w)], [("bf16", dx)], attrs)
    cg, _ = compiled_vs_reference(g, what=weights_format)
    assert "channels_first" in _road(cg) and "bf16_gemm" in _road(cg), _road(cg)
    assert "wbits" not in cg.compiled[0].source


#: (N, C, OC, spatial of src, kernel, extra attrs) of strided bf16 data gradients channels first
BF16_DATA = [
    (2, 48, 40, (10, 11), (1, 1), {"strides": (2, 2)}),
    (1, 64, 32, (11, 12), (3, 3), {"strides": (2, 2), "groups": 2, "pads_begin": (1, 0), "pads_end": (0, 1)}),
    (1, 16, 24, (13, 14), (5, 5), {"strides": (3, 2), "pads_begin": (2, 2), "pads_end": (2, 1)}),
    (2, 32, 16, (40,), (3,), {"strides": (2,), "dilations": (2,), "pads_begin": (1,), "pads_end": (2,)}),
    (1, 16, 16, (5, 6, 7), (3, 3, 3), {"strides": (2, 2, 2), "pads_begin": (1, 1, 1), "pads_end": (1, 1, 1)}),
    (1, 64, 40, (64, 70), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)}),  # row blocks
]


@pytest.mark.parametrize("weights_format", ["OIX", "XIO"])
@pytest.mark.parametrize("geom", BF16_DATA, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
def test_bf16_strided_data_gradient(geom, weights_format):
    """The data gradient of a strided bf16 convolution of NCX data: Cols = W^T @ dY
    on the tile (dY's rows as its B, a block of rows at a time), each column added
    into dx's rows where its tap meets them (the positions-major col2im gathered
    dY and scattered dx one value a cache line)."""
    n, c, oc, sp, k, extra = geom
    g = one_op("Convolution", [("bf16", [n, c, *sp]), ("bf16", [oc, c // extra.get("groups", 1), *k])],
               [("bf16", [-1] * (len(sp) + 2))], _attrs(geom))
    dst = list(g.ops[0].outputs[0].shape)
    w = [oc, c // extra.get("groups", 1), *k] if weights_format == "OIX" else [*k, c // extra.get("groups", 1), oc]
    attrs = dict(_attrs(geom), weights_format=weights_format, dst_shape=[n, c, *sp])
    g = one_op("ConvolutionBackwardData", [("bf16", dst), ("bf16", w)], [("bf16", [n, c, *sp])], attrs)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=f"{geom} {weights_format}")
    assert "channels_first" in _road(cg) and "bf16_gemm" in _road(cg), _road(cg)


@pytest.mark.parametrize("weights_format", ["OIX", "XIO"])
def test_bf16_strided_data_gradient_of_one_image(weights_format):
    """One image and one group: where the weights' rows run channel after channel
    (OIX), dx's channels are split in blocks across the threads (96 channels on
    two threads: 64 and 32, each block's rows of W^T whole tiles apart); XIO
    keeps one block."""
    from graphc.codegen.conv_cf import _data_channel_block
    from graphc.codegen.conv_views import Geometry
    from graphc.codegen.kernel import plan_threads
    geom = (1, 96, 64, (30, 31), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)})
    g = one_op("Convolution", [("bf16", [1, 96, 30, 31]), ("bf16", [64, 96, 3, 3])], [("bf16", [-1] * 4)],
               _attrs(geom))
    dst = list(g.ops[0].outputs[0].shape)
    w = [64, 96, 3, 3] if weights_format == "OIX" else [3, 3, 96, 64]
    attrs = dict(_attrs(geom), weights_format=weights_format, dst_shape=[1, 96, 30, 31])
    g = one_op("ConvolutionBackwardData", [("bf16", dst), ("bf16", w)], [("bf16", [1, 96, 30, 31])], attrs)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=weights_format)
    assert "channels_first" in _road(cg), _road(cg)
    geo = Geometry(1, 96, 64, 1, (30, 31), tuple(dst[2:]), (3, 3), (2, 2), (1, 1), (1, 1))
    block = _data_channel_block(geo, weights_format == "OIX", 1 << 30)
    if plan_threads() == 2:     # (this machine's and CI's two cores)
        assert block == (64 if weights_format == "OIX" else 96), block


def test_bf16_strided_data_gradient_of_few_channels_keeps_col2im():
    """Three input channels (a stem's data gradient): col2im."""
    geom = (1, 3, 32, (23, 23), (7, 7), {"strides": (2, 2), "pads_begin": (3, 3), "pads_end": (3, 3)})
    attrs = dict(_attrs(geom), dst_shape=[1, 3, 23, 23])
    g = one_op("ConvolutionBackwardData", [("bf16", [1, 32, 12, 12]), ("bf16", [32, 3, 7, 7])],
               [("bf16", [1, 3, 23, 23])], attrs)
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert "col2im" in _road(cg), _road(cg)
