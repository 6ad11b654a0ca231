"""The distributed LayerNorm's training graph on one member of a group, against
torch.autograd of the whole LayerNorm: shared by the threads test and the
script each MPI rank runs (tests/distributed/grad_rank.py)."""
from __future__ import annotations

import json

import numpy as np

import graphc
from graphc.distributed_demo import sharded_spec
from graphc.tolerances import ORACLE

from .compare import assert_close
from .graphs import SPECS
from .torch_conv import data, n64, t64

EPS = 1e-5   # the bundled spec's epsilon


def whole_case(dtype, tokens, hidden, seed=0) -> dict:
    """The full-width arrays every member cuts its columns from (x, gamma, beta
    and the seed dy, stored as ``dtype``) and torch.autograd's float64 forward
    and gradients of F.layer_norm over the whole hidden dim."""
    import torch
    rng = np.random.default_rng(seed)
    case = {"x": data(rng, (tokens, hidden), dtype), "gamma": data(rng, (hidden,), dtype),
            "beta": data(rng, (hidden,), dtype), "dy": data(rng, (tokens, hidden), dtype)}
    x, gamma, beta = (t64(case[k], grad=True) for k in ("x", "gamma", "beta"))
    y = torch.nn.functional.layer_norm(x, (hidden,), gamma, beta, EPS)
    (y * t64(case["dy"])).sum().backward()
    case.update(y_want=n64(y), dx_want=n64(x.grad), dgamma_want=n64(gamma.grad), dbeta_want=n64(beta.grad))
    return case


def member_gradients(comm, rank, size, dtype, case) -> dict:
    """This member's columns of y and of the gradients of x, gamma and beta, from
    graphc.grad of the bundled distributed LayerNorm (Pre -> AllGather -> Post)
    on its [tokens, hidden / size] slice, run on ``comm``."""
    tokens, hidden = case["x"].shape
    width = hidden // size
    spec = json.loads((SPECS / "layernorm_distributed.json").read_text())
    g = graphc.load_graph(sharded_spec(spec, tokens, width, dtype, 2 * size))
    x_id, gamma_id, beta_id = g.input_ports
    (y_id,) = g.output_ports
    tr = graphc.grad(g, [x_id, gamma_id, beta_id])
    cols = slice(rank * width, (rank + 1) * width)
    feed = {x_id: case["x"][:, cols], gamma_id: case["gamma"][cols], beta_id: case["beta"][cols],
            tr.grad_in(y_id): case["dy"][:, cols]}
    got = graphc.compile(tr.graph).run({k: np.ascontiguousarray(v) for k, v in feed.items()}, comm=comm)
    return {"y": got[y_id], "dx": got[tr.grad_out(x_id)], "dgamma": got[tr.grad_out(gamma_id)],
            "dbeta": got[tr.grad_out(beta_id)], "kinds": {op.kind for op in tr.graph.ops.values()}}


def check_member(got, rank, size, dtype, case) -> None:
    """This member's columns against torch's, at the dtype's ORACLE tolerance."""
    width = case["x"].shape[1] // size
    cols = slice(rank * width, (rank + 1) * width)
    assert_close(got["y"], case["y_want"][:, cols], dtype, ORACLE, what=f"rank {rank}: y")
    assert_close(got["dx"], case["dx_want"][:, cols], dtype, ORACLE, what=f"rank {rank}: dx")
    assert_close(got["dgamma"], case["dgamma_want"][cols], dtype, ORACLE, what=f"rank {rank}: dgamma")
    assert_close(got["dbeta"], case["dbeta_want"][cols], dtype, ORACLE, what=f"rank {rank}: dbeta")
