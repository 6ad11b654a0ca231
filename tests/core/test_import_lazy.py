"""``import graphc`` loads only what building and loading graphs needs: numba,
networkx, scipy and torch come with their first use (checked in a fresh
interpreter, through sys.modules)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

import graphc
from graphc.graph import topological_order

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("numba", "networkx", "scipy", "torch", "llvmlite")


def _modules_after(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_graphc_loads_no_heavy_module():
    loaded = _modules_after("import graphc")
    assert not loaded & set(HEAVY)
    assert "graphc.compiler" not in loaded


def test_building_a_graph_needs_no_networkx():
    loaded = _modules_after(
        "import graphc\n"
        "from graphc import Graph, LogicalTensor, Op\n"
        "g = Graph()\n"
        "x, y, z = (LogicalTensor(i, 'f32', (2, 3)) for i in range(3))\n"
        "g.add_op(Op(0, 'ReLU', [x], [y]))\n"
        "g.add_op(Op(1, 'Abs', [y], [z]))\n"
        "g.finalize()\n"
        "assert [o.id for o in g.topo_ops()] == [0, 1]")
    assert "networkx" not in loaded


def test_lazy_names_resolve_to_graphc_compiler():
    import graphc.compiler as compiled
    for name in ("compile", "run", "CompiledGraph", "CompiledPartition", "ReferencePartition", "FallbackWarning",
                 "set_constant_tensor_cache", "get_constant_tensor_cache_capacity"):
        assert getattr(graphc, name) is getattr(compiled, name)
        assert name in dir(graphc)
    assert set(graphc.__all__) <= set(dir(graphc))


def test_submodules_resolve_as_attributes():
    loaded = _modules_after("import graphc\nassert callable(graphc.reference.run)")
    assert "graphc.reference" in loaded


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_thing"):
        graphc.no_such_thing   # noqa: B018


def test_topological_order_takes_the_smallest_ready_id():
    succ = {5: {1: 0}, 3: {1: 0}, 1: {}, 0: {}}
    assert topological_order([5, 3, 1, 0], succ) == [0, 3, 5, 1]
    assert topological_order([1, 2], {1: {2: 0}, 2: {1: 0}}) is None
    assert topological_order([7], {7: {7: 0}}) is None


def test_nx_view_matches_the_edges():
    from graphc import Graph, LogicalTensor, Op
    g = Graph()
    x, y, z, w = (LogicalTensor(i, "f32", (2, 3)) for i in range(4))
    g.add_op(Op(3, "Add", [y, z], [w]))      # consumer first: the edges come with the producers
    g.add_op(Op(1, "ReLU", [x], [y]))
    g.add_op(Op(2, "Abs", [x], [z]))
    assert g.edges() == [(1, 3), (2, 3)]
    nxg = g.nx
    assert sorted(nxg.nodes) == [1, 2, 3]
    assert list(nxg.edges(data="tensor")) == [(1, 3, 1), (2, 3, 2)]
    assert [o.id for o in g.finalize().topo_ops()] == [1, 2, 3]
