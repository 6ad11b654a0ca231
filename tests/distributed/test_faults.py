"""Any fault on one rank ends every rank with an error in bounded time: an
exception that is not a GraphcError (in a kernel call, between partitions, a
MemoryError, a KeyboardInterrupt) is told to the other members at the next
collective, and a member that stops answering (gone or stuck) is caught by the
collective timeout ($GRAPHC_COLLECTIVE_TIMEOUT).  On a group of threads and
under mpiexec (skipped without mpi4py and mpiexec)."""
import os
import re
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import graphc
from graphc import InvalidArguments, RuntimeFault
from graphc.comm import TIMEOUT_VAR, collective_timeout
from graphc.compiler import jit
from graphc.distributed_demo import sharded_spec
from support.mpi import ROOT, needs_mpi, run_mpiexec
from support.threads import ThreadComm, ThreadGroup
from test_allgather import SPEC

HERE = Path(__file__).resolve().parent


# ------------------------------------------------------- a group of threads
def _members(size, bad_rank, fault):
    """The distributed LayerNorm on ``size`` threads; ``fault()`` is raised inside
    the kernel calls of member ``bad_rank``.  Each member's result or exception."""
    g = graphc.compile(graphc.load_graph(sharded_spec(SPEC, 3, 8, "f32", -1)))
    group, results = ThreadGroup(size), [None] * size
    bad_thread = {}
    real = jit.call_kernel, jit.call_serial   # (the entry points of parallel and serial kernels)

    def faulty(call):
        def call_kernel(kernel, args):
            if threading.current_thread() is bad_thread.get("t"):
                raise fault()
            return call(kernel, args)
        return call_kernel

    def member(rank):
        try:
            results[rank] = g.run({0: np.ones((3, 8), np.float32), 3: np.ones(8, np.float32),
                                   4: np.zeros(8, np.float32)}, comm=ThreadComm(group, rank))
        except BaseException as e:  # noqa: BLE001 - the test looks at what each member raised
            results[rank] = e
    threads = [threading.Thread(target=member, args=(r,)) for r in range(size)]
    bad_thread["t"] = None if bad_rank is None else threads[bad_rank]
    jit.call_kernel, jit.call_serial = (faulty(call) for call in real)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        jit.call_kernel, jit.call_serial = real
    assert not any(t.is_alive() for t in threads), "a member is still waiting"
    return results


@pytest.mark.parametrize("fault", [lambda: ZeroDivisionError("boom"), lambda: MemoryError("no memory"),
                                   KeyboardInterrupt], ids=["bug", "memory", "interrupt"])
def test_threads_any_exception_fails_every_member(fault):
    results = _members(3, 1, fault)
    name = type(fault()).__name__
    assert type(results[1]).__name__ == name, results[1]  # the failing member keeps its own exception
    for r in (0, 2):
        assert isinstance(results[r], RuntimeFault), results[r]
        assert results[r].op.kind == "AllGather"
        assert f"rank 1 of 3 failed before the collective: {name}" in str(results[r]), results[r]


@pytest.mark.parametrize("value", ["0", "-3", "nan", "inf", "soon"])
def test_a_bad_timeout_is_invalid_arguments(monkeypatch, value):
    monkeypatch.setenv(TIMEOUT_VAR, value)
    with pytest.raises(InvalidArguments, match=TIMEOUT_VAR):
        collective_timeout()


def test_timeout_default_and_value(monkeypatch):
    monkeypatch.delenv(TIMEOUT_VAR, raising=False)
    assert collective_timeout() == 60.0
    monkeypatch.setenv(TIMEOUT_VAR, "2.5")
    assert collective_timeout() == 2.5


def test_a_bad_timeout_fails_every_member_together(monkeypatch):
    monkeypatch.setenv(TIMEOUT_VAR, "never")
    results = _members(2, None, None)
    for r in results:
        assert isinstance(r, RuntimeFault) and "InvalidArguments" in str(r) and TIMEOUT_VAR in str(r), r


# ------------------------------------------------------------------- mpiexec
def launch(n, fault, bad_rank, timeout_var=None, limit=90):
    """(exit status, output, seconds) of fault_rank.py under mpiexec."""
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(HERE)])}
    if timeout_var is not None:
        env[TIMEOUT_VAR] = str(timeout_var)
    saved = os.environ.pop(TIMEOUT_VAR, None)
    try:
        return run_mpiexec(n, [str(HERE / "fault_rank.py"), fault, str(bad_rank)], limit, env,
                           what=f"with fault {fault}")
    finally:
        if saved is not None:
            os.environ[TIMEOUT_VAR] = saved


@needs_mpi
@pytest.mark.parametrize("fault, error", [("kernel", "ZeroDivisionError: injected fault inside a kernel call"),
                                          ("between", "RuntimeError: injected fault between partitions"),
                                          ("memory", "MemoryError: injected fault: no memory")])
def test_mpiexec_internal_error_on_one_rank_ends_every_rank(fault, error):
    status, out, seconds = launch(2, fault, 1, limit=60)
    assert status != 0, out
    assert seconds < 60, (seconds, out)
    assert f"rank 0/2: graphc: RuntimeFault: op 1 (AllGather \"all_gather\"): rank 1 of 2 failed before the " \
           f"collective: {error}" in out, out
    assert f"rank 1/2: internal error: {error}" in out, out  # with its traceback
    assert "Traceback" in out and "PASSED" not in out, out


@needs_mpi
def test_mpiexec_interrupt_on_one_rank_ends_every_rank():
    status, out, seconds = launch(2, "interrupt", 1, limit=60)
    assert status != 0 and seconds < 60, (status, seconds, out)
    assert "rank 1 of 2 failed before the collective: KeyboardInterrupt" in out, out
    assert out.count("KeyboardInterrupt") >= 2, out  # rank 1 ends with its own KeyboardInterrupt


@needs_mpi
def test_mpiexec_rank_that_dies_ends_the_job():
    """MPICH's launcher ends the job as soon as a rank exits without MPI_Finalize;
    under launchers that do not, the collective timeout below ends the others."""
    status, out, seconds = launch(2, "die", 1, timeout_var=5, limit=60)
    assert status != 0, out
    assert seconds < 5 + 30, (seconds, out)   # the timeout plus start-up, never the default 60 s
    assert "PASSED" not in out, out


@needs_mpi
@pytest.mark.parametrize("fault, stage", [("stuck", "the status exchange before the collective"),
                                          ("stuck_data", "the data exchange")])
def test_mpiexec_stuck_rank_times_out_and_aborts(fault, stage):
    status, out, seconds = launch(2, fault, 1, timeout_var=3, limit=60)
    assert status != 0, out
    assert seconds < 3 + 30, (seconds, out)
    assert f"rank 0/2: graphc: CollectiveTimeout: op 1 (AllGather \"all_gather\"): rank 1 of 2 did not answer " \
           f"{stage} within 3 s (GRAPHC_COLLECTIVE_TIMEOUT)" in out, out
    assert "aborting the MPI job" in out, out
