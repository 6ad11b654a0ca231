"""The torch backend against eager torch: one function or model compiled with
graphc.torch and run, the same run in eager, outputs (and gradients) compared
with graphc.tolerances, and what the lowering reports (coverage, fallback)."""
from __future__ import annotations

from collections import Counter

from graphc.interop import as_array
from graphc.tolerances import MODEL, ORACLE

from .compare import assert_close


def _torch():
    import torch
    return torch


def _graphc_dtype(t):
    from graphc.torch.build import DTYPES
    return DTYPES[t.dtype]


def _leaves(out):
    """The tensors of a model's output (a tensor, a tuple, a transformers output)."""
    torch = _torch()
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    return [t for o in out for t in _leaves(o)] if isinstance(out, (tuple, list)) else []


def assert_tensors_close(got, want, table, what=""):
    torch = _torch()
    for i, (g, w) in enumerate(zip(_leaves(got), _leaves(want), strict=True)):
        g, w = g.detach(), w.detach()
        if w.dtype == torch.bfloat16:
            assert g.dtype == w.dtype
            g, w = g.float(), w.float()
            dt = "bf16"
        else:
            dt = _graphc_dtype(w)
        assert_close(as_array(g), as_array(w), dt, table, f"{what} output {i}")


class Lowered:
    """What compiling ran: the reports of the graphs lowered (forward, backward)."""

    def __init__(self, reports):
        self.reports = reports
        self.fallback = Counter()
        for r in reports:
            self.fallback.update(r.fallback)
        total = sum(r.aten_nodes for r in reports)
        self.coverage = sum(r.in_graphc for r in reports) / total if total else 0.0
        self.regions = sum(r.regions for r in reports)
        self.partitions = sum(r.partitions for r in reports)
        self.graphc_ops = Counter()   # graphc op kind -> count
        for r in reports:
            self.graphc_ops.update(r.graphc_ops)


def backward(out):
    """The backward of a loss of ``out``'s tensors weighted by fixed random numbers
    (a plain sum would give gradients of pure rounding noise after a LayerNorm,
    whose outputs sum to a constant)."""
    torch = _torch()
    g = torch.Generator().manual_seed(1234)
    loss = sum((t.float() * torch.randn(t.shape, generator=g)).sum() for t in _leaves(out) if t.requires_grad)
    loss.backward()


def compile_and_run(fn, *inputs, train=False):
    """(outputs, gradients of the inputs and parameters needing them, Lowered) of
    ``fn`` compiled with graphc.torch; with ``train`` a backward (``backward``) runs too."""
    torch = _torch()
    from graphc.torch.backend import REPORTS, graphc
    torch._dynamo.reset()
    first = len(REPORTS)
    compiled = torch.compile(fn, backend=graphc, fullgraph=False)
    if train:
        out = compiled(*inputs)
        backward(out)
    else:
        with torch.no_grad():
            out = compiled(*inputs)
    return out, Lowered(REPORTS[first:])


def eager(fn, *inputs, train=False):
    torch = _torch()
    if train:
        out = fn(*inputs)
        backward(out)
        return out
    with torch.no_grad():
        return fn(*inputs)


def check_against_eager(fn, *inputs, table=ORACLE, train=False, params=()):
    """``fn`` compiled vs eager on ``inputs``: outputs within ``table`` (and, with
    ``train``, the gradients of ``params`` and of inputs needing them).  Returns Lowered."""
    torch = _torch()
    grads_of = [p for p in params] + [x for x in inputs if isinstance(x, torch.Tensor) and x.requires_grad]
    want = eager(fn, *inputs, train=train)
    want_grads = [None if p.grad is None else p.grad.clone() for p in grads_of] if train else []
    for p in grads_of:
        p.grad = None
    got, lowered = compile_and_run(fn, *inputs, train=train)
    assert_tensors_close(got, want, table)
    for i, (p, w) in enumerate(zip(grads_of, want_grads)):
        if w is None:   # (a parameter the output does not depend on)
            assert p.grad is None, f"gradient {i} computed where eager has none"
            continue
        assert p.grad is not None, f"gradient {i} not computed"
        assert_tensors_close(p.grad, w, table, f"gradient {i}")
    return lowered


__all__ = ["MODEL", "ORACLE", "Lowered", "assert_tensors_close", "check_against_eager", "compile_and_run",
           "eager"]
