"""Data types: the :class:`DataType` enum and one :class:`DTypeInfo` row of facts per type.

Every fact graphc keeps about a data type is a field of its row in :data:`ROWS`:
its numpy storage type, its kind, whether it is computed in f32, the range a
store to it saturates to, the numpy type a kernel sees its buffers as, how the
reference rounds to it, and its tolerances (written down here, in one place;
graphc.tolerances compares with them).  The tables other modules keep
(``tolerances.COMPILED``, ``numerics``' ranges, ...) are lookups into
these rows; a new data type is a new member and a new row.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from .errors import InvalidDataType, short


class DataType(str, enum.Enum):
    undef = "undef"
    f32 = "f32"
    f16 = "f16"
    bf16 = "bf16"
    f64 = "f64"
    s32 = "s32"
    s64 = "s64"
    u32 = "u32"
    u64 = "u64"
    s8 = "s8"
    u8 = "u8"
    s4 = "s4"
    u4 = "u4"
    f8_e4m3 = "f8_e4m3"
    f8_e5m2 = "f8_e5m2"
    e8m0 = "e8m0"
    f4_e2m1 = "f4_e2m1"
    f4_e3m0 = "f4_e3m0"
    boolean = "boolean"
    c64 = "c64"

    def __str__(self) -> str:  # 'f32', not 'DataType.f32'
        return self.value

    @property
    def info(self) -> "DTypeInfo":
        """This type's row of facts."""
        return INFO[self]

    @property
    def np(self) -> np.dtype:
        """The numpy dtype arrays of this type are stored in."""
        storage = INFO[self].np
        if storage is None:
            raise InvalidDataType(f"data type {self.value} has no storage type")
        return storage

    @property
    def is_float(self) -> bool:
        return INFO[self].kind == "float"

    @property
    def is_int(self) -> bool:
        return INFO[self].kind == "int"

    @property
    def is_low_precision(self) -> bool:
        """Stored narrower than f32 and computed in f32."""
        return INFO[self].low_precision

    @property
    def itemsize(self) -> int:
        return self.np.itemsize

    @classmethod
    def parse(cls, value) -> "DataType":
        if isinstance(value, DataType):
            return value
        try:
            if not isinstance(value, str):   # (enum's own error quotes the whole value)
                raise TypeError
            return cls(value)
        except (ValueError, TypeError):
            raise InvalidDataType("unknown data type", expected="one of " + ", ".join(d.value for d in cls),
                                  found=short(value)) from None

    @classmethod
    def from_numpy(cls, dtype) -> "DataType":
        dt = np.dtype(dtype)
        found = _FROM_NUMPY.get(dt)
        if found is None:
            raise InvalidDataType("numpy dtype has no graphc data type", found=str(dt))
        return found


#: DTypeInfo.kind values
KINDS = ("float", "int", "bool", "complex", "")


@dataclass(frozen=True)
class DTypeInfo:
    """The facts about one data type (a row of :data:`ROWS`)."""

    dtype: DataType
    #: the numpy dtype its arrays are stored in (None: undef has no storage)
    np: np.dtype | None
    #: one of KINDS: "float", "int", "bool", "complex" ("" for undef)
    kind: str
    #: stored narrower than f32 and computed in f32
    low_precision: bool = False
    #: (lo, hi) a store of a computed value saturates to (integers; s64 and u64 have none)
    int_range: tuple[int, int] | None = None
    #: the numpy dtype a kernel sees its buffers as when not ``np``: the bits of a
    #: narrow float, a code one per byte (graphc.codegen.smallfloat converts), a
    #: 4-bit integer one per byte
    kernel_view: np.dtype | None = None
    #: the reference rounds a float64 result to odd in f32 first, then to this type
    #: (one rounding in effect, as the kernels' f32 math then narrowing)
    round_via_f32: bool = False
    #: (rtol, atol) of a compiled kernel against graphc's reference: about one or two
    #: ulps of the type, relative to the data's magnitude (None: exact)
    compiled_tol: tuple[float, float] | None = None
    #: (rtol, atol) of graphc's reference against an independent oracle (PyTorch in
    #: its own precision, float64 finite differences); None: exact
    oracle_tol: tuple[float, float] | None = None
    #: (lo, hi) of generated test data (graphc.fill) where the op states no range
    data_range: tuple = (-4.0, 4.0)
    #: DataType.from_numpy maps ``np`` to this type (f4_e3m0 arrays hold uint8
    #: codes: a uint8 array is u8)
    from_numpy: bool = True

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.dtype}: unknown kind {self.kind!r}")
        for name in ("np", "kernel_view"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, np.dtype(getattr(self, name)))

    @property
    def kernel_np(self) -> np.dtype:
        """The numpy dtype a kernel sees this type's buffers as."""
        return self.kernel_view if self.kernel_view is not None else self.dtype.np


_S32 = (-(2 ** 31), 2 ** 31 - 1)
_U32 = (0, 2 ** 32 - 1)
_F8_E4M3_TOL = (1.3e-1, 2e-2)
_F8_E5M2_TOL = (2.6e-1, 4e-2)

#: one row per data type, in the enum's order
ROWS: tuple[DTypeInfo, ...] = (
    DTypeInfo(DataType.undef, None, ""),
    DTypeInfo(DataType.f32, np.float32, "float", compiled_tol=(2e-5, 2e-6), oracle_tol=(1e-4, 1e-5)),
    DTypeInfo(DataType.f16, np.float16, "float", low_precision=True, kernel_view=np.uint16,
              compiled_tol=(2e-3, 2e-3), oracle_tol=(4e-3, 4e-3)),
    DTypeInfo(DataType.bf16, ml_dtypes.bfloat16, "float", low_precision=True, kernel_view=np.uint16,
              round_via_f32=True, compiled_tol=(1.6e-2, 1.6e-2), oracle_tol=(3.2e-2, 3.2e-2)),
    DTypeInfo(DataType.f64, np.float64, "float", compiled_tol=(1e-12, 1e-12), oracle_tol=(1e-10, 1e-10)),
    DTypeInfo(DataType.s32, np.int32, "int", int_range=_S32, data_range=(-1000, 1000)),
    DTypeInfo(DataType.s64, np.int64, "int", data_range=(-1000, 1000)),
    DTypeInfo(DataType.u32, np.uint32, "int", int_range=_U32, data_range=(0, 1000)),
    DTypeInfo(DataType.u64, np.uint64, "int", data_range=(0, 1000)),
    DTypeInfo(DataType.s8, np.int8, "int", int_range=(-128, 127), data_range=(-128, 127)),
    DTypeInfo(DataType.u8, np.uint8, "int", int_range=(0, 255), data_range=(0, 255)),
    DTypeInfo(DataType.s4, ml_dtypes.int4, "int", int_range=(-8, 7), kernel_view=np.int8, data_range=(-8, 7)),
    DTypeInfo(DataType.u4, ml_dtypes.uint4, "int", int_range=(0, 15), kernel_view=np.uint8,
              data_range=(0, 15)),
    DTypeInfo(DataType.f8_e4m3, ml_dtypes.float8_e4m3fn, "float", low_precision=True, kernel_view=np.uint8,
              round_via_f32=True, compiled_tol=_F8_E4M3_TOL, oracle_tol=_F8_E4M3_TOL),
    DTypeInfo(DataType.f8_e5m2, ml_dtypes.float8_e5m2, "float", low_precision=True, kernel_view=np.uint8,
              round_via_f32=True, compiled_tol=_F8_E5M2_TOL, oracle_tol=_F8_E5M2_TOL),
    DTypeInfo(DataType.e8m0, ml_dtypes.float8_e8m0fnu, "float", low_precision=True, kernel_view=np.uint8),
    DTypeInfo(DataType.f4_e2m1, ml_dtypes.float4_e2m1fn, "float", low_precision=True, kernel_view=np.uint8),
    # codes in uint8, see f4_e3m0_decode
    DTypeInfo(DataType.f4_e3m0, np.uint8, "float", low_precision=True, kernel_view=np.uint8, from_numpy=False),
    DTypeInfo(DataType.boolean, np.bool_, "bool"),
    DTypeInfo(DataType.c64, np.complex64, "complex", compiled_tol=(2e-5, 2e-6), oracle_tol=(1e-4, 1e-5)),
)
#: DataType -> its row
INFO: dict[DataType, DTypeInfo] = {r.dtype: r for r in ROWS}
_FROM_NUMPY = {r.np: r.dtype for r in ROWS if r.np is not None and r.from_numpy}
if set(INFO) != set(DataType) or len(INFO) != len(ROWS) or len(_FROM_NUMPY) != sum(
        r.np is not None and r.from_numpy for r in ROWS):
    raise RuntimeError("graphc.dtypes: each data type needs exactly one row, each numpy dtype one type")


# -- f4_e3m0: oneDNN's 4-bit float with no mantissa, which ml_dtypes lacks --------------
# An f4_e3m0 array is stored as numpy uint8 codes, one per byte in the low nibble
# (as ml_dtypes keeps float4_e2m1fn): bit 3 the sign, bits 0-2 the exponent e with
# bias 3.  e = 0 is zero; e = 1..7 is 2^(e-3): the values are +-{0, 0.25, 0.5, 1,
# 2, 4, 8, 16}.  No infinity or NaN: conversion saturates to +-16 (infinities
# too) and maps NaN to +0.  Rounding is to nearest, ties to the even code (the
# even exponent: 1.5 -> 2, 3 -> 2, 6 -> 8; between 0 and 0.25 the tie 0.125 goes to 0).
F4_E3M0_VALUES = np.array([0.0, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0], np.float64)


def f4_e3m0_decode(codes) -> np.ndarray:
    """The float64 values of f4_e3m0 codes (an integer or float array of codes 0..15;
    bits above the low nibble are ignored)."""
    c = np.asarray(codes).astype(np.int64) & 15
    mag = F4_E3M0_VALUES[c & 7]
    return np.where(c & 8, -mag, mag)


def f4_e3m0_encode(x) -> np.ndarray:
    """Round values to f4_e3m0 codes (numpy uint8): nearest, ties to even code,
    saturating at +-16, NaN to +0."""
    x = np.asarray(x, np.float64)
    sign = np.signbit(x) & ~np.isnan(x)
    a = np.nan_to_num(np.abs(x), nan=0.0, posinf=np.inf)
    e = np.zeros(a.shape, np.int64)
    for k in range(1, 8):   # k wins from the midpoint with k - 1 (a tie goes to the even code)
        mid = (F4_E3M0_VALUES[k - 1] + F4_E3M0_VALUES[k]) / 2
        e = np.where((a > mid) | ((a == mid) & (k % 2 == 0)), k, e)
    return (e | np.where(sign, 8, 0)).astype(np.uint8)
