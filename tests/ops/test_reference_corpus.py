"""graphc.reference.run executes every corpus JSON and every bundled spec."""
import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.fill import make_inputs

from conftest import OP_CORPUS
from support import SPECS as SPEC_DIR

CORPUS = sorted(OP_CORPUS.rglob("*.json")) if OP_CORPUS.is_dir() else []
SPECS = sorted(SPEC_DIR.glob("*.json"))


def _check(path):
    g = graphc.load_graph(path)
    inputs = make_inputs(g, seed=1)
    outs = reference.run(g, inputs)
    assert set(outs) == set(g.output_ports)
    for tid, arr in outs.items():
        lt = g.tensors[tid]
        assert arr.dtype == lt.dtype.np, (path.name, tid)
        assert tuple(arr.shape) == lt.shape, (path.name, tid)
        if lt.dtype.is_float and arr.size and g.ops[g.producer[tid][0]].kind not in ("Log", "Pow", "Sqrt"):
            assert np.isfinite(arr.astype(np.float64)).any(), (path.name, tid)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_corpus_runs_in_reference(path):
    _check(path)


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.name)
def test_spec_runs_in_reference(path):
    _check(path)


def test_specs_exist_for_every_seed_op():
    kinds = {op.kind for p in SPECS for op in graphc.load_graph(p).ops.values()}
    for k in ("AddBackward", "EmbeddingBackward", "SwiGlu", "SwiGluGrad", "LayerNormPreAllGather", "AllGather",
              "LayerNormPostAllGather"):
        assert k in kinds, k
