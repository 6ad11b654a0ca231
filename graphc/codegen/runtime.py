"""Scalar helpers that generated kernels call: storage-format conversions,
saturation, a few activations and their derivatives, Dropout's Philox rounds.

bf16, f16 and f8 tensors reach kernels as unsigned-integer views of their bits;
these helpers widen them to f32 and narrow f32 back with round-to-nearest-even.
All are ``njit(cache=True)``, called by value (graphc.codegen.helper_jit): compiled once,
linked into each kernel and inlined by LLVM.
"""
from __future__ import annotations

import math

import numpy as np
from llvmlite import ir as llvm_ir
from numba import types
from numba.extending import intrinsic, overload

from .cpu import has_f16c
from .helper_jit import helper_jit


@intrinsic
def _bitcast_u32_f32(typingctx, u):
    sig = types.float32(types.uint32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float32))
    return sig, codegen


@intrinsic
def _bitcast_f32_u32(typingctx, f):
    sig = types.uint32(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.uint32))
    return sig, codegen


def llvm_inlined(disp):
    """Dispatcher ``disp`` with every overload it compiles (or loads from numba's
    cache) marked ``alwaysinline`` for LLVM, so that it is inlined into each
    kernel that links it, at LLVM's cost only: numba's inline='always' would put
    a copy of its IR through numba's passes in every caller instead.  (Set on
    the module numba links into callers, before any caller is finalized: a
    helper is compiled while its caller is typed.)"""
    add = disp.add_overload

    def add_overload(cres):
        for fn in cres.library._get_module_for_linking().functions:
            if not fn.is_declaration:
                fn.add_function_attribute("alwaysinline")
        add(cres)
    disp.add_overload = add_overload
    return disp


_JIT = dict(cache=True, nogil=True)  # not IR-inlined: LLVM inlines the linked helpers, at a
# fraction of the compile time numba's IR-level inlining costs in every kernel


@helper_jit(**_JIT)
def bits_to_f32(u):
    return _bitcast_u32_f32(np.uint32(u))


@helper_jit(**_JIT)
def f32_to_bits(f):
    return _bitcast_f32_u32(np.float32(f))


# ------------------------------------------------------------ f64 -> f32
@helper_jit(**_JIT)
def _f64_to_f32_odd(x):
    y = np.float32(x)                        # nearest even
    yd = np.float64(y)
    if yd == x or not math.isfinite(yd):
        return y
    b = _bitcast_f32_u32(y)
    if abs(yd) > abs(x):                     # rounded away from zero: one ulp back
        b = b - np.uint32(1)
    return _bitcast_u32_f32(b | np.uint32(1))  # inexact: odd


def f64_to_f32_odd(x):
    """f64 -> f32 rounding to odd: a later RNE narrowing (bf16, f16, f8) then rounds
    as if straight from f64, as graphc.numerics.round_to does for the reference.
    Typed at compile time: an f32 (or integer) value passes through untouched, so
    kernels computing in f32 keep vectorizing."""
    return _f64_to_f32_odd(x)


@overload(f64_to_f32_odd)
def _ov_f64_to_f32_odd(x):
    if isinstance(x, types.Float) and x.bitwidth == 64:
        return lambda x: _f64_to_f32_odd(x)
    return lambda x: np.float32(x)


# ---------------------------------------------------------------------- bf16
@helper_jit(**_JIT)
def bf16_to_f32(h):
    return _bitcast_u32_f32(np.uint32(h) << np.uint32(16))


@helper_jit(**_JIT)
def f32_to_bf16(f):
    # Round to nearest even: add 0x7FFF plus the kept part's lowest bit, keep the top
    # 16 bits; a NaN keeps its top bits with the quiet bit set (ORed, so it never
    # carries into the exponent).  Both ways are one select of the value added and of
    # add/or, which LLVM vectorizes as well as the NaN-free rounding (a branch to a
    # separate NaN return made a 4096x1024 bf16 SoftMax 25% slower).  Checked equal
    # to the branchy form on all 2^32 inputs.
    u = _bitcast_f32_u32(np.float32(f))
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    bias = np.uint32(0x400000) if nan else np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1))
    return np.uint16(((u | bias) if nan else (u + bias)) >> np.uint32(16))


# ---------------------------------------------------------------------- f16
F16C = has_f16c()   # (the f16 conversions below: F16C's where kernels are compiled for a CPU with it)


@intrinsic
def _half_bits_to_f32(typingctx, h):
    sig = types.float32(types.uint16)

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], llvm_ir.HalfType()), llvm_ir.FloatType())
    return sig, codegen


@intrinsic
def _f32_to_half_bits(typingctx, f):
    sig = types.uint16(types.float32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.fptrunc(args[0], llvm_ir.HalfType()), llvm_ir.IntType(16))
    return sig, codegen


@helper_jit(**_JIT)
def _f16_to_f32_int(h):
    h = np.uint32(h)
    sign = (h & np.uint32(0x8000)) << np.uint32(16)
    exp = (h >> np.uint32(10)) & np.uint32(0x1F)
    man = h & np.uint32(0x3FF)
    if exp == 0:
        if man == 0:
            return _bitcast_u32_f32(sign)
        # subnormal: man * 2^-24
        v = np.float32(man) * np.float32(5.960464477539063e-08)
        return -v if sign else v
    if exp == 0x1F:
        return _bitcast_u32_f32(sign | np.uint32(0x7F800000) | (man << np.uint32(13)))
    return _bitcast_u32_f32(sign | ((exp + np.uint32(112)) << np.uint32(23)) | (man << np.uint32(13)))


@helper_jit(**_JIT)
def _f32_to_f16_int(f):
    u = _bitcast_f32_u32(np.float32(f))
    sign = np.uint32((u >> np.uint32(16)) & np.uint32(0x8000))
    a = u & np.uint32(0x7FFFFFFF)
    if a >= np.uint32(0x7F800000):  # inf or nan
        if a > np.uint32(0x7F800000):
            return np.uint16(sign | np.uint32(0x7E00))
        return np.uint16(sign | np.uint32(0x7C00))
    if a >= np.uint32(0x477FF000):  # rounds to >= 65520 -> inf
        return np.uint16(sign | np.uint32(0x7C00))
    if a < np.uint32(0x38800000):  # below f16 normal range: subnormal or zero
        # value * 2^24 rounded to nearest even integer = subnormal mantissa
        v = _bitcast_u32_f32(a) * np.float32(16777216.0)
        r = np.float32(np.round(v))  # numpy round: half to even
        return np.uint16(sign | np.uint32(r))
    # normal: rebias exponent, round mantissa 23 -> 10 bits, ties to even
    lsb = (a >> np.uint32(13)) & np.uint32(1)
    a = a + np.uint32(0xFFF) + lsb
    return np.uint16(sign | ((a - np.uint32(0x38000000)) >> np.uint32(13)))


if F16C:   # (the same values; a NaN keeps its payload, quieted, where the integer code makes it 0x7E00)
    @helper_jit(**_JIT)
    def f16_to_f32(h):
        return _half_bits_to_f32(np.uint16(h))

    @helper_jit(**_JIT)
    def f32_to_f16(f):
        return _f32_to_half_bits(np.float32(f))
else:
    f16_to_f32, f32_to_f16 = _f16_to_f32_int, _f32_to_f16_int


# ---------------------------------------------------------------------- f8
@helper_jit(**_JIT)
def f8e4m3_to_f32(b):
    b = np.uint32(b)
    sign = np.float32(-1.0) if b & np.uint32(0x80) else np.float32(1.0)
    exp = (b >> np.uint32(3)) & np.uint32(0xF)
    man = b & np.uint32(0x7)
    if exp == 0xF and man == 0x7:
        return np.float32(np.nan)
    if exp == 0:
        return sign * np.float32(man) * np.float32(0.001953125)  # 2^-9
    return sign * _bitcast_u32_f32(((exp + np.uint32(120)) << np.uint32(23)) | (man << np.uint32(20)))


@helper_jit(**_JIT)
def f32_to_f8e4m3(f):
    """RNE; beyond the largest finite value (448) -> NaN, as e4m3fn has no infinity (as ml_dtypes)."""
    u = _bitcast_f32_u32(np.float32(f))
    sign = np.uint32((u >> np.uint32(24)) & np.uint32(0x80))
    a = u & np.uint32(0x7FFFFFFF)
    if a > np.uint32(0x7F800000):
        return np.uint8(sign | np.uint32(0x7F))
    if a > np.uint32(0x43E80000):  # > 464 rounds past 448 -> NaN (e4m3fn has no inf)
        return np.uint8(sign | np.uint32(0x7F))
    if a < np.uint32(0x3C800000):  # < 2^-6: subnormal, step 2^-9
        v = _bitcast_u32_f32(a) * np.float32(512.0)
        r = np.float32(np.round(v))
        return np.uint8(sign | np.uint32(r))
    lsb = (a >> np.uint32(20)) & np.uint32(1)
    a = a + np.uint32(0x7FFFF) + lsb
    return np.uint8(sign | ((a - np.uint32(0x3C000000)) >> np.uint32(20)))


@helper_jit(**_JIT)
def f8e5m2_to_f32(b):
    return f16_to_f32(np.uint32(b) << np.uint32(8))


@helper_jit(**_JIT)
def f32_to_f8e5m2(f):
    h = np.uint32(f32_to_f16(f))
    if (h & np.uint32(0x7C00)) == np.uint32(0x7C00):  # inf / nan
        if h & np.uint32(0x3FF):
            return np.uint8((h >> np.uint32(8)) | np.uint32(0x02))
        return np.uint8(h >> np.uint32(8))
    # round 16 -> 8 bits RNE directly from f32 to avoid double rounding
    u = _bitcast_f32_u32(np.float32(f))
    sign = np.uint32((u >> np.uint32(24)) & np.uint32(0x80))
    a = u & np.uint32(0x7FFFFFFF)
    if a >= np.uint32(0x47700000):  # >= 61440 rounds past 57344 -> inf
        return np.uint8(sign | np.uint32(0x7C))
    if a < np.uint32(0x38800000):  # < 2^-14: subnormal, step 2^-16
        v = _bitcast_u32_f32(a) * np.float32(65536.0)
        r = np.float32(np.round(v))
        return np.uint8(sign | np.uint32(r))
    lsb = (a >> np.uint32(21)) & np.uint32(1)
    a = a + np.uint32(0xFFFFF) + lsb
    return np.uint8(sign | ((a - np.uint32(0x38000000)) >> np.uint32(21)))


# -------------------------------------------------------------- integer stores
@helper_jit(**_JIT)
def sat_round(x, lo, hi):
    """Round half to even, then saturate to [lo, hi]; NaN -> 0."""
    if x != x:
        return 0
    r = np.round(x)
    if r < lo:
        return lo
    if r > hi:
        return hi
    return int(r)


# ------------------------------------------------------------- math helpers
@helper_jit(**_JIT)
def sigmoid(x):
    return 0.5 * (1.0 + math.tanh(0.5 * x))


@helper_jit(**_JIT)
def softplus(x, beta):
    # x + log1p(exp(-bx)) / beta, not (bx + log1p(...)) / beta: beta * x may overflow
    # (f32 math), and its exp(-inf) = 0 then leaves x
    bx = beta * x
    if bx > 0:
        return x + math.log1p(math.exp(-bx)) / beta
    return math.log1p(math.exp(bx)) / beta


@helper_jit(**_JIT)
def round_half_away(x):
    # np.floor keeps the float type: numba's math.floor returns an int64, whose
    # conversion saturates NaN, +-inf and |x| >= 2^63 (and is poison when vectorized)
    return math.copysign(np.floor(abs(x) + 0.5), x)


@helper_jit(**_JIT)
def gelu_tanh_grad(x):
    k = 0.7978845608028654
    u = k * (x + 0.044715 * x * x * x)
    t = math.tanh(u)
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3 * 0.044715 * x * x)


@helper_jit(**_JIT)
def mish_grad(x):
    t = math.tanh(softplus(x, 1.0))
    return t + x * (1.0 - t * t) * sigmoid(x)


@helper_jit(cache=True, inline="always", nogil=True)
def philox4x32_10(c0, c1, c2, c3, k0, k1):
    # Philox4x32-10 (graphc.ops.misc.philox4x32_10, the reference's) on uint64-held
    # 32-bit words: Dropout's random words.  Inlined in numba's IR (a tuple result)
    lo = np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0 = np.uint64(0xD2511F53) * c0
        p1 = np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = ((p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & lo,
                          (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & lo)
        k0 = (k0 + np.uint64(0x9E3779B9)) & lo
        k1 = (k1 + np.uint64(0xBB67AE85)) & lo
    return c0, c1, c2, c3
