"""DataType, LayoutType, PropertyType and LogicalTensor."""
import ml_dtypes
import numpy as np
import pytest

from graphc.errors import GraphcError, InvalidArguments, InvalidDataType, InvalidShape
from graphc.dtypes import INFO, KINDS, ROWS
from graphc.types import DataType, LayoutType, LogicalTensor, PropertyType

STORAGE = {
    "f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64,
    "s32": np.int32, "s64": np.int64, "u32": np.uint32, "s8": np.int8, "u8": np.uint8, "s4": ml_dtypes.int4, "u4": ml_dtypes.uint4,
    "f8_e4m3": ml_dtypes.float8_e4m3fn, "f8_e5m2": ml_dtypes.float8_e5m2, "boolean": np.bool_, "c64": np.complex64,
    "u64": np.uint64, "e8m0": ml_dtypes.float8_e8m0fnu, "f4_e2m1": ml_dtypes.float4_e2m1fn,
}
FLOATS = {"f32", "f16", "bf16", "f64", "f8_e4m3", "f8_e5m2", "e8m0", "f4_e2m1"}
INTS = {"s32", "s64", "u32", "u64", "s8", "u8", "s4", "u4"}
LOW_PRECISION = {"bf16", "f16", "f8_e4m3", "f8_e5m2", "e8m0", "f4_e2m1"}
#: held as uint8 codes (no numpy type of its own): tests/core/test_new_dtypes.py
CODED = {"f4_e3m0"}


def test_every_member_is_listed():
    assert {d.value for d in DataType} == set(STORAGE) | CODED | {"undef"}


@pytest.mark.parametrize("name", sorted(STORAGE))
def test_data_type_storage(name):
    dt = DataType.parse(name)
    assert dt is DataType(name)
    assert str(dt) == name
    assert dt.np == np.dtype(STORAGE[name])
    assert dt.itemsize == np.dtype(STORAGE[name]).itemsize
    assert DataType.from_numpy(STORAGE[name]) is dt
    assert dt.is_float == (name in FLOATS)
    assert dt.is_int == (name in INTS)
    assert dt.is_low_precision == (name in LOW_PRECISION)


def test_low_precision_storage_rounds_like_the_format():
    # bf16 keeps 8 mantissa bits, f8_e4m3 3 and f8_e5m2 2: 1 + 2**-k rounds to 1 below that precision
    assert float(np.float32(1 + 2 ** -7).astype(DataType.bf16.np)) == 1 + 2 ** -7
    assert float(np.float32(1 + 2 ** -9).astype(DataType.bf16.np)) == 1.0
    assert float(np.float32(1 + 2 ** -3).astype(DataType.f8_e4m3.np)) == 1 + 2 ** -3
    assert float(np.float32(1 + 2 ** -5).astype(DataType.f8_e4m3.np)) == 1.0
    assert float(np.float32(1 + 2 ** -2).astype(DataType.f8_e5m2.np)) == 1 + 2 ** -2
    assert float(np.float32(1 + 2 ** -4).astype(DataType.f8_e5m2.np)) == 1.0
    assert float(np.float32(448).astype(DataType.f8_e4m3.np)) == 448.0  # e4m3fn max
    assert float(np.float32(57344).astype(DataType.f8_e5m2.np)) == 57344.0  # e5m2 max finite


def test_one_row_of_facts_per_data_type():
    assert [r.dtype for r in ROWS] == list(DataType)
    for dt in DataType:
        assert dt.info is INFO[dt] and dt.info.kind in KINDS
    assert DataType.from_numpy(np.uint8) is DataType.u8 and not DataType.f4_e3m0.info.from_numpy


@pytest.mark.parametrize("row", [r for r in ROWS if r.np is not None], ids=lambda r: r.dtype.value)
def test_rows_agree_with_their_storage(row):
    if row.int_range is not None:   # a saturating store's range is the storage's
        info = ml_dtypes.iinfo(row.np)
        assert row.kind == "int" and row.int_range == (int(info.min), int(info.max))
    if row.kernel_view is not None:   # a kernel sees the same bytes
        assert row.kernel_view.itemsize == row.np.itemsize and row.kernel_np == row.kernel_view
    else:
        assert row.kernel_np == row.np
    assert row.low_precision == (row.kind == "float" and row.np.itemsize < 4)
    for tol in (row.compiled_tol, row.oracle_tol):
        assert tol is None or (row.kind in ("float", "complex") and all(t > 0 for t in tol))


def test_tables_elsewhere_are_lookups_into_the_rows():
    from graphc import numerics, tolerances
    assert tolerances.COMPILED == {r.dtype: r.compiled_tol for r in ROWS if r.compiled_tol}
    assert tolerances.ORACLE == {r.dtype: r.oracle_tol for r in ROWS if r.oracle_tol}
    assert tolerances.tolerance("s8") == (0.0, 0.0) and tolerances.tolerance("bf16") == DataType.bf16.info.compiled_tol
    for r in ROWS:
        if r.int_range is not None:   # the reference saturates to the row's range
            lo, hi = r.int_range
            got = numerics.round_to(np.array([-1e30, 1e30]), r.dtype)
            assert [int(v) for v in got] == [lo, hi]


def test_undef_has_no_storage():
    with pytest.raises(InvalidDataType):
        DataType.undef.np


@pytest.mark.parametrize("bad", ["F32", "float32", "", "f8", None, 3, [], {"f32": 1}])
def test_parse_rejects_unknown_data_types(bad):
    with pytest.raises(InvalidDataType) as e:
        DataType.parse(bad)
    assert repr(bad) in str(e.value) and "f32" in str(e.value)


def test_from_numpy_rejects_types_without_a_graphc_type():
    with pytest.raises(InvalidDataType, match="uint16"):
        DataType.from_numpy(np.uint16)


def test_layout_and_property_types():
    assert [x.value for x in LayoutType] == ["undef", "any", "strided", "opaque"]
    assert [x.value for x in PropertyType] == ["undef", "variable", "constant", "host_scalar"]
    t = LogicalTensor(1, "f32", [2], layout_type="opaque", property_type="constant")
    assert t.layout_type is LayoutType.opaque and t.property_type is PropertyType.constant
    assert str(t.layout_type) == "opaque" and str(t.property_type) == "constant"


@pytest.mark.parametrize("kw,what", [({"layout_type": "blocked"}, "layout type"),
                                     ({"property_type": "const"}, "property type"),
                                     ({"layout_type": None}, "layout type")])
def test_unknown_layout_or_property_type(kw, what):
    with pytest.raises(InvalidArguments, match=what):
        LogicalTensor(0, "f32", [2], **kw)


@pytest.mark.parametrize("shape,strides", [
    ([2, 3, 4], (12, 4, 1)), ([5], (1,)), ([], ()), ([0, 3], (3, 1)), ([3, 0, 2], (2, 2, 1)),
    ([2, -1, 4], (-1, 4, 1)), ([-1, 3], (3, 1)), ([4, 5, -1], (-1, -1, 1)),
])
def test_default_strides_are_dense_row_major(shape, strides):
    t = LogicalTensor(7, DataType.f32, shape)
    assert t.shape == tuple(shape) and t.strides == strides and t.ndim == len(shape)
    assert t.layout_type is LayoutType.strided and t.property_type is PropertyType.undef


def test_unknown_dims():
    t = LogicalTensor(0, "bf16", [2, -1, 4])
    assert not t.is_complete and t.nelems == -1 and not t.is_dense
    done = t.with_shape([2, 3, 4])
    assert done.is_complete and done.nelems == 24 and done.strides == (12, 4, 1) and done.is_dense
    assert done.id == 0 and done.dtype is DataType.bf16


def test_given_strides_are_kept():
    t = LogicalTensor(0, "f32", [2, 3], [1, 2])
    assert t.strides == (1, 2) and not t.is_dense
    assert LogicalTensor(0, "f32", [2, 3], []).strides == (3, 1)  # [] means 'not given'
    assert LogicalTensor(0, "f32", [1, 3], [99, 1]).is_dense       # size-1 dims may have any stride


def test_layout_any_has_no_strides_until_resolved():
    """A shape resolved keeps layout any (graphc chooses the strides at compile,
    tests/runtime/test_views.py); strides given make it strided."""
    t = LogicalTensor(0, "f32", [-1, 3], layout_type="any")
    assert t.strides is None and not t.is_dense
    r = t.with_shape([2, 3])
    assert r.layout_type is LayoutType.any and r.strides is None and r.shape == (2, 3)
    s = t.with_shape([2, 3], (1, 2))
    assert s.layout_type is LayoutType.strided and s.strides == (1, 2)


def test_logical_tensor_is_immutable_and_hashable():
    t = LogicalTensor(0, "f32", [2])
    with pytest.raises(AttributeError):
        t.id = 3
    assert t == LogicalTensor(0, DataType.f32, (2,)) and len({t, LogicalTensor(0, "f32", [2])}) == 1


@pytest.mark.parametrize("bad", [-1, "0", 1.0, True, None])
def test_bad_tensor_ids(bad):
    with pytest.raises(InvalidArguments, match="id"):
        LogicalTensor(bad, "f32", [2])


@pytest.mark.parametrize("bad", [[2, -2], [-5], "23", 3, -2, [2.0], [True], [[2]], {"a": 1}, [2 ** 63], [-2 ** 70]])
def test_bad_shapes(bad):
    with pytest.raises(InvalidShape):
        LogicalTensor(0, "f32", bad)


@pytest.mark.parametrize("bad", [[1], [3, 1, 1], 5, "31", [3.0, 1], [True, 1], [2 ** 64, 1], {"a": 1}])
def test_bad_strides(bad):
    with pytest.raises(InvalidShape, match="strides"):
        LogicalTensor(0, "f32", [2, 3], bad)


def test_bad_dtype_in_tensor():
    with pytest.raises(InvalidDataType):
        LogicalTensor(0, "f31", [2])


def test_every_error_is_a_graphc_error():
    for cls in (InvalidArguments, InvalidDataType, InvalidShape):
        assert issubclass(cls, GraphcError)


def test_numpy_integers_are_accepted():
    t = LogicalTensor(np.int64(3), "s8", np.array([2, 3]), np.array([3, 1]))
    assert t.id == 3 and t.shape == (2, 3) and type(t.shape[0]) is int


@pytest.mark.parametrize("dtype, shape, strides, ok", [
    ("f32", [1, 3], [2 ** 60, 1], True),          # 2^62 bytes: numpy can stride it
    ("f32", [1, 3], [2 ** 62, 1], False),         # 2^64 bytes on a dim of size 1 (span 12 bytes)
    ("f64", [3, 1], [1, 2 ** 61], False),
    ("s8", [1, 3], [2 ** 62, 1], True),
    ("f32", [2, 3], [2 ** 46, 1], False),         # a span beyond MAX_TENSOR_BYTES
])
def test_check_extent_checks_byte_strides_and_span(dtype, shape, strides, ok):
    from graphc.types import check_extent
    lt = LogicalTensor(0, dtype, shape, strides)
    if ok:
        check_extent(lt, "here")
    else:
        with pytest.raises(InvalidShape, match="here: tensor 0 .*too large"):
            check_extent(lt, "here")
