"""Reliability: bad layouts, aliased buffers, odd arrays, huge sizes, concurrent
runs and out-of-range values give the reference's answer or a GraphcError that
says what is wrong, and leave caller buffers untouched on failure."""
from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.errors import GraphcError, InvalidArguments, InvalidGraphOp, InvalidShape
from graphc.jsonio import load_graph, load_graph_file
from graphc.op import Op
from graphc.types import DataType, LogicalTensor, overlaps
from graphc.codegen.outline import runs_parallel

from support import assert_outputs, assert_same, check_compiled, one_op

ROOT = Path(__file__).resolve().parents[2]


def partition(g):
    (cp,) = graphc.compile(g).compiled
    return cp


def raises(cls, *words):
    """pytest.raises(cls), then every word in the message."""
    class _Check:
        def __enter__(self):
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            out = self.ctx.__exit__(*exc)
            msg = str(self.info.value)
            for w in words:
                assert w in msg, f"{w!r} not in {msg!r}"
            return out
    return _Check()


# ----------------------------------------------------------- 1. overlapping strides
@pytest.mark.parametrize("shape,strides", [([2, 3], [0, 1]), ([2, 2, 2, 2], [1, 1, 1, 1]),
                                           ([2, 3, 4], [11, 4, 1]), ([4], [0])])
def test_overlapping_output_strides_rejected_at_graph_time(shape, strides):
    with raises(InvalidShape, "op 0 (ReLU)", "output 0 (dst, tensor 1)", "share memory", str(strides)):
        one_op("ReLU", [("f32", shape)], [("f32", shape, strides)])


def test_overlapping_output_strides_rejected_when_known_at_finalize():
    g = graphc.Graph()
    a = LogicalTensor(1, "f32", [-1, 3])
    b = LogicalTensor(2, "f32", [-1, 3], [0, 1])   # dims known only once the graph is finalized
    g.add_op(Op(1, "ReLU", [a], [b]))
    g.add_op(Op(0, "ReLU", [LogicalTensor(0, "f32", [2, 3])], [LogicalTensor(1, "f32", [2, 3])]))
    with raises(InvalidShape, "op 1 (ReLU)", "share memory", "[0, 1]"):
        g.finalize()


def test_overlapping_output_strides_rejected_at_compile():
    g = one_op("ReLU", [("f32", [2, 3])], [("f32", [2, 3])])
    (p,) = g.get_partitions()
    with raises(InvalidShape, "ReLU", "share memory"):
        p.compile(p.inputs, [LogicalTensor(1, "f32", [2, 3], [1, 1])])


def test_non_overlapping_interleaved_output_strides_accepted():
    assert not overlaps((3, 2), (2, 3))     # offsets 0 3 2 5 4 7: all distinct, not nested
    assert not overlaps((3, 3), (2, 3))
    assert overlaps((3, 3), (1, 2))         # (2, 0) and (0, 1) meet
    g = one_op("ReLU", [("f32", [3, 2])], [("f32", [3, 2], [2, 3])])
    check_compiled(g, exact=True)


@pytest.mark.parametrize("shape,strides", [([2, 3], [0, 1]), ([2, 3, 4], [0, 4, 1]), ([3, 4], [1, 0])])
def test_broadcast_view_input_matches_reference(shape, strides):
    """An input whose strides repeat elements (a stride-0 broadcast view) reads
    the same values as the reference."""
    g = one_op("ReLU", [("f32", shape, strides)], [("f32", shape)])
    base = np.linspace(-2, 2, 1 + sum((d - 1) * s for d, s in zip(shape, strides))).astype(np.float32)
    x = np.lib.stride_tricks.as_strided(base, shape, [s * 4 for s in strides])
    got = graphc.compile(g).run({0: x})
    want = reference.run(g, {0: x})
    assert_outputs(got, want, {1: DataType.f32}, exact=True)
    dense = np.ascontiguousarray(x)          # the same values, dense: copied into the layout
    assert_outputs(graphc.compile(g).run({0: dense}), want, {1: DataType.f32}, exact=True)


@pytest.mark.parametrize("shape,strides", [([2, 3], [0, 1]), ([2, 2, 2, 2], [1, 1, 1, 1]), ([2, 3, 4], [11, 4, 1])])
def test_input_values_that_do_not_fit_overlapping_strides_rejected(shape, strides):
    g = one_op("ReLU", [("f32", shape, strides)], [("f32", shape)])
    cp = partition(g)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    out = np.full(shape, 7.0, np.float32)
    with raises(InvalidArguments, "input tensor 0", "share memory", str(strides)):
        cp.execute({0: x}, {1: out})
    assert (out == 7.0).all()


# ------------------------------------------------------------------ 2. aliasing
def _refused(cp, ins, outs, *words):
    """Executing into ``outs`` raises InvalidArguments naming ``words``, and leaves
    every buffer as it was."""
    arrays = list(ins.values()) + list(outs.values())
    before = [a.copy() for a in arrays]
    with raises(InvalidArguments, *words):
        cp.execute(ins, outs)
    for a, b in zip(arrays, before):
        assert_same(a, b)


def test_transpose_into_its_own_input_refused():
    """A dense transpose is a kernel (its dst strides are not a view of src): an
    output over its input would be overwritten while read."""
    g = one_op("StaticTranspose", [("f32", [4, 4])], [("f32", [4, 4])], {"order": [1, 0]})
    cp = partition(g)
    assert not cp.is_view
    m = np.arange(16, dtype=np.float32).reshape(4, 4)
    _refused(cp, {0: m}, {1: m}, "op 0 (StaticTranspose)", "output tensor 1 shares memory with input tensor 0")


def test_transpose_into_a_partly_overlapping_view_refused():
    g = one_op("StaticTranspose", [("f32", [3, 4])], [("f32", [4, 3])], {"order": [1, 0]})
    cp = partition(g)
    buf = np.arange(20, dtype=np.float32)
    x = buf[:12].reshape(3, 4)
    out = buf[6:18].reshape(4, 3)   # overlaps the input's second half
    assert np.shares_memory(x, out)
    _refused(cp, {0: x}, {1: out}, "shares memory")


def test_elementwise_in_place_is_correct_and_partial_overlap_refused():
    g = one_op("ReLU", [("f32", [8, 16])], [("f32", [8, 16])])
    cp = partition(g)
    x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(8, 16)
    want = reference.run(g, {0: x.copy()})[1]
    cp.execute({0: x}, {1: x})
    assert_same(x, want)
    y = np.linspace(-3, 3, 136, dtype=np.float32)   # shifted by one row: partial overlap
    src, dst = y[8:].reshape(8, 16), y[:128].reshape(8, 16)
    _refused(cp, {0: src}, {1: dst}, "op 0 (ReLU)", "in-place port")


def test_outputs_found_apart_are_checked_again_for_other_arrays():
    """A run into given outputs remembers that they shared no memory, for those very
    (live) arrays only: the same arrays again run as they are; an output over
    another run's input, or a new array where a remembered one died, is checked."""
    g = one_op("ReduceSum", [("f32", [4, 4])], [("f32", [4, 1])], {"axes": [1], "keep_dims": True})
    cp = partition(g)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    out = np.zeros((4, 1), np.float32)
    for _ in range(2):
        cp.execute({0: x}, {1: out})
        assert_same(out, x.sum(axis=1, keepdims=True))
    _refused(cp, {0: x}, {1: x[:, :1]}, "op 0 (ReduceSum)", "no in-place port")   # the same input
    y = np.arange(16, dtype=np.float32).reshape(4, 4) + 1
    cp.execute({0: y}, {1: out})
    del y, out
    gc.collect()                                       # (the remembered arrays dead: ids free again)
    z = np.arange(16, dtype=np.float32).reshape(4, 4)
    _refused(cp, {0: z}, {1: z[:, 1:2]}, "op 0 (ReduceSum)", "no in-place port")


def test_reduction_into_its_input_refused():
    g = one_op("ReduceSum", [("f32", [4, 4])], [("f32", [4, 1])], {"axes": [1], "keep_dims": True})
    cp = partition(g)
    x = np.arange(16, dtype=np.float32).reshape(4, 4)
    _refused(cp, {0: x}, {1: x[:, :1]}, "op 0 (ReduceSum)", "no in-place port")


def _dropout():
    g = one_op("Dropout", [("f32", [64]), ("s32", [1]), ("s32", [1]), ("f32", [1])],
               [("f32", [64]), ("u8", [64])])
    return partition(g)


def _dropout_inputs(cp, p):
    return {cp.inputs[0].id: np.ones(64, np.float32), cp.inputs[1].id: np.array([1], np.int32),
            cp.inputs[2].id: np.array([0], np.int32), cp.inputs[3].id: np.array([p], np.float32)}


def test_two_outputs_in_one_buffer_rejected():
    cp = _dropout()
    buf = np.full(64, 7.0, np.float32)
    dst, mask = buf, buf.view(np.uint8)[:64]     # the mask over the first 16 floats of dst
    with raises(InvalidArguments, f"output tensors {cp.outputs[0].id} and {cp.outputs[1].id} share memory"):
        cp.execute(_dropout_inputs(cp, 0.5), {cp.outputs[0].id: dst, cp.outputs[1].id: mask})
    assert (buf == 7.0).all()


def test_self_overlapping_output_array_rejected():
    g = one_op("ReLU", [("f32", [2, 3])], [("f32", [2, 3])])
    cp = partition(g)
    buf = np.full(3, 7.0, np.float32)
    out = np.lib.stride_tricks.as_strided(buf, (2, 3), (0, 4))
    with raises(InvalidArguments, "output tensor 1", "share memory"):
        cp.execute({0: np.ones((2, 3), np.float32)}, {1: out})
    assert (buf == 7.0).all()


def test_kernel_fault_leaves_caller_outputs_untouched():
    cp = _dropout()
    dst, mask = np.full(64, 7.0, np.float32), np.full(64, 7, np.uint8)
    with raises(GraphcError, "probability"):
        cp.execute(_dropout_inputs(cp, 2.0), {cp.outputs[0].id: dst, cp.outputs[1].id: mask})
    assert (dst == 7.0).all() and (mask == 7).all()
    cp.execute(_dropout_inputs(cp, 0.5), {cp.outputs[0].id: dst, cp.outputs[1].id: mask})
    assert set(np.unique(mask)) <= {0, 1} and set(np.unique(dst)) <= {0.0, 2.0}


# --------------------------------------------------------------------- 3. escapes
@pytest.mark.parametrize("dt", ["f8_e5m2", "f8_e4m3"])
@pytest.mark.parametrize("strides", [[1, 2], [6, 2]])
def test_f8_in_permuted_or_gapped_layouts(dt, strides):
    g = one_op("Dequantize", [(dt, [2, 3], strides)], [("f32", [2, 3], strides)],
               {"scales": [0.5], "qtype": "per_tensor"})
    check_compiled(g, exact=True)
    g = one_op("Quantize", [("f32", [2, 3], strides)], [(dt, [2, 3], strides)],
               {"scales": [0.5], "qtype": "per_tensor"})
    check_compiled(g, exact=True)


@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_half_types_in_permuted_layouts(dt):
    g = one_op("ReLU", [(dt, [2, 3, 4], [1, 2, 6])], [(dt, [2, 3, 4], [12, 1, 3])])
    check_compiled(g, exact=True)


@pytest.mark.parametrize("ins,outs", [
    ([("f32", [2 ** 62, 2 ** 62])], [("f32", [2 ** 62, 2 ** 62])]),
    ([("f32", [2, 2], [2 ** 62, 1])], [("f32", [2, 2])]),
    ([("f32", [2, 2])], [("f32", [2, 2], [2 ** 62, 1])]),
    ([("f32", [2 ** 46])], [("f32", [2 ** 46])]),
])
def test_huge_tensors_rejected_before_compiling(ins, outs):
    g = one_op("ReLU", ins, outs)
    with raises(InvalidShape, "compile", "tensor"):
        graphc.compile(g)


def _transposed(strides_in=None, strides_out=None):
    return one_op("StaticTranspose", [("f32", [1, 3], strides_in)], [("f32", [3, 1], strides_out)],
                  {"order": [1, 0]})


@pytest.mark.parametrize("make", [
    lambda: one_op("ReLU", [("f32", [1, 3], [2 ** 62, 1])], [("f32", [1, 3])]),       # a kernel
    lambda: one_op("ReLU", [("f32", [1, 3])], [("f32", [1, 3], [2 ** 62, 1])]),
    lambda: _transposed([2 ** 62, 1]),                                                  # a view of the input
    lambda: _transposed(None, [1, 2 ** 62]),
    lambda: one_op("StaticReshape", [("f32", [1, 3], [2 ** 62, 1])], [("f32", [3, 1])],
                   {"shape": [3, 1], "special_zero": False}),
])
def test_a_stride_beyond_int64_bytes_on_a_dim_of_one_is_rejected_at_compile(make):
    """A stride of 2^62 f32 elements on a dim of size 1 adds nothing to the span,
    but its 2^64 bytes do not fit numpy's strides: numpy raised OverflowError at
    run (making the transpose's view); compile says what is wrong first."""
    with raises(InvalidShape, "compile", "stride too large to address in bytes", str(2 ** 62)):
        graphc.compile(make())


def test_a_stride_within_int64_bytes_on_a_dim_of_one_runs():
    x = np.arange(3, dtype=np.float32).reshape(1, 3)
    for g in (one_op("ReLU", [("f32", [1, 3], [2 ** 60, 1])], [("f32", [1, 3], [2 ** 60, 1])]),
              _transposed([2 ** 60, 1])):
        (out,) = graphc.compile(g).run({0: x}).values()
        assert_same(out, x.reshape(out.shape))


def test_allocate_checks_byte_sizes_before_making_an_array():
    from graphc.compiler.layout import allocate
    with raises(InvalidShape, "allocate", "stride too large to address in bytes"):
        allocate(LogicalTensor(0, "f32", [1, 3], [2 ** 62, 1]))
    assert allocate(LogicalTensor(0, "f32", [1, 3], [2 ** 60, 1])).strides == (2 ** 62, 4)


def test_read_only_output_rejected():
    cp = partition(one_op("ReLU", [("f32", [2, 3])], [("f32", [2, 3])]))
    ro = np.zeros((2, 3), np.float32)
    ro.flags.writeable = False
    with raises(InvalidArguments, "output tensor 1", "read-only"):
        cp.execute({0: np.ones((2, 3), np.float32)}, {1: ro})
    assert (ro == 0).all()


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_matrix_arrays_accepted():
    g = one_op("ReLU", [("f32", [2, 3])], [("f32", [2, 3])])
    cp = partition(g)
    x = np.matrix([[-1, 2, -3], [4, -5, 6]], dtype=np.float32)
    want = np.maximum(np.asarray(x), 0)
    assert_same(cp.execute({0: x})[1], want)
    assert_same(graphc.compile(g).run({0: x})[1], want)
    out = np.matrix(np.zeros((2, 3), np.float32))
    cp.execute({0: x}, {1: out})
    assert_same(np.asarray(out), want)


def test_masked_and_unaligned_arrays():
    cp = partition(one_op("ReLU", [("f32", [2, 3])], [("f32", [2, 3])]))
    with raises(InvalidArguments, "masked"):
        cp.execute({0: np.ma.masked_array(np.ones((2, 3), np.float32))})
    raw = np.zeros(25, np.uint8)
    x = raw[1:].view(np.float32).reshape(2, 3)       # not aligned
    x[...] = [[-1, 2, -3], [4, -5, 6]]
    out = np.zeros(25, np.uint8)[1:].view(np.float32).reshape(2, 3)
    cp.execute({0: x}, {1: out})
    assert_same(out, np.maximum(x, 0))


@pytest.mark.parametrize("bad", [5, "x", np.ones(3, np.float32)])
def test_inputs_of_the_wrong_kind(bad):
    cp = partition(one_op("ReLU", [("f32", [2, 3])], [("f32", [2, 3])]))
    with raises(InvalidArguments, "inputs must be"):
        cp.execute(bad)


def _threaded_runs(n_threads=8, iters=20):
    g = one_op("ReLU", [("f32", [512, 1024])], [("f32", [512, 1024])])
    cg = graphc.compile(g)
    assert runs_parallel(cg)
    x = np.random.default_rng(0).standard_normal((512, 1024)).astype(np.float32)
    want = np.maximum(x, 0)
    bad = []

    def work():
        for _ in range(iters):
            if not np.array_equal(cg.run({0: x})[1], want):
                bad.append(1)
    threads = [threading.Thread(target=work) for _ in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(bad)


def test_concurrent_runs_from_threads():
    assert _threaded_runs() == 0


@pytest.mark.parametrize("layer", ["workqueue"])
def test_concurrent_runs_under_the_workqueue_layer(layer):
    """numba's workqueue layer aborts on concurrent launches: graphc serializes."""
    code = ("import sys; sys.path[:0] = sys.argv[1:]\n"
            "import numba, test_reliability as t\n"
            "assert t._threaded_runs(8, 10) == 0\n"
            "print(numba.threading_layer())\n")
    env = dict(os.environ, NUMBA_THREADING_LAYER=layer)
    paths = [str(Path(__file__).parent), str(ROOT / "tests"), str(ROOT)]
    r = subprocess.run([sys.executable, "-c", code, *paths], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == layer


# ----------------------------------------------------------------- 4. range checks
def test_tensor_and_op_ids_beyond_int64():
    with raises(InvalidArguments, "logical tensor id", "int64"):
        LogicalTensor(2 ** 63, "f32", [2])
    g = graphc.Graph()
    op = Op(2 ** 64, "ReLU", [LogicalTensor(0, "f32", [2])], [LogicalTensor(1, "f32", [2])])
    with raises(InvalidArguments, "op id", "int64"):
        g.add_op(op)
    with raises(InvalidArguments, "input_ports", "int64"):
        g.set_ports(inputs=[2 ** 64])
    with raises(InvalidArguments, "output_ports"):
        g.set_ports(outputs=["a"])


def _relu_json(**over):
    d = {"version": "3.0.0", "graph": [{"id": 0, "kind": "ReLU", "attrs": {},
                                        "inputs": [{"id": 0, "dtype": "f32", "shape": [2]}],
                                        "outputs": [{"id": 1, "dtype": "f32", "shape": [2]}]}]}
    d.update(over)
    return d


@pytest.mark.parametrize("edit,path", [
    (lambda d: d["graph"][0].update(id=2 ** 64), "graph[0].id"),
    (lambda d: d["graph"][0]["inputs"][0].update(id=2 ** 63), "graph[0].inputs[0].id"),
    (lambda d: d["graph"][0]["outputs"][0].update(id=2 ** 70), "graph[0].outputs[0].id"),
    (lambda d: d.update(input_ports=[2 ** 64]), "input_ports"),
    (lambda d: d.update(output_ports=[2 ** 64]), "output_ports"),
])
def test_json_ids_beyond_int64(edit, path):
    d = _relu_json()
    edit(d)
    with raises(InvalidArguments, f"at {path}", "int64"):
        load_graph(json.dumps(d))


@pytest.mark.parametrize("kind", ["Clamp", "ClampBackward"])
@pytest.mark.parametrize("lo,hi,words", [
    (float("nan"), 1.0, ("'min'", "finite", "nan")),
    (0.0, float("inf"), ("'max'", "finite", "inf")),
    (-1e39, 1.0, ("'min'", "finite", "-1e+39")),
    (2.0, 1.0, ("min <= max", "min 2.0, max 1.0")),
])
def test_clamp_bounds(kind, lo, hi, words):
    ins = [("f32", [2])] * (1 if kind == "Clamp" else 2)
    with raises(InvalidGraphOp, kind, *words):
        one_op(kind, ins, [("f32", [2])], {"min": lo, "max": hi})


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1.0, 0.0])
def test_epsilon_range(eps):
    with raises(InvalidGraphOp, "'epsilon'"):
        one_op("LayerNorm", [("f32", [2, 4])], [("f32", [2, 4])], {"epsilon": eps, "keep_stats": False})


def test_nan_attribute_from_json():
    d = _relu_json()
    d["graph"][0].update(kind="Elu", attrs={"alpha": {"type": "f32", "value": float("nan")}})
    with raises(InvalidGraphOp, "at graph[0]", "'alpha'", "finite"):
        load_graph(json.dumps(d))   # json writes NaN, and reads it back
    d["graph"][0].update(kind="Interpolate", attrs={"mode": {"type": "string", "value": "nearest"},
                                                    "scales": {"type": "f32[]", "value": [float("inf")]}})
    with raises(InvalidGraphOp, "'scales'", "finite"):
        load_graph(json.dumps(d))


@pytest.mark.parametrize("src,words", [("", ("empty",)), ("  \n", ("empty",)), (b"", ("empty",)),
                                       ("[1, 2]", ("must be an object",)), ("1" * 5000, ("cannot read",)),
                                       ("/dev/zero", ("not a regular file", "character device")),
                                       ("/", ("not a regular file", "directory"))])
def test_load_graph_bad_sources(src, words):
    with raises(InvalidArguments, *words):
        load_graph(src)


def test_load_graph_file_takes_paths_only(tmp_path):
    with raises(InvalidArguments, "found JSON text"):
        load_graph_file(json.dumps(_relu_json()))
    with raises(InvalidArguments, "empty"):
        load_graph_file("")
    p = tmp_path / "g.json"
    p.write_text(json.dumps(_relu_json()))
    assert len(load_graph_file(p).ops) == 1
    assert len(load_graph_file(str(p)).ops) == 1
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with raises(InvalidArguments, "not a regular file", "FIFO"):
        load_graph_file(fifo)     # does not block opening it


def test_cli_validate_refuses_devices_and_json_text(tmp_path):
    p = tmp_path / "g.json"
    p.write_text(json.dumps(_relu_json()))
    r = subprocess.run([sys.executable, "-m", "graphc", "validate", "/dev/zero", "", json.dumps(_relu_json()), str(p)],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 1, r.stderr
    lines = r.stdout.splitlines()
    assert "/dev/zero: InvalidArguments" in lines[0] and "character device" in lines[0]
    assert "empty graph file path" in lines[1]
    assert "found JSON text" in lines[2]
    assert lines[3].startswith(f"{p}: OK")
    assert "Traceback" not in r.stderr


def test_huge_reference_output_is_a_graphc_error():
    g = one_op("Interpolate", [("f32", [1, 1, 2, 2])], [("f32", [1, 1, -1, -1])],
               {"mode": "nearest", "sizes": [2 ** 40, 2 ** 40], "data_format": "NCX"})
    with raises(GraphcError, "Interpolate"):
        reference.run(g, {0: np.ones((1, 1, 2, 2), np.float32)})
    # inputs that exist (broadcast views) but a float64 copy beyond any address space
    g = one_op("Add", [("f32", [16, 1]), ("f32", [1, 2 ** 50])], [("f32", [16, 2 ** 50])])
    x = np.broadcast_to(np.float32(1), (16, 1))
    y = np.broadcast_to(np.float32(1), (1, 2 ** 50))
    with raises(GraphcError, "Add"):
        reference.run(g, {0: x, 1: y})
    with raises(InvalidShape, "compile", "tensor 1", "too large"):
        graphc.compile(g)
