"""The data types of oneDNN's quantized and MX graphs: u64, e8m0, f4_e2m1, f4_e3m0,
and host_scalar tensors for scales.

* Storage: e8m0 and f4_e2m1 are ml_dtypes' float8_e8m0fnu and float4_e2m1fn;
  f4_e3m0, which ml_dtypes lacks, is a uint8 code (graphc.types.f4_e3m0_encode /
  decode), checked here against a nearest-value search written independently.
* Kernels: the small-float helpers (graphc.codegen.smallfloat) against ml_dtypes'
  conversions over a sweep of f32 bit patterns and every code.
* JSON: the types and the host_scalar property round-trip by their oneDNN spellings.
* DynamicDequantize of f4 values with e8m0 scales (MX blocks of 32), alone and as a
  MatMul prologue in one partition, compiled vs the reference and the reference
  vs a formula of ml_dtypes values; host_scalar scales; bad inputs rejected."""
import json

import ml_dtypes
import numpy as np
import pytest
from numba import njit

from graphc import reference
from graphc.builder import GraphBuilder
from graphc.codegen import smallfloat as sf
from graphc.errors import InvalidGraphOp, InvalidShape
from graphc.fill import fill_tensor, make_inputs
from graphc.jsonio import dump_graph, load_graph
from graphc.types import DataType, LogicalTensor, PropertyType, f4_e3m0_decode, f4_e3m0_encode

from support import assert_same, check_compiled

NEW = ["u64", "e8m0", "f4_e2m1", "f4_e3m0"]


def test_storage_types():
    assert DataType("u64").np == np.uint64 and DataType("u64").is_int
    assert DataType("e8m0").np == np.dtype(ml_dtypes.float8_e8m0fnu)
    assert DataType("f4_e2m1").np == np.dtype(ml_dtypes.float4_e2m1fn)
    assert DataType("f4_e3m0").np == np.uint8
    assert all(DataType(d).is_float and DataType(d).is_low_precision for d in ("e8m0", "f4_e2m1", "f4_e3m0"))
    assert DataType.from_numpy(np.uint8) is DataType.u8   # f4_e3m0 codes are not taken for u8 data
    assert LogicalTensor(0, "f4_e2m1", [3, 5]).get_mem_size() == 15


# ------------------------------------------------------------------ f4_e3m0 codec
def _nearest_e3m0(x: float) -> int:
    """The code of the nearest f4_e3m0 value, ties to the even code, saturating:
    a plain search over the 16 codes."""
    if np.isnan(x):
        return 0
    best = None
    for c in range(16):
        v = (-1 if c & 8 else 1) * (0.0 if c & 7 == 0 else 2.0 ** ((c & 7) - 3))
        if (v == 0) and (np.signbit(x) != bool(c & 8)):
            continue   # the zero of x's sign
        d = abs(min(max(x, -16.0), 16.0) - v)
        if best is None or d < best[0] or (d == best[0] and c % 2 == 0):
            best = (d, c)
    return best[1]


def test_f4_e3m0_values_and_rounding():
    codes = np.arange(16, dtype=np.uint8)
    assert list(f4_e3m0_decode(codes)[:8]) == [0, 0.25, 0.5, 1, 2, 4, 8, 16]
    assert list(f4_e3m0_decode(codes)[8:]) == [-0.0, -0.25, -0.5, -1, -2, -4, -8, -16]
    assert_same(f4_e3m0_encode(f4_e3m0_decode(codes)), codes)   # round trip
    xs = [0.0, -0.0, 0.1, 0.125, 0.13, 0.375, 0.75, 1.5, 3.0, 6.0, 12.0, 15.9, 16.0, 17.0, 1e30,
          np.inf, -np.inf, np.nan, -0.7, -24.0, 2.9, 0.2]
    xs += list(np.random.default_rng(0).uniform(-20, 20, 300))
    want = np.array([_nearest_e3m0(x) for x in xs], np.uint8)
    assert_same(f4_e3m0_encode(np.array(xs)), want)


# ------------------------------------------------------------------ kernel helpers
@njit
def _apply_into(f, xs, out):
    for i in range(xs.size):
        out[i] = f(xs[i])
    return out


def _apply_u8(f, xs):
    return _apply_into(f, xs, np.empty(xs.size, np.uint8))


def _apply_f32(f, codes):
    return _apply_into(f, codes, np.empty(codes.size, np.float32))


def _f32_sweep():
    """f32 values of every class: a stride through all bit patterns, the
    neighbourhood of every value the small formats hold and of their midpoints."""
    bits = np.arange(0, 2 ** 32, 65537 * 7, dtype=np.uint64).astype(np.uint32)
    special = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 2.0 ** -149, 2.0 ** -127, 1.5 * 2.0 ** -127,
                        2.0 ** -126, 2.0 ** 127, 1.5 * 2.0 ** 127, 3.4e38], np.float32)
    grid = np.concatenate([2.0 ** np.arange(-8, 6), 1.5 * 2.0 ** np.arange(-8, 6), np.arange(0, 8, 0.25)])
    grid = np.concatenate([grid, -grid]).astype(np.float32)
    near = np.concatenate([np.nextafter(grid, np.float32(np.inf)), np.nextafter(grid, np.float32(-np.inf)), grid])
    return np.concatenate([bits.view(np.float32), special, near])


@pytest.mark.parametrize("dt,to,back", [(ml_dtypes.float8_e8m0fnu, sf.f32_to_e8m0, sf.e8m0_to_f32),
                                        (ml_dtypes.float4_e2m1fn, sf.f32_to_f4e2m1, sf.f4e2m1_to_f32)],
                         ids=["e8m0", "f4_e2m1"])
def test_kernel_helpers_match_ml_dtypes(dt, to, back):
    xs = _f32_sweep()
    with np.errstate(over="ignore", invalid="ignore"):
        want = xs.astype(dt).view(np.uint8)
    assert_same(_apply_u8(to, xs), want)
    codes = np.arange(256 if dt is ml_dtypes.float8_e8m0fnu else 16, dtype=np.uint8)
    assert_same(_apply_f32(back, codes), codes.view(dt).astype(np.float32))


def test_kernel_helpers_f4_e3m0_match_codec():
    xs = _f32_sweep()
    with np.errstate(over="ignore", invalid="ignore"):
        assert_same(_apply_u8(sf.f32_to_f4e3m0, xs), f4_e3m0_encode(xs.astype(np.float64)))
    codes = np.arange(16, dtype=np.uint8)
    assert_same(_apply_f32(sf.f4e3m0_to_f32, codes), f4_e3m0_decode(codes).astype(np.float32))


# ------------------------------------------------------------------ JSON and fill
def _mx_dequant(src_dt="f4_e2m1", scale_dt="e8m0", dst="f32", k=64, n=8, host_scalar=False):
    b = GraphBuilder()
    w = b.tensor(src_dt, [k, n])
    if host_scalar:
        s = b.tensor(scale_dt, [], property_type="host_scalar")
        attrs = {"qtype": "per_tensor"}
    else:
        s = b.tensor(scale_dt, [k // 32, n])
        attrs = {"qtype": "per_group", "group_shape": [32, 1]}
    b.op("DynamicDequantize", [w, s], out=[(dst, [k, n])], attrs=attrs)
    return b.finalize()


def test_json_round_trip_new_types_and_host_scalar():
    g = _mx_dequant(host_scalar=True)
    d = dump_graph(g)
    text = json.dumps(d)
    assert '"e8m0"' in text and '"f4_e2m1"' in text and '"host_scalar"' in text
    g2 = load_graph(text)
    lts = {t.id: t for t in g2.tensors.values()}
    assert {t.dtype.value for t in lts.values()} == {"f4_e2m1", "e8m0", "f32"}
    (hs,) = [t for t in lts.values() if t.dtype is DataType.e8m0]
    assert hs.property_type is PropertyType.host_scalar and hs.shape == ()
    for dt in NEW:
        lt = LogicalTensor(7, dt, [2, 3])
        assert LogicalTensor(7, DataType.parse(dt), [2, 3]) == lt


@pytest.mark.parametrize("dt", NEW)
def test_fill_gives_valid_values(dt):
    v = fill_tensor(LogicalTensor(0, dt, [4, 64]), np.random.default_rng(0))
    assert v.dtype == DataType(dt).np and v.shape == (4, 64)
    if dt == "e8m0":
        f = v.astype(np.float64)
        assert np.all(np.isfinite(f)) and np.all(f > 0)
    if dt == "f4_e3m0":
        assert v.max() < 16   # codes in the low nibble


# ------------------------------------------------------------------ DynamicDequantize
@pytest.mark.parametrize("src_dt", ["f4_e2m1", "f4_e3m0"])
@pytest.mark.parametrize("scale_dt,dst", [("e8m0", "f32"), ("e8m0", "bf16"), ("f16", "f16")])
def test_mx_dequantize_compiled_and_formula(src_dt, scale_dt, dst):
    """Groups of 32 along K: the reference equals value(w) * scale computed from
    ml_dtypes / the code table, and the kernel equals the reference bit for bit."""
    g = _mx_dequant(src_dt, scale_dt, dst)
    data = make_inputs(g, seed=1)
    (dq,) = g.ops.values()
    w, s = (data[t.id] for t in dq.inputs)
    wv = f4_e3m0_decode(w) if src_dt == "f4_e3m0" else w.astype(np.float64)
    want = (wv * np.repeat(s.astype(np.float64), 32, axis=0)).astype(DataType(dst).np)
    assert_same(reference.run(g, data)[dq.outputs[0].id], want)
    check_compiled(g, data, exact=True)


@pytest.mark.parametrize("act", ["f32", "bf16"])
@pytest.mark.parametrize("src_dt", ["f4_e2m1", "f4_e3m0"])
def test_mx_weights_matmul_one_partition(src_dt, act):
    """f4 weights with e8m0 block scales dequantized while the MatMul packs them."""
    b = GraphBuilder()
    x, w, s = b.tensor(act, [5, 64]), b.tensor(src_dt, [64, 12]), b.tensor("e8m0", [2, 12])
    dw = b.op("DynamicDequantize", [w, s], out=[(act, [64, 12])],
              attrs={"qtype": "per_group", "group_shape": [32, 1]})[0]
    b.op("MatMul", [x, dw], out=[(act, [5, 12])])
    g = b.finalize()
    (p,) = g.get_partitions("fusion")
    assert p.pattern == "quantized_compute" and p.plan.roles[dw.id] == "register", p.plan.describe()
    check_compiled(g, seed=2)


def test_host_scalar_scale():
    """A per-tensor scale given as a host_scalar (0-d) tensor, compiled."""
    g = _mx_dequant("f4_e2m1", "f32", "f32", host_scalar=True)
    data = make_inputs(g, seed=3)
    (dq,) = g.ops.values()
    w, s = (data[t.id] for t in dq.inputs)
    assert s.shape == ()
    assert_same(reference.run(g, data)[dq.outputs[0].id], (w.astype(np.float64) * float(s)).astype(np.float32))
    check_compiled(g, data, exact=True)


def test_bad_inputs_rejected():
    b = GraphBuilder()
    w, s = b.tensor("s8", [64, 8]), b.tensor("f32", [2, 8], property_type="host_scalar")
    with pytest.raises(InvalidShape, match="DynamicDequantize.*host_scalar|host_scalar"):
        b.op("DynamicDequantize", [w, s], out=[("f32", [64, 8])],
             attrs={"qtype": "per_group", "group_shape": [32, 1]})
        b.finalize()
    b = GraphBuilder()
    w, s, z = b.tensor("f4_e2m1", [64, 8]), b.tensor("e8m0", [2, 8]), b.tensor("s32", [2, 8])
    with pytest.raises(InvalidGraphOp, match="zero points"):
        b.op("DynamicDequantize", [w, s, z], out=[("f32", [64, 8])],
             attrs={"qtype": "per_group", "group_shape": [32, 1]})
        b.finalize()
