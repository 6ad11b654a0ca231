"""graphc's AMX tiles (graphc.codegen.amx_tile) under the bf16 and int8 GEMM
drivers: A read in its rows and packed in tiles, several blocks of k, k not a
whole tile step, edges of m and n, beta 1, against float64 / int64 products of
the same values; and the drivers' own tile configuration after another
library's AMX code ran on the thread."""
import ml_dtypes
import numpy as np
import pytest

from graphc.codegen import amx_tile, bf16_gemm, int8_gemm

pytestmark = pytest.mark.skipif(not (bf16_gemm.AMX and int8_gemm.AMX), reason="the tiles are not AMX's here")

#: (m, n, k, lda): rows of A 384 bytes apart (read in place), 512 and 2,048 apart
#: (packed in tiles: amx_tile.CONFLICT_STRIDE), k over two blocks, k off the step,
#: m and n off the tile
SHAPES = [(100, 64, 192, 192), (64, 96, 256, 256), (45, 70, 1024, 1024), (33, 40, 600, 600),
          (70, 33, 64, 96), (1, 5, 3, 3), (130, 100, 1088, 1100)]


@pytest.mark.parametrize("m,n,k,lda", SHAPES)
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_bf16_products(m, n, k, lda, beta):
    rng = np.random.default_rng(m + n + k)
    a = rng.standard_normal((m, lda)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((k, n)).astype(ml_dtypes.bfloat16)
    old = rng.standard_normal((m, n)).astype(np.float32)
    c = old.copy() if beta else np.full((m, n), np.nan, np.float32)
    bf16_gemm.gemm_bf16_tiles(0, 0, m, n, k, a.view(np.uint16).ravel(), 0, lda, b.view(np.uint16).ravel(), 0, n,
                              beta, c.ravel(), 0, n)
    want = a[:, :k].astype(np.float64) @ b.astype(np.float64) + (old if beta else 0)
    assert np.abs(c - want).max() <= k * 2.0 ** -23 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("m,n,k,lda", SHAPES)
def test_int8_products_are_exact(m, n, k, lda):
    rng = np.random.default_rng(m * n + k)
    a = rng.integers(0, 256, (m, lda)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    c = np.full((m, n), 7, np.int32)
    int8_gemm.gemm_u8s8_tiles(0, 0, m, n, k, a.ravel(), 0, lda, b.ravel(), 0, n, c.ravel(), 0, n)
    assert np.array_equal(c, a[:, :k].astype(np.int64) @ b.astype(np.int64))


@pytest.mark.parametrize("m,k,lda,taps", [(32, 64, 64, 9), (32, 96, 128, 3), (20, 64, 64, 4), (32, 64, 256, 2),
                                            (32, 48, 48, 3), (32, 1056, 1056, 2)])
def test_bf16_taps_sum_every_tap(m, k, lda, taps):
    """bf16_taps: C = the sum over taps of A_t @ B_t, A_t rows of one buffer at
    each tap's offset, B_t packed one after another; in the tile registers where
    taps_in_registers (rows read whole to MR: the buffer has room), else a
    bf16_block per tap (k off the tile's step, rows 512 bytes apart, k over a block)."""
    rng = np.random.default_rng(m + k + taps)
    offs = np.array([t * 7 * lda + t for t in range(taps)], np.int64)   # (an odd element: any offset)
    rows = (int(offs.max()) + lda - 1) // lda + bf16_gemm.MR + 1
    a = rng.standard_normal(rows * lda + lda).astype(ml_dtypes.bfloat16)
    bs = rng.standard_normal((taps, k, 40)).astype(ml_dtypes.bfloat16)
    per = bf16_gemm.bf16_panels(40, k)
    bp = np.empty(taps * per, np.uint16)
    for t in range(taps):
        bf16_gemm.pack_b_bf16(0, 40, k, bs[t].view(np.uint16).ravel(), 0, 40, bp, t * per, 0, 2)
    ap = np.empty(bf16_gemm.block_pack_elems(k), np.uint16)
    bf16_gemm.bf16_begin()
    for jp in range(2):
        c = np.full(bf16_gemm.MR * 32, np.nan, np.float32)
        bf16_gemm.bf16_taps(m, k, a.view(np.uint16), 0, lda, offs, ap, 0, bp, 0, per, 2, jp, c, 0)
        want = sum(np.stack([a[o + r * lda:o + r * lda + k] for r in range(m)]).astype(np.float64)
                   @ bs[t][:, jp * 32:jp * 32 + 32].astype(np.float64) for t, o in enumerate(offs))
        n = want.shape[1]
        got = c.reshape(bf16_gemm.MR, 32)[:m, :n]
        assert np.abs(got - want).max() <= taps * k * 2.0 ** -23 * max(1.0, np.abs(want).max()), (jp, m, k, lda)
    assert bf16_gemm.taps_in_registers(k, lda) == (k % 32 == 0 and k <= 2 * bf16_gemm.KC and lda * 2 % 512 != 0)


@pytest.mark.parametrize("m,k,lda,taps", [(32, 64, 64, 9), (20, 128, 192, 3), (32, 64, 512, 2), (32, 96, 96, 3),
                                            (32, 1088, 1088, 2)])
def test_u8s8_taps_sum_every_tap_exactly(m, k, lda, taps):
    """u8s8_taps: the int8 batch-reduce tile where taps_in_registers, else a
    u8s8_block per tap summed (rows 512 bytes apart, k off the tile's step, k
    over a block); exact s32 sums either way."""
    rng = np.random.default_rng(m * k + taps)
    offs = np.array([t * 5 * lda + 3 * t for t in range(taps)], np.int64)
    rows = (int(offs.max()) + lda - 1) // lda + int8_gemm.MR + 1
    a = rng.integers(0, 256, rows * lda + lda).astype(np.uint8)
    bs = rng.integers(-128, 128, (taps, k, 40)).astype(np.int8)
    per = int8_gemm.u8s8_panels(40, k)
    bp = np.empty(taps * per, np.int8)
    sums = np.empty(40, np.int32)
    for t in range(taps):
        int8_gemm.pack_b_u8s8(0, 40, k, bs[t].ravel(), 0, 40, bp, t * per, sums, 0, 0, 2)
    ap = np.empty(int8_gemm.block_pack_bytes(k), np.uint8)
    int8_gemm.u8s8_begin()
    for jp in range(2):
        c = np.full(int8_gemm.MR * 32, 7, np.int32)
        int8_gemm.u8s8_taps(m, k, a, 0, lda, offs, ap, 0, bp, 0, per, 2, jp, c, 0)
        want = sum(np.stack([a[o + r * lda:o + r * lda + k] for r in range(m)]).astype(np.int64)
                   @ bs[t][:, jp * 32:jp * 32 + 32].astype(np.int64) for t, o in enumerate(offs))
        np.testing.assert_array_equal(c.reshape(int8_gemm.MR, 32)[:m, :want.shape[1]], want)
    assert int8_gemm.taps_in_registers(k, lda) == (k % 64 == 0 and k <= 4 * int8_gemm.KC and lda % 512 != 0)


def test_the_drivers_configure_the_tiles_after_another_library():
    """oneDNN (inside torch) configures this thread's tiles its own way for its
    bf16 GEMM; graphc's driver loads its configuration again before its tiles."""
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        x = torch.randn(64, 96, dtype=torch.bfloat16)
        y = torch.randn(96, 40, dtype=torch.bfloat16)
        ours = x.float().numpy().astype(ml_dtypes.bfloat16), y.float().numpy().astype(ml_dtypes.bfloat16)
        for _ in range(2):
            torch.matmul(x, y)
            c = np.empty((64, 40), np.float32)
            bf16_gemm.gemm_bf16_tiles(0, 0, 64, 40, 96, ours[0].view(np.uint16).ravel(), 0, 96,
                                      ours[1].view(np.uint16).ravel(), 0, 40, 0.0, c.ravel(), 0, 40)
            want = ours[0].astype(np.float64) @ ours[1].astype(np.float64)
            assert np.abs(c - want).max() <= 96 * 2.0 ** -23 * np.abs(want).max()
    finally:
        torch.set_num_threads(threads)


def test_the_tiles_code_is_made_of_constants():
    """The tiles' LLVM IR is built from the module's constants alone (no text from
    a graph reaches it) and names each AMX instruction it needs."""
    ir = amx_tile.module_ir()
    assert ir == amx_tile.module_ir()
    for name in ("ldtilecfg", "tileloadd64", "tilestored64", "tdpbf16ps", "tdpbusd", "tilezero"):
        assert f"@llvm.x86.{name}(" in ir
    for symbol in (amx_tile.CONFIG, amx_tile.BF16, amx_tile.BF16_ROWS, amx_tile.INT8, amx_tile.INT8_ROWS):
        assert f"define void @{symbol}(" in ir
