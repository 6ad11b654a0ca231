"""The compiled int8 MatMul (static u8/s8 Dequantizes on both operands) on the
integer GEMM (graphc.codegen.gemm_int8: graphc's AVX512-VNNI tile where the CPU
has it, MKL's otherwise) against graphc's numpy reference, bit for bit: the
scales are powers of two, so the exact integer sums scaled are the reference's
float64 values.  Shapes off the tile's 8 x 32 and K off its quads of 4, K = 1,
empty dims, a batch (shared weights and batched ones), transposed weights,
s8 src and u8 weights (the operands shifted into u8 x s8), strided src, and
per-channel weight scales and zero points with ReLU and a Quantize."""
import numpy as np
import pytest

from graphc.builder import GraphBuilder
from graphc.codegen.blas_import import int8_gemm, int8_tile_gemm

from support import check_compiled
from support.compiled import only_compiled
from support.fusion import dequantize
from support.gemm_calls import int8_tile_name

pytestmark = pytest.mark.skipif(not int8_gemm(), reason="no integer GEMM on this machine (f32 runs instead)")


def _qmatmul(M, K, N, src="u8", wei="s8", tb=False, batch=(), wbatch=(), quantize=True, src_strides=None):
    """src (per tensor, zero point) x weights (per output channel, scales and zero
    points) -> MatMul -> ReLU -> Quantize u8 (or the f32 MatMul alone)."""
    b = GraphBuilder()
    x = b.tensor(src, [*batch, M, K], src_strides)
    w = b.tensor(wei, [*wbatch, N, K] if tb else [*wbatch, K, N])
    dx = dequantize(b, x, {"qtype": "per_tensor", "scales": [2.0 ** -5], "zps": [3 if src == "u8" else -2]})
    dw = dequantize(b, w, {"qtype": "per_channel", "axis": len(wbatch) + (0 if tb else 1),
                           "scales": [2.0 ** -(4 + j % 3) for j in range(N)],
                           "zps": [j % 3 - 1 + (128 if wei == "u8" else 0) for j in range(N)]})
    out = [*(batch or wbatch), M, N]
    y = b.op("MatMul", [dx, dw], out=[("f32", out)], attrs={"transpose_b": tb})[0]
    if quantize:
        y = b.op("ReLU", [y])[0]
        b.op("Quantize", [y], out=[("u8", out)], attrs={"qtype": "per_tensor", "scales": [2.0 ** 3], "zps": [1]})
    return b.finalize()


@pytest.mark.parametrize("M,K,N", [(1, 1, 1), (7, 1, 33), (9, 3, 31), (8, 4, 32), (37, 70, 100), (70, 1030, 45),
                                   (130, 261, 290), (16, 300, 600)])   # (the last: C cut in column blocks)
@pytest.mark.parametrize("tb", [False, True])
def test_shapes_off_the_tile_exact(M, K, N, tb):
    g = _qmatmul(M, K, N, tb=tb)
    check_compiled(g, exact=True, seed=M + K + N)
    check_compiled(_qmatmul(M, K, N, tb=tb, quantize=False), exact=True, seed=M * N)


def test_the_tile_is_the_road():
    cp = only_compiled(_qmatmul(40, 64, 48))
    if int8_tile_gemm():
        assert int8_tile_name() in cp.get_impl_info() and "gemm_u8s8_packed(" in cp.source
        assert "pack_b_u8s8(" in cp.source and "row_sums_u8(" in cp.source


@pytest.mark.parametrize("src,wei", [("s8", "s8"), ("u8", "u8"), ("s8", "u8")])
def test_shifted_operands_exact(src, wei):
    """s8 src becomes u8 (+128) and u8 weights s8 (-128), the shifts compensated."""
    for M, K, N in ((5, 7, 9), (33, 66, 70)):
        check_compiled(_qmatmul(M, K, N, src=src, wei=wei), exact=True, seed=K)
        check_compiled(_qmatmul(M, K, N, src=src, wei=wei, quantize=False), exact=True, seed=N)


@pytest.mark.parametrize("tb", [False, True])
def test_batch_shared_and_batched_weights(tb):
    check_compiled(_qmatmul(19, 37, 41, tb=tb, batch=(2, 3)), exact=True, seed=1)
    check_compiled(_qmatmul(19, 37, 41, tb=tb, batch=(3,), wbatch=(3,), quantize=False), exact=True, seed=2)


def test_strided_src_read_in_place():
    """Rows of src wider than K (a column slice of a larger buffer)."""
    M, K, N = 20, 24, 40
    g = _qmatmul(M, K, N, src_strides=[K + 8, 1])
    check_compiled(g, exact=True, seed=4)


@pytest.mark.parametrize("M,K,N", [(0, 8, 16), (4, 8, 0), (3, 0, 5)])
def test_empty_dims(M, K, N):
    g = _qmatmul(M, K, N)
    check_compiled(g, exact=True, seed=5)


def test_without_zero_points_no_compensation():
    """Symmetric s8 weights (no zero points): no row sums of src are computed."""
    b = GraphBuilder()
    x, w = b.tensor("u8", [24, 40]), b.tensor("s8", [40, 36])
    dx = dequantize(b, x, {"qtype": "per_tensor", "scales": [2.0 ** -4], "zps": [5]})
    dw = dequantize(b, w, {"qtype": "per_channel", "axis": 1, "scales": [2.0 ** -(j % 4) for j in range(36)]})
    b.op("MatMul", [dx, dw], out=[("f32", [24, 36])])
    g = b.finalize()
    if int8_tile_gemm():
        assert "row_sums_u8(" not in only_compiled(g).source
    check_compiled(g, exact=True, seed=6)


_MKL_ROAD = """
import numpy as np, graphc
from graphc import reference
from graphc.fill import make_inputs
from graphc.codegen import blas
from test_matmul_int8_compiled import _qmatmul
assert not blas.OWN_INT8
for tb in (False, True):
    g = _qmatmul(37, 70, 45, tb=tb)
    cg = graphc.compile(g)
    assert "gemm_u8s8(" in cg.compiled[0].source
    inputs = make_inputs(g, 3)
    want, got = reference.run(g, inputs), cg.run(inputs)
    assert all(np.array_equal(got[t], want[t]) for t in want)
print("ok")
"""


def test_mkl_road_with_the_tile_switched_off():
    """GRAPHC_INT8_TILE=0 (in a process of its own: the switch is read once):
    MKL's int8 GEMM with the same compensation, exact."""
    import os
    import subprocess
    import sys
    from graphc.codegen.blas_import import mkl_path
    if mkl_path() is None:
        pytest.skip("no MKL")
    here = os.path.dirname(__file__)
    env = dict(os.environ, GRAPHC_INT8_TILE="0",
               PYTHONPATH=os.pathsep.join([here, os.path.join(here, "..", ".."), os.environ.get("PYTHONPATH", "")]))
    p = subprocess.run([sys.executable, "-c", _MKL_ROAD], env=env, capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), p.stderr[-2000:]
