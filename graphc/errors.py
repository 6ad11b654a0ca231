"""graphc's error hierarchy, after oneDNN Graph's status codes.

Every error raised while building, loading, finalizing, compiling or running a
graph is a :class:`GraphcError`.  Errors about one op name it (id, kind, name)
and say which port or attribute is at fault, what was expected and what was
found.
"""
from __future__ import annotations


class GraphcError(Exception):
    """Base class of every error graphc raises on purpose."""

    status = "error"

    def __init__(self, message: str, *, op=None, where: str | None = None,
                 expected=None, found=None, path: str | None = None):
        self.op = op
        self.where = where
        self.expected = expected
        self.found = found
        self.path = path
        self.message = message
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.path:
            parts.append(f"at {self.path}")
        if self.op is not None:
            parts.append(describe_op(self.op))
        if self.where:
            parts.append(self.where)
        head = ", ".join(parts)
        text = f"{head}: {self.message}" if head else self.message
        if self.expected is not None:
            text += f"; expected {self.expected}"
        if self.found is not None:
            text += f", found {self.found}"
        return text


def describe_op(op) -> str:
    """'op 3 (ReLU "relu_1")' for an Op or anything with id, kind and name."""
    if isinstance(op, str):
        return op
    oid = getattr(op, "id", "?")
    kind = getattr(op, "kind", "?")
    name = getattr(op, "name", None)
    return f'op {oid} ({kind} "{name}")' if name else f"op {oid} ({kind})"


class InvalidArguments(GraphcError):
    status = "invalid_arguments"


class InvalidGraph(GraphcError):
    status = "invalid_graph"


class InvalidGraphOp(GraphcError):
    status = "invalid_graph_op"


class InvalidShape(GraphcError):
    status = "invalid_shape"


class InvalidDataType(GraphcError):
    status = "invalid_data_type"


class Unimplemented(GraphcError):
    status = "unimplemented"


class InternalError(GraphcError):
    """A bug in graphc: one step broke what an earlier one relied on (code
    generation refused a fusion plan legality accepted), or, under
    ``GRAPHC_STRICT_FUSION=1`` (the test suite), a fused partition lowered one
    op at a time."""

    status = "internal_error"


class RuntimeFault(GraphcError):
    """Bad data found while running (an index out of range, a group mismatch)."""

    status = "runtime_error"
