"""The gradient of the distributed LayerNorm (Pre -> AllGather -> Post, with
graphc.grad: AllGather's derivative a ReduceScatter) on P members equals
torch.autograd of the whole LayerNorm over the concatenated hidden dim: on a
group of threads and under mpiexec -n 2; and ReduceScatter itself."""
import re

import numpy as np
import pytest

import graphc
from graphc.builder import single_op_graph
from graphc.errors import InvalidShape, RuntimeFault
from support.distributed_training import check_member, member_gradients, whole_case
from support.mpi import needs_mpi, run_mpiexec
from support.threads import on_threads

pytest.importorskip("torch")
HERE = __import__("pathlib").Path(__file__).resolve().parent


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("size", [1, 2])
def test_threads(dtype, size):
    case = whole_case(dtype, 5, 24)
    results = on_threads(size, lambda comm: member_gradients(comm, comm.Get_rank(), size, dtype, case))
    for rank, got in enumerate(results):
        assert isinstance(got, dict), got
        check_member(got, rank, size, dtype, case)


@needs_mpi
@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_mpiexec_two_ranks(dtype):
    status, out, _ = run_mpiexec(2, [str(HERE / "grad_rank.py"), dtype, "6", "40"], 300, what="grad_rank.py")
    assert status == 0, out
    for r in range(2):
        assert re.search(rf"rank {r}/2: [^\n]* PASSED", out), out


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
def test_reduce_scatter_sums_and_splits(dtype):
    g = single_op_graph("ReduceScatter", [(dtype, [2, 6])], [(dtype, [2, -1])], {"axis": 1})
    cg = graphc.compile(g)
    parts = [(np.arange(12).reshape(2, 6) * (r + 1)).astype(graphc.DataType.parse(dtype).np) for r in range(3)]
    results = on_threads(3, lambda comm: cg.run({0: parts[comm.Get_rank()]}, comm=comm)[1])
    total = sum(p.astype(np.float64) for p in parts)
    for r, y in enumerate(results):
        np.testing.assert_array_equal(y.astype(np.float64), total[:, 2 * r:2 * r + 2])
    refs = on_threads(3, lambda comm: graphc.reference.run(g, {0: parts[comm.Get_rank()]}, comm=comm)[1])
    for r, y in enumerate(refs):
        np.testing.assert_array_equal(np.asarray(y, np.float64), total[:, 2 * r:2 * r + 2])


def test_reduce_scatter_checks_the_group():
    with pytest.raises(InvalidShape, match="ReduceScatter"):
        single_op_graph("ReduceScatter", [("f32", [2, 6])], [("f32", [2, 4])], {"axis": 1})
    cg = graphc.compile(single_op_graph("ReduceScatter", [("f32", [2, 6])], [("f32", [2, 3])], {"axis": 1}))
    for r in on_threads(3, lambda comm: cg.run({0: np.ones((2, 6), np.float32)}, comm=comm)):
        assert isinstance(r, RuntimeFault) and "group size" in str(r), r


@pytest.mark.parametrize("kind, out", [("AllGather", [2, 6]), ("ReduceScatter", [2, 1])])
def test_collectives_derivatives_are_each_other(kind, out):
    """On 3 threads: AllGather's gradient is the members' seeds summed, member r
    keeping block r (ReduceScatter); ReduceScatter's is every member's seed
    concatenated (AllGather)."""
    g = single_op_graph(kind, [("f32", [2, 2 if kind == "AllGather" else 3])], [("f32", out)], {"axis": 1})
    tr = graphc.grad(g, [0])
    assert ({"AllGather", "ReduceScatter"} - {kind}) <= {op.kind for op in tr.graph.ops.values()}
    seeds = [np.arange(12).reshape(2, 6)[:, :out[1]].astype(np.float32) * (r + 1) for r in range(3)]
    cg = graphc.compile(tr.graph)
    x = np.zeros(g.tensors[0].shape, np.float32)
    results = on_threads(3, lambda comm: cg.run({0: x, tr.grad_in(1): seeds[comm.Get_rank()]},
                                                comm=comm)[tr.grad_out(0)])
    for r, dx in enumerate(results):
        want = sum(seeds)[:, 2 * r:2 * r + 2] if kind == "AllGather" else np.concatenate(seeds, axis=1)
        np.testing.assert_array_equal(dx, want)
