"""graphc's kernel IR: typed scalar expressions and loop-level statements.

Lowerings build kernels from these nodes; :mod:`graphc.codegen.printer` turns
them into the readable Numba source the kernel cache keys.

* Expressions are immutable trees compared by structure (so two loads of the
  same element, or two copies of one fused producer, are *equal*: the printer
  computes such a common subexpression once).  Each carries its compute type:
  ``f32``, ``f64``, ``int`` (int64), ``u64``, ``bool`` or ``c64``; buffers are
  ``arr``.  Python numbers mixed into an expression take the type of the other
  operand, so float32 math never widens silently to float64 through a literal
  (numba types a bare literal float64, and ``f32 op f64`` is f64).
* Statements: let (a name bound once), assign (a mutable scalar), store,
  for / parallel for, while, if, return.
* Nothing in an expression or a statement is text from a graph: names are made
  by :class:`Names`, functions come from the fixed table :data:`FUNCS`, and
  constants are numbers.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

FLOATS = ("f32", "f64", "c64")
#: the numba scalar constructor of each compute type
TYPE_CTOR = {"f32": "np.float32", "f64": "np.float64", "int": "np.int64", "u64": "np.uint64", "bool": "np.bool_",
             "c64": "np.complex64", "u32": "np.uint32", "u16": "np.uint16", "u8": "np.uint8", "i8": "np.int8",
             "i32": "np.int32", "c128": "np.complex128"}
#: the numpy scalar type of each compute type (the one TYPE_CTOR names): the dtype of
#: a workspace of that element type
NP_TYPE = {t: getattr(np, ctor.removeprefix("np.")) for t, ctor in TYPE_CTOR.items()}
#: compute types an array element loads as, by numpy dtype
ELEM_TYPE = {np.dtype(np.float32): "f32", np.dtype(np.float64): "f64", np.dtype(np.complex64): "c64",
             np.dtype(np.bool_): "bool"}


def elem_type(np_dtype) -> str:
    dt = np.dtype(np_dtype)
    return ELEM_TYPE.get(dt, "int")


class Expr:
    """A typed expression node: ``op`` names the node kind, ``args`` its operands
    (expressions, or plain Python values for constants, names and operator
    symbols), ``dt`` its compute type."""

    __slots__ = ("op", "args", "dt", "_hash", "_reads")
    __array_ufunc__ = None   # numpy scalars on the left defer to Expr's operators

    def __init__(self, op: str, args: tuple, dt: str):
        self.op, self.args, self.dt = op, args, dt
        self._hash = hash((op, dt, tuple(_key(a) for a in args)))
        self._reads = None

    # -- identity: structural ------------------------------------------------------
    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if self is other:
            return True
        if not isinstance(other, Expr) or self._hash != other._hash:
            return False
        return self.op == other.op and self.dt == other.dt and len(self.args) == len(other.args) and all(
            _key(a) == _key(b) if not isinstance(a, Expr) else a == b for a, b in zip(self.args, other.args))

    def __ne__(self, other):
        return not self.__eq__(other)

    @property
    def children(self) -> tuple:
        return tuple(a for a in self.args if isinstance(a, Expr)) + tuple(
            x for a in self.args if isinstance(a, tuple) for x in a if isinstance(x, Expr))

    @property
    def reads(self) -> frozenset:
        """Names (variables and buffers) this expression reads."""
        if self._reads is None:
            r = set()
            if self.op == "var":
                r.add(self.args[0])
            for c in self.children:
                r |= c.reads
            self._reads = frozenset(r)
        return self._reads

    @property
    def is_leaf(self) -> bool:
        return self.op in ("var", "const", "type")

    # -- arithmetic ------------------------------------------------------------------
    def __add__(self, o):
        return binop("+", self, o)

    def __radd__(self, o):
        return binop("+", o, self)

    def __sub__(self, o):
        return binop("-", self, o)

    def __rsub__(self, o):
        return binop("-", o, self)

    def __mul__(self, o):
        return binop("*", self, o)

    def __rmul__(self, o):
        return binop("*", o, self)

    def __truediv__(self, o):
        return binop("/", self, o)

    def __rtruediv__(self, o):
        return binop("/", o, self)

    def __floordiv__(self, o):
        return binop("//", self, o)

    def __rfloordiv__(self, o):
        return binop("//", o, self)

    def __mod__(self, o):
        return binop("%", self, o)

    def __pow__(self, o):
        return binop("**", self, o)

    def __and__(self, o):
        return binop("&", self, o)

    def __rand__(self, o):
        return binop("&", o, self)

    def __or__(self, o):
        return binop("|", self, o)

    def __ror__(self, o):
        return binop("|", o, self)

    def __xor__(self, o):
        return binop("^", self, o)

    def __lshift__(self, o):
        return binop("<<", self, o)

    def __rshift__(self, o):
        return binop(">>", self, o)

    def __neg__(self):
        if self.op == "const":
            return const(-self.args[0], self.dt)
        return Expr("neg", (self,), self.dt)

    def __invert__(self):
        return Expr("not", (self,), "bool") if self.dt == "bool" else Expr("inv", (self,), self.dt)

    def __lt__(self, o):
        return compare("<", self, o)

    def __le__(self, o):
        return compare("<=", self, o)

    def __gt__(self, o):
        return compare(">", self, o)

    def __ge__(self, o):
        return compare(">=", self, o)

    def eq(self, o):
        return compare("==", self, o)

    def ne(self, o):
        return compare("!=", self, o)

    def __getitem__(self, idx):
        """An element of an array-typed expression (a buffer)."""
        return load(self, idx)

    def __bool__(self):
        if self.dt == "bool":
            raise TypeError("an IR condition has no truth value here: use ir.select or an If statement")
        return True

    def __repr__(self):
        """The node's structure (graphc.codegen.printer.expr_source gives its source)."""
        return f"Expr({self.op}, {self.dt}, {self.args!r})"


def _key(a):
    """A hashable, NaN-safe key of a non-expression argument."""
    if isinstance(a, float):
        return ("float", repr(a))
    if isinstance(a, tuple):
        return tuple(x if isinstance(x, Expr) else _key(x) for x in a)
    return a


# -- constructors --------------------------------------------------------------------------
def const(v, dt: str | None = None) -> Expr:
    if isinstance(v, Expr):
        return v
    if isinstance(v, (bool, np.bool_)):
        return Expr("const", (bool(v),), "bool")
    if isinstance(v, (int, np.integer)) and dt in (None, "int", "u64"):
        return Expr("const", (int(v),), dt or "int")
    if dt is None:
        dt = "f64"
    if dt == "int":
        return Expr("const", (int(v),), "int")
    return Expr("const", (float(v),), dt)


def var(name: str, dt: str = "int") -> Expr:
    return Expr("var", (name,), dt)


def typename(dt: str) -> Expr:
    """A numba scalar type as an argument (``np.float32`` in ``np.empty(n, np.float32)``)."""
    return Expr("type", (TYPE_CTOR[dt],), "type")


def _operands(a, b):
    """Both operands as expressions, a Python number taking the other's type."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        raise TypeError("an IR operation needs an expression operand")
    if not isinstance(a, Expr):
        a = _literal(a, b.dt)
    if not isinstance(b, Expr):
        b = _literal(b, a.dt)
    return a, b


def _literal(v, other_dt: str) -> Expr:
    if isinstance(v, (bool, np.bool_)):
        return const(bool(v))
    if other_dt in FLOATS:
        return const(float(v), other_dt)
    if isinstance(v, (int, np.integer)):
        return const(int(v), "int" if other_dt != "u64" else "u64")
    return const(float(v), "f64")


def promote(a: str, b: str) -> str:
    """numba's result type of arithmetic on compute types ``a`` and ``b``."""
    if a == b:
        return "int" if a == "bool" else a
    if "c128" in (a, b):
        return "c128"   # (complex128 scratch: sums of complex64 values)
    if "c64" in (a, b):
        return "c64"
    if "f64" in (a, b):
        return "f64"
    if "f32" in (a, b):
        # float32 with an int64 (or uint64) is float64 in numba
        return "f32" if {a, b} <= {"f32", "bool"} else "f64"
    if "u64" in (a, b):
        return "f64" if {a, b} & {"int"} else "u64"   # uint64 with int64: float64
    return "int"


def binop(sym: str, a, b) -> Expr:
    if sym == "**" and not isinstance(b, Expr) and isinstance(b, (int, np.integer)):
        a = const(a) if not isinstance(a, Expr) else a
        return Expr("bin", ("**", a, const(int(b))), a.dt if a.dt in FLOATS else "int")
    a, b = _operands(a, b)
    # integer identities (index arithmetic): 0 + x, x + 0, x - 0, 1 * x, x * 1
    if a.dt == b.dt == "int":
        if sym in ("+", "-") and b.op == "const" and b.args[0] == 0:
            return a
        if sym == "+" and a.op == "const" and a.args[0] == 0:
            return b
        if sym == "*" and b.op == "const" and b.args[0] == 1:
            return a
        if sym == "*" and a.op == "const" and a.args[0] == 1:
            return b
    if sym in ("&", "|", "^") and a.dt == b.dt == "bool":
        return Expr("bin", (sym, a, b), "bool")
    dt = promote(a.dt, b.dt)
    if sym == "/" and dt not in FLOATS:
        dt = "f64"
    return Expr("bin", (sym, a, b), dt)


def compare(sym: str, a, b) -> Expr:
    a, b = _operands(a, b)
    return Expr("cmp", (sym, a, b), "bool")


def select(cond, a, b) -> Expr:
    """``a if cond else b`` (only the chosen side is evaluated)."""
    if not isinstance(a, Expr) and not isinstance(b, Expr):
        a = const(a)
    a, b = _operands(a, b)
    dt = a.dt if a.dt == b.dt else promote(a.dt, b.dt)
    return Expr("select", (cond, a, b), dt)


def cast(x, dt: str) -> Expr:
    x = const(x) if not isinstance(x, Expr) else x
    if x.dt == dt and x.op != "const":
        return x
    if x.op == "const" and dt in FLOATS + ("int",):
        return const(x.args[0], dt)
    return Expr("cast", (dt, x), dt if dt in ("f32", "f64", "int", "u64", "bool", "c64", "c128") else "int")


def f32(x) -> Expr:
    return cast(x, "f32")


def f64(x) -> Expr:
    return cast(x, "f64")


def i64(x) -> Expr:
    return cast(x, "int")


def u64(x) -> Expr:
    return cast(x, "u64")


# -- calls ---------------------------------------------------------------------------------
def _same(args):
    return args[0].dt if args[0].dt in FLOATS else "f64"


def _promote_all(args):
    dt = args[0].dt
    for a in args[1:]:
        dt = promote(dt, a.dt)
    return dt


def same_as_first(args):
    """A result type rule: the type of the first argument."""
    return args[0].dt


#: every function generated source may call, with its result type from its arguments:
#: numpy's, math's and builtins here; code generation adds its kernel helpers with
#: :func:`define` (graphc.codegen.helpers declares them)
FUNCS = {
    "abs": same_as_first, "max": _promote_all, "min": _promote_all,
    "np.minimum": _promote_all, "np.maximum": _promote_all, "np.sign": same_as_first, "np.power": _promote_all,
    "np.sqrt": _same, "np.log": _same, "np.exp": _same, "np.isnan": lambda a: "bool", "np.round": same_as_first,
    "np.floor": _same, "np.ceil": _same, "np.abs": same_as_first,
    "math.exp": _same, "math.expm1": _same, "math.log": _same, "math.log1p": _same, "math.erf": _same,
    "math.tanh": _same, "math.sqrt": _same, "math.floor": lambda a: "int", "math.ceil": lambda a: "int",
    "math.isnan": lambda a: "bool", "math.isinf": lambda a: "bool",
    "np.empty": lambda a: "arr", "np.zeros": lambda a: "arr", "np.full": lambda a: "arr",
}


def define(fn: str, rule) -> None:
    """Let kernels call ``fn``, whose result type ``rule`` gives from the argument
    expressions (a kernel helper code generation declares); a name is defined once."""
    if fn in FUNCS:
        raise ValueError(f"kernel function {fn!r} is defined twice")
    FUNCS[fn] = rule


def call(fn: str, *args, dt: str | None = None) -> Expr:
    """A call to ``fn`` from :data:`FUNCS` (or a helper the kernel defines itself,
    whose name :class:`Names` made, with ``dt`` given)."""
    rule = FUNCS.get(fn)
    if rule is None and dt is None:
        raise ValueError(f"no such kernel function: {fn!r}")
    fdt = next((a.dt for a in args if isinstance(a, Expr) and a.dt in FLOATS), None)

    def lit(x):
        # a float literal takes the type of the call's first float argument
        return const(x, fdt) if isinstance(x, float) and fdt else const(x)
    ex = tuple(a if isinstance(a, Expr) else (tuple(lit(x) for x in a) if isinstance(a, (tuple, list))
                                               else lit(a)) for a in args)
    if dt is None:
        first = [a for a in ex if isinstance(a, Expr)]
        dt = rule(first) if first else rule([const(0.0)])
    return Expr("call", (fn, ex), dt)


def load(buf: Expr, idx) -> Expr:
    """``buf[idx]``: ``idx`` one expression or a tuple (a 2-D scratch array)."""
    elem = buf.dt[4:] if buf.dt.startswith("arr:") else "f64"
    idx = tuple(_index(i) for i in idx) if isinstance(idx, tuple) else _index(idx)
    return Expr("load", (buf, idx), elem)


def _index(i) -> Expr:
    return i if isinstance(i, Expr) else const(int(i))


def array(name: str, elem: str) -> Expr:
    """A buffer (a kernel argument or a scratch array) whose elements load as ``elem``."""
    return Expr("var", (name,), "arr:" + elem)


# -- statements ----------------------------------------------------------------------------
@dataclass
class Let:
    """``name = value``, bound once."""
    target: Expr
    value: Expr


@dataclass
class Assign:
    """``name = value`` for a mutable scalar (accumulators, running indices)."""
    target: Expr
    value: Expr


@dataclass
class Store:
    """``buf[idx] = value``."""
    buf: Expr
    idx: object
    value: Expr


@dataclass
class For:
    target: Expr
    start: Expr
    stop: Expr
    body: list = field(default_factory=list)
    parallel: bool = False


@dataclass
class While:
    cond: Expr
    body: list = field(default_factory=list)


@dataclass
class If:
    cond: Expr
    body: list = field(default_factory=list)
    orelse: list = field(default_factory=list)


@dataclass
class Return:
    value: Expr


def writes(stmt) -> set:
    """Names a statement (with its nested bodies) assigns or stores into."""
    if isinstance(stmt, (Let, Assign)):
        return {stmt.target.args[0]}
    if isinstance(stmt, Store):
        return {stmt.buf.args[0]}
    out = set()
    if isinstance(stmt, For):
        out.add(stmt.target.args[0])
    for body in _bodies(stmt):
        for s in body:
            out |= writes(s)
    return out


def _bodies(stmt):
    if isinstance(stmt, (For, While)):
        return [stmt.body]
    if isinstance(stmt, If):
        return [stmt.body, stmt.orelse]
    return []


def children(stmt) -> list:
    """The statements nested in ``stmt`` (a loop's body, an if's two branches)."""
    return [s for body in _bodies(stmt) for s in body]


def all_stmts(stmts):
    """Every statement, nested ones after the one holding them."""
    for s in stmts:
        yield s
        yield from all_stmts(children(s))


def stmt_exprs(s) -> list:
    """The expressions a statement evaluates itself, not its nested bodies' (a
    while's condition is evaluated on every turn)."""
    if isinstance(s, (Let, Assign, Return)):
        return [s.value]
    if isinstance(s, Store):
        idx = list(s.idx) if isinstance(s.idx, tuple) else [s.idx]
        return idx + [s.value]
    if isinstance(s, For):
        return [s.start, s.stop]
    if isinstance(s, (If, While)):
        return [s.cond]
    return []


def calls(stmts) -> set:
    """Names of the functions the statements (and their nested bodies) call."""
    out = set()

    def visit(e):
        if isinstance(e, Expr):
            for n in walk(e):
                if n.op == "call":
                    out.add(n.args[0])

    for s in stmts:
        for v in vars(s).values():
            if isinstance(v, Expr):
                visit(v)
            elif isinstance(v, tuple):
                for x in v:
                    visit(x)
        for body in _bodies(s):
            out |= calls(body)
    return out


def walk(e: Expr):
    """Every node of ``e``, children first."""
    for c in e.children:
        yield from walk(c)
    yield e


__all__ = ["Expr", "const", "var", "array", "typename", "binop", "compare", "select", "cast", "f32", "f64", "i64",
           "u64", "call", "load", "promote", "Let", "Assign", "Store", "For", "While", "If", "Return",
           "writes", "walk", "children", "all_stmts", "stmt_exprs", "FUNCS", "define", "same_as_first"]
