"""Compiling partitions and graphs, and running them.

``Partition.compile(inputs, outputs)`` fixes shapes and layouts, generates one
kernel for the partition, and returns a :class:`CompiledPartition`;
``graphc.compile(graph)`` compiles every partition once; ``graphc.run`` is the
one-shot form.
"""
from __future__ import annotations

import copy
import os
import sys
import threading
import time
import warnings
import weakref

import numba
import numpy as np
from numba.core import types as nbtypes
from numba.np.numpy_support import from_dtype

from .errors import GraphcError, InvalidArguments, RuntimeFault, Unimplemented
from .lowering import value_inputs
from .ops.schema import OpSchema
from .codegen import rules
from .codegen.cache import compile_kernel, load_kernel
from .codegen.entry import Kernel, kernel_entry
from .codegen.kernel import KERNEL_VIEW
from .reference import check_input_array
from .types import LogicalTensor, check_extent, dense_strides, overlaps, span as _span
from .views import as_view


def _concrete(lt: LogicalTensor, where: str) -> LogicalTensor:
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


def _reads_attribute(schema) -> bool:
    """Transitional: a schema with value inputs that does not override
    ``check_values`` still reads them from ``op.input_values`` in its check,
    infer and lowering (graphc/ops/reduce.py, conv.py, interpolate.py): its op
    copy gets that attribute until the schema takes the values as an argument."""
    return bool(schema.value_inputs) and type(schema).check_values is OpSchema.check_values


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
        if given and _reads_attribute(op.schema):
            new.input_values = given
        new.inputs = [known.get(t.id, t) for t in op.inputs]
        new.outputs = [t.with_shape(tuple(-1 if d == -1 else d for d in t.shape)) for t in op.outputs]
        new.rebind_inputs(new.inputs, given)
        for t in new.outputs:
            known[t.id] = _concrete(t, f"op {op.id}") if t.is_complete else t
        ops.append(new)
    return ops, known


def flat_view(arr: np.ndarray, lt: LogicalTensor) -> np.ndarray:
    """A 1-D view of ``arr``'s buffer, indexable with lt's element strides, in the
    dtype the kernel sees (bit views for bf16/f16/f8)."""
    view_dt = KERNEL_VIEW.get(lt.dtype)
    if view_dt is not None:
        arr = arr.view(view_dt)
    if arr.size == 0:
        return np.empty(0, dtype=arr.dtype)
    if arr.flags.c_contiguous:  # (the caller made arr's strides lt's): the cheap view
        return arr.reshape(-1)
    span = 1 + sum((d - 1) * s for d, s in zip(lt.shape, lt.strides))
    return np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(arr.itemsize,))


def element_strides(arr: np.ndarray):
    return tuple(s // arr.itemsize if s % arr.itemsize == 0 else None for s in arr.strides)


def layout_matches(arr: np.ndarray, lt: LogicalTensor) -> bool:
    es = element_strides(arr)
    return all(d <= 1 or s == t for d, s, t in zip(lt.shape, es, lt.strides))


def allocate(lt: LogicalTensor) -> np.ndarray:
    """An uninitialized array laid out as ``lt`` says (gaps included)."""
    dt = lt.dtype.np
    try:
        if lt.strides == dense_strides(lt.shape):
            return np.empty(lt.shape, dtype=dt)
        # as_strided does not take ml_dtypes types (bf16, f8): stride the bits
        bits = np.dtype(f"u{dt.itemsize}")
        buf = np.empty(max(_span(lt.shape, lt.strides), 1), dtype=bits)
        return np.lib.stride_tricks.as_strided(buf, shape=lt.shape,
                                               strides=[s * dt.itemsize for s in lt.strides]).view(dt)
    except MemoryError:
        raise RuntimeFault("cannot allocate memory for a tensor", where=f"tensor {lt.id}",
                           found=f"shape {list(lt.shape)}, strides {list(lt.strides)}, {lt.dtype}") from None


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.dtype(f"u{a.itemsize}")) if a.itemsize in (1, 2, 4, 8) else a


def into_layout(arr: np.ndarray, lt: LogicalTensor, overlapping: bool = False) -> np.ndarray:
    """``arr`` itself when its strides are lt's (and it is aligned), else a copy
    laid out as lt says.  When lt's strides make elements share memory
    (``overlapping``: a stride-0 broadcast), the copy must hold every value of
    ``arr``: values that differ where the layout has one place are an error."""
    if layout_matches(arr, lt) and arr.flags.aligned:
        return arr
    out = allocate(lt)
    out[...] = arr
    if overlapping and not np.array_equal(_bits(out), _bits(arr)):
        raise InvalidArguments(f"input tensor {lt.id} does not fit its layout: the strides make distinct "
                               "elements share memory, and the values given differ at such elements",
                               where=f"tensor {lt.id}", expected=f"equal values wherever strides "
                               f"{list(lt.strides)} of shape {list(lt.shape)} meet (e.g. a broadcast view)",
                               found="an array with different values there")
    return out


def _self_overlapping(a: np.ndarray) -> bool:
    """Distinct elements of ``a`` share bytes (e.g. an as_strided view with stride 0)."""
    if a.size <= 1:
        return False
    return overlaps(tuple(a.shape) + (a.itemsize,), tuple(abs(s) for s in a.strides) + (1,))


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return np.shares_memory(a, b, max_work=1 << 16)
    except np.exceptions.TooHardError:
        return True


_KERNEL_LOCK = threading.Lock()
_LAYER_SAFE = None   # numba's threading layer is thread-safe (tbb, omp); None until known


def call_kernel(kernel, args):
    """Run a kernel (graphc.codegen.entry.kernel_entry) on ``args``.  numba's
    workqueue threading layer aborts the process when parallel kernels launch
    from several threads at once: until numba reports a thread-safe layer (tbb or
    omp, which it prefers when available), kernel calls take one lock."""
    global _LAYER_SAFE
    if _LAYER_SAFE:
        return kernel(tuple(args))
    with _KERNEL_LOCK:
        status = kernel(tuple(args))
        if _LAYER_SAFE is None:
            try:
                _LAYER_SAFE = numba.threading_layer() in ("tbb", "omp")
            except ValueError:  # no parallel kernel has run yet
                pass
        return status


def _check_memory(ops, in_lts, out_lts, known) -> None:
    """Before generating code: every tensor with known dims fits in memory (numba
    would fail on loop bounds beyond int64), and no output layout puts two
    elements in one place."""
    from .graph import check_output_layout
    for lt in list(in_lts) + list(out_lts) + list(known.values()):
        check_extent(lt, "compile")
    producer = {t.id: (op, i) for op in ops for i, t in enumerate(op.outputs)}
    for lt in out_lts:
        if lt.id in producer:
            check_output_layout(producer[lt.id][0], producer[lt.id][1], lt)


#: numpy dtypes of kernel workspaces by IR element type
WORKSPACE_DTYPES = {"f32": np.float32, "f64": np.float64, "int": np.int64, "u16": np.uint16, "u8": np.uint8,
                    "i8": np.int8, "i32": np.int32}


def aligned_empty(n: int, dtype, align: int = 4096) -> np.ndarray:
    """An uninitialised 1-D array whose data starts on an ``align``-byte boundary."""
    itemsize = np.dtype(dtype).itemsize
    raw = np.empty(n * itemsize + align, np.uint8)
    start = (-raw.ctypes.data) % align
    return raw[start:start + n * itemsize].view(dtype)


# ------------------------------------------------------- constant tensor cache
#: capacity meaning "no limit" (MB), as oneDNN's default when the cache is on
UNLIMITED_CAPACITY_MB = sys.maxsize >> 20


def _capacity_from_env() -> dict[str, int]:
    """ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY='cpu:1024[;gpu:2048]' (MB), read once."""
    out = {"cpu": 0}
    text = os.environ.get("ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY", "")
    for item in text.split(";"):
        kind, sep, size = item.strip().partition(":")
        if sep and kind.strip() == "cpu" and size.strip().isdigit():
            out["cpu"] = int(size)
    return out


class ConstantTensorCache:
    """The process-wide constant tensor cache (oneDNN's): the outputs of a
    partition computed from constant-property tensors only are kept by its
    compiled partition after its first execution and reused by later ones, as
    long as the cache is on and its capacity (MB, per engine kind) holds them.
    Off by default, as in oneDNN; ``ONEDNN_GRAPH_CONSTANT_TENSOR_CACHE_CAPACITY``
    ('cpu:SIZE_MB') turns it on at import.  When full, new tensors are not
    cached (nothing cached is evicted); a compiled partition that goes away
    gives its bytes back."""

    def __init__(self):
        self._lock = threading.Lock()
        self._capacity = _capacity_from_env()
        self._flag = self._capacity["cpu"] > 0
        self.used_bytes = 0

    def enabled(self) -> bool:
        return self._flag and self._capacity["cpu"] > 0

    def set_flag(self, flag) -> None:
        if isinstance(flag, bool) or not isinstance(flag, (int, np.integer)) or flag not in (0, 1):
            raise InvalidArguments("the constant tensor cache flag must be 0 (off) or 1 (on)", found=repr(flag))
        with self._lock:
            self._flag = bool(flag)
            if flag and self._capacity["cpu"] == 0:
                self._capacity["cpu"] = UNLIMITED_CAPACITY_MB

    def flag(self) -> int:
        return int(self.enabled())

    def set_capacity(self, engine_kind, size) -> None:
        _check_engine_kind(engine_kind)
        if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
            raise InvalidArguments("the constant tensor cache capacity is a number of megabytes",
                                   expected="an integer >= 0", found=repr(size))
        with self._lock:
            self._capacity[engine_kind] = int(size)
            self._flag = size > 0

    def capacity(self, engine_kind) -> int:
        _check_engine_kind(engine_kind)
        return self._capacity[engine_kind]

    def reserve(self, nbytes: int) -> bool:
        """Count ``nbytes`` as cached if the cache is on and they fit."""
        with self._lock:
            if not self.enabled() or self.used_bytes + nbytes > (self._capacity["cpu"] << 20):
                return False
            self.used_bytes += nbytes
            return True

    def release(self, nbytes: int) -> None:
        with self._lock:
            self.used_bytes -= nbytes


def _check_engine_kind(kind) -> None:
    from .graph import ENGINE_KINDS
    if kind not in ENGINE_KINDS:
        raise InvalidArguments("unsupported engine kind", expected=" or ".join(ENGINE_KINDS), found=repr(kind))


CONSTANT_CACHE = ConstantTensorCache()


def set_constant_tensor_cache(flag: int) -> None:
    """Turn the constant tensor cache on (1) or off (0), as dnnl::graph::set_constant_tensor_cache."""
    CONSTANT_CACHE.set_flag(flag)


def get_constant_tensor_cache() -> int:
    """1 when the constant tensor cache is on, else 0."""
    return CONSTANT_CACHE.flag()


def set_constant_tensor_cache_capacity(engine_kind: str, size: int) -> None:
    """The cache's capacity for ``engine_kind`` ('cpu') in megabytes; 0 turns it off."""
    CONSTANT_CACHE.set_capacity(engine_kind, size)


def get_constant_tensor_cache_capacity(engine_kind: str) -> int:
    return CONSTANT_CACHE.capacity(engine_kind)


class FallbackWarning(UserWarning):
    """Partitions graphc cannot compile run in the numpy reference (opt-in)."""


class CompiledPartition:
    """A partition compiled for concrete input and output logical tensors.

    A partition with value inputs (ops whose kernel depends on the values of a
    small input, such as ReduceX's axes: graphc.lowering.value_inputs) has no
    kernel of its own: each run reads those values, and runs the partition
    compiled for them, compiled at the first run with these values (the
    values checked first) and kept in ``specializations``."""

    def __init__(self, partition, inputs, outputs, ops, known, source, kernel, arg_plan, runner=None,
                 view_at=None, entry=None):
        self._view_at = view_at        # a partition of views (graphc.views): the input its output views
        self._fast = None              # the per-run work done once (see _fast_plan); False: no fast path
        self.partition = partition
        self.inputs = inputs
        self.outputs = outputs
        self.ops = ops
        self._known = known
        self.source = source
        self.kernel = kernel           # the kernel (graphc.codegen.entry.Kernel: its numba dispatcher)
        self._entry = entry            # what runs it (graphc.codegen.entry.kernel_entry)
        self._plan = arg_plan          # kernel args: ("in", i) / ("out", i) / ("tmp", LogicalTensor)
        self._runner = runner          # a non-kernel executor (collectives)
        self.compile_seconds = 0.0
        self._value_at = None          # indices of the value inputs (a partition compiled per their values)
        self._wanted = None            # the output logical tensors asked for at compile
        self._by_values: dict[tuple, CompiledPartition] = {}
        self._lock = threading.Lock()
        self._constant_outputs = None  # the outputs kept in the constant tensor cache
        self._inplace = self._inplace_pairs()
        self._workspaces: dict[int, np.ndarray] = {}   # kernel workspaces (plan "ws"), allocated at first use
        self._ws_lock = threading.Lock()

    @property
    def is_view(self) -> bool:
        """The partition moves no data: its output is a view of one of its inputs
        (a chain of StaticReshape / StaticTranspose / Reorder into the same layout
        whose strides allow it; see graphc.views).  ``execute`` without outputs
        returns a numpy view sharing the input's memory."""
        return self._view_at is not None

    # ----------------------------------------------------------------- in place
    def _inplace_pairs(self) -> list[tuple[int, int]]:
        """(input index, output index) pairs whose buffers may be one: a kernel of
        pointwise ops only (each element of its one output computed from the
        same element of each input, loaded before the store) whose output has
        the input's shape, data type and strides."""
        from .ops.common import is_pointwise
        if self.is_view:   # the output may be the input's buffer itself, seen through the view
            return [(self._view_at, 0)]
        if self.kernel is None or self._runner is not None or len(self.outputs) != 1 \
                or not all(is_pointwise(op) for op in self.ops):
            return []
        out = self.outputs[0]
        return [(i, 0) for i, lt in enumerate(self.inputs)
                if lt.dtype == out.dtype and lt.shape == out.shape and lt.strides == out.strides
                and not self._overlapping_inputs()[i]]

    def get_inplace_ports(self) -> list[tuple[int, int]]:
        """[(input tensor id, output tensor id)]: pairs that may share one buffer.
        Pass the input's array as that output (``execute(ins, outputs=[x])``) and
        the kernel writes its result over the input, as oneDNN's
        compiled_partition::get_inplace_ports."""
        return [(self.inputs[i].id, self.outputs[o].id) for i, o in self._inplace]

    def _check_aliasing(self, user_outs, ins) -> None:
        """A caller-given output may share memory with an input only as an in-place
        pair (get_inplace_ports) and as the very view the kernel writes (same start,
        strides and type): anything else would read what the run overwrites."""
        for o, u in enumerate(user_outs):
            if u is None or self._may_write_over(u, o, ins):
                continue
            lt = self.outputs[o]
            j = next(j for j, a in enumerate(ins) if _shares(u, a))
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
            if not np.may_share_memory(u, a) or not _shares(u, a):
                continue
            if (j, o) not in self._inplace or a.dtype != u.dtype or not layout_matches(u, lt) \
                    or a.__array_interface__["data"][0] != u.__array_interface__["data"][0]:
                return False
        return True

    def _scratch_tensor(self, k: int, lt: LogicalTensor) -> np.ndarray:
        """The flat kernel view of intermediate tensor ``lt`` (plan entry ``k``),
        allocated once: allocating it per run paid its page faults every run."""
        buf = self._workspaces.get(k)
        if buf is None:
            buf = self._workspaces[k] = flat_view(allocate(lt), lt)
        return buf

    def _workspace(self, k: int, spec) -> np.ndarray:
        """The buffer of plan entry ``k`` ((elements, elem)), allocated once."""
        buf = self._workspaces.get(k)
        if buf is None:
            n, elem = spec
            buf = self._workspaces[k] = aligned_empty(max(1, n), WORKSPACE_DTYPES[elem])
        return buf

    @property
    def specializations(self) -> dict:
        """{((tensor id, values), ...): CompiledPartition} compiled so far for the
        values of the value inputs (empty for a partition without them)."""
        return dict(self._by_values)

    def _specialized(self, inputs) -> "CompiledPartition":
        """The partition compiled for the values of the value inputs in ``inputs``."""
        given = self._bind(inputs, self.inputs, "input")
        key = []
        for i in self._value_at:
            lt = self.inputs[i]
            key.append((lt.id, tuple(int(v) for v in check_input_array(lt, given[i]).reshape(-1))))
        key = tuple(key)
        with self._lock:
            cp = self._by_values.get(key)
            if cp is None:
                cp = compile_partition(self.partition, self.inputs, self._wanted, dict(key))
                self._by_values[key] = cp
        return cp

    def query_logical_tensor(self, tid: int) -> LogicalTensor:
        """An input or output logical tensor with every dim and stride resolved."""
        for t in list(self.inputs) + list(self.outputs):
            if t.id == tid:
                return t
        raise InvalidArguments("tensor is not an input or output of this compiled partition", found=tid)

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

    def _arrays(self, inputs, outputs, fresh=True):
        """(checked inputs, arrays to write, caller-given outputs or None); an output
        with dims unknown until run (a collective's) is None unless given, and
        so are all without ``fresh``."""
        overlapping = self._overlapping_inputs()
        ins = [into_layout(check_input_array(lt, a), lt, ov)
               for lt, a, ov in zip(self.inputs, self._bind(inputs, self.inputs, "input"), overlapping)]
        if outputs is None:
            return ins, [allocate(lt) if fresh and lt.is_complete else None for lt in self.outputs], None
        user_outs = [check_input_array(lt, a, "output") for lt, a in
                     zip(self.outputs, self._bind(outputs, self.outputs, "output"))]
        for i, (u, lt) in enumerate(zip(user_outs, self.outputs)):
            if _self_overlapping(u):
                raise InvalidArguments(f"output tensor {lt.id} is a view whose distinct elements share memory",
                                       where=f"tensor {lt.id}", expected="an array with one place per element",
                                       found=f"byte strides {list(u.strides)} for shape {list(u.shape)}")
            for j in range(i):
                if _shares(u, user_outs[j]):
                    raise InvalidArguments(f"output tensors {self.outputs[j].id} and {lt.id} share memory",
                                           where=f"tensor {lt.id}", expected="a separate buffer for each output",
                                           found="arrays over the same memory")
        self._check_aliasing(user_outs, ins)
        if not fresh:
            return ins, None, user_outs
        # Write the caller's buffer directly only when the kernel can: same layout,
        # aligned, and no kernel fault that could stop half-way; else compute into
        # a temporary and copy after a successful run.
        faulting = self._may_fault()
        outs = []
        for u, lt in zip(user_outs, self.outputs):
            if not lt.is_complete:
                outs.append(u)
            elif not faulting and layout_matches(u, lt) and u.flags.aligned:
                outs.append(u)
            else:
                outs.append(allocate(lt))
        return ins, outs, user_outs

    def _overlapping_inputs(self) -> list[bool]:
        """For each input: its strides make distinct elements share memory."""
        ov = self.__dict__.get("_overlapping")
        if ov is None:
            ov = self.__dict__["_overlapping"] = [
                lt.strides is not None and all(s >= 0 for s in lt.strides) and overlaps(lt.shape, lt.strides)
                for lt in self.inputs]
        return ov

    def _may_fault(self) -> bool:
        """The kernel can stop on bad data (reporting a status) after writing part of an output."""
        f = self.__dict__.get("_faulting")
        if f is None:
            f = self.__dict__["_faulting"] = any(rules.may_fault(op) for op in self.ops)
        return f

    # ------------------------------------------------------------ the fast path
    def _fast_plan(self):
        """What every run of a plain kernel repeats, done once: for each kernel
        argument, an input's expected dtype and shape (dense), an output's flat
        type and size, or the workspace itself; the compiled machine code's entry
        point (no type dispatch: the arguments are checked to be exactly its
        types).  False for partitions that need the general path (views,
        collectives, value inputs, constant caching, strided or overlapping
        layouts, faulting kernels)."""
        if self.kernel is None or self._runner is not None or self._value_at is not None \
                or self._view_at is not None or self.partition.constant or self._may_fault() \
                or any(self._overlapping_inputs()) \
                or not all(lt.is_complete and lt.is_dense for lt in list(self.inputs) + list(self.outputs)):
            return False
        slots = []
        for k, (kind, ref) in enumerate(self._plan):
            if kind == "in":
                lt = self.inputs[ref]
                view = KERNEL_VIEW.get(lt.dtype)
                slots.append((0, ref, lt.dtype.np, tuple(lt.shape), None if view is None else np.dtype(view)))
            elif kind == "out":
                lt = self.outputs[ref]
                flat = np.dtype(KERNEL_VIEW.get(lt.dtype, lt.dtype.np))
                slots.append((1, ref, flat, lt.nelems, (lt.dtype.np, tuple(lt.shape))))
            else:
                slots.append((2, self._workspace(k, ref) if kind == "ws" else self._scratch_tensor(k, ref)))
        return slots, self._entry, len(self.outputs)

    def _run_fast(self, arrays, given=None):
        """The run of a plain kernel on ``arrays`` (inputs in order) into fresh
        outputs, or into ``given`` ones (in order), or None when an array is not
        exactly what the kernel takes or an output shares memory with another
        array (the general path then checks it, converts it, says what is wrong
        or allows an in-place pair)."""
        slots, entry, nout = self._fast
        args, outs = [], [None] * nout
        for slot in slots:
            if slot[0] == 0:
                a = arrays[slot[1]]
                if type(a) is not np.ndarray or a.dtype != slot[2] or a.shape != slot[3] \
                        or not a.flags.c_contiguous or not a.flags.aligned:
                    return None
                args.append((a if slot[4] is None else a.view(slot[4])).reshape(-1))
            elif slot[0] == 1:
                dt, shape = slot[4]
                if given is None:
                    flat = np.empty(slot[3], slot[2])
                    outs[slot[1]] = flat.view(dt).reshape(shape)
                else:
                    u = outs[slot[1]] = given[slot[1]]
                    if type(u) is not np.ndarray or u.dtype != dt or u.shape != shape or not u.flags.c_contiguous \
                            or not u.flags.aligned or not u.flags.writeable:
                        return None
                    flat = (u if slot[2] == dt else u.view(slot[2])).reshape(-1)
                args.append(flat)
            else:
                args.append(slot[1])
        if given is not None:
            for i, u in enumerate(outs):
                if any(np.may_share_memory(u, a) for a in arrays) or \
                        any(np.may_share_memory(u, v) for v in outs[:i]):
                    return None
        if self._workspaces:
            with self._ws_lock:
                call_kernel(entry, args)
        else:
            call_kernel(entry, args)
        return outs

    @staticmethod
    def _in_order(given, lts):
        """``given`` arrays (a list in order, or {id: array}) in the order of ``lts``,
        or None when they are not simply so (the general path says what is wrong)."""
        if isinstance(given, list):
            return given if len(given) == len(lts) else None
        if isinstance(given, dict):
            return [given.get(lt.id) for lt in lts]
        return None

    def execute(self, inputs, outputs=None, comm=None) -> dict:
        """Run on ``inputs`` ({id: array} or a list in partition order).  Caller-given
        ``outputs`` are written in place; returns {output id: array}.  A collective
        runs on ``comm`` (see graphc.comm); bad arguments to it on any member of
        the group raise on every member."""
        if self._fast is None:
            self._fast = self._fast_plan()
        if self._fast:
            arrays, given = self._in_order(inputs, self.inputs), None
            if outputs is not None:
                given = self._in_order(outputs, self.outputs)
                arrays = None if given is None else arrays
            outs = None if arrays is None else self._run_fast(arrays, given)
            if outs is not None:
                return {lt.id: a for lt, a in zip(self.outputs, outs)}
        if self._value_at is not None:
            return self._specialized(inputs).execute(inputs, outputs, comm)
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
        result = self._execute(inputs, outputs, comm)
        if self.partition.constant:
            self._keep_constant(result)
        return result

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
        weakref.finalize(self, CONSTANT_CACHE.release, nbytes)

    def _execute_view(self, inputs, outputs) -> dict:
        """A partition of views: its output is the input's buffer seen through
        the view's strides; a caller-given output gets a copy (none when it is
        that very view: the in-place port)."""
        out = self.outputs[0]
        ins, _, user_outs = self._arrays(inputs, outputs, fresh=False)
        a = ins[self._view_at]
        v = as_view(a, out.shape, out.strides)
        if user_outs is None:
            return {out.id: v}
        u = user_outs[0]
        if not np.may_share_memory(u, a):   # (else it is the view itself: checked in _arrays)
            u[...] = v
        return {out.id: u}

    def _execute(self, inputs, outputs, comm) -> dict:
        if self._view_at is not None:
            return self._execute_view(inputs, outputs)
        if self._runner is not None:
            try:
                ins, outs, user_outs = self._arrays(inputs, outputs)
            except GraphcError as e:
                self._runner(self, None, None, comm, e)  # tells the other members; raises
            outs = self._runner(self, ins, outs, comm, None)
        else:
            ins, outs, user_outs = self._arrays(inputs, outputs)
            args = []
            for k, (kind, ref) in enumerate(self._plan):
                if kind == "in":
                    args.append(flat_view(ins[ref], self.inputs[ref]))
                elif kind == "out":
                    args.append(flat_view(outs[ref], self.outputs[ref]))
                elif kind == "ws":
                    args.append(self._workspace(k, ref))
                else:   # an intermediate tensor: a workspace too (its contents never outlive a run)
                    args.append(self._scratch_tensor(k, ref))
            if self._workspaces:   # one run at a time uses them
                with self._ws_lock:
                    status = call_kernel(self._entry, args)
            else:
                status = call_kernel(self._entry, args)
            if status is not None and status >= 0:
                raise self._fault(status, ins)
        if user_outs is not None:
            for u, o in zip(user_outs, outs):
                if u is not o:
                    u[...] = o
            outs = user_outs
        return {lt.id: a for lt, a in zip(self.outputs, outs)}

    def _fault(self, status: int, ins) -> GraphcError:
        for op in self.ops:
            if rules.may_fault(op):
                return rules.kernel_fault(op, status, {lt.id: a for lt, a in zip(self.inputs, ins)})
        return RuntimeFault("kernel reported bad input data", op=self.ops[0], found=f"status {status}")

    def __repr__(self):
        return f"CompiledPartition({self.partition.kind}, in={[t.id for t in self.inputs]}, " \
               f"out={[t.id for t in self.outputs]})"


def compile_partition(partition, inputs=None, outputs=None, values=None) -> CompiledPartition:
    """``partition`` compiled for ``inputs`` (and ``outputs``): LogicalTensors.  A
    partition with value inputs compiles for ``values`` ({tensor id: tuple of
    ints}) of every one of them; without, into a CompiledPartition that compiles
    at run for the values given then."""
    from .lowering import build_kernel, collective_runner, value_inputs
    t0 = time.perf_counter()
    given = {t.id: t for t in (inputs if inputs is not None else partition.inputs)}
    in_lts = []
    for t in partition.inputs:
        lt = given.get(t.id, t)
        if not isinstance(lt, LogicalTensor):
            raise InvalidArguments("compile expects LogicalTensors", found=type(lt).__name__)
        if lt.dtype != t.dtype or len(lt.shape) != len(t.shape):
            raise InvalidArguments(f"input tensor {t.id} disagrees with the partition", expected=repr(t),
                                   found=repr(lt))
        in_lts.append(_concrete(lt, "compile"))
    if not partition.is_supported():
        kinds = ", ".join(op.kind for op in partition.ops)
        raise Unimplemented(f"this build cannot compile partition {partition.id} ({kinds})",
                            op=partition.ops[0])
    op_values = values_by_op(partition.ops, values)
    ops, known = specialize(partition, in_lts, op_values)
    value_ids = {t.id for _, _, t in value_inputs(ops)}
    per_values = bool(value_ids) and values is None  # compiled at run, per values of the value inputs
    collective = collective_runner(ops) is not None  # its output dims may be known only at run
    out_lts = []
    wanted = {t.id: t for t in (outputs or [])}
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
            lt = _chosen_layout(ops, lt)
        out_lts.append(lt if (collective or per_values) and not lt.is_complete else _concrete(lt, "compile"))
    _check_memory(ops, in_lts, out_lts, known)
    view = None if per_values or collective else _view_of(ops, in_lts, out_lts, partition.outputs, wanted)
    if view is not None:
        i, lt = view
        cp = CompiledPartition(partition, in_lts, [lt], ops, known, None, None, [], view_at=i)
        cp.compile_seconds = time.perf_counter() - t0
        return cp
    if per_values:
        cp = CompiledPartition(partition, in_lts, out_lts, ops, known, None, None, [])
        cp._value_at = [i for i, lt in enumerate(in_lts) if lt.id in value_ids]
        cp._wanted = outputs
        return cp
    source, plan, runner = build_kernel(partition, ops, in_lts, out_lts, op_values)
    kernel = entry = None
    if source is not None:
        dispatcher = load_kernel(source)
        sig = []
        for kind, ref in plan:
            if kind == "ws":
                dt = np.dtype(WORKSPACE_DTYPES[ref[1]])
            else:
                lt = in_lts[ref] if kind == "in" else out_lts[ref] if kind == "out" else ref
                dt = np.dtype(KERNEL_VIEW.get(lt.dtype, lt.dtype.np))
            sig.append(nbtypes.Array(from_dtype(dt), 1, "C"))
        compile_kernel(dispatcher, tuple(sig))
        kernel, entry = Kernel(dispatcher), kernel_entry(dispatcher, tuple(sig))
    cp = CompiledPartition(partition, in_lts, out_lts, ops, known, source, kernel, plan, runner, entry=entry)
    cp.compile_seconds = time.perf_counter() - t0
    return cp


def _chosen_layout(ops, lt: LogicalTensor) -> LogicalTensor:
    """Output ``lt`` of layout ``any``: in the strides the partition's compute op
    writes fastest (``OpSchema.preferred_strides``, e.g. channels last for an NCX
    convolution) when its output 0 has lt's shape (post-ops keep it), else dense.
    (A partition of views gives its view's strides instead: _view_of.)"""
    for op in reversed(ops):
        st = op.schema.preferred_strides(op) if op.outputs and op.outputs[0].shape == lt.shape else None
        if st is not None:
            return LogicalTensor(lt.id, lt.dtype, lt.shape, st, "strided", lt.property_type)
    return lt


def _view_of(ops, in_lts, out_lts, asked_outs, wanted):
    """(input index, output LogicalTensor) when the partition is a chain of views
    (graphc.views) from one input to its one output, whose strides the output
    takes: an output with layout ``any`` takes the view's strides; one with
    strides of its own must have the view's.  Else None (a kernel copies)."""
    from .views import chain_strides, is_view_chain, same_layout
    if len(out_lts) != 1 or not is_view_chain(ops):
        return None
    src = next((i for i, lt in enumerate(in_lts) if lt.id == ops[0].inputs[0].id), None)
    out = out_lts[0]
    if src is None or ops[-1].outputs[0].id != out.id:
        return None
    strides = chain_strides(ops, in_lts[src].strides)
    if strides is None:
        return None
    asked = wanted.get(out.id) or next(t for t in asked_outs if t.id == out.id)
    if asked.strides is not None and not same_layout(out.shape, out.strides, strides):
        return None
    return src, LogicalTensor(out.id, out.dtype, out.shape, strides, "strided", out.property_type)


def any_layouts(graph, partitions) -> dict[int, tuple]:
    """{tensor id: strides} for the tensors with layout ``any`` that leave one
    partition for a chain of views into a tensor of known strides: the strides
    that make the views free (the producer writes the layout the views read).
    Other ``any`` tensors take the dense layout their partition compiles them
    with.  Consumers are visited last first, so a chain of view partitions
    passes the strides back."""
    from .views import chain_strides, is_view_chain
    chosen: dict[int, tuple] = {}
    for p in reversed(partitions):
        ops = p.ops
        if not is_view_chain(ops) or len(p.outputs) != 1:
            continue
        src, dst = ops[0].inputs[0], ops[-1].outputs[0]
        src = graph.tensors.get(src.id, src)
        dst = graph.tensors.get(dst.id, dst)
        strides = chosen.get(dst.id, dst.strides)
        if src.strides is not None or strides is None or not src.is_complete or not dst.is_complete \
                or src.id in graph.input_ports:
            continue
        back = chain_strides(ops, tuple(strides), forward=False)
        if back is not None and all(s >= 0 for s in back):
            chosen[src.id] = tuple(back)
    return chosen


class CompiledGraph:
    """Every partition of a graph compiled once, run in order.  A partition with
    input dims known only at run (after a collective whose output dim is the
    group's) compiles at its first run, once per set of input shapes."""

    def __init__(self, graph, policy: str = "fusion", fallback: str | None = None):
        from .lowering import collective_runner
        if fallback not in (None, "reference"):
            raise InvalidArguments("unknown fallback", expected="None or 'reference'", found=repr(fallback))
        graph.finalize()
        self.graph = graph
        self.partitions = graph.get_partitions(policy)
        bad = [p for p in self.partitions if not p.is_supported()]
        if bad and fallback is None:
            kinds = sorted({op.kind for p in bad for op in p.ops})
            raise Unimplemented("this build cannot compile: " + ", ".join(kinds) +
                                " (graphc.compile(graph, fallback='reference') runs such partitions in the "
                                "numpy reference)", op=bad[0].ops[0])
        #: the partitions run by the reference (fallback="reference")
        self.fallback_partitions = bad
        if bad:
            listed = "; ".join(f"partition {p.id} ({p.kind}: ops {[op.id for op in p.ops]})" for p in bad)
            warnings.warn(f"graphc cannot compile {len(bad)} of {len(self.partitions)} partitions; they run in "
                          f"the numpy reference: {listed}", FallbackWarning, stacklevel=3)
        chosen = any_layouts(graph, self.partitions)
        resolved: dict[int, LogicalTensor] = {}   # output tensors as compiled (their strides chosen)
        self.compiled = []
        for p in self.partitions:
            if p in bad or not all(t.is_complete for t in p.inputs):
                self.compiled.append(ReferencePartition(p) if p in bad else None)
                continue
            outs = [t if t.id not in chosen else
                    LogicalTensor(t.id, t.dtype, t.shape, chosen[t.id], "strided", t.property_type)
                    for t in p.outputs]
            cp = p.compile([resolved.get(t.id, t) for t in p.inputs], outs)
            resolved.update((t.id, t) for t in cp.outputs)
            self.compiled.append(cp)
        self._at_run: dict[tuple, CompiledPartition] = {}   # (partition id, input shapes) -> compiled
        self._collectives = [collective_runner(p.ops) for p in self.partitions]
        self._input_ports, self._output_ports = graph.input_ports, graph.output_ports  # (a topological sort each)
        #: (compiled partition, input ids) in order when no partition is a collective or compiles at run
        self._steps = None if any(c is None or c is not None and k is not None
                                  for c, k in zip(self.compiled, self._collectives)) else \
            [(cp, [t.id for t in cp.inputs]) for cp in self.compiled]

    @property
    def source(self) -> str:
        return "\n".join(getattr(cp, "source", None) or "" for cp in self.compiled if cp is not None)

    def _compiled_for(self, i: int, values: dict) -> CompiledPartition:
        """Partition i, compiled for the shapes of its input values if not yet known."""
        if self.compiled[i] is not None:
            return self.compiled[i]
        p = self.partitions[i]
        lts = [_resolved(t, values[t.id]) for t in p.inputs]
        key = (p.id, tuple(t.shape for t in lts))
        if key not in self._at_run:
            self._at_run[key] = p.compile(lts, p.outputs)
        return self._at_run[key]

    def run(self, inputs: dict, comm=None) -> dict:
        """Run every partition in order; collectives on ``comm`` (see graphc.comm).
        Any exception on this member of the group (a GraphcError, a bug, a
        MemoryError, a KeyboardInterrupt) is raised once the collectives still
        ahead have told the other members, which then raise a RuntimeFault instead
        of waiting for this one: this member raises that RuntimeFault too for a
        GraphcError, and the exception itself otherwise.  A member that does not
        answer at all is caught by the collectives' timeout (graphc.comm)."""
        if not isinstance(inputs, dict):
            raise InvalidArguments("inputs must be a dict {tensor id: array}", found=type(inputs).__name__)
        failure = None
        missing = [tid for tid in self._input_ports if tid not in inputs]
        if missing:
            failure = InvalidArguments("missing input", where=f"tensor {missing[0]}",
                                       expected=repr(self.graph.tensors[missing[0]]))
        values = {tid: inputs[tid] for tid in self._input_ports if tid in inputs}
        if failure is None and self._steps is not None:   # no collective: nothing to tell anyone
            for cp, ids in self._steps:
                values.update(cp.execute([values[t] for t in ids]))
            return {tid: values[tid] if values[tid].flags.writeable else values[tid].copy()
                    for tid in self._output_ports}
        from .comm import exchanges
        for i, p in enumerate(self.partitions):
            collective = self._collectives[i]
            if failure is None:
                sent = exchanges()
                try:
                    values.update(self._compiled_for(i, values).execute({t.id: values[t.id] for t in p.inputs},
                                                                         comm=comm))
                    continue
                except BaseException as e:  # noqa: BLE001 - whatever it is, the other members must learn of it
                    if getattr(e, "group_wide", False):
                        raise  # every member raises it (or the group no longer answers)
                    failure = e
                    if collective is not None and exchanges() != sent:
                        continue  # this collective heard from this member: the next ones tell the others
            if collective is not None:
                _tell(collective, comm, failure)
        if failure is not None:
            raise failure
        # (arrays kept in the constant tensor cache are read-only: the caller gets copies)
        return {tid: values[tid] if values[tid].flags.writeable else values[tid].copy() for tid in self._output_ports}


class ReferencePartition:
    """A partition graphc cannot compile, run op by op in the numpy reference
    (``graphc.compile(graph, fallback="reference")``, which warns)."""

    source = None

    def __init__(self, partition):
        self.partition = partition
        self.inputs = list(partition.inputs)
        self.outputs = list(partition.outputs)

    def execute(self, inputs: dict, outputs=None, comm=None) -> dict:
        from .reference import run_op
        values = {lt.id: check_input_array(lt, inputs[lt.id]) for lt in self.inputs}
        for op in self.partition.ops:
            if op.kind != "End":
                values.update(run_op(op, [values[t.id] for t in op.inputs], comm=comm))
        return {lt.id: values[lt.id] for lt in self.outputs}

    def __repr__(self):
        return f"ReferencePartition({self.partition.kind}, in={[t.id for t in self.inputs]}, " \
               f"out={[t.id for t in self.outputs]})"


def _tell(collective, comm, failure: BaseException):
    """Tell the other members at this collective that this one failed: they raise a
    RuntimeFault; so does this member for a GraphcError, while any other exception
    is re-raised as it is (its traceback intact)."""
    try:
        collective(None, None, None, comm, failure)
    except GraphcError:
        if isinstance(failure, GraphcError):
            raise
    raise failure


def _resolved(lt: LogicalTensor, value) -> LogicalTensor:
    """lt with its unknown dims taken from the shape of ``value`` (if of lt's rank)."""
    shape = getattr(value, "shape", ())
    if lt.is_complete or len(shape) != lt.ndim:
        return lt
    return LogicalTensor(lt.id, lt.dtype, tuple(a if d == -1 else d for d, a in zip(lt.shape, shape)), None,
                         "strided", lt.property_type)


def compile(graph, policy: str = "fusion", fallback: str | None = None) -> CompiledGraph:  # noqa: A001
    """Every partition of ``graph`` compiled.  A partition graphc cannot compile
    raises Unimplemented, unless ``fallback="reference"``: then such partitions
    run in the numpy reference, and a FallbackWarning lists them."""
    return CompiledGraph(graph, policy, fallback)


def run(graph, inputs: dict, comm=None, policy: str = "fusion", fallback: str | None = None) -> dict:
    """``compile(graph, policy, fallback).run(inputs, comm)``."""
    return CompiledGraph(graph, policy, fallback).run(inputs, comm=comm)
