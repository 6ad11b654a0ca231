"""A group of threads sharing an mpi4py-like communicator: collectives tested in
one process."""
from __future__ import annotations

import threading

import numpy as np

from graphc import GraphcError


class ThreadGroup:
    """State shared by the members of a group of threads."""

    def __init__(self, size):
        self.size = size
        self.slots = [None] * size
        self.barrier = threading.Barrier(size, timeout=60)  # a broken protocol fails, never hangs


class ThreadComm:
    """An mpi4py-like communicator: member ``rank`` of a ThreadGroup."""

    def __init__(self, group, rank):
        self.group, self.rank = group, rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.group.size

    def allgather(self, obj):
        self.group.slots[self.rank] = obj
        self.group.barrier.wait()
        out = list(self.group.slots)
        self.group.barrier.wait()
        return out

    def Allgather(self, send, recv):
        recv[...] = np.concatenate(self.allgather(np.array(send, copy=True)))


def on_threads(size, fn):
    """fn(comm) on ``size`` threads; each member's result or GraphcError."""
    group = ThreadGroup(size)
    results = [None] * size

    def member(rank):
        try:
            results[rank] = fn(ThreadComm(group, rank))
        except GraphcError as e:
            results[rank] = e
    threads = [threading.Thread(target=member, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a member is still waiting"
    return results
