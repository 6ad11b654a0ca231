"""Kernel arguments seen with adjacent dims merged: the softmax and norm
families' reductions run over such views (longer lanes, fewer loops)."""
from __future__ import annotations

import math
from dataclasses import dataclass

from .kernel import ArrayRef


@dataclass
class MergedView(ArrayRef):
    """A plain kernel argument seen with some adjacent dims merged (see merged_views)."""

    view_shape: tuple = ()
    view_strides: tuple = ()

    @property
    def shape(self):
        return self.view_shape

    @property
    def strides(self):
        return self.view_strides


def merged_views(refs, apart):
    """``refs`` (kernel arguments of one shape, but size 1 along the dims of
    ``apart`` in some) as views whose adjacent dims, neither in ``apart`` and
    contiguous in every ref, are merged into one (so that e.g. SoftMax over the
    channels of NCHW runs lanes of H*W instead of W); returns (views, the index
    in the views of each dim).  Unchanged unless every ref is a plain argument:
    a fused ref (prologue, epilogue) computes other tensors at its indices,
    which may broadcast."""
    refs = list(refs)
    same = (refs, list(range(len(refs[0].shape)) if refs else []))
    if not refs or any(type(r) is not ArrayRef for r in refs):
        return same
    shape = refs[0].shape
    if any(len(r.shape) != len(shape) or any(a != b for k, (a, b) in enumerate(zip(r.shape, shape)) if k not in apart)
           for r in refs):
        return same
    groups = []   # runs of dims merged, in order
    for k in range(len(shape)):
        prev = groups[-1] if groups else None
        if prev is not None and k not in apart and prev[-1] not in apart and all(
                r.strides[prev[-1]] == r.shape[k] * r.strides[k] for r in refs):
            prev.append(k)
        else:
            groups.append([k])
    if len(groups) == len(shape):
        return same
    views = [MergedView(r.name, r.lt, tuple(math.prod(r.shape[k] for k in g) for g in groups),
                        tuple(r.strides[g[-1]] for g in groups)) for r in refs]
    return views, [i for i, g in enumerate(groups) for _ in g]
