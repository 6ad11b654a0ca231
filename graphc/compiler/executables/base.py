"""The interface of executables: what computes a compiled partition's outputs."""
from __future__ import annotations

from abc import ABC, abstractmethod


class Executable(ABC):
    """What computes a compiled partition's outputs from its inputs, chosen once
    when the partition compiles; one subclass per kind (a kernel, a view, a
    collective, a kernel compiled per input values, the numpy reference).

    The compiled partition holding it (graphc.compiler.compiled_partition)
    checks the caller's arrays, lays the inputs out as its logical tensors say,
    allocates the outputs, copies results into outputs the caller gave and keeps
    the outputs of a constant partition; :meth:`run` computes.  Class attributes
    say what an executable needs of that."""

    #: the generated kernel's source; None without a kernel
    source: str | None = None
    #: the compiled kernel (graphc.codegen.entry.Kernel); None without one
    kernel = None
    #: the kernel's arguments in order: ("in", i), ("out", i), ("tmp", LogicalTensor), ("ws", (elements, elem))
    arg_plan: list | tuple = ()
    #: the output is a view of an input's buffer: no data moves
    is_view = False
    #: the compiled partition allocates the outputs ``run`` writes; False: ``run``
    #: returns arrays of its own (writing the caller's outputs only when given them)
    allocates_outputs = True
    #: ``run`` gets the inputs laid out as the partition's logical tensors say
    #: (False: only checked, in whatever layout the caller's arrays have)
    lays_out_inputs = True
    #: the compiled partition of a constant partition keeps its outputs (False:
    #: another compiled partition, which this one runs, keeps them)
    keeps_constants = True

    #: what runs the partition, the first word of its impl info (CompiledPartition.get_impl_info)
    impl_kind = "kernel"

    def roads(self) -> tuple[str, ...]:
        """The implementations taken inside (``mkl_sgemm``, ``winograd``, ``flash``, ``threads``)."""
        return ()

    def inplace_pairs(self) -> list[tuple[int, int]]:
        """(input index, output index) pairs whose buffers may be one."""
        return []

    def may_fault(self) -> bool:
        """``run`` can stop on bad data after writing part of an output (the
        caller's outputs are then written only after a successful run)."""
        return False

    @property
    def specializations(self) -> dict:
        """{((tensor id, values), ...): CompiledPartition} compiled so far per
        values of the value inputs (empty unless compiled per values)."""
        return {}

    def fast_run(self, inputs, outputs):
        """{output id: array} computed from the caller's ``inputs`` (and into its
        ``outputs``, else into fresh, writeable arrays) without the general path
        of checks, or None to take it."""
        return None

    def fresh_run(self, arrays: tuple):
        """``fast_run`` of the common call: the inputs in order (a tuple), fresh outputs."""
        return self.fast_run(list(arrays), None)

    def fail(self, comm, failure: BaseException):
        """This member of the group failed before ``run`` (bad arguments, or an
        earlier partition): raise.  A collective first tells the other members on
        ``comm``, which raise a RuntimeFault instead of waiting for this one."""
        raise failure

    @abstractmethod
    def run(self, ins: list, outs: list, comm) -> list:
        """The outputs, in order, computed from ``ins`` (checked arrays) into
        ``outs`` (arrays to write; None where none is given or allocated), on
        the communicator ``comm`` for a collective (see graphc.comm)."""
