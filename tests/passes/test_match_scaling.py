"""Partitioning is linear in the ops: the pattern engine finds a node's
candidates in the shortest list of readers of its kinds, looks for the anchor's
siblings (readers of a tensor from outside the pattern) last and only so far,
skips patterns needing a kind the graph lacks, and the passes look ports up in
sets.  Counted, never timed (benchmarks/bench_scaling.py times it)."""
import pytest

from graphc import load_graph
from graphc.graph import Graph
from graphc.partition import partition_graph
from graphc.passes import pattern
from graphc.passes.catalog import catalog

from support.scaling import calls, chain_json, fanout_json


def work(make, n):
    g = load_graph(make(n))
    partition_graph(g)   # (the lowering rules imported, the graph's caches filled)
    return calls(partition_graph, g)[0]


@pytest.mark.parametrize("make", [
    chain_json,
    fanout_json,
    lambda n: fanout_json(n, kinds=("ReLU", "Sigmoid", "Add")),    # two_branches: unary siblings and a binary op
    lambda n: fanout_json(n, kinds=("ReLU",), then=("Add",)),      # ... each reader feeding a binary op
    lambda n: fanout_json(n, kinds=("MatMul",), then=("Multiply", "MatMul")),  # gated_mlp's up, glu and down
], ids=["chain", "fanout", "unary-siblings", "unary-siblings-into-add", "matmul-siblings-into-multiply-matmul"])
def test_partitioning_grows_linearly(make):
    """Twice the ops, twice the work (to within 5%).  A fan-out of 8k ops took
    0.96 s and 100k over 160 s: each reader of the fanned-out tensor tried every
    other one as its sibling."""
    small, large = work(make, 300), work(make, 600)
    assert 1.9 * small < large < 2.1 * small, (small, large)


def test_sibling_searches_come_last_and_producers_are_found_backwards():
    plans = {p.name: p.plan() for p in catalog()}
    # two_branches: the binary op is found from the anchor's output, the other
    # branch as the producer of its second input (no search among x's readers)
    hows = [how[0] for _, how in plans["two_branches"]]
    assert hows == ["anchor", "fwd", "bwd", "block"]
    # gated_mlp: the gate MatMul (a reader of the up MatMul's src) after every
    # node found from the anchor: only what is found from it follows (its weights'
    # optional converters, as producers of what it reads, and its activation)
    order = plans["gated_mlp"]
    gate = next(i for i, (it, _) in enumerate(order) if getattr(it, "label", "") == "gate")
    assert pattern._sibling(*order[gate])
    after = order[gate + 1:]
    assert [how[0] for _, how in after] == ["bwd", "bwd", "block"] and after[-1][0].label == "gate activation"
    assert not any(pattern._sibling(*step) for p in catalog() if p.name != "gated_mlp" for step in p.plan())


def test_sibling_candidates_are_bounded(monkeypatch):
    """A src read by many MatMuls, each into a Multiply into a MatMul (gated_mlp's
    up, glu and down, but no gate): gated_mlp tries at most MAX_SIBLINGS gate
    MatMuls per up MatMul, not every reader of the src."""
    tried = []
    bind = pattern._Matcher._bind

    def counting(self, node, op, st):
        if node.label == "gate":
            tried.append(op.id)
        return bind(self, node, op, st)
    monkeypatch.setattr(pattern._Matcher, "_bind", counting)
    g = load_graph(fanout_json(400, kinds=("MatMul",), then=("Multiply", "MatMul")))
    partition_graph(g)
    ups = 399
    assert 0 < len(tried) <= ups * pattern.MAX_SIBLINGS and len(tried) < ups * 398


def test_ports_are_looked_up_in_sets(monkeypatch):
    """Partitioning asks for the port lists a fixed number of times, whatever the
    number of partitions (each partition made a set of every output port)."""
    asked = []
    for name in ("input_ports", "output_ports"):
        prop = getattr(Graph, name)
        monkeypatch.setattr(Graph, name, property(lambda self, p=prop, n=name: asked.append(n) or p.fget(self)))
    counts = []
    for n in (100, 200):
        g = load_graph(fanout_json(n))
        asked.clear()
        partition_graph(g)
        counts.append(len(asked))
    assert counts[0] == counts[1] <= 4, counts
