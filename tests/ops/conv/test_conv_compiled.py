"""Compiled convolutions (all six ops) against the reference: layouts (NCX/NXC,
OIX/XIO/IOX/XOI, strided), groups, strides, dilations, pads, auto_pad,
output_padding, 1-3 spatial dims, bias, dtypes; weights read in place or packed;
bf16 operands multiplied in bf16 (graphc's tile, or MKL's GEMM on AMX)."""
import numpy as np
import pytest

from graphc.builder import GraphBuilder, single_op_graph
from graphc.codegen.blas_import import bf16_conv_gemm, bf16_tile_gemm
from graphc.fill import make_inputs
from support.compiled import check_compiled, compiled_vs_reference, normal_inputs
from support.gemm_calls import bf16_tile_name
from support.graphs import one_op, strides


def _bf16_gemm_call(shifted: bool = False) -> str:
    """The GEMM a bf16 convolution's kernel calls: the tile's on B packed once (a tile of C
    at a time, its outer taps summed, where the window runs as shifted GEMMs), else MKL's (AMX)."""
    if not bf16_tile_gemm():
        return "gemm_bf16("
    return "bf16_block(" if shifted else "gemm_bf16_packed("


def win(nsp, **kw):
    return {"strides": (1,) * nsp, "dilations": (1,) * nsp, "pads_begin": (0,) * nsp, "pads_end": (0,) * nsp, **kw}


def data(n, c, sp, fmt):
    return [n, *sp, c] if fmt == "NXC" else [n, c, *sp]


def weights(o, i, k, fmt):
    pos = {"O": o, "I": i}
    return ([*k, pos[fmt[1]], pos[fmt[2]]] if fmt[0] == "X" else [pos[fmt[0]], pos[fmt[1]], *k])


GEOMS = [
    # (N, C, OC, spatial, kernel, extra attrs)
    (2, 8, 12, (9, 10), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 6, 4, (11, 7), (3, 2), {"strides": (2, 1), "dilations": (2, 1), "pads_begin": (2, 0), "pads_end": (1, 1)}),
    (2, 8, 8, (6, 6), (1, 1), {}),
    (1, 12, 6, (7, 8), (3, 3), {"groups": 3, "pads_begin": (1, 0), "pads_end": (0, 1)}),
    (2, 4, 6, (13,), (3,), {"strides": (2,), "pads_begin": (1,), "pads_end": (1,)}),
    (1, 4, 4, (4, 5, 6), (2, 3, 2), {"pads_begin": (1, 1, 0), "pads_end": (0, 1, 1), "groups": 2}),
    (1, 3, 5, (9, 9), (3, 3), {"auto_pad": "SAME_UPPER", "strides": (2, 2)}),
]


def conv_graph(kind, dtype, geom, dfmt, wfmt, bias=False):
    n, c, oc, sp, k, extra = geom
    attrs = win(len(sp), data_format=dfmt, weights_format=wfmt, **extra)
    g = attrs.get("groups", 1)
    shp = [-1] * (len(sp) + 2)
    if kind == "Convolution":
        ins = [(dtype, data(n, c, sp, dfmt)), (dtype, weights(oc, c // g, k, wfmt))] + [(dtype, [oc])] * bias
        return single_op_graph(kind, ins, [(dtype, shp)], attrs)
    # the forward convolution's dst shape gives the gradients' shapes
    fwd = single_op_graph("Convolution", [(dtype, data(n, c, sp, dfmt)), (dtype, weights(oc, c // g, k, wfmt))],
                          [(dtype, shp)], attrs)
    dst = list(fwd.ops[0].outputs[0].shape)
    if kind == "ConvolutionBackwardData":
        attrs["dst_shape"] = data(n, c, sp, dfmt)
        return single_op_graph(kind, [(dtype, dst), (dtype, weights(oc, c // g, k, wfmt))], [(dtype, shp)], attrs)
    attrs["weights_shape"] = weights(oc, c // g, k, wfmt)
    return single_op_graph(kind, [(dtype, data(n, c, sp, dfmt)), (dtype, dst)], [(dtype, [-1] * len(shp))], attrs)


@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: f"{g[3]}k{g[4]}")
@pytest.mark.parametrize("kind", ["Convolution", "ConvolutionBackwardData", "ConvolutionBackwardWeights"])
@pytest.mark.parametrize("dfmt,wfmt", [("NCX", "OIX"), ("NXC", "XIO")])
def test_convolution_ops(kind, geom, dfmt, wfmt):
    check_compiled(conv_graph(kind, "f32", geom, dfmt, wfmt, bias=True), what=f"{kind} {geom}")


def im2col_geoms():
    """The geometries the im2col kernel takes (strides or a 1x1 window); the
    others run one GEMM per tap over a padded copy of src."""
    return [g for g in GEOMS if any(s != 1 for s in g[5].get("strides", ())) or all(k == 1 for k in g[4])]


@pytest.mark.parametrize("geom", im2col_geoms(), ids=lambda g: f"{g[3]}k{g[4]}")
def test_convolution_writes_dst_in_place(geom):
    """NXC f32 without bias or post-ops: BLAS writes dst itself (no tile)."""
    g = conv_graph("Convolution", "f32", geom, "NXC", "XIO")
    cg, _ = compiled_vs_reference(g, what=str(geom))
    assert "tile" not in cg.source and "cols" in cg.source or geom[4] == (1, 1)


@pytest.mark.parametrize("kind", ["Convolution", "ConvolutionBackwardData", "ConvolutionBackwardWeights"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_convolution_narrow(kind, dtype):
    check_compiled(conv_graph(kind, dtype, GEOMS[3], "NXC", "XIO", bias=True), what=f"{kind} {dtype}")


TGEOMS = [
    # (N, IC, OC, src spatial, kernel, extra): transposed convolutions
    (2, 6, 4, (5, 6), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 4, 6, (4, 5), (3, 2), {"groups": 2, "output_padding": (1, 0), "strides": (2, 1)}),
    (1, 4, 4, (3, 3, 4), (2, 2, 2), {"dilations": (2, 1, 1)}),
    (2, 3, 5, (7,), (3,), {"auto_pad": "SAME_LOWER", "strides": (2,)}),
]


@pytest.mark.parametrize("geom", TGEOMS, ids=lambda g: f"{g[3]}k{g[4]}")
@pytest.mark.parametrize("kind", ["ConvTranspose", "ConvTransposeBackwardData", "ConvTransposeBackwardWeights"])
@pytest.mark.parametrize("dfmt,wfmt", [("NCX", "OIX"), ("NXC", "XIO"), ("NCX", "IOX"), ("NXC", "XOI")])
def test_conv_transpose_ops(kind, geom, dfmt, wfmt):
    check_compiled(deconv_graph(kind, geom, dfmt, wfmt), what=f"{kind} {geom} {dfmt} {wfmt}")


def deconv_graph(kind, geom, dfmt, wfmt):
    """One of the three ConvTranspose ops of ``geom`` (N, IC, OC, spatial, kernel, attrs)."""
    n, ic, oc, sp, k, extra = geom
    attrs = win(len(sp), data_format=dfmt, weights_format=wfmt, **extra)
    g = attrs.get("groups", 1)
    w = weights(oc // g, ic, k, wfmt) if wfmt in ("IOX", "XOI") else weights(oc, ic // g, k, wfmt)
    if wfmt in ("IOX", "XOI"):   # I holds all groups' input channels, O one group's outputs
        pos = {"O": oc // g, "I": ic}
        w = [*k, pos[wfmt[1]], pos[wfmt[2]]] if wfmt[0] == "X" else [pos[wfmt[0]], pos[wfmt[1]], *k]
    shp = [-1] * (len(sp) + 2)
    fwd = single_op_graph("ConvTranspose", [("f32", data(n, ic, sp, dfmt)), ("f32", w)], [("f32", shp)], attrs)
    dst = list(fwd.ops[0].outputs[0].shape)
    if kind == "ConvTranspose":
        gr = single_op_graph(kind, [("f32", data(n, ic, sp, dfmt)), ("f32", w), ("f32", [oc])], [("f32", shp)], attrs)
    elif kind == "ConvTransposeBackwardData":
        gr = single_op_graph(kind, [("f32", dst), ("f32", w)], [("f32", shp)], attrs)
    else:
        attrs["weights_shape"] = w
        gr = single_op_graph(kind, [("f32", data(n, ic, sp, dfmt)), ("f32", dst)], [("f32", [-1] * len(w))], attrs)
    return gr


#: a batch, input channels or output channels of 0 (im2col and Winograd geometries)
EMPTY_GEOMS = [(0, 4, 6, (5, 5), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
               (2, 0, 6, (5, 5), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
               (2, 4, 0, (5, 5), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
               (2, 0, 6, (7,), (2,), {"strides": (2,)}), (0, 2, 2, (4, 4), (1, 1), {})]


@pytest.mark.parametrize("geom", EMPTY_GEOMS, ids=lambda g: f"n{g[0]}c{g[1]}oc{g[2]}")
@pytest.mark.parametrize("kind", ["Convolution", "ConvolutionBackwardData", "ConvolutionBackwardWeights",
                                  "ConvTranspose", "ConvTransposeBackwardData", "ConvTransposeBackwardWeights"])
def test_empty_batch_or_channels(kind, geom):
    """A dim of 0 in N, C or OC: an empty output, or one of sums of no products
    (zeros, plus the bias), as the reference gives (a ZeroDivisionError before)."""
    if kind.startswith("ConvTranspose"):
        g = deconv_graph(kind, geom, "NCX", "OIX")
    else:
        g = conv_graph(kind, "f32", geom, "NXC", "XIO", bias=kind == "Convolution")
    inputs = make_inputs(g, 0)
    (got,) = check_compiled(g, inputs, what=f"{kind} {geom}").values()
    if kind == "Convolution" and geom[1] == 0 and geom[0] * geom[2]:   # sums of no products: the bias
        bias = inputs[g.input_ports[2]]
        np.testing.assert_array_equal(got, np.broadcast_to(bias, got.shape))


@pytest.mark.parametrize("order", [(0, 2, 3, 1), (1, 0, 2, 3)])
def test_strided_layouts(order):
    """src and weights in layouts other than their formats' dense ones, with gaps."""
    x, w = [2, 6, 7, 8], [5, 6, 3, 3]
    attrs = win(2, data_format="NCX", weights_format="OIX", pads_begin=(1, 1), pads_end=(1, 1))
    g = one_op("Convolution", [("f32", x, strides(x, order, 2)), ("f32", w, strides(w, order, 1))],
               [("f32", [2, 5, 7, 8])], attrs)
    check_compiled(g, what=str(order))


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("post", ["BiasAdd-ReLU", "Add-ReLU", "ReLU", "Multiply-Add"])
def test_conv_epilogue_is_one_partition(dtype, post):
    """Convolution -> bias / residual add / eltwise: the catalog's conv_post_ops in
    one kernel, post-ops applied where the GEMM tiles are stored."""
    from graphc.builder import GraphBuilder
    from graphc.passes.catalog import catalog
    from graphc.passes.pattern import match_all
    b = GraphBuilder()
    x, w = b.tensor(dtype, [2, 9, 10, 8]), b.tensor(dtype, [3, 3, 8, 12])
    y = b.op("Convolution", [x, w], out=[(dtype, [-1] * 4)], attrs=win(2, pads_begin=(1, 1), pads_end=(1, 1)))[0]
    kinds = post.split("-")
    for k in kinds:
        if k == "BiasAdd":
            y = b.op(k, [y, b.tensor(dtype, [12])], attrs={"data_format": "NXC"})[0]
        elif k in ("Add", "Multiply"):
            y = b.op(k, [y, b.tensor(dtype, [2, 9, 10, 12] if k == "Add" else [12])])[0]
        else:
            y = b.op(k, [y])[0]
    g = b.finalize()
    ms = match_all(g, list(catalog()))
    assert [o.kind for o in ms[0].ops] == ["Convolution"] + kinds
    cg, _ = compiled_vs_reference(g, what=post)
    gemm = _bf16_gemm_call(shifted=True) if dtype == "bf16" and bf16_conv_gemm() else "gemm_f32("
    assert len(cg.compiled) == 1 and gemm in cg.source


def test_shape_inputs_specialise_the_kernel():
    """dst_shape given as an input tensor: the partition compiles at its first run
    for the values given, once per distinct shape (a stride-2 data gradient has
    two src sizes giving the same diff_dst)."""
    import numpy as np
    import graphc
    from graphc import reference
    from support.compare import assert_outputs
    attrs = win(2, strides=(2, 2), pads_begin=(1, 1), pads_end=(1, 1), data_format="NCX", weights_format="OIX")
    g = single_op_graph("ConvolutionBackwardData", [("f32", [1, 4, 4, 4]), ("f32", [4, 3, 3, 3]), ("s32", [4])],
                        [("f32", [-1, -1, -1, -1])], attrs)
    cg = graphc.compile(g)
    rng = np.random.default_rng(0)
    dy, w = rng.standard_normal((1, 4, 4, 4), np.float32), rng.standard_normal((4, 3, 3, 3), np.float32)
    for size in (7, 8, 7):
        feeds = dict(zip(g.input_ports, [dy, w, np.array([1, 3, size, size], np.int32)]))
        got, want = cg.run(feeds), reference.run(g, feeds)
        assert next(iter(got.values())).shape == (1, 3, size, size)
        assert_outputs(got, want, {t: g.tensors[t].dtype for t in want}, what=str(size))
    assert len(cg.compiled[0].specializations) == 2
    bad = dict(zip(g.input_ports, [dy, w, np.array([1, 3, 9, 9], np.int32)]))
    with pytest.raises(graphc.GraphcError, match="ConvolutionBackwardData"):
        cg.run(bad)


WINOGRAD = [
    # 3x3 at unit strides with >= 16 channels per group: Winograd F(2x2, 3x3)
    (2, 16, 24, (9, 11), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 32, 16, (12, 12), (3, 3), {}),
    (1, 32, 32, (11, 12), (3, 3), {"groups": 2, "pads_begin": (1, 0), "pads_end": (0, 1)}),
    (3, 16, 16, (12, 7), (3, 3), {"auto_pad": "SAME_UPPER"}),
]


@pytest.mark.parametrize("geom", WINOGRAD, ids=lambda g: f"{g[3]}c{g[1]}")
@pytest.mark.parametrize("dtype,dfmt,wfmt", [("f32", "NXC", "XIO"), ("f32", "NCX", "OIX"), ("bf16", "NXC", "XIO")])
def test_winograd(geom, dtype, dfmt, wfmt):
    """(bf16 operands multiply on graphc's bf16 tile where the CPU has it, not in Winograd.)"""
    g = conv_graph("Convolution", dtype, geom, dfmt, wfmt, bias=True)
    cg, _ = compiled_vs_reference(g, what=f"{geom} {dtype} {dfmt}")
    if dtype == "bf16" and dfmt == "NXC" and bf16_conv_gemm():
        assert "bf16_shifted_gemm" in cg.compiled[0].get_impl_info()
    else:
        assert "wu" in cg.source   # the transformed weights: the Winograd kernel ran


@pytest.mark.parametrize("geom", WINOGRAD, ids=lambda g: f"{g[3]}c{g[1]}")
@pytest.mark.parametrize("dtype,dfmt,wfmt", [("f32", "NXC", "XIO"), ("f32", "NCX", "OIX"), ("bf16", "NXC", "XIO"),
                                             ("bf16", "NCX", "OIX")])
def test_winograd_weight_gradient(geom, dtype, dfmt, wfmt):
    """ConvolutionBackwardWeights of a 3x3 window at unit strides: Winograd's
    gradient G^T [sum (A dy A^T) * (B^T d B)] G (odd sizes, groups, pads)."""
    from graphc.codegen import bf16_gemm
    g = conv_graph("ConvolutionBackwardWeights", dtype, geom, dfmt, wfmt)
    cg, _ = compiled_vs_reference(g, what=f"{geom} {dtype} {dfmt}")
    tile = dtype == "bf16" and bf16_tile_gemm() and bf16_gemm.AMX     # (test_weight_gradient_on_the_tile)
    assert ("bf16_tile_weights" if tile else "winograd_weights") in cg.compiled[0].get_impl_info()


@pytest.mark.parametrize("wfmt", ["OIX", "IOX"])
def test_winograd_transposed_weight_gradient(wfmt):
    """ConvTransposeBackwardWeights at unit strides is a forward convolution's
    weight gradient: Winograd too (swapped O and I, groups)."""
    g = deconv_graph("ConvTransposeBackwardWeights", (2, 32, 32, (9, 8), (3, 3), {"groups": 2, "pads_begin": (1, 1),
                                                                                  "pads_end": (1, 1)}), "NCX", wfmt)
    cg, _ = compiled_vs_reference(g, what=wfmt)
    assert "winograd_weights" in cg.compiled[0].get_impl_info()


@pytest.mark.parametrize("extra", [{"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)},
                                   {"dilations": (2, 2)}], ids=["stride2", "dilation2"])
def test_weight_gradient_off_winograd(extra):
    """Strided or dilated 3x3 windows keep the im2col weight gradient."""
    g = conv_graph("ConvolutionBackwardWeights", "f32", (2, 16, 16, (11, 10), (3, 3), extra), "NXC", "XIO")
    cg, _ = compiled_vs_reference(g, what=str(extra))
    assert "im2col_weights" in cg.compiled[0].get_impl_info()


def test_winograd_transposed_data_gradient():
    """ConvTransposeBackwardData at unit strides is a forward convolution: Winograd too."""
    attrs = win(2, pads_begin=(1, 1), pads_end=(1, 1), data_format="NXC", weights_format="XOI")
    g = single_op_graph("ConvTransposeBackwardData", [("f32", [2, 9, 9, 24]), ("f32", [3, 3, 24, 16])],
                        [("f32", [-1] * 4)], attrs)
    cg, _ = compiled_vs_reference(g)
    assert "wu" in cg.source


@pytest.mark.parametrize("kind", ["ConvolutionBackwardData", "ConvTranspose"])
@pytest.mark.parametrize("geom", WINOGRAD + GEOMS[:1] + GEOMS[5:6], ids=lambda g: f"{g[3]}c{g[1]}")
def test_unit_stride_data_gradient_runs_forward(kind, geom):
    """At unit strides the data gradient (and ConvTranspose) is a forward
    convolution with flipped weights: Winograd or the shifted GEMMs, no col2im."""
    n, c, oc, sp, k, extra = geom
    attrs = win(len(sp), data_format="NXC", weights_format="XIO", **extra)
    g = attrs.get("groups", 1)
    if kind == "ConvolutionBackwardData":
        gr = conv_graph(kind, "f32", geom, "NXC", "XIO")
    else:
        attrs["weights_format"] = "XIO"
        gr = single_op_graph(kind, [("f32", data(n, c, sp, "NXC")), ("f32", weights(oc, c // g, k, "XIO")),
                                    ("f32", [oc])], [("f32", [-1] * (len(sp) + 2))], attrs)
    cg, _ = compiled_vs_reference(gr, what=f"{kind} {geom}")
    assert "acc" not in cg.source and ("wu" in cg.source or "xp" in cg.source)

# bf16 convolutions on graphc's AVX512-BF16 tile (graphc.codegen.conv_bf16): the
# shifted GEMMs (unit strides) and im2col (strides, 1x1) with bf16 operands, on
# shapes whose GEMMs have edges (M, N, K not multiples of the tile: 8 rows, 32
# columns, pairs of k), strides, pads, dilations, groups, both layouts, the data
# gradient at unit strides, and f32 under fpmath_mode bf16
on_the_tile = pytest.mark.skipif(not bf16_tile_gemm(), reason="the CPU has no AVX512-BF16 (bf16 convs widen to f32)")

#: (N, C, OC, spatial, kernel, attrs): odd channel counts (a k of odd pairs, OC past a panel of 32)
EDGES = [
    (2, 5, 37, (7, 9), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 3, 33, (10, 6), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (0, 1)}),
    (1, 66, 40, (5, 5), (1, 1), {}),
    (2, 9, 9, (8, 8), (3, 3), {"dilations": (2, 2), "pads_begin": (2, 2), "pads_end": (2, 2)}),
]


def _road(cg):
    return cg.compiled[0].get_impl_info()


@on_the_tile
@pytest.mark.parametrize("geom", GEOMS + WINOGRAD + EDGES, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
@pytest.mark.parametrize("dfmt,wfmt", [("NXC", "XIO"), ("NCX", "OIX")])
def test_forward_on_the_tile(geom, dfmt, wfmt):
    g = conv_graph("Convolution", "bf16", geom, dfmt, wfmt, bias=True)
    for inputs in (None, normal_inputs(g)):
        cg, _ = compiled_vs_reference(g, inputs, what=f"{geom} {dfmt}")
    unit = all(s == 1 for s in geom[5].get("strides", [1]))
    if dfmt == "NCX" and geom in WINOGRAD:
        # (Winograd is faster than the tile channels first, unless the tile sums every tap in its registers)
        from graphc.codegen import bf16_gemm
        every = bf16_gemm.AMX and geom[1] // geom[5].get("groups", 1) % 32 == 0
        assert ("bf16_shifted_gemm" if every else "winograd") in _road(cg), _road(cg)
        return
    road = "bf16_shifted_gemm" if unit and np.prod(geom[4]) > 1 else "bf16_gemm"
    assert road in _road(cg) and bf16_tile_name() in _road(cg), _road(cg)


#: (N, C, OC, spatial, kernel, attrs): channels per group whole steps of AMX's tile (32 of k)
EVERY_TAP = [
    (2, 64, 40, (9, 10), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 64, 24, (7, 8), (3, 3), {"groups": 2, "pads_begin": (1, 0), "pads_end": (0, 2)}),
    (2, 32, 16, (12,), (5,), {"dilations": (2,), "pads_begin": (4,), "pads_end": (2,)}),
    (1, 32, 8, (4, 5, 6), (2, 3, 2), {"pads_begin": (1, 1, 0), "pads_end": (0, 1, 1)}),
    (1, 64, 64, (6, 7), (3, 3), {"dilations": (2, 2), "pads_begin": (2, 2), "pads_end": (2, 2)}),
    # rows of 16 positions and more: channels-first bf16 src moved by 16 x 16 blocks transposed
    (1, 32, 24, (5, 37), (3, 3), {"pads_begin": (1, 2), "pads_end": (0, 1)}),
    (2, 64, 32, (3, 4, 20), (2, 3, 3), {"pads_begin": (1, 0, 0), "pads_end": (0, 1, 2)}),
    (1, 32, 16, (40,), (5,), {"dilations": (2,), "pads_begin": (3,), "pads_end": (5,)}),
]
#: virtual rows of 512 bytes and 1 KB (whose tile loads conflict in L1): copied 64 bytes further apart
WIDE_ROWS = [
    (1, 256, 256, (5, 18), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 1024, 64, (4, 5), (3, 3), {"groups": 2, "pads_begin": (1, 1), "pads_end": (1, 1)}),
]


@on_the_tile
@pytest.mark.parametrize("geom", EVERY_TAP + WIDE_ROWS, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
@pytest.mark.parametrize("kind", ["Convolution", "ConvolutionBackwardData"])
@pytest.mark.parametrize("dfmt,wfmt", [("NXC", "XIO"), ("NCX", "OIX")])
def test_every_tap_summed_in_the_tile(geom, kind, dfmt, wfmt):
    """Channels per group whole steps of AMX's tile: each virtual row is one
    position's channels, every tap a row offset, and one tile call sums a tile
    of C's taps in the tile registers (``bf16_taps``), reading a last slice's
    MR rows whole; elsewhere the outer taps' ``bf16_block`` calls.  Channels-first
    src with rows of 16 positions or more is moved into the virtual rows by
    16 x 16 blocks transposed in registers (``transpose_u16``), the rest of a
    row value by value."""
    from graphc.codegen import bf16_gemm
    g = conv_graph(kind, "bf16", geom, dfmt, wfmt)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=f"{geom} {kind} {dfmt}")
    channels = geom[1] if kind == "Convolution" else geom[2]     # (of the forward convolution run)
    every = bf16_gemm.AMX and channels // geom[5].get("groups", 1) % 32 == 0
    assert ("bf16_taps(" in cg.source) == every
    if dfmt == "NXC" or every:
        assert "bf16_shifted_gemm" in _road(cg), _road(cg)
    src_width = geom[3][-1] if kind == "Convolution" else None
    if src_width is not None:
        assert ("transpose_u16(" in cg.source) == (every and dfmt == "NCX" and src_width >= 16)


#: (N, C, OC, spatial, kernel, attrs) of weight gradients on AMX's tile: channels past
#: a tile's rows and panels, groups, dilations, 1-D and 3-D, images of more than one
#: block of virtual rows (bf16_weights.KB), unit and other windows
WEIGHT_TILE = EVERY_TAP + EDGES[:1] + [
    (2, 48, 40, (30, 29), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (3, 16, 8, (6, 6), (1, 1), {}),
    (1, 8, 12, (5, 6), (2, 2), {"groups": 2, "pads_begin": (0, 1), "pads_end": (1, 0)}),
]


@on_the_tile
@pytest.mark.parametrize("geom", WEIGHT_TILE, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
@pytest.mark.parametrize("dfmt,wfmt", [("NXC", "XIO"), ("NCX", "OIX")])
def test_weight_gradient_on_the_tile(geom, dfmt, wfmt):
    """bf16 weight gradients at unit strides on AMX's tile (graphc.codegen.
    conv_weights_bf16): each tap's product over every position reads the same
    packed dy and the transposed copy of src from the tap's offset; elsewhere
    Winograd or im2col."""
    from graphc.codegen import bf16_gemm
    g = conv_graph("ConvolutionBackwardWeights", "bf16", geom, dfmt, wfmt)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=f"{geom} {dfmt}")
    assert ("bf16_tile_weights" in cg.compiled[0].get_impl_info()) == bf16_gemm.AMX
    assert ("bf16_weight_taps(" in cg.source) == bf16_gemm.AMX


@on_the_tile
def test_every_tap_with_src_a_fused_op_computes():
    """The int8-to-bf16 convolution frameworks dump (u8 Dequantize -> TypeCast bf16,
    s8 weights likewise -> Convolution NCX -> Add; oneDNN's
    int8_bf16_conv_binary_add_fusion at Stable Diffusion's 320 channels): src is
    a value the kernel computes, not an array, so the every-tap road copies it
    value by value (no block transpose of an array it does not have)."""
    from graphc.codegen import bf16_gemm
    from support.fusion import dequantize
    b = GraphBuilder()
    x, w = b.tensor("u8", [1, 32, 6, 20]), b.tensor("s8", [16, 32, 3, 3])
    dx = b.op("TypeCast", [dequantize(b, x, {"qtype": "per_tensor", "scales": [2.0 ** -4], "zps": [19]})],
              out=[("bf16", [1, 32, 6, 20])])[0]
    dw = b.op("TypeCast", [dequantize(b, w, {"qtype": "per_channel", "axis": 0, "scales": [2.0 ** -6] * 16,
                                                "zps": [0] * 16})], out=[("bf16", [16, 32, 3, 3])])[0]
    y = b.op("Convolution", [dx, dw, b.tensor("bf16", [16])], out=[("bf16", [1, 16, 6, 20])],
             attrs=win(2, pads_begin=(1, 1), pads_end=(1, 1), data_format="NCX", weights_format="OIX"))[0]
    b.op("Add", [y, b.tensor("bf16", [1, 16, 1, 1])])
    g = b.finalize()
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert len(cg.compiled) == 1
    assert ("bf16_taps(" in cg.source) == bf16_gemm.AMX and "transpose_u16(" not in cg.source


@on_the_tile
@pytest.mark.parametrize("geom", [GEOMS[0], WINOGRAD[2], EDGES[0]], ids=lambda g: f"c{g[1]}{g[3]}")
def test_data_gradient_at_unit_strides_on_the_tile(geom):
    """ConvolutionBackwardData at unit strides is a forward convolution of dy: the
    same bf16 road, with the flipped, transposed weights packed for the tile."""
    g = conv_graph("ConvolutionBackwardData", "bf16", geom, "NXC", "XIO")
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=str(geom))
    assert "bf16_shifted_gemm" in _road(cg), _road(cg)


@on_the_tile
@pytest.mark.parametrize("geom", [GEOMS[1], GEOMS[4], GEOMS[6], EDGES[1],
                                  (2, 8, 12, (9, 8), (3, 3), {"strides": (2, 2), "groups": 2})],
                         ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}")
@pytest.mark.parametrize("dfmt,wfmt", [("NXC", "XIO"), ("NCX", "OIX")])
def test_strided_data_gradient_on_the_tile(geom, dfmt, wfmt):
    """A strided ConvolutionBackwardData: col2im of dY @ W^T, the product on the
    tile (dY's bits in place or packed, W^T's panels from the weights in place or
    copied), the columns summed in f32."""
    g = conv_graph("ConvolutionBackwardData", "bf16", geom, dfmt, wfmt)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=f"{geom} {dfmt}")
    assert "col2im" in _road(cg) and "bf16_gemm" in _road(cg), _road(cg)


@on_the_tile
def test_f32_under_fpmath_bf16_takes_the_tile():
    """f32 src and weights read rounded to bf16 (fpmath_mode bf16) are bf16 values:
    the tile multiplies them, as the reference rounds them."""
    b = GraphBuilder(fpmath_mode="bf16")
    x, w = b.tensor("f32", [2, 9, 10, 20]), b.tensor("f32", [3, 3, 20, 24])
    b.op("Convolution", [x, w], out=[("f32", [-1] * 4)],
         attrs=dict(strides=(1, 1), dilations=(1, 1), pads_begin=(1, 1), pads_end=(1, 1), data_format="NXC",
                    weights_format="XIO"))
    g = b.finalize()
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert "bf16_shifted_gemm" in _road(cg), _road(cg)


@on_the_tile
@pytest.mark.parametrize("dfmt,wfmt,road", [("NXC", "XIO", "im2col_weights"), ("NCX", "OIX", "bf16_few_positions")])
def test_weight_gradient_with_large_sums_and_few_positions_leaves_the_tile(dfmt, wfmt, road):
    """A 1x1 gradient of 512 x 1024 channels over 3x3 positions: a thread's partial
    sums (2 MB) would be added into from memory by items of 32 virtual rows; it
    takes the few-positions road (channels first) or im2col."""
    from graphc.codegen.conv_weights_bf16 import PARTIAL_BYTES
    geom = (2, 512, 1024, (3, 3), (1, 1), {})
    assert 512 * 1024 * 4 > PARTIAL_BYTES
    g = conv_graph("ConvolutionBackwardWeights", "bf16", geom, dfmt, wfmt)
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert "bf16_tile_weights" not in _road(cg) and road in _road(cg), _road(cg)


#: (N, C, OC, spatial, kernel, attrs) of weight gradients over few positions whose dW is
#: large (graphc.codegen.conv_weights_cf: MIN_SUMS bytes of sums a group at least) or whose
#: window is strided
FEW_POSITIONS = [
    (2, 128, 256, (5, 6), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 128, 256, (7, 7), (3, 3), {"pads_begin": (1, 1), "pads_end": (1, 1)}),     # K odd: a half pair
    (1, 1024, 272, (4, 4), (1, 1), {}),                                              # OC past whole blocks
    (2, 128, 160, (9, 9), (3, 3), {"strides": (2, 2), "pads_begin": (1, 1), "pads_end": (1, 1)}),
    (1, 256, 512, (4, 5), (3, 3), {"groups": 2, "pads_begin": (1, 0), "pads_end": (0, 1)}),
    (1, 96, 200, (3, 4, 5), (3, 3, 3), {"pads_begin": (1, 1, 1), "pads_end": (1, 1, 1)}),
]


@on_the_tile
@pytest.mark.parametrize("geom", FEW_POSITIONS, ids=lambda g: f"c{g[1]}oc{g[2]}{g[3]}k{g[4]}")
def test_weight_gradient_over_few_positions(geom):
    """Channels-first bf16 weight gradients over few dst positions: every
    position of the batch in one GEMM's k, dW made by blocks on the tile
    (no partial sums); the blocks' columns are whole input channels' taps."""
    g = conv_graph("ConvolutionBackwardWeights", "bf16", geom, "NCX", "OIX")
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=str(geom))
    assert "bf16_few_positions" in _road(cg), _road(cg)


@on_the_tile
def test_f32_weight_gradient_over_few_positions_under_fpmath_bf16():
    """f32 src and dy read rounded to bf16 (fpmath_mode bf16) on the same road."""
    b = GraphBuilder(fpmath_mode="bf16")
    x, dy = b.tensor("f32", [1, 128, 7, 7]), b.tensor("f32", [1, 256, 7, 7])
    b.op("ConvolutionBackwardWeights", [x, dy], out=[("f32", [256, 128, 3, 3])],
         attrs=dict(strides=(1, 1), dilations=(1, 1), pads_begin=(1, 1), pads_end=(1, 1), data_format="NCX",
                    weights_format="OIX", weights_shape=[256, 128, 3, 3]))
    g = b.finalize()
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert "bf16_few_positions" in _road(cg), _road(cg)


@on_the_tile
@pytest.mark.parametrize("dfmt,wfmt", [("NXC", "XIO"), ("NCX", "OIX")])
def test_f32_weight_gradient_under_fpmath_bf16(dfmt, wfmt):
    """The weight gradient of f32 src and dy read rounded to bf16 (fpmath_mode
    bf16): on AMX's tile, each value rounded as it is copied (no block
    transposes of f32 arrays); Winograd elsewhere."""
    from graphc.codegen import bf16_gemm
    b = GraphBuilder(fpmath_mode="bf16")
    shape = [2, 9, 10, 32] if dfmt == "NXC" else [2, 32, 9, 10]
    x, dy = b.tensor("f32", shape), b.tensor("f32", shape)
    wshape = [3, 3, 32, 32] if wfmt == "XIO" else [32, 32, 3, 3]
    b.op("ConvolutionBackwardWeights", [x, dy], out=[("f32", wshape)],
         attrs=dict(strides=(1, 1), dilations=(1, 1), pads_begin=(1, 1), pads_end=(1, 1), data_format=dfmt,
                    weights_format=wfmt, weights_shape=wshape))
    g = b.finalize()
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert ("bf16_tile_weights" in _road(cg)) == bf16_gemm.AMX, _road(cg)
    assert "transpose_u16(" not in cg.source


@on_the_tile
def test_bf16_one_by_one_reads_src_in_place():
    """A 1x1 convolution of NXC bf16 src: the tile reads src's rows as they lie (no
    im2col panel), K = 70 channels (35 pairs) and OC = 45 (a panel and a part)."""
    attrs = win(2, data_format="NXC", weights_format="XIO")
    g = single_op_graph("Convolution", [("bf16", [2, 7, 6, 70]), ("bf16", [1, 1, 70, 45])], [("bf16", [-1] * 4)],
                        attrs)
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert "bf16_gemm" in _road(cg) and "cols" not in cg.source, cg.source


# Cropped outputs (graphc.codegen.conv_views.visible_box): a transposed
# convolution whose pads_end crops most of its full output reads only the src
# positions that reach what is left (ConvTranspose, ConvTransposeBackwardWeights:
# the dy side), and its data gradient computes only the diff_src positions whose
# window meets diff_dst, the others stored as sums of no products (0, plus bias)
CROPPED = [
    # (N, IC, OC, src spatial, kernel, extra): the benchdnn case's geometry (the
    # output 16x16 of the full 57x57; 128 output channels in two blocks)
    (1, 32, 128, (28, 28), (3, 3), {"strides": (2, 2), "pads_end": (41, 41)}),
    (2, 6, 8, (9, 11), (3, 2), {"strides": (3, 2), "pads_begin": (2, 0), "pads_end": (17, 9)}),
    (1, 5, 4, (10, 9), (3, 3), {"strides": (3, 3), "pads_begin": (0, 4), "pads_end": (20, 3)}),
    (1, 4, 6, (9, 8), (3, 3), {"dilations": (2, 3), "strides": (2, 1), "pads_end": (12, 9)}),
    (2, 8, 6, (7, 8), (3, 3), {"groups": 2, "strides": (2, 2), "output_padding": (1, 1), "pads_end": (9, 6)}),
    (1, 4, 4, (6, 5, 7), (2, 2, 3), {"strides": (2, 1, 2), "pads_begin": (0, 1, 0), "pads_end": (7, 2, 9)}),
]


@pytest.mark.parametrize("geom", CROPPED, ids=lambda g: f"{g[3]}s{g[5].get('strides')}")
@pytest.mark.parametrize("kind", ["ConvTranspose", "ConvTransposeBackwardData", "ConvTransposeBackwardWeights"])
@pytest.mark.parametrize("dfmt,wfmt", [("NCX", "IOX"), ("NXC", "XIO"), ("NCX", "OIX"), ("NXC", "XOI")])
def test_cropped_conv_transpose(kind, geom, dfmt, wfmt):
    g = deconv_graph(kind, geom, dfmt, wfmt)
    cg, _ = compiled_vs_reference(g, normal_inputs(g), what=f"{kind} {geom} {dfmt} {wfmt}")
    assert "cropped" in _road(cg), _road(cg)


def test_cropped_conv_transpose_splits_channels():
    """One image and group: the col2im road splits the output channels in
    blocks, one per thread, each with its own GEMM and accumulator; IOX
    weights are read in place (no packed panel)."""
    from graphc.codegen.kernel import plan_threads
    g = deconv_graph("ConvTranspose", CROPPED[0], "NCX", "IOX")
    cg, _ = compiled_vs_reference(g, normal_inputs(g))
    assert ("channel_blocks" in _road(cg)) == (plan_threads() > 1), _road(cg)
    assert "wp" not in cg.source, cg.source


#: forward convolutions with dst positions whose window lies in the padding alone
#: (Winograd, the shifted GEMMs, im2col); the last one has no other dst position
PADDED = [
    (1, 16, 16, (6, 7), (3, 3), {"pads_begin": (4, 3), "pads_end": (5, 4)}),
    (2, 6, 5, (5, 6), (2, 3), {"pads_begin": (3, 0), "pads_end": (4, 6)}),
    (1, 4, 6, (8, 7), (3, 3), {"strides": (2, 3), "pads_begin": (5, 1), "pads_end": (6, 8)}),
    (1, 4, 6, (2, 2), (1, 1), {"strides": (3, 3), "pads_begin": (1, 1)}),
]


@pytest.mark.parametrize("geom", PADDED, ids=lambda g: f"{g[3]}k{g[4]}")
@pytest.mark.parametrize("kind", ["Convolution", "ConvolutionBackwardData", "ConvolutionBackwardWeights"])
@pytest.mark.parametrize("dtype,dfmt,wfmt", [("f32", "NCX", "OIX"), ("f32", "NXC", "XIO"), ("bf16", "NXC", "XIO")])
def test_padding_only_windows(kind, geom, dtype, dfmt, wfmt):
    g = conv_graph(kind, dtype, geom, dfmt, wfmt, bias=kind == "Convolution")
    inputs = normal_inputs(g)
    cg, got = compiled_vs_reference(g, inputs, what=f"{kind} {geom} {dtype} {dfmt}")
    assert "cropped" in _road(cg), _road(cg)
    if geom is PADDED[-1]:      # no product anywhere: the bias, zeros
        (out,) = got.values()
        bias = inputs[g.input_ports[2]] if kind == "Convolution" else np.zeros(1)
        want = np.broadcast_to(bias.reshape(-1, 1, 1) if dfmt == "NCX" else bias, out.shape)
        np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(want, np.float32))
