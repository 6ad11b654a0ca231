"""Parallel loops outlined (graphc.codegen.outline) and run on numba's threads by
graphc (graphc.codegen.launch): the values a loop reads from the kernel reach
every thread, each iteration runs once on a thread of the pool, ranges
smaller than the pool or empty run right, and a loop outside what outlining
handles stays numba's prange."""
import pickle

import numpy as np
import pytest

from graphc.codegen import ir
from numba.core import types as nbtypes

from graphc.codegen.cache import compile_kernel, load_kernel
from graphc.codegen.entry import kernel_entry
from graphc.codegen.kernel import NUM_THREADS, KernelBuilder
from graphc.codegen.outline import runs_parallel
from graphc.types import LogicalTensor

N = 1000


def _kernel(build, *arrays):
    kb = KernelBuilder()
    refs = [kb.arg(LogicalTensor(i, "f32", a.shape), "a") for i, a in enumerate(arrays)]
    build(kb, *refs)
    kb.ret(-1)
    src = kb.source()
    fn, sig = load_kernel(src), (nbtypes.Array(nbtypes.float32, 1, "C"),) * len(arrays)
    compile_kernel(fn, sig)
    assert kernel_entry(fn, sig)(arrays) == -1
    return src


def test_loop_reads_the_kernels_scalars_and_arrays():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(N).astype(np.float32)
    x[1], x[2] = 1.0, 7.0
    out = np.zeros(N, np.float32)

    def build(kb, xr, o):
        scale = kb.let(xr.load(ir.const(0)) * 2.0, "sc")          # f32
        flag = kb.let(xr.load(ir.const(1)) > 0.0, "fl")            # bool
        shift = kb.let(ir.u64(ir.i64(xr.load(ir.const(2)))), "sh")  # u64
        wide = kb.let(ir.f64(xr.load(ir.const(3))) * 0.5, "w")     # f64
        count = kb.let(ir.i64(xr.load(ir.const(2))) + 3, "n")      # int
        two = kb.var(ir.const(2.0), "two")                          # a number numba may type as a literal
        buf = kb.alloc(N, "f32")
        with kb.for_(N) as i:
            kb.store(buf, i, xr.load(i) + 1.0)
        with kb.for_(N, parallel=True) as i:
            v = ir.select(flag, xr.load(i) * scale + buf[i], ir.const(0.0, "f32"))
            kb.emit(o.store(i, ir.f64(v) + ir.f64(shift) + wide + ir.f64(count) + two))
        # the scratch array is read again after the loop
        kb.emit(o.store(ir.const(0), o.load(ir.const(0)) + buf[N - 1]))

    src = _kernel(build, x, out)
    assert "launch(kernel_loop0" in src and "prange(" not in src and "parallel=True" not in src, src
    v = (x * (x[0] * np.float32(2)) + (x + np.float32(1))).astype(np.float64) + 7 + np.float64(x[3]) * 0.5 + 10 + 2
    want = v.astype(np.float32)
    want[0] = np.float32(np.float32(v[0]) + (x[N - 1] + np.float32(1)))
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_each_iteration_runs_once_on_a_pool_thread():
    tid = np.full(N, -1.0, np.float32)
    hits = np.zeros(N, np.float32)

    def build(kb, t, h):
        with kb.for_(N, parallel=True) as i:
            kb.emit(t.store(i, ir.f32(ir.call("get_thread_id"))))
            kb.emit(h.store(i, h.load(i) + 1.0))

    src = _kernel(build, tid, hits)
    assert runs_parallel(src) and "prange(" not in src
    assert (hits == 1).all()
    assert ((tid >= 0) & (tid < NUM_THREADS)).all()


def test_short_and_empty_ranges():
    out = np.zeros(8, np.float32)

    def build(kb, o):
        for start, stop, value in ((0, 1, 1.0), (3, 3, 2.0), (6, 4, 3.0), (5, 8, 4.0)):
            with kb.for_(stop, parallel=True, start=start) as i:
                kb.emit(o.store(i, o.load(i) + value))

    src = _kernel(build, out)
    assert src.count("launch(kernel_loop") == 4, src
    np.testing.assert_array_equal(out, [1, 0, 0, 0, 0, 4, 4, 4])


def test_a_loop_assigning_a_kernel_scalar_stays_numbas_prange():
    x = np.arange(N, dtype=np.float32)
    out = np.zeros(1, np.float32)

    def build(kb, xr, o):
        acc = kb.var(ir.const(0.0, "f32"), "acc")
        with kb.for_(N, parallel=True) as i:
            kb.assign(acc, acc + xr.load(i))
        kb.emit(o.store(ir.const(0), acc))

    src = _kernel(build, x, out)
    assert "prange(" in src and "parallel=True" in src and "launch(" not in src
    assert out[0] == x.sum()


def test_the_loop_function_is_made_machine_code_only_within_the_kernel(monkeypatch):
    """A loop function's library is optimized and made machine code as part of
    the kernel that links it, never alone (that would be compile time spent for
    nothing: the kernel calls its own copy)."""
    from numba.core import codegen
    made = []
    finalize = codegen.JITCodeLibrary._finalize_specific

    def recorded(library):
        made.append(library.name)
        return finalize(library)

    monkeypatch.setattr(codegen.JITCodeLibrary, "_finalize_specific", recorded)
    x = np.arange(N, dtype=np.float32)
    out = np.zeros(N, np.float32)
    kb = KernelBuilder()
    xr, o = (kb.arg(LogicalTensor(i, "f32", (N,)), "a") for i in range(2))
    with kb.for_(N, parallel=True) as i:
        kb.emit(o.store(i, xr.load(i) * 3.0 + 0.25))
    kb.ret(-1)
    ns = {}            # compiled afresh (no kernel cache in memory or on disk)
    exec(compile(kb.source().replace("cache=True", "cache=False"), "<kernel>", "exec"), ns)
    sig = (nbtypes.Array(nbtypes.float32, 1, "C"),) * 2
    ns["kernel"].compile(sig)
    assert kernel_entry(ns["kernel"], sig)((x, out)) == -1
    np.testing.assert_allclose(out, x * 3 + 0.25)
    assert "kernel" in made
    assert not [name for name in made if name.startswith("kernel_loop")], made


def test_the_builder_records_whether_a_kernel_runs_parallel():
    """runs_parallel reads the flag KernelBuilder.source records (a parallel loop was
    emitted), whether the loop is outlined or left to prange; it never reads text."""
    def source(parallel, reduction=False):
        kb = KernelBuilder()
        a = kb.arg(LogicalTensor(0, "f32", (N,)))
        s = kb.var(ir.const(0.0, "f32"))
        with kb.for_(N, parallel=parallel) as i:
            if reduction:   # a scalar of the kernel read then assigned: prange, not outlined
                kb.assign(s, s + a.load(i))
            else:
                kb.emit(a.store(i, a.load(i) + 1.0))
        kb.ret(0)
        return kb.source()
    serial, launched, pranged = source(False), source(True), source(True, reduction=True)
    assert (serial.parallel, launched.parallel, pranged.parallel) == (False, True, True)
    assert "launch(" in launched and "prange(" in pranged and "launch(" not in pranged
    assert [runs_parallel(s) for s in (serial, launched, pranged)] == [False, True, True]
    back = pickle.loads(pickle.dumps(launched))
    assert back == launched and back.parallel
    with pytest.raises(TypeError, match="not str"):
        runs_parallel(str(launched))
    assert runs_parallel(None) is False
