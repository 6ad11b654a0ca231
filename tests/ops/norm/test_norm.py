"""Normalization ops: schema rules, shape inference and hand-checked values
(BatchNormInference, BatchNormForwardTraining, BatchNormTrainingBackward,
LayerNorm, LayerNormBackward, GroupNorm, RMSNorm)."""
import numpy as np
import pytest

from graphc.builder import single_op_graph
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape
from support import inferred_shapes, run_single

EPS = {"epsilon": 0.0625}


def bn_inference(src=("f32", [2, 3, 4]), c=("f32", [3]), fmt="NCX", **attrs):
    return single_op_graph("BatchNormInference", [src] + [c] * 4, [(src[0], [-1] * len(src[1]))],
                           {**EPS, "data_format": fmt, **attrs})


# ------------------------------------------------------------------- BatchNorm
def test_bn_inference_channel_dim_per_data_format():
    assert bn_inference(("f32", [2, 3, 4]), ("f32", [3]), "NCX").ops[0].outputs[0].shape == (2, 3, 4)
    assert bn_inference(("f32", [2, 3, 4]), ("f32", [4]), "NXC").ops[0].outputs[0].shape == (2, 3, 4)
    with pytest.raises(InvalidShape):
        bn_inference(("f32", [2, 3, 4]), ("f32", [3]), "NXC")


def test_bn_default_data_format_is_nxc():
    g = single_op_graph("BatchNormInference", [("f32", [2, 3, 5])] + [("f32", [5])] * 4, [("f32", [-1] * 3)], EPS)
    assert g.ops[0].attr("data_format") == "NXC"


def test_bn_unknown_channel_taken_from_stats():
    assert bn_inference(("f32", [2, -1, 4]), ("f32", [3])).ops[0].outputs[0].shape == (2, 3, 4)


@pytest.mark.parametrize("src, c", [(("f32", [3]), ("f32", [3])),          # no batch dim
                                    (("f32", [2, 3, 4]), ("f32", [1, 3])),   # stats not 1-D
                                    (("f32", [2, 3, 4]), ("f32", [4]))])     # wrong channel count
def test_bn_bad_shapes(src, c):
    with pytest.raises(InvalidShape):
        bn_inference(src, c)


@pytest.mark.parametrize("attrs", [{"epsilon": 0.0}, {"epsilon": -1.0}, {"data_format": "NCHW"}])
def test_bn_bad_attributes(attrs):
    with pytest.raises(InvalidGraphOp):
        bn_inference(**attrs)


def test_bn_epsilon_required():
    with pytest.raises(InvalidGraphOp):
        single_op_graph("BatchNormInference", [("f32", [2, 3])] + [("f32", [3])] * 4, [("f32", [2, 3])],
                        {"data_format": "NCX"})


@pytest.mark.parametrize("src, stats, ok", [
    ("f32", "f32", True), ("bf16", "f32", True), ("bf16", "bf16", True), ("f16", "f32", True),
    ("f32", "bf16", False), ("f16", "f16", False), ("bf16", "f16", False)])
def test_bn_dtype_table(src, stats, ok):
    if ok:
        bn_inference((src, [2, 3]), (stats, [3]))
    else:
        with pytest.raises(InvalidDataType):
            bn_inference((src, [2, 3]), (stats, [3]))


def test_bn_stats_share_one_dtype():
    ins = [("bf16", [2, 3]), ("bf16", [3]), ("f32", [3]), ("f32", [3]), ("f32", [3])]
    with pytest.raises(InvalidDataType):
        single_op_graph("BatchNormInference", ins, [("bf16", [2, 3])], {**EPS, "data_format": "NCX"})


def test_bn_inference_values():
    x = np.array([[1.0, 2.0], [3.0, 6.0]], np.float32)     # NXC: channels are columns
    gamma, beta = np.array([2.0, 1.0], np.float32), np.array([0.5, -1.0], np.float32)
    mean, var = np.array([2.0, 4.0], np.float32), np.array([0.9375, 3.9375], np.float32)
    (y,) = run_single("BatchNormInference", [x, gamma, beta, mean, var], [("f32", [2, 2])], EPS)
    np.testing.assert_allclose(y, [[2 * -1 / 1 + 0.5, (2 - 4) / 2 - 1], [2 * 1 / 1 + 0.5, (6 - 4) / 2 - 1]])


def bn_training(n_affine=2, momentum=None):
    ins = [("f32", [2, 3, 4])] + [("f32", [3])] * (2 + n_affine)
    attrs = {**EPS, "data_format": "NCX"} | ({} if momentum is None else {"momentum": momentum})
    return inferred_shapes("BatchNormForwardTraining", ins, [("f32", [-1] * 3)] + [("f32", [-1])] * 4, attrs)


def test_bn_training_infers_stats_shapes():
    assert bn_training() == [(2, 3, 4)] + [(3,)] * 4
    assert bn_training(n_affine=0) == [(2, 3, 4)] + [(3,)] * 4


def test_bn_training_gamma_without_beta():
    with pytest.raises(InvalidGraphOp):
        bn_training(n_affine=1)


@pytest.mark.parametrize("momentum", [0.0, -0.5])
def test_bn_training_momentum_positive(momentum):
    with pytest.raises(InvalidGraphOp):
        bn_training(momentum=momentum)


def test_bn_training_needs_all_five_outputs():
    with pytest.raises(InvalidGraphOp):
        single_op_graph("BatchNormForwardTraining", [("f32", [2, 3])] + [("f32", [3])] * 2,
                        [("f32", [2, 3]), ("f32", [3])], {**EPS, "data_format": "NCX"})


def test_bn_training_values_and_default_momentum():
    x = np.array([[1.0, 10.0], [3.0, 14.0]], np.float32)        # NXC, C = 2
    old_mean, old_var = np.array([0.0, 2.0], np.float32), np.array([1.0, 1.0], np.float32)
    y, rm, rv, bm, bv = run_single("BatchNormForwardTraining", [x, old_mean, old_var],
                                   [("f32", [2, 2])] + [("f32", [2])] * 4, {"epsilon": 0.0625})
    np.testing.assert_allclose(bm, [2.0, 12.0])
    np.testing.assert_allclose(bv, [1.0, 4.0])
    np.testing.assert_allclose(rm, [1.0, 7.0])                     # 0.5 * old + 0.5 * batch
    np.testing.assert_allclose(rv, [1.0, 2.5])
    np.testing.assert_allclose(y, [[-1 / 1.0307764, -2 / 2.0155644], [1 / 1.0307764, 2 / 2.0155644]], rtol=1e-6)


def bn_backward(n_out, n_in=5, dst_shape=(2, 3, 4)):
    ins = [("f32", [2, 3, 4]), ("f32", list(dst_shape))] + [("f32", [3])] * (n_in - 2)
    outs = [("f32", [-1] * 3)] + [("f32", [-1])] * (n_out - 1)
    return inferred_shapes("BatchNormTrainingBackward", ins, outs, {**EPS, "data_format": "NCX"})


def test_bn_backward_shapes():
    assert bn_backward(3) == [(2, 3, 4), (3,), (3,)]
    assert bn_backward(3, n_in=4) == [(2, 3, 4), (3,), (3,)]
    assert bn_backward(1) == [(2, 3, 4)]


def test_bn_backward_diff_gamma_without_diff_beta():
    with pytest.raises(InvalidGraphOp):
        bn_backward(2)


def test_bn_backward_diff_dst_shape():
    with pytest.raises(InvalidShape):
        bn_backward(3, dst_shape=(2, 3, 5))


def test_bn_backward_ignores_gamma_without_diff_outputs():
    rng = np.random.default_rng(0)
    x, dy = rng.standard_normal((4, 3)).astype(np.float32), rng.standard_normal((4, 3)).astype(np.float32)
    mean, var = x.mean(0), x.var(0)
    gamma = np.array([2.0, 3.0, 4.0], np.float32)
    (with_gamma,) = run_single("BatchNormTrainingBackward", [x, dy, mean, var, gamma], [("f32", [4, 3])], EPS)
    (without,) = run_single("BatchNormTrainingBackward", [x, dy, mean, var], [("f32", [4, 3])], EPS)
    np.testing.assert_array_equal(with_gamma, without)
    scaled = run_single("BatchNormTrainingBackward", [x, dy, mean, var, gamma],
                        [("f32", [4, 3]), ("f32", [3]), ("f32", [3])], EPS)[0]
    np.testing.assert_allclose(scaled, without * gamma, rtol=1e-5, atol=1e-6)


def test_bn_backward_dtype_table():
    ins = [("bf16", [2, 3]), ("bf16", [2, 3])] + [("bf16", [3])] * 3
    single_op_graph("BatchNormTrainingBackward", ins, [("bf16", [2, 3]), ("bf16", [3]), ("bf16", [3])], EPS)
    with pytest.raises(InvalidDataType):       # stats dtypes must agree
        single_op_graph("BatchNormTrainingBackward", ins, [("bf16", [2, 3]), ("f32", [3]), ("f32", [3])], EPS)
    ins = [("f16", [2, 3]), ("f16", [2, 3])] + [("f16", [3])] * 2
    with pytest.raises(InvalidDataType):       # f16 takes f32 statistics only
        single_op_graph("BatchNormTrainingBackward", ins, [("f16", [2, 3])], EPS)


# ------------------------------------------------------------------- LayerNorm
def layernorm(src=(2, 3, 4), n_affine=2, n_out=3, gamma=None, **attrs):
    g = list(src[-1:]) if gamma is None else gamma
    ins = [("f32", list(src))] + [("f32", g)] * n_affine
    outs = [("f32", [-1] * len(src))] + [("f32", [-1] * (len(src) - 1))] * (n_out - 1)
    return inferred_shapes("LayerNorm", ins, outs, attrs)


def test_layernorm_shapes():
    assert layernorm() == [(2, 3, 4), (2, 3), (2, 3)]
    assert layernorm(gamma=[3, 4], n_out=1, begin_norm_axis=1, keep_stats=False) == [(2, 3, 4)]
    assert inferred_shapes("LayerNorm", [("f32", [2, 3, 4]), ("f32", [3, 4]), ("f32", [3, 4])],
                  [("f32", [-1] * 3), ("f32", [-1]), ("f32", [-1])], {"begin_norm_axis": -2}) == \
        [(2, 3, 4), (2,), (2,)]


def test_layernorm_affine_rules():
    with pytest.raises(InvalidGraphOp):           # use_affine (default true) needs gamma and beta
        layernorm(n_affine=0)
    with pytest.raises(InvalidGraphOp):           # gamma without beta
        layernorm(n_affine=1, use_affine=False)
    assert layernorm(n_affine=0, use_affine=False)[0] == (2, 3, 4)
    assert layernorm(n_affine=2, use_affine=False)[0] == (2, 3, 4)


def test_layernorm_stats_rules():
    with pytest.raises(InvalidGraphOp):           # keep_stats (default true) needs mean and variance
        layernorm(n_out=1)
    with pytest.raises(InvalidGraphOp):           # mean without variance
        layernorm(n_out=2, keep_stats=False)
    assert layernorm(n_out=1, keep_stats=False) == [(2, 3, 4)]


@pytest.mark.parametrize("axis", [3, -4])
def test_layernorm_begin_norm_axis_range(axis):
    with pytest.raises(InvalidGraphOp):
        layernorm(begin_norm_axis=axis)


@pytest.mark.parametrize("gamma, axis", [([3], -1), ([4, 1], -1), ([4], -2), ([12], -2)])
def test_layernorm_gamma_shape(gamma, axis):
    with pytest.raises(InvalidShape):
        layernorm(gamma=gamma, begin_norm_axis=axis)


def test_layernorm_dtype_table():
    ins = [("f16", [2, 4]), ("f16", [4]), ("f16", [4])]
    with pytest.raises(InvalidDataType):
        single_op_graph("LayerNorm", ins, [("f16", [2, 4])], {"keep_stats": False})
    single_op_graph("LayerNorm", [("bf16", [2, 4]), ("bf16", [4]), ("bf16", [4])],
                    [("bf16", [2, 4]), ("bf16", [2]), ("bf16", [2])])


def test_layernorm_values_without_affine():
    x = np.array([[1.0, 3.0], [0.0, 4.0]], np.float32)
    y, mean, var = run_single("LayerNorm", [x], [("f32", [2, 2]), ("f32", [2]), ("f32", [2])],
                              {"use_affine": False, "epsilon": 0.0625})
    np.testing.assert_allclose(mean, [2.0, 2.0])
    np.testing.assert_allclose(var, [1.0, 4.0])
    np.testing.assert_allclose(y, [[-1 / 1.0307764, 1 / 1.0307764], [-2 / 2.0155644, 2 / 2.0155644]], rtol=1e-6)


def ln_backward(n_affine=2, n_out=3, stats=(2, 3), **attrs):
    ins = [("f32", [2, 3, 4])] * 2 + [("f32", list(stats))] * 2 + [("f32", [4])] * n_affine
    outs = [("f32", [-1] * 3)] + [("f32", [-1])] * (n_out - 1)
    return inferred_shapes("LayerNormBackward", ins, outs, attrs)


def test_layernorm_backward_shapes():
    assert ln_backward() == [(2, 3, 4), (4,), (4,)]
    assert ln_backward(n_affine=1) == [(2, 3, 4), (4,), (4,)]     # beta is optional
    assert ln_backward(n_affine=0, n_out=1, use_affine=False) == [(2, 3, 4)]


@pytest.mark.parametrize("n_affine, n_out, use_affine", [
    (0, 3, True),    # use_affine needs gamma
    (2, 1, True),    # use_affine needs diff_gamma and diff_beta
    (2, 2, True),    # diff_gamma without diff_beta
    (0, 3, False),   # diff_gamma / diff_beta without use_affine
])
def test_layernorm_backward_affine_rules(n_affine, n_out, use_affine):
    with pytest.raises(InvalidGraphOp):
        ln_backward(n_affine=n_affine, n_out=n_out, use_affine=use_affine)


def test_layernorm_backward_stats_shape():
    with pytest.raises(InvalidShape):
        ln_backward(stats=(2, 4))


# ------------------------------------------------------------------- GroupNorm
def groupnorm(src=(2, 6, 3), groups=3, fmt="NCX", c=6, n_out=3, **attrs):
    ins = [("f32", list(src)), ("f32", [c]), ("f32", [c])]
    outs = [("f32", [-1] * len(src))] + [("f32", [-1, -1])] * (n_out - 1)
    return inferred_shapes("GroupNorm", ins, outs, {"groups": groups, "data_format": fmt, **attrs})


def test_groupnorm_shapes():
    assert groupnorm() == [(2, 6, 3), (2, 3), (2, 3)]
    assert groupnorm(src=(2, 3, 6), fmt="NXC") == [(2, 3, 6), (2, 3), (2, 3)]
    assert groupnorm(src=(2, -1, 3)) == [(2, 6, 3), (2, 3), (2, 3)]
    assert groupnorm(n_out=1, keep_stats=False) == [(2, 6, 3)]


@pytest.mark.parametrize("groups", [4, 12])
def test_groupnorm_groups_divide_channels(groups):
    with pytest.raises(InvalidShape):
        groupnorm(groups=groups)


def test_groupnorm_rules():
    with pytest.raises(InvalidGraphOp):
        groupnorm(groups=0)
    with pytest.raises(InvalidGraphOp):
        groupnorm(n_out=1)                    # keep_stats defaults to true
    with pytest.raises(InvalidShape):
        groupnorm(c=3)                        # gamma per channel
    with pytest.raises(InvalidGraphOp):       # use_affine defaults to true
        single_op_graph("GroupNorm", [("f32", [2, 6])], [("f32", [2, 6])], {"groups": 2, "keep_stats": False})


def test_groupnorm_groups_are_contiguous_channel_blocks():
    x = np.array([[1.0, 3.0, 10.0, 30.0]], np.float32)          # NXC, 2 groups of 2 channels
    y, mean, var = run_single("GroupNorm", [x], [("f32", [1, 4]), ("f32", [1, 2]), ("f32", [1, 2])],
                              {"groups": 2, "use_affine": False, "epsilon": 1e-30})
    np.testing.assert_allclose(mean, [[2.0, 20.0]])
    np.testing.assert_allclose(var, [[1.0, 100.0]])
    np.testing.assert_allclose(y, [[-1, 1, -1, 1]], rtol=1e-6)


# --------------------------------------------------------------------- RMSNorm
@pytest.mark.parametrize("gamma", [[4], [3, 1], [1, 4], [2, 3, 4]])
def test_rmsnorm_gamma_broadcasts(gamma):
    assert inferred_shapes("RMSNorm", [("f32", [2, 3, 4]), ("f32", gamma)], [("f32", [-1] * 3)]) == [(2, 3, 4)]


@pytest.mark.parametrize("gamma", [[3], [2, 1, 3, 4], [5, 4]])
def test_rmsnorm_gamma_must_broadcast(gamma):
    with pytest.raises(InvalidShape):
        inferred_shapes("RMSNorm", [("f32", [2, 3, 4]), ("f32", gamma)], [("f32", [-1] * 3)])


@pytest.mark.parametrize("src, gamma, ok", [("f16", "f16", True), ("bf16", "bf16", True), ("f16", "f32", True),
                                            ("f32", "f16", False), ("f16", "bf16", False)])
def test_rmsnorm_dtype_table(src, gamma, ok):
    if ok:
        single_op_graph("RMSNorm", [(src, [2, 4]), (gamma, [4])], [(src, [2, 4])])
    else:
        with pytest.raises(InvalidDataType):
            single_op_graph("RMSNorm", [(src, [2, 4]), (gamma, [4])], [(src, [2, 4])])


def test_rmsnorm_values():
    x = np.array([[3.0, 4.0]], np.float32)                   # mean square 12.5
    (y,) = run_single("RMSNorm", [x, np.array([1.0, 2.0], np.float32)], [("f32", [1, 2])], {"epsilon": 3.5})
    np.testing.assert_allclose(y, [[3 / 4, 2 * 4 / 4]])
