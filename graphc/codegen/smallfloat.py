"""Kernel helpers of oneDNN's one-byte and half-byte floats: e8m0, f4_e2m1, f4_e3m0.

Each reaches a kernel as a uint8 view of its bytes (its dtype row's kernel_view,
graphc.dtypes; kernels import these helpers as graphc.codegen.helpers declares); an f4
code sits in the low nibble of its byte, as ml_dtypes keeps float4_e2m1fn.
``*_to_f32`` widen a code exactly; ``f32_to_*`` round an f32 as the reference
does (ml_dtypes' float8_e8m0fnu / float4_e2m1fn conversions, graphc.types'
f4_e3m0_encode), checked against them over every f32 class in
tests/core/test_new_dtypes.py.

* e8m0 (no sign, 8 exponent bits, bias 127): code c is 2^(c-127), 255 is NaN;
  ties round up, f32 subnormals above 2^-127 to 2^-126 (as ml_dtypes); zero,
  negatives, infinities and NaN give NaN, and so does overflow.
* f4_e2m1 (sign, 2 exponent bits bias 1, 1 mantissa bit): +-{0, 0.5, 1, 1.5, 2,
  3, 4, 6}; round to nearest even, saturating at +-6, NaN to a zero of the
  opposite sign bit (as ml_dtypes).
* f4_e3m0 (sign, 3 exponent bits bias 3, no mantissa): +-{0, 0.25, ..., 16}; see
  graphc.types.f4_e3m0_decode.
"""
from __future__ import annotations

import numpy as np

from .helper_jit import helper_jit
from .runtime import _JIT, _bitcast_f32_u32, _bitcast_u32_f32


@helper_jit(**_JIT)
def e8m0_to_f32(b):
    c = np.uint32(b) & np.uint32(0xFF)
    if c == np.uint32(0xFF):
        return np.float32(np.nan)
    if c == np.uint32(0):
        return _bitcast_u32_f32(np.uint32(0x00400000))   # 2^-127, an f32 subnormal
    return _bitcast_u32_f32(c << np.uint32(23))


@helper_jit(**_JIT)
def f32_to_e8m0(f):
    u = _bitcast_f32_u32(np.float32(f))
    if u == np.uint32(0) or u >= np.uint32(0x7F800000):   # zero, negative, inf, NaN
        return np.uint8(0xFF)
    e = u >> np.uint32(23)
    m = u & np.uint32(0x7FFFFF)
    if e == np.uint32(0):   # f32 subnormal: 2^-127 (code 0) at most, else 2^-126 (as ml_dtypes)
        return np.uint8(1) if m > np.uint32(0x400000) else np.uint8(0)
    if m >= np.uint32(0x400000):
        e += np.uint32(1)
    return np.uint8(0xFF) if e >= np.uint32(0xFF) else np.uint8(e)


@helper_jit(**_JIT)
def f4e2m1_to_f32(b):
    c = np.uint32(b) & np.uint32(15)
    e = (c >> np.uint32(1)) & np.uint32(3)
    m = np.float32(c & np.uint32(1))
    mag = m * np.float32(0.5) if e == np.uint32(0) else (np.float32(1.0) + m * np.float32(0.5)) * np.float32(
        1 << (e - np.uint32(1)))
    return -mag if c & np.uint32(8) else mag


@helper_jit(**_JIT)
def f32_to_f4e2m1(f):
    x = np.float32(f)
    if np.isnan(x):
        return np.uint8(0) if _bitcast_f32_u32(x) >> np.uint32(31) else np.uint8(8)
    sign = np.uint32(8) if _bitcast_f32_u32(x) >> np.uint32(31) else np.uint32(0)
    a = abs(x)
    if a < np.float32(2.0):      # 0, 0.5, 1, 1.5 and 2 are codes 0..4: steps of 0.5
        c = np.uint32(np.round(a * np.float32(2.0)))
    elif a < np.float32(4.0):    # 2, 3, 4: codes 4..6
        c = np.uint32(4) + np.uint32(np.round(a - np.float32(2.0)))
    elif a < np.float32(6.0):    # 4, 6: codes 6, 7 (the tie 5 to 6, 4's even code)
        c = np.uint32(6) + np.uint32(np.round((a - np.float32(4.0)) * np.float32(0.5)))
    else:
        c = np.uint32(7)
    return np.uint8(sign | c)


@helper_jit(**_JIT)
def f4e3m0_to_f32(b):
    c = np.uint32(b) & np.uint32(15)
    e = c & np.uint32(7)
    mag = np.float32(0.0) if e == np.uint32(0) else _bitcast_u32_f32((e + np.uint32(124)) << np.uint32(23))
    return -mag if c & np.uint32(8) else mag


@helper_jit(**_JIT)
def f32_to_f4e3m0(f):
    x = np.float32(f)
    if np.isnan(x):
        return np.uint8(0)
    u = _bitcast_f32_u32(x)
    sign = np.uint32(8) if u >> np.uint32(31) else np.uint32(0)
    a = u & np.uint32(0x7FFFFFFF)
    if a >= np.uint32(0x41800000):          # >= 16 (and inf): saturate
        return np.uint8(sign | np.uint32(7))
    if a <= np.uint32(0x3E000000):          # <= 0.125: zero (the tie to the even code 0)
        return np.uint8(sign)
    if a < np.uint32(0x3E800000):           # (0.125, 0.25): 0.25
        return np.uint8(sign | np.uint32(1))
    k = (a >> np.uint32(23)) - np.uint32(124)   # 0.25 -> 1 ... 8 -> 6
    m = a & np.uint32(0x7FFFFF)
    if m > np.uint32(0x400000) or (m == np.uint32(0x400000) and k & np.uint32(1)):
        k += np.uint32(1)
    return np.uint8(sign | k)
