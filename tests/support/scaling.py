"""Graphs of n ops for scaling tests (chains and fan-outs, as JSON documents),
and counting the work a step does: tests of linear growth count Python calls,
never time."""
from __future__ import annotations

import gc
import sys

#: the kinds a chain cycles through (binary kinds read an outside operand)
CHAIN_KINDS = ("MatMul", "Add", "ReLU", "SoftMax", "Multiply", "Sigmoid", "Abs", "Tanh")
#: the kinds the readers of a fan-out cycle through
FANOUT_KINDS = ("Add", "ReLU", "Sigmoid", "Multiply", "Abs", "MatMul")
BINARY = ("MatMul", "Add", "Multiply")


def _lt(tid: int) -> dict:
    return {"id": tid, "dtype": "f32", "shape": [4, 4], "stride": [], "layout_type": "strided",
            "property_type": "undef"}


def _op(oid: int, kind: str, inputs: list, out: int) -> dict:
    attrs = {"axis": {"type": "s64", "value": -1}} if kind == "SoftMax" else {}
    return {"id": oid, "name": f"{kind.lower()}_{oid}", "kind": kind, "attrs": attrs,
            "inputs": [_lt(t) for t in inputs], "outputs": [_lt(out)]}


def chain_json(n: int, kinds=CHAIN_KINDS) -> dict:
    """Op i reads tensor 2i (and 2i + 1 from outside for binary kinds), writes 2i + 2."""
    ops = [_op(i, kinds[i % len(kinds)], [2 * i, 2 * i + 1] if kinds[i % len(kinds)] in BINARY else [2 * i],
               2 * i + 2) for i in range(n)]
    return {"version": "3.0.0", "output_ports": [2 * n], "graph": ops}


def fanout_json(n: int, kinds=FANOUT_KINDS, then=()) -> dict:
    """ReLU(0) -> 1 read by ops 1..n-1 (kinds cycling; binary kinds read 2i + 1 from
    outside) writing 2i + 2; ``then`` (binary kinds): each reader's output goes on
    through ops of these kinds, one after the other, each with an outside operand."""
    ops = [_op(0, "ReLU", [0], 1)]
    outs = []
    for i in range(1, n):
        kind = kinds[i % len(kinds)]
        ops.append(_op(i, kind, [1, 2 * i + 1] if kind in BINARY else [1], 2 * i + 2))
        last = 2 * i + 2
        for k, after in enumerate(then, 1):   # ids past those of the fan-out: (4k + 1) n + i, (4k + 3) n + i
            ops.append(_op(2 * k * n + i, after, [last, (4 * k + 1) * n + i], (4 * k + 3) * n + i))
            last = (4 * k + 3) * n + i
        outs.append(last)
    return {"version": "3.0.0", "output_ports": outs, "graph": ops}


def calls(f, *args):
    """(the number of Python and C function calls ``f(*args)`` makes, its result):
    a measure of work that does not depend on the machine or its load.  The
    garbage collector is off meanwhile: finalizers of objects other tests left
    would count too."""
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event in ("call", "c_call"):
            count += 1
    was_on = gc.isenabled()
    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        result = f(*args)
    finally:
        sys.setprofile(None)
        if was_on:
            gc.enable()
    return count, result
