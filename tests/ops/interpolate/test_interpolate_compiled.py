"""Generated Interpolate and InterpolateBackward kernels against graphc's
reference: nearest / linear / bilinear / trilinear, half_pixel and
align_corners, NCX and NXC, 1 to 3 spatial dims, up and down sizes, f32 / bf16
/ f16, strided layouts with gaps, parallel kernels, the interpolate_post_ops
fusion, and the corpus' forms oneDNN runs (a diff_dst that is not
floor(src * scale), sizes given as fractions in --op-attrs)."""
import json

import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.bench.knobs import parse
from graphc.bench.rewrite import build_graph
from graphc.builder import GraphBuilder
from support import assert_outputs, check_compiled, one_op, strides


def attrs(mode, fmt, ctm="half_pixel", **kw):
    return {"mode": mode, "data_format": fmt, "coordinate_transformation_mode": ctm, **kw}


def spatial_of(shape, fmt):
    return list(shape[2:]) if fmt == "NCX" else list(shape[1:-1])


def port(dt, shape, layout):
    """(dtype, shape, strides): ``layout`` the dims in memory order, outermost
    first, with gaps (pad 2) in the layout's rows; None for dense."""
    return (dt, shape, strides(shape, layout, pad=2) if layout else None)


# (dtype, src shape, dst shape, attributes, layout of src and dst)
CASES = [
    ("f32", [2, 3, 7], [2, 3, 12], attrs("linear", "NCX"), None),
    ("f32", [2, 6, 5, 3], [2, 9, 2, 3], attrs("bilinear", "NXC", "align_corners"), None),
    ("bf16", [1, 3, 4, 5, 6], [1, 3, 6, 3, 6], attrs("trilinear", "NCX"), None),
    ("f16", [2, 5, 4, 3], [2, 8, 2, 3], attrs("nearest", "NXC"), None),
    ("f32", [2, 3, 5, 7], [2, 3, 3, 11], attrs("nearest", "NCX", "align_corners"), [0, 2, 3, 1]),   # acdb
    ("f16", [2, 4, 5], [2, 4, 1], attrs("nearest", "NCX", "align_corners"), None),                  # dst dim 1
    ("bf16", [1, 4, 3, 5, 2], [1, 7, 2, 4, 2], attrs("nearest", "NXC"), None),
    ("f32", [2, 3, 3, 11], [2, 3, 5, 11], attrs("linear", "NCX"), [0, 2, 3, 1]),     # an identity axis, acdb
    ("f16", [2, 3, 4, 5, 6], [2, 3, 2, 7, 6], attrs("linear", "NCX", "align_corners"), None),
]
IDS = [f"{dt}-{at['mode']}-{at['data_format']}-{at['coordinate_transformation_mode']}-{len(s) - 2}d"
       + ("-strided" if lay else "") for dt, s, _, at, lay in CASES]


def forward(dt, src, dst, at, layout, by="sizes"):
    sp_src, sp_dst = spatial_of(src, at["data_format"]), spatial_of(dst, at["data_format"])
    at = dict(at, **({"sizes": sp_dst} if by == "sizes" else {"scales": [d / s for d, s in zip(sp_dst, sp_src)]}))
    return one_op("Interpolate", [port(dt, src, layout)], [port(dt, dst, layout)], at)


def backward(dt, src, dst, at, layout):
    at = dict(at, sizes=spatial_of(dst, at["data_format"]))
    return one_op("InterpolateBackward", [port(dt, src, layout), port(dt, dst, layout)],
                  [port(dt, src, layout)], at)


@pytest.mark.parametrize("dt,src,dst,at,layout", CASES, ids=IDS)
def test_forward(dt, src, dst, at, layout):
    by = "scales" if at["mode"] == "bilinear" else "sizes"
    check_compiled(forward(dt, src, dst, at, layout, by), what=f"{dt} {src} {at}")


@pytest.mark.parametrize("dt,src,dst,at,layout", CASES, ids=IDS)
def test_backward(dt, src, dst, at, layout):
    check_compiled(backward(dt, src, dst, at, layout), what=f"{dt} {src} -> {dst} {at}")


@pytest.mark.parametrize("kind", ["Interpolate", "InterpolateBackward"])
def test_parallel(kind):
    # 2 x 16 x 128 x 64 dst elements: enough work for prange
    at = attrs("bilinear", "NXC")
    src, dst = [2, 64, 32, 16], [2, 128, 64, 16]
    g = forward("f32", src, dst, at, None) if kind == "Interpolate" else backward("f32", src, dst, at, None)
    check_compiled(g, parallel=True, what=kind)


def test_backward_takes_the_dst_dims_from_diff_dst():
    # the corpus' interpolate_bwd_2d: floor(17 * 1.235294) = 20, yet diff_dst has 21, as oneDNN runs it
    at = attrs("linear", "NCX", scales=[1.235294])
    g = one_op("InterpolateBackward", [("f32", [2, 5, 17]), ("f32", [2, 5, 21])], [("f32", [-1, -1, -1])], at)
    assert g.ops[0].outputs[0].shape == (2, 5, 17)
    check_compiled(g, what="17 <- 21")


def test_backward_with_a_sizes_input_compiles():
    g = one_op("InterpolateBackward", [("f32", [2, 3, 5]), ("f32", [2, 3, 8]), ("s32", [1])],
               [("f32", [-1, -1, -1])], attrs("linear", "NCX"))
    check_compiled(g, what="sizes input")


def test_forward_with_a_sizes_input_specialises_on_them():
    """sizes given as an input tensor: the kernel compiles at the first run for the
    sizes given, once per distinct sizes (value_inputs), and matches the reference."""
    g = one_op("Interpolate", [("f32", [2, 3, 5]), ("s32", [1])], [("f32", [2, 3, -1])], attrs("linear", "NCX"))
    cg = graphc.compile(g)
    x = np.random.default_rng(0).standard_normal((2, 3, 5)).astype(np.float32)
    for size in (8, 3, 8):
        feeds = dict(zip(g.input_ports, [x, np.array([size], np.int32)]))
        got, want = cg.run(feeds), reference.run(g, feeds)
        (tid,) = want
        assert got[tid].shape == (2, 3, size)
        assert_outputs(got, want, {tid: g.tensors[tid].dtype}, what=str(size))
    assert len(cg.compiled[0].specializations) == 2


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_interpolate_post_ops_fuse(fmt):
    """Interpolate -> ReLU -> Add (a per-channel bias): one partition, the reference's values."""
    b = GraphBuilder()
    x = b.tensor("f32", [2, 3, 5, 4] if fmt == "NCX" else [2, 5, 4, 3])
    y = b.op("Interpolate", [x], out=[("f32", [-1] * 4)], attrs=attrs("bilinear", fmt, sizes=[7, 3]))[0]
    z = b.op("ReLU", [y])[0]
    b.op("Add", [z, b.tensor("f32", [3, 1, 1] if fmt == "NCX" else [3])])
    g = b.finalize()
    (part,) = g.get_partitions("fusion")
    assert [o.kind for o in part.ops] == ["Interpolate", "ReLU", "Add"] and part.pattern == "interpolate_post_ops"
    check_compiled(g, seed=3, what=fmt)


def test_sizes_given_as_fractions_read_as_benchdnn_reads_them(corpus):
    # harness_{bf16,f16}_all: --op-attrs=0:sizes:0.6x1 on interpolate_bwd.json; benchdnn's
    # std::stoll reads 0 and 1, which the backward op does not use (diff_dst gives the dims)
    doc = json.loads((corpus / "f32" / "interpolate_bwd.json").read_text())
    case = parse(["--in-shapes=0:2x16x5x11+1:2x16x3x11", "--op-attrs=0:sizes:0.6x1",
                  "--case=op/f32/interpolate_bwd.json"]).cases[0]
    g = build_graph(doc, case.values)
    assert g.ops[0].attr("sizes") == (0, 1)
    check_compiled(g, what="sizes 0.6x1")
