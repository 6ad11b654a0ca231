"""graphc bench: running cases, result lines, summary, perf mode; graphc demo."""
import json
import re

import numpy as np
import pytest

from graphc import demo, reference
from graphc.bench import driver
from graphc.cli import main as cli_main

SMALL = "--in-shapes=0:2x3"
FLOAT = r"[0-9.e+-]+"


def bench(capsys, *argv):
    rc = cli_main(["bench", *argv])
    return rc, capsys.readouterr().out.splitlines()


def summary(lines):
    return [ln for ln in lines if ln.startswith("tests:")][0]


WILDCARD = {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "input_ports": [0], "output_ports": [1],
            "graph": [{"id": 0, "name": "w", "kind": "Wildcard", "attrs": {},
                       "inputs": [{"id": 0, "dtype": "f32", "shape": [2, 3], "stride": [3, 1],
                                   "layout_type": "strided", "property_type": "undef"}],
                       "outputs": [{"id": 1, "dtype": "f32", "shape": [2, 3], "stride": [3, 1],
                                    "layout_type": "strided", "property_type": "undef"}]}]}


def wildcard_case(tmp_path):
    """A case no build compiles: a Wildcard op (any semantics) has no kernel."""
    path = tmp_path / "wildcard.json"
    path.write_text(json.dumps(WILDCARD))
    return path


def test_mixed_batch_counts(corpus, capsys, tmp_path):
    batch = tmp_path / "mixed"
    wild = wildcard_case(tmp_path)
    batch.write_text(
        "# one of each status\n"
        f"--reset {SMALL} --case=op/f32/abs.json\n"
        f"--reset --case={wild}            # Wildcard has no kernel\n"
        f"--reset {SMALL} --op-attrs=0:alpha:abc --case=op/f32/elu.json\n"
        f"--reset {SMALL} --expected-n-partitions=2 --case=op/f32/abs.json\n"
        f"--reset {SMALL} --case=op/f32/clamp.json    # min = max = 0: all zeros\n"
        "--reset --case=op/f32/no_such_file.json\n")
    rc, lines = bench(capsys, f"--inputs-dir={corpus.parent}", f"--batch={batch}")
    assert rc == 1
    assert lines[0] == f"0:PASSED __REPRO: --graph {SMALL} --case=op/f32/abs.json"
    assert re.fullmatch(rf"1:UNIMPLEMENTED \(.*Wildcard.*\) __REPRO: --graph --case={re.escape(str(wild))}", lines[1])
    assert re.fullmatch(r"2:INVALID_ARGUMENTS \(.*alpha.*\) __REPRO: --graph --in-shapes=0:2x3 "
                        r"--op-attrs=0:alpha:abc --case=op/f32/elu\.json", lines[2])
    assert lines[3] == (f"3:FAILED (1 partitions, expected 2) __REPRO: --graph {SMALL} --expected-n-partitions=2 "
                        "--case=op/f32/abs.json")
    assert lines[4].startswith("4:PASSED __REPRO:")   # zeros for any data: checked on a second data set
    assert lines[5].startswith("5:INVALID_ARGUMENTS (case file not found) __REPRO:")
    assert summary(lines) == ("tests:6 passed:2 skipped:0 mistrusted:0 unimplemented:1 invalid_arguments:2 "
                              "failed:1 listed:0")


def test_all_passing_exits_zero(corpus, capsys):
    rc, lines = bench(capsys, "--mode=c", f"--inputs-dir={corpus.parent}", SMALL,
                      "--op-kind=0:Abs,0:Log,0:Sqrt", "--case=op/f32/abs.json")
    assert rc == 0
    assert [ln.split(" ")[0] for ln in lines[:3]] == ["0:PASSED", "1:PASSED", "2:PASSED"]
    assert summary(lines).startswith("tests:3 passed:3 ")


def test_mismatch_fails(corpus, capsys, monkeypatch):
    real = reference.run
    monkeypatch.setattr(reference, "run",
                        lambda g, ins, **kw: {k: (v + np.ones_like(v)) for k, v in real(g, ins, **kw).items()})
    rc, lines = bench(capsys, f"--inputs-dir={corpus.parent}", SMALL, "--case=op/f32/abs.json")
    assert rc == 1
    assert re.fullmatch(r"0:FAILED \(tensor 1: scaled error .* > 1\) __REPRO: .*", lines[0])
    assert summary(lines).endswith("failed:1 listed:0")


def test_perf_mode_format(corpus, capsys, tmp_path):
    wild = wildcard_case(tmp_path)
    rc, lines = bench(capsys, "--mode=P", "--fix-times-per-prb=3", f"--inputs-dir={corpus.parent}", SMALL,
                      "--case=op/f32/abs.json", "--reset", f"--case={wild}")
    assert rc == 1
    knobs = re.escape(f"{SMALL} --case=op/f32/abs.json")
    assert re.fullmatch(rf"perf,cpu,{knobs},{FLOAT},{FLOAT}", lines[0])
    assert re.fullmatch(rf"compile,{FLOAT},{FLOAT}", lines[1])
    assert lines[2].startswith("1:UNIMPLEMENTED (")
    assert lines[2].endswith(f"__REPRO: --mode=P --graph --case={wild}")
    assert summary(lines) == ("tests:2 passed:1 skipped:0 mistrusted:0 unimplemented:1 invalid_arguments:0 "
                              "failed:0 listed:0")
    total = [ln for ln in lines if ln.startswith("total perf:")][0]
    m = re.fullmatch(rf"total perf: min\(ms\):({FLOAT}) avg\(ms\):({FLOAT})", total)
    perf = lines[0].split(",")
    assert float(m.group(1)) == pytest.approx(float(perf[-2]), rel=1e-4)
    assert float(m.group(1)) <= float(m.group(2))


def test_perf_repetitions():
    out, t = driver.measure(_abs_graph(), 1, fix_times=4, max_ms=3000)
    assert out.status == driver.PASSED and 0 < t.min_ms <= t.avg_ms
    out, t = driver.measure(_abs_graph(), 1, fix_times=0, max_ms=10)
    assert t is not None


def _abs_graph():
    from graphc.builder import single_op_graph
    return single_op_graph("Abs", [("f32", (2, 3))], [("f32", (-1, -1))], {})


def test_listing_mode(capsys):
    rc, lines = bench(capsys, "--mode=L", "--mb=1,2", "--case=whatever.json")
    assert rc == 0
    assert lines[:2] == ["0:LISTED __REPRO: --mode=L --graph --mb=1 --case=whatever.json",
                         "1:LISTED __REPRO: --mode=L --graph --mb=2 --case=whatever.json"]
    assert summary(lines).endswith("failed:0 listed:2")


def test_verbose_shows_inputs(corpus, capsys):
    rc, lines = bench(capsys, "-v1", f"--inputs-dir={corpus.parent}", "--in-shapes=0:2x3*ba",
                      "--case=op/f32/abs.json")
    assert lines[0] == "[graph] inputs 0:f32:2x3*1x2; partitions 1"


@pytest.mark.parametrize("argv", [[], ["--bogus"], ["--mode=F", "--case=a.json"], ["--batch=/no/such/batch"]])
def test_usage_errors(capsys, argv):
    assert cli_main(["bench", *argv]) == 2
    assert "graphc bench" in capsys.readouterr().err


def test_demo_runs(capsys):
    rc = demo.main(None)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["case", "partitions", "compile", "ms", "execute", "ms", "max", "error", "verdict"]
    rows = {ln.split()[0]: ln.split() for ln in lines[1:] if ln.endswith(tuple(s.lower() for s in (
        driver.PASSED, driver.MISTRUSTED, driver.UNIMPLEMENTED, driver.FAILED, driver.INVALID)))}
    assert set(rows) == {f.name for f in demo.spec_files()}
    assert "swiglu.json" in rows and "layernorm_distributed.json" in rows
    assert all(r[-1] == "passed" for r in rows.values())   # every spec's ops are lowered
    assert all(float(r[-2]) <= 1.0 for r in rows.values())  # max scaled error is reported
    assert rc == 0


def test_demo_fails_on_mismatch(capsys, monkeypatch):
    real = reference.run
    monkeypatch.setattr(reference, "run",
                        lambda g, ins, **kw: {k: (v + np.ones_like(v)) for k, v in real(g, ins, **kw).items()})
    assert demo.main(None) == 1
    assert "failed" in capsys.readouterr().out


def test_integers_through_narrow_roundings_are_found_upstream():
    """The bench's comparison lets a share of an integer output differ only when it is
    computed from a bf16/f16/f8 value the graph computes (a rounding that may flip),
    not from narrow graph inputs alone."""
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    x = b.tensor("bf16", [4, 8])
    q_attrs = {"qtype": "per_tensor", "scales": [0.1], "zps": [0]}
    direct = b.op("Quantize", [b.op("TypeCast", [x], out=[("f32", [4, 8])])[0]], out=[("u8", [4, 8])],
                  attrs=q_attrs)[0]
    y = b.op("Exp", [x], out=[("bf16", [4, 8])])[0]
    rounded = b.op("Quantize", [b.op("TypeCast", [y], out=[("f32", [4, 8])])[0]], out=[("u8", [4, 8])],
                   attrs=q_attrs)[0]
    g = b.finalize()
    assert not driver.through_narrow_roundings(g, direct.id)
    assert driver.through_narrow_roundings(g, rounded.id)
