"""The fused 1x1 -> depthwise convolution (the catalog's ``conv_depthwise``,
graphc/codegen/conv_depthwise.py) against the reference: strides, pads on
either side, dilations, windows of one row and of 25 taps, auto_pad, biases as
inputs or BiasAdds, post-ops on both convolutions (per-channel and full
binaries, swish), outputs of the depthwise convolution and of its epilogue,
channel blocks that do not divide the channels, items of several blocks,
fpmath rounding; and what legality refuses, with its reason."""
import pytest

from graphc.builder import GraphBuilder
from graphc.partition import run_passes
from support.compiled import compiled_vs_reference


def _window(nsp=2, **kw):
    return {"strides": (1,) * nsp, "dilations": (1,) * nsp, "pads_begin": (0,) * nsp, "pads_end": (0,) * nsp,
            "data_format": "NCX", "weights_format": "OIX", **kw}


def _post(b, y, chain, shape, dtype):
    """``chain`` applied to ``y`` (of ``shape``): ReLU, Swish (y * sigmoid(y)),
    BiasAdd, ChannelMul (by a [1, C, 1, 1] tensor) or Add (of a full tensor)."""
    n, c = shape[0], shape[1]
    for step in chain:
        if step == "Swish":
            y = b.op("Multiply", [y, b.op("Sigmoid", [y])[0]])[0]
        elif step == "BiasAdd":
            y = b.op("BiasAdd", [y, b.tensor(dtype, [c])], attrs={"data_format": "NCX"})[0]
        elif step == "ChannelMul":
            y = b.op("Multiply", [y, b.tensor(dtype, [1, c, 1, 1])])[0]
        elif step == "Add":
            y = b.op("Add", [y, b.tensor(dtype, list(shape))])[0]
        else:
            y = b.op(step, [y])[0]
    return y


def block(n, c, oc, sp, dw_kernel, dw_attrs=None, post1=(), post2=(), bias=(False, False), dtype="f32",
          pw_kernel=(1, 1), fmt="NCX", keep=(), **graph_kw):
    """src [n, c, *sp] -> 1x1 Convolution to ``oc`` channels -> ``post1`` ->
    depthwise Convolution of ``dw_kernel`` (``dw_attrs``) -> ``post2``; ``keep``:
    "mid" (the value before the depthwise convolution) and/or "dw" (its dst)
    are graph outputs too."""
    b = GraphBuilder(**graph_kw)
    nxc = fmt == "NXC"
    x = b.tensor(dtype, [n, *sp, c] if nxc else [n, c, *sp])
    wfmt = "XIO" if nxc else "OIX"
    w1 = b.tensor(dtype, [*pw_kernel, c, oc] if nxc else [oc, c, *pw_kernel])
    ins = [x, w1] + ([b.tensor(dtype, [oc])] if bias[0] else [])
    y = b.op("Convolution", ins, out=[(dtype, [-1] * 4)],
             attrs=_window(data_format=fmt, weights_format=wfmt, groups=1))[0]
    shape = [n, oc, *sp]
    mid = _post(b, y, post1, shape, dtype)
    if "mid" in keep:
        b.op("Abs", [mid])
    w2 = b.tensor(dtype, [*dw_kernel, 1, oc] if nxc else [oc, 1, *dw_kernel])
    ins = [mid, w2] + ([b.tensor(dtype, [oc])] if bias[1] else [])
    z = b.op("Convolution", ins, out=[(dtype, [-1] * 4)],
             attrs=_window(data_format=fmt, weights_format=wfmt, groups=oc, **(dw_attrs or {})))[0]
    if "dw" in keep:
        b.op("Abs", [z])
    _post(b, z, post2, [n, oc, *z.shape[2:]], dtype)
    return b.finalize()


def _shape(cp) -> str | None:
    plan = getattr(cp.partition, "plan", None)
    return plan.shape if plan is not None else None


def _fused(g):
    cg, _ = compiled_vs_reference(g)
    assert [_shape(cp) for cp in cg.compiled] == ["conv_depthwise"]
    return cg


S2 = {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)}


@pytest.mark.parametrize("geom", [
    (2, 8, 12, (9, 10), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 5, 7, (11, 13), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (0, 1)}),
    (3, 4, 6, (12, 14), (5, 5), {"strides": (1, 2), "dilations": (2, 1), "pads_begin": (4, 2), "pads_end": (3, 1)}),
    (2, 6, 5, (7, 9), (1, 3), {"pads_begin": (0, 1), "pads_end": (0, 1)}),
    (1, 3, 4, (10, 9), (3, 3), {"strides": (3, 3), "pads_begin": (2, 0), "pads_end": (0, 2)}),
    (2, 4, 8, (9, 9), (3, 3), {"strides": (2, 2), "auto_pad": "SAME_UPPER"}),
    (1, 8, 300, (40, 40), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),   # channel blocks of 34 and 28
    (4, 2, 3, (5, 6), (3, 3), {}),                                                # no pads
], ids=["s1", "s2-asym", "5x5-dil", "1x3", "s3", "same_upper", "channel-blocks", "valid"])
def test_geometries(geom):
    n, c, oc, sp, k, attrs = geom
    _fused(block(n, c, oc, sp, k, attrs))


@pytest.mark.parametrize("post1, post2, bias", [
    (("ReLU",), ("ReLU",), (True, True)),
    (("BiasAdd", "ReLU"), ("BiasAdd", "Swish"), (False, False)),
    (("ChannelMul", "Add", "Swish"), ("ChannelMul", "Add"), (True, False)),
    ((), ("Sigmoid",), (False, True)),
], ids=["bias-relu", "biasadd-swish", "binaries", "sigmoid"])
def test_post_ops_and_biases(post1, post2, bias):
    _fused(block(2, 6, 10, (10, 11), (3, 3), S2, post1, post2, bias))


def test_depthwise_dst_and_epilogue_both_written():
    g = block(2, 4, 6, (8, 8), (3, 3), S2, ("ReLU",), ("ReLU", "Swish"), (True, True), keep=("dw",))
    cg, outs = compiled_vs_reference(g)
    assert sorted(map(_shape, cg.compiled)) == ["conv_depthwise", "eltwise"]   # (the Abs apart)
    assert len(outs) == 2


@pytest.mark.parametrize("mode", ["bf16", "tf32"])
def test_fpmath_rounding(mode):
    _fused(block(2, 6, 8, (9, 8), (3, 3), S2, ("ReLU",), (), (True, True), fpmath_mode=mode))


def _refusal(g) -> str:
    log = [c for name, changes in run_passes(g, "fusion").log if name == "fusion" for c in changes]
    return "\n".join(c for c in log if "conv_depthwise" in c)


@pytest.mark.parametrize("why, kw", [
    ("is no 1x1 convolution", {"pw_kernel": (3, 3)}),
    ("the fused kernel is f32", {"dtype": "bf16"}),
    ("not NCX", {"fmt": "NXC"}),
    (None, {"keep": ("mid",), "post1": ("ReLU",)}),    # (read outside: the pattern stops before it)
])
def test_refused_with_a_reason(why, kw):
    """What the fused kernel does not take goes to the convolutions' own patterns,
    the reason in the pass log; the result is the same."""
    kw = {"post1": (), **kw}
    g = block(2, 4, 6, (8, 8), (3, 3), S2, **kw)
    assert why is None or why in _refusal(g)
    cg, _ = compiled_vs_reference(g)
    assert "conv_depthwise" not in [_shape(cp) for cp in cg.compiled]


def test_not_depthwise_is_refused():
    b = GraphBuilder()
    x, w1, w2 = b.tensor("f32", [1, 4, 8, 8]), b.tensor("f32", [6, 4, 1, 1]), b.tensor("f32", [6, 2, 3, 3])
    y = b.op("Convolution", [x, w1], out=[("f32", [-1] * 4)], attrs=_window(groups=1))[0]
    b.op("Convolution", [y, w2], out=[("f32", [-1] * 4)], attrs=_window(groups=3))
    g = b.finalize()
    assert "is not depthwise" in _refusal(g)
    compiled_vs_reference(g)
