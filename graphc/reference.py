"""The numpy reference executor: runs a finalized graph op by op.

This is graphc's oracle; compiled kernels are judged against it.  Every op's
reference semantics live with its schema (``OpSchema.reference``); this module
only checks inputs, widens them (floats to float64), calls each op and rounds
each result once to its output dtype.
"""
from __future__ import annotations

import numpy as np

from .comm import check_comm, default_comm
from .errors import GraphcError, InvalidArguments, RuntimeFault
from .graph import ensure_graph
from .numerics import fpmath_down, fpmath_round, round_to, widen
from .interop import as_array
from .types import DataType, LogicalTensor


def check_input_array(lt: LogicalTensor, arr, what: str = "input") -> np.ndarray:
    """Check one user array against its logical tensor; return it as an ndarray
    (a subclass such as np.matrix as a plain ndarray view of the same memory; a
    torch tensor or a ``__dlpack__`` object as a numpy array over its memory:
    graphc.interop).  An output must be writable."""
    arr = as_array(arr, f"{what} tensor {lt.id}")
    if isinstance(arr, np.ma.MaskedArray):
        raise InvalidArguments(f"{what} tensor {lt.id} is a masked array: graphc would ignore its mask",
                               expected="a numpy ndarray", found=type(arr).__name__)
    if isinstance(arr, np.ndarray) and type(arr) is not np.ndarray:
        arr = np.asarray(arr)
    if not isinstance(arr, np.ndarray):
        if np.isscalar(arr) and lt.ndim == 0:
            arr = np.asarray(arr, dtype=lt.dtype.np)
        else:
            raise InvalidArguments(f"{what} tensor {lt.id} must be a numpy array, a torch tensor or a "
                                   "__dlpack__ object", found=type(arr).__name__)
    if arr.dtype != lt.dtype.np:
        raise InvalidArguments(f"{what} tensor {lt.id} has the wrong dtype", expected=f"{lt.dtype} ({lt.dtype.np})",
                               found=str(arr.dtype))
    if len(arr.shape) != len(lt.shape) or any(d != -1 and d != a for d, a in zip(lt.shape, arr.shape)):
        raise InvalidArguments(f"{what} tensor {lt.id} has the wrong shape", expected=list(lt.shape),
                               found=list(arr.shape))
    if what == "output" and not arr.flags.writeable:
        raise InvalidArguments(f"{what} tensor {lt.id} is read-only", expected="a writable array",
                               found="an array with flags.writeable False")
    return arr


#: the share of the memory available that the reference may plan to use
MEMORY_SHARE = 0.6


def available_bytes() -> int | None:
    """The memory the system can give without swapping (Linux's MemAvailable), or None."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _nbytes(t, itemsize=None) -> int:
    n = t.nelems if t.is_complete else 0
    return n * (itemsize or t.dtype.np.itemsize) if n > 0 else 0


def op_bytes(op) -> int:
    """What running ``op``'s reference allocates at most: its inputs widened to float64, its
    outputs in float64 and rounded to their dtypes."""
    return sum(_nbytes(t, 8) for t in op.inputs if t is not None) + \
        sum(_nbytes(t, 8) + _nbytes(t) for t in op.outputs)


def reference_bytes(graph) -> int:
    """The reference's peak memory, bounded above: every value it keeps (each op's outputs in
    their dtypes) plus the largest working set of one op (:func:`op_bytes`)."""
    ops = [o for o in graph.topo_ops() if o.kind != "End"]
    kept = sum(_nbytes(t) for o in ops for t in o.outputs)
    return kept + max((op_bytes(o) for o in ops), default=0)


def check_memory(graph, budget=None) -> None:
    """Refuse, before allocating, a graph whose reference would need more memory than
    ``budget`` (default: MEMORY_SHARE of what is available), rather than be killed."""
    budget = budget if budget is not None else (lambda a: None if a is None else int(a * MEMORY_SHARE))(
        available_bytes())
    need = reference_bytes(graph)
    if budget is not None and need > budget:
        big = max((o for o in graph.topo_ops()), key=op_bytes)
        raise RuntimeFault("the reference would need more memory than is available", op=big,
                           expected=f"at most {budget / 2 ** 30:.1f} GiB",
                           found=f"{need / 2 ** 30:.1f} GiB (its largest op {op_bytes(big) / 2 ** 30:.1f} GiB)")


def run(graph, inputs: dict, comm=None, unrounded: dict | None = None) -> dict:
    """Run ``graph`` in numpy on ``inputs`` ({tensor id: array}); return every
    graph output {tensor id: array} in its logical tensor's dtype.  ``unrounded``
    (a dict, filled when given): each integer tensor computed from floats (a
    Quantize's dst) as the float64 value it was rounded from."""
    ensure_graph(graph, "the reference's run").finalize()
    if not isinstance(inputs, dict):
        raise InvalidArguments("inputs must be a dict {tensor id: array}", found=type(inputs).__name__)
    check_comm(comm, reference=True)
    if graph.rank_pending:   # graph inputs of unknown rank: their arrays give it
        graph = graph.with_input_ranks({tid: np.ndim(inputs[tid]) for tid in graph.unknown_rank_inputs()
                                        if tid in inputs})
    check_memory(graph)
    values: dict[int, np.ndarray] = {}
    for tid in graph.input_ports:
        lt = graph.tensors[tid]
        if tid not in inputs:
            raise InvalidArguments("missing input", where=f"tensor {tid}", expected=repr(lt))
        values[tid] = check_input_array(lt, inputs[tid])
    for op in graph.topo_ops():
        if op.kind == "End":
            continue
        values.update(run_op(op, [values[t.id] for t in op.inputs], comm=comm, unrounded=unrounded))
    return {tid: values[tid] for tid in graph.output_ports}


def run_op(op, arrays: list, comm=None, unrounded: dict | None = None) -> dict:
    """Run one op's reference on storage-format arrays; returns {tensor id: array}.
    A collective (``needs_comm``) runs on ``comm``, by default graphc.comm.default_comm().
    ``unrounded``: as in :func:`run`."""
    schema = op.schema
    kw = {"comm": check_comm(comm if comm is not None else default_comm(), reference=True)} \
        if getattr(schema, "needs_comm", False) else {}
    try:
        ins = [widen(a, t.dtype) for a, t in zip(arrays, op.inputs)]
        down = fpmath_down(op)
        if down:
            ins = [fpmath_round(a, down) if n in schema.fpmath_inputs and t.dtype is DataType.f32 else a
                   for a, t, n in zip(ins, op.inputs, op.input_names)]
        with np.errstate(all="ignore"):
            outs = schema.reference(op, *ins, **kw)
    except GraphcError:
        raise
    except (ValueError, IndexError, TypeError, ArithmeticError) as e:  # a reference bug or unforeseen input
        raise RuntimeFault(f"reference failed: {type(e).__name__}: {e}", op=op) from e
    except MemoryError:
        raise RuntimeFault("reference ran out of memory", op=op,
                           found=", ".join(f"output {t.id} shape {list(t.shape)}" for t in op.outputs)) from None
    if len(outs) != len(op.outputs):
        raise RuntimeFault("reference returned the wrong number of outputs", op=op,
                           expected=len(op.outputs), found=len(outs))
    result = {}
    for t, v in zip(op.outputs, outs):
        v = np.asarray(v)
        if t.is_complete and tuple(v.shape) != t.shape:
            if v.size == t.nelems:
                v = v.reshape(t.shape)
            else:
                raise RuntimeFault("reference output has the wrong shape", op=op, where=f"tensor {t.id}",
                                   expected=list(t.shape), found=list(v.shape))
        if unrounded is not None and t.dtype.is_int and v.dtype.kind == "f":
            unrounded[t.id] = v
        try:
            result[t.id] = round_to(v, t.dtype)
        except MemoryError:
            raise RuntimeFault("reference ran out of memory", op=op, where=f"tensor {t.id}",
                               found=f"shape {list(v.shape)}") from None
    return result


__all__ = ["run", "run_op", "check_input_array", "DataType", "reference_bytes", "check_memory", "available_bytes"]
