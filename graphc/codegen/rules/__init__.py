"""Lowering rules: how each op kind becomes kernel code.

An op's semantics (ports, attributes, dtypes, shape rule, numpy reference) live
in its family module under ``graphc/ops``; how it is lowered lives here, one
module per family (``graphc/codegen/rules/<family>.py``), as a :class:`Rule`
subclass naming the kinds it lowers in ``kinds``.  Defining the class registers
it.  Code generation asks this registry, never the op schema:

* :func:`can_lower` -- whether this build has a kernel for the op;
* :func:`lower` -- emit the op's code into a KernelBuilder;
* :func:`source` / :func:`source_at` -- the IR expression of an elementwise
  (pointwise or indexed) op, substituted by fused kernels into its consumers;
* :func:`kernel_fault` -- the error a kernel's failure status means for the op;
  :func:`faults_before_writing` -- whether it fails before writing an output.

Values an op's kernel is specialised on (the contents of small integer inputs,
``OpSchema.value_inputs``: ReduceX's axes, Interpolate's sizes, a
convolution's output shape) reach a rule as the ``values`` argument of
``lower``: ``{port name: tuple}``, empty when the kernel is generic.
"""
from __future__ import annotations

import importlib
import pkgutil
import threading
from typing import ClassVar

from ...errors import Unimplemented
from .. import ir
from ..elementwise import emit_elementwise

_RULES: dict[str, "Rule"] = {}


class Rule:
    """How the kinds in ``kinds`` lower.  Subclasses override :meth:`lower`."""

    kinds: ClassVar[tuple[str, ...]] = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for kind in cls.__dict__.get("kinds", ()):
            if kind in _RULES:
                raise RuntimeError(f"lowering rule for {kind} registered twice")
            _RULES[kind] = cls()

    def supports(self, op) -> bool:
        """Whether this build lowers ``op`` (its attributes and dtypes as they are)."""
        return True

    def lower(self, op, kb, ins, outs, values) -> None:
        """Emit ``op``'s code into ``kb`` (a KernelBuilder) reading the ArrayRefs
        ``ins`` and writing ``outs``; ``values`` as in the module docstring."""
        raise Unimplemented("this build cannot lower this op", op=op)

    def may_fault(self, op) -> bool:
        """Whether ``op``'s kernel can stop on bad data with a status (after
        writing part of an output): then :meth:`kernel_fault` explains it."""
        return type(self).kernel_fault is not Rule.kernel_fault

    def kernel_fault(self, op, status, inputs_by_id):
        """The GraphcError a failing kernel ``status`` means for ``op``."""
        return None

    def faults_before_writing(self, op) -> bool:
        """Whether ``op``'s kernel, when it fails, stops before writing any output
        (it checks its inputs first): a kernel of this op alone may then write
        the caller's outputs directly, as one that cannot fail does."""
        return False


class ElementwiseRule(Rule):
    """An op whose output element is an expression of the matching (broadcast)
    input elements (``expr``), lowered through the shared elementwise loop nest;
    fused kernels substitute its expression for its output."""

    def expr(self, op, *values: ir.Expr) -> ir.Expr:
        raise NotImplementedError

    def source(self, op, *values: ir.Expr) -> ir.Expr:
        """``expr`` as kernels compute it: over f32 or narrower floats (the loads
        widen to float32) in float32; integers, booleans, f64 and c64 as they are."""
        return self.expr(op, *values)

    def source_at(self, op, kb, ivars, *values: ir.Expr) -> ir.Expr:
        """For an indexed op (``OpSchema.indexed``): the output value at
        multi-index ``ivars`` (one index expression or None per output dim) from
        the input values there; ``kb`` for constants."""
        raise NotImplementedError

    def lower(self, op, kb, ins, outs, values):
        emit_elementwise(kb, outs, ins, lambda kb_, vals: [self.source(op, *vals)])


class _NoRule(Rule):
    """The rule of a kind this build has no kernel for (End, Wildcard)."""

    def supports(self, op):
        return False


_NO_RULE = _NoRule()
_loaded = False
_lock = threading.Lock()


def _load_all() -> None:
    global _loaded
    if _loaded:
        return
    with _lock:
        if not _loaded:
            for family in pkgutil.iter_modules(__path__):   # every module of this package: a family's rules
                importlib.import_module(f"{__name__}.{family.name}")
            _loaded = True


def rule(op) -> Rule:
    """The lowering rule of ``op``'s kind."""
    _load_all()
    return _RULES.get(op.schema.kind, _NO_RULE)


def can_lower(op) -> bool:
    return rule(op).supports(op)


def lower(op, kb, ins, outs, values=None) -> None:
    rule(op).lower(op, kb, ins, outs, {} if values is None else values)


def source(op, *vals) -> ir.Expr:
    return rule(op).source(op, *vals)


def source_at(op, kb, ivars, *vals) -> ir.Expr:
    return rule(op).source_at(op, kb, ivars, *vals)


def may_fault(op) -> bool:
    return rule(op).may_fault(op)


def kernel_fault(op, status, inputs_by_id):
    return rule(op).kernel_fault(op, status, inputs_by_id)


def faults_before_writing(op) -> bool:
    return rule(op).faults_before_writing(op)


def lowered_kinds() -> list[str]:
    """The kinds with a lowering rule of their own."""
    _load_all()
    return sorted(_RULES)
