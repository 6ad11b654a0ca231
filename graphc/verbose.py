"""What graphc does, told as it does it: ``GRAPHC_VERBOSE`` and the ``graphc`` logger.

``GRAPHC_VERBOSE=1`` (read at import; :func:`set_verbose` changes it later)
prints one line to stderr per partition compiled and per partition executed,
``GRAPHC_VERBOSE=2`` adds the kernel cache's hits and misses, compile-worker
starts and fallbacks with their reasons.  Every line is comma-separated, starts
``graphc_verbose,<event>`` and has a fixed number of fields per event (no field
holds a comma; none holds text from a graph: names are left out):

==========  ========================================================================================
event       fields after ``graphc_verbose,<event>``
==========  ========================================================================================
``info``    ``version,<graphc version>``, once per process, before the first line
``compile`` ``<graph>,<partition>,<pattern>,<kernel>,<impl>,<inputs>,<outputs>,<ms>``
``exec``    the same fields as ``compile``; ``ms`` is the execution's wall time
``cache``   ``<hit|miss>,<where: memory|disk|compiled|worker>,<kernel key>`` (level 2)
``worker``  ``start,<pid>`` or ``broken,<reason>`` (level 2)
``fallback`` ``<graph>,<partition>,<what: reference|op_by_op>,<reason>`` (level 2)
==========  ========================================================================================

``<graph>`` is a number given to each graph in this process, ``<partition>`` the
partition's id, ``<kernel>`` the op kinds joined by ``+``, ``<impl>`` the
implementation string (``CompiledPartition.get_impl_info()``), ``<inputs>`` and
``<outputs>`` space-separated ``id:dtype:dims:layout`` (dims ``2x3``, ``-`` for a
scalar; layout ``dense``, ``any`` or the strides ``s6x1``).

Every line also goes to ``logging.getLogger("graphc")`` (level-1 events at INFO,
level-2 at DEBUG), which has a NullHandler: a handler added to it sees compile
and level-2 lines whenever its level lets them through; execution lines, timed
on the hot path, are made only while the verbose level is 1 or more (call
``set_verbose(1, stderr=False)`` to send them to the logger alone).

Unset, nothing is timed or formatted: ``CompiledPartition.execute`` is the plain
method (the timed one is swapped in by :func:`set_verbose`)."""
from __future__ import annotations

import itertools
import logging
import os
import sys

logger = logging.getLogger("graphc")
logger.addHandler(logging.NullHandler())

PREFIX = "graphc_verbose"
#: the level: 0 off, 1 compile and exec lines, 2 also cache, worker and fallback lines
LEVEL = 0
#: lines are printed to stderr (else only logged)
STDERR = True
_watchers: list = []
_ids = itertools.count()
_told_info = False


def _level_from_env() -> int:
    raw = os.environ.get("GRAPHC_VERBOSE", "").strip()
    try:
        return max(0, int(raw)) if raw else 0
    except ValueError:
        return 1 if raw.lower() in ("true", "yes", "on") else 0


def set_verbose(level: int, stderr: bool = True) -> None:
    """Set the verbose level (0, 1 or 2) for this process; ``stderr`` False sends
    the lines to the ``graphc`` logger only."""
    global LEVEL, STDERR
    LEVEL, STDERR = max(0, int(level)), bool(stderr)
    for fn in _watchers:
        fn(LEVEL)


def get_verbose() -> int:
    return LEVEL


def watch(fn) -> None:
    """Call ``fn(level)`` now and whenever the level changes (the compiled
    partition swaps its timed ``execute`` in or out)."""
    _watchers.append(fn)
    fn(LEVEL)


def wanted(level: int) -> bool:
    """A line of ``level`` would be printed or logged."""
    return LEVEL >= level or logger.isEnabledFor(logging.INFO if level <= 1 else logging.DEBUG)


def emit(level: int, event: str, *fields) -> None:
    """One line: printed to stderr at this verbose level, and logged."""
    _info()
    line = ",".join((PREFIX, event, *(_field(f) for f in fields)))
    logger.log(logging.INFO if level <= 1 else logging.DEBUG, line)
    if LEVEL >= level and STDERR:
        print(line, file=sys.stderr, flush=True)


def _field(value) -> str:
    """A field: no comma or line break can end up in it."""
    return str(value).replace(",", ";").replace("\n", " ").replace("\r", " ")


def _info() -> None:
    global _told_info
    if _told_info:
        return
    _told_info = True
    from importlib import metadata
    try:
        version = metadata.version("graphc")
    except metadata.PackageNotFoundError:
        version = "unknown"
    emit(1, "info", "version", version)


def graph_id(graph) -> int:
    """The number this process gives ``graph`` in verbose lines."""
    gid = getattr(graph, "_verbose_id", None)
    if gid is None:
        gid = next(_ids)
        try:
            graph._verbose_id = gid
        except AttributeError:
            return -1
    return gid


def tensor(lt) -> str:
    """``id:dtype:dims:layout`` of a logical tensor."""
    if lt.shape is None:
        return f"{lt.id}:{lt.dtype}:?:{lt.layout_type}"
    dims = "x".join(map(str, lt.shape)) or "-"
    if str(lt.layout_type) == "any" and lt.strides is None:
        layout = "any"
    elif lt.is_dense:
        layout = "dense"
    else:
        layout = "s" + "x".join(map(str, lt.strides or ()))
    return f"{lt.id}:{lt.dtype}:{dims}:{layout}"


def tensors(lts) -> str:
    return " ".join(tensor(lt) for lt in lts)


def partition_line(event: str, cp, ms: float) -> None:
    """The ``compile`` or ``exec`` line of compiled partition ``cp``."""
    p = cp.partition
    emit(1, event, graph_id(p.graph), p.id, getattr(p, "pattern", None) or "-", p.kind, cp.get_impl_info(),
         tensors(cp.inputs), tensors(cp.outputs), f"{ms:.4f}")


set_verbose(_level_from_env())
