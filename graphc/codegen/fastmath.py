"""Helper functions generated kernels can call: this module's compiled
functions (imported by a kernel's module, compiled once per process and kept
in numba's on-disk cache: the kernel cache's version folder is keyed by this
file's text, see graphc.codegen.cache), and per-kernel sum helpers
(:func:`sum_helper`) emitted into the kernel's own module.  The helpers marked
inlined below are marked ``alwaysinline`` for LLVM (graphc.codegen.runtime.
llvm_inlined): LLVM's own inliner would leave these larger bodies as calls,
and a call keeps the loop scalar.  Inlining them in numba's IR instead (numba's
inline='always') cost every kernel calling them a copy of their IR through
numba's passes: about 30% of such a kernel's compile time.  They compile
without fastmath flags, so their polynomials call fma_f32 (llvm.fma through a
numba intrinsic) for the FMAs 'contract' would have made: a 4M-float exp pass
2.2 -> 1.3 ms on one core.
Float32 literals are np.float32 throughout, so that float32 math never widens
to float64.

Accuracy, measured against float64 numpy/libm over [-20, 20] densely and the
tails (tests/codegen/test_fastmath.py; float32 subnormal results flush to 0):

- exp_neg_f32 / exp_le0_f32 (inlined): float32 exp for x <= 0 from Cephes'
  expf polynomial, vectorizable (a call to libm's exp is not); max relative
  error 8.3e-8 on [-87, 0]; 0 below -87.6 and for -inf; exp_le0_f32 keeps NaN.
- exp_scaled_f32, exp_sub_f32, exp_f32 (inlined): the same polynomial with 2^n
  as two factors, so results reach float32's subnormals (about 25% slower):
  exp_sub_f32 for x <= 0 where a large factor may scale a tiny value back (a
  gradient's dy), exp_f32 on the whole range (inf from ln(FLT_MAX) up); max
  relative error 8.3e-8 where the result is normal, one subnormal step below.
- expm1_f32, log_f32, log1p_f32, softplus_f32 (inlined): float32 expm1 (one
  FMA of 2^n and expm1 of the reduced argument: no cancellation near 0),
  Cephes' logf (subnormal arguments scaled first), log1p as log(u) x / (u - 1),
  softplus from exp_sub_f32 and log1p_f32; max relative error over the whole
  float32 range 1.2e-7, 1.2e-7, 1.8e-7 and 2.6e-7 (softplus with beta != 1:
  the float32 product beta x adds up to |beta x| 2^-24).  Elu, Exp, Log,
  SoftPlus and Mish kernels went from 59-1133 us to 8-56 us over 32k floats.
- sigmoid_sub_f32, mish_grad_f32 (inlined): sigmoid with exp_sub_f32, and
  Mish's gradient in float32 with sech^2 = 4e / (1 + e)^2 (1 - tanh^2 would
  cancel); absolute error below 3e-7 against the float64 formula.  (tanh-GELU's
  gradient stays in float64: its float64 formula saturates to exactly 0 or 1 far
  out, where a float32 one leaves a tiny slope that a huge dy scales up.)
- sigmoid_f32 (inlined): from exp_neg_f32; max relative error 1.8e-7.
- tanh_f32, erfc_f32 (inlined): float32 tanh and erfc as branch-free
  polynomials around exp_neg_f32, vectorizable (libm's tanh and erf are not).
  Max relative error: tanh 1.4e-7; erfc 4.1e-6 (at z = 8.9, from float32 z^2;
  1.2e-7 in exact arithmetic).  NaN stays NaN.
- erf_f32, gelu_erf_f32 (inlined): erf as Eigen's rational x P(x^2) / Q(x^2)
  on [-4, 4], no exp and no branch; max absolute error 4.2e-7.  gelu_erf_f32
  = x (1 + erf_f32(x / sqrt 2)) / 2: absolute error below 2.1e-7 (1 + |x|), so
  within graphc's tolerances of the output's scale; relative error below 2e-5
  for x >= -1, growing in the negative tail where 1 + erf cancels (|GELU| <
  4e-3 below x = -3; GELU(-inf) is NaN, -inf * 0, as the reference).  Twice as
  fast as through erfc_f32 (1.04 vs 1.94 ms over 2M floats on one core).
  Kernels call these for float32 math; float64 math keeps libm.
- key_f32 / key_max_f32 / f32_of_key (inlined): a float32 as an int32 ordered
  as the floats are (-0 below +0, NaN with the sign bit clear above +inf), its
  running max, and back (exact): an integer max reduction vectorizes, a float
  one with NaN semantics does not (a 1024-float row's max about 7x faster).
- attn_exp_row: a row of an attention score tile exponentiated in place
  (exp_le0_f32) and summed in float32, with 'reassoc' and 'contract'.
- fsum, and the per-kernel sums of sum_helper: float64 sums with 'reassoc',
  so LLVM vectorizes them into partial sums (a strict running sum, or several
  unrolled by hand, stays scalar).
- hidden_int: an int LLVM cannot see through (an empty inline asm).  A loop of
  a small constant trip count is fully unrolled into scalar code before the
  loop vectorizer runs (numba leaves the SLP vectorizer off); the same loop to
  a hidden bound vectorizes (LayerNorm over rows of 28: 2.7x on one core).
"""
from __future__ import annotations

import numpy as np
from numba.core import types as nbtypes
from numba.extending import intrinsic
from llvmlite import ir as llvm_ir

from . import ir
from .helper_jit import helper_jit
from .helpers import use_helpers_called
from .printer import print_body
from .runtime import bits_to_f32, f32_to_bits, llvm_inlined

#: the reassociating sum helpers: float64 sums LLVM vectorizes into partial sums
_REASSOC = "@njit(cache=True, nogil=True, error_model='numpy', fastmath={'reassoc'})"


def _inlined(fn):
    """A helper LLVM inlines into every caller (error_model 'numpy' drops the
    division-by-zero checks that would keep loops scalar too)."""
    return llvm_inlined(helper_jit(cache=True, nogil=True, error_model="numpy")(fn))


@intrinsic
def fma_f32(typingctx, a, b, c):
    # a * b + c rounded once (llvm.fma): the helpers compile without fastmath
    # flags, so 'contract' makes no FMAs in them
    def codegen(context, builder, signature, args):
        return builder.fma(*args)
    return nbtypes.float32(nbtypes.float32, nbtypes.float32, nbtypes.float32), codegen


@intrinsic
def hidden_int(typingctx, n):
    # n itself, through an empty inline asm LLVM cannot look into
    def codegen(context, builder, signature, args):
        i64 = llvm_ir.IntType(64)
        return builder.asm(llvm_ir.FunctionType(i64, [i64]), "", "=r,0", [args[0]], side_effect=False)
    return nbtypes.int64(nbtypes.int64), codegen


@_inlined
def expm1_poly_f32(r):
    # exp(r) - 1 for |r| <= ln2 / 2 as r + r^2 P(r), Cephes' expf polynomial
    p = np.float32(1.9875691500e-4)
    p = fma_f32(p, r, np.float32(1.3981999507e-3))
    p = fma_f32(p, r, np.float32(8.3334519073e-3))
    p = fma_f32(p, r, np.float32(4.1665795894e-2))
    p = fma_f32(p, r, np.float32(1.6666665459e-1))
    p = fma_f32(p, r, np.float32(5.0000001201e-1))
    return fma_f32(p * r, r, r)


@_inlined
def exp_neg_f32(x):
    # exp(x) for x <= 0; 0 below -87.6 (and for NaN), where 2^n would leave the
    # normal floats (n < -126; results from -87.33 down are subnormal, 0 below
    # -87.6: exp_sub_f32 keeps them).  x = n ln2 + r, n rounded to nearest by the
    # 1.5 * 2^23 shift, which also leaves n in t's low bits for 2^n
    xc = x if x > np.float32(-87.6) else np.float32(-87.6)
    t = fma_f32(xc, np.float32(1.4426950408889634), np.float32(12582912.0))
    n = t - np.float32(12582912.0)
    r = fma_f32(n, np.float32(2.12194440e-4), fma_f32(n, np.float32(-0.693359375), xc))
    p = expm1_poly_f32(r) + np.float32(1.0)
    y = p * bits_to_f32((f32_to_bits(t) + np.uint32(127 - 0x4B400000)) << np.uint32(23))
    return y if x > np.float32(-87.6) else np.float32(0.0)


@_inlined
def exp_le0_f32(x):
    # exp(x) for x <= 0 (x - max in softmax), NaN staying NaN
    x = np.float32(x)
    return exp_neg_f32(x) if x == x else x


@_inlined
def sigmoid_of_f32(x, e):
    # sigmoid(x) from e = exp(-|x|): 1 / (1 + e) from 0 up, e / (1 + e) below; NaN stays NaN
    r = (np.float32(1.0) if x >= np.float32(0.0) else e) / (np.float32(1.0) + e)
    return r if x == x else x


@_inlined
def sigmoid_f32(x):
    x = np.float32(x)  # the 1.5 * 2^23 shift rounds in float32 only
    return sigmoid_of_f32(x, exp_neg_f32(-abs(x)))


@_inlined
def tanh_f32(x):
    # |x| < 0.625: Cephes' odd polynomial; else (1 - e) / (1 + e), e = exp(-2|x|).
    # Relative error below 2e-7; NaN stays NaN, +-inf gives +-1
    x = np.float32(x)
    a = abs(x)
    z = x * x
    p = np.float32(-5.70498872745e-3)
    p = fma_f32(p, z, np.float32(2.06390887954e-2))
    p = fma_f32(p, z, np.float32(-5.37397155531e-2))
    p = fma_f32(p, z, np.float32(1.33314422036e-1))
    p = fma_f32(p, z, np.float32(-3.33332819422e-1))
    small = p * z * x + x
    e = exp_neg_f32(np.float32(-2.0) * a)
    big = (np.float32(1.0) - e) / (np.float32(1.0) + e)
    big = big if x >= np.float32(0.0) else -big
    return small if a < np.float32(0.625) else (big if a == a else x)


@_inlined
def erfc_f32(x):
    # t exp(-z^2 + P(t)), t = 1 / (1 + z / 2), z = |x| (Numerical Recipes' erfcc,
    # relative error below 1.2e-7 in exact arithmetic; about 4e-6 at z = 8.5 in
    # float32, from z^2), erfc(-z) = 2 - erfc(z)
    x = np.float32(x)
    z = abs(x)
    t = np.float32(1.0) / (np.float32(1.0) + np.float32(0.5) * z)
    p = np.float32(0.17087277)
    p = fma_f32(p, t, np.float32(-0.82215223))
    p = fma_f32(p, t, np.float32(1.48851587))
    p = fma_f32(p, t, np.float32(-1.13520398))
    p = fma_f32(p, t, np.float32(0.27886807))
    p = fma_f32(p, t, np.float32(-0.18628806))
    p = fma_f32(p, t, np.float32(0.09678418))
    p = fma_f32(p, t, np.float32(0.37409196))
    p = fma_f32(p, t, np.float32(1.00002368))
    p = fma_f32(p, t, np.float32(-1.26551223))
    r = t * exp_neg_f32(p - z * z)
    r = r if x >= np.float32(0.0) else np.float32(2.0) - r
    return r if x == x else x


@_inlined
def erf_f32(x):
    # Eigen's / XLA's float32 rational erf: x P(x^2) / Q(x^2) on [-4, 4] (erf
    # is +-1 in float32 beyond); no exp, no branch.  NaN stays NaN
    x = np.float32(x)
    c = min(max(x, np.float32(-4.0)), np.float32(4.0))
    z = c * c
    p = np.float32(-2.72614225801306e-10)
    p = fma_f32(p, z, np.float32(2.77068142495902e-08))
    p = fma_f32(p, z, np.float32(-2.10102402082508e-06))
    p = fma_f32(p, z, np.float32(-5.69250639462346e-05))
    p = fma_f32(p, z, np.float32(-7.34990630326855e-04))
    p = fma_f32(p, z, np.float32(-2.95459980854025e-03))
    p = fma_f32(p, z, np.float32(-1.60960333262415e-02))
    q = np.float32(-1.45660718464996e-05)
    q = fma_f32(q, z, np.float32(-2.13374055278905e-04))
    q = fma_f32(q, z, np.float32(-1.68282697438203e-03))
    q = fma_f32(q, z, np.float32(-7.37332916720468e-03))
    q = fma_f32(q, z, np.float32(-1.42647390514189e-02))
    r = c * p / q
    return r if x == x else x


@_inlined
def gelu_erf_f32(x):
    # x (1 + erf(x / sqrt 2)) / 2 with erf_f32: about twice as fast as through
    # erfc_f32 (no exp, no division by 1 + z / 2); absolute error, not relative,
    # in the negative tail, where 1 + erf cancels
    x = np.float32(x)
    return np.float32(0.5) * x * (np.float32(1.0) + erf_f32(x * np.float32(0.7071067811865476)))


@_inlined
def exp_scaled_f32(xc):
    # exp(xc) for xc in [-104, 88.8], subnormal results included: the exp_neg_f32
    # reduction and polynomial, and 2^n as 2^a 2^(n-a), a = n/2 rounded, each factor
    # a normal float32 for n in [-150, 128] (results past FLT_MAX overflow to inf)
    t = fma_f32(xc, np.float32(1.4426950408889634), np.float32(12582912.0))
    n = t - np.float32(12582912.0)
    r = fma_f32(n, np.float32(2.12194440e-4), fma_f32(n, np.float32(-0.693359375), xc))
    p = expm1_poly_f32(r) + np.float32(1.0)
    ta = fma_f32(n, np.float32(0.5), np.float32(12582912.0))
    tb = (n - (ta - np.float32(12582912.0))) + np.float32(12582912.0)
    sa = bits_to_f32((f32_to_bits(ta) + np.uint32(127 - 0x4B400000)) << np.uint32(23))
    sb = bits_to_f32((f32_to_bits(tb) + np.uint32(127 - 0x4B400000)) << np.uint32(23))
    return (p * sa) * sb


@_inlined
def exp_sub_f32(x):
    # exp(x) for x <= 0 with float32's subnormal results (about 25% slower than
    # exp_neg_f32, which flushes them): for values a large factor may scale back
    # (a gradient's dy times exp(x)); 0 below -104, NaN stays NaN
    x = np.float32(x)
    y = exp_scaled_f32(x if x > np.float32(-104.0) else np.float32(-104.0))
    y = y if x > np.float32(-104.0) else np.float32(0.0)
    return y if x == x else x


@_inlined
def exp_f32(x):
    # float32 exp on its whole range: 0 below -104, inf from ln(FLT_MAX) up, NaN stays NaN
    x = np.float32(x)
    y = exp_scaled_f32(min(max(x, np.float32(-104.0)), np.float32(88.8)))
    y = y if x > np.float32(-104.0) else np.float32(0.0)
    return y if x == x else x


@_inlined
def expm1_f32(x):
    # float32 exp(x) - 1 without cancellation near 0: x = n ln2 + r, expm1(r) =
    # r + r^2 P(r) from the exp polynomial, then 2^n expm1(r) + (2^n - 1) in one
    # FMA (2^n - 1 is exact for the n where it matters); -1 below -87, inf above
    # 88.8, NaN stays NaN
    x = np.float32(x)
    xc = min(max(x, np.float32(-87.0)), np.float32(88.8))
    t = fma_f32(xc, np.float32(1.4426950408889634), np.float32(12582912.0))
    n = t - np.float32(12582912.0)
    r = fma_f32(n, np.float32(2.12194440e-4), fma_f32(n, np.float32(-0.693359375), xc))
    q = expm1_poly_f32(r)
    tc = min(t, np.float32(12582912.0 + 127.0))
    s = bits_to_f32((f32_to_bits(tc) + np.uint32(127 - 0x4B400000)) << np.uint32(23))
    y = fma_f32(s, q, s - np.float32(1.0)) * (np.float32(2.0) if t > tc else np.float32(1.0))
    return y if x == x else x


@_inlined
def log_f32(x):
    # Cephes' logf: x = 2^e m, m in [sqrt(1/2), sqrt 2), log m = f - f^2 / 2 + f^3 P(f)
    # with f = m - 1; subnormal x scaled by 2^23 first.  0 -> -inf, x < 0 -> NaN,
    # inf -> inf, NaN stays NaN
    x = np.float32(x)
    sub = x < np.float32(1.17549435e-38)
    b = f32_to_bits(x * np.float32(8388608.0) if sub else x)
    e = np.float32(np.int32((b >> np.uint32(23)) & np.uint32(0xFF)) - np.int32(126))
    e = e - np.float32(23.0) if sub else e
    m = bits_to_f32((b & np.uint32(0x007FFFFF)) | np.uint32(0x3F000000))
    low = m < np.float32(0.70710678118654752)
    e = e - np.float32(1.0) if low else e
    f = (m + m - np.float32(1.0)) if low else (m - np.float32(1.0))
    z = f * f
    p = np.float32(7.0376836292e-2)
    p = fma_f32(p, f, np.float32(-1.1514610310e-1))
    p = fma_f32(p, f, np.float32(1.1676998740e-1))
    p = fma_f32(p, f, np.float32(-1.2420140846e-1))
    p = fma_f32(p, f, np.float32(1.4249322787e-1))
    p = fma_f32(p, f, np.float32(-1.6668057665e-1))
    p = fma_f32(p, f, np.float32(2.0000714765e-1))
    p = fma_f32(p, f, np.float32(-2.4999993993e-1))
    p = fma_f32(p, f, np.float32(3.3333331174e-1))
    y = fma_f32(e, np.float32(-2.12194440e-4), p * f * z)
    y = fma_f32(z, np.float32(-0.5), y)
    y = fma_f32(e, np.float32(0.693359375), f + y)
    y = y if x < np.float32(np.inf) else x
    y = y if x > np.float32(0.0) else (np.float32(-np.inf) if x == np.float32(0.0) else np.float32(np.nan))
    return y if x == x else x


@_inlined
def log1p_f32(x):
    # log(1 + x) as log(u) x / (u - 1), u = 1 + x rounded (the quotient corrects
    # u's rounding: a few ulp), x itself where u rounds to 1; inf stays inf
    x = np.float32(x)
    u = x + np.float32(1.0)
    d = u - np.float32(1.0)
    y = log_f32(u) * (x / d) if d != np.float32(0.0) else x
    return y if u < np.float32(np.inf) else u


@_inlined
def softplus_f32(x, beta):
    # log(1 + exp(beta x)) / beta as x + log1p(exp(-bx)) / beta for bx > 0 (exp of
    # a value <= 0 only: beta x overflowing to inf leaves x); NaN stays NaN
    x = np.float32(x)
    b = np.float32(beta)
    bx = b * x
    lp = log1p_f32(exp_sub_f32(-abs(bx))) / b
    y = x + lp if bx > np.float32(0.0) else lp
    return y if x == x else x


@_inlined
def sigmoid_sub_f32(x):
    # sigmoid_f32 with exp_sub_f32: its subnormal values (x below -87) kept, for
    # gradients whose dy may scale them back; NaN stays NaN
    x = np.float32(x)
    return sigmoid_of_f32(x, exp_sub_f32(-abs(x)))


@_inlined
def mish_grad_f32(x):
    # d/dx x tanh(s) = t + x sech^2(s) sigmoid(x), s = softplus(x) >= 0, t = tanh(s),
    # sech^2(s) = 4e / (1 + e)^2 with e = exp(-2s): 1 - t^2 would cancel as t nears 1
    x = np.float32(x)
    s = softplus_f32(x, np.float32(1.0))
    e = exp_neg_f32(np.float32(-2.0) * s)
    d = np.float32(1.0) / (np.float32(1.0) + e)
    return tanh_f32(s) + x * (np.float32(4.0) * e * d * d) * sigmoid_sub_f32(x)


@_inlined
def key_f32(x):
    # an int32 ordered as the float32 x is (-0 below +0; a NaN with the sign
    # bit clear above +inf, with it set below -inf): integer maxima vectorize
    # (a float max with NaN semantics does not)
    # (the int32 kept: numba widens int32 operators to int64, and a maximum on
    # int64 keys runs on half as many lanes)
    b = np.int32(f32_to_bits(x))
    return np.int32(b ^ ((b >> np.int32(31)) & np.int32(0x7FFFFFFF)))


@_inlined
def key_max_f32(m, x):
    # the larger of key m and x's key
    k = key_f32(np.float32(x))
    return k if k > m else m


@_inlined
def f32_of_key(k):
    # the float32 whose key_f32 is k
    return bits_to_f32(np.uint32(k ^ ((k >> np.int32(31)) & np.int32(0x7FFFFFFF))))


@helper_jit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def fsum(buf, n):
    s = 0.0
    for j in range(n):
        s += buf[np.uint64(j)]
    return s


#: terms an f32 partial sum of fsum32 takes before it is added into the f64 total
FSUM32_RUN = 1024


@helper_jit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc"})
def fsum32(buf, n):
    # f32 terms summed in f32 runs of FSUM32_RUN (vectorised at full width: each
    # vector lane adds a few dozen terms), the runs added in f64; a run whose f32
    # sum is not finite (it overflowed, or holds inf or NaN) is summed again in f64
    s = 0.0
    for b in range(0, n, FSUM32_RUN):
        e = min(b + FSUM32_RUN, n)
        t = np.float32(0.0)
        for j in range(b, e):
            t += buf[np.uint64(j)]
        if abs(t) < np.float32(np.inf):
            s += t
        else:
            for j in range(b, e):
                s += np.float64(buf[np.uint64(j)])
    return s


@helper_jit(cache=True, nogil=True, error_model="numpy", fastmath={"reassoc", "contract"})
def attn_exp_row(s, off, n, m):
    # s[off:off+n] = exp(s - m) for s <= m (NaN stays NaN); returns their float32 sum
    # (graphc.codegen.attention: a row of a score tile)
    acc = np.float32(0.0)
    for j in range(n):
        p = exp_le0_f32(s[np.uint64(off + j)] - m)
        s[np.uint64(off + j)] = p
        acc += p
    return acc


def count_arg(n) -> ir.Expr:
    """A trip count ``n`` as an argument of a helper here: ``np.int64(n)``, not the
    literal (numba compiles a helper once per literal value it is called with;
    LLVM still sees the number once it has inlined the helper)."""
    n = ir.const(int(n)) if not isinstance(n, ir.Expr) else n
    return ir.Expr("cast", ("int", n), "int") if n.op == "const" else n


def sum_helper(kb, n: int, term, zero=0.0) -> ir.Expr:
    """The sum of ``term(j)`` (an IR expression of the loop index ``j``) over j < n,
    accumulated from ``zero`` (float64 by default, or an expression of another
    type), as a reassociating helper of kb's module, like fsum but over an
    expression.  The helper takes every name the term reads besides j, under the
    same names; returns the call as an expression (float64, or the sum's type)."""
    j = ir.var(kb.fresh("j"))
    return loop_sum_helper(kb, n, j, [], term(j), zero)


def loop_sum_helper(kb, n, j: ir.Expr, body, term: ir.Expr, zero=0.0) -> ir.Expr:
    """As sum_helper, the loop index being ``j`` (a name of the kernel's), the trip
    count ``n`` an int or an int expression (e.g. a hidden_int: see the module
    doc), and each iteration first running ``body``, Let statements the term may
    read (a pass's lets); the helper takes every other name they read."""
    name = kb.fresh("rsum")
    z = zero if isinstance(zero, ir.Expr) else ir.const(float(zero), "f64")
    dt = ir.promote(z.dt, term.dt)
    bound = {s.target.args[0] for s in body} | {j.args[0]}
    n = n if isinstance(n, ir.Expr) else ir.const(n)
    params = sorted({e.args[0]: e for x in [n, term, *(s.value for s in body)] for e in ir.walk(x)
                     if e.op == "var" and e.args[0] not in bound}.items())
    acc = ir.var("s", dt)   # (kernel names all end in a number: no clash)
    loop = [*body, ir.Assign(acc, acc + term)]
    use_helpers_called(kb, ir.calls(loop))
    stmts = [ir.Assign(acc, ir.cast(z, dt)), ir.For(j, ir.const(0), n, loop), ir.Return(acc)]
    lines = print_body(stmts, 1, {p for p, _ in params} | {"s"})
    kb.helpers.append(f"{_REASSOC}\ndef {name}({', '.join(p for p, _ in params)}):\n" + "\n".join(lines))
    return ir.call(name, *(e for _, e in params), dt=dt)
