"""graphc's error hierarchy, after oneDNN Graph's status codes.

Every error raised while building, loading, finalizing, compiling or running a
graph is a :class:`GraphcError`.  Errors about one op name it (id, kind, name)
and say which port or attribute is at fault, what was expected and what was
found.  What an error quotes is capped (:func:`quote`): a message stays
readable, and bounded, whatever the size of the shapes or names it names.
"""
from __future__ import annotations

import reprlib

#: the most characters an error quotes of one of its parts (the message, the
#: op's name, where, expected, found, the JSON path)
MAX_QUOTE = 500
#: the most items of a list or tuple an error quotes
MAX_ITEMS = 16


#: how deep an error quotes containers in containers
MAX_DEPTH = 3


def _repr_of_data():
    r = reprlib.Repr()
    r.maxlevel = MAX_DEPTH
    r.maxtuple = r.maxlist = r.maxarray = r.maxdeque = MAX_ITEMS
    r.maxdict = r.maxset = r.maxfrozenset = MAX_ITEMS // 2
    r.maxstring = r.maxlong = r.maxother = MAX_QUOTE
    return r


_REPR = _repr_of_data()
_CONTAINERS = (list, tuple, dict, set, frozenset)


def short(value, limit: int = MAX_QUOTE) -> str:
    """``repr(value)`` in at most about ``limit`` characters, whatever ``value``
    is: containers to MAX_DEPTH levels and MAX_ITEMS items each (a dict nested
    50,000 deep is no RecursionError, a list of a million items costs no more
    than sixteen)."""
    return _cut(_REPR.repr(value), limit)


def quote(value, limit: int = MAX_QUOTE) -> str:
    """``str(value)`` in at most about ``limit`` characters: a list or tuple of
    more than MAX_ITEMS items shows its first ones and how many more there are,
    containers are quoted as :func:`short` does, and longer text is cut with how
    many characters were left out."""
    if isinstance(value, (list, tuple)) and len(value) > MAX_ITEMS:
        opener, closer = ("[", "]") if isinstance(value, list) else ("(", ")")
        head = ", ".join(_REPR.repr(x) for x in value[:MAX_ITEMS])
        text = f"{opener}{head}, ... ({len(value) - MAX_ITEMS} more){closer}"
    elif isinstance(value, _CONTAINERS):
        text = _REPR.repr(value)
    else:
        text = str(value)
    return _cut(text, limit)


def _cut(text: str, limit: int) -> str:
    return f"{text[:limit]}... ({len(text) - limit} more characters)" if len(text) > limit else text


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
            parts.append(f"at {quote(self.path)}")
        if self.op is not None:
            parts.append(describe_op(self.op))
        if self.where:
            parts.append(quote(self.where))
        head = ", ".join(parts)
        message = quote(self.message)
        text = f"{head}: {message}" if head else message
        if self.expected is not None:
            text += f"; expected {quote(self.expected)}"
        if self.found is not None:
            text += f", found {quote(self.found)}"
        return text


def describe_op(op) -> str:
    """'op 3 (ReLU "relu_1")' for an Op or anything with id, kind and name
    (each quoted within MAX_QUOTE characters)."""
    if isinstance(op, str):
        return quote(op)
    oid = quote(getattr(op, "id", "?"))
    kind = quote(getattr(op, "kind", "?"))
    name = getattr(op, "name", None)
    return f'op {oid} ({kind} "{quote(name)}")' if name else f"op {oid} ({kind})"


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
