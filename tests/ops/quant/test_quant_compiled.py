"""Generated kernels of Quantize, Dequantize, DynamicQuantize and DynamicDequantize
against graphc's numpy reference: bit for bit (integers round half to even and
saturate; narrow floats round once, as from float64)."""
import ml_dtypes
import numpy as np
import pytest

import graphc
from graphc.fill import make_inputs

from conftest import OP_CORPUS
from support import NP, assert_same, check_compiled, laid_out, one_op

INT_RANGE = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15), "s32": (-(2 ** 31), 2 ** 31 - 1)}
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.5, 1.5, 2.5, -2.5, -0.5, 127.5, -128.5, 255.5, 1e30, -1e30]


def float_src(rng, shape):
    v = np.round(rng.uniform(-300, 300, size=shape) * 2) / 2  # many exact .5 ties
    flat = v.reshape(-1)
    k = min(flat.size, len(SPECIALS))
    flat[:k] = SPECIALS[:k]
    return flat.reshape(shape).astype(np.float32)


def int_data(rng, shape, dt):
    lo, hi = INT_RANGE[dt]
    return rng.integers(lo, hi, size=shape, endpoint=True).astype(NP[dt])


def float_scales(rng, shape, dt):
    v = rng.uniform(0.1, 4, size=shape) * rng.choice([-1, 1], size=shape) * 2.0 ** rng.integers(-6, 6, size=shape)
    return v.astype(NP[dt])


def graph(kind, src, dst_dt, attrs, params=()):
    """One-op graph; ``src`` / ``params`` are (dtype, shape, strides) triples."""
    return one_op(kind, [src, *params], [(dst_dt, src[1])], attrs)


def qattrs(qtype, axis):
    return {"qtype": qtype, "axis": axis} if qtype == "per_channel" else {"qtype": qtype}


def channels(qtype, axis, shape):
    return shape[axis] if qtype == "per_channel" else 1


# (qtype, axis, shape, src strides or None for dense)
T0 = ("per_tensor", 1, (), None)
T1 = ("per_tensor", 1, (37,), (3,))
C0 = ("per_channel", 0, (5, 7), None)
C1 = ("per_channel", 1, (3, 4, 5), (1, 15, 3))
CL = ("per_channel", -1, (2, 3, 4, 6), (72, 1, 18, 3))


def case_id(v):
    """Layouts as qtype, axis, rank and 'strided'; the zps flags as 'zps' / 'no_zps'."""
    if isinstance(v, tuple):
        axis = f"-ax{v[1]}" if v[0] == "per_channel" else ""
        return f"{v[0]}{axis}-r{len(v[-2])}" + ("-strided" if v[-1] else "")
    if isinstance(v, bool):
        return "zps" if v else "no_zps"
    return str(v)


@pytest.mark.parametrize("dst,layout,zps", [
    ("s8", T0, False), ("u8", T1, True), ("s8", C0, True), ("u8", C1, True), ("s8", CL, False),
    ("f8_e4m3", T1, True), ("f8_e5m2", C1, False), ("f8_e4m3", CL, False)], ids=case_id)
def test_quantize(dst, layout, zps):
    qtype, axis, shape, strides = layout
    rng = np.random.default_rng(1)
    c = channels(qtype, axis, shape)
    attrs = dict(qattrs(qtype, axis), scales=[float(s) for s in rng.choice([0.5, 1.0, 2.0, 0.3, 7.1], c)])
    if zps:  # f8 takes zero zps only
        attrs["zps"] = [0 if dst.startswith("f8") else int(z) for z in rng.integers(-20, 20, c)]
    g = graph("Quantize", ("f32", shape, strides), dst, attrs)
    src = float_src(rng, shape)
    check_compiled(g, {0: src if strides is None else laid_out(src, strides)}, exact=True)


@pytest.mark.parametrize("src_dt,layout,zps", [
    ("u8", T0, True), ("s8", T1, True), ("u8", C0, True), ("s8", C1, False), ("u8", CL, True),
    ("f8_e4m3", T1, True), ("f8_e5m2", CL, False)], ids=case_id)
def test_dequantize(src_dt, layout, zps):
    qtype, axis, shape, strides = layout
    rng = np.random.default_rng(2)
    c = channels(qtype, axis, shape)
    attrs = dict(qattrs(qtype, axis), scales=[float(s) for s in float_scales(rng, c, "f32")])
    if src_dt.startswith("f8"):
        src = rng.integers(0, 256, size=shape, dtype=np.uint8).view(NP[src_dt])  # every bit pattern
    else:
        src = int_data(rng, shape, src_dt)
    if zps:
        attrs["zps"] = [0 if src_dt.startswith("f8") else int(z) for z in rng.integers(-300, 300, c)]
    g = graph("Dequantize", (src_dt, shape, strides), "f32", attrs)
    check_compiled(g, {0: src if strides is None else laid_out(src, strides)}, exact=True)


@pytest.mark.parametrize("dst,zps,layout", [
    ("s8", "s8", T0), ("s8", None, T1), ("u8", "u8", C0), ("s8", "s32", C1), ("u8", "s8", CL)], ids=case_id)
def test_dynamic_quantize(dst, zps, layout):
    qtype, axis, shape, strides = layout
    rng = np.random.default_rng(3)
    c = channels(qtype, axis, shape)
    params = [("f32", (c,), (2,))]  # strided scales
    src = float_src(rng, shape)
    inputs = {0: laid_out(src, strides) if strides else src, 1: laid_out(float_scales(rng, (c,), "f32"), (2,))}
    if zps:
        params.append((zps, (c,), None))
        inputs[2] = int_data(rng, (c,), zps)
    g = graph("DynamicQuantize", ("f32", shape, strides), dst, qattrs(qtype, axis), params)
    check_compiled(g, inputs, exact=True)


# (qtype, axis, group_shape, shape, src strides)
DT = ("per_tensor", 1, None, (13,), None)
DC0 = ("per_channel", 0, None, (6, 5), (1, 6))
DCL = ("per_channel", -1, None, (2, 3, 4), None)
DG2 = ("per_group", 1, (1, 4), (3, 8), None)
DG4 = ("per_group", 2, (1, 2, 3, 1), (2, 4, 6, 5), (120, 1, 20, 4))


@pytest.mark.parametrize("src_dt,zps,dst,layout", [
    ("s8", "s8", "f32", DT), ("u8", None, "bf16", DC0), ("u8", "s32", "f16", DCL), ("s4", "s4", "bf16", DG2),
    ("s4", "s32", "f32", DG4), ("u4", "u4", "f16", DG4), ("u4", None, "f32", DCL), ("s8", "u8", "bf16", DG2),
    ("s4", None, "f16", DT), ("u8", "s8", "f32", DG4),
    ("u4", "u8", "f16", DG2), ("s8", "u4", "f32", DCL)], ids=case_id)   # zps of another integer type (oneDNN's schema)
def test_dynamic_dequantize(src_dt, zps, dst, layout):
    qtype, axis, groups, shape, strides = layout
    rng = np.random.default_rng(4)
    attrs = {"qtype": qtype, "axis": axis}
    if qtype == "per_group":
        attrs["group_shape"] = list(groups)
        pshape = tuple(d // g for d, g in zip(shape, groups))
    else:
        pshape = (channels(qtype, axis, shape),)
    pstrides = tuple(s * 2 for s in graphc.types.dense_strides(pshape))  # strided params
    params = [(dst, pshape, pstrides)]
    src = int_data(rng, shape, src_dt)
    inputs = {0: laid_out(src, strides) if strides else src, 1: laid_out(float_scales(rng, pshape, dst), pstrides)}
    if zps:
        params.append((zps, pshape, pstrides))
        inputs[2] = laid_out(int_data(rng, pshape, zps), pstrides)
    g = graph("DynamicDequantize", (src_dt, shape, strides), dst, attrs, params)
    check_compiled(g, inputs, exact=True)


def test_dynamic_dequantize_per_channel_one_zero_point():
    """Per channel scales with one zero point for every channel (oneDNN accepts zps of one
    element): the kernel reads it at index 0."""
    rng = np.random.default_rng(5)
    shape = (2, 6, 4)
    inputs = {0: int_data(rng, shape, "u8"), 1: float_scales(rng, (6,), "f32"), 2: np.array([131], np.uint8)}
    g = graph("DynamicDequantize", ("u8", shape, None), "f32", {"qtype": "per_channel", "axis": 1},
              [("f32", (6,), None), ("u8", (1,), None)])
    check_compiled(g, inputs, exact=True)


def test_s4_sign():
    """s4 / u4 arrive one per byte, not sign-extended: -1 is 0x0F; the kernel must see -1."""
    src = np.array([-8, -1, 0, 7, -5], dtype=ml_dtypes.int4)
    zps = np.array([-1], dtype=ml_dtypes.int4)
    g = graph("DynamicDequantize", ("s4", (5,), None), "f32", {"qtype": "per_tensor"},
              [("f32", (1,), None), ("s4", (1,), None)])
    got = check_compiled(g, {0: src, 1: np.array([0.5], np.float32), 2: zps}, exact=True)
    np.testing.assert_array_equal(list(got.values())[0], [-3.5, 0.0, 0.5, 4.0, -2.0])


def near_ties(rng, targets, n_each):
    """f32 (src, scale) pairs whose float64 quotient is not a target but rounds to it in
    f32: computing src / scale in f32 would land exactly on the target (a tie)."""
    srcs, scales = [], []
    for t in targets:
        b = rng.uniform(0.3, 3.0, 4000).astype(np.float32)
        a = (t * b.astype(np.float64)).astype(np.float32)
        q = a.astype(np.float64) / b
        keep = (q != t) & (q.astype(np.float32) == t)
        srcs.append(a[keep][:n_each])
        scales.append(b[keep][:n_each])
    return np.concatenate(srcs), np.concatenate(scales)


def test_quantize_rounds_from_float64_at_ties():
    rng = np.random.default_rng(5)
    src, scales = near_ties(rng, [k + 0.5 for k in range(-5, 5)], 6)
    q = src.astype(np.float64) / scales
    assert (np.rint(q) != np.rint(q.astype(np.float32))).sum() > 10  # the data holds real traps
    g = graph("DynamicQuantize", ("f32", src.shape, None), "s8", {"qtype": "per_channel", "axis": 0},
              [("f32", scales.shape, None)])
    got = check_compiled(g, {0: src, 1: scales}, exact=True)
    np.testing.assert_array_equal(list(got.values())[0], np.rint(q).astype(np.int8))


@pytest.mark.parametrize("dst,mids", [("f8_e4m3", [1.0625, -1.1875, 3.125]), ("f8_e5m2", [1.125, -2.75, 1.375])])
def test_quantize_f8_rounds_once(dst, mids):
    """src / scale near an f8 midpoint: rounding to f32 first would round twice."""
    rng = np.random.default_rng(6)
    src, scales = near_ties(rng, mids, 8)
    q = src.astype(np.float64) / scales
    grid = np.arange(256, dtype=np.uint8).view(NP[dst])
    grid = grid[np.isfinite(grid.astype(np.float64))]
    once = grid[np.argmin(np.abs(q[:, None] - grid.astype(np.float64)[None, :]), axis=1)]  # no ties: q != mids
    assert (q.astype(np.float32).astype(NP[dst]) != once).sum() > 3
    g = graph("Quantize", ("f32", src.shape, None), dst,
              {"qtype": "per_channel", "axis": 0, "scales": [float(s) for s in scales]})
    got = check_compiled(g, {0: src}, exact=True)
    assert_same(list(got.values())[0], once)


@pytest.mark.parametrize("dst,zp,scale,expected", [
    ("bf16", -(2 ** 24 + 2 ** 16), 1.0, 2 ** 24 + 2 ** 17),   # 2^24 + 2^16 + 1: just above a bf16 midpoint
    ("f16", -(2049 * 8192), 2.0 ** -13, 2050.0),              # 2049 + 2^-13: just above an f16 midpoint
], ids=["bf16", "f16"])
def test_dynamic_dequantize_rounds_once(dst, zp, scale, expected):
    g = graph("DynamicDequantize", ("s8", (1,), None), dst, {"qtype": "per_tensor"},
              [(dst, (1,), None), ("s32", (1,), None)])
    got = check_compiled(g, {0: np.array([1], np.int8), 1: np.array([scale], NP[dst]), 2: np.array([zp], np.int32)},
                         exact=True)
    assert float(list(got.values())[0][0]) == expected


def test_parallel_per_group_strided():
    """Large enough to run in parallel, several outer dims left after merging."""
    rng = np.random.default_rng(7)
    shape, groups, strides = (4, 32, 64, 16), (1, 1, 8, 1), (32768, 1024, 1, 64)
    pshape = (4, 32, 8, 16)
    g = graph("DynamicDequantize", ("u4", shape, strides), "f32",
              {"qtype": "per_group", "group_shape": list(groups)},
              [("f32", pshape, None), ("u4", pshape, None)])
    check_compiled(g, {0: laid_out(int_data(rng, shape, "u4"), strides), 1: float_scales(rng, pshape, "f32"),
                       2: int_data(rng, pshape, "u4")}, exact=True)


CORPUS = sorted(p for d in ("f32", "bf16", "f16") for pat in ("quantize*", "dequantize*", "dynamicq*", "dynamicdq*")
                for p in (OP_CORPUS / d).glob(pat + ".json"))


@pytest.mark.skipif(not CORPUS, reason=f"benchdnn corpus not found at {OP_CORPUS} (set GRAPHC_SHARED)")
@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus(path):
    g = graphc.load_graph(path)
    check_compiled(g, make_inputs(g), exact=True)
