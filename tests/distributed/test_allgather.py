"""Compiled AllGather and the distributed LayerNorm (Pre -> AllGather -> Post):
in one process (a group of one), on a group of threads sharing an mpi4py-like
communicator, and under mpiexec (skipped without mpi4py and mpiexec)."""
import json
import os
import re
import sys

import numpy as np
import pytest

import graphc
from graphc import InvalidArguments, RuntimeFault
from graphc.builder import single_op_graph
from graphc.comm import default_comm
from graphc.distributed_demo import sharded_spec
from support import NP, SPECS, assert_close
from support.mpi import ROOT, needs_mpi, run_mpiexec
from support.threads import on_threads

SPEC = json.loads((SPECS / "layernorm_distributed.json").read_text())


def layernorm64(x, gamma, beta, eps):
    x, gamma, beta = (np.asarray(a, dtype=np.float64) for a in (x, gamma, beta))
    mean = x.mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=-1, keepdims=True) + eps) * gamma + beta


# ------------------------------------------------------------- a group of one
@pytest.mark.parametrize("dtype, axis, out", [("f32", 0, [3, 5]), ("bf16", -1, [3, -1]), ("s8", 1, [3, 5])])
def test_group_of_one_copies(dtype, axis, out):
    x = (np.arange(15).reshape(3, 5) - 7).astype(NP[dtype])
    g = single_op_graph("AllGather", [(dtype, [3, 5])], [(dtype, out)], {"axis": axis})
    (y,) = graphc.compile(g).run({0: x}).values()
    assert y.dtype == x.dtype and y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))


def test_group_of_one_writes_caller_outputs():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    cp = single_op_graph("AllGather", [("f32", [2, 3])], [("f32", [2, 3])]).get_partitions()[0].compile()
    out = np.zeros((2, 3), np.float32)
    assert cp.execute({0: x}, {1: out})[1] is out
    np.testing.assert_array_equal(out, x)


def test_declared_dim_for_a_bigger_group_is_a_runtime_fault():
    g = single_op_graph("AllGather", [("f32", [2, 3])], [("f32", [2, 6])])
    cg = graphc.compile(g)  # the group is known only at run
    with pytest.raises(RuntimeFault, match="group size"):
        cg.run({0: np.ones((2, 3), np.float32)})


def test_allgather_is_its_own_partition():
    parts = graphc.load_graph(SPEC).get_partitions()
    assert [p.kind for p in parts] == ["LayerNormPreAllGather", "AllGather", "LayerNormPostAllGather"]
    assert parts[1].compile().source is None  # a collective, not a kernel


def test_default_comm_needs_a_launcher_and_mpi4py(monkeypatch):
    for v in ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID"):
        monkeypatch.delenv(v, raising=False)
    assert default_comm() is None
    monkeypatch.setenv("PMI_SIZE", "2")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import fails
    assert default_comm() is None


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_bundled_spec_against_float64_layernorm(dtype):
    g = graphc.load_graph(sharded_spec(SPEC, 6, 40, dtype, -1))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 40)).astype(NP[dtype])
    gamma = (1 + rng.standard_normal(40)).astype(NP[dtype])
    beta = rng.standard_normal(40).astype(NP[dtype])
    y = graphc.run(g, {0: x, 3: gamma, 4: beta})[5]
    assert_close(y, layernorm64(x, gamma, beta, 1e-5), dtype)
    assert_close(y, graphc.reference.run(g, {0: x, 3: gamma, 4: beta})[5], dtype)


def test_bundled_spec_as_shipped():
    g = graphc.load_graph(SPEC)
    rng = np.random.default_rng(2)
    x, gamma, beta = rng.standard_normal((2, 4, 32)), rng.standard_normal(32), rng.standard_normal(32)
    inputs = {0: x.astype(np.float32), 3: gamma.astype(np.float32), 4: beta.astype(np.float32)}
    assert_close(graphc.run(g, inputs)[5], layernorm64(inputs[0], inputs[3], inputs[4], 1e-5), "f32")


# ------------------------------------------------------- a group of threads
@pytest.mark.parametrize("dtype, axis", [("f32", 0), ("bf16", 1), ("f16", -1)])
def test_threads_gather_in_rank_order(dtype, axis):
    shape = [2, 3]
    out = list(shape)
    out[axis] = -1
    g = single_op_graph("AllGather", [(dtype, shape)], [(dtype, out)], {"axis": axis})
    cg = graphc.compile(g)
    parts = [(np.arange(6).reshape(2, 3) + 10 * r).astype(NP[dtype]) for r in range(3)]
    results = on_threads(3, lambda comm: cg.run({0: parts[comm.Get_rank()]}, comm=comm)[1])
    for y in results:
        np.testing.assert_array_equal(y, np.concatenate(parts, axis=axis))


def test_threads_distributed_layernorm():
    size, tokens, hidden = 4, 5, 48
    width = hidden // size
    rng = np.random.default_rng(3)
    x = rng.standard_normal((tokens, hidden)).astype(np.float32)
    gamma, beta = rng.standard_normal(hidden).astype(np.float32), rng.standard_normal(hidden).astype(np.float32)

    def member(comm):
        cols = slice(comm.Get_rank() * width, (comm.Get_rank() + 1) * width)
        g = graphc.load_graph(sharded_spec(SPEC, tokens, width, "f32", -1))
        return graphc.run(g, {0: x[:, cols].copy(), 3: gamma[cols].copy(), 4: beta[cols].copy()}, comm=comm)[5]
    y = np.concatenate(on_threads(size, member), axis=1)
    assert_close(y, layernorm64(x, gamma, beta, 1e-5), "f32")


def _faulty_run(size, bad_rank, fault):
    """The distributed LayerNorm on threads where member bad_rank gets a bad
    input (shape) or declares the gathered stats of a bigger group (width)."""
    tokens, width = 3, 8

    def member(comm):
        bad = comm.Get_rank() == bad_rank
        gathered = 2 * (size + 1) if bad and fault == "width" else -1
        g = graphc.load_graph(sharded_spec(SPEC, tokens, width, "f32", gathered))
        x = np.ones((tokens, width + (bad and fault == "shape")), np.float32)
        return graphc.run(g, {0: x, 3: np.ones(width, np.float32), 4: np.zeros(width, np.float32)}, comm=comm)
    return on_threads(size, member)


@pytest.mark.parametrize("fault, cause", [("shape", "InvalidArguments: input tensor 0 has the wrong shape"),
                                          ("width", "RuntimeFault: .*disagrees with the group size")])
def test_a_bad_member_fails_every_member(fault, cause):
    results = _faulty_run(3, 1, fault)
    for r in results:
        assert isinstance(r, RuntimeFault), r
        assert r.op.kind == "AllGather"
        assert re.search(f"rank 1 of 3 failed before the collective: {cause}", str(r)), r


def test_members_gathering_different_shapes_fail_together():
    g = {rows: graphc.load_graph(sharded_spec(SPEC, rows, 4, "f32", -1)) for rows in (2, 3)}

    def member(comm):
        rows = 3 if comm.Get_rank() == 2 else 2
        return graphc.run(g[rows], {0: np.ones((rows, 4), np.float32), 3: np.ones(4, np.float32),
                                    4: np.zeros(4, np.float32)}, comm=comm)
    for r in on_threads(3, member):
        assert isinstance(r, RuntimeFault) and "rank 2" in str(r) and "differ" in str(r), r


def test_members_gathering_along_different_axes_fail_together():
    """Decided (docs/design.md): the members of a group agree on the axis as on
    src's shape and dtype; each got its own graph's concatenation before."""
    graphs = {axis: graphc.compile(single_op_graph("AllGather", [("f32", [2, 2])], [("f32", [-1, -1])],
                                                   {"axis": axis})) for axis in (0, 1, -1)}
    x = np.ones((2, 2), np.float32)
    for r in on_threads(3, lambda comm: graphs[1 if comm.Get_rank() == 2 else 0].run({0: x}, comm=comm)):
        assert isinstance(r, RuntimeFault) and "the members gather along different axes" in str(r), r
        assert "attribute 'axis' of rank 2" in str(r) and "expected rank 0's axis 0, found 1" in str(r)
    # axis -1 and axis 1 of a 2-D src are one axis
    results = on_threads(2, lambda comm: graphs[1 if comm.Get_rank() else -1].run({0: x * comm.Get_rank()},
                                                                                  comm=comm)[1])
    for y in results:
        np.testing.assert_array_equal(y, np.concatenate([x * 0, x], axis=1))


def test_missing_input_on_one_member_fails_every_member():
    g = graphc.compile(graphc.load_graph(sharded_spec(SPEC, 2, 4, "f32", -1)))

    def member(comm):
        inputs = {0: np.ones((2, 4), np.float32), 3: np.ones(4, np.float32), 4: np.zeros(4, np.float32)}
        if comm.Get_rank() == 0:
            del inputs[0]
        return g.run(inputs, comm=comm)
    for r in on_threads(2, member):
        assert isinstance(r, RuntimeFault) and "rank 0 of 2 failed" in str(r) and "missing input" in str(r), r


def test_single_process_fault_keeps_its_own_error():
    g = graphc.load_graph(sharded_spec(SPEC, 2, 4, "f32", -1))
    with pytest.raises(InvalidArguments, match="wrong shape"):
        graphc.run(g, {0: np.ones((2, 5), np.float32), 3: np.ones(4, np.float32), 4: np.zeros(4, np.float32)})


# ------------------------------------------------------------------- mpiexec
def mpiexec(n, *args, timeout=180):
    """(exit status, stdout + stderr) of `mpiexec -n n python -m graphc
    distributed-layernorm args`."""
    status, out, _ = run_mpiexec(n, ["-m", "graphc", "distributed-layernorm", *args], timeout)
    return status, out


@needs_mpi
@pytest.mark.parametrize("n, args", [(2, ["--dtype", "bf16", "--tokens", "33", "--hidden", "70"]), (4, [])])
def test_mpiexec_passes_on_every_rank(n, args):
    status, out = mpiexec(n, *args)
    assert status == 0, out
    for r in range(n):
        assert re.search(rf"rank {r}/{n}: [^\n]* PASSED", out), out


@needs_mpi
def test_mpiexec_bad_rank_fails_every_rank():
    n = 4
    status, out = mpiexec(n, "--fault-rank", "1", "--fault", "shape")
    assert status != 0, out
    for r in range(n):
        assert f"rank {r}/{n}: graphc: RuntimeFault: op 1 (AllGather \"all_gather\"): rank 1 of {n} failed" in out, out
