"""Communicators for collective ops (AllGather): the default group, a vote that
lets every member fail together, and a buffer-based gather.

A communicator is mpi4py's (``Get_rank``, ``Get_size``, ``allgather``,
``Allgather``).  Without one, graphc uses ``MPI.COMM_WORLD`` when the process was
started by an MPI launcher and mpi4py is importable, else a group of one
(``None``).  mpi4py is imported only then.
"""
from __future__ import annotations

import os

import numpy as np

from .errors import RuntimeFault

#: set in each process by MPI launchers (MPICH/Hydra, Intel MPI, Open MPI)
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALRANKID")


def default_comm():
    """``MPI.COMM_WORLD`` under an MPI launcher with mpi4py installed, else None."""
    if not any(v in os.environ for v in LAUNCHER_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


def rank_and_size(comm) -> tuple[int, int]:
    return (0, 1) if comm is None else (comm.Get_rank(), comm.Get_size())


def agree(op, comm, failure, info) -> list:
    """Every member's ``info``, in rank order, once every member has reached this
    point.  ``failure`` is the GraphcError this member hit (None if it is fine): if
    any member failed, every member raises a RuntimeFault naming ``op`` and the
    first failed rank, so that no member is left waiting in the collective."""
    if comm is None:
        if failure is not None:
            raise failure
        return [info]
    note = None if failure is None else f"{type(failure).__name__}: {failure}"
    votes = comm.allgather((note, info))
    for rank, (bad, _) in enumerate(votes):
        if bad is not None:
            raise RuntimeFault(f"rank {rank} of {len(votes)} failed before the collective: {bad}", op=op) \
                from failure
    return [i for _, i in votes]


def allgather_array(comm, src: np.ndarray, axis: int) -> np.ndarray:
    """``src`` of every member concatenated along ``axis`` in rank order (every
    member's src has the same shape and dtype).  The bytes travel through the
    buffer-based ``Allgather`` into [size, ...], then the rank axis moves to axis."""
    src = np.ascontiguousarray(src)
    _, size = rank_and_size(comm)
    blocks = np.empty((size,) + src.shape, dtype=src.dtype)
    if comm is None:
        blocks[0] = src
    else:
        comm.Allgather(src.reshape(-1).view(np.uint8), blocks.reshape(-1).view(np.uint8))
    shape = src.shape[:axis] + (size * src.shape[axis],) + src.shape[axis + 1:]
    return np.moveaxis(blocks, 0, axis).reshape(shape)
