"""The distributed LayerNorm (LayerNormPreAllGather, AllGather, LayerNormPostAllGather)
against PyTorch's LayerNorm of the whole rows."""
import ml_dtypes
import numpy as np
import pytest

from graphc.ops.distributed import merge_stats
from graphc.tolerances import ORACLE
from support import assert_close, data, run_single, to_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
BF16 = np.dtype(ml_dtypes.bfloat16)


# ------------------------------------------------------------ distributed LayerNorm
def distributed_layer_norm(x, shards, gamma=None, beta=None, eps=1e-5):
    """Pre per shard of the width, stats concatenated in shard order (the
    AllGather), Post per shard, shards concatenated."""
    xs = np.split(x, shards, axis=-1)
    stats = np.concatenate([run_single("LayerNormPreAllGather", [s], [("f32", [-1] * s.ndim)])[0] for s in xs],
                           axis=-1)
    dt = "bf16" if x.dtype == BF16 else "f32"
    outs = []
    for i, s in enumerate(xs):
        affine = [] if gamma is None else [np.split(gamma, shards)[i], np.split(beta, shards)[i]]
        outs += run_single("LayerNormPostAllGather", [s, stats, *affine], [(dt, [-1] * s.ndim)], {"epsilon": eps})
    return np.concatenate(outs, axis=-1), stats


@pytest.mark.parametrize("shards", [1, 2, 4])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_post_all_gather(shards, affine):
    rng = np.random.default_rng(7)
    x = data(rng, [3, 5, 32]) * 3 + 1
    gamma, beta = (data(rng, [32]), data(rng, [32])) if affine else (None, None)
    y, _ = distributed_layer_norm(x, shards, gamma, beta)
    expected = TF.layer_norm(to_torch(x), [32], None if gamma is None else to_torch(gamma),
                             None if beta is None else to_torch(beta), eps=1e-5)
    assert_close(y, expected.numpy(), "f32", ORACLE)


def test_layer_norm_post_all_gather_bf16():
    rng = np.random.default_rng(8)
    x = data(rng, [4, 16], BF16)
    gamma, beta = data(rng, [16]), data(rng, [16])
    y, _ = distributed_layer_norm(x, 2, gamma, beta)
    expected = TF.layer_norm(torch.from_numpy(x.astype(np.float32)), [16], to_torch(gamma), to_torch(beta), eps=1e-5)
    assert_close(y.astype(np.float32), expected.numpy(), "bf16", ORACLE)


def test_distributed_variance_is_stable_for_large_means():
    """Rows with mean 1e4 and std 1 in f32: the merged (mean, M2) stats keep the
    variance to 1e-3, where the sum / sum of squares form loses it."""
    rng = np.random.default_rng(9)
    shards, width = 4, 64
    x = (1e4 + rng.standard_normal((8, shards * width))).astype(np.float32)
    x64 = x.astype(np.float64)
    y, stats = distributed_layer_norm(x, shards)
    mean, var = merge_stats(stats.astype(np.float64), width)
    np.testing.assert_allclose(var, x64.var(axis=-1), rtol=1e-3)
    # the normalized output: the f32 mean of values ~1e4 is off by up to half an ulp (5e-4)
    ref = (x64 - x64.mean(axis=-1, keepdims=True)) / np.sqrt(x64.var(axis=-1, keepdims=True) + 1e-5)
    assert np.max(np.abs(y - ref)) < 2e-3
    # the naive form with f32 partial sums: its variance is far off
    n = shards * width
    s1 = x64.sum(axis=-1).astype(np.float32).astype(np.float64)
    s2 = (x64 ** 2).sum(axis=-1).astype(np.float32).astype(np.float64)
    naive = s2 / n - (s1 / n) ** 2
    assert np.max(np.abs(naive / x64.var(axis=-1) - 1)) > 1e-1


def test_merge_stats_matches_the_whole_row():
    rng = np.random.default_rng(10)
    x = rng.standard_normal((5, 24)) * 2 + 3
    parts = np.split(x, 3, axis=-1)
    stats = np.concatenate([np.stack([p.mean(-1), ((p - p.mean(-1, keepdims=True)) ** 2).sum(-1)], -1)
                            for p in parts], -1)
    mean, var = merge_stats(stats, 8)
    np.testing.assert_allclose(mean, x.mean(-1), rtol=1e-12)
    np.testing.assert_allclose(var, x.var(-1), rtol=1e-12)
