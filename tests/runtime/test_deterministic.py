"""Deterministic mode: the graph attribute (constructor, JSON, bench knob) and
bitwise-identical outputs over 20 runs and 1, 2 and 8 numba threads for every
corpus family with a reduction (tests/support/determinism.py, one process per
thread count)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import graphc
from graphc import Graph, InvalidArguments, LogicalTensor as L, Op
from graphc.bench.knobs import parse
from graphc.codegen import kernel

from conftest import OP_CORPUS, SHARED
from support import determinism

HARNESS = Path(determinism.__file__)


def _graph(**kw):
    g = Graph(**kw)
    g.add_op(Op(0, "ReLU", [L(0, "f32", [4])], [L(1, "f32", [4])]))
    return g.finalize()


def test_the_attribute():
    assert _graph().get_deterministic() is False
    g = _graph(deterministic=True)
    assert g.get_deterministic() is True
    doc = graphc.dump_graph(g)
    assert doc["deterministic"] is True and "deterministic" not in graphc.dump_graph(_graph())
    assert graphc.load_graph(doc).deterministic is True
    assert graphc.load_graph(doc | {"deterministic": "false"}).deterministic is False
    with pytest.raises(InvalidArguments, match="expected a boolean"):
        graphc.load_graph(doc | {"deterministic": "yes"})
    with pytest.raises(InvalidArguments, match="deterministic must be a boolean"):
        Graph(deterministic="yes")


def test_the_bench_knob():
    assert parse(["--deterministic", "--case=a.json"]).globals.deterministic is True
    assert parse(["--case=a.json"]).globals.deterministic is False


def test_kernels_are_planned_for_a_fixed_thread_count():
    assert kernel.plan_threads() == kernel.NUM_THREADS
    with kernel.deterministic(True):
        assert kernel.plan_threads() == kernel.DETERMINISTIC_THREADS
    assert kernel.plan_threads() == kernel.NUM_THREADS


def _runs(threads: int, names: list[str]) -> dict:
    env = dict(os.environ, NUMBA_NUM_THREADS=str(threads), GRAPHC_SHARED=str(SHARED))
    done = subprocess.run([sys.executable, str(HARNESS), "--deterministic", "--runs", "20", *names],
                          capture_output=True, text=True, env=env, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_bitwise_identical_over_runs_and_thread_counts():
    names = list(determinism.SDPA_CASES)
    if OP_CORPUS.is_dir():
        names = list(determinism.CORPUS_CASES) + names
    by_threads = {t: _runs(t, names) for t in (1, 2, 8)}
    for name in names:
        for t, result in by_threads.items():
            assert result[name]["same"], f"{name}: runs differ at {t} threads"
        hashes = {t: tuple(result[name]["hashes"]) for t, result in by_threads.items()}
        assert len(set(hashes.values())) == 1, f"{name}: outputs differ between thread counts {hashes}"


@pytest.mark.parametrize("deterministic", [False, True])
def test_numba_set_num_threads_at_run_changes_no_bit(deterministic):
    """Fewer active threads than the pool (numba.set_num_threads) run the same
    chunks: the same bits, with or without the flag (docs/design.md)."""
    import numba
    import numpy as np
    g, inputs = determinism.graph_and_inputs("sdpa", deterministic)
    cg = graphc.compile(g)
    pool = numba.config.NUMBA_NUM_THREADS
    before = numba.get_num_threads()
    outs = []
    try:
        for n in sorted({1, pool}):
            numba.set_num_threads(n)
            outs.append({t: a.copy() for t, a in cg.run(inputs).items()})
    finally:
        numba.set_num_threads(before)
    for t in outs[0]:
        assert all(np.array_equal(o[t].view(np.uint8), outs[0][t].view(np.uint8)) for o in outs)
