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
]


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
    ("int add", lambda a, b: a + b, (torch.arange(6), torch.arange(6)), "aten::add.Tensor"),
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
            names & {"aten::mul.Scalar", "aten::maximum", "aten::abs"}, f"row {sorted(names)} has no test"
    table = markdown()
    assert all(f"`{t.name()}`" in table for t in TABLE)


def test_the_readme_shows_the_table_as_it_is():
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert markdown() in readme
