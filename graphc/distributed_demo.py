"""`graphc distributed-layernorm`: LayerNorm of a [tokens, hidden] tensor whose
hidden dim is split over the ranks of the MPI world (``mpiexec -n P graphc
distributed-layernorm``; a single process is a world of one).

Every rank runs specs/layernorm_distributed.json (LayerNormPreAllGather ->
AllGather -> LayerNormPostAllGather) on its hidden/P columns, with the gathered
stats width left unknown (-1) until run, and checks its columns of the result
against numpy's float64 LayerNorm of the full tensor, which every rank computes
from the same seeded input.

A rank that fails tells the others at the AllGather (graphc.comm.agree), so that
every rank ends with an error: a GraphcError prints one line and exits 2, any
other exception its traceback and exits 3.  A rank that stops answering makes
the others raise a CollectiveTimeout after $GRAPHC_COLLECTIVE_TIMEOUT seconds
(default 60), and the job then aborts at exit.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import traceback
from importlib.resources import files
from pathlib import Path

import numpy as np

from .comm import default_comm, rank_and_size
from .errors import GraphcError, InvalidArguments
from .jsonio import load_graph
from .tolerances import compare
from .types import DataType

KINDS = ("LayerNormPreAllGather", "AllGather", "LayerNormPostAllGather")
FAULTS = ("shape", "width")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokens", type=int, default=64, help="rows (default 64)")
    p.add_argument("--hidden", type=int, default=256, help="the normalized dim, split over the ranks (default 256)")
    p.add_argument("--dtype", default="f32", choices=("f32", "bf16", "f16"))
    p.add_argument("--spec", help="the Pre -> AllGather -> Post graph (default: the bundled one)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault-rank", type=int, help="(testing) this rank gets a bad input, see --fault")
    p.add_argument("--fault", choices=FAULTS, default="shape",
                   help="(testing) shape: one column too many; width: a gathered stats width for a bigger group")


def sharded_spec(spec: dict, tokens: int, width: int, dtype: str, gathered: int) -> dict:
    """The (valid) spec's three ops on this rank's [tokens, width] slice: src and dst
    [tokens, width], stats [tokens, 2], gathered stats [tokens, gathered] (-1: the
    group's, known at run), gamma and beta [width]; dense strides."""
    d = copy.deepcopy(spec)
    ops = {od["kind"]: od for od in d["graph"]}
    if sorted(ops) != sorted(KINDS):
        raise InvalidArguments("the spec must hold exactly the ops " + " -> ".join(KINDS), found=sorted(ops))
    pre, gather, post = (ops[k] for k in KINDS)
    shapes = {pre["inputs"][0]["id"]: ([tokens, width], dtype),
              pre["outputs"][0]["id"]: ([tokens, 2], "f32"),
              gather["outputs"][0]["id"]: ([tokens, gathered], "f32"),
              post["outputs"][0]["id"]: ([tokens, width], dtype)}
    shapes.update({t["id"]: ([width], dtype) for t in post["inputs"][2:]})
    for od in d["graph"]:
        for t in od["inputs"] + od["outputs"]:
            if t["id"] not in shapes:
                raise InvalidArguments("the spec has a tensor outside the Pre -> AllGather -> Post chain",
                                       found=t["id"])
            t["shape"], t["dtype"] = shapes[t["id"]]
            t["stride"] = []
    return d


def layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """float64 LayerNorm over the last dim."""
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def say(line: str, stream=None) -> None:
    """One whole line in one write, so that mpiexec does not splice ranks' lines."""
    stream = stream or sys.stdout
    stream.write(line + "\n")
    stream.flush()


def main(args) -> int:
    comm = default_comm()
    rank, size = rank_and_size(comm)
    tag = f"rank {rank}/{size}"
    try:
        return _check(args, comm, rank, size, tag)
    except GraphcError as e:
        say(f"{tag}: graphc: {type(e).__name__}: {e}", sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a bug: the other ranks have been told (see CompiledGraph.run)
        trace = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
        say(f"{tag}: internal error: {type(e).__name__}: {e}\n{trace}", sys.stderr)
        return 3


def _check(args, comm, rank: int, size: int, tag: str) -> int:
    if args.tokens < 1 or args.hidden < 1 or args.hidden % size:
        raise InvalidArguments("--tokens and --hidden must be positive and --hidden a multiple of the ranks",
                               expected=f"--hidden a multiple of {size}", found=f"{args.tokens} x {args.hidden}")
    width = args.hidden // size
    try:
        text = (files("graphc.specs") / "layernorm_distributed.json" if args.spec is None else Path(args.spec)).read_text()
        spec = json.loads(text)
    except (OSError, ValueError) as e:
        raise InvalidArguments("cannot read the spec", found=f"{args.spec or 'the bundled spec'}: {e}") from None
    load_graph(spec)  # a valid graph before its shapes change
    faulty = rank == args.fault_rank
    gathered = 2 * (size + 1) if faulty and args.fault == "width" else -1
    graph = load_graph(sharded_spec(spec, args.tokens, width, args.dtype, gathered))
    pre, post = (next(op for op in graph.ops.values() if op.kind == k) for k in (KINDS[0], KINDS[2]))

    # the same full tensor on every rank, rounded to the dtype once
    dt = DataType.parse(args.dtype)
    rng = np.random.default_rng(args.seed)
    x = rng.standard_normal((args.tokens, args.hidden)).astype(dt.np)
    gamma = (1 + 0.5 * rng.standard_normal(args.hidden)).astype(dt.np)
    beta = (0.5 * rng.standard_normal(args.hidden)).astype(dt.np)
    cols = slice(rank * width, (rank + 1) * width)
    part = np.ascontiguousarray(x[:, cols])
    if faulty and args.fault == "shape":
        part = np.concatenate([part, part[:, :1]], axis=1)  # one column too many
    inputs = {pre.inputs[0].id: part}
    if post.input("gamma") is None:
        gamma, beta = np.ones_like(gamma), np.zeros_like(beta)
    else:
        inputs.update({post.input("gamma").id: gamma[cols].copy(), post.input("beta").id: beta[cols].copy()})
    from .compiler import run
    y = run(graph, inputs, comm=comm)[post.outputs[0].id]

    expected = layernorm(*(a.astype(np.float64) for a in (x, gamma, beta)), post.attr("epsilon"))[:, cols]
    ok, scaled = compare(y, expected, dt)
    err = float(np.max(np.abs(y.astype(np.float64) - expected)))
    say(f"{tag}: LayerNorm [{args.tokens}, {args.hidden}] {args.dtype}, columns {cols.start}:{cols.stop}: "
        f"max error {err:.3g} (scaled {scaled:.3g}) {'PASSED' if ok else 'FAILED'}")
    return 0 if ok else 1
