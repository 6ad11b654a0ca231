"""A compile over a second on a terminal shows a tqdm bar over its partitions;
otherwise (shorter, not a terminal, verbose lines on) nothing."""
from __future__ import annotations

import io

import pytest

import graphc
from graphc import Graph, LogicalTensor as L, Op, verbose
from graphc.compiler import progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def _graph():
    g = Graph()
    g.add_op(Op(0, "MatMul", [L(0, "f32", [4, 8]), L(1, "f32", [8, 4])], [L(2, "f32", [4, 4])]))
    g.add_op(Op(1, "SoftMax", [L(2, "f32", [4, 4])], [L(3, "f32", [4, 4])], attrs={"axis": 1}))
    g.add_op(Op(2, "ReduceSum", [L(3, "f32", [4, 4])], [L(4, "f32", [4])], attrs={"axes": [1]}))
    return g.finalize()


@pytest.mark.parametrize("after, tty, level, shown", [(0.0, True, 0, True), (100.0, True, 0, False),
                                                      (0.0, False, 0, False), (0.0, True, 1, False)])
def test_progress_bar(monkeypatch, after, tty, level, shown):
    err = Terminal() if tty else io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    monkeypatch.setattr(progress, "AFTER_SECONDS", after)
    verbose.set_verbose(level)
    try:
        cg = graphc.compile(_graph())
    finally:
        verbose.set_verbose(0)
    assert len(cg.compiled) == 3
    text = err.getvalue()
    if shown:
        assert "graphc compile" in text and "/3 [" in text and "partition" in text   # (updates are rate-limited)
    else:
        assert "graphc compile" not in text
