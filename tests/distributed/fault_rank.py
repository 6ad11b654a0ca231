"""`graphc distributed-layernorm` with a fault injected on one rank, for
test_faults.py: ``mpiexec -n P python fault_rank.py FAULT RANK [demo args]``.
The fault is patched in here, in this script only: normal runs never see it.

Faults (on rank RANK, before the AllGather): ``kernel`` a ZeroDivisionError
inside a kernel call, ``memory`` a MemoryError there, ``interrupt`` a
KeyboardInterrupt there, ``between`` a RuntimeError in the Python code that
prepares the AllGather partition, ``die`` the process exits at once
(os._exit), ``stuck`` the kernel call never returns, ``stuck_data`` the rank
never sends its data once the status exchange of the AllGather is done."""
import os
import sys
import time

import graphc.comm as comm
from graphc.cli import main
from graphc.compiler import jit
from graphc.compiler.compiled_graph import CompiledGraph


def inject(fault: str) -> None:
    real_for = CompiledGraph._compiled_for

    def faulty(real_call):
        """A kernel entry point (jit.call_kernel, jit.call_serial) with the fault injected."""
        def call_kernel(kernel, args):
            if fault == "kernel":
                raise ZeroDivisionError("injected fault inside a kernel call")
            if fault == "memory":
                raise MemoryError("injected fault: no memory")
            if fault == "interrupt":
                raise KeyboardInterrupt()
            if fault == "die":
                os._exit(7)
            if fault == "stuck":
                time.sleep(3600)
            return real_call(kernel, args)
        return call_kernel

    def compiled_for(self, i, values):
        if fault == "between" and self._collectives[i] is not None:
            raise RuntimeError("injected fault between partitions")
        return real_for(self, i, values)
    def allgather_array(*args):
        time.sleep(3600)
    jit.call_kernel, jit.call_serial = faulty(jit.call_kernel), faulty(jit.call_serial)
    if fault == "stuck_data":
        comm.allgather_array = allgather_array
    CompiledGraph._compiled_for = compiled_for


if __name__ == "__main__":
    fault, bad_rank = sys.argv[1], int(sys.argv[2])
    if int(os.environ.get("PMI_RANK", "0")) == bad_rank:
        inject(fault)
    sys.exit(main(["distributed-layernorm", "--tokens", "4", "--hidden", "16", *sys.argv[3:]]))
