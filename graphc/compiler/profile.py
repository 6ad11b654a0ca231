"""``CompiledGraph.profile``: where a run's time goes, partition by partition.

Each partition is timed alone within the run (its ``execute`` between two
clock reads, over ``repeat`` runs: the fastest counts), next to the bytes it
moves and the FLOPs it computes (graphc.compiler.cost), and held against the
machine limit that binds it: the bandwidth of a triad moving the same bytes,
or the peak of its GEMM road (the f32 FMA peak, or graphc's bf16 or int8
GEMM's rate where the partition's impl info names that road: cost.gemm_peak)
when its FLOPs at that peak take longer than its bytes at that bandwidth."""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from . import cost

#: triad runs per partition to measure the bandwidth its bytes stream at
TRIAD_RUNS = 5


@dataclass
class PartitionProfile:
    """One partition's row: its fastest time (ms) and mean, its share of the sum
    of fastest times, bytes and FLOPs of a run, and the fraction of its binding
    limit (``bound``: "memory" against the triad, "compute" against the peak
    of its GEMM road, "none" for a view) achieved."""

    partition: int
    kernel: str
    impl: str
    ms: float
    mean_ms: float
    share: float
    nbytes: int
    flops: int
    gbs: float
    bound: str
    fraction: float


@dataclass
class Profile:
    """The rows in run order, and the whole run timed on its own (fastest of the
    repeats, ms): the rows' times add up to it but for graphc's steps between
    partitions."""

    rows: list[PartitionProfile]
    run_ms: float

    @property
    def total_ms(self) -> float:
        return sum(r.ms for r in self.rows)

    def table(self) -> str:
        """The rows as a text table."""
        head = f"{'part':>4} {'ms':>9} {'share':>6} {'bytes':>11} {'GB/s':>8} {'bound':>7} {'of limit':>8}  impl"
        lines = [head]
        for r in self.rows:
            lines.append(f"{r.partition:>4} {r.ms:>9.4f} {100 * r.share:>5.1f}% {r.nbytes:>11} {r.gbs:>8.3g} "
                         f"{r.bound:>7} {_percent(r.fraction):>8}  {r.impl}")
        lines.append(f"sum {self.total_ms:.4f} ms; the run alone {self.run_ms:.4f} ms")
        return "\n".join(lines)

    __str__ = table


def _percent(x: float) -> str:
    return "-" if math.isnan(x) else f"{100 * x:.1f}%"


def profile(cg, inputs: dict, repeat: int = 10, comm=None) -> Profile:
    """Profile CompiledGraph ``cg`` on ``inputs``: one warm-up run, then
    ``repeat`` runs timing each partition, then ``repeat`` runs timed whole."""
    repeat = max(1, int(repeat))
    cg.run(inputs, comm=comm)   # (compiles the partitions compiled at run)
    ran = cost.partitions_run(cg)
    best, sums = [math.inf] * len(ran), [0.0] * len(ran)
    for _ in range(repeat):
        for i, seconds in enumerate(_timed_run(cg, inputs, comm)):
            best[i] = min(best[i], seconds)
            sums[i] += seconds
    run_s = cost.best_time(lambda: cg.run(inputs, comm=comm), repeat, warmup=0)
    total = sum(best) or math.inf
    rows = []
    for i, cp in enumerate(ran):
        nbytes = cost.partition_bytes(cp)
        nflops = sum(op.schema.flops(op) for op in (getattr(cp, "ops", None) or cp.partition.ops))
        rows.append(_row(cg.partitions[i].id, cp, best[i], sums[i] / repeat, best[i] / total, nbytes, nflops))
    return Profile(rows, run_s * 1e3)


def _row(pid, cp, seconds, mean, share, nbytes, nflops) -> PartitionProfile:
    gbs = nbytes / seconds / 1e9 if seconds > 0 else math.nan
    bound, fraction = "none", math.nan
    impl = cp.get_impl_info()
    if nbytes and seconds > 0:
        bandwidth = cost.Triad(nbytes).bandwidth(TRIAD_RUNS)
        bound, fraction = "memory", nbytes / seconds / bandwidth
        if nflops:
            peak = cost.gemm_peak(cost.road_of(impl))
            if nflops / peak > nbytes / bandwidth:
                bound, fraction = "compute", nflops / seconds / peak
    elif nflops and seconds > 0:
        bound, fraction = "compute", nflops / seconds / cost.gemm_peak(cost.road_of(impl))
    return PartitionProfile(pid, cp.partition.kind, impl, seconds * 1e3, mean * 1e3, share, nbytes, nflops, gbs,
                            bound, fraction)


def _timed_run(cg, inputs: dict, comm) -> list[float]:
    """One run of ``cg`` as CompiledGraph.run makes it, each partition's execute
    timed: seconds per partition in order."""
    values = {tid: inputs[tid] for tid in cg._input_ports}
    times = []
    for i, p in enumerate(cg.partitions):
        cp = cg._compiled_for(i, values)
        ins = {t.id: values[t.id] for t in p.inputs}
        t0 = time.perf_counter()
        out = cp.execute(ins, comm=comm)
        times.append(time.perf_counter() - t0)
        values.update(out)
    return times
