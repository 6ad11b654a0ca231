"""A partition whose kernel depends on the values of small inputs (value
inputs, such as ReduceX's axes: graphc.lowering.value_inputs): each run reads
those values and runs the partition compiled for them, compiled at the first run
with these values (the values checked first) and kept: as many as the in-process
kernel cache keeps kernels, least recently used dropped first (compiled again
when those values come back; graphc.compiler.bounded)."""
from __future__ import annotations

from ..bounded import BoundedCache
from .base import Executable


class PerValuesExecutable(Executable):
    """Inputs ``value_at`` (indices) are value inputs; ``compile_for(values)``
    compiles the partition for ``values`` ({tensor id: tuple of ints}) into a
    CompiledPartition, which runs the inputs (and keeps constant outputs)."""

    allocates_outputs = False   # the partition compiled for the values does
    impl_kind = "per_values"
    keeps_constants = False

    def __init__(self, inputs, outputs, value_at: list[int], compile_for):
        self.inputs, self.outputs = inputs, outputs
        self.value_at = value_at
        self._compile_for = compile_for
        self._by_values = BoundedCache()

    @property
    def specializations(self) -> dict:
        return dict(self._by_values.items())

    @property
    def compiles(self) -> int:
        """Partitions compiled so far for values (again for values dropped and back)."""
        return self._by_values.made

    def compiled_for(self, ins):
        """The partition compiled for the values of the value inputs in ``ins``."""
        key = tuple((self.inputs[i].id, tuple(int(v) for v in ins[i].reshape(-1))) for i in self.value_at)
        return self._by_values.get(key, lambda: self._compile_for(dict(key)))

    def run(self, ins, outs, comm):
        given = outs if any(o is not None for o in outs) else None
        result = self.compiled_for(ins).execute(ins, given, comm)
        return [result[lt.id] for lt in self.outputs]
