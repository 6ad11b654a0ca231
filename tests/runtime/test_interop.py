"""Tensors cross without copies (graphc.interop): torch tensors and __dlpack__
objects of every graphc dtype torch has are numpy arrays over the same memory
with the same strides, as inputs of graphc.run / CompiledGraph.run /
CompiledPartition.execute and as the output buffers they write."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import graphc
from graphc import InvalidArguments
from graphc.interop import as_array, to_torch
from graphc.types import DataType

from support import assert_close, assert_same, one_op

torch = pytest.importorskip("torch")

#: graphc dtype -> torch dtype: every graphc dtype with a torch element type of its own
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
         "s32": torch.int32, "s64": torch.int64, "u32": torch.uint32, "u64": torch.uint64, "s8": torch.int8,
         "u8": torch.uint8, "f8_e4m3": torch.float8_e4m3fn, "f8_e5m2": torch.float8_e5m2,
         "e8m0": torch.float8_e8m0fnu, "boolean": torch.bool, "c64": torch.complex64}


def _tensor(dt, shape=(3, 5)):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(shape, generator=g) * 4).to(TORCH[dt])


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.mark.parametrize("dt", sorted(TORCH))
@pytest.mark.parametrize("layout", ["dense", "transposed", "sliced"])
def test_torch_tensors_are_numpy_arrays_over_their_memory(dt, layout):
    t = _tensor(dt, (4, 6))
    t = {"dense": t, "transposed": t.t(), "sliced": t[1:, ::2]}[layout]
    a = as_array(t)
    assert a.dtype == DataType.parse(dt).np
    assert a.shape == tuple(t.shape)
    assert a.strides == tuple(s * t.element_size() for s in t.stride())
    assert _address(a) == t.data_ptr()
    # the same values, read through torch's own conversion to f64 (complex: its real part)
    want = (t.real if dt == "c64" else t).to(torch.float64).numpy()
    assert_same((a.real if dt == "c64" else a).astype(np.float64), want)
    # and back: a torch tensor over the same memory, of the same dtype and strides
    back = to_torch(a)
    assert back.dtype == t.dtype and back.stride() == t.stride() and back.data_ptr() == t.data_ptr()


def test_a_tensor_needing_grad_crosses_detached():
    t = torch.randn(3, 4, requires_grad=True)
    assert _address(as_array(t)) == t.data_ptr()


class _DLPackOnly:
    """An object offering only the DLPack protocol (as other array libraries do)."""

    def __init__(self, t):
        self._t = t

    def __dlpack__(self, *args, **kwargs):
        return self._t.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()


@pytest.mark.parametrize("dt", ["f32", "s32", "bf16", "f8_e4m3"])
def test_dlpack_objects_cross_without_copy(dt):
    """numpy reads f32 and s32 through DLPack; bf16 and f8, which it refuses, go through torch."""
    t = _tensor(dt).t()
    a = as_array(_DLPackOnly(t))
    assert a.dtype == DataType.parse(dt).np and _address(a) == t.data_ptr()
    assert a.strides == tuple(s * t.element_size() for s in t.stride())


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
def test_run_and_execute_take_torch_tensors_and_write_torch_buffers(dt):
    g = one_op("Add", [(dt, [5, 3]), (dt, [5, 3])], [(dt, [5, 3])])
    x = _tensor(dt, (3, 5)).t()               # a non-contiguous input: read through its strides
    y = _tensor(dt, (5, 3))
    want = graphc.reference.run(g, {0: x.contiguous().numpy() if dt != "bf16" else as_array(x.contiguous()),
                                    1: as_array(y).copy()})[2]
    got = graphc.run(g, {0: x, 1: y})[2]
    assert_close(got, want, dt)
    assert_close(graphc.compile(g).run({0: x, 1: _DLPackOnly(y)})[2], want, dt)
    (p,) = g.get_partitions()
    cp = p.compile()
    out = torch.empty(5, 3, dtype=TORCH[dt])
    res = cp.execute([x, y], outputs=[out])[2]
    assert _address(res) == out.data_ptr()    # the result is the caller's buffer
    assert_close(as_array(out), want, dt)
    strided = torch.zeros(3, 5, dtype=TORCH[dt]).t()   # a caller's output with its own strides
    cp.execute({0: x, 1: y}, outputs={2: strided})
    assert_close(as_array(strided), want, dt)


def _add_then_reshape(dt):
    """x + y ([5, 3], an output) and its reshape to [15] (an output of a view partition)."""
    from graphc import Graph, LogicalTensor as LT, Op
    g = Graph()
    g.add_op(Op(0, "Add", [LT(0, dt, [5, 3]), LT(1, dt, [5, 3])], [LT(2, dt, [5, 3])]))
    g.add_op(Op(1, "StaticReshape", [LT(2, dt, [5, 3])], [LT(3, dt, [15])], {"shape": [15], "special_zero": False}))
    g.set_ports(inputs=[0, 1], outputs=[2, 3])
    g.finalize()
    return g


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_compiled_graph_run_writes_the_callers_output_buffers(dt):
    g = _add_then_reshape(dt)
    x, y = _tensor(dt, (5, 3)), _tensor(dt, (3, 5)).t()
    want = graphc.reference.run(g, {0: as_array(x).copy(), 1: np.ascontiguousarray(as_array(y))})
    cg = graphc.compile(g)
    summed = torch.zeros(3, 5, dtype=TORCH[dt]).t()     # a buffer with its own strides
    flat = torch.empty(15, dtype=TORCH[dt])
    res = cg.run({0: x, 1: y}, outputs={2: summed, 3: flat})
    assert _address(res[2]) == summed.data_ptr() and _address(res[3]) == flat.data_ptr()
    assert_close(as_array(summed), want[2], dt)
    assert_close(as_array(flat), want[3], dt)
    only = torch.empty(15, dtype=TORCH[dt])              # some outputs given, the others allocated by graphc
    res = cg.run({0: x, 1: y}, outputs={3: only})
    assert _address(res[3]) == only.data_ptr()
    assert_close(as_array(only), want[3], dt)
    assert_close(res[2], want[2], dt)


def test_an_output_buffer_seen_by_a_view_holds_its_source(monkeypatch):
    """A given output that a view partition makes of a tensor another partition
    computes: that partition writes into the output's buffer (seen through the view
    backwards) and the view moves nothing."""
    from graphc import Graph, LogicalTensor as LT, Op
    from graphc.compiler.executables.view import ViewExecutable
    g = Graph()
    g.add_op(Op(0, "MatMul", [LT(0, "f32", [5, 4]), LT(1, "f32", [4, 3])], [LT(2, "f32", [5, 3])]))
    g.add_op(Op(1, "StaticReshape", [LT(2, "f32", [5, 3])], [LT(3, "f32", [15])], {"shape": [15], "special_zero": False}))
    g.add_op(Op(2, "ReLU", [LT(2, "f32", [5, 3])], [LT(4, "f32", [5, 3])]))   # (the MatMul's result read twice)
    g.finalize()
    cg = graphc.compile(g)
    assert sum(cp.is_view for cp in cg.compiled) == 1
    copied = []
    run = ViewExecutable.run

    def watched(self, ins, outs, comm):
        copied.append(not np.may_share_memory(ins[self.at], outs[0]))
        return run(self, ins, outs, comm)
    monkeypatch.setattr(ViewExecutable, "run", watched)
    x, w = _tensor("f32", (5, 4)), _tensor("f32", (4, 3))
    want = graphc.reference.run(g, {0: as_array(x), 1: as_array(w)})
    flat = torch.empty(15)
    res = cg.run({0: x, 1: w}, outputs={3: flat})
    assert copied == [False] and _address(res[3]) == flat.data_ptr()
    assert_close(as_array(flat), want[3], "f32")
    assert_close(res[4], want[4], "f32")


def test_bad_output_buffers_say_what_is_wrong():
    cg = graphc.compile(_add_then_reshape("f32"))
    x = torch.zeros(5, 3)
    with pytest.raises(InvalidArguments, match="no output tensor of this id"):
        cg.run({0: x, 1: x}, outputs={0: torch.empty(5, 3)})
    with pytest.raises(InvalidArguments, match="wrong shape"):
        cg.run({0: x, 1: x}, outputs={2: torch.empty(15)})
    with pytest.raises(InvalidArguments, match="wrong dtype"):
        cg.run({0: x, 1: x}, outputs={3: torch.empty(15, dtype=torch.float64)})


def test_bad_tensors_say_what_is_wrong():
    g = one_op("Add", [("f32", [2]), ("f32", [2])], [("f32", [2])])
    with pytest.raises(InvalidArguments, match="wrong dtype"):
        graphc.run(g, {0: torch.zeros(2, dtype=torch.float64), 1: torch.zeros(2)})
    with pytest.raises(InvalidArguments, match="conjugate"):
        as_array(torch.zeros(2, dtype=torch.complex64).conj())
    with pytest.raises(InvalidArguments, match="must be a numpy array, a torch tensor"):
        graphc.run(g, {0: [1.0, 2.0], 1: torch.zeros(2)})


def test_graphc_imports_and_runs_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "import numpy as np, graphc, graphc.interop\n"
            "from graphc import Graph, LogicalTensor as LT, Op\n"
            "g = Graph(); g.add_op(Op(0, 'ReLU', [LT(0, 'f32', [2])], [LT(1, 'f32', [2])])); g.finalize()\n"
            "print(graphc.run(g, {0: np.array([-1.0, 2.0], np.float32)})[1].tolist())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0.0, 2.0]"
