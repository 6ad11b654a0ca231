"""Views (issue 19): reshapes and transposes move no data, ``any`` layouts are
chosen by graphc, and caller buffers that overlap inputs are refused."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import graphc
from graphc import Graph, InvalidArguments, LogicalTensor as LT, Op
from graphc.fill import make_inputs
from graphc.views import reshape_strides

from support import assert_outputs, assert_same, check_compiled, one_op

RESHAPE = {"shape": [6, 4, 2], "special_zero": False}


def _reshape(dt="f32", out_strides=None):
    return one_op("StaticReshape", [(dt, [4, 12])], [(dt, [6, 4, 2])] if out_strides is None
                  else [(dt, [6, 4, 2], out_strides)], RESHAPE)


def _transpose(dt="f32", out_strides=(1, 24, 6)):
    return one_op("StaticTranspose", [(dt, [3, 4, 6])], [(dt, [6, 3, 4], list(out_strides))],
                  {"order": [2, 0, 1]})


def _cp(g):
    (p,) = g.get_partitions()
    return p.compile()


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("make,np_op", [(_reshape, lambda x: x.reshape(6, 4, 2)),
                                        (_transpose, lambda x: np.transpose(x, (2, 0, 1)))])
def test_view_partitions_return_numpy_views(dt, make, np_op):
    """No kernel: the output is the input's memory, seen as np.reshape /
    np.transpose see it, with the strides query_logical_tensor reports."""
    g = make(dt)
    cp = _cp(g)
    assert cp.is_view and cp.kernel is None and cp.source is None
    x = make_inputs(g, seed=1)[0]
    out = cp.execute({0: x})[1]
    assert np.shares_memory(out, x)
    assert out.dtype == x.dtype
    want = np_op(x)
    assert_same(out, want)
    assert tuple(s // x.itemsize for s in out.strides) == tuple(cp.query_logical_tensor(1).strides)
    assert_outputs({1: out}, graphc.reference.run(g, {0: x}))


def test_caller_outputs_hold_copies_and_in_place_is_the_view():
    g = _transpose()
    cp = _cp(g)
    assert cp.get_inplace_ports() == [(0, 1)]
    x = make_inputs(g, seed=2)[0]
    want = np.transpose(x, (2, 0, 1)).copy()
    given = np.empty_like(want)
    res = cp.execute({0: x}, outputs={1: given})
    assert res[1] is given and not np.shares_memory(given, x)
    assert_same(given, want)
    x[...] = 0                                   # a copy does not follow its input
    assert_same(given, want)
    x2 = make_inputs(g, seed=2)[0]
    inplace = np.transpose(x2, (2, 0, 1))        # the in-place port: the input's buffer seen as the output
    res = cp.execute({0: x2}, outputs={1: inplace})
    assert res[1] is inplace and np.shares_memory(inplace, x2)
    assert_same(inplace, want)


def test_overlapping_caller_output_refused():
    g = _reshape()
    cp = _cp(g)
    buf = np.arange(60, dtype=np.float32)
    x = buf[:48].reshape(4, 12)
    wrong = buf[4:52].reshape(6, 4, 2)          # overlaps the input, not as the view
    before = buf.copy()
    with pytest.raises(InvalidArguments, match=r"op 0 \(StaticReshape\).*output tensor 1 shares memory with input "
                                               r"tensor 0.*in-place port"):
        cp.execute({0: x}, outputs={1: wrong})
    assert_same(buf, before)


def test_reshape_that_needs_a_copy_runs_a_kernel():
    """src with gaps between rows cannot be reshaped across them without a copy."""
    g = one_op("StaticReshape", [("f32", [4, 12], [16, 1])], [("f32", [6, 4, 2])], RESHAPE)
    assert reshape_strides((4, 12), (16, 1), (6, 4, 2)) is None
    cp = _cp(g)
    assert not cp.is_view and cp.kernel is not None
    check_compiled(g)


def test_asked_strides_are_kept():
    """An output with strides of its own gets exactly them: a dense transpose is a
    copy (not the view np.transpose would give)."""
    g = _transpose(out_strides=(12, 4, 1))
    cp = _cp(g)
    assert not cp.is_view
    x = make_inputs(g, seed=3)[0]
    out = cp.execute({0: x})[1]
    assert not np.shares_memory(out, x) and out.flags.c_contiguous
    assert_same(out, np.transpose(x, (2, 0, 1)))


def test_any_output_of_a_view_reports_the_view_strides():
    g = Graph()
    g.add_op(Op(0, "StaticTranspose", [LT(0, "f32", [3, 4, 6])], [LT(1, "f32", [6, 3, 4], layout_type="any")],
                {"order": [2, 0, 1]}))
    g.finalize()
    cp = _cp(g)
    assert cp.is_view and cp.query_logical_tensor(1).strides == (1, 24, 6)


def _head_split_graph(any_between: bool):
    """SoftMax -> transpose -> reshape: the SoftMax partition's output, layout any,
    is written in the layout the reshape/transpose view reads."""
    lay = "any" if any_between else "strided"
    g = Graph()
    g.add_op(Op(0, "SoftMax", [LT(0, "f32", [2, 8, 4, 16])], [LT(1, "f32", [2, 8, 4, 16], layout_type=lay)],
                {"axis": -1}))
    g.add_op(Op(1, "StaticTranspose", [LT(1, "f32", [2, 8, 4, 16], layout_type=lay)],
                [LT(2, "f32", [2, 4, 8, 16], layout_type="any")], {"order": [0, 2, 1, 3]}))
    g.add_op(Op(2, "StaticReshape", [LT(2, "f32", [2, 4, 8, 16], layout_type="any")], [LT(3, "f32", [2, 4, 128])],
                {"shape": [2, 4, 128], "special_zero": False}))
    return g.finalize()


def test_any_layout_chosen_for_the_consumer_views():
    g = _head_split_graph(any_between=True)
    cg = graphc.compile(g)
    sm, views = cg.compiled
    assert sm.query_logical_tensor(1).strides == (512, 16, 128, 1)   # [2, 4, 8, 16] dense, seen as [2, 8, 4, 16]
    assert views.is_view
    assert views.query_logical_tensor(1).strides == (512, 16, 128, 1)   # accepted as written: no copy
    ins = make_inputs(g, seed=4)
    assert_outputs(cg.run(ins), graphc.reference.run(g, ins))
    dense = graphc.compile(_head_split_graph(any_between=False))
    assert not dense.compiled[1].is_view      # strides the user fixed: the views must copy
    assert_outputs(dense.run(ins), graphc.reference.run(g, ins))


# -------------------------------------------------------- views inside fused kernels
def _heads_matmul(b=2, s=8, h=4, d=16, with_views=True):
    """x [b, s, h*d] -> reshape [b, s, h, d] -> transpose [b, h, s, d] -> MatMul with
    per-head weights [h, d, d] -> transpose back -> reshape [b, s, h*d]."""
    g = Graph()
    w = LT(1, "f32", [h, d, d])
    if not with_views:
        g.add_op(Op(0, "MatMul", [LT(0, "f32", [b, h, s, d]), w], [LT(2, "f32", [b, h, s, d])]))
        return g.finalize()
    g.add_op(Op(0, "StaticReshape", [LT(0, "f32", [b, s, h * d])], [LT(2, "f32", [b, s, h, d])],
                {"shape": [b, s, h, d], "special_zero": False}))
    g.add_op(Op(1, "StaticTranspose", [LT(2, "f32", [b, s, h, d])], [LT(3, "f32", [b, h, s, d])],
                {"order": [0, 2, 1, 3]}))
    g.add_op(Op(2, "MatMul", [LT(3, "f32", [b, h, s, d]), w], [LT(4, "f32", [b, h, s, d])]))
    g.add_op(Op(3, "StaticTranspose", [LT(4, "f32", [b, h, s, d])], [LT(5, "f32", [b, s, h, d])],
                {"order": [0, 2, 1, 3]}))
    g.add_op(Op(4, "StaticReshape", [LT(5, "f32", [b, s, h, d])], [LT(6, "f32", [b, s, h * d])],
                {"shape": [b, s, h * d], "special_zero": False}))
    return g.finalize()


def test_matmul_reads_and_writes_through_the_views():
    g = _heads_matmul()
    (p,) = g.get_partitions()
    assert p.plan.shape == "anchor" and len(p.plan.views_in) == 2 and len(p.plan.views_out) == 2
    cp = p.compile()
    assert [k for k, _ in cp.arg_plan] == ["in", "in", "out"]       # no scratch: nothing is copied
    assert "gemm_f32(" in cp.source and ", 64, " in cp.source     # rows of the heads 64 floats apart
    plain = _heads_matmul(with_views=False).get_partitions()[0].compile()
    assert [k for k, _ in plain.arg_plan] == ["in", "in", "out"]
    check_compiled(g)


def test_eltwise_chain_folds_views_into_its_loop():
    g = Graph()
    g.add_op(Op(0, "StaticTranspose", [LT(0, "f32", [4, 6, 8])], [LT(1, "f32", [8, 4, 6])], {"order": [2, 0, 1]}))
    g.add_op(Op(1, "ReLU", [LT(1, "f32", [8, 4, 6])], [LT(2, "f32", [8, 4, 6])]))
    g.add_op(Op(2, "Add", [LT(2, "f32", [8, 4, 6]), LT(3, "f32", [8, 4, 6])], [LT(4, "f32", [8, 4, 6])]))
    g.add_op(Op(3, "StaticReshape", [LT(4, "f32", [8, 4, 6])], [LT(5, "f32", [8, 24])],
                {"shape": [8, 24], "special_zero": False}))
    g.finalize()
    (p,) = g.get_partitions()
    cp = p.compile()
    assert p.plan.shape == "eltwise" and [k for k, _ in cp.arg_plan] == ["in", "in", "out"]
    check_compiled(g)


def test_bf16_view_of_a_strided_input():
    """A transposed bf16 array given for a transposed layout: its buffer is viewed as is."""
    g = one_op("StaticTranspose", [("bf16", [6, 4], [1, 6])], [("bf16", [4, 6], [6, 1])], {"order": [1, 0]})
    cp = _cp(g)
    assert cp.is_view
    base = np.arange(24, dtype=np.float32).astype(ml_dtypes.bfloat16).reshape(4, 6)
    x = base.T                                   # [6, 4] with strides (1, 6) elements
    out = cp.execute({0: x})[1]
    assert np.shares_memory(out, base)
    assert_same(out, base)


def test_any_output_of_an_ncx_convolution_is_channels_last_and_feeds_the_next_partition():
    attrs = dict(strides=[1, 1], dilations=[1, 1], pads_begin=[1, 1], pads_end=[1, 1], data_format="NCX",
                 weights_format="OIX")
    g = Graph()
    y = LT(2, "f32", [2, 8, 5, 6], layout_type="any")
    g.add_op(Op(0, "Convolution", [LT(0, "f32", [2, 4, 5, 6]), LT(1, "f32", [8, 4, 3, 3])], [y], attrs))
    g.add_op(Op(1, "SoftMax", [y], [LT(3, "f32", [2, 8, 5, 6])], {"axis": 1}))
    g.finalize()
    cg = graphc.compile(g)
    conv, sm = cg.compiled
    assert conv.query_logical_tensor(2).strides == (240, 1, 48, 8)     # N, C, H, W with C innermost
    assert sm.query_logical_tensor(2).strides == (240, 1, 48, 8)       # read as written
    ins = make_inputs(g, seed=5)
    assert_outputs(cg.run(ins), graphc.reference.run(g, ins))
    (p,) = [q for q in g.get_partitions() if q.ops[0].kind == "Convolution"]
    strided = p.compile(p.inputs, [LT(2, "f32", [2, 8, 5, 6])])       # strided asked: dense given
    assert strided.query_logical_tensor(2).strides == (240, 30, 6, 1)


def _families():
    """(graph, input id, output id, in-shape) of one op per family, output and input
    of one shape so that a shifted view of one buffer overlaps both."""
    conv = dict(strides=[1, 1], dilations=[1, 1], pads_begin=[1, 1], pads_end=[1, 1], data_format="NXC",
                weights_format="XIO")
    return {
        "eltwise": one_op("Exp", [("f32", [6, 8])], [("f32", [6, 8])]),
        "binary": one_op("Add", [("f32", [6, 8]), ("f32", [6, 8])], [("f32", [6, 8])]),
        "reduction": one_op("ReduceSum", [("f32", [6, 8])], [("f32", [6, 1])], {"axes": [1], "keep_dims": True}),
        "softmax": one_op("SoftMax", [("f32", [6, 8])], [("f32", [6, 8])], {"axis": 1}),
        "norm": one_op("LayerNorm", [("f32", [6, 8])], [("f32", [6, 8])], {"keep_stats": False,
                                                                         "use_affine": False}),
        "matmul": one_op("MatMul", [("f32", [6, 8]), ("f32", [8, 8])], [("f32", [6, 8])]),
        "conv": one_op("Convolution", [("f32", [1, 6, 8, 4]), ("f32", [3, 3, 4, 4])], [("f32", [1, 6, 8, 4])], conv),
        "view": one_op("StaticReshape", [("f32", [6, 8])], [("f32", [48])], {"shape": [48], "special_zero": False}),
        "transpose": one_op("StaticTranspose", [("f32", [6, 8])], [("f32", [8, 6])], {"order": [1, 0]}),
    }


@pytest.mark.parametrize("family", list(_families()))
def test_overlapping_caller_buffers_refused_for_every_family(family):
    """An output given over part of an input (one buffer, shifted by one element):
    InvalidArguments naming the op, and no buffer changed."""
    g = _families()[family]
    cp = _cp(g)
    ins = make_inputs(g, seed=6)
    x = ins[0]
    out_lt = cp.outputs[0]
    buf = np.zeros(x.size + 1 + out_lt.nelems, np.float32)
    buf[:x.size] = x.reshape(-1)
    src = buf[:x.size].reshape(x.shape)
    dst = buf[1:1 + out_lt.nelems].reshape(out_lt.shape)
    ins[0] = src
    before = buf.copy()
    with pytest.raises(InvalidArguments, match=r"op 0 \(.*\).*output tensor \d+ shares memory with input tensor 0"):
        cp.execute(ins, outputs={out_lt.id: dst})
    assert_same(buf, before)
