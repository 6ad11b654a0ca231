"""Seed ops against PyTorch, and float64 finite-difference gradchecks of the backward seed
ops."""
import ml_dtypes
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import assert_close, assert_grad_close, data, numeric_grad, reference64, run_single, to_numpy, to_torch

torch = pytest.importorskip("torch")
TF = torch.nn.functional
BF16 = np.dtype(ml_dtypes.bfloat16)


# ------------------------------------------------------------------ AddBackward
@pytest.mark.parametrize("dt, npdt", [("f32", np.float32), ("bf16", BF16), ("c64", np.complex64)])
@pytest.mark.parametrize("sa, sb", [([2, 1, 4], [3, 1]), ([4], [2, 3, 4]), ([1, 3, 1], [2, 1, 5]), ([2, 3], [2, 3])])
def test_add_bw_broadcast(dt, npdt, sa, sb):
    rng = np.random.default_rng(1)
    a, b = data(rng, sa, npdt), data(rng, sb, npdt)
    dy = data(rng, np.broadcast_shapes(tuple(sa), tuple(sb)), npdt)
    ta, tb = to_torch(a, grad=True), to_torch(b, grad=True)
    (ta + tb).backward(to_torch(dy))
    da, db = run_single("AddBackward", [dy, a, b], [(dt, sa), (dt, sb)])
    assert_close(da, to_numpy(ta.grad), dt, ORACLE, "diff_src_0")
    assert_close(db, to_numpy(tb.grad), dt, ORACLE, "diff_src_1")


@pytest.mark.parametrize("flags", [[True, False], [False, True]])
def test_add_bw_required_outputs(flags):
    rng = np.random.default_rng(2)
    a, b, dy = data(rng, [3, 1]), data(rng, [1, 5]), data(rng, [3, 5])
    ta, tb = to_torch(a, grad=True), to_torch(b, grad=True)
    (ta + tb).backward(to_torch(dy))
    wanted = [t.grad for t, f in zip((ta, tb), flags) if f]
    outs = run_single("AddBackward", [dy, a, b], [("f32", [-1, -1])], {"are_required_outputs": flags})
    assert len(outs) == 1
    assert_close(outs[0], to_numpy(wanted[0]), "f32", ORACLE)


def test_add_bw_scalar_operand():
    rng = np.random.default_rng(3)
    a, dy = data(rng, [2, 3, 4]), data(rng, [2, 3, 4])
    ta = to_torch(a, grad=True)
    (ta + 2.0).backward(to_torch(dy))
    (da,) = run_single("AddBackward", [dy, a], [("f32", [-1, -1, -1])], {"are_required_outputs": [True, False]})
    assert_close(da, ta.grad.numpy(), "f32", ORACLE)


# ------------------------------------------------------------------ Embedding
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("it", [np.int32, np.uint32, np.int64])
@pytest.mark.parametrize("padding_idx", [None, 3], ids=["", "padding_idx"])   # (torch's forward ignores it)
def test_embedding(dt, it, padding_idx):
    rng = np.random.default_rng(5)
    w = data(rng, [9, 6], dt)
    idx = rng.integers(0, 9, (2, 3, 4)).astype(it)
    (dst,) = run_single("Embedding", [idx, w], [(dt, [-1] * 4)])
    want = TF.embedding(torch.from_numpy(idx.astype(np.int64)), to_torch(w), padding_idx=padding_idx)
    assert dst.shape == (2, 3, 4, 6)
    assert_close(dst, to_numpy(want), dt, ORACLE)


# ------------------------------------------------------------ EmbeddingBackward
def torch_embedding_grad(idx, num, dy, padding_idx=None):
    dim = dy.shape[-1]
    dtype = torch.bfloat16 if dy.dtype == BF16 else torch.float32
    w = torch.zeros((num, dim), dtype=dtype, requires_grad=True)
    out = TF.embedding(torch.from_numpy(idx.astype(np.int64)), w, padding_idx=padding_idx)
    out.backward(to_torch(dy).reshape(out.shape))
    return to_numpy(w.grad)


@pytest.mark.parametrize("case", ["repeated", "padding", "flattened", "bf16", "bf16_to_f32", "u32"])
def test_embedding_bw(case):
    rng = np.random.default_rng(4)
    num, dim = 6, 5
    idx = np.array([[0, 2, 2, 5], [2, 4, 0, 2], [5, 5, 1, 2]], np.uint32 if case == "u32" else np.int32)
    npdt = BF16 if case.startswith("bf16") else np.float32
    dy_shape = [1, 1, idx.size, dim] if case == "flattened" else [*idx.shape, dim]
    dy = data(rng, dy_shape, npdt)
    w = np.zeros((num, dim), npdt)
    attrs = {"padding_idx": 2} if case == "padding" else {}
    out_dt = "bf16" if case == "bf16" else "f32"
    if case == "bf16_to_f32":
        attrs["dtype"] = "f32"
    (dw,) = run_single("EmbeddingBackward", [idx, w, dy], [(out_dt, [-1, -1])], attrs)
    expected = torch_embedding_grad(idx, num, dy, attrs.get("padding_idx"))
    assert dw.shape == (num, dim)
    assert_close(dw, expected, out_dt if case != "bf16_to_f32" else "bf16", ORACLE)


# ------------------------------------------------------------------- SwiGlu
def torch_swiglu(x, dim):
    a, b = x.chunk(2, dim=dim)
    return TF.silu(a) * b


@pytest.mark.parametrize("dim", [-3, -2, -1, 0, 1, 2])
def test_swiglu_every_dim(dim):
    rng = np.random.default_rng(5)
    x = data(rng, [2, 4, 6])
    tx = to_torch(x, grad=True)
    ty = torch_swiglu(tx, dim)
    dy = data(rng, list(ty.shape))
    ty.backward(to_torch(dy))
    (y,) = run_single("SwiGlu", [x], [("f32", [-1, -1, -1])], {"dim": dim})
    (dx,) = run_single("SwiGluGrad", [dy, x], [("f32", [-1, -1, -1])], {"dim": dim})
    assert_close(y, to_numpy(ty), "f32", ORACLE, "SwiGlu")
    assert_close(dx, to_numpy(tx.grad), "f32", ORACLE, "SwiGluGrad")


@pytest.mark.parametrize("dt, npdt", [("bf16", BF16), ("f16", np.float16)])
def test_swiglu_grad_low_precision(dt, npdt):
    rng = np.random.default_rng(6)
    x, dy = data(rng, [3, 8], npdt), data(rng, [3, 4], npdt)
    # torch in f32 on the same values: graphc computes wide and rounds once
    tx = torch.from_numpy(x.astype(np.float32)).requires_grad_()
    torch_swiglu(tx, -1).backward(torch.from_numpy(dy.astype(np.float32)))
    (dx,) = run_single("SwiGluGrad", [dy, x], [(dt, [3, 8])])
    assert_close(dx, tx.grad.numpy(), dt, ORACLE)


# ----------------------------------------------------------------- gradchecks
@pytest.mark.parametrize("sa, sb", [([2, 1, 4], [3, 1]), ([4], [2, 3, 4]), ([1, 3, 1], [2, 1, 5])])
def test_gradcheck_add_bw(sa, sb):
    rng = np.random.default_rng(11)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    dy = rng.standard_normal(np.broadcast_shapes(tuple(sa), tuple(sb)))
    da, db = reference64("AddBackward", [dy, a, b], [("f32", sa), ("f32", sb)])
    assert_grad_close(da, numeric_grad(lambda v: v + b, a, dy), what="diff_src_0")
    assert_grad_close(db, numeric_grad(lambda v: a + v, b, dy), what="diff_src_1")


@pytest.mark.parametrize("flat", [False, True])
def test_gradcheck_embedding_bw(flat):
    rng = np.random.default_rng(12)
    w = rng.standard_normal((5, 3))
    idx = np.array([[0, 4, 4], [1, 0, 4]], np.int32)
    dy = rng.standard_normal((1, 6, 3) if flat else (2, 3, 3))
    (dw,) = reference64("EmbeddingBackward", [idx, w, dy], [("f32", [5, 3])])
    numeric = numeric_grad(lambda v: np.take(v, idx, axis=0).reshape(dy.shape), w, dy)
    assert_grad_close(dw, numeric)


@pytest.mark.parametrize("dim", [-3, -2, -1, 0, 1, 2])
def test_gradcheck_swiglu_grad(dim):
    rng = np.random.default_rng(13)
    x = rng.standard_normal((2, 4, 6))
    half = list(x.shape)
    half[dim] //= 2
    dy = rng.standard_normal(half)
    (dx,) = reference64("SwiGluGrad", [dy, x], [("f32", list(x.shape))], {"dim": dim})

    def forward(v):
        return reference64("SwiGlu", [v], [("f32", half)], {"dim": dim})[0]

    assert_grad_close(dx, numeric_grad(forward, x, dy))
