"""Helper functions generated kernels can call, emitted into the kernel's own
module (their text is part of the source the cache keys; graphc.codegen.runtime
is imported, not inlined, so adding to it would change every kernel's cache
key).  Each helper's fastmath flags are its own: LLVM keeps them per
instruction once it inlines the helper into the kernel, whose other math stays
strict.

- exp_neg_f32 / exp_le0_f32: float32 exp for x <= 0 from Cephes' expf
  polynomial, vectorizable (a call to libm's exp is not); relative error < 3e-7.
  'contract' turns the polynomial into FMAs.
- sigmoid_f32: from exp_neg_f32.
- fsum, and the per-kernel sums of sum_helper: float64 sums with 'reassoc',
  so LLVM vectorizes them into partial sums (a strict running sum, or several
  unrolled by hand, stays scalar).
"""
from __future__ import annotations

from . import ir
from .printer import print_body

_BITS = "from graphc.codegen.runtime import bits_to_f32, f32_to_bits"

_EXP_NEG_F32 = """\
@njit(cache=True, nogil=True, fastmath={'contract'})
def exp_neg_f32(x):
    # exp(x) for x <= 0; 0 below -87 (and for NaN).  x = n ln2 + r, n rounded to
    # nearest by the 1.5 * 2^23 shift, which also leaves n in t's low bits for 2^n
    xc = x if x > np.float32(-87.0) else np.float32(-87.0)
    t = xc * np.float32(1.4426950408889634) + np.float32(12582912.0)
    n = t - np.float32(12582912.0)
    r = xc - n * np.float32(0.693359375) + n * np.float32(2.12194440e-4)
    p = np.float32(1.9875691500e-4)
    p = p * r + np.float32(1.3981999507e-3)
    p = p * r + np.float32(8.3334519073e-3)
    p = p * r + np.float32(4.1665795894e-2)
    p = p * r + np.float32(1.6666665459e-1)
    p = p * r + np.float32(5.0000001201e-1)
    p = p * r * r + r + np.float32(1.0)
    y = p * bits_to_f32((f32_to_bits(t) + np.uint32(127 - 0x4B400000)) << np.uint32(23))
    return y if x > np.float32(-87.0) else np.float32(0.0)"""

_EXP_LE0_F32 = """\
@njit(cache=True, nogil=True)
def exp_le0_f32(x):
    # exp(x) for x <= 0 (x - max in softmax), NaN staying NaN
    x = np.float32(x)
    return exp_neg_f32(x) if x == x else x"""

_SIGMOID_F32 = """\
@njit(cache=True, nogil=True, fastmath={'contract'})
def sigmoid_f32(x):
    x = np.float32(x)  # the 1.5 * 2^23 shift rounds in float32 only
    e = exp_neg_f32(-abs(x))
    return (np.float32(1.0) if x >= np.float32(0.0) else e) / (np.float32(1.0) + e)"""

#: the decorator of the reassociating sum helpers
_REASSOC = "@njit(cache=True, nogil=True, error_model='numpy', fastmath={'reassoc'})"

_FSUM = _REASSOC + """
def fsum(buf, n):
    s = 0.0
    for j in range(n):
        s += buf[np.uint64(j)]
    return s"""

#: name -> (the helpers it calls, its text)
HELPERS = {
    "bits": ((), _BITS),
    "exp_neg_f32": (("bits",), _EXP_NEG_F32),
    "exp_le0_f32": (("exp_neg_f32",), _EXP_LE0_F32),
    "sigmoid_f32": (("exp_neg_f32",), _SIGMOID_F32),
    "fsum": ((), _FSUM),
}


def use_helper(kb, name: str) -> None:
    """Emit helper ``name`` (after the helpers it calls) into kb's module, once."""
    deps, text = HELPERS[name]
    for d in deps:
        use_helper(kb, d)
    if text not in kb.helpers:
        kb.helpers.append(text)


def sum_helper(kb, n: int, term, zero=0.0) -> ir.Expr:
    """The sum of ``term(j)`` (an IR expression of the loop index ``j``) over j < n,
    accumulated from ``zero`` (float64 by default, or an expression of another
    type), as a reassociating helper of kb's module, like fsum but over an
    expression.  The helper takes every name the term reads besides j, under the
    same names; returns the call as an expression (float64, or the sum's type)."""
    name, j = kb.fresh("rsum"), ir.var(kb.fresh("j"))
    t = term(j)
    z = zero if isinstance(zero, ir.Expr) else ir.const(float(zero), "f64")
    dt = ir.promote(z.dt, t.dt)
    params = sorted({e.args[0]: e for e in ir.walk(t) if e.op == "var" and e != j}.items())
    acc = ir.var("s", dt)   # (kernel names all end in a number: no clash)
    body = [ir.Assign(acc, ir.cast(z, dt)), ir.For(j, ir.const(0), ir.const(n), [ir.Assign(acc, acc + t)]),
            ir.Return(acc)]
    lines = print_body(body, 1, {p for p, _ in params} | {"s"})
    kb.helpers.append(f"{_REASSOC}\ndef {name}({', '.join(p for p, _ in params)}):\n" + "\n".join(lines))
    return ir.call(name, *(e for _, e in params), dt=dt)

