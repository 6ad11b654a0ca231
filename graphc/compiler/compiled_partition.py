"""A compiled partition: the caller's arrays checked, laid out and bound to one
executable (graphc.compiler.executables), chosen when the partition compiled."""
from __future__ import annotations

import threading
from typing import Any
import time
import weakref

import numpy as np

from .. import verbose
from ..comm import check_comm
from ..errors import GraphcError, InvalidArguments
from ..reference import check_input_array
from ..types import LogicalTensor
from .constant_cache import CONSTANT_CACHE
from .executables import PerValuesExecutable, ReferenceExecutable
from .layout import allocate, into_layout, layout_matches, overlapping_layouts, self_overlapping, shares


class CompiledPartition:
    """A partition compiled for concrete input and output logical tensors, run by
    its ``executable``: a kernel, a view, a collective, a kernel compiled per
    values of value inputs (such as ReduceX's axes, see ``specializations``), or
    the numpy reference (:class:`ReferencePartition`)."""

    def __init__(self, partition, inputs, outputs, ops, executable):
        self.partition = partition
        self.inputs = inputs
        self.outputs = outputs
        self.ops = ops
        self.executable = executable
        self.compile_seconds = 0.0
        self._lock = threading.Lock()
        self._constant_outputs = None  # the outputs kept in the constant tensor cache
        self._overlapping = overlapping_layouts(inputs)
        self._inplace = executable.inplace_pairs()
        #: (function, arguments) that compile it again (set by the compile step)
        self.rebuild = None
        self._impl = None

    def __reduce__(self):
        """A compiled partition pickles (and deep-copies) as its partition and
        what it was compiled for: loading compiles it again, from the kernel
        cache when it holds the kernel (no code generation); constant outputs
        kept and specialisations compiled at run are not carried over."""
        if self.rebuild is None:
            raise InvalidArguments("this compiled partition cannot be pickled or copied: it was not made by "
                                   "Partition.compile", found=repr(self))
        return self.rebuild

    # --------------------------------------------------------- what runs it
    @property
    def source(self) -> str | None:
        """The generated kernel's source (None without a kernel)."""
        return self.executable.source

    @property
    def kernel(self):
        """The compiled kernel (graphc.codegen.entry.Kernel: its numba dispatcher), or None."""
        return self.executable.kernel

    @property
    def arg_plan(self) -> list:
        """The kernel's arguments: ("in", i) / ("out", i) / ("tmp", LogicalTensor) / ("ws", (elements, elem))."""
        return self.executable.arg_plan

    @property
    def is_view(self) -> bool:
        """The partition moves no data: its output is a view of one of its inputs
        (a chain of StaticReshape / StaticTranspose / Reorder into the same layout
        whose strides allow it; see graphc.views).  ``execute`` without outputs
        returns a numpy view sharing the input's memory."""
        return self.executable.is_view

    @property
    def per_values(self) -> bool:
        """The partition compiles at run, once per values of its value inputs
        (such as ReduceX's axes: graphc.lowering.value_inputs)."""
        return isinstance(self.executable, PerValuesExecutable)

    @property
    def specializations(self) -> dict:
        """{((tensor id, values), ...): CompiledPartition} compiled so far for the
        values of the value inputs (empty for a partition without them)."""
        return self.executable.specializations

    def get_impl_info(self) -> str:
        """The implementation that runs this partition, as oneDNN's impl info:
        ``<how>:<op kinds>/<road>/...``: how is the kernel's plan shape
        (``eltwise``, ``anchor``, ``staged``, ``attention``, ``op`` for one op),
        or ``view``, ``collective``, ``per_values``, ``reference``; the roads are
        the implementations taken inside (``dnnl_sgemm``, ``mkl_sgemm`` or ``openblas_sgemm``,
        ``winograd``, ``shifted_gemm``, ``im2col``, ``flash``; the partial sums of
        a parallel reduction: ``row_chunks``, ``sum_to_chunks``,
        ``position_blocks``, ``dw_partial_sums``; ``threads`` when it runs loops
        on several threads).  E.g. ``anchor:MatMul+GELU/mkl_sgemm``."""
        info = self._impl
        if info is None:
            ex, p = self.executable, self.partition
            how = ex.impl_kind
            if how == "kernel":
                plan = getattr(p, "plan", None)
                how = plan.shape if plan is not None and len(self.ops) > 1 else "op"
            info = self._impl = "/".join((f"{how}:{p.kind}", *ex.roads()))
        return info

    def query_logical_tensor(self, tid: int) -> LogicalTensor:
        """An input or output logical tensor with every dim and stride resolved."""
        for t in list(self.inputs) + list(self.outputs):
            if t.id == tid:
                return t
        raise InvalidArguments("tensor is not an input or output of this compiled partition", found=tid)

    def get_inplace_ports(self) -> list[tuple[int, int]]:
        """[(input tensor id, output tensor id)]: pairs that may share one buffer.
        Pass the input's array as that output (``execute(ins, outputs=[x])``) and
        the kernel writes its result over the input, as oneDNN's
        compiled_partition::get_inplace_ports."""
        return [(self.inputs[i].id, self.outputs[o].id) for i, o in self._inplace]

    # --------------------------------------------------------- running
    @property
    def fast_run(self):
        """The executable's fast path: ``fast_run(inputs in order, None)`` gives
        {output id: array}, or None when the general path (``execute``) must run."""
        return self.executable.fast_run

    def execute(self, inputs: dict | list, outputs: dict | list | None = None, comm: Any = None) -> dict:
        """Run on ``inputs`` ({id: array} or a list in partition order).  Caller-given
        ``outputs`` are written in place; returns {output id: array}.  A collective
        runs on ``comm`` (see graphc.comm); bad arguments to it on any member of
        the group raise on every member."""
        if comm is not None:
            check_comm(comm)
        result = self.executable.fast_run(inputs, outputs)
        if result is not None:
            return result
        cached = self._constant_outputs
        if cached is not None:
            ids = [lt.id for lt in self.outputs]
            if outputs is None:
                return dict(zip(ids, cached))
            user = [check_input_array(lt, u, "output")
                    for lt, u in zip(self.outputs, self._bind(outputs, self.outputs, "output"))]
            for u, c in zip(user, cached):
                u[...] = c
            return dict(zip(ids, user))
        result = self._run(inputs, outputs, comm)
        if self.partition.constant and self.executable.keeps_constants:
            self._keep_constant(result)
        return result

    def _run(self, inputs, outputs, comm) -> dict:
        try:
            ins, outs, user_outs = self._arrays(inputs, outputs)
        except GraphcError as e:
            self.executable.fail(comm, e)  # raises (a collective tells the other members first)
            raise
        outs = self.executable.run(ins, outs, comm)
        if user_outs is not None:
            for u, o in zip(user_outs, outs):
                if u is not o:
                    u[...] = o
            outs = user_outs
        return {lt.id: a for lt, a in zip(self.outputs, outs)}

    def forget_constants(self) -> None:
        """Drop the outputs kept in the constant tensor cache (the constant inputs
        changed): the next execution computes them again."""
        with self._lock:
            self._constant_outputs = None
            fin, self._constant_finalizer = getattr(self, "_constant_finalizer", None), None
        if fin is not None:
            fin()   # (gives the bytes back to the cache)

    def _keep_constant(self, result: dict) -> None:
        """Keep the outputs of a constant partition in the constant tensor cache
        (read-only copies) if it is on and has room."""
        arrays = [result[lt.id] for lt in self.outputs]
        nbytes = sum(a.nbytes for a in arrays)
        with self._lock:
            if self._constant_outputs is not None or not CONSTANT_CACHE.reserve(nbytes):
                return
            kept = []
            for a in arrays:
                c = np.array(a, copy=True)
                c.setflags(write=False)
                kept.append(c)
            self._constant_outputs = kept
            self._constant_finalizer = weakref.finalize(self, CONSTANT_CACHE.release, nbytes)

    # --------------------------------------------------------- the caller's arrays
    def _bind(self, given, lts, what):
        if isinstance(given, (str, bytes, np.ndarray)) or not (isinstance(given, dict) or hasattr(given, "__iter__")):
            raise InvalidArguments(f"{what}s must be a dict {{tensor id: array}} or a list of arrays in "
                                   "partition order", found=type(given).__name__)
        if isinstance(given, dict):
            arrs = []
            for lt in lts:
                if lt.id not in given:
                    raise InvalidArguments(f"missing {what}", where=f"tensor {lt.id}", expected=repr(lt))
                arrs.append(given[lt.id])
            return arrs
        given = list(given)
        if len(given) != len(lts):
            raise InvalidArguments(f"wrong number of {what}s", expected=len(lts), found=len(given))
        return given

    def _arrays(self, inputs, outputs):
        """(checked inputs, arrays for the executable to write, caller-given outputs
        or None).  Outputs are allocated for an executable that writes them (one
        with dims unknown until run, a collective's, is None unless given)."""
        ex = self.executable
        given = self._bind(inputs, self.inputs, "input")
        if ex.lays_out_inputs:
            ins = [into_layout(check_input_array(lt, a), lt, ov)
                   for lt, a, ov in zip(self.inputs, given, self._overlapping)]
        else:
            ins = [check_input_array(lt, a) for lt, a in zip(self.inputs, given)]
        if outputs is None:
            return ins, [allocate(lt) if ex.allocates_outputs and lt.is_complete else None
                         for lt in self.outputs], None
        user_outs = self._user_outputs(outputs)
        self._check_aliasing(user_outs, ins)
        if not ex.allocates_outputs:
            return ins, list(user_outs), user_outs
        # Write the caller's buffer directly only when the kernel can: same layout,
        # aligned, and no kernel fault that could stop half-way; else compute into
        # a temporary and copy after a successful run.
        faulting = ex.may_fault()
        outs = []
        for u, lt in zip(user_outs, self.outputs):
            if not lt.is_complete:
                outs.append(u)
            elif not faulting and layout_matches(u, lt) and u.flags.aligned:
                outs.append(u)
            else:
                outs.append(allocate(lt))
        return ins, outs, user_outs

    def _user_outputs(self, outputs) -> list[np.ndarray]:
        """The caller's outputs, checked: each writable, with one place per element, apart from the others."""
        user_outs = [check_input_array(lt, a, "output") for lt, a in
                     zip(self.outputs, self._bind(outputs, self.outputs, "output"))]
        for i, (u, lt) in enumerate(zip(user_outs, self.outputs)):
            if self_overlapping(u):
                raise InvalidArguments(f"output tensor {lt.id} is a view whose distinct elements share memory",
                                       where=f"tensor {lt.id}", expected="an array with one place per element",
                                       found=f"byte strides {list(u.strides)} for shape {list(u.shape)}")
            for j in range(i):
                if shares(u, user_outs[j]):
                    raise InvalidArguments(f"output tensors {self.outputs[j].id} and {lt.id} share memory",
                                           where=f"tensor {lt.id}", expected="a separate buffer for each output",
                                           found="arrays over the same memory")
        return user_outs

    def _check_aliasing(self, user_outs, ins) -> None:
        """A caller-given output may share memory with an input only as an in-place
        pair (get_inplace_ports) and as the very view the kernel writes (same start,
        strides and type): anything else would read what the run overwrites."""
        for o, u in enumerate(user_outs):
            if u is None or self._may_write_over(u, o, ins):
                continue
            lt = self.outputs[o]
            j = next(j for j, a in enumerate(ins) if shares(u, a))
            allowed = [i for i, k in self._inplace if k == o]
            producer = next((op for op in self.ops for t in op.outputs if t.id == lt.id), None)
            raise InvalidArguments(
                f"output tensor {lt.id} shares memory with input tensor {self.inputs[j].id}",
                op=producer, where=f"tensor {lt.id}",
                expected=(f"a separate buffer, or input {self.inputs[allowed[0]].id}'s own buffer seen as the "
                          f"output (strides {list(lt.strides)}: an in-place port)" if allowed else
                          "a buffer apart from every input (this partition has no in-place port for it)"),
                found="an array overlapping the input")

    def _may_write_over(self, u: np.ndarray, o: int, ins) -> bool:
        """Output ``o``'s buffer ``u`` shares memory only with inputs it is an
        in-place pair of, as the very view the output is of that input's buffer
        (same start and type; the output's strides)."""
        lt = self.outputs[o]
        for j, a in enumerate(ins):
            if not np.may_share_memory(u, a) or not shares(u, a):
                continue
            if (j, o) not in self._inplace or a.dtype != u.dtype or not layout_matches(u, lt) \
                    or a.__array_interface__["data"][0] != u.__array_interface__["data"][0]:
                return False
        return True

    def __repr__(self):
        return f"{type(self).__name__}({self.partition.kind}, in={[t.id for t in self.inputs]}, " \
               f"out={[t.id for t in self.outputs]})"


class ReferencePartition(CompiledPartition):
    """A partition graphc cannot compile, run op by op in the numpy reference
    (``graphc.compile(graph, fallback="reference")``, which warns): a compiled
    partition whose executable is the reference's."""

    def __init__(self, partition):
        inputs, outputs = list(partition.inputs), list(partition.outputs)
        super().__init__(partition, inputs, outputs, list(partition.ops),
                         ReferenceExecutable(partition.ops, inputs, outputs))
        self.rebuild = (ReferencePartition, (partition,))


# GRAPHC_VERBOSE (graphc.verbose): while the level is 1 or more, ``execute`` is
# the timed one, printing an ``exec`` line per run; otherwise the plain method,
# so that an unset level costs the dispatch nothing.
_plain_execute = CompiledPartition.execute


def _timed_execute(self, inputs, outputs=None, comm=None) -> dict:
    t0 = time.perf_counter()
    result = _plain_execute(self, inputs, outputs, comm)
    verbose.partition_line("exec", self, (time.perf_counter() - t0) * 1e3)
    return result


_timed_execute.__doc__ = _plain_execute.__doc__
verbose.watch(lambda level: setattr(CompiledPartition, "execute", _timed_execute if level else _plain_execute))
