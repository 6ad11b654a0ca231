"""graphc.grad's driver: what the training graph holds, which ops get a
backward, gradients summed over readers, errors naming the op."""
import numpy as np
import pytest

import graphc
from graphc import reference
from support.training import chain, training_inputs


def kinds(tr):
    return [op.kind for op in tr.graph.topo_ops()]


def test_training_graph_ports():
    """The forward outputs stay outputs; one seed per output on a path, one
    gradient output per wrt tensor; the forward ops are kept as they were."""
    g, ts = chain([("f32", (2, 3)), ("f32", (3,))], [("Add", [0, 1], {}), ("ReLU", [2], {})])
    tr = graphc.grad(g, [ts[0].id, ts[1].id])
    assert isinstance(tr.graph, graphc.Graph) and tr.graph.finalized
    assert set(g.output_ports) <= set(tr.graph.output_ports)
    assert tr.grad_in(ts[3].id) in tr.graph.input_ports
    assert {tr.grad_out(ts[0].id), tr.grad_out(ts[1].id)} <= set(tr.graph.output_ports)
    assert [op.kind for op in tr.graph.topo_ops()][:2] == ["Add", "ReLU"]
    relu_bw = next(op for op in tr.graph.ops.values() if op.kind == "ReLUBackward")
    assert relu_bw.inputs[0].id == ts[3].id and relu_bw.attrs["use_dst"]   # ReLU's dst, not recomputed
    with pytest.raises(graphc.InvalidArguments, match="not a wrt tensor"):
        tr.grad_out(ts[2].id)
    with pytest.raises(graphc.InvalidArguments, match="no gradient flows"):
        tr.grad_in(ts[2].id)


def test_fan_out_is_summed_with_add():
    """x read by two ops: its gradient is the sum of both, through one Add."""
    g, ts = chain([("f32", (4,))], [("Tanh", [0], {}), ("Multiply", [0, 1], {})])
    tr = graphc.grad(g, [ts[0].id])
    feed = training_inputs(g, tr)
    got = reference.run(tr.graph, feed)
    x, dy = feed[ts[0].id].astype(np.float64), feed[tr.grad_in(ts[2].id)].astype(np.float64)
    t = np.tanh(x)
    want = dy * (t + x * (1 - t * t))
    np.testing.assert_allclose(got[tr.grad_out(ts[0].id)], want, rtol=1e-5, atol=1e-6)
    assert kinds(tr).count("Add") == 1


def test_ops_off_the_paths_get_no_backward():
    """An op on no path from wrt to an output (a branch from another input, an
    output the caller leaves out) gets no backward op."""
    g, ts = chain([("f32", (4,)), ("f32", (4,))], [("Tanh", [0], {}), ("Sigmoid", [1], {}), ("Exp", [0], {})])
    tr = graphc.grad(g, [ts[0].id], outputs=[ts[2].id, ts[3].id])
    assert "TanhBackward" in kinds(tr)
    assert "SigmoidBackward" not in kinds(tr) and "Multiply" not in kinds(tr)   # Exp's output is not chosen
    assert sorted(tr.seeds) == [ts[2].id]


def test_wrt_no_output_depends_on_gets_zeros():
    g, _ = chain([("f32", (4,)), ("f32", (4,))], [("Tanh", [0], {}), ("Sigmoid", [1], {})])
    tr = graphc.grad(g, [1], outputs=[2])
    got = reference.run(tr.graph, training_inputs(g, tr))
    assert not got[tr.grad_out(1)].any()
    assert tr.seeds == {}


def test_an_op_without_derivative_on_the_path_is_unimplemented():
    g, ts = chain([("f32", (2, 4)), ("f32", (2, 4))], [("ReLUBackward", [0, 1], {})])
    with pytest.raises(graphc.Unimplemented, match=r"op 0 \(ReLUBackward\).*no derivative"):
        graphc.grad(g, [ts[0].id])


def test_an_op_without_derivative_off_the_path_is_fine():
    g, ts = chain([("f32", (2, 4)), ("f32", (2, 4))], [("ReLUBackward", [1, 1], {}), ("Tanh", [0], {})])
    tr = graphc.grad(g, [ts[0].id])
    assert "TanhBackward" in kinds(tr)


def test_integer_outputs_carry_no_gradient():
    """GenIndex's s32 output is on no path: the float branch alone gets a backward."""
    g, ts = chain([("f32", (2, 4))], [("GenIndex", [0], {"axis": 1}, "s32"), ("Tanh", [0], {})])
    tr = graphc.grad(g, [ts[0].id])
    assert list(tr.seeds) == [ts[2].id]


@pytest.mark.parametrize("wrt", [[99], ["a"], 3])
def test_bad_wrt(wrt):
    g, _ = chain([("f32", (4,))], [("Tanh", [0], {})])
    with pytest.raises(graphc.InvalidArguments):
        graphc.grad(g, wrt)


def test_integer_wrt_is_refused():
    g, ts = chain([("s32", (4,)), ("s32", (4,))], [("Add", [0, 1], {})])
    with pytest.raises(graphc.InvalidArguments, match="floating-point"):
        graphc.grad(g, [ts[0].id])


def test_layer_norm_without_stats_gets_them():
    """keep_stats false: the training graph's LayerNorm keeps them for LayerNormBackward."""
    g, ts = chain([("f32", (2, 8))], [("LayerNorm", [0], {"keep_stats": False, "use_affine": False})])
    tr = graphc.grad(g, [ts[0].id])
    ln = next(op for op in tr.graph.ops.values() if op.kind == "LayerNorm")
    assert ln.attrs["keep_stats"] and len(ln.outputs) == 3
    assert not g.ops[0].attrs["keep_stats"]   # the forward graph is left as it was


def test_quantize_on_the_path_is_unimplemented():
    """x -> Quantize -> s8 -> Dequantize -> y: the s8 tensor lies on the path, and
    Quantize has no derivative (no silent zeros)."""
    q = {"qtype": "per_tensor", "scales": [0.5], "zps": [0]}
    g, ts = chain([("f32", (2, 4))], [("Quantize", [0], q, "s8"), ("Dequantize", [1], q, "f32")])
    with pytest.raises(graphc.Unimplemented, match=r"op 0 \(Quantize\).*no derivative"):
        graphc.grad(g, [ts[0].id])


def test_select_condition_from_the_wrt_tensor():
    """cond = x >= y (a mask computed from x) carries no gradient: only src_0 and
    src_1 do, and GreaterEqual gets no backward."""
    g, ts = chain([("f32", (4,)), ("f32", (4,))],
                  [("GreaterEqual", [0, 1], {}, "boolean"), ("Select", [2, 0, 1], {}, "f32")])
    tr = graphc.grad(g, [ts[0].id, ts[1].id])
    feed = training_inputs(g, tr)
    got = reference.run(tr.graph, feed)
    x, y, dy = (feed[i] for i in (ts[0].id, ts[1].id, tr.grad_in(ts[3].id)))
    np.testing.assert_array_equal(got[tr.grad_out(ts[0].id)], np.where(x >= y, dy, 0))
    np.testing.assert_array_equal(got[tr.grad_out(ts[1].id)], np.where(x >= y, 0, dy))


def test_running_statistics_get_zero_gradients():
    """BatchNormForwardTraining's dst does not depend on the running mean and
    variance it is given: their gradients are zeros; the batch's own
    statistics are what BatchNormTrainingBackward reads."""
    g, ts = chain([("f32", (4, 3, 2))] + [("f32", (3,))] * 2,
                  [("BatchNormForwardTraining", [0, 1, 2], {"epsilon": 1e-5, "data_format": "NCX"}, ["f32"] * 5)])
    tr = graphc.grad(g, [ts[0].id, ts[1].id, ts[2].id], outputs=[ts[3].id])
    got = reference.run(tr.graph, training_inputs(g, tr))
    assert not got[tr.grad_out(ts[1].id)].any() and not got[tr.grad_out(ts[2].id)].any()
    assert got[tr.grad_out(ts[0].id)].any()


def test_wrt_an_intermediate_tensor():
    """wrt h = tanh(x) as well as x: h's gradient is the one reaching it, x's
    flows on through TanhBackward."""
    g, ts = chain([("f32", (4,))], [("Tanh", [0], {}), ("Exp", [1], {})])
    tr = graphc.grad(g, [ts[0].id, ts[1].id])
    feed = training_inputs(g, tr)
    got = reference.run(tr.graph, feed)
    x, dy = feed[ts[0].id].astype(np.float64), feed[tr.grad_in(ts[2].id)].astype(np.float64)
    dh = dy * np.exp(np.tanh(x))
    np.testing.assert_allclose(got[tr.grad_out(ts[1].id)], dh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got[tr.grad_out(ts[0].id)], dh * (1 - np.tanh(x) ** 2), rtol=1e-5, atol=1e-6)


def test_a_path_through_statistics_is_unimplemented():
    """LayerNorm's mean read by another op on the way to an output: the gradient
    through the mean is not given (Unimplemented); the mean as a mere graph
    output gets no seed instead."""
    g, ts = chain([("f32", (2, 8))], [("LayerNorm", [0], {"use_affine": False}, ["f32"] * 3),
                                      ("Tanh", [2], {})])
    with pytest.raises(graphc.Unimplemented, match=r"op 0 \(LayerNorm\), output 'mean'.*carries no gradient"):
        graphc.grad(g, [ts[0].id])
    g, ts = chain([("f32", (2, 8))], [("LayerNorm", [0], {"use_affine": False}, ["f32"] * 3)])
    tr = graphc.grad(g, [ts[0].id])
    assert list(tr.seeds) == [ts[1].id]
