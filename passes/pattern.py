"""Fusion patterns as small graphs, and the one engine that matches them.

A :class:`Pattern` is built like a graph (in the spirit of oneDNN's pattern
builder)::

    p = Pattern("norm_swish", priority=8)
    x = p.input()                                  # a tensor from outside
    n = p.op(["LayerNorm", "GroupNorm"], x)        # output 0 of n is ``n``
    s = p.op("Sigmoid", n)
    p.op("Multiply", n, s, either_order=True)       # a fork that rejoins

* ``p.op(kinds, *inputs)``: an op whose kind is one of ``kinds`` (alternation);
  input ``j`` is another node's output (``node`` for output 0, ``node.out(k)``),
  an :meth:`Pattern.input` (the same outside tensor wherever that input is
  used), or ``None`` (anything).  Ports past the given ones are unconstrained.
  ``either_order=True`` lets a two-input op take its inputs in either order;
  ``optional=True`` lets the node be absent (its output is then its input 0).
* ``pred=f(op, m)``: a decision function; ``m`` is the match so far
  (``m[node]`` the op bound to an earlier node, ``m.tensor(ref)`` a tensor), so
  predicates relate ops (shapes, dtypes, attributes, broadcast direction).
  ``p.check = f(match)`` judges a whole match.
* ``p.each_input(node, kinds)``: every input of ``node``'s op produced by an
  op of ``kinds`` (N Dequantize ops into one Concat).
* ``p.repeat(body, x, min, max)`` (``body`` a list: each round one of them),
  ``p.optional_block(body, x)`` and
  ``p.alt(x, body, ...)``: sub-patterns entered by one tensor and left by one;
  ``body(q, x)`` builds the sub-pattern on ``q`` from its entry ``x`` and returns
  its exit.  Repetitions take as many rounds as they can (then back off); an
  outside tensor made in a body (``q.input()``) is bound afresh in each round
  (two scales of a repeated scale step are two tensors).

Matching starts at the pattern's anchor (its first op node, or the one named
``anchor=``) and walks from bound ops to their consumers (an input bound, as
a post-op) or producers (an output feeding a bound op, as Dequantize before
MatMul); blocks are matched from their entry tensor.  :func:`match_all` applies
a whole catalog: patterns by priority (a pattern needing an op of a kind the
graph lacks is skipped), anchors in topological order (from an index by kind),
each op in at most one match, a search per anchor bounded by the pattern's
size, so that the cost is linear in the graph:

* a node is looked for among the readers of its kinds of the bound input with
  the fewest such readers (the same ops bind, in the same order, whichever list
  is read);
* a node found among the readers of an outside tensor (a :meth:`Pattern.input`
  the anchor reads too: its siblings, which a fanned-out tensor has by the
  thousand) comes last in the plan, after every node found from a bound op's
  output or as the producer of what a bound op reads, and at most
  ``MAX_SIBLINGS`` of them are tried per partial match.

Whether a match may become a partition is not decided here: ``accept(match)``
(the legality pass) judges it, and the engine takes the first acceptable
match, longest first.

A pattern declares the kernel shape its matches lower to (``kernel=``: one of
``KERNEL_SHAPES`` or a tuple of them, see passes/legality.py), and a
match carries the ops bound to its labelled nodes (``Match.roles``: label ->
ops, nodes inside blocks too, every round of a repetition), so that legality
plans the kernel from the roles the pattern bound (the attention kernel's
Q@K^T MatMul, SoftMax, @V MatMul, ...) rather than finding them again.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Callable

INF = 1 << 30
#: complete matches tried per anchor before giving up on it
MAX_TRIES = 256
#: a tensor with more consumers than this has its consumers of each kind set
#: found once per match_all (a fan-out is read by many anchors' searches)
SHORT_LIST = 8
#: ops tried for a node found among an outside tensor's readers (the anchor's
#: siblings: gated_mlp's gate MatMul reads the up MatMul's src), per partial
#: match: a tensor read by thousands of ops would make every anchor try them all
MAX_SIBLINGS = 64
#: the kernel shapes a pattern may declare (legality's FusionPlan.shape)
KERNEL_SHAPES = ("eltwise", "anchor", "staged", "attention", "views", "conv_depthwise")
#: a pattern declaring no shape: legality plans whichever of these the ops make
DERIVED = ("eltwise", "anchor", "staged", "views")


class Ref:
    """Something an op node's input can name: an outside tensor, a node's output
    or a block's exit."""


class Input(Ref):
    """A tensor from outside the pattern (one tensor wherever it is used)."""

    def __init__(self, label: str = ""):
        self.label = label

    def __repr__(self):
        return f"Input({self.label})"


class Entry(Input):
    """The tensor a sub-pattern (a block's body) starts from: the value the block
    continues, found as a bound op's output is, not an outside tensor."""


def _outside(r) -> bool:
    """``r`` is a tensor from outside the match (an Input, not a block's entry)."""
    return isinstance(r, Input) and not isinstance(r, Entry)


@dataclass(frozen=True)
class Out(Ref):
    node: "Node"
    index: int


class Node(Ref):
    def __init__(self, kinds, inputs, pred, either_order, optional, label):
        self.kinds = frozenset(kinds)
        self.inputs = tuple(_ref(r) for r in inputs)
        self.pred = pred
        self.either_order = either_order
        self.optional = optional
        self.label = label

    def out(self, k: int) -> Out:
        return Out(self, k)

    def __repr__(self):
        return f"Node({self.label or '|'.join(sorted(self.kinds))})"


class Block(Ref):
    """Repetition / optional / alternation of sub-patterns with one entry and one exit."""

    def __init__(self, bodies, entry, lo, hi, label):
        self.bodies, self.entry, self.min, self.max, self.label = bodies, _ref(entry), lo, hi, label

    def __repr__(self):
        return f"Block({self.label}, {self.min}..{self.max})"


class Each:
    """Every input of a bound node produced by an op of ``kinds`` (a variadic
    fan-in, as N Dequantize ops into Concat)."""

    def __init__(self, node, kinds, pred, label):
        self.node, self.kinds, self.pred, self.label = node, frozenset(kinds), pred, label

    def __repr__(self):
        return f"Each({self.label or '|'.join(sorted(self.kinds))} -> {self.node!r})"


def _ref(r):
    if r is None or isinstance(r, (Input, Out, Block)):
        return r
    if isinstance(r, Node):
        return Out(r, 0)
    raise TypeError(f"a pattern input must be a node, an input or None, not {r!r}")


def _flat(kinds) -> list:
    out = []
    for k in ([kinds] if isinstance(kinds, str) else kinds):
        out.extend([k] if isinstance(k, str) else _flat(k))
    return out


class Pattern:
    def __init__(self, name: str, priority: float = 1.0, doc: str = "", anchor: str | None = None,
                 kernel=DERIVED):
        self.name, self.priority, self.doc, self.anchor_label = name, priority, doc, anchor
        self.kernel = (kernel,) if isinstance(kernel, str) else tuple(kernel)
        if not self.kernel or any(k not in KERNEL_SHAPES for k in self.kernel):
            raise ValueError(f"pattern {name}: kernel shapes {kernel!r}, not of {KERNEL_SHAPES}")
        self.items: list = []
        self.inputs: list = []            # the outside tensors made here (sub-patterns: fresh each round)
        self.entry: Input | None = None   # sub-patterns: the tensor entering
        self.exit = None                  # sub-patterns: the tensor leaving
        self.check: Callable | None = None
        self._plans: dict = {}

    # -- building --------------------------------------------------------------------------
    def input(self, label: str = "") -> Input:
        i = Input(label)
        self.inputs.append(i)
        return i

    def op(self, kinds, *inputs, pred=None, either_order=False, optional=False, label="") -> Node:
        n = Node(_flat(kinds), inputs, pred, either_order, optional, label)
        if optional and (not n.inputs or n.inputs[0] is None):
            raise ValueError("an optional node needs input 0 (its output stands for it when absent)")
        self.items.append(n)
        return n

    def each_input(self, node: Node, kinds, pred=None, label: str = "") -> Each:
        """Every input of ``node``'s op produced by an op of ``kinds`` (for which
        ``pred(op, m)`` holds), all of them in the match."""
        e = Each(node, _flat(kinds), pred, label)
        self.items.append(e)
        return e

    def _block(self, bodies, x, lo, hi, label) -> Block:
        subs = []
        for body in bodies:
            q = Pattern(f"{self.name}/{label or 'block'}")
            q.entry = Entry("entry")
            q.exit = _ref(body(q, q.entry))
            if not q.items:
                raise ValueError("a sub-pattern needs at least one op")
            subs.append(q)
        b = Block(subs, x, lo, hi, label)
        self.items.append(b)
        return b

    def repeat(self, body, x, min: int = 0, max: int = INF, label: str = "") -> Block:  # noqa: A002
        """``body`` repeated; a list of bodies: each round is one of them (tried in order)."""
        return self._block(list(body) if isinstance(body, (list, tuple)) else [body], x, min, max, label)

    def optional_block(self, body, x, label: str = "") -> Block:
        return self._block([body], x, 0, 1, label)

    def alt(self, x, *bodies, label: str = "") -> Block:
        return self._block(list(bodies), x, 1, 1, label)

    # -- matching plan -----------------------------------------------------------------------
    @property
    def anchor(self) -> Node:
        nodes = [n for n in self.items if isinstance(n, Node)]
        if self.anchor_label:
            nodes = [n for n in nodes if n.label == self.anchor_label]
        if not nodes:
            raise ValueError(f"pattern {self.name} has no anchor op")
        if nodes[0].optional:
            raise ValueError(f"pattern {self.name}: the anchor cannot be optional")
        return nodes[0]

    def plan(self, start=None) -> list:
        """The order nodes and blocks are matched in, each with how its candidates
        are found: ("anchor",), ("fwd", port) from a bound input, ("bwd", node,
        port, k) from the op it feeds, ("block",)."""
        if start in self._plans:
            return self._plans[start]
        known: set = set()
        if start is None:
            a = self.anchor
            order = [(a, ("anchor",))]
            done = {a}
            known |= _node_refs(a)
        else:
            order, done = [], set()
            known.add(start)
        while len(done) < len(self.items):
            ready = [(it, how) for it in self.items if it not in done
                     for how in [_how(it, known, done)] if how is not None]
            if not ready:
                left = [it for it in self.items if it not in done]
                raise ValueError(f"pattern {self.name}: {left} not reachable from its anchor "
                                 "(blocks are matched from their entry tensor)")
            # a sibling search (an op found among every consumer of an outside
            # tensor, which may have thousands) waits until nothing else is ready
            it, how = next((r for r in ready if not _sibling(*r)), ready[0])
            order.append((it, how))
            done.add(it)
            known |= _node_refs(it) if isinstance(it, Node) else set() if isinstance(it, Each) else {it}
        self._plans[start] = order
        return order


def _node_refs(n: Node) -> set:
    out = {r for r in n.inputs if r is not None}
    out.add(Out(n, 0))
    return out


def _how(it, known, done):
    if isinstance(it, Each):
        return ("each",) if it.node in done else None
    if isinstance(it, Block):
        return ("block",) if it.entry in known else None
    # from a bound op's output if it can, else as the producer of what a bound op
    # reads (one candidate), else among an outside tensor's readers (siblings)
    ports = [j for j, r in enumerate(it.inputs) if r is not None and r in known]
    own = [j for j in ports if not _outside(it.inputs[j])]
    if own:
        return ("fwd", own[0])
    for m in done:
        if isinstance(m, Node):
            for j, r in enumerate(m.inputs):
                if isinstance(r, Out) and r.node is it:
                    return ("bwd", m, j, r.index)
    return ("fwd", ports[0]) if ports else None


# -- matching -------------------------------------------------------------------------------
def _sibling(it, how) -> bool:
    """``it`` found only among the consumers of an outside tensor (an Input of
    the pattern, which the anchor reads too: its siblings)."""
    return how[0] == "fwd" and _outside(it.inputs[how[1]])


class _State:
    """Bindings of one partial match (copied on write while searching);
    ``roles``: (label, op) of every labelled node bound, in order (the bindings
    in ``o`` of a block's nodes are its last round's)."""

    __slots__ = ("t", "o", "ops", "used", "roles")

    def __init__(self, t, o, ops, used, roles=()):
        self.t, self.o, self.ops, self.used, self.roles = t, o, ops, used, roles

    def copy(self):
        return _State(dict(self.t), dict(self.o), self.ops, self.used, self.roles)


class MatchView:
    """What predicates see of a match in progress (or complete)."""

    def __init__(self, graph, state):
        self.graph, self._st = graph, state

    def __getitem__(self, node):
        return self._st.o.get(node)

    def tensor(self, ref):
        tid = self._st.t.get(_ref(ref) if isinstance(ref, Node) else ref)
        return None if tid is None else self.graph.tensors[tid]

    @property
    def ops(self):
        return list(self._st.ops)


@dataclass
class Match:
    pattern: Pattern
    ops: list = field(default_factory=list)
    bound: dict = field(default_factory=dict)    # node label -> op (top-level nodes with labels)
    roles: dict = field(default_factory=dict)    # node label -> [ops] (every labelled node, blocks too)

    def role(self, label: str):
        """The one op bound to ``label``, or None (absent optional node)."""
        ops = self.roles.get(label, ())
        if len(ops) > 1:
            raise ValueError(f"{self!r}: {len(ops)} ops bound to {label!r}")
        return ops[0] if ops else None

    def __repr__(self):
        return f"Match({self.pattern.name}, {[o.id for o in self.ops]})"


class _Matcher:
    def __init__(self, graph, taken: set):
        self.g, self.taken = graph, taken
        self._of_kinds: dict = {}   # (tensor id, kinds) -> consumers of those kinds, in the graph's order

    def consumers(self, tid, kinds) -> list:
        """The ids of the ops of ``kinds`` consuming tensor ``tid``, in the order
        of the graph's consumer list (found once per tensor and kinds)."""
        readers = self.g.consumers.get(tid, ())
        if len(readers) <= SHORT_LIST:
            return [c for c, _ in readers if self.g.ops[c].kind in kinds]
        key = (tid, kinds)
        found = self._of_kinds.get(key)
        if found is None:
            ops = self.g.ops
            found = self._of_kinds[key] = [c for c, _ in readers if ops[c].kind in kinds]
        return found

    def candidates(self, node: Node, st) -> tuple[list, bool]:
        """(ids of the ops that may bind ``node`` given the tensors bound so far,
        whether they are siblings): of the bound inputs' consumers of the node's
        kinds, the shortest list (an op binds only if it reads every bound
        input, and each list keeps the graph's order, so the ops that bind and
        their order are the same whichever list is read); siblings when that
        list is of an outside tensor's readers (a Pattern.input's)."""
        best, sibling = None, False
        for r in node.inputs:
            if r is not None and r in st.t:
                cands = self.consumers(st.t[r], node.kinds)
                if best is None or len(cands) < len(best):
                    best, sibling = cands, _outside(r)
        return best, sibling

    def search(self, pat: Pattern, start_op):
        st = _State({}, {}, (), frozenset())
        yield from self._seq(pat.plan(), 0, st, start_op)

    def _seq(self, order, i, st, start_op=None):
        if i == len(order):
            yield st
            return
        it, how = order[i]
        if isinstance(it, Each):
            st2 = self._each(it, st)
            if st2 is not None:
                yield from self._seq(order, i + 1, st2)
            return
        if isinstance(it, Block):
            tid = st.t[it.entry]
            for st2, t_out in self._rounds(it, tid, st, 0):
                if st.t.get(it, t_out) != t_out:
                    continue   # an op bound before (planned first) reads another tensor as the exit
                st3 = st2.copy()
                st3.t[it] = t_out
                yield from self._seq(order, i + 1, st3)
            return
        limit = INF
        if how[0] == "anchor":
            cands = [start_op.id]
        elif how[0] == "fwd":
            cands, sibling = self.candidates(it, st)
            limit = MAX_SIBLINGS if sibling else INF
        else:
            _, m, j, k = how
            # the tensor bound to m's input j (m bound in either order binds it
            # to the port it took: not always port j of the op)
            tid = st.t.get(m.inputs[j]) if m.inputs[j] in st.t else st.o[m].inputs[j].id
            prod = self.g.producer.get(tid)
            cands = [prod[0]] if prod is not None and prod[1] == k else []
        seen = set()
        for c in cands:
            if c in seen or c in st.used or c in self.taken:
                continue
            seen.add(c)
            if len(seen) > limit:
                break
            for st2 in self._bind(it, self.g.ops[c], st):
                yield from self._seq(order, i + 1, st2)
        if it.optional:
            st2 = self._skip(it, st)
            if st2 is not None:
                yield from self._seq(order, i + 1, st2)

    def _bind(self, node: Node, op, st):
        if op.kind not in node.kinds or op.id in st.used or op.id in self.taken:
            return
        n_in = len(node.inputs)
        perms = [tuple(range(n_in))]
        if node.either_order and n_in == 2:
            perms.append((1, 0))
        for perm in perms:
            st2 = st.copy()
            ok = True
            for j, r in enumerate(node.inputs):
                if r is None:
                    continue
                port = perm[j]
                if port >= len(op.inputs) or op.inputs[port] is None:
                    ok = False
                    break
                tid = op.inputs[port].id
                if st2.t.setdefault(r, tid) != tid:
                    ok = False
                    break
            if not ok:
                continue
            for k, t in enumerate(op.outputs):
                if st2.t.setdefault(Out(node, k), t.id) != t.id:
                    ok = False
                    break
            if not ok:
                continue
            st2.o[node] = op
            st2.ops = st.ops + (op,)
            st2.used = st.used | {op.id}
            if node.label:
                st2.roles = st.roles + ((node.label, op),)
            if node.pred is not None and not node.pred(op, MatchView(self.g, st2)):
                continue
            yield st2

    def _each(self, it: Each, st):
        op = st.o.get(it.node)
        if op is None:
            return None
        st2 = st.copy()
        ops, used = list(st.ops), set(st.used)
        for t in op.inputs:
            prod = self.g.producer.get(t.id)
            if prod is None:
                return None
            p = self.g.ops[prod[0]]
            if p.kind not in it.kinds or p.id in used or p.id in self.taken:
                return None
            if it.pred is not None and not it.pred(p, MatchView(self.g, st2)):
                return None
            ops.append(p)
            used.add(p.id)
        st2.ops, st2.used = tuple(ops), frozenset(used)
        if it.label:
            st2.roles = st.roles + tuple((it.label, p) for p in ops[len(st.ops):])
        return st2

    def _skip(self, node: Node, st):
        """The optional node absent: its output is its input 0."""
        r_in, r_out = node.inputs[0], Out(node, 0)
        t_in, t_out = st.t.get(r_in), st.t.get(r_out)
        if t_in is None and t_out is None:
            return None
        if t_in is not None and t_out is not None and t_in != t_out:
            return None
        st2 = st.copy()
        st2.t[r_in] = st2.t[r_out] = t_in if t_in is not None else t_out
        return st2

    def _rounds(self, blk: Block, tid, st, n):
        """(state, exit tensor) after as many rounds as possible first."""
        if n < blk.max:
            for body in blk.bodies:
                for st2 in self._body(body, tid, st):
                    t2 = st2.t.get(body.exit)
                    if t2 is None or t2 == tid:
                        continue
                    yield from self._rounds(blk, t2, st2, n + 1)
        if n >= blk.min:
            yield st, tid

    def _body(self, body: Pattern, tid, st):
        st2 = st.copy()
        for i in body.inputs:   # an outside tensor of the body is any tensor in each round
            st2.t.pop(i, None)
        for it in body.items:   # the bindings of a previous round
            st2.o.pop(it, None)
            for k in list(st2.t):
                if k is it or (isinstance(k, Out) and k.node is it):
                    del st2.t[k]
        st2.t[body.entry] = tid
        yield from self._seq(body.plan(body.entry), 0, st2)


def match_all(graph, catalog: list[Pattern], accept: Callable | None = None, min_ops: int = 2) -> list[Match]:
    """Apply the catalog: higher priority first, anchors in topological order, each
    op in at most one match; for each anchor the first match (longest first)
    that ``accept`` takes."""
    topo = graph.topo_ops()
    pos = {op.id: i for i, op in enumerate(topo)}
    by_kind: dict[str, list] = {}   # kind -> its ops in topological order
    for op in topo:
        by_kind.setdefault(op.kind, []).append(op)
    taken: set[int] = set()
    found: list[Match] = []
    matcher = _Matcher(graph, taken)
    for pat in sorted(catalog, key=lambda p: -p.priority):
        if any(not n.kinds & by_kind.keys() for n in pat.items if isinstance(n, Node) and not n.optional):
            continue   # an op the pattern needs is of no kind the graph has
        kinds = pat.anchor.kinds
        for start in heapq.merge(*(by_kind.get(k, ()) for k in kinds), key=lambda o: pos[o.id]):
            if start.id in taken:
                continue
            for tries, st in enumerate(matcher.search(pat, start)):
                if tries >= MAX_TRIES:
                    break
                if len(st.ops) < min_ops:
                    continue
                roles: dict = {}
                for label, op in st.roles:
                    roles.setdefault(label, []).append(op)
                m = Match(pat, sorted(st.ops, key=lambda o: pos[o.id]),
                          {n.label: op for n, op in st.o.items() if n.label and n in pat.items}, roles)
                if pat.check is not None and not pat.check(m):
                    continue
                if accept is not None and not accept(m):
                    continue
                found.append(m)
                taken.update(o.id for o in m.ops)
                break
    return found


__all__ = ["Pattern", "Input", "Node", "Block", "Each", "Match", "MatchView", "match_all", "INF", "KERNEL_SHAPES",
           "DERIVED"]
