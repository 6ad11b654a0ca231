"""Collectives: ops that exchange data between the members of a group (MPI
ranks, or threads with an mpi4py-like communicator) instead of computing; they
run here, on the communicator given to the run, never in a kernel.

An op kind is a collective when :data:`COLLECTIVES` names its executable."""
from __future__ import annotations

import numpy as np

from ... import comm as group
from ...errors import GraphcError, InvalidArguments, RuntimeFault
from .base import Executable


class CollectiveExecutable(Executable):
    """A collective op's executable; ``comm`` None means graphc.comm.default_comm()."""

    impl_kind = "collective"

    def __init__(self, op):
        self.op = op

    def roads(self):
        return ("mpi_" + self.op.kind.lower(),)


class AllGatherExecutable(CollectiveExecutable):
    """AllGather (graphc/ops/distributed.py): src of every member concatenated
    along axis in rank order.  An output whose dims were unknown at compile (the
    group is known only at run) comes to ``run`` as None and is returned."""

    def run(self, ins, outs, comm):
        op, schema = self.op, self.op.schema
        comm = comm if comm is not None else group.default_comm()
        if comm is None and outs[0] is not None:
            schema.check_group(op, ins[0], 1)
            np.copyto(outs[0], ins[0])  # a group of one: the collective is one copy
            return outs
        dst = self._gather(ins[0], comm, None)
        if outs[0] is None:
            return [dst]
        if outs[0].shape != dst.shape:
            raise InvalidArguments("the output array has the wrong shape", op=op, where="port 'dst'",
                                   expected=list(dst.shape), found=list(outs[0].shape))
        outs[0][...] = dst
        return outs

    def fail(self, comm, failure):
        self._gather(None, comm if comm is not None else group.default_comm(), failure)
        raise failure

    def _agree(self, src, comm, failure):
        """First every member checks its part and learns whether all can go on: a
        fault on any member (``failure``: any exception, or one found here)
        raises a RuntimeFault on every member instead of leaving them waiting,
        and so do members whose src differ in shape or dtype or who exchange
        along different axes (axis -1 and the last axis are one); a member that
        does not answer in time makes the others raise a CollectiveTimeout (see
        graphc.comm)."""
        op, schema = self.op, self.op.schema
        if failure is None:
            try:
                schema.check_group(op, src, group.rank_and_size(comm)[1])
            except GraphcError as e:
                failure = e
        axis = schema.axis(op)
        parts = group.agree(op, comm, failure, None if failure else (src.shape, str(src.dtype), axis))
        for rank, (shape, dtype, at) in enumerate(parts):
            if (shape, dtype) != parts[0][:2]:
                raise group.group_wide(RuntimeFault("the members' src differ in shape or dtype", op=op,
                                                    where=f"port 'src' of rank {rank}",
                                                    expected=f"rank 0's {parts[0][:2]}", found=(shape, dtype)))
            if at != parts[0][2]:   # every member must get the one result (docs/design.md)
                raise group.group_wide(RuntimeFault(f"the members {self.verb} along different axes", op=op,
                                                    where=f"attribute 'axis' of rank {rank}",
                                                    expected=f"rank 0's axis {parts[0][2]}", found=at))
        return axis

    verb = "gather"

    def _gather(self, src, comm, failure):
        """src of every member of comm's group (None: a group of one) concatenated
        along axis in rank order, once the members agree (``_agree``)."""
        return group.allgather_array(comm, src, self._agree(src, comm, failure), self.op)


class ReduceScatterExecutable(AllGatherExecutable):
    """ReduceScatter (graphc/ops/distributed.py): src summed over the members
    (in float64, in rank order: every member gets the same sums), member r
    keeping block r along axis.  Gathers every member's src: meant for small
    tensors (a distributed LayerNorm's statistics)."""

    verb = "reduce-scatter"

    def _gather(self, src, comm, failure):
        axis = self._agree(src, comm, failure)
        rank, size = group.rank_and_size(comm)
        blocks = group.allgather_array(comm, src[None], 0, self.op)
        total = blocks.sum(axis=0, dtype=np.float64).astype(src.dtype)
        n = src.shape[axis] // size
        return np.ascontiguousarray(np.take(total, range(rank * n, (rank + 1) * n), axis=axis))


#: the executable of each collective op kind
COLLECTIVES: dict[str, type[CollectiveExecutable]] = {"AllGather": AllGatherExecutable,
                                                      "ReduceScatter": ReduceScatterExecutable}


def collective_of(ops) -> CollectiveExecutable | None:
    """The executable of a partition of one collective op, else None."""
    if len(ops) == 1 and ops[0].kind in COLLECTIVES:
        return COLLECTIVES[ops[0].kind](ops[0])
    return None
