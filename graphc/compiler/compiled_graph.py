"""A graph compiled: every partition compiled once and run in order, with the
reference fallback (``fallback="reference"``) and failures told to the other
members of a group at the collectives still ahead."""
from __future__ import annotations

import operator
import warnings
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import verbose
from ..comm import check_comm, exchanges
from ..errors import MAX_ITEMS, GraphcError, InvalidArguments, Unimplemented, quote, short
from ..graph import ensure_graph
from ..interop import as_array
from ..partition import partition_graph
from ..reference import check_input_array
from ..views import as_view, chain_strides, same_layout
from ..types import LogicalTensor
from .any_layout import any_layouts
from .batch import kernel_batch
from .bounded import BoundedCache
from .compiled_partition import CompiledPartition, ReferencePartition
from .layout import allocate, layout_matches
from .executables import collective_of
from .progress import CompileProgress

if TYPE_CHECKING:
    from ..graph import Graph
    from .profile import Profile


class FallbackWarning(UserWarning):
    """Partitions graphc cannot compile run in the numpy reference (opt-in)."""


class CompiledGraph:
    """Every partition of a graph compiled once, run in order.  A partition with
    input dims known only at run (after a collective whose output dim is the
    group's) compiles at its first run, once per set of input shapes."""

    def __init__(self, graph: Graph, policy: str = "fusion", fallback: str | None = None):
        if fallback not in (None, "reference"):
            raise InvalidArguments("unknown fallback", expected="None or 'reference'", found=short(fallback))
        ensure_graph(graph, "compile").finalize()
        self.graph = graph
        self.policy, self.fallback = policy, fallback
        #: graph inputs of unknown rank: compiled at run, once per ranks of their arrays
        self._by_ranks = BoundedCache() if graph.rank_pending else None
        if self._by_ranks is not None:
            self.partitions, self.compiled, self.fallback_partitions, self._steps = [], [], [], None
            self._view_sources, self._plain, self._one = {}, None, False
            return
        self.partitions = partition_graph(graph, policy)
        bad = [p for p in self.partitions if not p.is_supported()]
        if bad and fallback is None:
            kinds = sorted({op.kind for p in bad for op in p.ops})
            raise Unimplemented("this build cannot compile: " + ", ".join(kinds) +
                                " (graphc.compile(graph, fallback='reference') runs such partitions in the "
                                "numpy reference)", op=bad[0].ops[0])
        #: the partitions run by the reference (fallback="reference")
        self.fallback_partitions = bad
        if bad:
            listed = [f"partition {p.id} ({quote(p.kind)}: ops {quote([op.id for op in p.ops])})"
                      for p in bad[:MAX_ITEMS]]   # (a bounded warning, as errors are: graphc.errors.quote)
            more = f"; ... ({len(bad) - MAX_ITEMS} more)" if len(bad) > MAX_ITEMS else ""
            for p in bad:
                verbose.emit(2, "fallback", verbose.graph_id(graph), p.id, "reference",
                             "no kernel for " + "+".join(op.kind for op in p.ops))
            warnings.warn(f"graphc cannot compile {len(bad)} of {len(self.partitions)} partitions; they run in "
                          f"the numpy reference: {'; '.join(listed)}{more}", FallbackWarning, stacklevel=3)
        chosen = any_layouts(graph, self.partitions)
        resolved: dict[int, LogicalTensor] = {}   # output tensors as compiled (their strides chosen)
        self.compiled = []
        # the kernels compile together once every partition is lowered (graphc.compiler.batch)
        with kernel_batch() as batch, CompileProgress(len(self.partitions)) as bar:
            for p in self.partitions:
                bar.label(p.kind)
                if p in bad or not all(t.is_complete for t in p.inputs):
                    self.compiled.append(ReferencePartition(p) if p in bad else None)
                    bar.step()
                    continue
                outs = [t if t.id not in chosen else
                        LogicalTensor(t.id, t.dtype, t.shape, chosen[t.id], "strided", t.property_type)
                        for t in p.outputs]
                cp = p.compile([resolved.get(t.id, t) for t in p.inputs], outs)
                resolved.update((t.id, t) for t in cp.outputs)
                self.compiled.append(cp)
                bar.step()
            batch.finish()
        self._at_run = BoundedCache()   # (partition id, input shapes) -> compiled, as many as kernels kept
        self._collectives = [collective_of(p.ops) for p in self.partitions]
        self._input_ports, self._output_ports = graph.input_ports, graph.output_ports  # (a topological sort each)
        #: (compiled partition, input ids) in order when no partition is a collective or compiles at run
        self._steps = None if any(c is None or k is not None for c, k in zip(self.compiled, self._collectives)) else \
            [(cp, [t.id for t in cp.inputs], cp.fast_run) for cp in self.compiled]
        self._view_sources = _view_sources(self.compiled, resolved, set(self._input_ports) | set(self._output_ports))
        #: ``run``'s road for calls without comm or outputs: the one partition's fast path when it is the whole
        #: graph (its inputs the graph's, its outputs the graph's in their order), else the steps in order
        #: (the class's function, not a method bound to self: a compiled graph in a reference cycle with
        #: itself would keep its constant outputs until the garbage collector runs)
        self._plain = None if self._steps is None else CompiledGraph._plain_run
        self._one = self._steps is not None and len(self._steps) == 1 and \
            set(self._steps[0][1]) == set(self._input_ports) and \
            [t.id for t in self.compiled[0].outputs] == list(self._output_ports)
        if self._one:
            self._plain = CompiledGraph._one_run
            self._gather = _gatherer(self._steps[0][1])
            self._fresh_run = self.compiled[0].executable.fresh_run
            self._gather_out = _gatherer(self._output_ports)
            self._fast_into = self.compiled[0].executable.fast_run

    def __reduce__(self):
        """A compiled graph pickles (and deep-copies) as its graph and compile
        options: loading compiles it again, from the kernel cache when it holds
        the kernels (no code generation); constant outputs kept and partitions
        compiled at run are not carried over."""
        return CompiledGraph, (self.graph, self.policy, self.fallback)

    def forget_constants(self) -> None:
        """Drop every output kept in the constant tensor cache: call it after changing
        the values of constant-property inputs in place (what was computed from them
        is computed again at the next run)."""
        for cp in self.compiled:
            if isinstance(cp, CompiledPartition):
                cp.forget_constants()

    @property
    def source(self) -> str:
        """The generated source of every kernel compiled so far (at compile)."""
        return "\n".join(cp.source or "" for cp in self.compiled if cp is not None)

    def _compiled_for(self, i: int, values: dict) -> CompiledPartition:
        """Partition i, compiled for the shapes of its input values if not yet known."""
        if self.compiled[i] is not None:
            return self.compiled[i]
        p = self.partitions[i]
        lts = [_resolved(t, values[t.id]) for t in p.inputs]
        return self._at_run.get((p.id, tuple(t.shape for t in lts)), lambda: p.compile(lts, p.outputs))

    def profile(self, inputs: dict, repeat: int = 10, comm: Any = None) -> Profile:
        """Where a run on ``inputs`` spends its time (graphc.compiler.profile.Profile):
        per partition, its fastest time over ``repeat`` runs, its share, the bytes
        it moves, and the fraction of the bandwidth (or FMA peak) it achieves;
        ``print(cg.profile(x))`` prints the table."""
        from .profile import profile
        if self._by_ranks is not None:
            return self._for_ranks(inputs).profile(inputs, repeat, comm)
        return profile(self, inputs, repeat, comm)

    def _for_ranks(self, inputs: dict) -> CompiledGraph:
        """The graph compiled for the ranks of the arrays given to its inputs of unknown rank."""
        if not isinstance(inputs, dict):
            raise InvalidArguments("inputs must be a dict {tensor id: array}", found=type(inputs).__name__)
        ranks = tuple((tid, len(getattr(inputs[tid], "shape", ()))) for tid in self.graph.unknown_rank_inputs()
                      if tid in inputs)
        return self._by_ranks.get(ranks, lambda: CompiledGraph(self.graph.with_input_ranks(dict(ranks)),
                                                               self.policy, self.fallback))

    def _one_run(self, inputs: dict) -> dict | None:
        """``_plain_run`` of a graph of one partition: its fast path's outputs (fresh
        arrays, graphc.compiler.executables.base) are the graph's."""
        try:
            arrays = self._gather(inputs)
        except KeyError:
            return None
        out = None if verbose.LEVEL > 0 else self._fresh_run(arrays)
        return self._plain_run(inputs) if out is None else out

    def _one_into(self, inputs: dict, outputs) -> dict | None:
        """``run`` of a graph of one partition into the caller's buffers for all
        its outputs, on the kernel's fast path (None: the general path checks and
        runs them)."""
        if not self._one or type(outputs) is not dict or len(outputs) != len(self._output_ports) \
                or verbose.LEVEL > 0:
            return None
        try:
            arrays, given = self._gather(inputs), self._gather_out(outputs)
        except KeyError:
            return None
        return self._fast_into(list(arrays), list(given))

    def _plain_run(self, inputs: dict) -> dict | None:
        """``run`` of a graph without collectives on exactly its inputs (None when an
        input id is missing: ``run``'s checks say which).  Each partition is tried on
        its executable's fast path first (graphc.compiler.executables.kernel)."""
        values = {}
        try:
            for tid in self._input_ports:
                v = inputs[tid]
                values[tid] = v if type(v) is np.ndarray else as_array(v, f"input tensor {tid}")
        except KeyError:
            return None
        timed = verbose.LEVEL > 0   # (then ``execute`` is the timed one: an exec line per run)
        for cp, ids, fast_run in self._steps:
            arrays = [values[t] for t in ids]
            out = None if timed else fast_run(arrays, None)
            values.update(cp.execute(arrays) if out is None else out)
        result = {}
        for tid in self._output_ports:
            v = values[tid]
            result[tid] = v if v.flags.writeable else v.copy()  # (constant cache arrays are read-only)
        return result

    def run(self, inputs: dict, comm: Any = None, outputs: dict | None = None) -> dict:
        """Run every partition in order; collectives on ``comm`` (see graphc.comm).
        ``outputs`` ({output id: array or torch tensor}, for some or all of the
        graph's outputs) are buffers the results are written into, in place (the
        kernel writes them directly where it can: graphc.compiler.compiled_partition);
        the result then holds those buffers, as numpy arrays over their memory.
        Any exception on this member of the group (a GraphcError, a bug, a
        MemoryError, a KeyboardInterrupt) is raised once the collectives still
        ahead have told the other members, which then raise a RuntimeFault instead
        of waiting for this one: this member raises that RuntimeFault too for a
        GraphcError, and the exception itself otherwise.  A member that does not
        answer at all is caught by the collectives' timeout (graphc.comm)."""
        if comm is None and self._plain is not None and type(inputs) is dict and len(inputs) == len(self._input_ports):
            plain = self._plain(self, inputs) if outputs is None else self._one_into(inputs, outputs)
            if plain is not None:
                return plain
        if self._by_ranks is not None:
            return self._for_ranks(inputs).run(inputs, comm, outputs)
        if not isinstance(inputs, dict):
            raise InvalidArguments("inputs must be a dict {tensor id: array}", found=type(inputs).__name__)
        check_comm(comm)
        failure = None
        missing = [tid for tid in self._input_ports if tid not in inputs]
        if len(inputs) + len(missing) > len(self._input_ports):   # (only then can an id be none of the graph's)
            ports = set(self._input_ports)
            unknown = next(tid for tid in inputs if tid not in ports)
            failure = InvalidArguments("the graph has no input tensor of this id", where=f"tensor {short(unknown)}",
                                       expected=f"the ids of the graph's inputs {self._input_ports[:MAX_ITEMS]}",
                                       found=short(unknown))
        elif missing:
            failure = InvalidArguments("missing input", where=f"tensor {missing[0]}",
                                       expected=repr(self.graph.tensors[missing[0]]))
        values = {tid: as_array(inputs[tid], f"input tensor {tid}") for tid in self._input_ports if tid in inputs}
        given = placed = None
        if outputs and failure is None:
            try:
                given = self._given_outputs(outputs)
                placed = self._placed(given)
            except GraphcError as e:   # (told to the other members at the collectives, as a bad input is)
                failure = e
        if failure is None and self._steps is not None:   # no collective: nothing to tell anyone
            for cp, ids, _ in self._steps:
                values.update(cp.execute([values[t] for t in ids], _into(cp, placed)))
            return self._results(values, given)
        for i, p in enumerate(self.partitions):
            collective = self._collectives[i]
            if failure is None:
                sent = exchanges()
                try:
                    cp = self._compiled_for(i, values)
                    values.update(cp.execute({t.id: values[t.id] for t in p.inputs}, _into(cp, placed), comm=comm))
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
        return self._results(values, given)

    def _given_outputs(self, outputs) -> dict:
        """The caller's output buffers ({id: numpy array over its memory}), checked
        to be of the graph's outputs (each partition checks dtype, shape, aliasing)."""
        if not isinstance(outputs, dict):
            raise InvalidArguments("outputs must be a dict {tensor id: array}", found=type(outputs).__name__)
        ports = set(self._output_ports)
        for tid in outputs:
            if tid not in ports:
                raise InvalidArguments("the graph has no output tensor of this id", where=f"tensor {short(tid)}",
                                       expected=f"the ids of the graph's outputs {self._output_ports[:MAX_ITEMS]}",
                                       found=short(tid))
        return {tid: as_array(a, f"output tensor {tid}") for tid, a in outputs.items()}

    def _placed(self, given: dict) -> dict:
        """``given``, and for a given output that a view partition makes of a tensor an
        earlier partition computes (neither an input nor an output of the graph): that
        tensor placed in the output's buffer, seen through the view backwards, when
        its compiled layout is that one (the view then moves nothing: no copy)."""
        placed = dict(given)
        for tid, u in given.items():
            spot = self._view_sources.get(tid)
            if spot is None or spot[1].id in placed or not layout_matches(u, spot[0].outputs[0]):
                continue
            view, src = spot
            strides = chain_strides(view.ops, [s // u.itemsize for s in u.strides], forward=False)
            if strides is not None and same_layout(src.shape, strides, src.strides):
                placed[src.id] = as_view(u, src.shape, src.strides)
        return placed

    def _results(self, values: dict, given: dict | None) -> dict:
        """The graph's outputs; a caller's buffer a partition did not write (an
        output that is an input of the graph, or of a partition that compiled at
        run) gets its value copied in.  (Arrays kept in the constant tensor cache
        are read-only: the caller gets copies.)"""
        for tid, u in (given or {}).items():
            v = values[tid]
            if v is not u:
                check_input_array(self.graph.tensors[tid], u, "output")[...] = v
                values[tid] = u
        return {tid: values[tid] if values[tid].flags.writeable else values[tid].copy() for tid in self._output_ports}


def _gatherer(ids: list):
    """``gather(inputs)``: the tuple of ``inputs[i]`` for each id (a KeyError for a missing one)."""
    if len(ids) == 1:
        only = ids[0]
        return lambda inputs: (inputs[only],)
    return operator.itemgetter(*ids)


def _into(cp: CompiledPartition, given: dict | None) -> dict | None:
    """The output buffers for ``cp``'s run: the caller's where given (the others
    allocated as ``cp`` lays them out), or None when the caller gave none of its
    outputs or one of its dims is known only at run (the caller's buffer then gets a copy)."""
    if not given or not any(lt.id in given for lt in cp.outputs) or not all(lt.is_complete for lt in cp.outputs):
        return None
    return {lt.id: given[lt.id] if lt.id in given else allocate(lt) for lt in cp.outputs}


def _view_sources(compiled: list, resolved: dict, ports: set) -> dict:
    """{output id of a view partition: (that compiled partition, its source tensor as
    compiled)} where the source is computed by another partition and is no port of
    the graph (so a caller's buffer for the view can hold it: CompiledGraph._placed)."""
    made = {lt.id for cp in compiled if cp is not None and not cp.is_view for lt in cp.outputs}
    found = {}
    for cp in compiled:
        if cp is None or not cp.is_view or len(cp.inputs) != 1:
            continue
        src = cp.inputs[0]
        if src.id in made and src.id not in ports and src.id in resolved:
            found[cp.outputs[0].id] = (cp, resolved[src.id])
    return found


def _tell(collective, comm, failure: BaseException):
    """Tell the other members at this collective that this one failed: they raise a
    RuntimeFault; so does this member for a GraphcError, while any other exception
    is re-raised as it is (its traceback intact)."""
    try:
        collective.fail(comm, failure)
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


def compile(graph: Graph, policy: str = "fusion", fallback: str | None = None) -> CompiledGraph:  # noqa: A001
    """Every partition of ``graph`` compiled.  A partition graphc cannot compile
    raises Unimplemented, unless ``fallback="reference"``: then such partitions
    run in the numpy reference, and a FallbackWarning lists them."""
    return CompiledGraph(graph, policy, fallback)


def run(graph: Graph, inputs: dict, comm: Any = None, policy: str = "fusion", fallback: str | None = None) -> dict:
    """``compile(graph, policy, fallback).run(inputs, comm)``."""
    return CompiledGraph(graph, policy, fallback).run(inputs, comm=comm)
