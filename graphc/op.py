"""An op instance: kind, indexed logical tensors and attributes, checked
against the kind's schema."""
from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .errors import GraphcError, InvalidArguments, InvalidGraphOp, InvalidShape, short
from .ops.schema import OpSchema, get_schema
from .types import LogicalTensor


class Op:
    """``Op(id, kind, inputs, outputs, attrs=None, name=None)``.

    ``inputs`` / ``outputs`` are lists of :class:`LogicalTensor` in the order
    of the kind's ports.  ``validate()`` (run by ``Graph.add_op``) checks the op
    against its schema: arity, attributes, dtypes, cross-port rules and shapes.
    """

    def __init__(self, id: int, kind: str, inputs: Sequence[LogicalTensor] = (), outputs: Sequence[LogicalTensor] = (),
                 attrs: Mapping[str, Any] | None = None, name: str | None = None):
        if isinstance(id, bool) or not isinstance(id, (int, np.integer)) or id < 0:
            raise InvalidArguments("op id must be a non-negative integer", found=short(id))
        self.id = int(id)
        self.kind = kind
        if not (name is None or isinstance(name, (str, int, float, np.integer, np.floating))):
            raise InvalidArguments("op name must be a string", found=f"{type(name).__name__} {short(name, 60)}")
        self.name = name if name is None or isinstance(name, str) else str(name)
        for what, seq in (("inputs", inputs), ("outputs", outputs)):
            if isinstance(seq, (str, bytes, dict)) or not hasattr(seq, "__iter__"):
                raise InvalidArguments(f"{what} must be a list of LogicalTensor", op=self, found=type(seq).__name__)
        self.inputs: list[LogicalTensor] = list(inputs)
        self.outputs: list[LogicalTensor] = list(outputs)
        for what, seq in (("input", self.inputs), ("output", self.outputs)):
            for i, t in enumerate(seq):
                if not isinstance(t, LogicalTensor):
                    raise InvalidArguments(f"{what} {i} is not a LogicalTensor", op=self, found=type(t).__name__)
        if attrs is None:
            attrs = {}
        if not isinstance(attrs, dict):
            raise InvalidArguments("attrs must be a dict", op=self, found=type(attrs).__name__)
        self.raw_attrs = dict(attrs)
        self.attrs: dict = {}
        self.schema: OpSchema | None = None
        self.input_names: list[str] = []
        self.output_names: list[str] = []
        self.fpmath_mode = "strict"   # the graph's, set when the graph is finalized

    # ----------------------------------------------------------------- validation
    def validate(self) -> "Op":
        """Check against the schema; fills ``attrs`` with defaults and resolves
        output shapes that the schema can infer."""
        if not isinstance(self.kind, str):
            raise InvalidGraphOp("op kind must be a string", op=self, found=short(self.kind))
        self.schema = schema = get_schema(self.kind, op=self)
        self.kind = schema.kind  # aliases become the canonical kind
        self.input_names = schema.input_names(self, len(self.inputs))
        self.output_names = schema.output_names(self, len(self.outputs))
        self.attrs = self._coerce_attrs(schema)
        # output binding may depend on attributes (e.g. AddBackward)
        self.output_names = schema.output_names(self, len(self.outputs))
        schema.check_dtypes(self)
        schema.check(self)
        self.outputs = self._resolve_outputs(self.outputs)
        return self

    def _coerce_attrs(self, schema):
        out = {}
        for key, value in self.raw_attrs.items():
            spec = schema.attr_spec(key)
            if spec is None:
                raise InvalidGraphOp("unknown attribute", op=self, where=f"attribute '{key}'",
                                     expected="one of " + (", ".join(a.name for a in schema.attrs) or "(none)"))
            out[key] = spec.coerce(value, self)
        for spec in schema.attrs:
            if spec.name not in out:
                if spec.required:
                    raise InvalidGraphOp("missing required attribute", op=self, where=f"attribute '{spec.name}'",
                                         expected=spec.type)
                if spec.default is not None:
                    out[spec.name] = spec.default
        return out

    def _resolve_outputs(self, outputs, shapes=None):
        """``outputs`` with the shapes the schema infers (or ``shapes``) merged in."""
        if shapes is None:
            shapes = self.schema.infer(self)
        if shapes is None:
            shapes = [None] * len(outputs)
        resolved = []
        for i, t in enumerate(outputs):
            s = shapes[i] if i < len(shapes) else None
            if s is None:
                resolved.append(t)
                continue
            s = tuple(int(d) for d in s)
            if len(t.shape) != len(s) and t.shape != ():
                if not (len(t.shape) == 0 and len(s) > 0):
                    raise InvalidShape("output rank differs from the inferred one", op=self,
                                       where=f"output {i} ({self.output_names[i]}, tensor {t.id})",
                                       expected=list(s), found=list(t.shape))
            if len(t.shape) == len(s):
                for a, b in zip(t.shape, s):
                    if a != -1 and b != -1 and a != b:
                        raise InvalidShape("output shape differs from the inferred one", op=self,
                                           where=f"output {i} ({self.output_names[i]}, tensor {t.id})",
                                           expected=list(s), found=list(t.shape))
                merged = tuple(b if a == -1 else a for a, b in zip(t.shape, s))
            else:
                merged = s
            if merged != t.shape or t.layout_type.value == "any":
                t = t.with_shape(merged)
            resolved.append(t)
        return resolved

    def rebind_inputs(self, inputs: list[LogicalTensor], values: dict | None = None) -> None:
        """Replace input tensors with resolved versions (same ids) and re-infer.
        ``values`` ({port name: tuple}): the values of value inputs a kernel is
        specialised on (``OpSchema.value_inputs``), which the schema checks
        (``OpSchema.check_values``) and whose output shapes it gives."""
        self.inputs = list(inputs)
        self.schema.check(self)
        self.outputs = self._resolve_outputs(self.outputs)
        if values:
            shapes = self.schema.check_values(self, dict(values))
            if shapes is not None:
                self.outputs = self._resolve_outputs(self.outputs, shapes)

    # -------------------------------------------------------------------- access
    def input(self, name: str) -> LogicalTensor | None:
        for n, t in zip(self.input_names, self.inputs):
            if n == name:
                return t
        return None

    def output(self, name: str) -> LogicalTensor | None:
        for n, t in zip(self.output_names, self.outputs):
            if n == name:
                return t
        return None

    def input_index(self, name: str) -> int | None:
        return self.input_names.index(name) if name in self.input_names else None

    def output_index(self, name: str) -> int | None:
        return self.output_names.index(name) if name in self.output_names else None

    def ports(self, name: str) -> list[LogicalTensor]:
        return [t for n, t in self.named_ports() if n == name]

    def named_ports(self) -> Iterator[tuple[str, LogicalTensor]]:
        yield from zip(self.input_names, self.inputs)
        yield from zip(self.output_names, self.outputs)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def __repr__(self) -> str:
        ins = ", ".join(str(t.id) for t in self.inputs)
        outs = ", ".join(str(t.id) for t in self.outputs)
        nm = f' "{self.name}"' if self.name else ""
        return f"Op({self.id}, {self.kind}{nm}, in=[{ins}], out=[{outs}])"


__all__ = ["Op", "GraphcError"]
