"""Op copies of a partition for concrete inputs, and for the values of its
value inputs.

A value input is a small integer input whose contents a kernel is specialised
on (``OpSchema.value_inputs``: ReduceX's axes, Interpolate's sizes, a
convolution's output shape).  Its values reach the compile step as an argument,
``{op id: {port name: tuple}}``: each op's schema checks its own
(``OpSchema.check_values``, which also gives the output shapes they imply), and
code generation receives the same mapping (graphc.lowering.build_kernel)."""
from __future__ import annotations

import copy

from ..errors import InvalidArguments
from ..graph import check_output_layout
from ..lowering import value_inputs
from ..types import LogicalTensor, check_extent


def concrete(lt: LogicalTensor, where: str) -> LogicalTensor:
    """``lt`` with every dim known, its strides kept when non-negative (else dense)."""
    if not lt.is_complete:
        raise InvalidArguments(f"{where}: tensor {lt.id} has unknown dims at compile time", found=list(lt.shape),
                               expected="every dim known")
    if lt.strides is None or any(s < 0 for s in lt.strides):
        return LogicalTensor(lt.id, lt.dtype, lt.shape, None, "strided", lt.property_type)
    return lt


def values_by_op(ops, values: dict | None) -> dict[int, dict[str, tuple]]:
    """``values`` ({tensor id: tuple}) of value inputs as ``{op id: {port name: tuple}}``."""
    out: dict[int, dict[str, tuple]] = {}
    for op, name, t in value_inputs(ops):
        if values is not None and t.id in values:
            out.setdefault(op.id, {})[name] = values[t.id]
    return out


def specialize(partition, inputs: list[LogicalTensor], values: dict | None = None):
    """(ops, known): copies of the partition's ops with shapes re-inferred from
    the concrete ``inputs``, and {tensor id: LogicalTensor} of every tensor.
    ``values`` ({op id: {port name: tuple}}) are the values of value inputs the
    kernel is specialised on: each op's schema checks its own and gives the
    output shapes they imply."""
    values = values or {}
    known = {t.id: t for t in inputs}
    ops = []
    for op in partition.ops:
        new = copy.copy(op)
        given = values.get(op.id, {})
        new.inputs = [known.get(t.id, t) for t in op.inputs]
        new.outputs = [t.with_shape(tuple(-1 if d == -1 else d for d in t.shape)) for t in op.outputs]
        new.rebind_inputs(new.inputs, given)
        for t in new.outputs:
            known[t.id] = concrete(t, f"op {op.id}") if t.is_complete else t
        ops.append(new)
    return ops, known


def check_memory(ops, in_lts, out_lts, known) -> None:
    """Before generating code: every tensor with known dims fits in memory (numba
    would fail on loop bounds beyond int64), and no output layout puts two
    elements in one place."""
    for lt in list(in_lts) + list(out_lts) + list(known.values()):
        check_extent(lt, "compile")
    producer = {t.id: (op, i) for op in ops for i, t in enumerate(op.outputs)}
    for lt in out_lts:
        if lt.id in producer:
            check_output_layout(producer[lt.id][0], producer[lt.id][1], lt)
