"""Row-wise ops along the last dim: graphc's kernels against torch eager and numpy.

    python benchmarks/bench_norm_softmax.py [--repeat N] [--threads T] [--only TEXT]

2048 rows of 4096 f32 (and bf16): LayerNorm (gamma, beta), RMSNorm (gamma),
SoftMax and LogSoftmax.  Columns, timing, thread pools and the triad are those
of bench_seed_ops.py (whose helpers this script uses): "graphc" is
CompiledGraph.run, "kernel" the kernel alone into outputs allocated once, "GB/s"
the least traffic over the kernel's time, "triad" its share of a numba triad
moving the same bytes.  torch's bf16 rows run torch's own bf16 kernels.
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_seed_ops import Compiled, f32, np, rand, run_cases, to_torch, torch  # noqa: E402

ROWS, H = 2048, 4096
EPS = 1e-5


def layernorm(rng, dt):
    x = rand(rng, (ROWS, H), dt)
    g, b = rand(rng, (H,), "f32"), rand(rng, (H,), "f32")
    gc = Compiled("LayerNorm", [(dt, x.shape), ("f32", [H]), ("f32", [H])], [(dt, [-1, -1])],
                  {"keep_stats": False, "epsilon": EPS}, [x, g, b])
    tx, tg, tb = to_torch(x), torch.from_numpy(g), torch.from_numpy(b)
    if dt != "f32":
        tg, tb = tg.to(tx.dtype), tb.to(tx.dtype)
    nx = f32(x)

    def numpy_fn():
        m = nx.mean(axis=-1, keepdims=True)
        v = nx.var(axis=-1, keepdims=True)
        return ((nx - m) / np.sqrt(v + EPS) * g + b).astype(x.dtype)
    return gc, lambda: torch.nn.functional.layer_norm(tx, (H,), tg, tb, EPS), numpy_fn


def rmsnorm(rng, dt):
    x = rand(rng, (ROWS, H), dt)
    g = rand(rng, (H,), "f32")
    gc = Compiled("RMSNorm", [(dt, x.shape), ("f32", [H])], [(dt, [-1, -1])], {"epsilon": EPS}, [x, g])
    tx, tg = to_torch(x), torch.from_numpy(g)
    if dt != "f32":
        tg = tg.to(tx.dtype)
    nx = f32(x)

    def numpy_fn():
        return (nx / np.sqrt((nx * nx).mean(axis=-1, keepdims=True) + EPS) * g).astype(x.dtype)
    return gc, lambda: torch.nn.functional.rms_norm(tx, (H,), tg, EPS), numpy_fn


def softmax(rng, dt, log=False):
    x = rand(rng, (ROWS, H), dt)
    kind = "LogSoftmax" if log else "SoftMax"
    gc = Compiled(kind, [(dt, x.shape)], [(dt, [-1, -1])], {"axis": -1}, [x])
    tx = to_torch(x)
    nx = f32(x)

    def numpy_fn():
        z = nx - nx.max(axis=-1, keepdims=True)
        e = np.exp(z)
        s = e.sum(axis=-1, keepdims=True)
        return (z - np.log(s) if log else e / s).astype(x.dtype)
    return gc, (lambda: torch.log_softmax(tx, -1)) if log else (lambda: torch.softmax(tx, -1)), numpy_fn


CASES = [
    (f"LayerNorm {ROWS}x{H}", "f32", lambda r: layernorm(r, "f32")),
    (f"LayerNorm {ROWS}x{H}", "bf16", lambda r: layernorm(r, "bf16")),
    (f"RMSNorm {ROWS}x{H}", "f32", lambda r: rmsnorm(r, "f32")),
    (f"SoftMax {ROWS}x{H} axis=-1", "f32", lambda r: softmax(r, "f32")),
    (f"SoftMax {ROWS}x{H} axis=-1", "bf16", lambda r: softmax(r, "bf16")),
    (f"LogSoftmax {ROWS}x{H} axis=-1", "f32", lambda r: softmax(r, "f32", log=True)),
]


def main(argv=None):
    run_cases(CASES, argv, __doc__.splitlines()[0], width=32)


if __name__ == "__main__":
    main()
