"""The op schema machinery: ports, attributes, dtype tables and the registry.

Every op kind is one subclass of :class:`OpSchema`, declared in the module of
its family (``graphc/ops/<family>.py``).  The class states, in one place:

* ``inputs`` / ``outputs``: indexed ports (required, optional or variadic);
* ``attrs``: attribute specs (value type, required or default, allowed values);
* ``dtypes``: the supported dtype combinations, as the op's doc table states;
* ``check(op)``: cross-port rules beyond the above;
* ``infer(op)``: the shape-inference rule;
* ``reference(op, *inputs)``: the numpy reference semantics (the oracle).

Defining the class registers it (``__init_subclass__``); ``get_schema(kind)``
finds it, aliases included.  The families register when ``graphc.ops`` imports
them, which ``import graphc`` does (this module knows no family).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

import numpy as np

from ..errors import InvalidDataType, InvalidGraphOp, InvalidShape, Unimplemented, short
from ..types import DataType

_REGISTRY: dict[str, "OpSchema"] = {}
_ALIASES: dict[str, str] = {}

_MISSING = object()
REQUIRED = _MISSING


# --------------------------------------------------------------------------- ports
@dataclass(frozen=True)
class Port:
    name: str
    optional: bool = False
    variadic: bool = False   # one or more (min_count..max_count) tensors under one name
    min_count: int = 1
    max_count: int = 64
    doc: str = ""

    def describe(self) -> str:
        if self.variadic:
            return f"{self.name}* ({self.min_count}..{self.max_count})"
        return self.name + (" (optional)" if self.optional else "")


def In(name, optional=False, variadic=False, min_count=1, max_count=64, doc=""):
    return Port(name, optional, variadic, min_count, max_count, doc)


Out = In


# ---------------------------------------------------------------------- attributes
ATTR_TYPES = ("f32", "s64", "string", "bool", "s64[]", "f32[]", "bool[]")


@dataclass(frozen=True)
class Attr:
    """An attribute spec.  ``default=REQUIRED`` makes it required; ``default=None``
    makes it optional with no value when absent."""

    name: str
    type: str
    default: object = REQUIRED
    choices: tuple | None = None
    check: Callable[[object], bool] | None = None
    check_doc: str = ""
    doc: str = ""

    @property
    def required(self) -> bool:
        return self.default is REQUIRED

    def describe(self) -> str:
        s = f"{self.name}: {self.type}"
        s += ", required" if self.required else f", default {_fmt(self.default)}"
        if self.choices:
            s += ", one of " + ", ".join(map(str, self.choices))
        if self.check_doc:
            s += f", {self.check_doc}"
        return s

    def coerce(self, value, op_desc: str):
        """Validate ``value`` against this spec and return it in canonical form."""
        t = self.type
        raw = value
        try:
            if t.endswith("[]"):
                if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
                    raise TypeError
                base = t[:-2]
                value = tuple(_coerce_scalar(base, v) for v in value)
            else:
                value = _coerce_scalar(t, value)
        except (TypeError, ValueError, OverflowError):
            raise InvalidGraphOp("attribute has the wrong type", op=op_desc, where=f"attribute '{self.name}'",
                                 expected=t, found=_fmt(value)) from None
        if t in ("f32", "f32[]"):
            items = value if isinstance(value, tuple) else (value,)
            if not all(math.isfinite(v) for v in items):
                raise InvalidGraphOp("attribute value out of range", op=op_desc, where=f"attribute '{self.name}'",
                                     expected=f"a finite f32 value (magnitude at most {_F32_MAX:.9g})"
                                     + (f", {self.check_doc}" if self.check_doc else ""),
                                     found=_fmt(tuple(raw) if t == "f32[]" else raw))
        if self.choices is not None:
            items = value if isinstance(value, tuple) else (value,)
            for v in items:
                if v not in self.choices:
                    raise InvalidGraphOp("attribute value not supported", op=op_desc,
                                         where=f"attribute '{self.name}'",
                                         expected="one of " + ", ".join(map(str, self.choices)), found=_fmt(value))
        if self.check is not None and not self.check(value):
            raise InvalidGraphOp("attribute value out of range", op=op_desc, where=f"attribute '{self.name}'",
                                 expected=self.check_doc or "a valid value", found=_fmt(value))
        return value


_F32_MAX = float(np.finfo(np.float32).max)


def _coerce_scalar(t, v):
    if t == "f32":
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise TypeError
        # the f32 value oneDNN computes with (e.g. a dst clamped to f32(min) compares
        # equal to min), kept as a Python float
        with np.errstate(over="ignore"):
            return float(np.float32(v))
    if t == "s64":
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError
        v = int(v)
        if not -(2 ** 63) <= v < 2 ** 63:
            raise OverflowError
        return v
    if t == "bool":
        if isinstance(v, (bool, np.bool_)):
            return bool(v)
        if isinstance(v, (int, np.integer)) and v in (0, 1):
            return bool(v)
        if isinstance(v, str) and v.lower() in ("true", "false"):
            return v.lower() == "true"
        raise TypeError
    if t == "string":
        if not isinstance(v, str):
            raise TypeError
        return v
    raise TypeError


def _fmt(v) -> str:
    if isinstance(v, tuple):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    if isinstance(v, bool):
        return "true" if v else "false"
    return short(v)


# Handy attribute range checks
def positive(v):
    return v > 0


def non_negative(v):
    return v >= 0


def all_positive(v):
    return all(x > 0 for x in v)


def all_non_negative(v):
    return all(x >= 0 for x in v)


# ----------------------------------------------------------------------- dtypes
ALL_FLOAT = "f32,bf16,f16"


class DtypeTable:
    """Supported dtype combinations, written like the doc tables.

    ``columns`` are port-name groups ("src|diff_dst|diff_src"): every present
    port of a group has the same dtype, taken from the row's set for that column
    ("f32,bf16").  A port may appear in one column only.  Ports that no column
    names are unconstrained.
    """

    def __init__(self, columns: Sequence[str], rows: Sequence[Sequence[str]]):
        self.columns = [tuple(c.split("|")) for c in columns]
        self.rows = []
        for r in rows:
            if len(r) != len(self.columns):
                raise ValueError(f"dtype row {r} does not match columns {columns}")
            self.rows.append([frozenset(DataType(x.strip()) for x in cell.split(",")) for cell in r])

    def ports(self) -> set[str]:
        return {p for col in self.columns for p in col}

    def matches(self, dt_of: Callable[[str], list[DataType]]) -> bool:
        return any(self._row_ok(row, dt_of) for row in self.rows)

    def _row_ok(self, row, dt_of) -> bool:
        for col, allowed in zip(self.columns, row):
            seen = [d for p in col for d in dt_of(p)]
            if not seen:
                continue
            if any(d != seen[0] for d in seen) or seen[0] not in allowed:
                return False
        return True

    def describe(self) -> str:
        head = " | ".join("/".join(c) for c in self.columns)
        lines = [head]
        for row in self.rows:
            lines.append(" | ".join(",".join(sorted(d.value for d in cell)) for cell in row))
        return "\n".join(lines)


def same_dtype(ports: str, allowed: str = ALL_FLOAT) -> DtypeTable:
    """Every port in ``ports`` ('a|b|c') shares one dtype from ``allowed``."""
    return DtypeTable([ports], [(a,) for a in allowed.split(",")])


# ----------------------------------------------------------------------- schema
class OpSchema:
    """Base class of every op kind.  Subclasses define class attributes and
    override ``check``, ``infer`` and ``reference`` as needed."""

    kind: ClassVar[str] = ""
    aliases: ClassVar[tuple[str, ...]] = ()
    family: ClassVar[str] = ""
    doc: ClassVar[str] = ""
    inputs: ClassVar[tuple[Port, ...]] = ()
    outputs: ClassVar[tuple[Port, ...]] = ()
    attrs: ClassVar[tuple[Attr, ...]] = ()
    dtypes: ClassVar[DtypeTable | None] = None
    #: False for ops graphc validates and runs in the reference but whose kind is
    #: a marker with no data semantics (End) or arbitrary (Wildcard).
    executable: ClassVar[bool] = True

    #: input ports whose f32 values the graph's fpmath_mode lets the op round
    #: to a narrower type (graphc.numerics.FPMATH_DOWN)
    fpmath_inputs: tuple = ()
    #: input ports whose values (small integer tensors, such as ReduceX's axes)
    #: the kernel is specialised on: compiled at the first run per distinct values
    value_inputs: tuple = ()

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if "kind" in cls.__dict__ and cls.kind:
            inst = cls()
            if cls.kind in _REGISTRY or cls.kind in _ALIASES:
                raise RuntimeError(f"op kind {cls.kind} registered twice")
            _REGISTRY[cls.kind] = inst
            for a in cls.aliases:
                _ALIASES[a] = cls.kind

    def __reduce__(self):
        """A schema pickles (and copies) as its kind: the registry's one instance
        comes back, as ``get_schema`` gives it (a pickled or deep-copied graph's
        ops share their kinds' schemas)."""
        return get_schema, (self.kind,)

    # -- port binding -------------------------------------------------------------
    def attr_spec(self, name) -> Attr | None:
        for a in self.attrs:
            if a.name == name:
                return a
        return None

    def bind(self, ports: tuple[Port, ...], n: int, op, direction: str) -> list[str]:
        """Port name for each of ``n`` positional tensors; raises on bad arity."""
        names: list[str] = []
        required = sum(1 for p in ports if not p.optional and not p.variadic) + \
            sum(p.min_count for p in ports if p.variadic and not p.optional)
        variadic = any(p.variadic for p in ports)
        maximum = sum(p.max_count if p.variadic else 1 for p in ports)
        if n < required or (n > maximum):
            exp = f"{required}" if required == maximum else f"{required} to {maximum}"
            if variadic:
                exp = f"at least {required}" + (f" and at most {maximum}" if maximum < 10 ** 6 else "")
            raise InvalidGraphOp(f"wrong number of {direction}", op=op,
                                 expected=f"{exp} ({', '.join(p.describe() for p in ports)})", found=n)
        left = n
        for i, p in enumerate(ports):
            if p.variadic:
                rest = sum(0 if q.optional else 1 for q in ports[i + 1:])
                k = left - rest
                names.extend([p.name] * k)
                left -= k
            elif left > 0:
                names.append(p.name)
                left -= 1
        return names

    def input_names(self, op, n: int) -> list[str]:
        return self.bind(self.inputs, n, op, "inputs")

    def output_names(self, op, n: int) -> list[str]:
        return self.bind(self.outputs, n, op, "outputs")

    # -- rules ----------------------------------------------------------------------
    def check(self, op) -> None:
        """Cross-port rules; raise a GraphcError naming the op."""

    def infer(self, op) -> list:
        """Output shapes (tuples, -1 for unknown dims), one per output; None keeps
        the declared shape.  Raise InvalidShape when inputs disagree."""
        return [None] * len(op.outputs)

    def check_values(self, op, values: dict) -> list | None:
        """The values of ``value_inputs`` a kernel is about to be specialised on,
        ``values`` {port name: tuple of ints} (read from the inputs at run, passed
        by the compile step, never stored on the op): raise a RuntimeFault naming
        the op when they do not fit, and return the output shapes they give (as
        ``infer``; None keeps an output's shape), or None when they give none."""
        return None

    def reference(self, op, *inputs):
        raise Unimplemented("this op has no reference implementation", op=op)

    #: the outputs a gradient flows back through (empty: every output); a norm's
    #: statistics and running averages carry none
    grad_outputs: tuple = ()
    #: the inputs the outputs depend on differentiably (empty: every input but
    #: the ``value_inputs``); Select's cond and a running mean carry none
    grad_inputs: tuple = ()

    def vjp(self, op, em):
        """The vector-Jacobian rule (graphc.grad): emit, through ``em`` (a
        graphc.grad.emitter.Emitter), the ops computing the gradients of
        ``op``'s inputs from those reaching its outputs; return one gradient
        (a LogicalTensor) per input, None where none is given.  This default is
        an op with no derivative."""
        raise Unimplemented("this op has no derivative", op=op)

    @classmethod
    def has_vjp(cls) -> bool:
        return cls.vjp is not OpSchema.vjp

    def input_range(self, op, index: int):
        """(lo, hi) or (lo, hi, "int") for generated data of input ``index``, or None
        for the default.  Ports named like variances and scales default positive."""
        name = op.input_names[index] if index < len(op.input_names) else ""
        if name in ("variance", "var", "scales", "scale") and op.inputs[index].dtype.is_float:
            return (0.25, 4.0)
        return None

    def preferred_strides(self, op):
        """The strides this op writes output 0 fastest in, for an output whose
        layout is ``any`` (graphc chooses it: graphc/compiler/any_layout.py); None for the
        dense layout."""
        return None

    def flops(self, op) -> int:
        """Floating-point operations of one run of ``op`` (shapes known), 2 per
        multiply-add, for the cost model of ``graphc bench --mode=P``
        (graphc.bench.cost).  0 unless the op is compute bound: data movement
        and pointwise or normalising ops are measured by the bytes they move."""
        return 0

    def check_dtypes(self, op) -> None:
        if self.dtypes is None:
            return
        if not self.dtypes.matches(lambda p: [t.dtype for t in op.ports(p)]):
            found = ", ".join(f"{n}={t.dtype}" for n, t in op.named_ports() if n in self.dtypes.ports())
            raise InvalidDataType("unsupported data type combination", op=op,
                                  expected="a row of:\n" + self.dtypes.describe() + "\n", found=found)

    # -- documentation ----------------------------------------------------------------
    def describe(self) -> str:
        lines = [f"{self.kind}" + (f" (aliases: {', '.join(self.aliases)})" if self.aliases else "")]
        if self.doc:
            lines.append(f"  {self.doc}")
        lines.append("  inputs:")
        lines += [f"    {i}: {p.describe()}" for i, p in enumerate(self.inputs)] or ["    (none)"]
        lines.append("  outputs:")
        lines += [f"    {i}: {p.describe()}" for i, p in enumerate(self.outputs)] or ["    (none)"]
        lines.append("  attributes:")
        lines += [f"    {a.describe()}" for a in self.attrs] or ["    (none)"]
        if self.dtypes is not None:
            lines.append("  data types:")
            lines += ["    " + ln for ln in self.dtypes.describe().splitlines()]
        return "\n".join(lines)


def get_schema(kind: str, op=None) -> OpSchema:
    if not isinstance(kind, str):
        raise InvalidGraphOp("op kind must be a string", op=op, found=short(kind))
    k = _ALIASES.get(kind, kind)
    if k not in _REGISTRY:
        import difflib
        close = difflib.get_close_matches(kind, list(_REGISTRY), n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise InvalidGraphOp(f"unknown op kind{hint}", op=op, found=short(kind),
                             expected="a kind listed by `graphc ops`")
    return _REGISTRY[k]


def all_kinds() -> list[str]:
    return sorted(_REGISTRY)


def aliases() -> dict[str, str]:
    return dict(_ALIASES)


# ------------------------------------------------------------------ shape helpers
def bad_shape(op, msg, where=None, expected=None, found=None):
    return InvalidShape(msg, op=op, where=where, expected=expected, found=found)


def dims_equal(a: int, b: int) -> bool:
    return a == b or a == -1 or b == -1


def merge_dim(a: int, b: int) -> int:
    return b if a == -1 else a


def broadcast_shapes(op, a, b, where="inputs") -> tuple:
    """numpy broadcasting of two shapes with -1 for unknown dims."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if x == y:
            out.append(x)
        elif x == 1:
            out.append(y)
        elif y == 1:
            out.append(x)
        elif x == -1 or y == -1:
            out.append(max(x, y) if min(x, y) == -1 and max(x, y) != 1 else -1)
        else:
            raise bad_shape(op, "shapes are not broadcast-compatible", where=where,
                            expected="numpy broadcasting", found=f"{list(a)} and {list(b)}")
    return tuple(out)


def norm_axis(op, axis: int, rank: int, attr="axis") -> int:
    """``axis`` in [-rank, rank - 1], made non-negative; a rank-0 tensor has no axis."""
    if not -rank <= axis < rank:
        raise InvalidGraphOp("axis out of range", op=op, where=f"attribute '{attr}'",
                             expected=f"[{-rank}, {rank - 1}]" if rank else "no axis (the tensor is a scalar)",
                             found=axis)
    return axis + rank if axis < 0 else axis


def channel_axis(data_format: str, rank: int) -> int:
    """Index of the channel dim for NCX / NXC (or NCHW-style aliases)."""
    return rank - 1 if data_format in ("NXC", "NHWC", "NDHWC", "NWC") else 1
