"""graphc bench on the forms of oneDNN's pattern and complex-fusion corpus that
benchdnn accepts: knobs and broken lines of the harnesses, files dumped on a
GPU engine, by oneDNN Graph 0.6, with unknown-dim markers, strides of another
rank, declared input ports no op consumes, and per-channel scales fitted to
--in-shapes.  Graphs are built, not compiled (their fusion is another matter).
Skipped when the corpus under ../shared is absent."""
import json

import pytest

from conftest import OP_CORPUS
from graphc.bench.knobs import parse
from graphc.bench.resolve import resolve
from graphc.bench.rewrite import build_graph

GRAPH = OP_CORPUS.parent
HARNESSES = [f"pattern/harness_{t}_all" for t in ("f32", "bf16", "f16", "int8", "f8")] + \
    [f"complex_fusion/harness_{h}" for h in ("mha_all", "mlp_all", "mlp_ci", "bmb_all")]
UNKNOWN = -2 ** 63


@pytest.fixture
def graph_corpus():
    if not (GRAPH / "pattern").is_dir() or not (GRAPH / "complex_fusion").is_dir():
        pytest.skip(f"benchdnn's pattern and complex-fusion corpus not found under {GRAPH} (set GRAPHC_SHARED)")
    return GRAPH


def build(root, name, *knobs):
    case = parse(list(knobs) + [f"--case={name}"]).cases[0]
    assert case.error is None
    return build_graph(json.loads((root / name).read_text()), case.values)


@pytest.mark.parametrize("harness", HARNESSES)
def test_every_harness_line_parses(graph_corpus, harness):
    cases = parse([f"--batch={graph_corpus / harness}"]).cases
    assert cases and all(c.error is None for c in cases)
    assert all(resolve(c.path, c.batch_dirs) is not None for c in cases)


def test_harness_knobs_as_benchdnn_reads_them(graph_corpus):
    cases = parse([f"--batch={graph_corpus / 'pattern/harness_int8_all'}"]).cases
    fpmath = [c.values["attr-fpmath"] for c in cases if c.values["attr-fpmath"] is not None]
    assert {(f.mode, f.apply_to_int) for f in fpmath} == {("strict", False), ("bf16", False), ("tf32", False)}
    mha = parse([f"--batch={graph_corpus / 'complex_fusion/harness_mha_all'}"]).cases
    shapes = [c.raw["in-shapes"] for c in mha]
    # a list of 14 shapes broken over 14 lines with '\': its first and last value whole
    assert "1:1x16x32x512+2:1x16x32x512+3:1x16x32x512+5:1x1x32x32" in shapes
    assert "1:1x16x1x512+2:1x16x2049x512+3:1x16x2049x512+5:1x1x1x2049" in shapes
    assert not any("\\" in s for s in shapes)


def test_gpu_dump_runs_on_the_cpu(graph_corpus):
    doc = json.loads((graph_corpus / "complex_fusion/mha/GQA-f32.json").read_text())
    assert doc["engine_kind"] == "gpu"
    assert build(graph_corpus, "complex_fusion/mha/GQA-f32.json").engine_kind == "cpu"


def test_onednn_graph_0_6_dump_loads(graph_corpus):
    name = "pattern/int8/int8_matmul_bias_sum_fusion.json"
    assert json.loads((graph_corpus / name).read_text())["version"] == "0.6.0"
    assert build(graph_corpus, name, "--in-shapes=0:16x479+1:479x1024+2:1x1024+3:16x1024").ops


def test_unknown_dims_are_inferred(graph_corpus):
    name = "complex_fusion/mha/codegemma-bf16-f32.json"
    doc = json.loads((graph_corpus / name).read_text())
    marked = {t["id"] for od in doc["graph"] for t in od["outputs"] if t["shape"] == [UNKNOWN]}
    assert marked
    g = build(graph_corpus, name)
    assert all(g.tensors[i].is_complete for i in marked)


def test_unknown_strides_are_dense(graph_corpus):
    g = build(graph_corpus, "pattern/int8/int8_bnorm_relu_fusion.json")
    assert g.tensors[1].ndims == 4 and g.tensors[1].is_dense


def test_unconsumed_input_ports_are_left_out(graph_corpus):
    g = build(graph_corpus, "complex_fusion/mha/sdpa-compressed-k-int8-gs32.json")
    assert 6 not in g.input_ports and 0 in g.input_ports


def test_per_channel_scales_follow_in_shapes(graph_corpus):
    # pattern/harness_int8_all: 16 weight channels in the file, 4 per group after --in-shapes
    name = "pattern/int8/int8_convtranspose_post_ops_add_fusion.json"
    g = build(graph_corpus, name, "--in-shapes=0:2x20x5x5+1:20x4x3x3+2:16+3:1x1x1x1",
              "--op-attrs=5:strides:1x1*dilations:1x1*pads_begin:1x1*pads_end:1x1*groups:4")
    assert list(g.ops[4113].attr("scales")) == [2, 1, 1, 2] and list(g.ops[4113].attr("zps")) == [0] * 4
