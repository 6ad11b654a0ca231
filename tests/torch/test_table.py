"""Each row of graphc.torch's mapping table: one ATen op compiled by the
backend against eager torch, taken by graphc (not in the fallback), and, for a
row with a guard, a node the guard refuses left in torch with the same result."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from graphc.tolerances import ORACLE  # noqa: E402
from graphc.torch.table import TABLE, markdown  # noqa: E402

from support.torch_backend import assert_tensors_close, check_against_eager  # noqa: E402

aten = torch.ops.aten


def _r(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + len(shape) + shape[-1])
    return torch.randn(*shape, generator=g).to(dtype)


def _i(*shape, dtype=torch.int64, seed=0, high=50):
    g = torch.Generator().manual_seed(seed + 7 * len(shape) + shape[-1])
    return torch.randint(-high, high, shape, generator=g, dtype=dtype)


_BIG = torch.tensor([2 ** 62, -(2 ** 62), 2 ** 40 + 1, 3])   # (wraps, and beyond f32's and f64's integers)
#: graphc.torch.table_index's rows: integers, comparisons, boolean logic, constants, slicing
INDEX_TAKEN = [
    ("int add", lambda a, b: a + b, (_i(4, 6), _i(6, seed=1)), "aten::add.Tensor"),
    ("int add wraps", lambda a, b: a * 2 + b, (_BIG, _BIG.flip(0)), "aten::add.Tensor"),
    ("int mul wraps", lambda a, b: a * b, (_BIG, _BIG.flip(0)), "aten::mul.Tensor"),
    ("int32 sub", lambda a, b: (a - b) * 3, (_i(4, 6, dtype=torch.int32), _i(4, 1, dtype=torch.int32, seed=1)),
     "aten::sub.Tensor"),
    ("int add a number (num_batches_tracked += 1)", lambda a: a + 1, (torch.tensor(5),), "aten::add.Tensor"),
    ("int add.Scalar", lambda a: aten.add.Scalar(a, 3), (_i(3, 4),), "aten::add.Scalar"),
    ("int sub.Scalar", lambda a: aten.sub.Scalar(a, 3), (_i(3, 4),), "aten::sub.Scalar"),
    ("int mul.Scalar", lambda a: aten.mul.Scalar(a, -2), (_i(3, 4),), "aten::mul.Scalar"),
    ("float add.Scalar", lambda a: aten.add.Scalar(a, 0.5), (_r(3, 4),), "aten::add.Scalar"),
    ("div.Scalar", lambda a: aten.div.Scalar(a, 4.0), (_r(3, 4),), "aten::div.Scalar"),
    ("eq.Scalar", lambda a: a == 3, (_i(4, 6, high=5),), "aten::eq.Scalar"),
    ("ne.Tensor", lambda a, b: a != b, (_i(4, 6, high=3), _i(6, seed=1, high=3)), "aten::ne.Tensor"),
    ("ge.Scalar", lambda a: a >= 0, (_i(4, 6),), "aten::ge.Scalar"),
    ("gt.Tensor", lambda a, b: a > b, (_r(4, 6), _r(4, 1, seed=1)), "aten::gt.Tensor"),
    ("le.Tensor", lambda a, b: a <= b, (_i(4, 1, high=3), _i(6, seed=1, high=3)), "aten::le.Tensor"),
    ("lt.Scalar float", lambda a: a < 0.25, (_r(4, 6, dtype=torch.bfloat16),), "aten::lt.Scalar"),
    ("bitwise_and, bitwise_or, bitwise_not", lambda a, b: ((a > 0) & (b < 0)) | ~(a > b), (_r(4, 6), _r(6, seed=1)),
     "aten::bitwise_and.Tensor"),
    ("bitwise_or", lambda a, b: (a > 0) | (b < 0), (_r(4, 6), _r(6, seed=1)), "aten::bitwise_or.Tensor"),
    ("bitwise_not", lambda a: ~(a > 0), (_r(4, 6),), "aten::bitwise_not"),
    ("logical_and, logical_or, logical_not", lambda a, b: torch.logical_or(torch.logical_and(a > 0, b < 0),
                                                                           torch.logical_not(a > b)),
     (_r(4, 6), _r(6, seed=1)), "aten::logical_and"),
    ("int view, unsqueeze, permute, transpose, clone",
     lambda a: (a + 1).view(2, 3, 4).unsqueeze(0).permute(0, 3, 1, 2).transpose(1, 2).clone() * 2, (_i(24),),
     "aten::view"),
    ("int unsqueeze", lambda a: (a * 2).unsqueeze(1) + a, (_i(5),), "aten::unsqueeze"),
    ("int expand into an int add", lambda a, b: (a * 2).expand(3, 6) + b, (_i(1, 6), _i(3, 6, seed=1)),
     "aten::expand"),
    ("bool permute", lambda a: (a > 0).permute(1, 0) | (a < 1).t(), (_r(4, 4),), "aten::permute"),
    ("arange.start_step", lambda a: a * torch.arange(2, 14, 2), (_i(3, 6),), "aten::arange.start_step"),
    ("arange of floats", lambda a: a + torch.arange(0.5, 3.0, 0.25), (_r(10),), "aten::arange.start_step"),
    ("arange.start", lambda a: a + torch.arange(1, 7), (_i(6),), "aten::arange.start"),
    ("arange", lambda a: a + torch.arange(6), (_i(6),), "aten::arange"),
    ("full", lambda a: a * torch.full((3, 6), 2.5), (_r(3, 6),), "aten::full"),
    ("full of integers", lambda a: a - torch.full((3, 1), 7), (_i(3, 6),), "aten::full"),
    ("zeros", lambda a: torch.maximum(a, torch.zeros(3, 6)), (_r(3, 6),), "aten::zeros"),
    ("ones", lambda a: a - torch.ones(6, dtype=torch.int64), (_i(3, 6),), "aten::ones"),
    ("int mask to f32", lambda m, x: x * m.float(), (_i(3, 4, high=2), _r(3, 4)), "aten::_to_copy"),
    ("bool mask to f32", lambda x: x * (x > 0).float(), (_r(3, 4),), "aten::_to_copy"),
    ("int mask to bool", lambda m, x: torch.where(m.bool(), x, 0.0), (_i(3, 4, high=2), _r(3, 4)), "aten::_to_copy"),
    ("float to bool", lambda x: torch.where(torch.relu(x).bool(), x, 1.0), (_r(3, 4),), "aten::_to_copy"),
    ("slice", lambda x: torch.relu(x[:, 1:3]), (_r(3, 4),), "aten::slice.Tensor"),
    ("slice from the end, past the end", lambda x: torch.relu(x[-2:, 1:100]), (_r(3, 4),), "aten::slice.Tensor"),
    ("select", lambda x: torch.relu(x[:, -1]), (_r(3, 4),), "aten::select.int"),
    ("split_with_sizes", lambda x: [torch.relu(t) for t in x.split([1, 3], 1)], (_r(3, 4),),
     "aten::split_with_sizes"),
    ("split", lambda x: [torch.relu(t) for t in aten.split.Tensor(x, 2, 0)], (_r(5, 4),), "aten::split.Tensor"),
    ("split, one output read", lambda x: torch.relu(x.split([1, 2, 1], 1)[1]), (_r(3, 4),),
     "aten::split_with_sizes"),
]

#: (name, function, inputs, the ATen op that must run in graphc)
TAKEN = [
    ("mm", lambda a, b: a @ b, (_r(5, 7), _r(7, 3)), "aten::mm"),
    ("bmm", torch.bmm, (_r(2, 5, 7), _r(2, 7, 3)), "aten::bmm"),
    ("addmm", lambda x, w, b: F.linear(x, w, b), (_r(4, 6), _r(5, 6), _r(5)), "aten::addmm"),
    ("add", lambda a, b: torch.relu(a + b), (_r(4, 6), _r(6)), "aten::add.Tensor"),
    ("sub", lambda a, b: torch.relu(a - b), (_r(4, 6), _r(4, 6, seed=1)), "aten::sub.Tensor"),
    ("mul scalar", lambda a: torch.relu(a * 0.5), (_r(4, 6),), "aten::mul.Tensor"),
    ("div", lambda a, b: torch.relu(a / (b.abs() + 1)), (_r(4, 6), _r(4, 6, seed=1)), "aten::div.Tensor"),
    ("relu", torch.relu, (_r(4, 6),), "aten::relu"),
    ("tanh", torch.tanh, (_r(4, 6),), "aten::tanh"),
    ("sigmoid", torch.sigmoid, (_r(4, 6),), "aten::sigmoid"),
    ("exp", torch.exp, (_r(4, 6),), "aten::exp"),
    ("neg", lambda a: torch.relu(-a), (_r(4, 6),), "aten::neg"),
    ("rsqrt", lambda a: torch.rsqrt(a.abs() + 1), (_r(4, 6),), "aten::rsqrt"),
    ("pow", lambda a: torch.relu(a) ** 3, (_r(4, 6),), "aten::pow.Tensor_Scalar"),
    ("gelu", F.gelu, (_r(4, 6),), "aten::gelu"),
    ("gelu tanh", lambda a: F.gelu(a, approximate="tanh"), (_r(4, 6),), "aten::gelu"),
    ("layer_norm", lambda x, w, b: F.layer_norm(x, (6,), w, b), (_r(3, 4, 6), _r(6), _r(6, seed=1)),
     "aten::native_layer_norm"),
    ("layer_norm no affine", lambda x: F.layer_norm(x, (4, 6)), (_r(3, 4, 6),), "aten::native_layer_norm"),
    ("softmax", lambda x: F.softmax(x, -1), (_r(3, 4, 6),), "aten::_softmax"),
    ("view", lambda x: torch.relu(x).view(4, 6), (_r(2, 2, 6),), "aten::view"),
    ("permute", lambda x: torch.relu(x).permute(2, 0, 1) + 1, (_r(2, 3, 4),), "aten::permute"),
    ("transpose", lambda x: torch.relu(x).transpose(0, 1) @ x, (_r(3, 4),), "aten::transpose.int"),
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (_r(1, 3, 8, 8), _r(4, 3, 3, 3), _r(4)),
     "aten::convolution"),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1), (_r(1, 2, 8, 8),), "aten::max_pool2d_with_indices"),
    ("mean", lambda x: x.mean((2, 3), keepdim=True), (_r(2, 3, 4, 4),), "aten::mean.dim"),
    ("sum", lambda x: torch.relu(x).sum(1), (_r(3, 5),), "aten::sum.dim_IntList"),
    ("to bf16", lambda x: torch.relu(x).to(torch.bfloat16), (_r(3, 5),), "aten::_to_copy"),
    ("to f32", lambda x: torch.relu(x).float(), (_r(3, 5, dtype=torch.float16),), "aten::_to_copy"),
    ("cat", lambda x, y: torch.relu(torch.cat([x, y], 1)), (_r(3, 5), _r(3, 2)), "aten::cat"),
    ("cat with an empty operand", lambda e, x: torch.relu(torch.cat([e, x], 1)), (_r(3, 0), _r(3, 5)),
     "aten::cat"),
    ("unsqueeze", lambda x: torch.relu(x).unsqueeze(1) + 1, (_r(3, 5),), "aten::unsqueeze"),
    ("sdpa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v), (_r(1, 2, 5, 8), _r(1, 2, 6, 8, seed=1),
                                                                        _r(1, 2, 6, 8, seed=2)),
     "aten::_scaled_dot_product_flash_attention_for_cpu"),
    ("sdpa causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     (_r(1, 2, 5, 8), _r(1, 2, 5, 8, seed=1), _r(1, 2, 5, 8, seed=2)),
     "aten::_scaled_dot_product_flash_attention_for_cpu"),
    ("where", torch.where, (_r(4, 1) > 0, _r(4, 6), _r(6)), "aten::where.self"),
    ("where of numbers (an attention mask)", lambda c, x: torch.where(c, 0.0, float("-inf")) + x,
     (_r(2, 1, 4, 4) > 0, _r(2, 3, 4, 4)), "aten::scalar_tensor"),
    ("expand into a binary op", lambda x, y: torch.relu(x).expand(3, 4, 6) * y, (_r(1, 4, 6), _r(3, 4, 6)),
     "aten::expand"),
    ("bool expand into where", lambda c, x: torch.where(c.expand(2, 4, 6), x, 0.5), (_r(2, 1, 6) > 0, _r(2, 4, 6)),
     "aten::expand"),
    ("embedding", lambda w, i: F.embedding(i, w), (_r(7, 6), torch.tensor([[0, 3, 3], [6, 1, 3]])), "aten::embedding"),
    ("embedding bf16 s32 padding_idx", lambda w, i: F.embedding(i, w, padding_idx=3),
     (_r(7, 6, dtype=torch.bfloat16), torch.tensor([[0, 3, 3], [6, 1, 3]], dtype=torch.int32)), "aten::embedding"),
    ("embedding of one index", lambda w, i: F.embedding(i, w) * 2, (_r(7, 6), torch.tensor(4)), "aten::embedding"),
    ("index_select", lambda x, i: torch.relu(x).index_select(0, i), (_r(5, 3, 4), torch.tensor([4, 0, 4, 2])),
     "aten::index_select"),
    ("index_select 2-D f16 s32", lambda x, i: torch.index_select(x, -2, i),
     (_r(5, 6, dtype=torch.float16), torch.tensor([1, 1, 3], dtype=torch.int32)), "aten::index_select"),
] + INDEX_TAKEN


@pytest.mark.parametrize("name,fn,inputs,op", TAKEN, ids=[t[0] for t in TAKEN])
def test_row_runs_in_graphc(name, fn, inputs, op):
    lowered = check_against_eager(fn, *inputs, table=ORACLE)
    assert op not in lowered.fallback, lowered.fallback
    assert lowered.regions >= 1


def test_batch_norm_inference():
    bn = torch.nn.BatchNorm2d(3).eval()
    bn.running_mean.copy_(_r(3)); bn.running_var.copy_(_r(3).abs() + 0.5)
    lowered = check_against_eager(lambda x: torch.relu(bn(x)), _r(2, 3, 4, 4), table=ORACLE)
    assert "aten::_native_batch_norm_legit_no_training" not in lowered.fallback, lowered.fallback


def _conv_bn(bias: bool, groups: int):
    m = torch.nn.Sequential(torch.nn.Conv2d(4, 6, 3, padding=1, bias=bias, groups=groups), torch.nn.BatchNorm2d(6),
                            torch.nn.ReLU()).eval()
    with torch.no_grad():
        m[0].weight.copy_(_r(6, 4 // groups, 3, 3, seed=1))
        if bias:
            m[0].bias.copy_(_r(6, seed=4))
        m[1].running_mean.copy_(_r(6)); m[1].running_var.copy_(_r(6, seed=5).abs() + 0.5)
        m[1].weight.copy_(_r(6, seed=2)); m[1].bias.copy_(_r(6, seed=3))
    return m


@pytest.mark.parametrize("bias,groups", [(False, 1), (True, 2)])
def test_inference_batch_norm_folds_into_the_convolution(bias, groups):
    """Constant weights (parameters in inference) are laid out XIO once, and the
    batch norm after the convolution multiplies into its weights and bias."""
    lowered = check_against_eager(_conv_bn(bias, groups), _r(2, 4, 7, 7), table=ORACLE)
    assert lowered.coverage == 1.0, lowered.fallback
    assert "BatchNormInference" not in lowered.graphc_ops, lowered.graphc_ops
    assert lowered.graphc_ops["Convolution"] == 1


def test_inference_batch_norm_folds_under_autocast():
    m = _conv_bn(False, 1)
    x = _r(2, 4, 7, 7)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        want = m(x)
        from support.torch_backend import compile_and_run
        got, lowered = compile_and_run(m, x)
    assert_tensors_close(got, want, ORACLE)
    assert lowered.coverage == 1.0, lowered.fallback
    assert "BatchNormInference" not in lowered.graphc_ops, lowered.graphc_ops


@pytest.mark.parametrize("act", [F.gelu, torch.tanh], ids=["gelu", "tanh"])
def test_an_activation_after_a_linears_reshape_is_its_post_op(act):
    """Linear on [batch, seq, in] is addmm on [rows, in] and a view: the activation
    moves before the view, into the MatMul's partition."""
    lin = torch.nn.Linear(16, 32).eval()
    with torch.no_grad():
        lin.weight.copy_(_r(32, 16)); lin.bias.copy_(_r(32, seed=3))
    lowered = check_against_eager(lambda x: act(lin(x)), _r(2, 8, 16), table=ORACLE)
    assert lowered.coverage == 1.0, lowered.fallback
    assert lowered.partitions == 1


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_low_precision_rows(dt):
    fn = lambda x, w, b: F.softmax(F.gelu(F.linear(F.layer_norm(x, (8,)), w, b)), -1)  # noqa: E731
    lowered = check_against_eager(fn, _r(4, 8, dtype=dt), _r(6, 8, dtype=dt), _r(6, dtype=dt), table=ORACLE)
    assert lowered.coverage == 1.0, lowered.fallback


def _leaf(*shape, seed=0):
    return _r(*shape, seed=seed).requires_grad_(True)


#: backward rows: (name, function, leaf inputs, the ATen op that must run in graphc); a training step
TRAINED = [
    ("gelu_backward", F.gelu, (_leaf(4, 6),), "aten::gelu_backward"),
    ("tanh_backward", torch.tanh, (_leaf(4, 6),), "aten::tanh_backward"),
    ("threshold_backward", torch.relu, (_leaf(4, 6),), "aten::threshold_backward"),
    ("softmax_backward", lambda x: F.softmax(x, -1), (_leaf(3, 6),), "aten::_softmax_backward_data"),
    ("layer_norm statistics", lambda x, w, b: F.layer_norm(x, (6,), w, b), (_leaf(3, 4, 6), _leaf(6), _leaf(6, seed=1)),
     "aten::native_layer_norm"),
    ("layer_norm_backward", lambda x, w, b: F.layer_norm(x, (6,), w, b), (_leaf(3, 4, 6), _leaf(6), _leaf(6, seed=1)),
     "aten::native_layer_norm_backward"),
    ("embedding_dense_backward", lambda w, i: F.embedding(i, w), (_leaf(7, 6), torch.tensor([[0, 3, 3], [6, 1, 3]])),
     "aten::embedding_dense_backward"),
    ("embedding in training", lambda w, i: torch.tanh(F.embedding(i, w)),
     (_leaf(7, 6), torch.tensor([[0, 3, 3], [6, 1, 3]])), "aten::embedding"),
    ("embedding_dense_backward padding_idx", lambda w, i: F.embedding(i, w, padding_idx=3),
     (_leaf(7, 6), torch.tensor([[0, 3, 3], [6, 1, 3]], dtype=torch.int32)), "aten::embedding_dense_backward"),
    ("convolution_backward", lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
     (_leaf(2, 3, 9, 9), _leaf(4, 3, 3, 3), _leaf(4)), "aten::convolution_backward"),
    ("convolution_backward weights only", lambda x, w: F.conv2d(x.detach(), w, padding=1),
     (_leaf(2, 3, 6, 6), _leaf(4, 3, 3, 3)), "aten::convolution_backward"),
    ("convolution_backward groups dilation", lambda x, w: F.conv2d(x, w, groups=2, dilation=2),
     (_leaf(1, 4, 9, 9), _leaf(6, 2, 3, 3)), "aten::convolution_backward"),
    ("batch norm training", lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, training=True),
     (_leaf(2, 3, 4, 5), _leaf(3), _leaf(3, seed=1)), "aten::_native_batch_norm_legit_functional"),
    ("native_batch_norm_backward", lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, training=True),
     (_leaf(2, 3, 4, 5), _leaf(3), _leaf(3, seed=1)), "aten::native_batch_norm_backward"),
    ("batch norm training without affine", lambda x: F.batch_norm(x, torch.zeros(3), torch.ones(3), training=True),
     (_leaf(2, 3, 4, 5),), "aten::native_batch_norm_backward"),
    ("sdpa logsumexp", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
     (_leaf(1, 2, 5, 8), _leaf(1, 2, 6, 8, seed=1), _leaf(1, 2, 6, 8, seed=2)),
     "aten::_scaled_dot_product_flash_attention_for_cpu"),
    ("sdpa backward", lambda q, k, v: F.scaled_dot_product_attention(q, k, v),
     (_leaf(1, 2, 5, 8), _leaf(1, 2, 6, 8, seed=1), _leaf(1, 2, 6, 8, seed=2)),
     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    ("sdpa backward causal", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
     (_leaf(1, 2, 5, 8), _leaf(1, 2, 5, 8, seed=1), _leaf(1, 2, 5, 8, seed=2)),
     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    ("sdpa backward mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     (_leaf(2, 2, 5, 8), _leaf(2, 2, 6, 8, seed=1), _leaf(2, 2, 6, 8, seed=2), _r(2, 1, 5, 6, seed=3)),
     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    ("max_pool2d_with_indices_backward", lambda x: F.max_pool2d(x, 3, 2, 1), (_leaf(2, 3, 9, 9),),
     "aten::max_pool2d_with_indices_backward"),
    ("max_pool2d_with_indices_backward ties", lambda x: F.max_pool2d(torch.round(x), 2, 1),
     (_leaf(1, 2, 6, 6, seed=5),), "aten::max_pool2d_with_indices_backward"),
    ("batch norm without running statistics", lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     (_leaf(2, 3, 4, 5), _leaf(3), _leaf(3, seed=1)), "aten::_native_batch_norm_legit.no_stats"),
    ("native_batch_norm_backward weights only", lambda x, w, b: F.batch_norm(x.detach(), torch.zeros(3),
                                                                              torch.ones(3), w, b, training=True),
     (_leaf(2, 3, 4, 5), _leaf(3), _leaf(3, seed=1)), "aten::native_batch_norm_backward"),
    ("sdpa backward boolean mask", lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     (_leaf(2, 2, 5, 8), _leaf(2, 2, 6, 8, seed=1), _leaf(2, 2, 6, 8, seed=2),
      torch.tril(torch.ones(5, 6, dtype=torch.bool), diagonal=1)),
     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
]


@pytest.mark.parametrize("name,fn,inputs,op", TRAINED, ids=[t[0] for t in TRAINED])
def test_backward_row_runs_in_graphc(name, fn, inputs, op):
    for x in inputs:
        x.grad = None
    lowered = check_against_eager(fn, *inputs, table=ORACLE, train=True)
    assert op not in lowered.fallback, lowered.fallback


def test_embedding_backward_guard_and_bad_indices():
    """scale_grad_by_freq stays in torch; an index out of range is graphc's
    RuntimeFault naming its position, never a silent write out of bounds."""
    from graphc.errors import RuntimeFault
    w, i = _leaf(7, 6), torch.tensor([[0, 3, 3], [6, 1, 3]])
    lowered = check_against_eager(lambda w, i: F.embedding(i, w, scale_grad_by_freq=True), w, i, table=ORACLE,
                                  train=True)
    assert lowered.fallback["aten::embedding_dense_backward"] == 1, lowered.fallback
    fn = lambda g, i: aten.embedding_dense_backward(g, i, 7, -1, False)  # noqa: E731
    g = _r(2, 3, 6)
    lowered = check_against_eager(fn, g, i, table=ORACLE)
    assert "aten::embedding_dense_backward" not in lowered.fallback, lowered.fallback
    with pytest.raises(RuntimeFault, match=r"position \[1, 0\].*found 7"):
        torch.compile(fn, backend="graphc")(g, torch.tensor([[0, 3, 3], [7, 1, 3]]))


def test_embedding_bad_index_is_a_runtime_fault():
    """An index out of range is graphc's RuntimeFault naming its position, never a
    read out of bounds (eager torch raises an IndexError)."""
    from graphc.errors import RuntimeFault
    fn = lambda w, i: F.embedding(i, w)  # noqa: E731
    with pytest.raises(RuntimeFault, match=r"Embedding.*position \[1, 0\].*found 7"):
        torch.compile(fn, backend="graphc")(_r(7, 6), torch.tensor([[0, 3, 3], [7, 1, 3]]))
    with pytest.raises(RuntimeFault, match=r"position \[1\].*found -1"):
        torch.compile(lambda x, i: x.index_select(0, i), backend="graphc")(_r(5, 2), torch.tensor([0, -1]))


@pytest.mark.parametrize("shape", [(2, 4, 6), (2, 1, 6)], ids=["to its own shape", "broadcasting"])
def test_an_expand_read_by_two_regions(shape):
    """An expand folded away that another region reads is returned expanded, a
    view of its input as eager's expand is (here a bool mask, which no graphc op copies)."""
    def fn(c, x):
        m = c.expand(2, 4, 6)
        y = torch.cumsum(torch.where(m, x, 0.0), 0)   # (cumsum stays in torch: two regions)
        return torch.where(m, y, 1.0)
    lowered = check_against_eager(fn, _r(*shape) > 0, _r(2, 4, 6), table=ORACLE)
    assert lowered.regions == 2 and set(lowered.fallback) == {"aten::cumsum"}, lowered.fallback


def test_a_constant_and_an_input_read_by_torch():
    """A region returning a constant (an arange torch's cumsum reads) copies it into a
    tensor of its own; one returning an input unchanged (an expand to its own shape) does
    not take it as an input of its graphc graph."""
    def fn(i, x):
        return torch.cumsum(torch.arange(6), 0), x * 2, torch.cumsum(i.expand(1, -1), 0), torch.relu(x)
    lowered = check_against_eager(fn, torch.arange(6).view(1, 6), _r(6), table=ORACLE)
    assert set(lowered.fallback) == {"aten::cumsum"} and lowered.regions == 1, lowered.fallback


#: (name, function, inputs, the ATen op its guard leaves in torch)
REFUSED = [
    ("addmm beta", lambda x, w, b: torch.addmm(b, x, w, beta=2.0), (_r(4, 6), _r(6, 5), _r(5)), "aten::addmm"),
    ("add alpha", lambda a, b: torch.relu(torch.add(a, b, alpha=2.0)), (_r(4, 6), _r(4, 6, seed=1)),
     "aten::add.Tensor"),
    ("expand broadcasting", lambda x: torch.relu(x).expand(3, 4, 6) + 0, (_r(1, 4, 6),), "aten::expand"),
    ("layer_norm weight only", lambda x, w: F.layer_norm(x, (6,), w), (_r(3, 6), _r(6)), "aten::native_layer_norm"),
    ("conv transposed", lambda x, w: F.conv_transpose2d(x, w), (_r(1, 2, 4, 4), _r(2, 3, 3, 3)),
     "aten::convolution"),
    ("max_pool ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True), (_r(1, 2, 8, 8),),
     "aten::max_pool2d_with_indices"),
    ("int add alpha", lambda a, b: torch.add(a, b, alpha=2), (torch.arange(6), torch.arange(6)), "aten::add.Tensor"),
    ("int and float", lambda a, b: torch.relu(a + b), (torch.arange(6), _r(6)), "aten::add.Tensor"),
    ("int32 and int64", lambda a, b: a + b, (torch.arange(6, dtype=torch.int32), torch.arange(6)),
     "aten::add.Tensor"),
    ("int and a float number", lambda a: torch.relu(a * 0.5), (torch.arange(6),), "aten::mul.Tensor"),
    ("int equal to a float number", lambda a: torch.where(a == 2.5, 1.0, 2.0), (torch.arange(6),), "aten::eq.Scalar"),
    ("bool equal", lambda a, b: (a > 0) == (b > 0), (_r(4, 6), _r(4, 6, seed=1)), "aten::eq.Tensor"),
    ("bitwise_and of integers", lambda a, b: (a & b) + 1, (torch.arange(6), torch.arange(6)),
     "aten::bitwise_and.Tensor"),
    ("slice step 2", lambda x: torch.relu(x[:, ::2]), (_r(3, 4),), "aten::slice.Tensor"),
    ("int32 and a number beyond it", lambda a: a == 2 ** 40, (torch.arange(6, dtype=torch.int32),), "aten::eq.Scalar"),
    ("f32 to int64", lambda x: (x * 4).to(torch.int64) + 1, (_r(3, 4),), "aten::_to_copy"),
    ("expand into a matmul", lambda x, w: torch.relu(x).expand(3, 4, 6) @ w, (_r(1, 4, 6), _r(6, 5)),
     "aten::expand"),
    ("int expand", lambda i: i.expand(3, 6) + 1, (torch.arange(6).view(1, 6),), "aten::expand"),
    ("where broadcast by the condition", torch.where, (_r(4, 6) > 0, _r(6), _r(1)), "aten::where.self"),
    ("where of f64", lambda c, x: torch.where(c, x, 0.0), (_r(4, 6) > 0, _r(4, 6, dtype=torch.float64)),
     "aten::scalar_tensor"),
    ("embedding of an integer weight", lambda w, i: F.embedding(i, w) + 1, (torch.arange(12).view(6, 2),
                                                                            torch.tensor([1, 5])), "aten::embedding"),
    ("index_select on dim 1", lambda x, i: x.index_select(1, i), (_r(4, 6), torch.tensor([0, 5])),
     "aten::index_select"),
    ("index_select of f64", lambda x, i: x.index_select(0, i), (_r(4, 6, dtype=torch.float64), torch.tensor([0, 3])),
     "aten::index_select"),
]


@pytest.mark.parametrize("name,fn,inputs,op", REFUSED, ids=[t[0] for t in REFUSED])
def test_guard_leaves_the_node_in_torch(name, fn, inputs, op):
    lowered = check_against_eager(fn, *inputs, table=ORACLE)
    assert lowered.fallback[op] >= 1, lowered.fallback


def test_batch_norm_training_updates_the_running_statistics_as_eager():
    """BatchNorm2d in training: output, gradients and, after the step, running_mean
    and running_var (momentum, the unbiased variance) as eager's."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm2d(3, momentum=0.2).train()
    bn.running_mean.copy_(_r(3)); bn.running_var.copy_(_r(3).abs() + 0.5)
    twin = torch.nn.BatchNorm2d(3, momentum=0.2).train()
    twin.load_state_dict(bn.state_dict())
    x = _r(2, 3, 4, 5, seed=4)
    lowered = check_against_eager(lambda t: torch.relu(bn(t)), x, table=ORACLE, train=True,
                                  params=list(bn.parameters()))
    assert "aten::_native_batch_norm_legit_functional" not in lowered.fallback, lowered.fallback
    for _ in range(2):    # (check_against_eager stepped bn twice: eager, then compiled)
        twin(x)
    for name in ("running_mean", "running_var"):
        assert_tensors_close(getattr(bn, name), getattr(twin, name), ORACLE, name)


def test_batch_norm_training_under_bf16_autocast():
    """Conv -> BatchNorm2d -> ReLU trained under bf16 autocast: the batch norm's src
    is bf16, its weights and running statistics f32, and the statistics torch's
    trace saves bf16: graphc takes the forward and the backward (their statistics
    in f32, cast to and from the saved ones), outputs and gradients as eager's."""
    from graphc.tolerances import MODEL_BF16_AUTOCAST
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, padding=1, bias=False)
    bn = torch.nn.BatchNorm2d(8, momentum=0.2).train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        lowered = check_against_eager(lambda t: torch.relu(bn(conv(t))), _r(2, 3, 6, 7, seed=4),
                                      table=MODEL_BF16_AUTOCAST,
                                      train=True, params=list(conv.parameters()) + list(bn.parameters()))
    for op in ("aten::_native_batch_norm_legit_functional", "aten::native_batch_norm_backward"):
        assert op not in lowered.fallback, lowered.fallback


#: backward rows' guards: (name, function, leaf inputs, the ATen op left in torch) in a training step
REFUSED_TRAINED = [
    ("convolution_backward transposed", lambda x, w: F.conv_transpose2d(x, w), (_leaf(1, 2, 4, 4), _leaf(2, 3, 3, 3)),
     "aten::convolution_backward"),
    ("batch norm momentum 1", lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b, training=True,
                                                            momentum=1.0),
     (_leaf(2, 3, 4, 5), _leaf(3), _leaf(3, seed=1)), "aten::_native_batch_norm_legit_functional"),
    ("native_batch_norm_backward in eval", lambda x, w, b: F.batch_norm(x, torch.zeros(3), torch.ones(3), w, b),
     (_leaf(2, 3, 4, 5), _leaf(3), _leaf(3, seed=1)), "aten::native_batch_norm_backward"),
    ("sdpa backward gqa", lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     (_leaf(1, 4, 5, 8), _leaf(1, 2, 6, 8, seed=1), _leaf(1, 2, 6, 8, seed=2)),
     "aten::_scaled_dot_product_flash_attention_for_cpu_backward"),
    ("embedding_dense_backward by frequency", lambda w, i: F.embedding(i, w, scale_grad_by_freq=True),
     (_leaf(10, 6), torch.tensor([[1, 3, 3], [9, 0, 1]])), "aten::embedding_dense_backward"),
    ("max_pool2d_with_indices_backward ceil", lambda x: F.max_pool2d(x, 3, 2, ceil_mode=True),
     (_leaf(1, 2, 8, 8),), "aten::max_pool2d_with_indices_backward"),
]


@pytest.mark.parametrize("name,fn,inputs,op", REFUSED_TRAINED, ids=[t[0] for t in REFUSED_TRAINED])
def test_backward_guard_leaves_the_node_in_torch(name, fn, inputs, op):
    for x in inputs:
        x.grad = None
    lowered = check_against_eager(fn, *inputs, table=ORACLE, train=True)
    assert lowered.fallback[op] >= 1, lowered.fallback


def test_every_row_is_tested_and_in_the_readme_table():
    tested = {t[3] for t in TAKEN + TRAINED} | {"aten::_native_batch_norm_legit_no_training"}
    rows = {id(r): r for r in TABLE.values()}
    for r in rows.values():
        names = {t.name() for t in r.targets}
        assert names & tested or r.ops.startswith(("StaticReshape (identity)", "ReduceMean", "Concat")) or \
            names & {"aten::maximum", "aten::abs"}, f"row {sorted(names)} has no test"
    table = markdown()
    assert all(f"`{t.name()}`" in table for t in TABLE)


def test_the_readme_shows_the_table_as_it_is():
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert markdown() in readme
