"""Parallel loops outlined: a kernel's parallel loops as functions graphc runs on
numba's threads itself (graphc.codegen.launch), not numba's prange.

Each outermost parallel loop of a kernel becomes

* a loop function ``kernel_loop<k>(_lo, _hi, <names>)``: the loop over [_lo, _hi)
  with its body as it was, taking every name the body reads from the kernel
  (arrays and scalars), its arrays ``noalias`` (numba marks its parfor
  gufuncs' so).  Scratch arrays the body allocates with ``np.empty`` of sizes
  the loop does not change are allocated once per call, before the loop (as
  numba's parfor hoists them: their contents are undefined either way);
* in the kernel, in the loop's place: ``launch(kernel_loop<k>, start, stop,
  (<names>,))``, which runs the function on numba's threads, each on its part
  of [start, stop).

A loop beyond this (one reading a scalar of the kernel it then assigns, as a
reduction does; one returning) leaves the kernel to numba's prange:
:func:`outline` returns None.  The text generated is made of the
kernel's own names (made by KernelBuilder), fixed identifiers and numbers.
"""
from __future__ import annotations

import dataclasses

from . import ir
from .printer import print_body

LOOP = "kernel_loop"
#: a loop function's decorator: numba compiles it only as the subroutine the
#: kernel's launch makes of it (graphc.codegen.launch), never on its own
LOOP_JIT = "no_cpython_wrapper=True, no_cfunc_wrapper=True"
IMPORT = "from graphc.codegen.launch import launch"


class KernelSource(str):
    """A kernel module's source as KernelBuilder.source makes it, carrying what the
    builder knows of it: ``parallel``, whether its kernel runs loops on several
    threads (the builder emitted a parallel loop), and ``roads``, the
    implementations its emitters chose (``winograd``, ``mkl_sgemm``, ``flash``:
    CompiledPartition.get_impl_info)."""

    def __new__(cls, text: str, parallel: bool, roads: tuple = ()):
        self = super().__new__(cls, text)
        self.parallel = bool(parallel)
        self.roads = tuple(roads)
        return self

    def __reduce__(self):
        return KernelSource, (str(self), self.parallel, self.roads)


def runs_parallel(compiled) -> bool:
    """Whether a compiled partition or graph (or a kernel's KernelSource) runs
    loops on several threads, as the KernelBuilder of its kernels recorded; False
    for one without a kernel.  Source text is not searched: plain text is refused."""
    parts = getattr(compiled, "compiled", None)
    if parts is not None:   # a compiled graph: any of its partitions
        return any(runs_parallel(cp) for cp in parts if cp is not None)
    source = getattr(compiled, "source", compiled)
    if source is None:
        return False
    if not isinstance(source, KernelSource):
        raise TypeError("runs_parallel reads what the kernel builder recorded: give a compiled partition or "
                        f"graph, or KernelBuilder.source()'s result, not {type(source).__name__}")
    return source.parallel


@dataclasses.dataclass
class Outlined:
    body: list          # the kernel's statements, each parallel loop replaced by its launch
    functions: list     # the loop functions' source


class _Unsupported(Exception):
    pass


def outline(kb) -> Outlined | None:
    """The kernel of KernelBuilder ``kb`` with its parallel loops outlined, or None
    (numba's prange then)."""
    try:
        return _Outliner(kb).run()
    except _Unsupported:
        return None


class _Outliner:
    def __init__(self, kb):
        self.kb = kb
        self.functions = []
        # names another name's value is (a let of a name): two names of one
        # array would be passed as two noalias arguments
        self.aliases = {s.target.args[0] for s in ir.all_stmts(kb.body)
                        if isinstance(s, ir.Let) and s.value.op == "var"}

    def run(self) -> Outlined:
        body = self._rewrite(self.kb.body)
        if not self.functions:
            raise _Unsupported
        return Outlined(body, self.functions)

    def _rewrite(self, stmts):
        out = []
        for s in stmts:
            if isinstance(s, ir.For) and s.parallel:
                out.append(self._outlined(s))
            elif isinstance(s, (ir.For, ir.While)):
                out.append(dataclasses.replace(s, body=self._rewrite(s.body)))
            elif isinstance(s, ir.If):
                out.append(dataclasses.replace(s, body=self._rewrite(s.body), orelse=self._rewrite(s.orelse)))
            else:
                out.append(s)
        return out

    def _outlined(self, loop: ir.For):
        """The loop's function (kept), and the statement launching it."""
        k = len(self.functions)
        reads, private, assigned = set(), {loop.target.args[0]}, set()
        for s in ir.all_stmts(loop.body):
            if isinstance(s, ir.Return):
                raise _Unsupported
            for e in ir.stmt_exprs(s):
                reads |= e.reads
            if isinstance(s, ir.Store):
                reads.add(s.buf.args[0])
            if isinstance(s, (ir.Let, ir.For)):
                private.add(s.target.args[0])
            elif isinstance(s, ir.Assign):
                assigned.add(s.target.args[0])
        for name in assigned & _names_outside(self.kb.body, loop):
            if not _set_first(loop.body, name):
                raise _Unsupported   # a scalar of the kernel the loop reads before it assigns it
        private |= assigned
        names = sorted(reads - private - self.kb.consts)   # (module-level constants it reads itself)
        if set(names) & self.aliases:
            raise _Unsupported
        self.functions.append(self._function(k, loop, names, private))
        values = tuple(ir.var(n, "arr") for n in names)
        return ir.Let(ir.var(f"_ran{k}"), ir.call("launch", ir.var(f"{LOOP}{k}", "fn"), loop.start, loop.stop,
                                                  values, dt="int"))

    def _function(self, k, loop: ir.For, names, private) -> str:
        hoisted, rest = [], []
        for s in loop.body:
            if (isinstance(s, ir.Let) and s.value.op == "call" and s.value.args[0] == "np.empty"
                    and not (s.value.reads & private)):
                hoisted.append(s)
            else:
                rest.append(s)
        inner = ir.For(loop.target, ir.var("_lo"), ir.var("_hi"), rest, False)
        lines = print_body(hoisted + [inner], 1, set(names) | {"_lo", "_hi"} | self.kb._taken())
        params = ", ".join(["_lo", "_hi"] + names)
        return f"@njit({LOOP_JIT})\ndef {LOOP}{k}({params}):\n" + "\n".join(lines) + "\n"


# -- walking statements ----------------------------------------------------------------
def _set_first(body, name) -> bool:
    """Whether each turn of a loop of ``body`` assigns ``name`` before anything
    reads it (a name numba's prange makes private to each turn, like one only
    the loop uses; one read first carries a value between turns: a reduction)."""
    for s in body:
        if isinstance(s, ir.Assign) and s.target.args[0] == name:
            return name not in s.value.reads
        if name in _names_outside([s], None):
            return False
    return False


def _names_outside(stmts, skip) -> set:
    """Names read or written by the statements, not counting ``skip``'s body."""
    out = set()
    for s in stmts:
        for e in ir.stmt_exprs(s):
            out |= e.reads
        if isinstance(s, (ir.Let, ir.Assign, ir.For)):
            out.add(s.target.args[0])
        elif isinstance(s, ir.Store):
            out.add(s.buf.args[0])
        if s is not skip:
            out |= _names_outside(ir.children(s), skip)
    return out
