"""Lowering of Interpolate and InterpolateBackward (graphc/ops/interpolate.py).

Kernels precompute, per spatial axis, the nonzero entries of the weight
matrix as tables (constant arrays in the kernel): the forward gathers, for
each dst element, the product of one tap per axis (:func:`sparse_rows`: 1 tap
for nearest, 2 for linear modes); the backward gathers too, each diff_src
element summing the diff_dst elements whose weights touch it, per axis from
the matrix's columns (:func:`compressed_columns`), so its parallel loop needs
no atomics.  An axis whose matrix is the identity indexes directly.

The kernels take the dst (diff_dst) spatial dims from the shapes of the kernel
arguments: a kernel specialised on a sizes input was given them in its shapes."""
from __future__ import annotations

import itertools
import math

import numpy as np

from .. import ir
from ..kernel import worth_parallel
from ..loops import memory_order_nest
from ...ops.interpolate import spatial_axes, weights
from . import Rule


def sparse_rows(m: np.ndarray):
    """(index, weight) tables of the nonzero entries of each row of ``m``, both
    (rows x T) with T the most in a row (at least 1); short rows are padded
    with their first index and weight 0."""
    nz = m != 0
    t = max(1, int(nz.sum(axis=1).max(initial=0)))
    index = np.zeros((m.shape[0], t), np.int64)
    weight = np.zeros((m.shape[0], t))
    for r in range(m.shape[0]):
        cols = np.flatnonzero(nz[r])
        index[r, :] = cols[0] if len(cols) else 0
        index[r, :len(cols)] = cols
        weight[r, :len(cols)] = m[r, cols]
    return index, weight


def compressed_columns(m: np.ndarray):
    """(start, index, weight): the nonzero entries of each column c of ``m``
    are rows index[start[c]:start[c + 1]] with weights weight[...]."""
    cols, rows = np.nonzero(m.T)
    start = np.searchsorted(cols, np.arange(m.shape[1] + 1))
    return start, rows, m[rows, cols]


def _table(kb, values, elem, prefix):
    return kb.const_array(np.asarray(values).ravel().tolist(), elem, prefix)


def _at(ivars, axis):
    return ivars[axis] if ivars[axis] is not None else ir.const(0)


def _times(a, b):
    return b if a is None else a * b


class Interpolate(Rule):
    kinds = ("Interpolate",)

    def lower(self, op, kb, ins, outs, values):
        """A gather: each dst element sums, over one tap per spatial axis, the
        product of the taps' weights times the src element they index."""
        src, dst = ins[0], outs[0]
        axes = spatial_axes(op, len(dst.shape))
        plans = []   # per axis: None (the identity) or (taps, index table, weight table or None)
        for a in axes:
            w = weights(op, src.shape[a], dst.shape[a])
            index, weight = sparse_rows(w)
            t = index.shape[1]
            if t == 1 and np.all(weight == 1.0) and np.array_equal(index[:, 0], np.arange(dst.shape[a])):
                plans.append(None)
                continue
            plans.append((t, _table(kb, index, "int", "taps"),
                          None if np.all(weight[:, 0] == 1.0) and t == 1 else _table(kb, weight, "f64", "wts")))
        work = dst.lt.nelems * math.prod(1 if p is None else p[0] for p in plans)
        with memory_order_nest(kb, dst.shape, dst.strides, worth_parallel(work)) as ivars:
            choices = []   # per axis: [(src index, weight or None)] one per tap
            for a, plan in zip(axes, plans):
                if plan is None:
                    choices.append([(ivars[a], None)])
                    continue
                t, index, weight = plan
                base = kb.let(_at(ivars, a) * t if t > 1 else _at(ivars, a), "b")
                choices.append([(kb.let(ir.load(index, base + k if k else base), "k"),
                                 None if weight is None else kb.let(ir.load(weight, base + k if k else base), "w"))
                                for k in range(t)])
            total = None
            for combo in itertools.product(*choices):
                sidx = list(ivars)
                w = None
                for a, (i, wk) in zip(axes, combo):
                    sidx[a] = i
                    if wk is not None:
                        w = _times(w, wk)
                term = src.load_nd(sidx)
                term = term if w is None else term * w
                total = term if total is None else total + term
            kb.emit(dst.store_nd(ivars, total))


class InterpolateBackward(Rule):
    kinds = ("InterpolateBackward",)

    def lower(self, op, kb, ins, outs, values):
        """A gather: each diff_src element sums the diff_dst elements whose
        weights touch it, per axis from the transposed weight matrix's
        compressed columns (nested loops over each axis' entries)."""
        diff_dst, diff_src = ins[1], outs[0]
        axes = spatial_axes(op, len(diff_src.shape))
        plans = []   # per axis: None (the identity) or (start, index, weight or None) tables
        most = 1
        for a in axes:
            w = weights(op, diff_src.shape[a], diff_dst.shape[a])
            if w.shape[0] == w.shape[1] and np.array_equal(w, np.eye(w.shape[0])):
                plans.append(None)
                continue
            start, index, weight = compressed_columns(w)
            most *= max(1, int(np.diff(start).max(initial=0)))
            plans.append((_table(kb, start, "int", "starts"), _table(kb, index, "int", "taps"),
                          None if np.all(weight == 1.0) else _table(kb, weight, "f64", "wts")))
        work = max(diff_src.lt.nelems * most, diff_dst.lt.nelems)
        with memory_order_nest(kb, diff_src.shape, diff_src.strides, worth_parallel(work)) as ivars:
            acc = kb.var(ir.const(0.0), "acc")
            didx = list(ivars)
            self._gather(kb, list(zip(axes, plans)), ivars, didx, None, acc, diff_dst)
            kb.emit(diff_src.store_nd(ivars, acc))

    def _gather(self, kb, plans, ivars, didx, w, acc, diff_dst):
        """Nested loops over each remaining axis' entries, accumulating into ``acc``."""
        if not plans:
            term = diff_dst.load_nd(didx)
            kb.assign(acc, acc + (term if w is None else term * w))
            return
        (a, plan), rest = plans[0], plans[1:]
        if plan is None:
            didx[a] = ivars[a]
            self._gather(kb, rest, ivars, didx, w, acc, diff_dst)
            return
        start, index, weight = plan
        s = _at(ivars, a)
        with kb.for_(ir.load(start, s + 1), "e", start=ir.load(start, s)) as e:
            didx = list(didx)
            didx[a] = kb.let(ir.load(index, e), "d")
            wk = None if weight is None else kb.let(_times(w, ir.load(weight, e)), "w")
            self._gather(kb, rest, ivars, didx, w if wk is None else wk, acc, diff_dst)
