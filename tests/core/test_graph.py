"""Graph and op validation: every rule has a negative test naming the op and
the port or attribute at fault."""
import pytest

from graphc import Graph, LogicalTensor, Op
from graphc.builder import GraphBuilder
from graphc.errors import InvalidArguments, InvalidDataType, InvalidGraph, InvalidGraphOp, InvalidShape
from graphc.ops import all_kinds


def lt(tid, shape=(2, 3), dtype="f32", **kw):
    return LogicalTensor(tid, dtype, shape, **kw)


def graph_of(*ops) -> Graph:
    g = Graph()
    for op in ops:
        g.add_op(op)
    return g


def add_one(kind, ins, outs, attrs=None, oid=7, name="node"):
    """Add one op (id 7, name 'node') to a fresh graph; returns the op."""
    return Graph().add_op(Op(oid, kind, ins, outs, attrs, name))


def names(err, *words, oid=7, kind=None, name="node"):
    """Assert the error text names the op (id, kind and name) and each of ``words``."""
    text = str(err.value)
    if kind is not None:
        assert f'op {oid} ({kind} "{name}")' in text, text
    for w in words:
        assert w in text, (w, text)


def needs(kind):
    if kind not in all_kinds():
        pytest.skip(f"op kind {kind} is not registered yet")


# ----------------------------------------------------------------------- op kinds
def test_unknown_kind_suggests_close_kinds():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("ReLu", [lt(0)], [lt(1)])
    names(e, "unknown op kind", "did you mean ReLU", "'ReLu'", kind="ReLu")


def test_unknown_kind_without_a_close_match():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("Zzyzx", [lt(0)], [lt(1)])
    names(e, "unknown op kind", "'Zzyzx'", kind="Zzyzx")
    assert "did you mean" not in str(e.value)


def test_kind_must_be_a_string():
    with pytest.raises(InvalidGraphOp) as e:
        add_one(42, [lt(0)], [lt(1)])
    names(e, "kind must be a string", "42")


# --------------------------------------------------------------------------- arity
@pytest.mark.parametrize("kind,ins,outs,what,found", [
    ("ReLU", [], [lt(1)], "inputs", "found 0"),
    ("ReLU", [lt(0), lt(2)], [lt(1)], "inputs", "found 2"),
    ("ReLU", [lt(0)], [], "outputs", "found 0"),
    ("ReLU", [lt(0)], [lt(1), lt(2)], "outputs", "found 2"),
    ("ReLUBackward", [lt(0)], [lt(1)], "inputs", "found 1"),
    ("ReLUBackward", [lt(0), lt(2), lt(3)], [lt(1)], "inputs", "found 3"),
])
def test_wrong_arity(kind, ins, outs, what, found):
    with pytest.raises(InvalidGraphOp) as e:
        add_one(kind, ins, outs)
    names(e, f"wrong number of {what}", found, kind=kind)


def test_arity_message_lists_the_ports():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("ReLUBackward", [lt(0)], [lt(1)])
    names(e, "src", "diff_dst", "expected 2")


# ---------------------------------------------------------------------- attributes
def test_missing_required_attribute():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("Clamp", [lt(0)], [lt(1)], {"min": 0.0})
    names(e, "missing required attribute", "attribute 'max'", "f32", kind="Clamp")


def test_unknown_attribute():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("Clamp", [lt(0)], [lt(1)], {"min": 0.0, "max": 1.0, "maximum": 2.0})
    names(e, "unknown attribute", "attribute 'maximum'", "min, max", kind="Clamp")


def test_attribute_on_an_op_without_attributes():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("ReLU", [lt(0)], [lt(1)], {"alpha": 0.5})
    names(e, "unknown attribute", "attribute 'alpha'", "(none)", kind="ReLU")


@pytest.mark.parametrize("kind,attrs,bad,typ", [
    ("Clamp", {"min": "zero", "max": 1.0}, "min", "f32"),
    ("Clamp", {"min": True, "max": 1.0}, "min", "f32"),
    ("Clamp", {"min": [0.0], "max": 1.0}, "min", "f32"),
    ("Clamp", {"min": 0.0, "max": None}, "max", "f32"),
    ("Elu", {"alpha": 10 ** 400}, "alpha", "f32"),
    ("GELU", {"mode": 3}, "mode", "string"),
    ("ReLUBackward", {"use_dst": "maybe"}, "use_dst", "bool"),
    ("ReLUBackward", {"use_dst": 2}, "use_dst", "bool"),
])
def test_attribute_of_the_wrong_type(kind, attrs, bad, typ):
    ins = [lt(0), lt(2)] if kind.endswith("Backward") else [lt(0)]
    with pytest.raises(InvalidGraphOp) as e:
        add_one(kind, ins, [lt(1)], attrs)
    names(e, "wrong type", f"attribute '{bad}'", f"expected {typ}", kind=kind)


def test_attribute_out_of_range():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("Elu", [lt(0)], [lt(1)], {"alpha": -0.5})
    names(e, "out of range", "attribute 'alpha'", "non-negative", "-0.5", kind="Elu")


def test_attribute_not_in_choices():
    with pytest.raises(InvalidGraphOp) as e:
        add_one("GELU", [lt(0)], [lt(1)], {"mode": "gelu_fast"})
    names(e, "not supported", "attribute 'mode'", "gelu_erf", "gelu_tanh", "'gelu_fast'", kind="GELU")


def test_attribute_defaults_and_coercion():
    op = add_one("ReLUBackward", [lt(0), lt(2)], [lt(1)], {"use_dst": "false"})
    assert op.attr("use_dst") is False
    assert add_one("GELU", [lt(0)], [lt(1)]).attr("mode") == "gelu_erf"
    assert add_one("Elu", [lt(0)], [lt(1)], {"alpha": 1}).attr("alpha") == 1.0


# --------------------------------------------------------------------------- dtypes
@pytest.mark.parametrize("kind,dtypes,found", [
    ("ReLU", ["f32", "bf16"], "src=f32, dst=bf16"),
    ("ReLU", ["s8", "s8"], "src=s8, dst=s8"),
    ("ReLUBackward", ["f32", "bf16", "f32"], "src=f32, diff_dst=bf16, diff_src=f32"),
])
def test_dtype_combination_outside_the_table(kind, dtypes, found):
    ts = [lt(i, dtype=d) for i, d in enumerate(dtypes)]
    with pytest.raises(InvalidDataType) as e:
        add_one(kind, ts[:-1], ts[-1:])
    names(e, "unsupported data type combination", found, kind=kind)


def test_dtype_rows_of_the_table_are_accepted():
    for d in ("f32", "bf16", "f16"):
        add_one("ReLU", [lt(0, dtype=d)], [lt(1, dtype=d)])


# --------------------------------------------------------------------------- shapes
def test_broadcast_incompatible_shapes():
    needs("Add")
    with pytest.raises(InvalidShape) as e:
        add_one("Add", [lt(0, (2, 3)), lt(1, (4,))], [lt(2, (-1, -1))])
    names(e, "broadcast", "[2, 3]", "[1, 4]", kind="Add")


def test_broadcast_shape_inference():
    needs("Add")
    op = add_one("Add", [lt(0, (2, 1, 3)), lt(1, (4, 1))], [lt(2, (-1, -1, -1))])
    assert op.outputs[0].shape == (2, 4, 3)
    op = add_one("Add", [lt(0, (-1, 3)), lt(1, (5, 1))], [lt(2, (-1, -1))])
    assert op.outputs[0].shape == (5, 3)


def test_no_broadcast_when_disabled():
    needs("Add")
    with pytest.raises(InvalidShape) as e:
        add_one("Add", [lt(0, (2, 3)), lt(1, (1, 3))], [lt(2)], {"auto_broadcast": "none"})
    names(e, "auto_broadcast", kind="Add")


def test_cross_port_shape_rule():
    with pytest.raises(InvalidShape) as e:
        add_one("ReLUBackward", [lt(0, (2, 3)), lt(2, (3, 2))], [lt(1, (-1, -1))])
    names(e, "same shape", "port 'diff_dst'", kind="ReLUBackward")


def test_declared_output_shape_contradicting_inference():
    with pytest.raises(InvalidShape) as e:
        add_one("ReLU", [lt(0, (2, 3))], [lt(1, (2, 4))])
    names(e, "differs from the inferred", "output 0 (dst, tensor 1)", "[2, 3]", "[2, 4]", kind="ReLU")


def test_declared_output_rank_contradicting_inference():
    with pytest.raises(InvalidShape) as e:
        add_one("Abs", [lt(0, (2, 3))], [lt(1, (2, 3, 1))])
    names(e, "rank", "output 0 (dst, tensor 1)", kind="Abs")


def test_contradiction_found_while_finalizing_names_the_op():
    # tensor 0's shape is known only through op 1, so op 0's output is resolved at finalize,
    # where it contradicts what op 2 declares for its input.
    g = graph_of(Op(0, "Abs", [lt(0, (-1, -1))], [lt(1, (-1, -1))], name="a"),
                 Op(1, "ReLU", [lt(0, (2, 3))], [lt(2)], name="b"),
                 Op(2, "Abs", [lt(1, (2, 4))], [lt(3, (-1, -1))], name="c"))
    with pytest.raises(InvalidShape) as e:
        g.finalize()
    names(e, "input 0 (tensor 1)", "[2, 3]", "[2, 4]", oid=2, kind="Abs", name="c")
    assert not g.finalized


# ----------------------------------------------------------------------- the graph
def test_tensor_with_two_dtypes():
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)], name="first"))
    with pytest.raises(InvalidGraph) as e:
        g.add_op(Op(7, "Abs", [lt(1, dtype="bf16")], [lt(2, dtype="bf16")], name="node"))
    names(e, "different data types", "input 0 (tensor 1)", "f32", "bf16", kind="Abs")


def test_a_rejected_op_leaves_the_graph_unchanged():
    needs("Add")
    g = graph_of(Op(0, "ReLU", [lt(0, (-1, 3))], [lt(1, (-1, -1))], name="first"))
    with pytest.raises(InvalidShape):  # input 0 is fine (and tells dim 0), input 1 has the wrong rank
        g.add_op(Op(7, "Add", [lt(0, (2, 3)), lt(1, (2, 1, 3))], [lt(2, (-1, -1, -1))], name="node"))
    assert sorted(g.ops) == [0] and sorted(g.tensors) == [0, 1] and g.tensor(0).shape == (-1, 3)
    g.add_op(Op(7, "Abs", [lt(1, (5, 3))], [lt(2, (-1, -1))], name="node"))
    assert g.finalize().tensor(2).shape == (5, 3)


def test_tensor_with_two_shapes():
    g = graph_of(Op(0, "ReLU", [lt(0, (2, 3))], [lt(1, (2, 3))], name="first"))
    with pytest.raises(InvalidShape) as e:
        g.add_op(Op(7, "Abs", [lt(0, (3, 2))], [lt(2, (-1, -1))], name="node"))
    names(e, "different shapes", "input 0 (tensor 0)", "[2, 3]", "[3, 2]", kind="Abs")
    with pytest.raises(InvalidShape) as e:
        g.add_op(Op(7, "Abs", [lt(1, (2, 3, 1))], [lt(2, (-1, -1, -1))], name="node"))
    names(e, "different shapes", "input 0 (tensor 1)", kind="Abs")


def test_tensor_produced_twice():
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)], name="first"))
    with pytest.raises(InvalidGraph) as e:
        g.add_op(Op(7, "Abs", [lt(2)], [lt(1)], name="node"))
    names(e, "produced twice", "output 0 (tensor 1)", "op 0", kind="Abs")


def test_tensor_produced_twice_by_one_op():
    needs("Wildcard")
    with pytest.raises(InvalidGraph) as e:
        add_one("Wildcard", [lt(0)], [lt(1), lt(1)])
    names(e, "produced twice", "output 1 (tensor 1)", kind="Wildcard")


def test_cycle():
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)], name="ping"), Op(1, "Abs", [lt(1)], [lt(0)], name="pong"))
    with pytest.raises(InvalidGraph) as e:
        g.finalize()
    names(e, "cycle", 'Op(0, ReLU "ping"', 'Op(1, Abs "pong"')


def test_self_loop():
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(0)], name="loop"))
    with pytest.raises(InvalidGraph) as e:
        g.finalize()
    names(e, "cycle", 'Op(0, ReLU "loop"')


def test_duplicate_op_id():
    g = graph_of(Op(7, "ReLU", [lt(0)], [lt(1)], name="first"))
    with pytest.raises(InvalidGraph) as e:
        g.add_op(Op(7, "Abs", [lt(1)], [lt(2)], name="node"))
    names(e, "duplicate op id", 'Op(7, ReLU "first"', kind="Abs")


def test_empty_graph():
    with pytest.raises(InvalidGraph, match="no ops"):
        Graph().finalize()


def test_declared_ports_must_exist():
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)]))
    g.set_ports(inputs=[5])
    with pytest.raises(InvalidGraph, match=r"input_ports \(5\)"):
        g.finalize()
    # a declared output the graph does not have is left out, as benchdnn does
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)]))
    g.set_ports(outputs=[9])
    assert g.finalize().output_ports == [1] and g.ignored_output_ports == [9]


@pytest.mark.parametrize("inputs, producer", [([0, 2], 'output 0 (dst) of op 1 (Abs "last")'),    # consumed by no op
                                             ([0, 1], 'output 0 (dst) of op 0 (ReLU "first")')])  # consumed by op 1
def test_a_declared_input_port_an_op_produces(inputs, producer):
    """A tensor an op computes cannot be fed: the error names the port and its producer
    (not 'not consumed by any op', and not accepted with its value ignored)."""
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)], name="first"), Op(1, "Abs", [lt(1)], [lt(2)], name="last"))
    g.set_ports(inputs=inputs)
    with pytest.raises(InvalidGraph) as e:
        g.finalize()
    names(e, f"input_ports ({inputs[1]})", "declared input port names a tensor an op produces", producer)
    assert "not consumed" not in str(e.value) and not g.finalized


@pytest.mark.parametrize("kw,what", [({"engine_kind": "gpu"}, "engine kind"), ({"fpmath_mode": "fast"}, "fpmath")])
def test_bad_graph_settings(kw, what):
    with pytest.raises(InvalidArguments, match=what):
        Graph(**kw)


def test_bad_op_construction():
    with pytest.raises(InvalidArguments, match="op id"):
        Op(-1, "ReLU", [lt(0)], [lt(1)])
    with pytest.raises(InvalidArguments, match="input 0 is not a LogicalTensor"):
        Op(0, "ReLU", [0], [lt(1)])
    with pytest.raises(InvalidArguments, match="attrs must be a dict"):
        Op(0, "ReLU", [lt(0)], [lt(1)], attrs=[("a", 1)])
    with pytest.raises(InvalidArguments, match="expects an Op"):
        Graph().add_op("ReLU")


def test_unnamed_op_is_described_by_id_and_kind():
    with pytest.raises(InvalidGraphOp) as e:
        Graph().add_op(Op(3, "ReLU", [lt(0)], []))
    assert "op 3 (ReLU)" in str(e.value)


# ------------------------------------------------------------- finalize and queries
def chain():
    """x -> ReLU -> Abs -> ReLUBackward(x, .), every output shape unknown."""
    b = GraphBuilder()
    x = b.tensor("f32", [4, 5])
    r = b.op("ReLU", [x], name="relu")[0]
    a = b.op("Abs", [r], name="abs")[0]
    d = b.op("ReLUBackward", [x, a], out=[("f32", [-1, -1])], attrs={"use_dst": False}, name="bwd")[0]
    return b.graph, x, r, a, d


def test_shape_inference_through_a_chain():
    g, x, r, a, d = chain()
    g.finalize()
    for t in (r, a, d):
        assert g.tensor(t.id).shape == (4, 5) and g.tensor(t.id).strides == (5, 1)
    assert [op.outputs[0].shape for op in g.topo_ops()] == [(4, 5)] * 3


def test_unknown_dims_resolved_from_another_consumer():
    g = graph_of(Op(0, "ReLU", [lt(0, (-1, 3))], [lt(1, (-1, -1))]),
                 Op(1, "Abs", [lt(1, (-1, -1))], [lt(2, (-1, -1))]),
                 Op(2, "Tanh", [lt(0, (2, -1))], [lt(3, (-1, -1))]))
    g.finalize()
    assert {tid: g.tensor(tid).shape for tid in range(4)} == {i: (2, 3) for i in range(4)}


def test_unknown_dims_stay_unknown():
    g = graph_of(Op(0, "ReLU", [lt(0, (-1, 3))], [lt(1, (-1, -1))]))
    g.finalize()
    assert g.tensor(1).shape == (-1, 3)


def test_finalize_is_idempotent():
    g, *_ = chain()
    assert g.finalize() is g and g.finalized
    before = dict(g.tensors)
    ops = {oid: (list(op.inputs), list(op.outputs)) for oid, op in g.ops.items()}
    assert g.finalize() is g
    assert g.tensors == before
    assert {oid: (op.inputs, op.outputs) for oid, op in g.ops.items()} == ops


def test_no_ops_after_finalize():
    g, *_ = chain()
    g.finalize()
    with pytest.raises(InvalidGraph, match="finalized"):
        g.add_op(Op(9, "ReLU", [lt(20)], [lt(21)]))


def test_input_and_output_ports():
    g, x, r, a, d = chain()
    g.finalize()
    assert g.input_ports == [x.id]
    assert g.output_ports == [d.id]
    g2 = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)]), Op(1, "Abs", [lt(2)], [lt(3)]), Op(2, "Tanh", [lt(1)], [lt(4)]))
    assert g2.input_ports == [0, 2] and g2.output_ports == [3, 4]


def test_declared_ports_win():
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)]), Op(1, "Abs", [lt(1)], [lt(2)]))
    g.set_ports(inputs=[0], outputs=[1, 2])
    g.finalize()
    assert g.input_ports == [0] and g.output_ports == [1, 2]


def test_output_consumed_only_by_end_is_a_graph_output():
    needs("End")
    g = graph_of(Op(0, "ReLU", [lt(0)], [lt(1)]), Op(1, "End", [lt(1)], []))
    g.finalize()
    assert g.output_ports == [1]
    assert [p.ops[0].kind for p in g.get_partitions("debug")] == ["ReLU"]


def test_unknown_tensor_id():
    g, *_ = chain()
    with pytest.raises(InvalidArguments, match="no such tensor"):
        g.tensor(99)


def test_partitions_one_per_op():
    g, x, r, a, d = chain()
    parts = g.get_partitions("debug")
    assert g.finalized
    assert [[op.kind for op in p.ops] for p in parts] == [["ReLU"], ["Abs"], ["ReLUBackward"]]
    assert [[t.id for t in p.inputs] for p in parts] == [[x.id], [r.id], [x.id, a.id]]
    assert [[t.id for t in p.outputs] for p in parts] == [[r.id], [a.id], [d.id]]
    assert all(t.shape == (4, 5) for p in parts for t in p.inputs + p.outputs)
    assert [p.id for p in parts] == [0, 1, 2]


def test_partitions_cover_every_op_once():
    g, x, r, a, d = chain()
    parts = g.get_partitions("fusion")
    assert sorted(op.id for p in parts for op in p.ops) == sorted(g.ops)
    inner = {t.id for p in parts for t in p.inputs + p.outputs}
    assert {x.id, d.id} <= inner


@pytest.mark.parametrize("policy", ["max", "", None, "Fusion"])
def test_bad_partition_policy(policy):
    g, *_ = chain()
    with pytest.raises(InvalidArguments, match="policy"):
        g.get_partitions(policy)


def test_the_core_graph_knows_no_partitions():
    """graphc.Graph is the core graph with oneDNN's get_partitions added by the
    front layer; the core graph module imports no partitioning."""
    import ast
    from pathlib import Path

    from graphc import graph as core
    assert issubclass(Graph, core.Graph) and Graph is not core.Graph
    assert not hasattr(core.Graph, "get_partitions")
    tree = ast.parse(Path(core.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and ("partition" in m or m.startswith("passes")) for m in imported)
    from graphc.partition import partition_graph
    g, *_ = chain()
    assert [p.get_ops() for p in partition_graph(g, "debug")] == [p.get_ops() for p in g.get_partitions("debug")]


def test_first_graphs_built_at_once_see_every_op_kind():
    """Two threads building their first graphs at once: the one that does not load
    the op families waits for them (no 'unknown op kind'); checked in a fresh
    interpreter, where the families are not loaded yet."""
    import subprocess
    import sys
    code = """
import threading
from graphc import Graph, LogicalTensor, Op
errors, barrier = [], threading.Barrier(4)
def build():
    barrier.wait()
    try:
        g = Graph()
        g.add_op(Op(0, "SoftMax", [LogicalTensor(0, "f32", (2, 3))], [LogicalTensor(1, "f32", (2, 3))], {"axis": 1}))
    except Exception as e:
        errors.append(repr(e))
threads = [threading.Thread(target=build) for _ in range(4)]
for t in threads: t.start()
for t in threads: t.join()
print(errors)
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
