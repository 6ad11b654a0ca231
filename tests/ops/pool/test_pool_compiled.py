"""Generated pooling kernels (AvgPool, MaxPool, AvgPoolBackward, MaxPoolBackward)
against graphc's reference: NCX and NXC, 1 to 3 spatial dims, pads, auto_pad,
ceil rounding, exclude_pad, dilations, bf16/f16, strided (acdb) layouts, ties
in MaxPoolBackward, windows only in the padding, a src_shape input, and pool
post-ops fused into one partition; NCX window sums in registers (clamped at the
ends of a row, a row with no window inside it)."""
import numpy as np
import pytest

import graphc
from graphc.builder import GraphBuilder
from graphc.errors import RuntimeFault
from graphc.fill import make_inputs
from support import check_compiled, one_op, strides


def attrs(nsp, fmt="NCX", **kw):
    """Pooling attributes: kernel 3, stride 2, pads 1 / 0 unless given."""
    return {"kernel": [3] * nsp, "strides": [2] * nsp, "pads_begin": [1] * nsp, "pads_end": [0] * nsp,
            "data_format": fmt, **kw}


def forward(kind, dt, shape, at, layout=None):
    """A one-op pooling graph; ``layout``: src dims in memory order (outermost first)."""
    src = (dt, shape, strides(shape, layout) if layout else None)
    return one_op(kind, [src], [(dt, [-1] * len(shape))], at)


# ------------------------------------------------------------------------ forward
FORWARD = [
    # 1-D NCX, exclude_pad, ceil rounding (a last window over the end)
    ("AvgPool", "f32", [2, 3, 10], attrs(1, exclude_pad=True, rounding_type="ceil"), None),
    ("AvgPool", "bf16", [2, 6, 7, 5], attrs(2, "NXC", exclude_pad=False), None),
    ("AvgPool", "f16", [1, 2, 5, 6, 7], attrs(3, exclude_pad=True, auto_pad="SAME_LOWER", kernel=[2, 3, 2]), None),
    # acdb: an NCX op whose channels are contiguous (loops run along them)
    ("AvgPool", "f32", [2, 5, 7, 6], attrs(2, exclude_pad=True, pads_end=[1, 1]), [0, 2, 3, 1]),
    # global pooling: 81 taps sum in float64
    ("AvgPool", "f32", [2, 3, 9, 9], attrs(2, kernel=[9, 9], strides=[1, 1], pads_begin=[0, 0], exclude_pad=False),
     None),
    # NCX window sums in registers (Geometry.direct): clamps at both ends of the last axis;
    # a row too narrow for any window inside it
    ("AvgPool", "f32", [2, 3, 9, 13], attrs(2, kernel=[3, 5], strides=[2, 3], pads_begin=[1, 4],
                                            pads_end=[2, 4], exclude_pad=True), None),
    ("AvgPool", "f32", [1, 4, 3, 2], attrs(2, strides=[1, 1], pads_begin=[2, 2], pads_end=[2, 2], exclude_pad=False),
     None),
    ("MaxPool", "f32", [2, 3, 11], attrs(1, dilations=[2], rounding_type="ceil"), None),
    ("MaxPool", "bf16", [2, 7, 8, 4], attrs(2, "NXC", dilations=[2, 1], pads_end=[1, 1]), None),
    ("MaxPool", "f16", [1, 3, 6, 5, 7], attrs(3, auto_pad="SAME_UPPER", kernel=[2, 2, 3]), None),
    ("MaxPool", "f32", [2, 6, 9, 8], attrs(2, strides=[1, 2]), [0, 2, 3, 1]),
    ("MaxPool", "f16", [2, 8, 6, 3], attrs(2, "NXC", auto_pad="VALID", rounding_type="ceil"), None),
]


@pytest.mark.parametrize("kind,dt,shape,at,layout", FORWARD)
def test_forward(kind, dt, shape, at, layout):
    check_compiled(forward(kind, dt, shape, at, layout), what=f"{kind} {dt} {shape} {at}")


def test_windows_only_in_the_padding():
    """pads_begin past the kernel: the first windows meet no src (max -inf, exclude_pad average NaN)."""
    at = attrs(1, kernel=[2], strides=[1], pads_begin=[3], pads_end=[0])
    got = check_compiled(forward("MaxPool", "f32", [1, 2, 6], at), what="MaxPool")
    assert np.isneginf(next(iter(got.values()))[..., :2]).all()
    got = check_compiled(forward("AvgPool", "f32", [1, 2, 6], dict(at, exclude_pad=True)), what="AvgPool")
    assert np.isnan(next(iter(got.values()))[..., :2]).all()


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_maxpool_nan_propagates(fmt):
    g = forward("MaxPool", "f32", [1, 5, 6, 3] if fmt == "NXC" else [1, 3, 5, 6], attrs(2, fmt))
    src = g.input_ports[0]
    x = make_inputs(g)[src]
    x.reshape(-1)[::7] = np.nan
    got = check_compiled(g, {src: x}, what=fmt)
    assert np.isnan(next(iter(got.values()))).any()


def test_parallel_nxc_and_ncx():
    for fmt, shape in (("NCX", [2, 8, 66, 64]), ("NXC", [2, 66, 64, 8])):
        g = forward("AvgPool", "f32", shape, attrs(2, fmt, strides=[1, 1], exclude_pad=True))
        check_compiled(g, parallel=True, what=fmt)


# ----------------------------------------------------------------------- backward
def avg_backward(dt, dy_shape, at, src_shape, shape_input=False, layout=None):
    ins = [(dt, dy_shape, strides(dy_shape, layout) if layout else None)]
    if shape_input:
        ins.append(("s32", [len(src_shape)]))
    else:
        at = dict(at, src_shape=src_shape)
    return one_op("AvgPoolBackward", ins, [(dt, src_shape)], at)


@pytest.mark.parametrize("dt,dy_shape,at,src_shape,layout", [
    ("f32", [2, 3, 5], attrs(1, exclude_pad=True), [2, 3, 10], None),
    # diff_dst of the ceil size (4, not 3)
    ("f32", [1, 2, 4], attrs(1, exclude_pad=False, pads_begin=[0]), [1, 2, 8], None),
    ("bf16", [2, 4, 3, 5], attrs(2, "NXC", exclude_pad=True), [2, 7, 6, 5], None),
    ("f16", [1, 2, 3, 3, 3], attrs(3, exclude_pad=False, kernel=[2, 3, 3], strides=[2, 2, 1]), [1, 2, 6, 5, 4], None),
    ("f32", [2, 5, 4, 3], attrs(2, exclude_pad=True), [2, 5, 7, 6], [0, 2, 3, 1]),
    # strides past the kernel: elements no window covers get 0
    ("f32", [1, 3, 3, 3], attrs(2, "NXC", exclude_pad=False, kernel=[2, 2], strides=[3, 3], pads_begin=[0, 0]),
     [1, 8, 8, 3], None),
])
def test_avgpool_backward(dt, dy_shape, at, src_shape, layout):
    check_compiled(avg_backward(dt, dy_shape, at, src_shape, layout=layout), what=f"{dt} {dy_shape} {at}")


def test_avgpool_backward_src_shape_input():
    g = avg_backward("f32", [2, 3, 4, 4], attrs(2, exclude_pad=True), [2, 3, 8, 7], shape_input=True)
    dy, shape = g.input_ports
    inputs = {dy: make_inputs(g)[dy], shape: np.array([2, 3, 8, 7], np.int32)}
    check_compiled(g, inputs, what="src_shape input")
    with pytest.raises(RuntimeFault, match="src_shape"):
        graphc.compile(g).run({**inputs, shape: np.array([2, 3, 8, 8], np.int32)})


def max_backward(dt, src_shape, dy_shape, at, layout=None):
    lay = strides(src_shape, layout) if layout else None
    dy_lay = strides(dy_shape, layout) if layout else None
    return one_op("MaxPoolBackward", [(dt, src_shape, lay), (dt, dy_shape, dy_lay)], [(dt, src_shape)], at)


@pytest.mark.parametrize("dt,src_shape,dy_shape,at,layout", [
    ("f32", [2, 3, 11], [2, 3, 5], attrs(1), None),
    ("f32", [2, 3, 11], [2, 3, 4], attrs(1, dilations=[2]), None),
    ("bf16", [2, 7, 8, 5], [2, 4, 4, 5], attrs(2, "NXC", dilations=[1, 2], pads_end=[1, 1]), None),
    ("f16", [1, 2, 5, 6, 7], [1, 2, 4, 5, 6], attrs(3, kernel=[2, 2, 2], strides=[1, 1, 1], pads_begin=[0] * 3),
     None),
    ("f32", [2, 6, 9, 8], [2, 6, 5, 4], attrs(2, dilations=[1, 1]), [0, 2, 3, 1]),
    # diff_dst of the ceil size: the last window overhangs src
    ("f32", [1, 4, 8, 8], [1, 4, 4, 4], attrs(2, "NCX", pads_begin=[0, 0]), None),
])
@pytest.mark.parametrize("ties", [False, True])
def test_maxpool_backward(dt, src_shape, dy_shape, at, layout, ties):
    """With ``ties`` src holds only 0, 1 and 2: each window's first maximum (C order) takes its diff_dst."""
    g = max_backward(dt, src_shape, dy_shape, at, layout)
    inputs = make_inputs(g, seed=1)
    if ties:
        src = g.input_ports[0]
        rng = np.random.default_rng(2)
        inputs[src] = rng.integers(0, 3, src_shape).astype(inputs[src].dtype)
    check_compiled(g, inputs, what=f"{dt} {src_shape} {at} ties={ties}")


def test_maxpool_backward_parallel_nxc():
    g = max_backward("f32", [2, 66, 64, 16], [2, 33, 32, 16], attrs(2, "NXC"))
    check_compiled(g, parallel=True, what="NXC")


# ------------------------------------------------------------------------ fusion
@pytest.mark.parametrize("kind,post,fmt", [("MaxPool", "ReLU", "NCX"), ("AvgPool", "Add", "NXC")])
def test_pool_post_ops_fuse(kind, post, fmt):
    b = GraphBuilder()
    shape = [2, 4, 9, 9] if fmt == "NCX" else [2, 9, 9, 4]
    x = b.tensor("f32", shape)
    at = attrs(2, fmt, **({"exclude_pad": True} if kind == "AvgPool" else {}))
    y = b.op(kind, [x], out=[("f32", [-1] * 4)], attrs=at)[0]
    if post == "Add":
        b.op("Add", [y, b.tensor("f32", [4])])
    else:
        b.op(post, [y])
    g = b.finalize()
    parts = g.get_partitions("fusion")
    assert len(parts) == 1 and len(parts[0].ops) == 2 and parts[0].pattern == "pool_post_ops", parts
    check_compiled(g, seed=3, what=f"{kind} -> {post}")
