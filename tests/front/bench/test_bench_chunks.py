"""A reference too large for memory: graphc bench computes it minibatch by minibatch
when the graph is separable along dim 0 (the corpus's 128 x 12 x 1370 x 1370 attention
scores are 23 GB in float64), and the reference refuses, before it allocates, a graph
that neither fits nor separates."""
import numpy as np
import pytest

from graphc import RuntimeFault, reference
from graphc.bench import chunks
from graphc.fill import make_inputs
from support.sdpa import sdpa_graph


def _rebuild(**kw):
    return lambda mb: sdpa_graph("f32", n=mb, **kw)[0]


@pytest.mark.parametrize("kw", [{"mask": "add"}, {"mask": "causal_tl", "layout": "bshd"}])
def test_minibatch_by_minibatch_equals_the_whole(kw):
    g, _ = sdpa_graph("f32", n=5, sq=20, skv=30, **kw)
    ins = make_inputs(g, 3)
    whole = reference.run(g, ins)
    budget = reference.reference_bytes(_rebuild(sq=20, skv=30, **kw)(2))   # two rows fit, not five
    assert reference.reference_bytes(g) > budget
    got = chunks.chunked_reference(g, _rebuild(sq=20, skv=30, **kw), ins, budget)
    assert got is not None and set(got) == set(whole)
    for tid in whole:
        np.testing.assert_allclose(got[tid], whole[tid], rtol=1e-6, atol=1e-7)


def test_training_backward_is_chunked():
    """ReduceSum(O * dO) over the last axis keeps the minibatch rows apart."""
    from support.sdpa import sdpa_backward_graph, sdpa_backward_inputs
    g, ids = sdpa_backward_graph("f32", n=4, h=2, sq=12, skv=20, d=8, mask="add")
    ins = sdpa_backward_inputs(g, ids)
    whole = reference.run(g, ins)
    got = chunks.chunked_reference(g, lambda mb: sdpa_backward_graph("f32", n=mb, h=2, sq=12, skv=20, d=8,
                                                                     mask="add")[0], ins, 1)
    assert got is not None
    for tid in whole:
        np.testing.assert_allclose(got[tid], whole[tid], rtol=1e-6, atol=1e-6)


def test_a_graph_mixing_rows_is_not_chunked():
    """A Dropout's random stream runs over the flat index: minibatch slices would differ."""
    g, _ = sdpa_graph("f32", n=4, sq=8, skv=8, dropout=True)
    assert chunks.chunked_reference(g, _rebuild(sq=8, skv=8, dropout=True), make_inputs(g, 0), 1) is None


def test_bench_uses_the_chunks_when_memory_is_short(monkeypatch):
    g, _ = sdpa_graph("f32", n=4, sq=16, skv=16, mask="add")
    ins = make_inputs(g, 1)
    calls = []
    run = reference.run
    monkeypatch.setattr(reference, "available_bytes", lambda: int(reference.reference_bytes(g) * 0.8))
    monkeypatch.setattr(reference, "run", lambda gr, i: calls.append(gr) or run(gr, i))
    got = chunks.reference_outputs(g, ins, _rebuild(sq=16, skv=16, mask="add"))
    rows = [c.tensors[g.input_ports[0]].shape[0] for c in calls]
    assert len(rows) >= 2 and sum(rows) == 4 and all(reference.reference_bytes(c) < reference.reference_bytes(g)
                                                     for c in calls)
    monkeypatch.undo()
    want = reference.run(g, ins)
    for tid in want:
        np.testing.assert_allclose(got[tid], want[tid], rtol=1e-6, atol=1e-7)


def test_the_reference_refuses_before_it_allocates(monkeypatch):
    g, _ = sdpa_graph("f32", n=2, sq=16, skv=16)
    monkeypatch.setattr(reference, "available_bytes", lambda: 1000)
    with pytest.raises(RuntimeFault, match="more memory than is available"):
        reference.run(g, make_inputs(g, 0))
