"""The small gaps of the user's side: graphc --version, validate reporting
every error, dot drawing one edge per tensor, the README's swish.json shipped,
the distribution's LICENSE and py.typed, torch pinned only for the tests, the
launchers' rank variables."""
from __future__ import annotations

import importlib.resources
import json
import re
import sys
import tomllib
import types
from pathlib import Path

import pytest

import graphc
from graphc import Graph, LogicalTensor as L, Op, comm
from graphc.cli import main as cli_main
from graphc.dot import to_dot

ROOT = Path(__file__).resolve().parents[2]


def _lt(tid, shape=(2, 3)):
    return {"id": tid, "dtype": "f32", "shape": list(shape), "stride": [shape[1], 1], "layout_type": "strided",
            "property_type": "undef"}


def _op(oid, kind, ins, outs):
    return {"id": oid, "name": f"op{oid}", "kind": kind, "attrs": {}, "inputs": [_lt(t) for t in ins],
            "outputs": [_lt(t) for t in outs]}


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        cli_main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"graphc {graphc.__version__}"


def test_validate_reports_every_error(tmp_path, capsys):
    doc = {"version": "3.0.0", "graph": [_op(0, "ReLU", [0], [1]), _op(1, "NoSuchKind", [1], [2]),
                                         _op(2, "Abs", [2], [3]), _op(3, "ReLU", [3, 9], [4])]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    assert cli_main(["validate", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith(": 2 errors")
    assert len(lines) == 3 and "NoSuchKind" in lines[1] and "graph[1]" in lines[1]
    assert "graph[3]" in lines[2]          # ReLU given two inputs: its own error, found after the first


def test_validate_ok_and_one_error(tmp_path, capsys):
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"version": "3.0.0", "graph": [_op(0, "ReLU", [0], [1])]}))
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    assert cli_main(["validate", str(good), str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("OK (1 ops, inputs [0], outputs [1])")
    assert len(out) == 2 and "not valid JSON" in out[1]


def test_dot_draws_one_edge_per_tensor():
    """Split gives two tensors to one Concat: two edges between the same ops."""
    g = Graph()
    g.add_op(Op(0, "ReLU", [L(0, "f32", [4])], [L(1, "f32", [4])]))
    g.add_op(Op(1, "Abs", [L(0, "f32", [4])], [L(2, "f32", [4])]))
    g.add_op(Op(2, "Add", [L(1, "f32", [4]), L(2, "f32", [4])], [L(3, "f32", [4])]))
    g.add_op(Op(3, "Multiply", [L(1, "f32", [4]), L(3, "f32", [4])], [L(4, "f32", [4])]))
    g.finalize()
    text = to_dot(g, g.get_partitions("debug"))
    edges = re.findall(r"op(\d+) -> op(\d+) \[label=\"(\d+):", text)
    assert sorted(edges) == sorted([("0", "2", "1"), ("1", "2", "2"), ("0", "3", "1"), ("2", "3", "3")])


def test_the_readme_swish_example_ships(capsys):
    spec = importlib.resources.files("graphc.specs") / "swish.json"
    g = graphc.load_graph(json.loads(spec.read_text()))
    assert [op.kind for op in g.ops.values()] == ["Add", "Sigmoid", "Multiply"]
    assert [list(g.tensors[t].shape) for t in g.input_ports] == [[4, 8], [8]]
    (p,) = g.get_partitions()
    assert p.pattern == "eltwise_chain"


def test_license_and_py_typed_ship():
    assert "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    assert (ROOT / "graphc" / "py.typed").is_file()
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "py.typed" in cfg["tool"]["setuptools"]["package-data"]["graphc"]
    # setuptools puts LICEN[CS]E* in the distribution's metadata unless told otherwise
    assert "license-files" not in cfg["tool"]["setuptools"] and "license-files" not in cfg["project"]


def test_torch_is_pinned_only_for_the_tests():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in cfg["dependencies"] if d.startswith("torch")]
    pinned = {extra for extra, deps in cfg["optional-dependencies"].items()
              for d in deps if re.match(r"torch\s*==", d)}
    assert pinned <= {"oracle"}


@pytest.mark.parametrize("var", ["PMIX_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "MV2_COMM_WORLD_RANK"])
def test_launcher_rank_variables(var, monkeypatch):
    for v in comm.LAUNCHER_VARS:
        monkeypatch.delenv(v, raising=False)
    assert comm.default_comm() is None
    world = object()
    fake = types.ModuleType("mpi4py")
    fake.MPI = types.SimpleNamespace(COMM_WORLD=world)
    monkeypatch.setitem(sys.modules, "mpi4py", fake)
    monkeypatch.setenv(var, "0")
    assert comm.default_comm() is world


def test_the_public_api_has_type_hints():
    """Every parameter and return of graphc's public functions and methods is
    annotated (constructors of what graphc itself builds aside: Partition,
    CompiledPartition)."""
    import inspect
    built_by_graphc = {"Partition.__init__", "CompiledPartition.__init__", "ReferencePartition.__init__"}
    missing = []

    def check(name, fn):
        sig = inspect.signature(fn)
        if sig.return_annotation is inspect.Signature.empty and not name.endswith("__init__"):
            missing.append(f"{name} -> ?")
        missing.extend(f"{name}({p.name})" for p in sig.parameters.values()
                       if p.name not in ("self", "cls") and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
                       and p.annotation is inspect.Parameter.empty)

    for name in graphc.__all__:
        obj = getattr(graphc, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, fn in vars(obj).items():
                if inspect.isfunction(fn) and (not attr.startswith("_") or attr == "__init__") \
                        and f"{name}.{attr}" not in built_by_graphc:
                    check(f"{name}.{attr}", fn)
        elif inspect.isfunction(obj):
            check(name, obj)
    assert not missing
