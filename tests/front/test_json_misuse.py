"""Loading JSON the way no well-behaved caller does: from several threads of a
fresh process at once, documents nested too deep, input ports that name
tensors an op produces."""
import json
import subprocess
import sys

import pytest

from graphc import load_graph
from graphc.errors import GraphcError, InvalidArguments, InvalidGraph


def lt(tid, shape=(2, 3)):
    return {"id": tid, "dtype": "f32", "shape": list(shape), "stride": [], "layout_type": "strided",
            "property_type": "undef"}


def add_softmax():
    """Add(0, 1) -> 2, SoftMax(2) -> 3."""
    return {"version": "3.0.0", "graph": [
        {"id": 0, "name": "add", "kind": "Add", "attrs": {}, "inputs": [lt(0), lt(1)], "outputs": [lt(2)]},
        {"id": 1, "name": "softmax", "kind": "SoftMax", "attrs": {"axis": {"type": "s64", "value": 1}},
         "inputs": [lt(2)], "outputs": [lt(3)]}]}


# --------------------------------------------------------------------- threads
def test_first_json_loads_from_threads_at_once_see_every_op_kind():
    """Four threads loading (and partitioning) their first graphs at once in a
    fresh interpreter: every op kind is registered when ``import graphc``
    returns, and the lowering rules load once behind a lock, so no thread sees
    'unknown op kind' or a partial registry."""
    code = f"""
import threading
import graphc
text = {json.dumps(json.dumps(add_softmax()))}
errors, kinds, barrier = [], [], threading.Barrier(4)
def load():
    barrier.wait()
    try:
        g = graphc.load_graph(text)
        kinds.append([p.kind for p in g.get_partitions()])
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=load) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(errors, kinds == [[p.kind for p in graphc.load_graph(text).get_partitions()]] * 4)
"""
    for _ in range(3):   # a race shows in some runs only
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
        assert out.stdout.strip().splitlines()[-1] == "[] True"


# ------------------------------------------------------------- deep and huge values
def deep(n=50_000, kind=dict):
    """A dict (or list) nested ``n`` deep."""
    x = 0
    for _ in range(n):
        x = {"a": x} if kind is dict else [x]
    return x


def put(where, value):
    """add_softmax() with ``value`` put at ``where`` (a path of keys and indices)."""
    d = add_softmax()
    target = d
    for k in where[:-1]:
        target = target[k]
    target[where[-1]] = value
    return d


@pytest.mark.parametrize("where, path", [
    (("version",), "version"),
    (("graph",), "graph"),
    (("input_ports",), "input_ports"),
    (("graph", 0, "id"), "graph[0].id"),
    (("graph", 0, "kind"), "graph[0].kind"),
    (("graph", 0, "name"), "graph[0].name"),
    (("graph", 0, "inputs", 0, "shape"), "graph[0].inputs[0].shape"),
    (("graph", 0, "inputs", 0, "dtype"), "graph[0].inputs[0].dtype"),
    (("graph", 1, "attrs", "axis", "value"), "graph[1].attrs.axis.value"),
    (("graph", 1, "attrs", "axis", "type"), "graph[1].attrs.axis.type"),
])
@pytest.mark.parametrize("kind", [dict, list])
def test_values_nested_50000_deep_are_invalid_arguments(where, path, kind):
    """A RecursionError came from quoting the value in the error (repr of the
    whole of it); errors quote containers a few levels deep."""
    with pytest.raises(GraphcError) as e:
        load_graph(put(where, deep(kind=kind)))
    assert e.value.path.startswith(path) and len(str(e.value)) < 500


def test_json_text_nested_deeper_than_the_parser_goes():
    with pytest.raises(InvalidArguments, match="not valid JSON"):
        load_graph("[" * 100_000 + "]" * 100_000)


def test_a_million_item_value_is_quoted_in_a_few_items():
    with pytest.raises(InvalidArguments) as e:
        load_graph(put(("graph", 0, "inputs", 0, "shape"), [1] * 999_999 + ["x"]))
    assert e.value.path == "graph[0].inputs[0].shape[999999]" and "found 'x'" in str(e.value)
    with pytest.raises(InvalidArguments) as e:
        load_graph(put(("graph", 0, "name"), list(range(1_000_000))))
    assert "found list [0, 1, 2," in str(e.value) and len(str(e.value)) < 300


def test_reading_a_small_file_allocates_what_it_holds(tmp_path):
    """read_graph_file asked for MAX_GRAPH_FILE_BYTES + 1 bytes at once: 256 MB
    allocated for a file of any size."""
    import tracemalloc

    from graphc.jsonio import MAX_GRAPH_FILE_BYTES, read_graph_file
    path = tmp_path / "g.json"
    path.write_text(json.dumps(add_softmax()))
    tracemalloc.start()
    try:
        text = read_graph_file(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert json.loads(text) == add_softmax() and peak < 1 << 20 < MAX_GRAPH_FILE_BYTES


def test_a_file_longer_than_its_stat_is_read_whole(tmp_path, monkeypatch):
    from graphc import jsonio
    path = tmp_path / "g.json"
    path.write_text(json.dumps(add_softmax()))
    with open(path, "rb") as f:
        assert jsonio._read_at_most(f, 1 << 30, 0) == path.read_bytes()   # a /proc file: size 0
    with open(path, "rb") as f:
        assert jsonio._read_at_most(f, 10, 0) == path.read_bytes()[:10]
    monkeypatch.setattr(jsonio, "MAX_GRAPH_FILE_BYTES", 10)
    with pytest.raises(InvalidArguments, match="graph file too large"):
        jsonio.read_graph_file(path)
