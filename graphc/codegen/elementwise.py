"""The loop nest shared by every elementwise kernel (and fused eltwise chains).

Outputs share one shape; inputs broadcast to it (numpy rules).  Loops run in
the first output's memory order (so NXC tensors stream like dense ones), and
dims that are contiguous in every array are merged, so dense tensors run as one
flat loop.
"""
from __future__ import annotations

from .kernel import ArrayRef, KernelBuilder, worth_parallel
from .loops import linear, unravel


def aligned_strides(ref: ArrayRef, shape) -> list[int]:
    """ref's strides right-aligned to ``shape``, 0 where ref broadcasts."""
    lead = len(shape) - len(ref.shape)
    out = [0] * lead
    for d_out, d, s in zip(shape[lead:], ref.shape, ref.strides):
        out.append(0 if (d == 1 and d_out != 1) else (0 if d == 1 else s))
    return out


def collapse(shape, strides_list):
    """Merge adjacent dims that are contiguous in every array; drop size-1 dims."""
    dims = []
    sl = [[] for _ in strides_list]
    for k, d in enumerate(shape):
        if d == 1:
            continue
        if dims and all(st[-1] == s[k] * d for s, st in zip(strides_list, sl)):
            # the previous dim steps exactly over this one in every array: merge
            dims[-1] *= d
            for s, st in zip(strides_list, sl):
                st[-1] = s[k]
            continue
        dims.append(d)
        for s, st in zip(strides_list, sl):
            st.append(s[k])
    return dims, sl


def emit_elementwise(kb: KernelBuilder, outs: list[ArrayRef], ins: list[ArrayRef], compute) -> None:
    """Emit a loop over the outputs' shape; ``compute(kb, values)`` returns one
    expression per output from the loaded input values (bound to names)."""
    shape = outs[0].shape
    arrs = list(outs) + list(ins)
    all_strides = [aligned_strides(a, shape) for a in arrs]
    # memory order of the first output: largest stride outermost (stable for ties)
    order = sorted(range(len(shape)), key=lambda k: -all_strides[0][k] if shape[k] > 1 else 0)
    dims, strides = collapse([shape[k] for k in order], [[s[k] for k in order] for s in all_strides])
    total = 1
    for d in dims:
        total *= d
    if total == 0:
        return
    if not dims:
        dims, strides = [1], [[0] for _ in arrs]
    par = worth_parallel(total)
    inner = dims[-1]
    outer = dims[:-1]
    rows = 1
    for d in outer:
        rows *= d

    def body(offsets):
        vals = [kb.let(a.load(off), "x") for a, off in zip(ins, offsets[len(outs):])]
        exprs = compute(kb, vals)
        for o, off, e in zip(outs, offsets, exprs):
            kb.emit(o.store(off, e))

    if not outer:
        with kb.for_(inner, "i", par) as i:
            body([linear([i], s) for s in strides])
        return
    with kb.for_(rows, "r", par and rows > 1) as r:
        idx = unravel(kb, r, outer)
        bases = [kb.let(linear(idx, s[:-1]), "b") for s in strides]
        with kb.for_(inner, "j", par and rows == 1) as j:
            body([linear([j], s[-1:], b) for b, s in zip(bases, strides)])
