"""graphc.tolerances.compare: the scaled error |a - e| / (atol + rtol * max|e|)
(written out here in float64, element by element), NaN and inf placements, in
every block of a big tensor, in any layout."""
import ml_dtypes
import numpy as np
import pytest

from graphc import tolerances
from graphc.tolerances import COMPILED, compare
from graphc.types import DataType


def _scaled(a, e, dt):
    rtol, atol = COMPILED[dt]
    a, e = np.asarray(a, np.float64).ravel(), np.asarray(e, np.float64).ravel()
    return max(abs(x - y) for x, y in zip(a, e)) / (atol + rtol * max(abs(y) for y in e))


@pytest.mark.parametrize("dt, npdt", [(DataType.f32, np.float32), (DataType.f16, np.float16),
                                      (DataType.bf16, ml_dtypes.bfloat16), (DataType.f64, np.float64)])
def test_scaled_error_anywhere_in_a_big_tensor(dt, npdt):
    n = 3 * tolerances._BLOCK + 5
    e = np.linspace(-3, 5, n).astype(npdt)
    for at in (0, tolerances._BLOCK + 7, n - 1):          # a block's first, a middle, the last element
        a = e.copy()
        rtol, atol = COMPILED[dt]
        a[at] = np.float64(e[at]) + 0.5 * (atol + rtol * 5)     # half the tolerance off
        ok, err = compare(a, e, dt)
        want = abs(float(a[at]) - float(e[at])) / (atol + rtol * 5)   # (max|e| is 5)
        assert ok and err == pytest.approx(want, rel=1e-3) and 0.3 < err < 0.7
        a[at] = np.float64(e[at]) + 3 * (atol + rtol * 5)        # three times off
        ok, err = compare(a, e, dt)
        assert not ok and err == pytest.approx(3, rel=0.05)


def test_small_cases_against_the_formula():
    e = np.array([1.0, -2.0, 0.5], np.float32)
    a = np.array([1.00001, -2.0, 0.5], np.float32)
    ok, err = compare(a, e, DataType.f32)
    assert err == pytest.approx(_scaled(a, e, DataType.f32), rel=1e-3) and ok == (err <= 1)
    ok, err = compare(a.astype(np.float64) + 1e-3, e, DataType.f32)    # a float64 side: compared in float64
    assert not ok and err == pytest.approx(_scaled(a.astype(np.float64) + 1e-3, e, DataType.f32), rel=1e-6)


def test_nan_and_inf_must_sit_where_the_reference_has_them():
    e = np.array([1.0, np.nan, np.inf, -np.inf, 2.0], np.float32)
    assert compare(e.copy(), e, DataType.f32) == (True, 0.0)
    for k, v in ((0, np.nan), (1, 1.0), (2, -np.inf), (4, np.inf)):
        a = e.copy()
        a[k] = v
        assert compare(a, e, DataType.f32) == (False, float("inf")), k
    allnan = np.full(5, np.nan, np.float32)
    assert compare(allnan, allnan.copy(), DataType.f32) == (True, 0.0)


def test_layouts_shapes_and_integers():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    y = np.ascontiguousarray(x.transpose(2, 0, 1)).transpose(1, 2, 0)     # same values, other strides
    assert compare(x, y, DataType.f32) == (True, 0.0)
    y = y.copy()
    y[2, 3, 4] += 1
    assert not compare(x, y, DataType.f32)[0]
    assert compare(x, x[:2], DataType.f32) == (False, float("inf"))
    assert compare(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32), DataType.f32) == (True, 0.0)
    i = np.array([1, 2, 3], np.int32)
    assert compare(i, i + np.array([0, 0, 1], np.int32), DataType.s32) == (False, 1.0)
    c = np.array([1 + 1j, 2 - 1j], np.complex64)
    assert compare(c, c * np.complex64(1 + 1e-3), DataType.c64)[0] is False


def test_integers_one_off_only_next_to_a_half():
    """An integer rounded from a float may be one off where the reference's value
    before rounding is within NEAR_HALF of a half (benchdnn's rule), nowhere else."""
    want = np.array([13, 5, 22, 7], np.uint8)
    unrounded = np.array([13.500003, 4.5000467, 22.5000439, 7.2])
    assert compare(np.array([13, 4, 22, 7], np.uint8), want, DataType.u8, unrounded=unrounded) == (True, 0.0)
    assert not compare(np.array([13, 5, 22, 8], np.uint8), want, DataType.u8, unrounded=unrounded)[0]
    assert not compare(np.array([13, 3, 22, 7], np.uint8), want, DataType.u8, unrounded=unrounded)[0]
    assert not compare(np.array([12, 5, 22, 7], np.uint8), want, DataType.u8)[0]   # without the values: exact


def test_integers_through_narrow_roundings_may_differ_in_a_small_share():
    """Integers computed through bf16/f16 values the partition rounds (``flips``) may
    differ, by any amount, in at most FLIPPED_SHARE of the elements; without ``flips``
    every element must match."""
    from graphc.tolerances import FLIPPED_SHARE
    want = np.arange(40000, dtype=np.int64).astype(np.uint8)
    few = want.copy()
    few[[7, 9000, 31000]] += 6          # 3 of 40,000: a share of 7.5e-5
    assert 3 <= FLIPPED_SHARE * want.size < 5
    assert compare(few, want, DataType.u8, flips=True) == (True, 6.0)
    assert not compare(few, want, DataType.u8)[0]
    many = few.copy()
    many[[100, 200]] += 1               # 5 of 40,000: over the share
    assert not compare(many, want, DataType.u8, flips=True)[0]
