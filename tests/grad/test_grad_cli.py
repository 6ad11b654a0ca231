"""`graphc grad FILE.json -o train.json`: the training graph of corpus forward
cases, written as oneDNN JSON, loads, validates and runs (`graphc bench`)."""
import json

import pytest

from graphc.cli import main
from graphc.jsonio import load_graph_file

CASES = ["relu", "softmax", "lnorm"]


@pytest.mark.parametrize("name", CASES)
def test_grad_of_corpus_case_loads_and_runs(name, corpus, tmp_path, capsys):
    src, out = corpus / "f32" / f"{name}.json", tmp_path / "train.json"
    forward = load_graph_file(src)
    assert main(["grad", str(src), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "gradient dL/d" in printed and "seed dL/d" in printed
    g = load_graph_file(out)
    assert set(forward.output_ports) <= set(g.output_ports)
    assert len(g.output_ports) > len(forward.output_ports) and len(g.ops) > len(forward.ops)
    assert main(["bench", "--mode=C", "--expected-n-partitions=0", f"--case={out}"]) == 0
    assert "failed:0" in capsys.readouterr().out


def test_wrt_and_outputs_options(corpus, tmp_path, capsys):
    """--wrt picks the tensors; a wrt id no tensor has is an error naming it."""
    src, out = corpus / "f32" / "matmul.json", tmp_path / "train.json"
    first = load_graph_file(src).input_ports[0]
    assert main(["grad", str(src), "--wrt", str(first), "-o", str(out)]) == 0
    assert f"gradient dL/d{first}:" in capsys.readouterr().out
    assert len(json.loads(out.read_text())["graph"]) == 2      # the forward MatMul and one for src's gradient
    assert main(["grad", str(src), "--wrt", "12345", "-o", str(out)]) == 2
    assert "wrt (12345)" in capsys.readouterr().err
    assert main(["grad", str(src), "--wrt", "", "-o", str(out)]) == 2
    assert "no tensor to differentiate" in capsys.readouterr().err


def test_every_corpus_forward_case_gives_a_training_graph_or_unimplemented(corpus):
    """graphc.grad of every graph of the corpus (op, pattern, complex_fusion) that
    loads, for its floating-point inputs: a finalized training graph, or
    Unimplemented naming an op without a derivative (backward ops,
    quantization) - never another error."""
    import graphc
    from graphc.errors import GraphcError
    made = refused = 0
    for path in sorted(corpus.parent.glob("*/*/*.json")):
        try:
            g = load_graph_file(path)
        except GraphcError:
            continue
        wrt = [t for t in g.input_ports if g.tensors[t].dtype.value in ("f32", "bf16", "f16")]
        if not wrt:
            continue
        try:
            assert graphc.grad(g, wrt).graph.finalized
            made += 1
        except graphc.Unimplemented as e:
            assert "no derivative" in str(e) and e.op is not None, path
            refused += 1
    assert made > 100 and refused > 0
