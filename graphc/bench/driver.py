"""`graphc bench`: a benchdnn-compatible graph driver.

    graphc bench [--mode=C|P|L] [knobs] --case=FILE.json | --batch=FILE ...

Correctness mode (C, the default) builds each case's graph, checks its number
of partitions, compiles it, runs it on generated inputs and compares every
output with graphc's reference; one line per case
(``0:PASSED __REPRO: --graph --case=...``) and benchdnn's summary follow.
Performance mode (P) prints ``perf,cpu,<knobs>,<min ms>,<avg ms>`` and
``compile,<cold ms>,<cached ms>`` per case, then, before the summary, one line
``cost,cpu,<knobs>,<bytes>,<GFLOP>,<GB/s>,<%triad>,<%peak>`` per timed case
(graphc.bench.cost: the bytes one run moves and the FLOPs it computes; GB/s
over the fastest run; its share of a numba triad moving the same bytes, timed
in the same process before and after the case; its share of the peak of its GEMM
road: cost.graph_peak) and
``total perf: ...`` at the end;
listing mode (L) only lists the cases.  The exit status is 1 when a case
failed, was unimplemented or had invalid arguments (benchdnn treats all three
as failures), 2 when the command line cannot be parsed.
"""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np

from .. import compiler
from ..compiler.layout import into_layout
from ..errors import GraphcError, Unimplemented
from ..fill import make_inputs
from ..terminal import shown
from ..tolerances import compare
from . import cost
from .chunks import reference_outputs
from .stats_fill import consistent_stats
from .knobs import Case, KnobError, parse
from .progress import Progress
from .resolve import resolve
from .rewrite import build_graph

PASSED, FAILED = "PASSED", "FAILED"
MISTRUSTED = "MISTRUSTED"  # in the summary for benchdnn parity; an all-zero result is re-judged on other data instead
UNIMPLEMENTED, INVALID, LISTED = "UNIMPLEMENTED", "INVALID_ARGUMENTS", "LISTED"
NAN = float("nan")


@dataclass
class Outcome:
    """What happened to one graph."""

    status: str = PASSED
    reason: str = ""
    partitions: int = 0
    compile_ms: float = NAN
    execute_ms: float = NAN
    max_error: float = NAN
    #: (partition id, pattern, kernel, impl) of each compiled partition (--summary)
    kernels: list = field(default_factory=list)


def _describe(lt) -> str:
    """'0:f32:2x3' (or '0:f32:2x3*1x2' when not dense), as --in-shapes writes it."""
    text = f"{lt.id}:{lt.dtype}:{'x'.join(map(str, lt.shape)) or '-'}"
    return text if lt.is_dense else text + "*" + "x".join(map(str, lt.strides))


def _why(e: BaseException) -> str:
    return f"{type(e).__name__}: " + " ".join(str(e).split())


def _compile(graph, expected: int, out: Outcome):
    """The CompiledGraph, or None with ``out`` saying why not."""
    out.partitions = len(graph.get_partitions())
    if expected and out.partitions != expected:
        out.status, out.reason = FAILED, f"{out.partitions} partitions, expected {expected}"
        return None
    t0 = time.perf_counter()
    try:
        cg = compiler.compile(graph)
    except Unimplemented as e:
        out.status, out.reason = UNIMPLEMENTED, e.message
        return None
    out.compile_ms = (time.perf_counter() - t0) * 1e3
    out.kernels = [(p.id, p.pattern or "-", p.kind, "at_run" if cp is None else cp.get_impl_info())
                   for p, cp in zip(cg.partitions, cg.compiled)]
    return cg


def check(graph, expected_partitions: int = 1, seed: int = 0, rebuild=None) -> Outcome:
    """Compile and run ``graph`` and compare every output with the reference.
    ``expected_partitions`` 0 skips the partition count check; ``rebuild(mb)``: the
    case's graph for another minibatch (a reference too large for memory runs
    minibatch by minibatch, graphc/bench/chunks.py)."""
    out = Outcome()
    try:
        cg = _compile(graph, expected_partitions, out)
        if cg is None:
            return out
        out.max_error = 0.0
        bad, all_zero = _compare_once(graph, cg, seed, out, rebuild)
        if not bad and all_zero:
            # zeros everywhere may come from the data: judge again on other data; zeros
            # that every input gives (clamp to [0, 0], an index along a size-1 dim) are
            # the op's answer
            bad, _ = _compare_once(graph, cg, seed + 1, out, rebuild)
    except Exception as e:  # noqa: BLE001 - a lowering bug fails this case, not the run
        out.status, out.reason = FAILED, _why(e)
        return out
    if bad:
        out.status, out.reason = FAILED, "; ".join(bad)
    return out


def _for_mb(values: dict, old: int, mb: int) -> dict:
    """Knob values for minibatch ``mb``: --mb, and --in-shapes entries of minibatch ``old``."""
    shapes = {tid: replace(s, shape=(mb,) + tuple(s.shape[1:])) if s.shape and s.shape[0] == old else s
              for tid, s in values["in-shapes"].items()}
    return values | {"mb": mb, "in-shapes": shapes}


def _compare_once(graph, cg, seed, out, rebuild=None):
    """Run compiled and reference on one set of inputs: (mismatches, all outputs zero)."""
    inputs = consistent_stats(graph, make_inputs(graph, seed))
    t0 = time.perf_counter()
    got = cg.run(inputs)
    out.execute_ms = (time.perf_counter() - t0) * 1e3
    unrounded: dict = {}
    want = reference_outputs(graph, inputs, rebuild, unrounded=unrounded)
    bad, all_zero = [], bool(graph.output_ports)
    for tid in graph.output_ports:
        ok, err = compare(got[tid], want[tid], graph.tensors[tid].dtype, unrounded=unrounded.get(tid),
                          flips=through_narrow_roundings(graph, tid))
        out.max_error = max(out.max_error, err)
        if not ok:
            bad.append(f"tensor {tid}: scaled error {err:.3g} > 1")
        all_zero = all_zero and got[tid].size > 0 and not np.any(got[tid] != 0)
    return bad, all_zero


def through_narrow_roundings(graph, tid) -> bool:
    """Whether tensor ``tid`` is computed from a bf16/f16/f8 value the graph computes
    (rounded there, as the reference rounds it: graphc.tolerances.FLIPPED_SHARE)."""
    stack, seen = [tid], set()
    while stack:
        t = stack.pop()
        if t in seen or t not in graph.producer:
            continue
        seen.add(t)
        if t != tid and graph.tensors[t].dtype.is_low_precision:
            return True
        op = graph.ops[graph.producer[t][0]]
        stack.extend(x.id for x in op.inputs)
    return False


@dataclass
class Timing:
    min_ms: float
    avg_ms: float
    cold_ms: float
    cached_ms: float
    cost: cost.Cost | None = None
    profile: object = None     # CompiledGraph.profile's table (-v in performance mode)


#: triad runs before and after a case's timed runs (the fastest of them all counts)
TRIAD_RUNS = 5
#: runs of CompiledGraph.profile per case at most (performance mode, -v)
PROFILE_RUNS = 20


def _laid_out(graph, inputs: dict) -> dict:
    """The inputs in their tensors' layouts (an ``acdb`` src as acdb memory), made once
    before timing as benchdnn creates its memories: a timed run then copies nothing.
    A layout whose strides make elements share memory (a broadcast) is left to run()."""
    out = {}
    for tid, a in inputs.items():
        lt = graph.tensors[tid]
        shared = any(st == 0 and d > 1 for d, st in zip(lt.shape, lt.strides or ()))
        out[tid] = a if shared or not lt.is_complete else into_layout(a, lt)
    return out


def measure(graph, expected_partitions: int, fix_times: int, max_ms: float, seed: int = 0, profile: bool = False):
    """(Outcome, Timing or None): executions repeated ``fix_times`` times, or
    until ``max_ms`` have passed when fix_times is 0, after one warm-up run.
    Timing.cost holds the bytes and FLOPs of a run against a triad moving the
    same bytes, timed before and after the case, and the peak of the fastest GEMM
    road its partitions take (cost.graph_peak: the f32 FMA peak, or graphc's bf16
    or int8 GEMM's rate, each measured once); with ``profile``, Timing.profile holds
    CompiledGraph.profile's table of the partitions."""
    out = Outcome()
    try:
        cg = _compile(graph, expected_partitions, out)
        if cg is None:
            return out, None
        t0 = time.perf_counter()
        compiler.compile(graph)
        cached = (time.perf_counter() - t0) * 1e3
        inputs = _laid_out(graph, make_inputs(graph, seed))
        cg.run(inputs)
        nbytes, nflops = cost.bytes_moved(cg), cost.flops(cg)
        triad = cost.Triad(nbytes)
        bandwidth = triad.bandwidth(TRIAD_RUNS)
        # a running total: summing the list on every turn made a small case quadratic
        # (a 5 us op: 600k runs in 3 s of kernel time took 56 s)
        times, total = [], 0.0
        while not times or (len(times) < fix_times if fix_times else total < max_ms):
            t0 = time.perf_counter()
            cg.run(inputs)
            times.append((time.perf_counter() - t0) * 1e3)
            total += times[-1]
        bandwidth = max(bandwidth, triad.bandwidth(TRIAD_RUNS))
        table = cg.profile(inputs, repeat=max(1, min(len(times), PROFILE_RUNS))) if profile else None
    except Exception as e:  # noqa: BLE001 - as in check()
        out.status, out.reason = FAILED, _why(e)
        return out, None
    best = min(times)
    work = cost.Cost(nbytes, nflops, best / 1e3, bandwidth, cost.graph_peak(cg) if nflops else NAN)
    return out, Timing(best, sum(times) / len(times), out.compile_ms, cached, work, table)


def cost_columns(c: cost.Cost) -> str:
    """'<bytes>,<GFLOP>,<GB/s>,<%triad>,<%peak>' of a timed case."""
    return (f"{c.nbytes},{c.flops / 1e9:.6g},{c.gbs:.4g},{100 * c.triad_fraction:.1f},"
            f"{100 * c.peak_fraction:.1f}")


# ------------------------------------------------------------------ the run
class Run:
    def __init__(self, parsed):
        self.g = parsed.globals
        self.cases = parsed.cases
        self.counts = dict.fromkeys((PASSED, MISTRUSTED, UNIMPLEMENTED, INVALID, FAILED, LISTED), 0)
        self.total_min = self.total_avg = 0.0
        self.costs: list[str] = []   # performance mode: one cost line per timed case
        self._docs: dict = {}
        self.impls: dict[str, int] = {}   # --summary: impl string -> partitions of the run

    def repro(self, case: Case) -> str:
        mode = "" if self.g.mode == "C" else f"--mode={self.g.mode} "
        det = "--deterministic " if self.g.deterministic else ""
        return f"{mode}{det}--graph {case.knobs_repro()}"

    def graph(self, case: Case, mb: int = 0, old: int = 0):
        """The case's graph, or a reason it cannot be built; for minibatch ``mb`` when given
        (its --in-shapes of minibatch ``old`` too: the outputs' shapes and strides)."""
        if case.error:
            return None, case.error
        path = resolve(case.path, case.batch_dirs, self.g.inputs_dir)
        if path is None:
            return None, "case file not found"
        if path not in self._docs:  # (JSON, "") or (None, why it cannot be read)
            try:
                self._docs[path] = (json.loads(path.read_text()), "")
            except (OSError, ValueError) as e:
                self._docs[path] = (None, _why(e))
        doc, why = self._docs[path]
        if why:
            return None, why
        try:
            graph = build_graph(doc, _for_mb(case.values, old, mb) if mb else case.values)
            if self.g.deterministic:
                graph.set_deterministic(True)
            return graph, ""
        except GraphcError as e:
            return None, _why(e)

    def one(self, i: int, case: Case, emit) -> None:
        if self.g.mode == "L":
            self.report(i, case, Outcome(LISTED), emit)
            return
        graph, why = self.graph(case)
        if graph is None:
            self.report(i, case, Outcome(INVALID, why), emit)
            return
        if self.g.verbose:
            ins = " ".join(_describe(graph.tensors[t]) for t in graph.input_ports)
            emit(f"[graph] inputs {ins}; partitions {len(graph.get_partitions())}")
        expected = case.values["expected-n-partitions"]
        if self.g.mode == "P":
            out, t = measure(graph, expected, self.g.fix_times, self.g.max_ms, profile=self.g.verbose > 0)
            if t is not None:
                self.counts[out.status] += 1
                self.total_min += t.min_ms
                self.total_avg += t.avg_ms
                emit(f"perf,cpu,{case.knobs_repro()},{t.min_ms:g},{t.avg_ms:g}")
                emit(f"compile,{t.cold_ms:g},{t.cached_ms:g}")
                if t.profile is not None:
                    for line in t.profile.table().splitlines():
                        emit(f"[profile] {line}")
                self.costs.append(f"cost,cpu,{case.knobs_repro()},{cost_columns(t.cost)}")
                self.summarize(i, out, emit)
                return
        else:
            n = next((graph.tensors[t].shape[0] for t in graph.input_ports if graph.tensors[t].shape), 0)
            out = check(graph, expected, rebuild=lambda mb: self.graph(case, mb, n)[0])
        self.report(i, case, out, emit)
        self.summarize(i, out, emit)

    def summarize(self, i: int, out: Outcome, emit) -> None:
        """--summary: the case's partitions, each with its pattern, kernel and
        impl string, as benchdnn's graph driver prints them; counted for the run's
        summary."""
        if not self.g.summary:
            return
        for pid, pattern, kernel, impl in out.kernels:
            emit(f"summary,{i},partition {pid},pattern {pattern},kernel {kernel},impl {impl}")
            self.impls[impl] = self.impls.get(impl, 0) + 1

    def report(self, i, case, out: Outcome, emit) -> None:
        self.counts[out.status] += 1
        reason = f" ({out.reason})" if out.reason else ""
        emit(f"{i}:{out.status}{reason} __REPRO: {self.repro(case)}")

    def summary(self) -> list[str]:
        c = self.counts
        lines = [f"tests:{len(self.cases)} passed:{c[PASSED]} skipped:0 mistrusted:{c[MISTRUSTED]} "
                 f"unimplemented:{c[UNIMPLEMENTED]} invalid_arguments:{c[INVALID]} failed:{c[FAILED]} "
                 f"listed:{c[LISTED]}"]
        if self.g.summary:
            lines = [f"summary,impl {impl},partitions {n}" for impl, n in sorted(self.impls.items())] + lines
        if self.g.mode == "P":
            lines = self.costs + lines
            lines.append(f"total perf: min(ms):{self.total_min:g} avg(ms):{self.total_avg:g}")
        return lines

    @property
    def status(self) -> int:
        return 1 if self.counts[FAILED] + self.counts[UNIMPLEMENTED] + self.counts[INVALID] else 0


HELP = """usage: graphc bench [global options] [knobs] --case=FILE.json | --batch=FILE ...

benchdnn-compatible graph driver: each --case builds a graph from oneDNN Graph
JSON, compiles it, runs it on generated inputs and compares every output with
graphc's numpy reference (mode C), times it (mode P) or lists it (mode L).
Options are read in order, as benchdnn reads them: knobs apply to the --case
and --batch options after them; comma-separated knob values run every
combination.

global options:
  --mode=C|P|L                 correctness (default), performance, listing; performance
                               ends with a line per case: cost,cpu,<knobs>,<bytes>,<GFLOP>,
                               <GB/s>,<%triad>,<%peak> (% of a numba triad moving the same
                               bytes, % of the peak of its GEMM road: sgemm's, or graphc's bf16
                               or int8 GEMM's)
  --fix-times-per-prb=N        performance: run each case N times
  --max-ms-per-prb=MS          performance: time budget per case (10..60000, default 3000)
  --inputs-dir=DIR             where --case and --batch files are looked for too
  --engine=cpu                 the only engine
  -v, -vN, --verbose=N         verbosity; in performance mode, -v prints each case's
                               partitions profiled ([profile] lines: CompiledGraph.profile)
  --deterministic              compile every case's graph in deterministic mode (bitwise
                               reproducible kernels for any numba thread count)
  --summary                    after each case, one line per partition: its pattern,
                               kernel and impl string; the run's impl strings counted
                               before the summary line
  --graph                      benchdnn's driver selector (accepted, ignored)
  -h, --help                   this help

knobs (reset to their defaults by --reset):
  --mb=N                       new minibatch (dim 0 of the inputs); 0 keeps the file's
  --in-shapes=ID:SHAPE[*TAG][+ID:SHAPE...]   new input shapes (e.g. 0:2x3x4*acdb)
  --op-attrs=OPID:NAME:VALUE[*NAME:VALUE][+...]   new op attributes
  --op-kind=OPID:KIND[+...]    new op kinds (for ops of one family)
  --dt=DT or --dt=ID:DT[+...]  new data types (f32, bf16, f16, ...)
  --tensor-property=ID:PROPERTY[+...]   new property types (variable, constant, host_scalar)
  --attr-fpmath=MODE[:BOOL]    the graph's fpmath mode (strict, bf16, f16, tf32, any) and
                               whether it applies to integral ops (default false); unset:
                               the file's
  --expected-n-partitions=N    the partition count to check (default 1; 0: any)

cases:
  --case=FILE.json             one graph
  --batch=FILE                 a file of options and cases ('#' starts a comment)

exit status: 0 all passed, 1 a case failed, was unimplemented or had invalid
arguments, 2 the command line cannot be parsed.
"""


def main(argv) -> int:
    if any(tok in ("-h", "--help") for tok in argv):
        print(HELP, end="")
        return 0
    try:
        parsed = parse(argv)
    except (KnobError, OSError, UnicodeDecodeError) as e:
        print(f"graphc bench: error: {shown(e)}", file=sys.stderr)
        return 2
    if not parsed.cases:
        print("graphc bench: no cases: give --case=FILE.json or --batch=FILE", file=sys.stderr)
        return 2
    run = Run(parsed)
    t0 = time.perf_counter()
    with Progress(len(run.cases)) as bar:
        for i, case in enumerate(run.cases):
            bar.label(case.path)
            run.one(i, case, bar.emit)
            bar.step()
    for line in run.summary():
        print(shown(line))
    print(f"total: {time.perf_counter() - t0:.2f}s")
    return run.status


__all__ = ["main", "check", "measure", "Outcome", "Timing"]
