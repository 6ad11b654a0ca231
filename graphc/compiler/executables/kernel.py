"""A generated kernel: the partition's one compiled machine-code function."""
from __future__ import annotations

import math
import threading
import weakref

import numpy as np

from ...codegen import rules
from ...codegen.ir import NP_TYPE
from ...errors import GraphcError, RuntimeFault
from ...ops.common import is_pointwise
from .. import jit, recycle
from ..layout import aligned_empty, allocate, flat_view, overlapping_layouts
from .base import Executable


class KernelExecutable(Executable):
    """Runs the kernel ``kernel`` (graphc.codegen.entry.Kernel) through its entry
    point ``entry`` on flat views of the arrays its argument plan names, with
    intermediate tensors and workspaces allocated at first use and kept."""

    def __init__(self, ops, inputs, outputs, source, kernel, entry, arg_plan, constant: bool):
        self.ops, self.inputs, self.outputs = ops, inputs, outputs
        self.source, self.kernel, self.arg_plan = source, kernel, arg_plan
        self._entry = entry
        #: the kernel runs loops on numba's threads (a serial one needs no threading-layer lock)
        self._parallel = getattr(source, "parallel", True)
        self._constant = constant      # a constant partition: its outputs may be kept (not the fast path)
        self._overlapping = overlapping_layouts(inputs)
        # a kernel that may stop half-way on bad data (not one op checking its inputs before it writes)
        self._faulting = any(rules.may_fault(op) for op in ops) and \
            not (len(ops) == 1 and rules.faults_before_writing(ops[0]))
        self._workspaces: dict[int, np.ndarray] = {}   # plan entries "ws" and "tmp", allocated at first use
        self._ws_lock = threading.Lock()
        self._fast = None              # the per-run work done once (_fast_plan); False: no fast path
        #: weak references to the inputs, then the outputs, of the last run into given outputs that
        #: found the outputs sharing no memory (with each other or an input): the same live objects
        #: again need no check.  (An array object's memory does not move while it lives: numpy
        #: refuses to resize one that shares its memory, and its data cannot be reassigned.)
        self._apart = ()
        self._fresh = None             # its common call's plan (_fresh_plan)

    def set_kernel(self, kernel, entry) -> None:
        """The kernel's machine code, compiled after this executable was made (graphc.compiler.batch)."""
        self.kernel, self._entry = kernel, entry

    def roads(self):
        return getattr(self.source, "roads", ())

    def inplace_pairs(self):
        """A kernel of pointwise ops only (each element of its one output computed
        from the same element of each input, loaded before the store) may write
        over an input with the output's shape, data type and strides."""
        if len(self.outputs) != 1 or not all(is_pointwise(op) for op in self.ops):
            return []
        out = self.outputs[0]
        return [(i, 0) for i, lt in enumerate(self.inputs)
                if lt.dtype == out.dtype and lt.shape == out.shape and lt.strides == out.strides
                and not self._overlapping[i]]

    def may_fault(self):
        return self._faulting

    # ------------------------------------------------------------- buffers
    def _scratch_tensor(self, k: int, lt) -> np.ndarray:
        """The flat kernel view of intermediate tensor ``lt`` (plan entry ``k``),
        allocated once: allocating it per run paid its page faults every run."""
        buf = self._workspaces.get(k)
        if buf is None:
            buf = self._workspaces[k] = flat_view(allocate(lt, kept=True), lt)
        return buf

    def _workspace(self, k: int, spec) -> np.ndarray:
        """The buffer of plan entry ``k`` ((elements, elem)), allocated once."""
        buf = self._workspaces.get(k)
        if buf is None:
            n, elem = spec
            buf = self._workspaces[k] = aligned_empty(max(1, n), NP_TYPE[elem])
        return buf

    def _call(self, args):
        call = jit.call_kernel if self._parallel else jit.call_serial
        if self._workspaces:   # one run at a time uses them
            with self._ws_lock:
                return call(self._entry, args)
        return call(self._entry, args)

    # ------------------------------------------------------------- the general path
    def run(self, ins, outs, comm):
        args = []
        for k, (kind, ref) in enumerate(self.arg_plan):
            if kind == "in":   # (laid out as the tensor says: the entry point flattens it)
                args.append(ins[ref])
            elif kind == "out":
                args.append(outs[ref])
            elif kind == "ws":
                args.append(self._workspace(k, ref))
            else:   # an intermediate tensor: a workspace too (its contents never outlive a run)
                args.append(self._scratch_tensor(k, ref))
        status = self._call(args)
        if status is not None and status >= 0:
            raise self._fault(status, ins)
        return outs

    def _fault(self, status: int, ins) -> GraphcError:
        for op in self.ops:
            if rules.may_fault(op):
                return rules.kernel_fault(op, status, {lt.id: a for lt, a in zip(self.inputs, ins)})
        return RuntimeFault("kernel reported bad input data", op=self.ops[0], found=f"status {status}")

    # ------------------------------------------------------------- the fast path
    def _fast_plan(self):
        """What every run of a plain kernel repeats, done once: for each kernel
        argument, an input's or output's expected dtype, shape, layout (None:
        C-contiguous, else its byte strides) and logical tensor (a new output is
        allocated as it says), or the workspace itself.  The kernel's entry point takes the arrays as they lie
        (graphc.codegen.entry flattens them).  False for kernels that need the
        general path (constant caching, overlapping layouts, faulting kernels,
        dims known only at run)."""
        if self._constant or self._faulting or any(self._overlapping) \
                or not all(lt.is_complete for lt in list(self.inputs) + list(self.outputs)):
            return False
        slots = []
        for k, (kind, ref) in enumerate(self.arg_plan):
            if kind in ("in", "out"):
                lt = (self.inputs if kind == "in" else self.outputs)[ref]
                dt = np.dtype(lt.dtype.np)
                layout = None if lt.is_dense else tuple(s * dt.itemsize for s in lt.strides)
                slots.append((0 if kind == "in" else 1, ref, dt, tuple(lt.shape), layout, lt))
            else:
                slots.append((2, self._workspace(k, ref) if kind == "ws" else self._scratch_tensor(k, ref)))
        return slots

    def _fresh_plan(self, slots):
        """The common call's plan (inputs in order, fresh outputs), its slots split
        by kind so a run makes no choice per argument: the argument list with the
        workspaces in place, the inputs' checks (argument position, input, dtype,
        shape, byte strides or None) and the outputs' (position, dtype, shape,
        and the logical tensor to allocate, or None for a small dense one)."""
        template, ins, outs = [], [], []
        for pos, slot in enumerate(slots):
            template.append(slot[1] if slot[0] == 2 else None)
            if slot[0] == 0:
                ins.append((pos,) + slot[1:5])
            elif slot[0] == 1:   # (small dense outputs straight from numpy: the common small call)
                small = slot[4] is None and slot[2].itemsize * math.prod(slot[3]) < recycle.MIN_BYTES
                outs.append((pos, slot[2], slot[3], None if small else slot[5]))
        return template, ins, outs

    def _plan(self):
        # (``_fast`` set last: a thread that sees it sees the others, made by another thread's first run)
        fast = self._fast_plan()
        self._out_ids = [lt.id for lt in self.outputs]
        self._fresh = self._fresh_plan(fast) if fast else None
        self._fast = fast
        return fast

    def fresh_run(self, arrays):
        if self._fresh is None and (self._fast is False or not self._plan()):
            return None
        outs = self._run_fresh(arrays)
        return None if outs is None else dict(zip(self._out_ids, outs))

    def fast_run(self, inputs, outputs):
        fast = self._fast
        if fast is None:
            fast = self._plan()
        if not fast:
            return None
        if type(inputs) in (list, tuple) and len(inputs) == len(self.inputs):
            arrays = inputs
        else:
            arrays = _in_order(inputs, self.inputs)
        if arrays is None:
            outs = None
        elif outputs is None:
            outs = self._run_fresh(arrays)   # (the common call: fresh outputs)
        else:
            given = _in_order(outputs, self.outputs)
            outs = None if given is None else self._run_into(arrays, given)
        return None if outs is None else dict(zip(self._out_ids, outs))

    def _run_fresh(self, arrays):
        """The run of a plain kernel on ``arrays`` (inputs in order) into fresh
        outputs, on the common call's plan (_fresh_plan), or None when an input is
        not exactly what the kernel takes (the general path then checks it,
        converts it or says what is wrong)."""
        template, ins, outs_plan = self._fresh
        args = template.copy()
        for pos, ref, dt, shape, strides in ins:
            a = arrays[ref]
            if type(a) is not np.ndarray or (a.dtype is not dt and a.dtype != dt) or a.shape != shape:
                return None
            flags = a.flags
            if not (flags.aligned and (flags.c_contiguous if strides is None else a.strides == strides)):
                return None
            args[pos] = a
        outs = []
        for pos, dt, shape, lt in outs_plan:
            a = args[pos] = np.empty(shape, dt) if lt is None else allocate(lt)
            outs.append(a)
        # (a serial kernel without workspaces: jit's call itself, one Python frame fewer)
        status = self._call(args) if self._parallel or self._workspaces else jit.call_serial(self._entry, args)
        if status is not None and status >= 0:   # (bad data found before anything was written)
            raise self._fault(status, arrays)
        return outs

    def _run_into(self, arrays, given):
        """The run of a plain kernel on ``arrays`` (inputs in order) into the
        caller's ``given`` outputs (in order), or None when an array is not exactly
        what the kernel takes or an output shares memory with another array (the
        general path then checks it, converts it, says what is wrong or allows an
        in-place pair)."""
        args, outs = [], [None] * len(self.outputs)
        for slot in self._fast:
            kind = slot[0]
            if kind == 2:
                args.append(slot[1])
                continue
            if kind == 0:
                a = arrays[slot[1]]
            else:
                a = outs[slot[1]] = given[slot[1]]
            if type(a) is not np.ndarray or (a.dtype is not slot[2] and a.dtype != slot[2]) or a.shape != slot[3]:
                return None
            flags = a.flags
            if not (flags.aligned and (flags.c_contiguous if slot[4] is None else a.strides == slot[4])):
                return None
            if kind == 1 and not flags.writeable:
                return None
            args.append(a)
        if not _same_objects(self._apart, arrays, outs):
            overlaps = np.may_share_memory   # (loops: generators cost as much again as the checks)
            for i, u in enumerate(outs):
                for a in arrays:
                    if overlaps(u, a):
                        return None
                for v in outs[:i]:
                    if overlaps(u, v):
                        return None
            self._apart = tuple(weakref.ref(a) for a in arrays) + tuple(weakref.ref(u) for u in outs)
        status = self._call(args)
        if status is not None and status >= 0:   # (bad data found before anything was written)
            raise self._fault(status, arrays)
        return outs


def _same_objects(refs, arrays, outs) -> bool:
    """Whether weak references ``refs`` are to ``arrays`` then ``outs``, each alive
    and the very object (:attr:`KernelExecutable._apart`)."""
    if len(refs) != len(arrays) + len(outs):
        return False
    k = 0
    for group in (arrays, outs):
        for a in group:
            if refs[k]() is not a:
                return False
            k += 1
    return True


def _in_order(given, lts):
    """``given`` arrays (a list in order, or {id: array}) in the order of ``lts``,
    or None when they are not simply so (the general path says what is wrong)."""
    if isinstance(given, list):
        return given if len(given) == len(lts) else None
    if isinstance(given, dict):
        return [given.get(lt.id) for lt in lts]
    return None
