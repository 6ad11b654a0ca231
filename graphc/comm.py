"""Communicators for collective ops (AllGather): the default group, a vote that
lets every member fail together, and a buffer-based gather, both bounded in time.

A communicator is mpi4py's (``Get_rank``, ``Get_size``, ``allgather``,
``Allgather``).  Without one, graphc uses ``MPI.COMM_WORLD`` when the process was
started by an MPI launcher and mpi4py is importable, else a group of one
(``None``).  mpi4py is imported only then.

On a communicator with non-blocking point-to-point calls (mpi4py's ``isend``,
``Iprobe``, ``Isend``, ``Irecv``) every exchange is polled against a deadline,
``$GRAPHC_COLLECTIVE_TIMEOUT`` seconds (default 60) from the moment this member
reaches it: a member that does not answer in time (stuck, or gone) makes the
others raise a :class:`CollectiveTimeout` naming it instead of waiting forever.
The group can no longer talk after that, and an MPI process would then hang at
exit in ``MPI_Finalize`` waiting for the silent member: so a timeout also
arranges for ``comm.Abort`` at interpreter exit, the one way out of the job
(the error itself is raised first and can be handled).  Other communicators
(e.g. a group of threads with only ``allgather`` / ``Allgather``) block.
"""
from __future__ import annotations

import atexit
import math
import os
import sys
import threading
import time

import numpy as np

from .errors import GraphcError, InvalidArguments, RuntimeFault

#: set in each process by MPI launchers: MPICH/Hydra and Intel MPI (PMI_*, MPI_LOCALRANKID), Open MPI
#: (OMPI_*), PMIx-based ones (PMIX_RANK: Open MPI 5, Slurm's srun --mpi=pmix), MVAPICH (MV2_COMM_WORLD_*)
#: and Cray's ALPS (ALPS_APP_PE).  (Slurm's SLURM_PROCID is not one: srun sets it for tasks without MPI.)
LAUNCHER_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "MPI_LOCALRANKID",
                 "PMIX_RANK", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE", "ALPS_APP_PE")
TIMEOUT_VAR = "GRAPHC_COLLECTIVE_TIMEOUT"
DEFAULT_TIMEOUT = 60.0
#: message tags of the status exchange and of the gathered data (below 32767, MPI's least tag bound)
STATUS_TAG, DATA_TAG = 7301, 7302


class CollectiveTimeout(RuntimeFault):
    """A member of the group did not answer a collective in time; the group is
    unusable from then on (see the module doc: MPI jobs abort at exit)."""


def collective_timeout() -> float:
    """Seconds a member waits for the others at a collective ($GRAPHC_COLLECTIVE_TIMEOUT)."""
    text = os.environ.get(TIMEOUT_VAR, "")
    if not text.strip():
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise InvalidArguments(f"{TIMEOUT_VAR} must be a positive number of seconds", found=repr(text))
    return value


_local = threading.local()   # per member thread: status exchanges this member has sent
_broken: set[int] = set()    # id() of communicators on which a member stopped answering
_abort_registered = False
#: seconds an aborting rank waits for the launcher to forward its last lines before MPI_Abort
_ABORT_GRACE_S = 1.0


def exchanges() -> int:
    """How many status exchanges this thread has sent its status to: a caller
    compares it before and after a step to learn whether the other members
    already heard from this one."""
    return getattr(_local, "sent", 0)


def group_wide(e: BaseException) -> BaseException:
    """Mark ``e`` as raised on every member of the group (nobody is left to tell)."""
    e.group_wide = True
    return e


def default_comm():
    """``MPI.COMM_WORLD`` under an MPI launcher with mpi4py installed, else None."""
    if not any(v in os.environ for v in LAUNCHER_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    return MPI.COMM_WORLD


#: what graphc calls on a communicator: the reference executor, and compiled
#: partitions on one without non-blocking calls (those use the point-to-point
#: calls of ``_nonblocking`` instead of the two gathers)
REFERENCE_CALLS = ("Get_size", "allgather")
COMPILED_CALLS = ("Get_rank", "Get_size", "allgather", "Allgather")


def check_comm(comm, reference: bool = False):
    """``comm`` itself when it is None or a communicator with the calls graphc
    makes (REFERENCE_CALLS for the reference executor, else COMPILED_CALLS or
    mpi4py's non-blocking ones) and a sensible rank and size; else
    InvalidArguments (not an AttributeError half-way through a run)."""
    if comm is None:
        return comm
    needs = REFERENCE_CALLS if reference else ("Get_rank", "Get_size") if _nonblocking(comm) else COMPILED_CALLS
    missing = [m for m in needs if not callable(getattr(comm, m, None))]
    if missing:
        raise InvalidArguments("comm must be None or a communicator (mpi4py's, or one with its calls)",
                               expected="an object with " + ", ".join(needs),
                               found=f"{type(comm).__name__} {comm!r:.60} without {', '.join(missing)}")
    if not reference:
        rank_and_size(comm)
    elif not _group_size(comm.Get_size()):
        raise InvalidArguments("the communicator's size is not a group's", expected="an integer >= 1",
                               found=f"Get_size() {comm.Get_size()!r:.40}")
    return comm


def _group_size(size) -> bool:
    return not isinstance(size, bool) and isinstance(size, (int, np.integer)) and size >= 1


def rank_and_size(comm) -> tuple[int, int]:
    """(this member's rank, the group's size): (0, 1) for None; a rank and size
    that are no integers with 0 <= rank < size are InvalidArguments."""
    if comm is None:
        return 0, 1
    rank, size = comm.Get_rank(), comm.Get_size()
    if not _group_size(size) or isinstance(rank, bool) or not isinstance(rank, (int, np.integer)) \
            or not 0 <= rank < size:
        raise InvalidArguments("the communicator's rank and size are not a member of a group",
                               expected="integers with 0 <= Get_rank() < Get_size()",
                               found=f"Get_rank() {rank!r:.40}, Get_size() {size!r:.40}")
    return int(rank), int(size)


def _nonblocking(comm) -> bool:
    return all(hasattr(comm, m) for m in ("isend", "Iprobe", "recv", "Isend", "Irecv"))


def _timed_out(op, comm, ranks, timeout, what) -> CollectiveTimeout:
    _broken.add(id(comm))
    _abort_at_exit(comm)
    _, size = rank_and_size(comm)
    who = f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))
    return group_wide(CollectiveTimeout(
        f"{who} of {size} did not answer {what} within {timeout:g} s ({TIMEOUT_VAR}): it is stuck or gone; "
        "the group can no longer communicate" + (" and the MPI job aborts at exit" if _is_mpi(comm) else ""),
        op=op))


def _wait(op, comm, pending: dict, timeout: float, what: str) -> None:
    """Poll ``pending`` {rank: test() -> done} until all are done; past the
    deadline raise a CollectiveTimeout naming the ranks still pending."""
    start, delay = time.monotonic(), 0.0
    while True:
        for r in [r for r, test in pending.items() if test()]:
            del pending[r]
        if not pending:
            return
        if time.monotonic() - start > timeout:
            raise _timed_out(op, comm, sorted(pending), timeout, what)
        time.sleep(delay)
        delay = min(2 * delay or 1e-4, 5e-3)


def _check_usable(op, comm) -> None:
    if id(comm) in _broken:
        raise group_wide(CollectiveTimeout("an earlier collective on this communicator stopped half-way (a member "
                                           "did not answer, or this one was interrupted): the group can no longer "
                                           "communicate", op=op))


def _exchange(op, comm, obj, timeout: float) -> list:
    """Every member's ``obj`` in rank order: sent to and received from each other
    member, polled against the deadline."""
    rank, size = rank_and_size(comm)
    _check_usable(op, comm)
    if not _nonblocking(comm):
        _local.sent = exchanges() + 1
        return comm.allgather(obj)
    votes = [None] * size
    votes[rank] = obj
    pending = {}
    try:
        sends = {r: comm.isend(obj, dest=r, tag=STATUS_TAG) for r in range(size) if r != rank}
        _local.sent = exchanges() + 1

        def heard(r):
            if sends[r] is not None and sends[r].Test():
                sends[r] = None
            if votes[r] is None and comm.Iprobe(source=r, tag=STATUS_TAG):
                votes[r] = comm.recv(source=r, tag=STATUS_TAG)
            return sends[r] is None and votes[r] is not None
        pending = {r: (lambda r=r: heard(r)) for r in sends}
        _wait(op, comm, pending, timeout, "the status exchange before the collective")
    except BaseException as e:
        _stopped(op, comm, e)
    return votes


def _stopped(op, comm, e: BaseException):
    """An exchange stopped half-way (a timeout, an MPI error, an interrupt): its
    messages no longer pair up, so the communicator is not used again.  MPI
    errors (a failed member or link) become a RuntimeFault; others go on."""
    _broken.add(id(comm))
    if isinstance(e, Exception) and not isinstance(e, GraphcError):
        raise group_wide(RuntimeFault(f"the communicator failed: {type(e).__name__}: {e}", op=op)) from e
    raise e


def agree(op, comm, failure, info) -> list:
    """Every member's ``info``, in rank order, once every member has reached this
    point.  ``failure`` is the exception this member hit (None if it is fine): if
    any member failed, every member raises a RuntimeFault naming ``op`` and the
    first failed rank, so that no member is left waiting in the collective.  A
    member that does not answer within the timeout makes the others raise a
    CollectiveTimeout."""
    if comm is None:
        if failure is not None:
            raise failure
        return [info]
    try:
        timeout = collective_timeout()
    except InvalidArguments as e:
        timeout, failure = DEFAULT_TIMEOUT, failure or e
    note = None if failure is None else f"{type(failure).__name__}: {failure}"
    votes = _exchange(op, comm, (note, info), timeout)
    for rank, (bad, _) in enumerate(votes):
        if bad is not None:
            raise group_wide(RuntimeFault(f"rank {rank} of {len(votes)} failed before the collective: {bad}",
                                          op=op)) from failure
    return [i for _, i in votes]


def allgather_array(comm, src: np.ndarray, axis: int, op=None) -> np.ndarray:
    """``src`` of every member concatenated along ``axis`` in rank order (every
    member's src has the same shape and dtype).  The bytes travel into [size, ...]
    (point to point, polled against the deadline, when the communicator can; else
    through the blocking buffer-based ``Allgather``), then the rank axis moves to axis."""
    src = np.ascontiguousarray(src)
    rank, size = rank_and_size(comm)
    blocks = np.empty((size,) + src.shape, dtype=src.dtype)
    if comm is None:
        blocks[0] = src
    elif not _nonblocking(comm):
        comm.Allgather(src.reshape(-1).view(np.uint8), blocks.reshape(-1).view(np.uint8))
    else:
        _check_usable(op, comm)
        blocks[rank] = src
        mine = src.reshape(-1).view(np.uint8)
        try:
            reqs = {r: [comm.Irecv(blocks[r].reshape(-1).view(np.uint8), source=r, tag=DATA_TAG),
                        comm.Isend(mine, dest=r, tag=DATA_TAG)] for r in range(size) if r != rank}

            def done(r):
                reqs[r] = [q for q in reqs[r] if not q.Test()]
                return not reqs[r]
            try:
                _wait(op, comm, {r: (lambda r=r: done(r)) for r in reqs}, collective_timeout(), "the data exchange")
            except CollectiveTimeout:
                for q in (q for qs in reqs.values() for q in qs):
                    try:
                        q.Cancel()
                    except Exception:  # noqa: BLE001 - best effort: the job aborts at exit
                        pass
                raise
        except BaseException as e:
            _stopped(op, comm, e)
    shape = src.shape[:axis] + (size * src.shape[axis],) + src.shape[axis + 1:]
    return np.moveaxis(blocks, 0, axis).reshape(shape)


def _is_mpi(comm) -> bool:
    return type(comm).__module__.startswith("mpi4py")


def _abort_at_exit(comm) -> None:
    """After a timeout an MPI process would hang at exit in MPI_Finalize (it waits
    for the member that stopped answering): abort the job instead, at exit, so
    that the error raised now can still be reported or handled first."""
    global _abort_registered
    if _abort_registered or not _is_mpi(comm):
        return
    _abort_registered = True
    # said now, not in the exit handler: MPI_Abort ends the processes at once, and the
    # launcher could lose a line written just before it
    sys.stderr.write(f"graphc: rank {comm.Get_rank()}: a collective timed out; aborting the MPI job at exit "
                     "(MPI_Finalize would wait for the member that stopped answering)\n")
    sys.stderr.flush()

    def abort():
        from mpi4py import MPI
        if MPI.Is_initialized() and not MPI.Is_finalized():
            # the error reported on the way out (graphc.distributed_demo writes it, flushed, just
            # before exit) is still in the launcher's pipe: MPI_Abort at once lost it in a CI run
            sys.stdout.flush()
            sys.stderr.flush()
            time.sleep(_ABORT_GRACE_S)
            comm.Abort(3)
    atexit.register(abort)
