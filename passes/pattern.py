"""A small declarative pattern language for op chains, and its matching engine.

A pattern is a sequence of steps; each step matches one or more consecutive ops
of a chain, where every op after the first consumes the previous op's output 0
(at a given input port, or at any).  Steps:

* ``op("ReLU", "GELU", pred=..., port=...)``: one op whose kind is in the set
  (alternation), for which the decision predicate ``pred(op, graph, port)``
  holds (``port``: the input index the chain enters by, None for the first op);
* ``optional(step)``: zero or one;
* ``repeat(step, min, max)``: a post-op chain of any length.

Patterns carry a name and a priority; :func:`match_all` applies a whole catalog
with one engine: higher priority first, then longer matches, each op in at most
one match.  No hand-written graph walk per pattern.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

INF = 1 << 30


@dataclass(frozen=True)
class Step:
    kinds: frozenset
    pred: Callable | None = None
    port: int | None = None       # input port of this op fed by the chain (None: any)
    min: int = 1
    max: int = 1

    def accepts(self, op, graph, port=None) -> bool:
        return op.kind in self.kinds and (self.pred is None or bool(self.pred(op, graph, port)))


def op(*kinds, pred=None, port=None) -> Step:
    flat = []
    for k in kinds:
        flat.extend(k if isinstance(k, (list, tuple, set, frozenset)) else [k])
    return Step(frozenset(flat), pred, port)


def optional(step: Step) -> Step:
    return Step(step.kinds, step.pred, step.port, 0, 1)


def repeat(step: Step, min: int = 0, max: int = INF) -> Step:  # noqa: A002
    return Step(step.kinds, step.pred, step.port, min, max)


@dataclass
class Pattern:
    name: str
    steps: list
    priority: float = 1.0
    doc: str = ""


@dataclass
class Match:
    pattern: Pattern
    ops: list = field(default_factory=list)


def _next_op(graph, cur, step):
    """(op, port): the single consumer of cur's output 0 if it may extend the chain."""
    if not cur.outputs:
        return None, None
    tid = cur.outputs[0].id
    cons = graph.consumers.get(tid, [])
    if len(cons) != 1 or tid in graph.output_ports:
        return None, None
    oid, port = cons[0]
    nxt = graph.ops[oid]
    if step.port is not None and port != step.port:
        return None, None
    if sum(1 for t in nxt.inputs if t.id == tid) != 1:
        return None, None
    # other outputs of cur must not escape the chain
    for t in cur.outputs[1:]:
        if graph.consumers.get(t.id):
            return None, None
    return nxt, port


def _match(graph, steps, i, cur, acc):
    """Match steps[i:] continuing after ``cur``; each step takes as many ops as it
    can (longest first), backing off when the rest of the pattern then fails."""
    if i == len(steps):
        return acc
    step = steps[i]
    chain = []
    c = cur
    while len(chain) < step.max:
        nxt, port = _next_op(graph, c, step)
        if nxt is None or not step.accepts(nxt, graph, port):
            break
        chain.append(nxt)
        c = nxt
    for k in range(len(chain), step.min - 1, -1):
        r = _match(graph, steps, i + 1, chain[k - 1] if k else cur, acc + chain[:k])
        if r is not None:
            return r
    return None


def match_at(graph, pattern: Pattern, start, taken) -> list | None:
    first = pattern.steps[0]
    if start.id in taken or not first.accepts(start, graph):
        return None
    # the first step may repeat: expand from start
    steps = [Step(first.kinds, first.pred, first.port, max(first.min - 1, 0), first.max - 1)] + pattern.steps[1:]
    r = _match(graph, steps, 0, start, [start])
    if r is None or len(r) < 2 or any(o.id in taken for o in r):
        return None
    return r


def match_all(graph, catalog: list[Pattern]) -> list[Match]:
    """Apply the catalog: each op joins at most one match."""
    taken: set[int] = set()
    found: list[Match] = []
    topo = graph.topo_ops()
    for pat in sorted(catalog, key=lambda p: -p.priority):
        for start in topo:
            if start.id in taken:
                continue
            ops = match_at(graph, pat, start, taken)
            if ops:
                found.append(Match(pat, ops))
                taken.update(o.id for o in ops)
    return found
