"""Generated kernels of the distributed LayerNorm ops (LayerNormPreAllGather, AllGather,
LayerNormPostAllGather) against graphc's numpy reference with the COMPILED tolerances:
f32/bf16/f16, non-contiguous tensors, sizes that take the parallel paths, rows far
from zero, and the three ops in a row against one LayerNorm."""
import numpy as np
import pytest

import graphc
from graphc.fill import make_inputs
from graphc.types import DataType
from support import SPECS, assert_close, check_compiled, one_op

FLOATS = ("f32", "bf16", "f16")


# ----------------------------------------------------- distributed LayerNorm
@pytest.mark.parametrize("dt", FLOATS)
@pytest.mark.parametrize("shape", [[37], [2, 3, 29], [4, 5]])
def test_ln_pre(dt, shape):
    check_compiled(one_op("LayerNormPreAllGather", [(dt, shape)], [("f32", shape[:-1] + [2])]))


def test_ln_pre_parallel_strided(parallel):
    # rows strided (src transposed in memory)
    check_compiled(one_op("LayerNormPreAllGather", [("bf16", [30, 13], [1, 30])], [("f32", [30, 2])]), parallel=True)


def test_ln_pre_offset_rows_keep_precision():
    # a mean far from zero: M2 is taken around the mean, in float64
    g = one_op("LayerNormPreAllGather", [("f32", [4, 64])], [("f32", [4, 2])])
    x = (1000 + np.random.default_rng(1).standard_normal((4, 64))).astype(np.float32)
    got = graphc.compile(g).run({0: x})[1]
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(got[:, 1], ((x64 - x64.mean(-1, keepdims=True)) ** 2).sum(-1), rtol=1e-6)


@pytest.mark.parametrize("shards", [1, 2, 4])
@pytest.mark.parametrize("dt, gdt", [("f32", "f32"), ("bf16", "bf16"), ("f16", "f32"), ("bf16", None)])
def test_ln_post(shards, dt, gdt):
    shape = [3, 5, 24]
    ins = [(dt, shape), ("f32", [3, 5, 2 * shards])]
    if gdt is not None:
        ins += [(gdt, [24]), (gdt, [24])]
    check_compiled(one_op("LayerNormPostAllGather", ins, [(dt, shape)], {"epsilon": 1e-5}))


def test_ln_post_parallel_strided(parallel):
    ins = [("f16", [13, 26], [1, 13]), ("f32", [13, 4]), ("f16", [26]), ("f16", [26])]
    check_compiled(one_op("LayerNormPostAllGather", ins, [("f16", [13, 26])]), parallel=True)


def test_ln_pre_all_gather_post_matches_one_layernorm():
    # P = 1: the three ops in a row normalize each row like a plain LayerNorm
    g = graphc.load_graph(SPECS / "layernorm_distributed.json")
    inputs = make_inputs(g, 5)
    got = graphc.compile(g).run(inputs)[5]
    x = inputs[0].astype(np.float64)
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * inputs[3] + inputs[4]
    assert_close(got, y, DataType.f32)


@pytest.mark.parametrize("dt", ["f32", "bf16", "s8"])
def test_all_gather_group_of_one(dt):
    g = one_op("AllGather", [(dt, [3, 4], [1, 3])], [(dt, [3, 4])], {"axis": 0})
    got = check_compiled(g)
    assert got[1].dtype == DataType(dt).np
