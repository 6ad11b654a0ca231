"""Per-group statistics of the normalization lowerings (graphc/codegen/rules/norm.py,
graphc/codegen/channels_last.py): each group's mean and biased variance over a
reduction planner's Nest (graphc.codegen.grouped), and 1 / sqrt(var + eps)."""
from __future__ import annotations

from . import ir
from .grouped import Nest


class Moments:
    """Each group's mean and biased variance, in two passes over ``x`` (the
    second about the mean rounded to f32, then corrected); declare before
    ``nest.groups()``, ``emit`` inside it."""

    def __init__(self, nest: Nest):
        self.nest = nest
        self.sum, self.sq = nest.acc(short_scalar=True), nest.acc(short_scalar=True)
        self.mean, self.var = nest.stat("f64"), nest.stat("f64")
        self.mean32 = nest.stat()

    def emit(self, kb, x):
        nest, n = self.nest, self.nest.reduced_count
        with nest.pass_(self.sum) as iv:
            self.sum.add(x.load_nd(iv))
        with nest.per_group():
            self.mean.set(self.sum.value / n)
            self.mean32.set(self.mean.ref)
        with nest.pass_(self.sq) as iv:
            d = kb.let(x.load_nd(iv) - self.mean32.ref, "d")
            self.sq.add(d * d)
        with nest.per_group():
            self.var.set(self.sq.value / n - (self.mean.ref - self.mean32.ref) ** 2)

    def normalized(self, x: ir.Expr, inv, shift) -> ir.Expr:
        """(x - mean) * inv as (x - mean32) * inv + shift, ``shift`` set by ``set_shift``."""
        return (x - self.mean32.ref) * inv.ref + shift.ref

    def shift(self, inv: ir.Expr) -> ir.Expr:
        """The value of the shift of ``normalized``, rounded to f32."""
        return ir.f32((self.mean32.ref - self.mean.ref) * inv)


def inv_std(var: ir.Expr, eps) -> ir.Expr:
    return 1.0 / ir.call("np.sqrt", var + float(eps))
