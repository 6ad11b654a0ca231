"""oneDNN Graph JSON: the benchdnn corpus loads and round-trips; malformed
documents fail with the JSON path of the fault."""
import copy
import json
from pathlib import Path

import pytest

from conftest import OP_CORPUS
from graphc import dump_graph, load_graph, save_graph
from graphc.errors import GraphcError, InvalidArguments, InvalidDataType, InvalidGraph, InvalidGraphOp, InvalidShape
from graphc.ops import aliases

CORPUS_FILES = sorted(str(p.relative_to(OP_CORPUS)) for p in OP_CORPUS.rglob("*.json")) if OP_CORPUS.is_dir() else []


def text_of(graph) -> str:
    return json.dumps(dump_graph(graph), sort_keys=True)


# --------------------------------------------------------------------------- corpus
def test_corpus_is_there(corpus):
    assert len(list(corpus.rglob("*.json"))) == len(CORPUS_FILES) > 0


@pytest.mark.parametrize("rel", CORPUS_FILES)
def test_corpus_file_round_trips(corpus, rel):
    path = corpus / rel
    original = json.loads(path.read_text())
    first = dump_graph(load_graph(path))
    second = dump_graph(load_graph(json.dumps(first)))
    assert json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)

    # what the file states survives: ops, kinds, attributes, tensor ids, dtypes and known dims
    dumped = {op["id"]: op for op in first["graph"]}
    assert sorted(dumped) == sorted(op["id"] for op in original["graph"])
    for op in original["graph"]:
        out = dumped[op["id"]]
        assert out["kind"] == aliases().get(op["kind"], op["kind"]) and out["name"] == op["name"]
        assert {k: v["value"] for k, v in out["attrs"].items()} == {k: v["value"] for k, v in op["attrs"].items()}
        assert {k: v["type"] for k, v in out["attrs"].items()} == {k: v["type"] for k, v in op["attrs"].items()}
        for port in ("inputs", "outputs"):
            assert len(out[port]) == len(op[port])
            for a, b in zip(op[port], out[port]):
                assert (a["id"], a["dtype"], len(a["shape"])) == (b["id"], b["dtype"], len(b["shape"]))
                assert all(x in (-1, y) for x, y in zip(a["shape"], b["shape"]))
                assert a.get("property_type", "undef") == b["property_type"]


# -------------------------------------------------------------------- load sources
def lt(tid, shape=(2, 3), dtype="f32"):
    return {"id": tid, "dtype": dtype, "shape": list(shape), "stride": [], "layout_type": "strided",
            "property_type": "undef"}


def doc():
    """Two ops: Elu (with an attribute), then ReLUBackward; ports declared."""
    return {"version": "3.0.0", "engine_kind": "cpu", "fpmath_mode": "strict", "fpmath_mode_apply_to_int": "false",
            "input_ports": [0, 2], "output_ports": [3],
            "graph": [
                {"id": 0, "name": "elu", "kind": "Elu", "attrs": {"alpha": {"type": "f32", "value": 0.5}},
                 "inputs": [lt(0)], "outputs": [lt(1, (-1, -1))]},
                {"id": 1, "name": "bwd", "kind": "ReLUBackward", "attrs": {"use_dst": {"type": "bool", "value": 1}},
                 "inputs": [lt(1, (-1, -1)), lt(2)], "outputs": [lt(3, (-1, -1))]}]}


def test_load_from_dict_str_bytes_and_paths(tmp_path):
    expected = text_of(load_graph(doc()))
    f = tmp_path / "g.json"
    f.write_text(json.dumps(doc()))
    for src in (json.dumps(doc()), json.dumps(doc()).encode(), "\n  " + json.dumps(doc()), f, str(f)):
        assert text_of(load_graph(src)) == expected


def test_load_does_not_modify_the_dict():
    d = doc()
    load_graph(d)
    assert d == doc()


def test_loaded_graph():
    g = load_graph(doc())
    assert g.finalized and g.input_ports == [0, 2] and g.output_ports == [3]
    assert [op.kind for op in g.topo_ops()] == ["Elu", "ReLUBackward"]
    assert g.ops[0].attr("alpha") == 0.5 and g.ops[1].attr("use_dst") is True
    assert g.tensor(3).shape == (2, 3)


def test_gpu_dump_loads_on_the_cpu():
    """A file dumped on oneDNN's GPU engine loads (and runs) on graphc's CPU engine."""
    d = doc()
    d["engine_kind"] = "gpu"
    g = load_graph(d)
    assert g.engine_kind == "cpu" and text_of(g) == text_of(load_graph(doc()))


def test_dump_format():
    d = dump_graph(load_graph(doc()))
    assert d["version"] == "3.0.0" and d["engine_kind"] == "cpu" and d["fpmath_mode"] == "strict"
    assert d["fpmath_mode_apply_to_int"] == "false"
    assert d["input_ports"] == [0, 2] and d["output_ports"] == [3]
    elu, bwd = d["graph"]
    assert elu["attrs"] == {"alpha": {"type": "f32", "value": 0.5}}
    assert bwd["attrs"] == {"use_dst": {"type": "bool", "value": True}}
    assert elu["outputs"] == [{"id": 1, "dtype": "f32", "shape": [2, 3], "stride": [3, 1], "layout_type": "strided",
                               "property_type": "undef"}]
    assert bwd["inputs"][0]["shape"] == [2, 3]


def test_dump_names_unnamed_ops_and_keeps_settings():
    d = doc()
    del d["graph"][0]["name"]
    d["fpmath_mode"], d["fpmath_mode_apply_to_int"] = "bf16", "true"
    out = dump_graph(load_graph(d))
    assert out["graph"][0]["name"] == "Elu_0"
    assert out["fpmath_mode"] == "bf16" and out["fpmath_mode_apply_to_int"] == "true"
    assert text_of(load_graph(out)) == json.dumps(out, sort_keys=True)


def test_save_and_load(tmp_path):
    g = load_graph(doc())
    for target in (tmp_path / "a.json", str(tmp_path / "b.json")):
        save_graph(g, target)
        assert text_of(load_graph(Path(target))) == text_of(g)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]
    assert json.loads((tmp_path / "a.json").read_text()) == dump_graph(g)


# --------------------------------------------------------------------- bad sources
def test_file_not_found(tmp_path):
    with pytest.raises(InvalidArguments, match="cannot read graph file") as e:
        load_graph(tmp_path / "missing.json")
    assert "missing.json" in str(e.value)
    with pytest.raises(InvalidArguments, match="cannot read graph file"):
        load_graph(str(tmp_path / "missing.json"))
    with pytest.raises(InvalidArguments, match="cannot read graph file"):
        load_graph(tmp_path)  # a directory


@pytest.mark.parametrize("content", ["", "not json", "{", '{"graph": [}', "\x00\x01"])
def test_file_that_is_not_json(tmp_path, content):
    f = tmp_path / "bad.json"
    f.write_text(content)
    with pytest.raises(InvalidArguments, match="not valid JSON"):
        load_graph(f)


@pytest.mark.parametrize("src", ["{not json", "{'graph': []}", b"\xff\xfe{", b"[" * 100000])
def test_text_that_is_not_json(src):
    with pytest.raises(InvalidArguments, match="not valid JSON"):
        load_graph(src)


@pytest.mark.parametrize("src", [None, 3, ["graph"], b"[1, 2]", b'"graph"'])
def test_not_a_graph_document(src):
    with pytest.raises(InvalidArguments):
        load_graph(src)


# ------------------------------------------------------------------ malformed docs
def edit(path, value=KeyError, d=None):
    """doc() (or ``d``) with the value at ``path`` (keys and indices) replaced, or deleted."""
    d = doc() if d is None else d
    node = d
    for k in path[:-1]:
        node = node[k]
    if value is KeyError:
        del node[path[-1]]
    else:
        node[path[-1]] = copy.deepcopy(value)
    return d


MISSING = [
    (("graph",), "graph"),
    (("graph", 0, "id"), "graph[0].id"),
    (("graph", 0, "kind"), "graph[0].kind"),
    (("graph", 1, "inputs"), "graph[1].inputs"),
    (("graph", 0, "outputs"), "graph[0].outputs"),
    (("graph", 1, "inputs", 1, "id"), "graph[1].inputs[1].id"),
    (("graph", 0, "outputs", 0, "dtype"), "graph[0].outputs[0].dtype"),
    (("graph", 0, "inputs", 0, "shape"), "graph[0].inputs[0].shape"),
    (("graph", 0, "attrs", "alpha", "type"), "graph[0].attrs.alpha.type"),
    (("graph", 0, "attrs", "alpha", "value"), "graph[0].attrs.alpha.value"),
]


@pytest.mark.parametrize("path,where", MISSING)
def test_missing_key(path, where):
    with pytest.raises(InvalidArguments, match="missing key") as e:
        load_graph(edit(path))
    assert e.value.path == where and f"at {where}:" in str(e.value)


def test_optional_keys_may_be_missing():
    for path in (("version",), ("engine_kind",), ("fpmath_mode",), ("fpmath_mode_apply_to_int",), ("input_ports",),
                 ("output_ports",), ("graph", 0, "name"), ("graph", 1, "attrs"), ("graph", 0, "inputs", 0, "stride"),
                 ("graph", 0, "inputs", 0, "layout_type"), ("graph", 0, "inputs", 0, "property_type")):
        load_graph(edit(path))


WRONG = [
    (("graph",), {}, InvalidArguments, "graph", "wrong JSON type"),
    (("graph", 0), "op", InvalidArguments, "graph[0]", "expected a JSON object"),
    (("graph", 0, "id"), "0", InvalidArguments, "graph[0].id", "wrong JSON type"),
    (("graph", 0, "id"), True, InvalidArguments, "graph[0].id", "wrong JSON type"),
    (("graph", 0, "id"), -1, InvalidArguments, "graph[0].id", "non-negative"),
    (("graph", 0, "kind"), None, InvalidArguments, "graph[0].kind", "wrong JSON type"),
    (("graph", 0, "name"), 5, InvalidArguments, "graph[0].name", "wrong JSON type"),
    (("graph", 0, "attrs"), [], InvalidArguments, "graph[0].attrs", "wrong JSON type"),
    (("graph", 0, "attrs", "alpha"), 0.5, InvalidArguments, "graph[0].attrs.alpha", "expected a JSON object"),
    (("graph", 0, "attrs", "alpha", "type"), "float", InvalidArguments, "graph[0].attrs.alpha.type",
     "unknown attribute type"),
    (("graph", 0, "attrs", "alpha", "type"), 3, InvalidArguments, "graph[0].attrs.alpha.type", "wrong JSON type"),
    (("graph", 0, "attrs", "alpha", "type"), "s64", InvalidGraphOp, "graph[0].attrs.alpha.type", "wrong type"),
    (("graph", 0, "attrs", "alpha", "value"), [0.5], InvalidArguments, "graph[0].attrs.alpha.value", "scalar"),
    (("graph", 0, "attrs", "alpha", "value"), {"x": 1}, InvalidArguments, "graph[0].attrs.alpha.value", "scalar"),
    (("graph", 1, "attrs", "use_dst", "type"), "bool[]", InvalidArguments, "graph[1].attrs.use_dst.value",
     "needs an array"),
    (("graph", 0, "inputs"), {"id": 0}, InvalidArguments, "graph[0].inputs", "wrong JSON type"),
    (("graph", 0, "inputs", 0), [0, "f32"], InvalidArguments, "graph[0].inputs[0]", "expected a JSON object"),
    (("graph", 0, "inputs", 0, "id"), 1.5, InvalidArguments, "graph[0].inputs[0].id", "wrong JSON type"),
    (("graph", 0, "inputs", 0, "id"), -3, InvalidArguments, "graph[0].inputs[0].id", "non-negative"),
    (("graph", 1, "inputs", 1, "dtype"), "f33", InvalidDataType, "graph[1].inputs[1].dtype", "unknown data type"),
    (("graph", 1, "inputs", 1, "dtype"), 32, InvalidArguments, "graph[1].inputs[1].dtype", "wrong JSON type"),
    (("graph", 0, "inputs", 0, "shape"), "2x3", InvalidArguments, "graph[0].inputs[0].shape", "wrong JSON type"),
    (("graph", 0, "inputs", 0, "shape"), [2, 2.5], InvalidArguments, "graph[0].inputs[0].shape[1]",
     "expected an integer"),
    (("graph", 0, "inputs", 0, "shape"), [2, True], InvalidArguments, "graph[0].inputs[0].shape[1]",
     "expected an integer"),
    (("graph", 0, "inputs", 0, "shape"), [2, -3], InvalidShape, "graph[0].inputs[0].shape", "dims"),
    (("graph", 0, "inputs", 0, "shape"), [2, 2 ** 63], InvalidShape, "graph[0].inputs[0].shape", "int64"),
    (("graph", 0, "inputs", 0, "stride"), [3], InvalidShape, "graph[0].inputs[0].stride", "rank"),
    (("graph", 0, "inputs", 0, "stride"), [3, "1"], InvalidArguments, "graph[0].inputs[0].stride[1]",
     "expected an integer"),
    (("graph", 0, "inputs", 0, "stride"), 1, InvalidArguments, "graph[0].inputs[0].stride", "wrong JSON type"),
    (("graph", 0, "inputs", 0, "layout_type"), "blocked", InvalidArguments, "graph[0].inputs[0].layout_type",
     "unknown layout type"),
    (("graph", 0, "outputs", 0, "property_type"), "const", InvalidArguments, "graph[0].outputs[0].property_type",
     "unknown property type"),
    (("input_ports",), 0, InvalidArguments, "input_ports", "wrong JSON type"),
    (("input_ports",), [0, "2"], InvalidArguments, "input_ports[1]", "expected an integer"),
    (("output_ports",), [None], InvalidArguments, "output_ports[0]", "expected an integer"),
    (("engine_kind",), "npu", InvalidArguments, "engine_kind", "engine kind"),
    (("engine_kind",), 0, InvalidArguments, "engine_kind", "wrong JSON type"),
    (("fpmath_mode",), "fast", InvalidArguments, "fpmath_mode", "fpmath mode"),
    (("fpmath_mode_apply_to_int",), "yes", InvalidArguments, "fpmath_mode_apply_to_int", "boolean"),
    (("fpmath_mode_apply_to_int",), 1, InvalidArguments, "fpmath_mode_apply_to_int", "wrong JSON type"),
]


@pytest.mark.parametrize("path,value,cls,where,msg", WRONG, ids=[w[3] + "=" + repr(w[1])[:20] for w in WRONG])
def test_wrong_value(path, value, cls, where, msg):
    with pytest.raises(cls, match=msg) as e:
        load_graph(edit(path, value))
    assert type(e.value) is cls
    assert e.value.path == where and f"at {where}" in str(e.value)


@pytest.mark.parametrize("version", ["2.0.0", "4.0", "1.0", "", "x", "3.x", "3.0.0-rc", "0.x", "²", " 3.0"])
def test_bad_version(version):
    with pytest.raises(InvalidArguments, match="version") as e:
        load_graph(edit(("version",), version))
    assert e.value.path == "version" and repr(version) in str(e.value)


@pytest.mark.parametrize("version", ["3", "3.0.0", "3.11.0", "0.6.0", "0.5"])
def test_good_versions(version):
    # 0.x: oneDNN Graph's preview releases wrote the same layout (the corpus has 0.6.0 dumps)
    load_graph(edit(("version",), version))


UNKNOWN = -2 ** 63   # DNNL_GRAPH_UNKNOWN_DIM, as oneDNN's dumps write it


def test_unknown_marker_of_onednn_dumps():
    # oneDNN writes [UNKNOWN] for a shape or strides it has not inferred: the shape is
    # then inferred by the op, the strides are dense
    d = doc()
    edit(("graph", 0, "outputs", 0, "shape"), [UNKNOWN], d)
    edit(("graph", 0, "outputs", 0, "stride"), [UNKNOWN], d)
    edit(("graph", 1, "inputs", 0, "shape"), [UNKNOWN], d)
    edit(("graph", 1, "inputs", 0, "stride"), [UNKNOWN], d)
    edit(("graph", 1, "outputs", 0, "stride"), [UNKNOWN], d)
    g = load_graph(d)
    assert g.tensor(1).shape == (2, 3) and g.tensor(1).strides == (3, 1)
    assert g.tensor(3).shape == (2, 3) and g.tensor(3).strides == (3, 1)


def test_unknown_marker_among_dims_is_an_unknown_dim():
    d = doc()
    edit(("graph", 0, "outputs", 0, "shape"), [2, UNKNOWN], d)
    edit(("graph", 1, "inputs", 0, "shape"), [2, UNKNOWN], d)
    assert load_graph(d).tensor(1).shape == (2, 3)


def test_version_must_be_a_string():
    with pytest.raises(InvalidArguments, match="wrong JSON type") as e:
        load_graph(edit(("version",), 3.0))
    assert e.value.path == "version"


# --------------------------------------------------- schema errors inside a document
@pytest.mark.parametrize("path,value,cls,where,words", [
    (("graph", 1, "kind"), "ReLUBackwards", InvalidGraphOp, "graph[1]", ['op 1 (ReLUBackwards "bwd")', "did you mean"]),
    (("graph", 0, "attrs", "alpha", "value"), -1.0, InvalidGraphOp, "graph[0]", ["attribute 'alpha'", "non-negative"]),
    (("graph", 0, "attrs", "beta"), {"type": "f32", "value": 1.0}, InvalidGraphOp, "graph[0]",
     ["attribute 'beta'", "unknown attribute"]),
    (("graph", 0, "outputs", 0, "dtype"), "bf16", InvalidDataType, "graph[0]", ["src=f32, dst=bf16"]),
    (("graph", 0, "outputs", 0, "shape"), [3, 2], InvalidShape, "graph[0]", ["output 0 (dst, tensor 1)"]),
    (("graph", 1, "outputs", 0, "id"), 1, InvalidGraph, "graph[1]", ["produced twice"]),
    (("graph", 1, "id"), 0, InvalidGraph, "graph[1]", ["duplicate op id"]),
    (("graph", 0, "inputs", 0, "id"), 3, InvalidGraph, "graph", ["cycle"]),
    (("input_ports",), [0, 7], InvalidGraph, "input_ports", ["input_ports (7)", "not consumed by any op"]),
    (("input_ports",), [0, 3], InvalidGraph, "input_ports",     # produced by the graph's last op
     ["input_ports (3)", "names a tensor an op produces", 'output 0 (diff_src) of op 1 (ReLUBackward "bwd")']),
    (("input_ports",), [0, 1, 2], InvalidGraph, "input_ports",  # produced, and consumed by op 1
     ["input_ports (1)", "names a tensor an op produces", 'output 0 (dst) of op 0 (Elu "elu")']),
])
def test_schema_errors_carry_the_op_path(path, value, cls, where, words):
    with pytest.raises(cls) as e:
        load_graph(edit(path, value))
    assert type(e.value) is cls and e.value.path == where
    for w in words:
        assert w in str(e.value)


def test_tensor_with_two_dtypes_in_a_document():
    d = doc()
    for port, j in (("inputs", 0), ("inputs", 1), ("outputs", 0)):
        edit(("graph", 1, port, j, "dtype"), "f16", d)
    with pytest.raises(InvalidGraph) as e:
        load_graph(d)
    assert e.value.path == "graph[1]"
    for w in ('op 1 (ReLUBackward "bwd")', "input 0 (tensor 1)", "different data types", "f32", "f16"):
        assert w in str(e.value)


def test_every_error_is_a_graphc_error():
    for path, value, cls, *_ in WRONG:
        assert issubclass(cls, GraphcError)
