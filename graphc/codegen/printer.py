"""The IR printer: statements and expressions of :mod:`graphc.codegen.ir` as
readable Numba source, each common subexpression computed once.

Common subexpressions, per block of straight-line statements: an expression
(a load, an arithmetic node, a call) that occurs twice or more, with nothing in
between writing a name it reads, is bound to a temporary (``cse0 = ...``) before
the first statement using it and read from there after.  An occurrence inside
one side of a conditional expression counts only if the expression is already
computed outside it (the printer never makes a guarded computation eager).
While conditions are printed as they are (they are evaluated on every turn).
Blocks nested in loops and ifs get their own pass: a temporary never crosses a
loop boundary, where later writes of the loop would make it stale.
"""
from __future__ import annotations

import math

from .ir import Assign, Expr, For, If, Let, Return, Store, While, children, stmt_exprs, writes

#: binding strength of each operator (higher binds tighter)
_PREC = {"|": 4, "^": 5, "&": 6, "<<": 7, ">>": 7, "+": 8, "-": 8, "*": 9, "/": 9, "//": 9, "%": 9, "**": 11}
_CMP_PREC = 3
_NOT_PREC = 2
_UNARY_PREC = 10


def _const(e: Expr) -> str:
    v = e.args[0]
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, int):
        return str(v)
    if math.isnan(v):
        text = "np.nan"
    elif math.isinf(v):
        text = "np.inf" if v > 0 else "-np.inf"
    else:
        text = repr(v)
    return f"np.float32({text})" if e.dt == "f32" else text


class _Printer:
    def __init__(self, bound: dict):
        self.bound = bound   # expression -> temporary name

    def expr(self, e: Expr, prec: int = 0) -> str:
        name = self.bound.get(e)
        if name is not None:
            return name
        op, a = e.op, e.args
        if op == "const":
            text, p = _const(e), 12
            if text.startswith("-") and prec > _UNARY_PREC:
                return f"({text})"
            return text
        if op == "var":
            return a[0]
        if op == "type":
            return a[0]
        if op == "load":
            return self.target(*a)
        if op == "call":
            return f"{a[0]}({', '.join(self._arg(x) for x in a[1])})"
        if op == "cast":
            from .ir import TYPE_CTOR
            return f"{TYPE_CTOR[a[0]]}({self.expr(a[1])})"
        if op == "bin":
            sym, l, r = a
            p = _PREC[sym]
            if sym == "**":   # right-associative
                text = f"{self.expr(l, p + 1)} ** {self.expr(r, p)}"
            else:
                text = f"{self.expr(l, p)} {sym} {self.expr(r, p + 1)}"
            return f"({text})" if p < prec else text
        if op == "cmp":
            sym, l, r = a
            text = f"{self.expr(l, _CMP_PREC + 1)} {sym} {self.expr(r, _CMP_PREC + 1)}"
            return f"({text})" if _CMP_PREC <= prec else text
        if op == "neg":
            text = f"-{self.expr(a[0], _UNARY_PREC)}"
            return f"({text})" if _UNARY_PREC < prec else text
        if op == "inv":
            text = f"~{self.expr(a[0], _UNARY_PREC)}"
            return f"({text})" if _UNARY_PREC < prec else text
        if op == "not":
            # the operand in parentheses unless a leaf: `not (a >= 0) & (a <= 1)` reads wrong
            inner = self.expr(a[0], _NOT_PREC)
            text = f"not {inner}" if a[0].is_leaf or a[0].op in ("call", "load") else f"not ({inner})"
            return f"({text})" if _NOT_PREC <= prec else text
        if op == "select":
            c, x, y = a
            return f"({self.expr(x, 1)} if {self.expr(c, 1)} else {self.expr(y, 1)})"
        raise ValueError(f"unknown IR node {op}")

    def target(self, buf: Expr, idx) -> str:
        """``buf[idx]`` as an element (to store to, or read where no temporary holds it)."""
        inner = ", ".join(self.expr(i) for i in idx) if isinstance(idx, tuple) else self.expr(idx)
        return f"{self.expr(buf, 12)}[{inner}]"

    def _arg(self, x) -> str:
        if isinstance(x, tuple):
            inner = ", ".join(self.expr(i) for i in x)
            return f"({inner},)" if len(x) == 1 else f"({inner})"
        return self.expr(x)


def expr_source(e: Expr) -> str:
    """One expression as source, without common-subexpression elimination."""
    return _Printer({}).expr(e)


class Names:
    """Fresh names for temporaries, clear of every name the kernel uses."""

    def __init__(self, taken: set):
        self.taken = taken
        self.n = 0

    def fresh(self) -> str:
        while f"cse{self.n}" in self.taken:
            self.n += 1
        name = f"cse{self.n}"
        self.n += 1
        self.taken.add(name)
        return name


def _occurrences(e: Expr, out: list, guarded: bool = False):
    """(node, guarded) for every non-leaf node of ``e``, children first."""
    if e.is_leaf:
        return
    if e.op == "select":
        _occurrences(e.args[0], out, guarded)
        _occurrences(e.args[1], out, True)
        _occurrences(e.args[2], out, True)
    else:
        for c in e.children:
            _occurrences(c, out, guarded)
    out.append((e, guarded))


def _worth_binding(e: Expr) -> bool:
    """Calls, arithmetic and loads: not array constructors (each makes a new array)."""
    if e.op == "cast" and e.args[1].is_leaf:
        return False   # a conversion of a name or number costs less than a temporary reads
    return not (e.op == "call" and e.dt == "arr") and e.dt != "type"


class BlockPrinter:
    def __init__(self, names: Names, indent: str = "    "):
        self.names, self.indent = names, indent
        self.lines: list[str] = []
        self.aliases: dict = {}   # a let whose value another let names already: that name

    def block(self, stmts: list, depth: int) -> None:
        if not stmts:
            self.lines.append(self.indent * depth + "pass")
            return
        counts = self._count(stmts)
        bound: dict = dict(self.aliases)
        version: dict = {}
        pr = _Printer(bound)
        pad = self.indent * depth
        for s in stmts:
            if isinstance(s, Let) and s.value in bound and s.value.op != "var":
                # the same value under another name: read the first name
                self.aliases[s.target] = bound[s.target] = bound[s.value]
                continue
            if isinstance(s, While):
                pass   # its condition is evaluated each turn: nothing hoisted from it
            else:
                for e in stmt_exprs(s):
                    occ: list = []
                    _occurrences(e, occ)
                    for node, guarded in occ:
                        if node in bound or guarded or not _worth_binding(node):
                            continue
                        if isinstance(s, Let) and node is s.value:
                            continue   # the let itself names it (below)
                        if counts.get(self._key(node, version), 0) >= 2:
                            name = self.names.fresh()
                            self.lines.append(f"{pad}{name} = {pr.expr(node)}")
                            bound[node] = name
            self._stmt(s, pr, depth)
            if isinstance(s, Let) and s.value not in bound and _worth_binding(s.value) and \
                    counts.get(self._key(s.value, version), 0) >= 2:
                bound[s.value] = s.target.args[0]
            # what the statement writes makes temporaries reading it stale
            w = writes(s)
            if w:
                for n in w:
                    version[n] = version.get(n, 0) + 1
                for node in [k for k in bound if k.reads & w]:
                    del bound[node]

    @staticmethod
    def _key(node: Expr, version: dict):
        return node, tuple(sorted((n, version.get(n, 0)) for n in node.reads))

    def _count(self, stmts) -> dict:
        """Occurrences of each (expression, versions of what it reads), not counting
        the insides of a repeated one again (it will be computed once)."""
        counts: dict = {}
        version: dict = {}

        def visit(e, guarded):
            if e.is_leaf:
                return
            k = self._key(e, version)
            if not guarded:
                counts[k] = counts.get(k, 0) + 1
            if k in seen:
                return
            seen.add(k)
            if e.op == "select":
                visit(e.args[0], guarded)
                visit(e.args[1], True)
                visit(e.args[2], True)
            else:
                for c in e.children:
                    visit(c, guarded)

        seen: set = set()
        for s in stmts:
            if not isinstance(s, While):
                for e in stmt_exprs(s):
                    visit(e, False)
            for n in writes(s):
                version[n] = version.get(n, 0) + 1
        return counts

    def _stmt(self, s, pr: _Printer, depth: int) -> None:
        pad = self.indent * depth
        out = self.lines
        if isinstance(s, (Let, Assign)):
            tgt = s.target.args[0]
            v = s.value
            if (isinstance(s, Assign) and v.op == "bin" and v.args[0] in ("+", "-", "*") and v.args[1] == s.target
                    and s.target not in pr.bound):
                out.append(f"{pad}{tgt} {v.args[0]}= {pr.expr(v.args[2], _PREC[v.args[0]] + 1)}")
            else:
                out.append(f"{pad}{tgt} = {pr.expr(v)}")
        elif isinstance(s, Store):
            # the element itself, never a temporary holding its value (its index may use one)
            target = pr.target(s.buf, s.idx)
            v = s.value
            cur = Expr("load", (s.buf, s.idx), v.dt)
            if v.op == "bin" and v.args[0] in ("+", "-") and _same_load(v.args[1], s) and cur not in pr.bound:
                out.append(f"{pad}{target} {v.args[0]}= {pr.expr(v.args[2], _PREC[v.args[0]] + 1)}")
            else:
                out.append(f"{pad}{target} = {pr.expr(v)}")
        elif isinstance(s, For):
            rng = "prange" if s.parallel else "range"
            bounds = pr.expr(s.stop) if (s.start.op == "const" and s.start.args[0] == 0) else \
                f"{pr.expr(s.start)}, {pr.expr(s.stop)}"
            out.append(f"{pad}for {s.target.args[0]} in {rng}({bounds}):")
            self.block(s.body, depth + 1)
        elif isinstance(s, While):
            out.append(f"{pad}while {pr.expr(s.cond)}:")
            self.block(s.body, depth + 1)
        elif isinstance(s, If):
            out.append(f"{pad}if {pr.expr(s.cond)}:")
            self.block(s.body, depth + 1)
            if s.orelse:
                out.append(f"{pad}else:")
                self.block(s.orelse, depth + 1)
        elif isinstance(s, Return):
            out.append(f"{pad}return {pr.expr(s.value)}")
        else:
            raise ValueError(f"unknown IR statement {type(s).__name__}")


def _same_load(e: Expr, s: Store) -> bool:
    return e.op == "load" and e.args[0] == s.buf and _idx_key(e.args[1]) == _idx_key(s.idx)


def _idx_key(idx):
    return tuple(idx) if isinstance(idx, tuple) else (idx,)


def names_in(stmts) -> set:
    """Every variable name the statements use (so temporaries avoid them)."""
    out = set()

    def expr_names(e):
        for n in _walk(e):
            if n.op == "var":
                out.add(n.args[0])

    for s in stmts:
        for e in stmt_exprs(s):
            expr_names(e)
        if isinstance(s, (Let, Assign)):
            out.add(s.target.args[0])
        if isinstance(s, Store):
            out.add(s.buf.args[0])
        if isinstance(s, For):
            out.add(s.target.args[0])
        out |= names_in(children(s))
    return out


def _walk(e: Expr):
    yield e
    for c in e.children:
        yield from _walk(c)


def print_body(stmts: list, depth: int = 1, taken: set | None = None) -> list[str]:
    """The source lines of a function body."""
    taken = set(taken or ()) | names_in(stmts)
    bp = BlockPrinter(Names(taken))
    bp.block(stmts, depth)
    return bp.lines
