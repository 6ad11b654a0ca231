"""The oneDNN Graph programming model through graphc's API: s64 and unknown
ranks, logical tensor / partition / graph accessors, in-place ports honoured
by the kernels, fpmath_mode, the constant tensor cache and its controls, the
opt-in reference fallback, the command line's help, input filling and graph
JSON with an output port the graph does not have."""
import gc
import json
import warnings

import ml_dtypes
import numpy as np
import pytest

import graphc
from graphc import (DataType, FallbackWarning, Graph, InvalidArguments, InvalidShape, LogicalTensor, Op,
                    RuntimeFault, Unimplemented)
from graphc import compiler as compiled_mod
from graphc.compiler import compiled_partition
from graphc.fill import make_inputs
from graphc.numerics import round_to
from graphc.reference import run as reference_run
from graphc.codegen.outline import runs_parallel
from support.compare import assert_outputs
from support.compiled import check_compiled
from support.graphs import graph_of


# ------------------------------------------------------------------------ s64
def test_s64_data_type():
    assert DataType("s64").np == np.int64 and DataType.s64.is_int and DataType.s64.itemsize == 8
    assert DataType.from_numpy(np.int64) is DataType.s64
    assert LogicalTensor(0, "s64", [3]).get_mem_size() == 24


def _dropout(seed_dt):
    return graph_of(Op(0, "Dropout", [LogicalTensor(0, "f32", [8, 40]), LogicalTensor(1, seed_dt, [1]),
                                      LogicalTensor(2, seed_dt, [1]), LogicalTensor(3, "f32", [1])],
                       [LogicalTensor(4, "f32", [8, 40]), LogicalTensor(5, "u8", [8, 40])]))


def test_dropout_s64_seed_and_offset():
    """oneDNN's Dropout takes its seed and offset as 64-bit integers."""
    g = _dropout("s64")
    ins = make_inputs(g, seed=4)
    ins[1] = np.array([2 ** 40 + 7], np.int64)   # a seed beyond 32 bits
    ins[2] = np.array([3], np.int64)
    out = check_compiled(g, ins, exact=True)
    # the same values through s32 ports differ (the seed is not the same number)
    g32 = _dropout("s32")
    ins32 = {**ins, 1: np.array([7], np.int32), 2: np.array([3], np.int32)}
    assert not np.array_equal(graphc.run(g32, ins32)[5], out[5])


def test_embedding_bw_s64_indices_checked():
    g = graph_of(Op(0, "EmbeddingBackward", [LogicalTensor(0, "s64", [2, 3]), LogicalTensor(1, "f32", [5, 4]),
                                             LogicalTensor(2, "f32", [2, 3, 4])], [LogicalTensor(3, "f32", [5, 4])]))
    check_compiled(g)
    ins = make_inputs(g)
    ins[0] = ins[0].copy()
    ins[0][1, 2] = 2 ** 33   # beyond s32: still found out of range, at its position
    with pytest.raises(RuntimeFault, match=r"position \[1, 2\]"):
        graphc.run(g, ins)


def test_s64_json_round_trip():
    g = graph_of(Op(0, "EmbeddingBackward", [LogicalTensor(0, "s64", [2]), LogicalTensor(1, "f32", [5, 4]),
                                             LogicalTensor(2, "f32", [2, 4])], [LogicalTensor(3, "f32", [5, 4])]))
    text = json.dumps(graphc.dump_graph(g))
    assert '"s64"' in text
    assert graphc.load_graph(text).tensors[0].dtype is DataType.s64


# -------------------------------------------------------------- unknown rank
def test_unknown_rank_logical_tensor():
    t = LogicalTensor(7, "f32", None)
    assert t.ndims == graphc.UNKNOWN_NDIMS == -1 and not t.is_complete and t.nelems == -1
    assert LogicalTensor(7, "f32", -1).is_equal(t)
    assert not t.is_equal(LogicalTensor(7, "f32", []))   # a scalar has rank 0
    with pytest.raises(InvalidArguments):
        t.get_dims()
    with pytest.raises(InvalidArguments):
        t.get_mem_size()


def test_unknown_rank_outputs_inferred_and_inputs_resolved():
    """Outputs declared with unknown rank take their op's inferred shape; a
    consumer naming that tensor with unknown rank gets it too."""
    g = graph_of(Op(0, "ReLU", [LogicalTensor(0, "f32", [3, 4])], [LogicalTensor(1, "f32", None)]),
                 Op(1, "SoftMax", [LogicalTensor(1, "f32", None)], [LogicalTensor(2, "f32", None)], {"axis": -1}))
    assert g.tensors[1].shape == (3, 4) and g.tensors[2].ndims == 2
    check_compiled(g)


def test_unknown_rank_graph_input_accepted():
    """Its rank comes from the arrays when the graph runs (tests/front/test_unknown_rank.py)."""
    g = Graph()
    g.add_op(Op(3, "ReLU", [LogicalTensor(0, "f32", None)], [LogicalTensor(1, "f32", None)]))
    assert g.finalize().rank_pending and g.unknown_rank_inputs() == [0]


# ---------------------------------------------------------------- accessors
def test_logical_tensor_accessors():
    t = LogicalTensor(4, "bf16", [2, 3], [4, 1], property_type="constant")
    assert (t.get_id(), t.get_data_type(), t.get_dims(), t.get_strides()) == (4, DataType.bf16, [2, 3], [4, 1])
    assert t.get_layout_type() == "strided" and t.get_property_type() == "constant"
    assert t.get_mem_size() == (1 * 4 + 2 + 1) * 2    # span 7 elements of 2 bytes
    assert LogicalTensor(4, "f32", [2, 3], layout_type="any").get_mem_size() == 24
    assert t.is_equal(LogicalTensor(4, "bf16", [2, 3], [4, 1], property_type="constant"))
    assert not t.is_equal(LogicalTensor(4, "bf16", [2, 3], property_type="constant"))
    assert not t.is_equal(LogicalTensor(5, "bf16", [2, 3], [4, 1], property_type="constant"))
    assert not t.is_equal("not a tensor")
    with pytest.raises(InvalidArguments):
        LogicalTensor(4, "f32", [2, -1]).get_mem_size()


def test_graph_and_partition_accessors():
    g = graph_of(Op(0, "Abs", [LogicalTensor(0, "f32", [4])], [LogicalTensor(1, "f32", [4])]),
                 Op(1, "SoftMax", [LogicalTensor(1, "f32", [4])], [LogicalTensor(2, "f32", [4])], {"axis": 0}),
                 fpmath_mode="bf16")
    assert g.get_engine_kind() == "cpu" and g.get_fpmath_mode() == ("bf16", False)
    for p in g.get_partitions("debug"):
        assert p.get_engine_kind() == "cpu" and p.get_id() == p.id
        assert p.get_ops() == [op.id for op in p.ops] and p.get_ops_num() == len(p.ops)
        assert p.get_input_ports() == p.inputs and p.get_output_ports() == p.outputs


# ------------------------------------------------------------------- in place
def _eltwise_chain(dt="f32", shape=(64, 33)):
    return graph_of(Op(0, "Add", [LogicalTensor(0, dt, shape), LogicalTensor(1, dt, shape[-1:])],
                       [LogicalTensor(2, dt, shape)]),
                    Op(1, "GELU", [LogicalTensor(2, dt, shape)], [LogicalTensor(3, dt, shape)]))


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_inplace_ports_honoured(dt, monkeypatch):
    """An elementwise partition's output may be its full-shape input's buffer:
    executing into the input gives the values of executing into a separate
    buffer, written by the kernel itself (no temporary)."""
    g = _eltwise_chain(dt)
    (p,) = g.get_partitions()
    cp = p.compile()
    assert cp.get_inplace_ports() == [(0, 3)]   # not the broadcast bias
    ins = make_inputs(g, seed=1)
    separate = cp.execute({0: ins[0].copy(), 1: ins[1]})[3]
    assert_outputs({3: separate}, reference_run(g, ins), {3: DataType(dt)})
    x = ins[0].copy()

    def no_temporaries(lt):
        raise AssertionError(f"a temporary for tensor {lt.id}")
    monkeypatch.setattr(compiled_partition, "allocate", no_temporaries)
    got = cp.execute({0: x, 1: ins[1]}, outputs={3: x})
    assert got[3] is x
    assert_outputs({3: x}, {3: separate}, exact=True)


def test_inplace_parallel_kernel_reading_the_input_twice():
    """x * gelu(x + b) over threads (prange), written over x: every element's
    loads come before its store."""
    shape = (512, 1031)
    g = graph_of(Op(0, "Add", [LogicalTensor(0, "f32", shape), LogicalTensor(1, "f32", shape[-1:])],
                    [LogicalTensor(2, "f32", shape)]),
                 Op(1, "GELU", [LogicalTensor(2, "f32", shape)], [LogicalTensor(3, "f32", shape)]),
                 Op(2, "Multiply", [LogicalTensor(3, "f32", shape), LogicalTensor(0, "f32", shape)],
                    [LogicalTensor(4, "f32", shape)]))
    (p,) = g.get_partitions()
    cp = p.compile()
    assert runs_parallel(cp) and cp.get_inplace_ports() == [(0, 4)]
    ins = make_inputs(g, seed=2)
    separate = cp.execute({0: ins[0].copy(), 1: ins[1]})[4]
    x = ins[0].copy()
    cp.execute({0: x, 1: ins[1]}, outputs={4: x})
    assert_outputs({4: x}, {4: separate}, exact=True)


def test_inplace_strided_view():
    """In place through a strided view: the pair holds for the layout the
    partition was compiled for, and only the view's elements change."""
    lt = LogicalTensor(0, "f32", [6, 5], [8, 1])
    g = graph_of(Op(0, "Exp", [lt], [LogicalTensor(1, "f32", [6, 5], [8, 1])]))
    (p,) = g.get_partitions()
    cp = p.compile()
    assert cp.get_inplace_ports() == [(0, 1)]
    base = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    view = base[:, :5]
    want = np.exp(view.astype(np.float64)).astype(np.float32)
    gaps = base[:, 5:].copy()
    cp.execute({0: view}, outputs={1: view})
    assert np.allclose(view, want, rtol=1e-6) and np.array_equal(base[:, 5:], gaps)


def test_no_inplace_ports_where_the_kernel_rereads():
    """A softmax reads its row again after writing: no pairs, and an output given
    over its input is refused (the input left as it was)."""
    g = graph_of(Op(0, "SoftMax", [LogicalTensor(0, "f32", [4, 16])], [LogicalTensor(1, "f32", [4, 16])],
                    {"axis": -1}))
    (p,) = g.get_partitions()
    cp = p.compile()
    assert cp.get_inplace_ports() == []
    x = make_inputs(g)[0]
    before = x.copy()
    with pytest.raises(InvalidArguments, match=r"op 0 \(SoftMax\).*output tensor 1 shares memory with input "
                                               r"tensor 0.*no in-place port"):
        cp.execute({0: x}, outputs={1: x})
    assert np.array_equal(x, before)


def test_output_over_a_non_pair_input_is_refused():
    """Two full-shape inputs of a binary op: each is a pair; an output over one
    of them partly (a shifted view) is not, and is refused: writing it would
    overwrite inputs before they are read."""
    g = graph_of(Op(0, "Multiply", [LogicalTensor(0, "f32", [10]), LogicalTensor(1, "f32", [10])],
                    [LogicalTensor(2, "f32", [10])]))
    cp = g.get_partitions()[0].compile()
    assert cp.get_inplace_ports() == [(0, 2), (1, 2)]
    buf = np.arange(1, 12, dtype=np.float32)
    a, b = buf[:10], np.full(10, 2, np.float32)
    before = buf.copy()
    with pytest.raises(InvalidArguments, match="output tensor 2 shares memory with input tensor 0.*in-place port"):
        cp.execute({0: a, 1: b}, outputs={2: buf[1:]})
    assert np.array_equal(buf, before)
    cp.execute({0: a, 1: b}, outputs={2: a})   # the pair itself: written in place
    assert np.array_equal(a, before[:10] * 2)


# ------------------------------------------------------------------ fpmath
def test_fpmath_mode_from_the_api():
    """Graph(fpmath_mode="bf16"): a MatMul's f32 inputs are read as bf16, so the
    result is the strict one on inputs rounded to bf16 (and not the strict one)."""
    def matmul(mode):
        return graph_of(Op(0, "MatMul", [LogicalTensor(0, "f32", [8, 16]), LogicalTensor(1, "f32", [16, 4])],
                           [LogicalTensor(2, "f32", [8, 4])]), fpmath_mode=mode)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 16)).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32)
    loose = graphc.run(matmul("bf16"), {0: a, 1: b})[2]
    rounded = {0: round_to(a, DataType.bf16).astype(np.float32), 1: round_to(b, DataType.bf16).astype(np.float32)}
    strict_on_rounded = graphc.run(matmul("strict"), rounded)[2]
    assert_outputs({2: loose}, {2: strict_on_rounded}, {2: DataType.f32})
    assert not np.allclose(loose, graphc.run(matmul("strict"), {0: a, 1: b})[2], rtol=1e-6, atol=0)


# ------------------------------------------------------- constant tensor cache
@pytest.fixture
def cache_state():
    cache = compiled_mod.CONSTANT_CACHE
    saved = (cache._flag, dict(cache._capacity))
    yield cache
    cache._flag, cache._capacity = saved[0], saved[1]


def _constant_graph():
    return graph_of(Op(0, "Abs", [LogicalTensor(0, "f32", [256], property_type="constant")],
                       [LogicalTensor(1, "f32", [256])]),
                    Op(1, "Add", [LogicalTensor(1, "f32", [256]), LogicalTensor(2, "f32", [256])],
                       [LogicalTensor(3, "f32", [256])]))


def _runs_of_constant_partition(cg, w, z):
    """Outputs of two runs, the constant input changed in between (which the
    constant property promises never happens: the cache shows through)."""
    first = cg.run({0: w, 2: z})[3]
    w2 = w - 10
    return first, cg.run({0: w2, 2: z})[3]


def test_constant_cache_off_by_default(cache_state, monkeypatch):
    monkeypatch.delenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", raising=False)
    assert compiled_mod.ConstantTensorCache().flag() == 0     # a fresh process: off, as oneDNN
    graphc.set_constant_tensor_cache(0)
    assert graphc.get_constant_tensor_cache() == 0
    cg = graphc.compile(_constant_graph(), policy="debug")
    w, z = np.ones(256, np.float32), np.zeros(256, np.float32)
    first, second = _runs_of_constant_partition(cg, w, z)
    assert np.array_equal(first, np.ones(256)) and np.array_equal(second, np.full(256, 9.0))


def test_constant_cache_on(cache_state):
    graphc.set_constant_tensor_cache_capacity("cpu", 64)
    assert graphc.get_constant_tensor_cache() == 1 and graphc.get_constant_tensor_cache_capacity("cpu") == 64
    cg = graphc.compile(_constant_graph(), policy="debug")
    assert [p.constant for p in cg.partitions] == [True, False]
    used = cache_state.used_bytes
    w, z = np.ones(256, np.float32), np.zeros(256, np.float32)
    first, second = _runs_of_constant_partition(cg, w, z)
    assert np.array_equal(first, second)            # the constant partition ran once
    assert cache_state.used_bytes == used + 256 * 4
    out = cg.run({0: w, 2: z})[3]
    out[...] = 0                                    # what the caller gets is its own
    assert np.array_equal(cg.run({0: w, 2: z})[3], first)
    # a compiled partition executed directly uses the cache too
    cp = cg.compiled[0]
    assert np.array_equal(cp.execute({0: w - 3})[1], np.ones(256))
    into = np.empty(256, np.float32)
    cp.execute({0: w}, outputs={1: into})
    assert np.array_equal(into, np.ones(256))


def test_forgotten_constants_are_computed_again(cache_state):
    """CompiledGraph.forget_constants drops the kept outputs and gives their bytes
    back: the next run computes them from the constant inputs as they are now."""
    graphc.set_constant_tensor_cache_capacity("cpu", 64)
    cg = graphc.compile(_constant_graph(), policy="debug")
    used = cache_state.used_bytes
    w, z = np.ones(256, np.float32), np.zeros(256, np.float32)
    assert np.array_equal(cg.run({0: w, 2: z})[3], np.ones(256))
    assert cache_state.used_bytes == used + 256 * 4
    cg.forget_constants()
    assert cache_state.used_bytes == used
    assert np.array_equal(cg.run({0: w - 10, 2: z})[3], np.full(256, 9.0))
    assert cache_state.used_bytes == used + 256 * 4      # kept again, once
    del cg
    gc.collect()
    assert cache_state.used_bytes == used


def test_a_deleted_compiled_graph_gives_its_constants_back_at_once(cache_state):
    """No reference cycle holds a compiled graph: its kept constant outputs go with
    its last reference, not at the garbage collector's next run."""
    graphc.set_constant_tensor_cache_capacity("cpu", 64)
    gc.collect()
    used = cache_state.used_bytes
    for policy in ("debug", "fusion"):
        cg = graphc.compile(_constant_graph(), policy=policy)
        cg.run({0: np.ones(256, np.float32), 2: np.zeros(256, np.float32)})
        assert cache_state.used_bytes == used + 256 * 4
        was = gc.isenabled()
        gc.disable()
        try:
            del cg
            assert cache_state.used_bytes == used
        finally:
            if was:
                gc.enable()


def test_constant_cache_capacity_limits(cache_state):
    graphc.set_constant_tensor_cache_capacity("cpu", 1)     # 1 MB: 1 MB + 4 bytes do not fit
    big = 262_145
    g = graph_of(Op(0, "Abs", [LogicalTensor(0, "f32", [big], property_type="constant")],
                    [LogicalTensor(1, "f32", [big])]),
                 Op(1, "Add", [LogicalTensor(1, "f32", [big]), LogicalTensor(2, "f32", [big])],
                    [LogicalTensor(3, "f32", [big])]))
    cg = graphc.compile(g, policy="debug")
    w, z = np.ones(big, np.float32), np.zeros(big, np.float32)
    first = cg.run({0: w, 2: z})[3]
    assert np.array_equal(cg.run({0: -2 * w, 2: z})[3], 2 * first)   # recomputed: not cached
    graphc.set_constant_tensor_cache_capacity("cpu", 0)
    assert graphc.get_constant_tensor_cache() == 0


def test_constant_cache_controls_checked(cache_state, monkeypatch):
    for bad in (2, -1, True, "1"):
        with pytest.raises(InvalidArguments):
            graphc.set_constant_tensor_cache(bad)
    with pytest.raises(InvalidArguments, match="engine kind"):
        graphc.set_constant_tensor_cache_capacity("gpu", 10)
    with pytest.raises(InvalidArguments):
        graphc.set_constant_tensor_cache_capacity("cpu", -5)
    graphc.set_constant_tensor_cache(1)
    assert graphc.get_constant_tensor_cache() == 1 and graphc.get_constant_tensor_cache_capacity("cpu") > 0
    monkeypatch.setenv("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "cpu:1024;gpu:2048")
    fresh = compiled_mod.ConstantTensorCache()
    assert fresh.flag() == 1 and fresh.capacity("cpu") == 1024


# ------------------------------------------------------------------ fallback
@pytest.fixture
def no_interpolate_kernel(monkeypatch):
    """A build whose Interpolate has no kernel (every op of this one has one)."""
    from graphc.codegen.rules.interpolate import Interpolate
    monkeypatch.setattr(Interpolate, "supports", lambda self, op: False)


def _interpolate_with_sizes():
    """ReLU -> Interpolate with a sizes input (no kernel: see no_interpolate_kernel) -> Abs."""
    return graph_of(
        Op(0, "ReLU", [LogicalTensor(0, "f32", [1, 2, 4, 4])], [LogicalTensor(1, "f32", [1, 2, 4, 4])]),
        Op(1, "Interpolate", [LogicalTensor(1, "f32", [1, 2, 4, 4]), LogicalTensor(2, "s32", [2])],
           [LogicalTensor(3, "f32", [1, 2, -1, -1])], {"mode": "nearest", "data_format": "NCX"}),
        Op(2, "Abs", [LogicalTensor(3, "f32", [1, 2, -1, -1])], [LogicalTensor(4, "f32", [1, 2, -1, -1])]))


def test_unsupported_partition_refused_by_default(no_interpolate_kernel):
    g = _interpolate_with_sizes()
    assert [p.is_supported() for p in g.get_partitions()] == [True, False, True]
    with pytest.raises(Unimplemented, match="fallback='reference'"):
        graphc.compile(g)
    with pytest.raises(InvalidArguments, match="fallback"):
        graphc.compile(g, fallback="numpy")


def test_reference_fallback_warns_and_runs(no_interpolate_kernel):
    g = _interpolate_with_sizes()
    with pytest.warns(FallbackWarning, match=r"1 of 3 partitions.*partition 1 \(Interpolate: ops \[1\]\)"):
        cg = graphc.compile(g, fallback="reference")
    assert [p.id for p in cg.fallback_partitions] == [1]
    assert isinstance(cg.compiled[1], graphc.ReferencePartition)
    ins = {0: np.random.default_rng(0).standard_normal((1, 2, 4, 4)).astype(np.float32),
           2: np.array([8, 6], np.int32)}
    out = cg.run(ins)
    assert out[4].shape == (1, 2, 8, 6)
    assert_outputs(out, reference_run(g, ins), {4: DataType.f32})
    with pytest.warns(FallbackWarning):
        again = graphc.run(g, ins, fallback="reference")
    assert_outputs(again, out, exact=True)


def test_no_warning_when_everything_compiles():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        graphc.compile(_eltwise_chain(), fallback="reference")


# ------------------------------------------------------- CLI, fill, JSON ports
def test_cli_help_lists_bench(capsys):
    from graphc.cli import main
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    assert "bench" in capsys.readouterr().out


def test_bench_help(capsys):
    from graphc.cli import main
    for flag in ("--help", "-h"):
        assert main(["bench", flag]) == 0
        out = capsys.readouterr().out
        for knob in ("--case=", "--batch=", "--mode=", "--in-shapes=", "--op-attrs=", "--dt=", "--reset"):
            assert knob in out, knob


def test_make_inputs_dropout_probability_in_range():
    g = _dropout("s64")
    for seed in range(50):
        ins = make_inputs(g, seed=seed)
        assert 0.0 <= float(ins[3][0]) <= 1.0
    graphc.run(g, make_inputs(g, seed=7))


def test_output_port_the_graph_does_not_have_is_ignored():
    """benchdnn runs a graph whose output_ports names a missing tensor; so does graphc."""
    g = _eltwise_chain(shape=(2, 3))
    d = json.loads(json.dumps(graphc.dump_graph(g)))
    d["output_ports"] = [3, 99]
    loaded = graphc.load_graph(d)
    assert loaded.output_ports == [3] and loaded.ignored_output_ports == [99]
    ins = make_inputs(loaded)
    assert_outputs(graphc.run(loaded, ins), reference_run(loaded, ins), {3: DataType.f32})
    d["output_ports"] = [99]
    assert graphc.load_graph(d).output_ports == [3]   # none left: the unconsumed tensors


def test_bf16_inplace_with_ml_dtypes_array_view():
    """(bf16 arrays are ml_dtypes views; the in-place check compares buffers, not dtypes' identity)"""
    g = graph_of(Op(0, "ReLU", [LogicalTensor(0, "bf16", [5])], [LogicalTensor(1, "bf16", [5])]))
    cp = g.get_partitions()[0].compile()
    x = np.array([-1, 2, -3, 4, -5], dtype=ml_dtypes.bfloat16)
    cp.execute([x], outputs=[x])
    assert np.array_equal(x.astype(np.float32), [0, 2, 0, 4, 0])
