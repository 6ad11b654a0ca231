"""The compile step: a partition, for concrete input (and output) logical
tensors, becomes a CompiledPartition holding the one executable that runs it
(graphc.compiler.executables), chosen here once:

* a collective (AllGather) runs on the group's communicator;
* a partition whose kernel depends on the values of value inputs compiles at
  run, once per values given (each compile checks them first);
* a chain of views whose strides allow it moves no data;
* anything else is one generated kernel (graphc.lowering.build_kernel).
"""
from __future__ import annotations

import time

from .. import lowering, verbose
from ..errors import InvalidArguments, Unimplemented
from ..lowering import value_inputs
from ..types import LogicalTensor, check_extent
from .any_layout import chosen_layout, view_of
from .compiled_partition import CompiledPartition
from .executables import KernelExecutable, PerValuesExecutable, ViewExecutable, collective_of
from .batch import current_batch
from .jit import compile_source, prepare_source
from .specialize import check_memory, concrete, specialize, values_by_op


def can_compile(partition) -> bool:
    """graphc compiles ``partition``: a collective, or ops that each lower into
    a kernel with every value input coming from outside (graphc.lowering.can_lower)."""
    return collective_of(partition.ops) is not None or lowering.can_lower(partition)


def compile_partition(partition, inputs=None, outputs=None, values=None) -> CompiledPartition:
    """``partition`` compiled for ``inputs`` (and ``outputs``): LogicalTensors.  A
    partition with value inputs compiles for ``values`` ({tensor id: tuple of
    ints}) of every one of them; without, into a CompiledPartition that compiles
    at run for the values given then."""
    t0 = time.perf_counter()
    inputs, outputs = _tensor_list(inputs, "inputs"), _tensor_list(outputs, "outputs")
    in_lts = _input_tensors(partition, inputs)
    if not partition.is_supported():
        kinds = ", ".join(op.kind for op in partition.ops)
        raise Unimplemented(f"this build cannot compile partition {partition.id} ({kinds})",
                            op=partition.ops[0])
    op_values = values_by_op(partition.ops, values)
    ops, known = specialize(partition, in_lts, op_values)
    value_ids = {t.id for _, _, t in value_inputs(ops)}
    per_values = bool(value_ids) and values is None  # compiled at run, per values of the value inputs
    collective = collective_of(ops)                  # its output dims may be known only at run
    wanted = {t.id: t for t in (outputs or [])}
    out_lts = _output_tensors(partition, ops, known, wanted, unknown_ok=per_values or collective is not None)
    check_memory(ops, in_lts, out_lts, known)
    view = None if per_values or collective else view_of(ops, in_lts, out_lts, partition.outputs, wanted)
    if per_values:
        value_at = [i for i, lt in enumerate(in_lts) if lt.id in value_ids]
        executable = PerValuesExecutable(in_lts, out_lts, value_at,
                                         lambda given: compile_partition(partition, in_lts, outputs, given))
    elif collective is not None:
        executable = collective
    elif view is not None:
        check_extent(view[1], "compile")   # the view's strides: numpy must be able to make it
        out_lts = [view[1]]
        executable = ViewExecutable(*view, inputs=in_lts, constant=partition.constant)
    else:
        source, plan = lowering.build_kernel(partition, ops, in_lts, out_lts, op_values)
        batch = current_batch()
        if batch is None:
            kernel, entry = compile_source(source, plan, in_lts, out_lts)
            executable = KernelExecutable(ops, in_lts, out_lts, source, kernel, entry, plan, partition.constant)
        else:   # (machine code when the batch finishes: a graph's kernels compile together)
            executable = KernelExecutable(ops, in_lts, out_lts, source, None, None, plan, partition.constant)
            batch.add(executable, *prepare_source(source, plan, in_lts, out_lts))
    cp = CompiledPartition(partition, in_lts, out_lts, ops, executable)
    cp.rebuild = (compile_partition, (partition, inputs, outputs, values))   # (pickling compiles it again)
    cp.compile_seconds = time.perf_counter() - t0
    if verbose.wanted(1):
        verbose.partition_line("compile", cp, cp.compile_seconds * 1e3)
    return cp


def _tensor_list(tensors, what: str) -> list[LogicalTensor] | None:
    """``tensors`` (None or a sequence of LogicalTensors) as a list; anything else
    is InvalidArguments (not an AttributeError)."""
    if tensors is None:
        return None
    if isinstance(tensors, (str, bytes, dict)) or not hasattr(tensors, "__iter__"):
        raise InvalidArguments(f"compile expects a list of LogicalTensors as {what}", found=type(tensors).__name__)
    tensors = list(tensors)
    for i, t in enumerate(tensors):
        if not isinstance(t, LogicalTensor):
            raise InvalidArguments(f"compile expects LogicalTensors as {what}", where=f"{what}[{i}]",
                                   found=type(t).__name__)
    return tensors


def _input_tensors(partition, inputs) -> list[LogicalTensor]:
    """The partition's inputs as given (concrete: every dim known), checked
    against it: the same data type and rank, and every dim the graph knows the
    same (a dim it leaves -1 takes any value): the partition's ops, fusion and
    kernel plan were judged for those dims (docs/design.md)."""
    given = {t.id: t for t in (inputs if inputs is not None else partition.inputs)}
    in_lts = []
    for t in partition.inputs:
        lt = given.get(t.id, t)
        if lt.dtype != t.dtype or len(lt.shape) != len(t.shape):
            raise InvalidArguments(f"input tensor {t.id} disagrees with the partition", expected=repr(t),
                                   found=repr(lt))
        other = [i for i, (d, a) in enumerate(zip(t.shape, lt.shape)) if d != -1 and a != d]
        if other:
            raise InvalidArguments("the input's dims differ from the graph's", where=f"input tensor {t.id}, "
                                   f"dim {other[0]}", expected=f"{list(t.shape)} (-1: any)", found=list(lt.shape))
        in_lts.append(concrete(lt, "compile"))
    return in_lts


def _output_tensors(partition, ops, known, wanted, unknown_ok: bool) -> list[LogicalTensor]:
    """The partition's outputs as inferred, with the strides asked for in
    ``wanted`` ({id: LogicalTensor}) or chosen for layout ``any`` (any_layout);
    dims may stay unknown when ``unknown_ok`` (known only at run)."""
    out_lts = []
    for t in partition.outputs:
        lt = known[t.id]
        w = wanted.get(t.id)
        if w is not None and w.is_complete:
            if w.shape != lt.shape:
                raise InvalidArguments(f"output tensor {t.id} shape disagrees with inference",
                                       expected=list(lt.shape), found=list(w.shape))
            lt = w if w.strides is not None else lt   # layout any: graphc's choice (below)
        asked = w if w is not None else t
        if asked.strides is None and lt.is_complete:
            lt = chosen_layout(ops, lt)
        out_lts.append(lt if unknown_ok and not lt.is_complete else concrete(lt, "compile"))
    return out_lts
