"""Seed ops: graphc's compiled kernels against torch eager and numpy doing the same work.

    python benchmarks/bench_seed_ops.py [--repeat N] [--threads T] [--only TEXT]

Sizes are the seed's: activations 2x1024x4096 (SwiGlu's src 2x1024x8192), an
embedding of 2x1024 tokens x 4096 dims over 3200 rows, LayerNorm shards of 4096
columns gathered from P=4 ranks.  Each row times one op: the fastest of
--repeat runs after two warm-up runs (the least disturbed by other processes),
torch and graphc taking turns run by run, numpy afterwards.  torch/gc and
numpy/gc above 1 mean graphc is faster.  graphc's time is CompiledGraph.run:
the kernel plus allocating the outputs (as torch and numpy allocate theirs).

Thread pools: numba's and torch's thread pools starve each other in one process
when idle workers of one keep spinning while the other works.  This script sets
NUMBA_THREADING_LAYER=omp and OMP_WAIT_POLICY=PASSIVE before numba and torch are
imported (numba's OpenMP layer links its own libgomp next to torch's, and
PASSIVE makes the idle workers of both sleep at once), and gives both pools the
same thread count: torch.set_num_threads and numba.set_num_threads (--threads,
default 2).

What "the same work" is for torch:
  AddBackward        dy.sum_to_size(src.shape) per required output; a result that
                     is dy itself is cloned, as graphc writes every output to its
                     own buffer.
  Embedding          torch.nn.functional.embedding (numpy: weight[indices]).
  EmbeddingBackward  aten embedding_dense_backward on diff_dst converted to diff_weight's dtype.
  SwiGlu             silu(A) * B on the chunks of src.
  SwiGluGrad         the explicit formula (sigmoid, products) and a cat of dA, dB.
  LayerNormPre       var_mean over the last dim in f32, stacked to [..., 2] (mean, M2).
  LayerNormPost      Chan's merge of the stats, then (x - mean) * rsqrt(var + eps) * gamma + beta.
  AllGather          (group of one) a clone; graphc runs it through the
                     collective runner, not a kernel.
numpy works on float32 copies of bf16 inputs made beforehand (numpy has no bf16
math), in float32, and rounds its results to the output dtype.

Memory bandwidth: "kernel" times the compiled kernel alone
(CompiledPartition.execute into output arrays allocated once), "GB/s" is the
least traffic the op needs (every input it reads and every output it writes,
once) over that time, and "triad" is the share of a numba parallel triad
a = b + s * c moving the same number of bytes (three float32 arrays of a third
each): the machine's streaming limit, timed in the same rounds.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_THREADING_LAYER", "omp")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import numba  # noqa: E402
import torch  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import graphc  # noqa: E402
from graphc.builder import single_op_graph  # noqa: E402
from graphc.types import DataType  # noqa: E402

B, S, H = 2, 1024, 4096
ROWS = 3200
P = 4
EPS = 1e-5


def timeit(fns, repeat):
    """The fastest of ``repeat`` runs of each of ``fns`` after two warm-up runs.  The
    functions take turns, so that load from other processes hits them alike, and
    each round starts with the next one, so that none always runs right after
    the same other (a function just after torch finds its threads still winding
    down)."""
    for fn in fns:
        fn()
        fn()
    best = [float("inf")] * len(fns)
    for r in range(repeat):
        for i in range(len(fns)):
            k = (r + i) % len(fns)
            t0 = time.perf_counter()
            fns[k]()
            best[k] = min(best[k], time.perf_counter() - t0)
    return best


def rand(rng, shape, dt):
    return rng.uniform(-4, 4, size=shape).astype(np.float32).astype(DataType(dt).np)


TORCH_DTYPE = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def to_torch(a):
    if a.dtype == DataType.bf16.np:
        return torch.from_numpy(a.view(np.uint16).view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def f32(a):
    return a.astype(np.float32)


class Compiled:
    """One op compiled: ``run`` allocates its outputs as a user's CompiledGraph.run
    does, ``kernel`` writes into outputs allocated once; ``nbytes`` is the least
    traffic: the inputs the op reads (``reads``: their positions, default all)
    and every output, each once."""

    def __init__(self, kind, ins, outs, attrs, arrays, reads=None):
        g = single_op_graph(kind, ins, outs, attrs)
        cg = graphc.compile(g)
        feed = dict(zip(g.input_ports, arrays))
        (cp,) = cg.compiled
        given = cg.run(feed)
        self.run = lambda: cg.run(feed)
        self.kernel = lambda: cp.execute(feed, outputs=given)
        reads = range(len(arrays)) if reads is None else reads
        self.nbytes = sum(arrays[i].nbytes for i in reads) + sum(a.nbytes for a in given.values())


@numba.njit(parallel=True, nogil=True)
def _triad(a, b, c, s):
    for k in numba.prange(a.shape[0]):
        a[k] = b[k] + s * c[k]


def triad(nbytes):
    """A triad over three float32 arrays moving ``nbytes`` in all."""
    n = max(1, nbytes // 12)
    a, b, c = np.zeros(n, np.float32), np.ones(n, np.float32), np.full(n, 2, np.float32)
    s = np.float32(0.5)
    return lambda: _triad(a, b, c, s)


# ------------------------------------------------------------------------ cases
def add_bw(rng, dt, a_shape, b_shape):
    dy = rand(rng, (B, S, H), dt)
    a, b = np.zeros(a_shape, dy.dtype), np.zeros(b_shape, dy.dtype)
    run = Compiled("AddBackward", [(dt, dy.shape), (dt, a_shape), (dt, b_shape)],
                   [(dt, [-1] * len(a_shape)), (dt, [-1] * len(b_shape))], {}, [dy, a, b], reads=[0])
    tdy = to_torch(dy)

    def torch_fn():
        out = []
        for shape in (a_shape, b_shape):
            g = tdy.sum_to_size(shape)
            out.append(g.clone() if g is tdy or g.data_ptr() == tdy.data_ptr() else g)
        return out
    ndy = f32(dy)

    def numpy_fn():
        out = []
        for shape in (a_shape, b_shape):
            lead = ndy.ndim - len(shape)
            axes = tuple(range(lead)) + tuple(lead + i for i, d in enumerate(shape)
                                              if d == 1 and ndy.shape[lead + i] != 1)
            out.append((ndy.sum(axis=axes).reshape(shape) if axes else ndy.copy()).astype(dy.dtype))
        return out
    return run, torch_fn, numpy_fn


def embedding(rng, dt):
    idx = rng.integers(0, ROWS, size=(B, S)).astype(np.int32)
    w = rand(rng, (ROWS, H), dt)
    run = Compiled("Embedding", [("s32", idx.shape), (dt, w.shape)], [(dt, [-1, -1, -1])], {}, [idx, w], reads=[0])
    run.nbytes += np.unique(idx).size * H * w.itemsize   # (the rows read, each once)
    tidx, tw = torch.from_numpy(idx).long(), to_torch(w)
    return run, lambda: torch.nn.functional.embedding(tidx, tw), lambda: w[idx]


def embedding_bw(rng, dt, out_dt):
    idx = rng.integers(0, ROWS, size=(B, S)).astype(np.int32)
    dy = rand(rng, (B, S, H), dt)
    w = np.zeros((ROWS, H), dy.dtype)
    run = Compiled("EmbeddingBackward", [("s32", idx.shape), (dt, w.shape), (dt, dy.shape)], [(out_dt, [-1, -1])],
                   {"dtype": out_dt}, [idx, w, dy], reads=[0, 2])
    tidx, tdy = torch.from_numpy(idx).long(), to_torch(dy)

    def torch_fn():
        return torch.ops.aten.embedding_dense_backward(tdy.to(TORCH_DTYPE[out_dt]), tidx, ROWS, -1, False)
    ndy = f32(dy).reshape(-1, H)
    nidx = idx.reshape(-1)

    def numpy_fn():
        dw = np.zeros((ROWS, H), np.float32)
        np.add.at(dw, nidx, ndy)
        return dw.astype(DataType(out_dt).np)
    return run, torch_fn, numpy_fn


def swiglu(rng, dt):
    x = rand(rng, (B, S, 2 * H), dt)
    run = Compiled("SwiGlu", [(dt, x.shape)], [(dt, [-1, -1, -1])], {"dim": -1}, [x])
    tx = to_torch(x)

    def torch_fn():
        a, b = tx.chunk(2, dim=-1)
        return torch.nn.functional.silu(a) * b
    nx = f32(x)

    def numpy_fn():
        a, b = np.split(nx, 2, axis=-1)
        return (a / (1 + np.exp(-a)) * b).astype(x.dtype)
    return run, torch_fn, numpy_fn


def swiglu_grad(rng, dt):
    x = rand(rng, (B, S, 2 * H), dt)
    dy = rand(rng, (B, S, H), dt)
    run = Compiled("SwiGluGrad", [(dt, dy.shape), (dt, x.shape)], [(dt, [-1, -1, -1])], {"dim": -1}, [dy, x])
    tx, tdy = to_torch(x), to_torch(dy)

    def torch_fn():
        a, b = tx.chunk(2, dim=-1)
        s = torch.sigmoid(a)
        return torch.cat([tdy * b * s * (1 + a * (1 - s)), tdy * a * s], dim=-1)
    nx, ndy = f32(x), f32(dy)

    def numpy_fn():
        a, b = np.split(nx, 2, axis=-1)
        s = 1 / (1 + np.exp(-a))
        return np.concatenate([ndy * b * s * (1 + a * (1 - s)), ndy * a * s], axis=-1).astype(x.dtype)
    return run, torch_fn, numpy_fn


def ln_pre(rng, dt):
    x = rand(rng, (B, S, H), dt)
    run = Compiled("LayerNormPreAllGather", [(dt, x.shape)], [("f32", [-1, -1, -1])], {}, [x])
    tx = to_torch(x)

    def torch_fn():
        var, mean = torch.var_mean(tx.float(), dim=-1, correction=0)
        return torch.stack([mean, var * H], dim=-1)
    nx = f32(x)

    def numpy_fn():
        mean = nx.mean(axis=-1, keepdims=True)
        return np.concatenate([mean, ((nx - mean) ** 2).sum(axis=-1, keepdims=True)], axis=-1)
    return run, torch_fn, numpy_fn


def ln_post(rng, dt):
    x = rand(rng, (B, S, H), dt)
    stats = np.empty((B, S, 2 * P), np.float32)
    stats[..., 0::2] = rng.uniform(-1, 1, size=(B, S, P))
    stats[..., 1::2] = rng.uniform(0.5, 2, size=(B, S, P)) * H
    gamma, beta = rand(rng, (H,), "f32"), rand(rng, (H,), "f32")
    run = Compiled("LayerNormPostAllGather", [(dt, x.shape), ("f32", stats.shape), ("f32", [H]), ("f32", [H])],
                   [(dt, [-1, -1, -1])], {"epsilon": EPS}, [x, stats, gamma, beta])
    tx, ts, tg, tb = map(to_torch, (x, stats, gamma, beta))

    def torch_fn():
        means, m2 = ts[..., 0::2], ts[..., 1::2]
        mean = means.mean(dim=-1, keepdim=True)
        var = (m2.sum(dim=-1, keepdim=True) + H * ((means - mean) ** 2).sum(dim=-1, keepdim=True)) / (P * H)
        return ((tx - mean) * torch.rsqrt(var + EPS) * tg + tb).to(tx.dtype)
    nx = f32(x)

    def numpy_fn():
        means, m2 = stats[..., 0::2], stats[..., 1::2]
        mean = means.mean(axis=-1, keepdims=True)
        var = (m2.sum(axis=-1, keepdims=True) + H * ((means - mean) ** 2).sum(axis=-1, keepdims=True)) / (P * H)
        return ((nx - mean) / np.sqrt(var + EPS) * gamma + beta).astype(x.dtype)
    return run, torch_fn, numpy_fn


def all_gather(rng, dt):
    x = rand(rng, (B, S, H), dt)
    run = Compiled("AllGather", [(dt, x.shape)], [(dt, list(x.shape))], {"axis": -1}, [x])
    tx = to_torch(x)
    return run, tx.clone, x.copy


CASES = [
    ("AddBackward 2x1024x4096 -> same, [4096]", "f32", lambda r: add_bw(r, "f32", (B, S, H), (H,))),
    ("AddBackward 2x1024x4096 -> same, [4096]", "bf16", lambda r: add_bw(r, "bf16", (B, S, H), (H,))),
    ("AddBackward 2x1024x4096 -> [1,1024,4096], [2,1,4096]", "f32",
     lambda r: add_bw(r, "f32", (1, S, H), (B, 1, H))),
    ("AddBackward 2x1024x4096 -> [1,1024,4096], [2,1,4096]", "bf16",
     lambda r: add_bw(r, "bf16", (1, S, H), (B, 1, H))),
    ("AddBackward 2x1024x4096 -> [2,1024,1], [4096]", "f32", lambda r: add_bw(r, "f32", (B, S, 1), (H,))),
    ("Embedding 2x1024 tok x 4096 / 3200 rows", "f32", lambda r: embedding(r, "f32")),
    ("Embedding 2x1024 tok x 4096 / 3200 rows", "bf16", lambda r: embedding(r, "bf16")),
    ("EmbeddingBackward 2x1024 tok x 4096 / 3200 rows -> f32", "f32", lambda r: embedding_bw(r, "f32", "f32")),
    ("EmbeddingBackward 2x1024 tok x 4096 / 3200 rows -> f32", "bf16", lambda r: embedding_bw(r, "bf16", "f32")),
    ("EmbeddingBackward 2x1024 tok x 4096 / 3200 rows -> bf16", "bf16", lambda r: embedding_bw(r, "bf16", "bf16")),
    ("SwiGlu 2x1024x8192 dim=-1", "f32", lambda r: swiglu(r, "f32")),
    ("SwiGlu 2x1024x8192 dim=-1", "bf16", lambda r: swiglu(r, "bf16")),
    ("SwiGluGrad 2x1024x8192 dim=-1", "f32", lambda r: swiglu_grad(r, "f32")),
    ("SwiGluGrad 2x1024x8192 dim=-1", "bf16", lambda r: swiglu_grad(r, "bf16")),
    ("LayerNormPreAllGather 2x1024x4096", "f32", lambda r: ln_pre(r, "f32")),
    ("LayerNormPreAllGather 2x1024x4096", "bf16", lambda r: ln_pre(r, "bf16")),
    ("LayerNormPostAllGather 2x1024x4096 P=4", "f32", lambda r: ln_post(r, "f32")),
    ("LayerNormPostAllGather 2x1024x4096 P=4", "bf16", lambda r: ln_post(r, "bf16")),
    ("AllGather 2x1024x4096 (group of 1)", "f32", lambda r: all_gather(r, "f32")),
]


def run_cases(cases, argv=None, description="", width=56):
    """Parse the command line, then time and print every case (name, dtype, make)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="", help="run the cases whose name contains this text")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    rng = np.random.default_rng(0)
    print(f"threads: torch {torch.get_num_threads()}, numba {numba.get_num_threads()} "
          f"({numba.config.THREADING_LAYER} layer); best of {args.repeat} runs, ms")
    head = (f"{'op':<{width}} {'dtype':<5} {'graphc':>8} {'torch':>8} {'numpy':>8} {'torch/gc':>8} {'numpy/gc':>8}"
            f" {'kernel':>8} {'GB/s':>6} {'triad':>6}")
    print(head)
    print("-" * len(head))
    for name, dt, make in cases:
        if args.only not in name:
            continue
        gc, torch_fn, numpy_fn = make(rng)
        t_torch, t_gc, t_kernel, t_triad = timeit([torch_fn, gc.run, gc.kernel, triad(gc.nbytes)], args.repeat)
        (t_np,) = timeit([numpy_fn], max(3, args.repeat // 3))
        print(f"{name:<{width}} {dt:<5} {t_gc * 1e3:8.2f} {t_torch * 1e3:8.2f} {t_np * 1e3:8.2f} "
              f"{t_torch / t_gc:8.2f} {t_np / t_gc:8.2f} {t_kernel * 1e3:8.2f} {gc.nbytes / t_kernel / 1e9:6.1f} "
              f"{t_triad / t_kernel:6.0%}", flush=True)


def main(argv=None):
    run_cases(CASES, argv, __doc__.splitlines()[0])


if __name__ == "__main__":
    main()
