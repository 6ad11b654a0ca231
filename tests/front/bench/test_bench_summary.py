"""graphc bench --summary (partitions, kernels, patterns, impl strings per case)
and -v in performance mode (CompiledGraph.profile's table per case)."""
import json
import re

from graphc.cli import main as cli_main

FLOAT = r"[0-9.e+-]+"


def _tensor(tid, shape):
    return {"id": tid, "dtype": "f32", "shape": shape, "stride": [shape[1], 1], "layout_type": "strided",
            "property_type": "undef"}


def _op(oid, kind, ins, outs, attrs=None):
    return {"id": oid, "name": f"op{oid}", "kind": kind, "attrs": attrs or {}, "inputs": ins, "outputs": outs}


def matmul_softmax_case(tmp_path):
    """MatMul -> ReLU (one anchor kernel), then SoftMax (a partition of its own)."""
    a, b, c, d, e = _tensor(0, [8, 16]), _tensor(1, [16, 4]), _tensor(2, [8, 4]), _tensor(3, [8, 4]), _tensor(4, [8, 4])
    doc = {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "input_ports": [0, 1],
           "output_ports": [4],
           "graph": [_op(0, "MatMul", [a, b], [c]), _op(1, "ReLU", [c], [d]),
                     _op(2, "SoftMax", [d], [e], {"axis": {"type": "s64", "value": 1}})]}
    path = tmp_path / "mm_softmax.json"
    path.write_text(json.dumps(doc))
    return path


def bench(capsys, *argv):
    rc = cli_main(["bench", *argv])
    return rc, capsys.readouterr().out.splitlines()


def test_summary_lists_every_partition(capsys, tmp_path):
    case = matmul_softmax_case(tmp_path)
    rc, lines = bench(capsys, "--summary", "--expected-n-partitions=2", f"--case={case}")
    assert rc == 0, lines
    assert lines[0].startswith("0:PASSED")
    rows = [ln for ln in lines if ln.startswith("summary,0,")]
    assert [r.split(",")[2:4] for r in rows] == [["partition 0", "pattern matmul_post_ops"],
                                                 ["partition 1", "pattern -"]]
    assert rows[0].split(",")[4:] and rows[0].split(",")[4] == "kernel MatMul+ReLU"
    assert re.fullmatch(r"impl anchor:MatMul\+ReLU/(dnnl|mkl|openblas)_sgemm", rows[0].split(",")[5])
    assert rows[1].split(",")[4:] == ["kernel SoftMax", "impl op:SoftMax"]
    totals = [ln for ln in lines if ln.startswith("summary,impl ")]
    assert len(totals) == 2 and all(t.endswith(",partitions 1") for t in totals)


def test_no_summary_without_the_knob(capsys, tmp_path):
    rc, lines = bench(capsys, "--expected-n-partitions=2", f"--case={matmul_softmax_case(tmp_path)}")
    assert rc == 0 and not [ln for ln in lines if ln.startswith("summary")]


def test_perf_verbose_prints_the_profile(capsys, tmp_path):
    rc, lines = bench(capsys, "--mode=P", "-v", "--fix-times-per-prb=3", "--expected-n-partitions=2",
                      f"--case={matmul_softmax_case(tmp_path)}")
    assert rc == 0, lines
    prof = [ln[len("[profile] "):] for ln in lines if ln.startswith("[profile] ")]
    assert prof[0].split()[:2] == ["part", "ms"]
    rows = [p.split() for p in prof[1:-1]]
    assert [r[0] for r in rows] == ["0", "1"]
    assert rows[0][-1].startswith("anchor:MatMul+ReLU") and rows[1][-1] == "op:SoftMax"
    assert re.fullmatch(rf"sum {FLOAT} ms; the run alone {FLOAT} ms", prof[-1])


def test_bad_summary_value(capsys):
    assert cli_main(["bench", "--summary=maybe", "--case=x.json"]) == 2
