"""Compiling a graph's kernels together: while a :func:`kernel_batch` is open in
a thread, the partitions it compiles are lowered and their kernels loaded but
not compiled to machine code; :meth:`KernelBatch.finish` compiles them all at
once (graphc.codegen.cache.compile_kernels: the cold ones on a worker process
per core) and gives each executable its kernel.  CompiledGraph compiles its
partitions so: a graph's cold kernels compile in parallel."""
from __future__ import annotations

import threading
from contextlib import contextmanager

from ..codegen.cache import compile_kernels
from .jit import entry_of

_local = threading.local()


class KernelBatch:
    """The kernels (executable, dispatcher, signature) waiting for machine code."""

    def __init__(self):
        self.pending: list = []

    def add(self, executable, dispatcher, sig) -> None:
        self.pending.append((executable, dispatcher, sig))

    def finish(self) -> None:
        """Compile every pending kernel and hand it to its executable."""
        pending, self.pending = self.pending, []
        compile_kernels([(d, sig) for _, d, sig in pending])
        for executable, d, sig in pending:
            executable.set_kernel(*entry_of(d, sig))


@contextmanager
def kernel_batch():
    """A batch for the partitions compiled in this thread until it closes (the
    caller finishes it; a batch closed unfinished drops its kernels)."""
    previous = getattr(_local, "batch", None)
    batch = _local.batch = KernelBatch()
    try:
        yield batch
    finally:
        _local.batch = previous


def current_batch() -> KernelBatch | None:
    """The batch open in this thread, if any."""
    return getattr(_local, "batch", None)


__all__ = ["KernelBatch", "kernel_batch", "current_batch"]
