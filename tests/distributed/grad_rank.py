"""One MPI rank of the distributed LayerNorm's gradient test
(test_grad_layernorm.py): ``mpiexec -n P python grad_rank.py DTYPE TOKENS HIDDEN``.
Each rank runs graphc.grad's training graph of its columns, the AllGather's
gradient a ReduceScatter across the ranks, and checks them against
torch.autograd of the whole LayerNorm; prints ``rank r/P: ... PASSED``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))   # tests/: the support package

from mpi4py import MPI  # noqa: E402

from support.distributed_training import check_member, member_gradients, whole_case  # noqa: E402

if __name__ == "__main__":
    dtype, tokens, hidden = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    case = whole_case(dtype, tokens, hidden)
    got = member_gradients(comm, rank, size, dtype, case)
    check_member(got, rank, size, dtype, case)
    assert "ReduceScatter" in got["kinds"]
    print(f"rank {rank}/{size}: dx, dgamma, dbeta of {tokens}x{hidden} {dtype} against torch PASSED", flush=True)
