"""Every example of the five seed documents (/work/shared/seeds), translated
literally into graphc graphs: the same shapes, data types, keyword arguments
and defaults, compiled and checked against the reference (itself checked
against PyTorch in tests/ops/<family>) and, where the document states the result,
against that statement."""
import ml_dtypes
import numpy as np
import pytest

import graphc
from graphc import Graph, InvalidDataType, InvalidGraphOp, LogicalTensor, Op
from graphc.fill import make_inputs
from graphc.reference import run as reference_run
from support.compare import assert_close, assert_outputs
from support.compiled import check_compiled
from support.graphs import graph_of

BF16 = ml_dtypes.bfloat16


# ------------------------------------------------------------ 000: ttnn.add_bw
def _add_bw_tensors():
    grad_tensor = np.array([[1, 2], [3, 4]], dtype=BF16)
    tensor1 = np.array([[1, 2], [3, 4]], dtype=BF16)
    tensor2 = np.array([[1, 2], [3, 4]], dtype=BF16)
    return grad_tensor, tensor1, tensor2


def test_add_bw_example_two_tensors():
    """output = ttnn.add_bw(grad_tensor, tensor1, tensor2): both gradients, by default."""
    grad_tensor, tensor1, tensor2 = _add_bw_tensors()
    g = graph_of(Op(0, "AddBackward", [LogicalTensor(0, "bf16", [2, 2]), LogicalTensor(1, "bf16", [2, 2]),
                                       LogicalTensor(2, "bf16", [2, 2])],
                    [LogicalTensor(3, "bf16", [-1, -1]), LogicalTensor(4, "bf16", [-1, -1])]))
    out = check_compiled(g, {0: grad_tensor, 1: tensor1, 2: tensor2}, exact=True)
    # d(a + b)/da = d(a + b)/db = 1: each gradient is grad_tensor
    assert_outputs(out, {3: grad_tensor, 4: grad_tensor}, exact=True)


def test_add_bw_example_scalar():
    """output = ttnn.add_bw(grad_tensor, tensor1, scalar) with scalar = 2: the
    outputs left at their default give the one gradient there is."""
    grad_tensor, tensor1, _ = _add_bw_tensors()
    scalar = 2  # a Number: no tensor, so no src_1 port and no diff_src_1
    assert isinstance(scalar, int)
    g = graph_of(Op(0, "AddBackward", [LogicalTensor(0, "bf16", [2, 2]), LogicalTensor(1, "bf16", [2, 2])],
                    [LogicalTensor(3, "bf16", [-1, -1])]))
    assert g.ops[0].output_names == ["diff_src_0"]
    out = check_compiled(g, {0: grad_tensor, 1: tensor1}, exact=True)
    assert_outputs(out, {3: grad_tensor}, exact=True)


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_add_bw_supported_ranks_broadcast(rank):
    """The note's ranks 2, 3, 4 in BFLOAT16, with broadcasting (tensor2 one row)."""
    shape = [2, 3, 4, 5][-rank:]
    row = [1] * (rank - 1) + [shape[-1]]
    g = graph_of(Op(0, "AddBackward", [LogicalTensor(0, "bf16", shape), LogicalTensor(1, "bf16", shape),
                                       LogicalTensor(2, "bf16", row)],
                    [LogicalTensor(3, "bf16", [-1] * rank), LogicalTensor(4, "bf16", [-1] * rank)]))
    check_compiled(g)


def test_add_bw_explicit_required_outputs_still_checked():
    """are_required_outputs=[True, True] given with a scalar operand: refused, naming the op."""
    with pytest.raises(InvalidGraphOp, match="src_1 is absent"):
        graph_of(Op(0, "AddBackward", [LogicalTensor(0, "f32", [2, 2]), LogicalTensor(1, "f32", [2, 2])],
                    [LogicalTensor(3, "f32", [2, 2]), LogicalTensor(4, "f32", [2, 2])],
                    {"are_required_outputs": [True, True]}))


# ------------------------------------------------------- 001: ttnn.embedding_bw
def test_embedding_bw_example():
    """The document's example, at its sizes: batch 2, seq 1024, dim 4096, 3200
    embeddings; uint32 indices, bf16 weights and grad [1, 1, batch * seq, dim],
    dtype=bfloat16."""
    batch_size, seq_len, embedding_dim, num_embeddings = 2, 1024, 4096, 3200
    rng = np.random.default_rng(0)
    input_shape = (batch_size, seq_len)
    input_index = rng.integers(0, num_embeddings, input_shape)
    input_tensor = input_index.astype(np.uint32)
    weights_shape = (num_embeddings, embedding_dim)
    weights = rng.standard_normal(weights_shape).astype(BF16)
    grad_shape = (1, 1, batch_size * seq_len, embedding_dim)
    grad_tensor = rng.standard_normal(grad_shape).astype(BF16)
    g = graph_of(Op(0, "EmbeddingBackward",
                    [LogicalTensor(0, "u32", input_shape), LogicalTensor(1, "bf16", weights_shape),
                     LogicalTensor(2, "bf16", grad_shape)],
                    [LogicalTensor(3, "bf16", [-1, -1])], {"dtype": "bf16"}))
    out = check_compiled(g, {0: input_tensor, 1: weights, 2: grad_tensor})
    assert out[3].shape == weights_shape and out[3].dtype == BF16
    # rows no index names get no gradient
    unused = np.setdiff1d(np.arange(num_embeddings), input_index.reshape(-1))
    assert unused.size and not out[3][unused].astype(np.float32).any()


# ------------------------------------------------------------ 002: aclnnSwiGluGrad
@pytest.mark.parametrize("dt", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_swiglu_grad_prototype(dt, dim):
    """aclnnSwiGluGrad(yGrad, x, dim, out): yGrad has x's shape with dim halved,
    out x's; dim in [-x.dim(), x.dim() - 1]; FLOAT32, FLOAT16, BFLOAT16.  (The
    document's sample code did not survive extraction: this is its prototype.)"""
    x_shape = [4, 6, 8]
    axis = dim % 3
    y_shape = list(x_shape)
    y_shape[axis] //= 2
    g = graph_of(Op(0, "SwiGluGrad", [LogicalTensor(0, dt, y_shape), LogicalTensor(1, dt, x_shape)],
                    [LogicalTensor(2, dt, [-1, -1, -1])], {"dim": dim}))
    assert g.tensors[2].shape == tuple(x_shape)
    ins = make_inputs(g, seed=1)
    out = check_compiled(g, ins)
    # the formula: x = [A, B] along dim; out = [yGrad*B*s*(1 + A*(1 - s)), yGrad*A*s], s = sigmoid(A)
    y, x = (ins[i].astype(np.float64) for i in (0, 1))
    a, b = np.split(x, 2, axis=axis)
    s = 1 / (1 + np.exp(-a))
    want = np.concatenate([y * b * s * (1 + a * (1 - s)), y * a * s], axis=axis)
    assert_close(out[2].astype(np.float64), want, graphc.DataType(dt), what=f"{dt} dim {dim}")


# ------------------------------------------------ 003: ttnn.layer_norm_post_all_gather
def _distributed_ln(stats_dt="bf16", dst_dt=None, **attrs):
    pre = Op(0, "LayerNormPreAllGather", [LogicalTensor(0, "bf16", [1, 1, 32, 32])],
             [LogicalTensor(1, stats_dt, None)])
    if dst_dt is not None:
        attrs["dtype"] = dst_dt
    post = Op(1, "LayerNormPostAllGather", [LogicalTensor(0, "bf16", [1, 1, 32, 32]), LogicalTensor(1, stats_dt, None)],
              [LogicalTensor(2, dst_dt or "bf16", None)], attrs)
    return graph_of(pre, post)


def test_layer_norm_post_all_gather_example():
    """input_tensor = ttnn.rand([1, 1, 32, 32], BFLOAT16); stats =
    layer_norm_pre_all_gather(input_tensor) (bf16 stats, as the document's table);
    output = layer_norm_post_all_gather(input_tensor, stats), which the document
    says equals ttnn.layer_norm(input_tensor) (epsilon 1e-12)."""
    g = _distributed_ln()
    assert g.tensors[1].dtype == graphc.DataType.bf16 and g.tensors[2].shape == (1, 1, 32, 32)
    rng = np.random.default_rng(3)
    input_tensor = rng.random((1, 1, 32, 32)).astype(BF16)
    out = check_compiled(g, {0: input_tensor})
    assert out[2].dtype == BF16  # "the same dtype as the input_tensor"
    x = input_tensor.astype(np.float64)
    layer_norm = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    # the stats are bf16 (8 bits): the mean and variance round to ~2^-9 relative
    err = np.abs(out[2].astype(np.float64) - layer_norm).max()
    assert err < 0.05, err


@pytest.mark.parametrize("dst_dt", ["f32", "bf16", "f16"])
def test_layer_norm_post_all_gather_dtype_keyword(dst_dt):
    """dtype (ttnn.DataType, optional): the data type of the output tensor."""
    g = _distributed_ln(dst_dt=dst_dt, epsilon=1e-5)
    assert g.tensors[2].dtype == graphc.DataType(dst_dt)
    check_compiled(g)


def test_layer_norm_post_all_gather_weight_bias_keywords():
    """weight and bias (bf16, ROW_MAJOR [W]) given together, f32 stats."""
    g = Graph()
    g.add_op(Op(1, "LayerNormPostAllGather",
                [LogicalTensor(0, "bf16", [1, 1, 32, 32]), LogicalTensor(1, "bf16", [1, 1, 32, 2]),
                 LogicalTensor(3, "bf16", [32]), LogicalTensor(4, "bf16", [32])],
                [LogicalTensor(2, "bf16", None)], {"epsilon": 1e-12}))
    check_compiled(g.finalize())


def test_layer_norm_post_all_gather_dtype_mismatch_refused():
    with pytest.raises(InvalidDataType, match="dtype attribute"):
        graph_of(Op(1, "LayerNormPostAllGather", [LogicalTensor(0, "bf16", [1, 32]), LogicalTensor(1, "bf16", [1, 2])],
                    [LogicalTensor(2, "f16", [1, 32])], {"dtype": "f32"}))


# ------------------------------------------- 004: BatchNormTrainingBackward (oneDNN doc)
def _bn_bwd(dt, stats_dt, shape, attrs, gamma=True, diff_outputs=2):
    c = shape[-1] if attrs.get("data_format", "NXC") == "NXC" else shape[1]
    ins = [LogicalTensor(0, dt, shape), LogicalTensor(1, dt, shape), LogicalTensor(2, stats_dt, [c]),
           LogicalTensor(3, stats_dt, [c])]
    if gamma:
        ins.append(LogicalTensor(4, stats_dt, [c]))
    outs = [LogicalTensor(5, dt, [-1] * len(shape))] + [LogicalTensor(6 + i, stats_dt, [-1])
                                                         for i in range(diff_outputs)]
    return graph_of(Op(0, "BatchNormTrainingBackward", ins, outs, attrs))


def test_bn_bwd_epsilon_required():
    with pytest.raises(InvalidGraphOp, match="epsilon"):
        _bn_bwd("f32", "f32", [2, 3, 4, 5], {})


def test_bn_bwd_data_format_defaults_to_nxc():
    """data_format defaults to NXC: the channels are the last dim."""
    g = _bn_bwd("f32", "f32", [2, 3, 4, 5], {"epsilon": 1e-5})
    assert g.tensors[6].shape == (5,) and g.tensors[7].shape == (5,)
    check_compiled(g)


@pytest.mark.parametrize("dt, stats_dt", [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32")])
@pytest.mark.parametrize("fmt", ["NXC", "NCX"])
def test_bn_bwd_supported_data_types(dt, stats_dt, fmt):
    """The doc's table: src/diff_dst/diff_src f32, bf16 or f16; mean, variance,
    gamma, diff_gamma and diff_beta f32 (or bf16 with bf16 data)."""
    check_compiled(_bn_bwd(dt, stats_dt, [2, 3, 4, 5], {"epsilon": 1e-5, "data_format": fmt}))


def test_bn_bwd_f16_stats_refused():
    with pytest.raises(InvalidDataType):
        _bn_bwd("f16", "f16", [2, 3, 4, 5], {"epsilon": 1e-5})


def test_bn_bwd_without_gamma_and_diff_gamma_beta():
    """gamma (input 4) optional; diff_gamma and diff_beta neither provided: only diff_src."""
    g = _bn_bwd("f32", "f32", [2, 3, 4, 5], {"epsilon": 1e-5}, gamma=False, diff_outputs=0)
    assert g.ops[0].output_names == ["diff_src"]
    check_compiled(g)


def test_bn_bwd_gamma_ignored_without_diff_gamma_beta():
    """"If neither provided, the input gamma will be ignored": diff_src with and
    without gamma agree."""
    with_gamma = _bn_bwd("f32", "f32", [2, 3, 4, 5], {"epsilon": 1e-5}, gamma=True, diff_outputs=0)
    without = _bn_bwd("f32", "f32", [2, 3, 4, 5], {"epsilon": 1e-5}, gamma=False, diff_outputs=0)
    ins = make_inputs(with_gamma, seed=2)
    a = check_compiled(with_gamma, ins)
    b = check_compiled(without, {k: v for k, v in ins.items() if k != 4})
    assert_outputs(a, b, exact=True)


def test_bn_bwd_diff_gamma_without_diff_beta_refused():
    """diff_gamma and diff_beta are provided both or neither."""
    with pytest.raises(InvalidGraphOp):
        _bn_bwd("f32", "f32", [2, 3, 4, 5], {"epsilon": 1e-5}, diff_outputs=1)


def test_reference_agrees_with_compiled_inputs_untouched():
    """Running a seed graph leaves its inputs as they were (no output written over them)."""
    g = _distributed_ln()
    ins = make_inputs(g, seed=5)
    keep = {k: v.copy() for k, v in ins.items()}
    graphc.run(g, ins)
    reference_run(g, ins)
    assert_outputs(ins, keep, exact=True)
