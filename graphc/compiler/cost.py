"""The cost model of ``graphc bench --mode=P`` and ``CompiledGraph.profile``: bytes a compiled graph moves, the
FLOPs it computes, and the machine limits they are held against.

Bytes: per compiled partition of a run,
  * a kernel reads its partition inputs and writes its outputs once each (the
    extent of each tensor in its layout: elements x itemsize); tensors between
    its ops stay in registers and cache and are not counted, except a staged
    plan's scratch tensors (arg plan entries ("tmp", lt)), written by one stage
    and read by the next: counted twice.  Kernel workspaces (plan "ws": packed
    GEMM panels sized for the cache) are not counted.  Reshapes and transposes
    inside a kernel fold into its index maps and cost nothing of their own;
  * a zero-copy view (``is_view``) moves nothing;
  * a collective (a runner, not a kernel) and a partition run by the numpy
    reference read their inputs and write their outputs once each.
FLOPs: the sum of ``OpSchema.flops(op)`` over the ops of every partition (2 per
multiply-add; 0 for the memory-bound ops).

Limits: ``Triad`` is a numba parallel ``a = b + s * c`` over three float32 arrays
moving a given number of bytes: the bandwidth this machine streams those bytes
at.  ``fma_peak()`` is the fastest f32 GEMM rate (one single-threaded sgemm
per thread of numba's pool, in parallel), measured once per process; a
partition whose GEMMs run in bf16 or int8 (its impl info names the road,
``road_of``) is held against that road's rate instead (``gemm_peak``: graphc's
bf16 or u8 x s8 GEMM timed the same way; an AMX tile's is 10-20 times the f32
rate, so a bf16 kernel against the f32 peak read 400-600%).
"""
from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit, prange

from ..codegen.blas import gemm_bf16, gemm_f32, gemm_u8s8, single_threaded_blas
from ..codegen.exported import bind
from ..codegen.kernel import NUM_THREADS
from ..errors import InvalidArguments

NAN = float("nan")


# ------------------------------------------------------------------ counting
def tensor_bytes(lt) -> int:
    """Elements x itemsize of a logical tensor with every dim known."""
    if not lt.is_complete:
        raise InvalidArguments("the cost model needs every dim of a tensor known", found=repr(lt))
    return math.prod(lt.shape) * lt.dtype.itemsize


def partitions_run(cg) -> list:
    """The compiled partitions a run of CompiledGraph ``cg`` executes: a partition
    compiled at run (for input shapes, or for the values of its value inputs) is
    the one compiled last, so count after ``cg.run``."""
    out = []
    for p, cp in zip(cg.partitions, cg.compiled):
        if cp is None:   # compiled at run for its input shapes
            at_run = [c for (pid, _), c in cg._at_run.items() if pid == p.id]
            if not at_run:
                raise InvalidArguments("run the compiled graph once before counting its cost: partition "
                                       f"{p.id} compiles at its first run", found="not run")
            cp = at_run[-1]
        if getattr(cp, "per_values", False):   # compiled at run per values of its value inputs
            by_values = list(cp.specializations.values())
            if not by_values:
                raise InvalidArguments("run the compiled graph once before counting its cost: partition "
                                       f"{p.id} compiles at run for the values of its inputs", found="not run")
            cp = by_values[-1]
        out.append(cp)
    return out


def partition_bytes(cp) -> int:
    """Bytes one compiled partition moves in one run (see the module doc)."""
    if getattr(cp, "is_view", False):
        return 0
    if getattr(cp, "kernel", None) is None:   # a collective or the numpy reference
        return sum(tensor_bytes(lt) for lt in list(cp.inputs) + list(cp.outputs) if lt.is_complete)
    total = 0
    for kind, ref in cp.arg_plan:
        if kind == "in":
            total += tensor_bytes(cp.inputs[ref])
        elif kind == "out":
            total += tensor_bytes(cp.outputs[ref])
        elif kind == "tmp":   # written by one stage, read by the next
            total += 2 * tensor_bytes(ref)
    return total


def bytes_moved(cg) -> int:
    """Bytes one run of CompiledGraph ``cg`` moves to and from memory."""
    return sum(partition_bytes(cp) for cp in partitions_run(cg))


def flops(cg) -> int:
    """Floating-point operations of one run of CompiledGraph ``cg``."""
    total = 0
    for cp in partitions_run(cg):
        ops = getattr(cp, "ops", None) or cp.partition.ops
        total += sum(op.schema.flops(op) for op in ops)
    return total


# ------------------------------------------------------------------ the machine
def best_time(fn, repeat: int, warmup: int = 2) -> float:
    """The fastest of ``repeat`` timed calls of ``fn`` after ``warmup`` calls, in seconds."""
    for _ in range(warmup):
        fn()
    best = math.inf
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@njit(parallel=True, nogil=True, cache=True)
def _triad(a, b, c, s):
    for k in prange(a.shape[0]):
        a[k] = b[k] + s * c[k]


@njit(nogil=True, cache=True)
def _triad_serial(a, b, c, s):
    for k in range(a.shape[0]):
        a[k] = b[k] + s * c[k]


class Triad:
    """``a = b + s * c`` over three float32 arrays moving ``nbytes`` in all (a third
    each: b and c read, a written), in a parallel loop and in a serial one: the
    faster of the two is the machine's rate on those bytes (on a few KiB, waking
    the thread pool costs more than the copy, as graphc's kernels know when they
    stay serial)."""

    def __init__(self, nbytes: int):
        n = max(1, int(nbytes) // 12)
        self.nbytes = 12 * n
        self.a, self.b, self.c = np.zeros(n, np.float32), np.ones(n, np.float32), np.full(n, 2, np.float32)
        self.s = np.float32(0.5)

    def bandwidth(self, repeat: int) -> float:
        """Bytes per second of the fastest of ``repeat`` runs of either loop (after
        two warm-up runs each)."""
        args = (self.a, self.b, self.c, self.s)
        return self.nbytes / min(best_time(lambda: loop(*args), repeat) for loop in (_triad, _triad_serial))


@functools.cache
def fma_peak(n: int = 2048, repeat: int = 3) -> float:
    """The machine's f32 FMA peak in FLOP/s: the fastest rate of an n^3 sgemm
    (scipy's BLAS, single-threaded) run once per thread of numba's pool in parallel, as
    graphc's GEMM and convolution kernels call it.  Measured once per process."""
    single_threaded_blas()
    return _measured_peak("f32", n, repeat)


@njit(parallel=True, nogil=True, cache=True)
def _gemms(a, b, c, parts, n):
    for p in prange(parts):
        gemm_f32(0, 0, n, n, n, a, p * n * n, n, b, p * n * n, n, 0.0, c, p * n * n, n)


@njit(parallel=True, nogil=True, cache=True)
def _bf16_gemms(a, b, c, parts, n):
    for p in prange(parts):
        gemm_bf16(0, 0, n, n, n, a, p * n * n, n, b, p * n * n, n, 0.0, c, p * n * n, n)


@njit(parallel=True, nogil=True, cache=True)
def _int8_gemms(a, b, c, parts, n):
    for p in prange(parts):
        gemm_u8s8(0, 0, n, n, n, a, p * n * n, n, b, p * n * n, n, c, p * n * n, n)


#: road -> (the parallel GEMMs timed, the helper they call by symbol)
_GEMMS = {"f32": (_gemms, "gemm_f32"), "bf16": (_bf16_gemms, "gemm_bf16"), "int8": (_int8_gemms, "gemm_u8s8")}


def _measured_peak(road: str, n: int, repeat: int) -> float:
    """The fastest rate (FLOP/s) of one n^3 GEMM of ``road`` per thread of numba's
    pool, in parallel, as kernels call them."""
    gemms, helper = _GEMMS[road]
    bind(helper)   # (before numba's cache loads the GEMMs, which call it by symbol)
    parts = NUM_THREADS
    size = parts * n * n
    rng = np.random.default_rng(0)
    if road == "f32":
        a = rng.standard_normal(size).astype(np.float32)
        b, c = a.copy(), np.empty_like(a)
    elif road == "bf16":
        a = rng.integers(0x3F00, 0x3F80, size).astype(np.uint16)     # bf16 bits of [0.5, 1)
        b, c = a.copy(), np.empty(size, np.float32)
    else:
        a, b = rng.integers(0, 256, size).astype(np.uint8), rng.integers(-128, 128, size).astype(np.int8)
        c = np.empty(size, np.int32)
    t = best_time(lambda: gemms(a, b, c, parts, n), repeat)
    return parts * 2 * n ** 3 / t


#: the GEMM roads a partition's impl info can name, by the names of their functions
_ROADS = (("int8", ("int8_tile", "vnni_tile", "s8u8s32")), ("bf16", ("bf16_tile", "gemm_bf16")))


def road_of(impl: str) -> str:
    """"bf16", "int8" or "f32": the GEMM road an impl info string
    (CompiledPartition.get_impl_info) names, f32 when it names none."""
    for road, names in _ROADS:
        if any(name in impl for name in names):
            return road
    return "f32"


def graph_peak(cg) -> float:
    """The compute limit of a run of CompiledGraph ``cg`` (after one run, as
    partitions_run): the fastest GEMM road any of its partitions takes."""
    roads = {road_of(cp.get_impl_info()) for cp in partitions_run(cg)}
    return max(gemm_peak(road) for road in roads or {"f32"})


def gemm_peak(road: str) -> float:
    """The rate (FLOP/s, 2 per multiply-add) of graphc's GEMM on ``road``: the f32
    FMA peak (fma_peak), or the bf16 or u8 x s8 GEMM's (``_road_peak``)."""
    return fma_peak() if road == "f32" else _road_peak(road)


@functools.cache
def _road_peak(road: str, n: int = 1024, repeat: int = 3) -> float:
    """The fastest rate of graphc's bf16 (``gemm_bf16``) or u8 x s8 (``gemm_u8s8``)
    GEMM of n^3 (graphc's tiles where the CPU has them), timed as fma_peak times
    sgemm.  Measured once per process."""
    if road not in ("bf16", "int8"):
        raise InvalidArguments(f"gemm_peak: no GEMM road {road!r}; expected 'f32', 'bf16' or 'int8'")
    return _measured_peak(road, n, repeat)


@dataclass
class Cost:
    """One case's traffic and work against the machine's limits."""

    nbytes: int
    flops: int
    seconds: float             # the case's fastest run
    triad: float               # bytes/s of the fastest triad moving ``nbytes``
    peak: float = NAN          # FLOP/s (gemm_peak of its road), NaN when not measured (no FLOPs)

    @property
    def gbs(self) -> float:
        return self.nbytes / self.seconds / 1e9 if self.seconds > 0 else NAN

    @property
    def triad_fraction(self) -> float:
        """(bytes / time) over the triad's bandwidth on the same bytes."""
        return self.nbytes / self.seconds / self.triad if self.seconds > 0 else NAN

    @property
    def peak_fraction(self) -> float:
        if not self.flops:
            return 0.0
        return self.flops / self.seconds / self.peak if self.seconds > 0 else NAN


__all__ = ["tensor_bytes", "partitions_run", "partition_bytes", "bytes_moved", "flops", "best_time", "Triad",
           "fma_peak", "gemm_peak", "graph_peak", "road_of", "Cost"]
