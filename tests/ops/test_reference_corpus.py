"""graphc.reference.run executes every corpus JSON and every bundled spec; the corpus
graphs of convolution and pooling, and of quantization, MatMul and Interpolate, hold
only their ops and give outputs of the declared shapes."""
import math
import re

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
    for k in ("AddBackward", "Embedding", "EmbeddingBackward", "SwiGlu", "SwiGluGrad", "LayerNormPreAllGather",
              "AllGather", "LayerNormPostAllGather"):
        assert k in kinds, k


# ------------------------------------------------------------- corpus graphs of op families
CONV_POOL_KINDS = {"Convolution", "ConvolutionBackwardData", "ConvolutionBackwardWeights", "ConvTranspose",
                   "ConvTransposeBackwardData", "ConvTransposeBackwardWeights", "AvgPool", "AvgPoolBackward", "MaxPool",
                   "MaxPoolBackward"}


def test_conv_pool_corpus_graphs_load_and_run(corpus):
    rng = np.random.default_rng(3)
    files = sorted(p for pat in ("conv_*.json", "deconv*.json", "avgpool*.json", "maxpool*.json")
                   for p in corpus.glob(f"*/{pat}"))
    assert files
    for path in files:
        g = graphc.load_graph(path)
        assert {op.kind for op in g.ops.values()} <= CONV_POOL_KINDS, path
        ins = {t: g.tensors[t] for t in g.input_ports}
        if sum(math.prod(t.shape) for t in ins.values()) > 1 << 18:
            continue   # large shapes: loading validated their shapes; running takes seconds
        feed = {t: rng.standard_normal(lt.shape).astype(lt.dtype.np) for t, lt in ins.items()}
        out = reference.run(g, feed)
        for t, v in out.items():
            assert v.shape == g.tensors[t].shape and np.isfinite(v).all(), path


QUANT_MATMUL_INTERPOLATE = re.compile(r"^(quantize|dequantize|dynamicdq|dynamicq|matmul|interpolate).*\.json$")


def _random_input(rng, lt):
    if lt.dtype.is_float:
        return (rng.standard_normal(lt.shape) * 3).astype(lt.dtype.np)
    lo, hi = {"s8": (-128, 128), "u8": (0, 256), "s4": (-8, 8), "u4": (0, 16), "s32": (-100, 100)}[lt.dtype.value]
    return rng.integers(lo, hi, lt.shape).astype(lt.dtype.np)


def test_quant_matmul_interpolate_corpus_graphs_load_and_run(corpus):
    rng = np.random.default_rng(7)
    files = sorted(p for d in ("f32", "bf16", "f16") for p in (corpus / d).glob("*.json")
                   if QUANT_MATMUL_INTERPOLATE.match(p.name))
    assert len(files) >= 20
    for path in files:
        g = graphc.load_graph(path)
        ins = {tid: _random_input(rng, g.tensors[tid]) for tid in g.input_ports}
        outs = reference.run(g, ins)
        for tid, arr in outs.items():
            assert arr.shape == g.tensors[tid].shape, path.name
