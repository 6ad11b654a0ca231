"""graphc.bench.cost and the cost lines of `graphc bench --mode=P`: bytes and
FLOPs of small graphs against numbers worked out by hand from their shapes."""
import math
import re
from types import SimpleNamespace

import pytest

from graphc.codegen.rules import can_lower
import graphc
from graphc.bench import cost, driver
from graphc.builder import GraphBuilder, single_op_graph
from graphc.cli import main as cli_main
from graphc.errors import InvalidArguments
from graphc.fill import make_inputs
from graphc.types import LogicalTensor

FLOAT = r"[0-9.e+-]+"
CONV = dict(strides=(1, 1), dilations=(1, 1), pads_begin=(0, 0), pads_end=(0, 0), data_format="NCX",
            weights_format="OIX")


def run_once(g):
    cg = graphc.compile(g)
    cg.run(make_inputs(g, 0))
    return cg


# ------------------------------------------------------------------ bytes
@pytest.mark.parametrize("dt, itemsize", [("f32", 4), ("bf16", 2), ("f16", 2)])
def test_one_op_reads_its_input_and_writes_its_output(dt, itemsize):
    cg = run_once(single_op_graph("Abs", [(dt, (2, 3))], [(dt, (-1, -1))]))
    assert cost.bytes_moved(cg) == (6 + 6) * itemsize
    assert cost.flops(cg) == 0


def test_broadcast_input_counts_its_own_extent():
    g = single_op_graph("Add", [("f32", (8, 16)), ("f32", (1, 16))], [("f32", (-1, -1))])
    assert cost.bytes_moved(run_once(g)) == (128 + 16 + 128) * 4


def test_fused_chain_counts_only_what_leaves_the_kernel():
    """Add -> ReLU -> Multiply: one kernel; its intermediates never reach memory."""
    b = GraphBuilder()
    x, y, s = b.tensor("f32", [4, 32]), b.tensor("f32", [4, 32]), b.tensor("f32", [32])
    t = b.op("Add", [x, y])[0]
    t = b.op("ReLU", [t])[0]
    b.op("Multiply", [t, s])
    cg = run_once(b.finalize())
    assert len(cg.compiled) == 1
    assert cost.bytes_moved(cg) == (128 + 128 + 32 + 128) * 4


def test_staged_scratch_tensors_are_written_and_read():
    """ReduceMax -> Subtract -> SoftMax staged in one kernel: the row maxima go
    through a scratch buffer from the first stage to the second; the difference
    stays in registers (SoftMax's prologue)."""
    from graphc.partition import Partition
    from graphc.passes.legality import plan
    b = GraphBuilder()
    x = b.tensor("f32", [4, 8, 16])
    m = b.op("ReduceMax", [x], out=[("f32", [4, 8, 1])], attrs={"axes": [2], "keep_dims": True})[0]
    b.op("SoftMax", [b.op("Subtract", [x, m])[0]], attrs={"axis": 1})
    g = b.finalize()
    cp = Partition(0, g, g.topo_ops(), "staged", plan(g, g.topo_ops(), can_lower)).compile()
    assert [k for k, _ in cp.arg_plan] == ["in", "out", "tmp"]
    x_bytes, m_bytes = 4 * 8 * 16 * 4, 4 * 8 * 4
    # x read, SoftMax's output written, the maxima written and read again
    assert cost.partition_bytes(cp) == x_bytes + x_bytes + 2 * m_bytes


def test_a_zero_copy_reshape_moves_nothing():
    g = single_op_graph("StaticReshape", [("f32", (4, 6))], [("f32", (-1, -1))],
                        {"shape": [6, 4], "special_zero": False})
    cg = run_once(g)
    assert [cp.is_view for cp in cg.compiled] == [True]
    assert cost.bytes_moved(cg) == 0


def _lt(tid, shape, dt="f32"):
    return LogicalTensor(tid, dt, shape)


def test_views_collectives_and_unknown_dims():
    ins, outs = [_lt(0, (3, 5))], [_lt(1, (5, 3))]
    view = SimpleNamespace(is_view=True, kernel=None, arg_plan=[], inputs=ins, outputs=outs)
    assert cost.partition_bytes(view) == 0
    runner = SimpleNamespace(kernel=None, arg_plan=[], inputs=ins, outputs=[_lt(1, (6, 5), "bf16")])
    assert cost.partition_bytes(runner) == 15 * 4 + 30 * 2
    with pytest.raises(InvalidArguments):
        cost.tensor_bytes(_lt(2, (-1, 4)))


# ------------------------------------------------------------------ FLOPs
@pytest.mark.parametrize("src, weights, attrs, expected", [
    ((4, 5), (5, 3), {}, 2 * 4 * 3 * 5),
    ((2, 5, 4), (5, 3), {"transpose_a": True}, 2 * 2 * 4 * 3 * 5),   # batch 2, M 4, K 5, N 3
    ((3, 4, 6), (3, 2, 6), {"transpose_b": True}, 2 * 3 * 4 * 2 * 6),
    ((6,), (6, 7), {}, 2 * 7 * 6),                                   # a vector times a matrix
])
def test_matmul_flops(src, weights, attrs, expected):
    g = single_op_graph("MatMul", [("f32", src), ("f32", weights)], [("f32", None)], attrs)
    cg = run_once(g)
    assert cost.flops(cg) == expected
    out_elems = expected // 2 // (src[-2] if attrs.get("transpose_a") else src[-1])
    assert cost.bytes_moved(cg) == (math.prod(src) + math.prod(weights) + out_elems) * 4


# N=1, C=4, OC=8, 6x6 images, 3x3 kernel, no padding: 4x4 outputs; every one of the
# 8*4*9 weights meets each of the 16 output positions once
CONV_FLOPS = 2 * 1 * 8 * 4 * 16 * 9


@pytest.mark.parametrize("kind, ins, out, attrs, expected", [
    ("Convolution", [(1, 4, 6, 6), (8, 4, 3, 3)], (1, 8, 4, 4), {}, CONV_FLOPS),
    ("Convolution", [(1, 4, 6, 6), (8, 2, 3, 3)], (1, 8, 4, 4), {"groups": 2}, CONV_FLOPS // 2),
    ("Convolution", [(1, 6, 6, 4), (3, 3, 4, 8)], (1, 4, 4, 8), {"data_format": "NXC", "weights_format": "XIO"},
     CONV_FLOPS),
    ("Convolution", [(2, 4, 7, 7), (8, 4, 3, 3)], (2, 8, 3, 3), {"strides": (2, 2)}, 2 * 2 * 8 * 4 * 9 * 9),
    ("ConvolutionBackwardData", [(1, 8, 4, 4), (8, 4, 3, 3)], (1, 4, 6, 6), {"dst_shape": [1, 4, 6, 6]},
     CONV_FLOPS),
    ("ConvolutionBackwardWeights", [(1, 4, 6, 6), (1, 8, 4, 4)], (8, 4, 3, 3), {"weights_shape": [8, 4, 3, 3]},
     CONV_FLOPS),
    # the transposed ones: src 8 channels of 4x4 (the small side), dst 4 channels of 6x6
    ("ConvTranspose", [(1, 8, 4, 4), (4, 8, 3, 3)], (1, 4, 6, 6), {}, CONV_FLOPS),
    ("ConvTransposeBackwardData", [(1, 4, 6, 6), (4, 8, 3, 3)], (1, 8, 4, 4), {}, CONV_FLOPS),
    ("ConvTransposeBackwardWeights", [(1, 8, 4, 4), (1, 4, 6, 6)], (4, 8, 3, 3), {"weights_shape": [4, 8, 3, 3]},
     CONV_FLOPS),
])
def test_convolution_flops(kind, ins, out, attrs, expected):
    g = single_op_graph(kind, [("f32", s) for s in ins], [("f32", [-1] * len(out))], {**CONV, **attrs})
    (op,) = [op for op in g.topo_ops()]
    assert tuple(op.outputs[0].shape) == out
    assert op.schema.flops(op) == expected


def test_pointwise_and_normalising_ops_count_no_flops():
    g = single_op_graph("LayerNorm", [("f32", (4, 16))], [("f32", (-1, -1))], {"keep_stats": False,
                                                                               "use_affine": False})
    (op,) = g.topo_ops()
    assert op.schema.flops(op) == 0


# ------------------------------------------------------------------ the machine, the driver
def test_triad_bandwidth_is_positive_and_sized_to_the_bytes():
    t = cost.Triad(1200)
    assert t.nbytes == 1200 and t.a.size == 100
    assert t.bandwidth(2) > 0
    assert (t.a == 1 + 0.5 * 2).all()       # it computed the triad


def test_cost_fractions():
    c = cost.Cost(nbytes=2_000_000, flops=4_000_000, seconds=1e-3, triad=4e9, peak=8e9)
    assert c.gbs == pytest.approx(2.0)
    assert c.triad_fraction == pytest.approx(0.5)     # 2 GB/s of 4
    assert c.peak_fraction == pytest.approx(0.5)      # 4 GFLOP/s of 8
    assert cost.Cost(12, 0, 1e-3, 1e9).peak_fraction == 0.0


def test_measure_counts_the_matmul(monkeypatch):
    # (the peak of the f32 road, where graph_peak looks it up: the bench's cost module re-exports it)
    from graphc.compiler import cost as compiler_cost
    monkeypatch.setattr(compiler_cost, "fma_peak", lambda: 1e12)
    g = single_op_graph("MatMul", [("f32", (8, 16)), ("f32", (16, 4))], [("f32", None)])
    out, t = driver.measure(g, 1, fix_times=3, max_ms=1000)
    assert out.status == driver.PASSED
    c = t.cost
    assert (c.nbytes, c.flops) == ((128 + 64 + 32) * 4, 2 * 8 * 4 * 16)
    assert c.seconds == pytest.approx(t.min_ms / 1e3)
    assert c.peak_fraction == pytest.approx(c.flops / c.seconds / 1e12)
    assert c.triad > 0 and c.triad_fraction > 0


def test_perf_mode_prints_cost_columns(corpus, capsys):
    rc = cli_main(["bench", "--mode=P", "--fix-times-per-prb=3", f"--inputs-dir={corpus.parent}",
                   "--in-shapes=0:2x3", "--case=op/f32/abs.json", "--in-shapes=0:4x5", "--case=op/f32/abs.json"])
    lines = capsys.readouterr().out.splitlines()
    assert rc == 0
    perf = [ln.split(",") for ln in lines if ln.startswith("perf,")]
    costs = [ln for ln in lines if ln.startswith("cost,")]
    assert len(perf) == len(costs) == 2
    assert lines.index(costs[-1]) < [i for i, ln in enumerate(lines) if ln.startswith("tests:")][0]
    for (*_, min_ms, _avg), line, shape in zip(perf, costs, ("2x3", "4x5")):
        m = re.fullmatch(rf"cost,cpu,--in-shapes=0:{shape} --case=op/f32/abs\.json,"
                         rf"(\d+),({FLOAT}),({FLOAT}),({FLOAT}),({FLOAT})", line)
        assert m, line
        nbytes, gflop, gbs, triad, peak = (float(v) for v in m.groups())
        assert nbytes == 2 * math.prod(map(int, shape.split("x"))) * 4 and gflop == 0 and peak == 0
        assert gbs == pytest.approx(nbytes / float(min_ms) / 1e6, rel=1e-3)
        assert triad > 0
