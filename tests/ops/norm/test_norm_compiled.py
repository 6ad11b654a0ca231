"""Generated kernels of the normalization ops (BatchNormInference,
BatchNormForwardTraining, BatchNormTrainingBackward, LayerNorm,
LayerNormBackward, GroupNorm, RMSNorm) against graphc's numpy reference: every
dtype row of their schemas, NCX and NXC, with and without the optional ports,
ranks 2 to 5, non-dense strides, shapes large enough for each threading mode
(groups per thread, rows per thread), and the corpus graphs."""
import pytest

import graphc
from graphc.builder import GraphBuilder
from support import channels, check_compiled, corpus_files, one_op, strides

EPS = {"epsilon": 0.0625}


# --------------------------------------------------------------- BatchNorm
# (src dtype, stats dtype): every row of the schemas' dtype tables
BN_DTYPES = [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32")]
# (shape, data_format): ranks 2..5, NCX and NXC, size-1 dims
BN_SHAPES = [([2, 6, 5, 7], "NCX"), ([3, 5, 4], "NXC"), ([8, 5], "NCX"), ([2, 3, 2, 1, 4], "NCX"),
             ([2, 4, 3, 6], "NXC")]


def bn_inference(shape, fmt, dt=("f32", "f32"), src_strides=None):
    c = [(dt[1], [channels(shape, fmt)])]
    return one_op("BatchNormInference", [(dt[0], shape, src_strides)] + c * 4, [(dt[0], shape)],
                  {**EPS, "data_format": fmt})


@pytest.mark.parametrize("shape,fmt", BN_SHAPES)
def test_batchnorm_inference_shapes(shape, fmt):
    check_compiled(bn_inference(shape, fmt))


@pytest.mark.parametrize("dt", BN_DTYPES[1:])
def test_batchnorm_inference_dtypes(dt):
    check_compiled(bn_inference([2, 3, 4, 5], "NXC", dt))


def test_batchnorm_inference_strided():
    shape = [2, 6, 5, 7]
    check_compiled(bn_inference(shape, "NCX", src_strides=strides(shape, [0, 2, 3, 1], pad=2)))


def bn_forward(shape, fmt, dt=("f32", "f32"), affine=True, momentum=None, src_strides=None):
    c = [(dt[1], [channels(shape, fmt)])]
    attrs = {**EPS, "data_format": fmt}
    if momentum is not None:
        attrs["momentum"] = momentum
    return one_op("BatchNormForwardTraining", [(dt[0], shape, src_strides)] + c * (4 if affine else 2),
                  [(dt[0], shape)] + c * 4, attrs)


@pytest.mark.parametrize("shape,fmt,affine,momentum", [
    ([2, 6, 5, 7], "NCX", True, 0.3), ([3, 5, 4], "NXC", False, None), ([8, 5], "NCX", True, None),
    ([2, 3, 2, 1, 4], "NXC", False, 0.9)])
def test_batchnorm_forward_training(shape, fmt, affine, momentum):
    check_compiled(bn_forward(shape, fmt, affine=affine, momentum=momentum))


@pytest.mark.parametrize("dt", BN_DTYPES[1:])
def test_batchnorm_forward_training_dtypes(dt):
    check_compiled(bn_forward([2, 3, 4, 5], "NCX", dt))


def test_batchnorm_forward_training_strided():
    shape = [2, 5, 4, 6]
    check_compiled(bn_forward(shape, "NXC", src_strides=strides(shape, [3, 0, 1, 2])))


def bn_backward(shape, fmt, dt=("f32", "f32"), affine=True, gamma=True, src_strides=None, dd_strides=None):
    c = [(dt[1], [channels(shape, fmt)])]
    return one_op("BatchNormTrainingBackward",
                  [(dt[0], shape, src_strides), (dt[0], shape, dd_strides)] + c * (3 if gamma else 2),
                  [(dt[0], shape)] + (c * 2 if affine else []), {**EPS, "data_format": fmt})


@pytest.mark.parametrize("shape,fmt", BN_SHAPES)
def test_batchnorm_backward_shapes(shape, fmt):
    check_compiled(bn_backward(shape, fmt))


@pytest.mark.parametrize("affine,gamma", [(False, True), (False, False), (True, False)])
def test_batchnorm_backward_optional_ports(affine, gamma):
    check_compiled(bn_backward([2, 4, 3, 5], "NCX", affine=affine, gamma=gamma))


@pytest.mark.parametrize("dt", BN_DTYPES[1:])
def test_batchnorm_backward_dtypes(dt):
    check_compiled(bn_backward([2, 3, 4, 5], "NXC", dt))


def test_batchnorm_backward_strided():
    shape = [2, 6, 5, 7]
    check_compiled(bn_backward(shape, "NCX", src_strides=strides(shape, [0, 2, 3, 1]),
                               dd_strides=strides(shape, [1, 0, 2, 3], pad=2)))


# sizes past the threading threshold: many channels (threads take channels) or
# few (threads take rows of every channel and combine partial sums)
PARALLEL_BN = [([4, 48, 48, 32], "NXC"), ([2, 3, 240, 240], "NCX"), ([2, 40, 60, 60], "NCX")]


@pytest.mark.parametrize("shape,fmt", PARALLEL_BN)
def test_batchnorm_training_parallel(shape, fmt):
    check_compiled(bn_forward(shape, fmt), parallel=True)
    check_compiled(bn_backward(shape, fmt), parallel=True)


@pytest.mark.parametrize("path", corpus_files(["bnorm", "bnorm_fwd_d", "bnorm_bwd"]), ids=lambda p: p.stem)
def test_batchnorm_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))


# --------------------------------------------------------------- LayerNorm
LN_DTYPES = [("f32", "f32"), ("bf16", "bf16"), ("bf16", "f32"), ("f16", "f32")]


def layer_norm(shape, begin=-1, dt=("f32", "f32"), affine=True, stats=True, use_affine=None, src_strides=None):
    b = begin % len(shape)
    ins = [(dt[0], shape, src_strides)] + ([(dt[1], shape[b:])] * 2 if affine else [])
    outs = [(dt[0], shape)] + ([(dt[1], shape[:b])] * 2 if stats else [])
    return one_op("LayerNorm", ins, outs, {**EPS, "begin_norm_axis": begin, "keep_stats": stats,
                                           "use_affine": affine if use_affine is None else use_affine})


@pytest.mark.parametrize("shape,begin,affine,stats", [
    ([4, 3, 9], -1, True, True), ([2, 3, 4, 5], 1, False, False), ([6, 10], 0, True, False),
    ([2, 1, 3, 2, 5], 2, False, True)])
def test_layer_norm(shape, begin, affine, stats):
    check_compiled(layer_norm(shape, begin, affine=affine, stats=stats))


def test_layer_norm_ignores_affine_inputs_when_use_affine_false():
    check_compiled(layer_norm([3, 8], affine=True, stats=False, use_affine=False))


@pytest.mark.parametrize("dt", LN_DTYPES[1:])
def test_layer_norm_dtypes(dt):
    check_compiled(layer_norm([3, 4, 6], 1, dt))


@pytest.mark.parametrize("order", [[1, 0, 2], [2, 0, 1]])
def test_layer_norm_strided(order):
    """A kept dim innermost in memory (statistics per lane) and a reduced one."""
    shape = [5, 3, 8]
    check_compiled(layer_norm(shape, 2, src_strides=strides(shape, order, pad=2)))


def layer_norm_backward(shape, begin=-1, dt=("f32", "f32"), affine=True, src_strides=None):
    b = begin % len(shape)
    ins = [(dt[0], shape, src_strides), (dt[0], shape), (dt[1], shape[:b]), (dt[1], shape[:b])]
    ins += [(dt[1], shape[b:])] * 2 if affine else []
    outs = [(dt[0], shape)] + ([(dt[1], shape[b:])] * 2 if affine else [])
    return one_op("LayerNormBackward", ins, outs, {**EPS, "begin_norm_axis": begin, "use_affine": affine})


@pytest.mark.parametrize("shape,begin,affine", [
    ([4, 3, 9], -1, True), ([2, 3, 4, 5], 1, False), ([6, 10], 1, True), ([2, 1, 3, 2, 5], 3, True)])
def test_layer_norm_backward(shape, begin, affine):
    check_compiled(layer_norm_backward(shape, begin, affine=affine))


@pytest.mark.parametrize("dt", LN_DTYPES[1:])
def test_layer_norm_backward_dtypes(dt):
    check_compiled(layer_norm_backward([3, 4, 6], 1, dt))


def test_layer_norm_backward_strided():
    shape = [5, 3, 8]
    check_compiled(layer_norm_backward(shape, 2, src_strides=strides(shape, [2, 0, 1])))


@pytest.mark.parametrize("shape,begin", [([4, 256, 256], 1), ([2100, 128], 1)])
def test_layer_norm_parallel(shape, begin):
    """Few groups (threads take rows, diff_gamma sums over them) and many."""
    check_compiled(layer_norm(shape, begin), parallel=True)
    check_compiled(layer_norm_backward(shape, begin), parallel=True)


@pytest.mark.parametrize("path", corpus_files(["lnorm", "lnorm_ks", "lnorm_3d", "lnorm_bwd", "lnorm_3d_bwd"]),
                         ids=lambda p: p.stem)
def test_layer_norm_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))


# --------------------------------------------------------------- GroupNorm
def group_norm(shape, groups, fmt="NCX", dt=("f32", "f32"), affine=True, stats=True, src_strides=None):
    c = channels(shape, fmt)
    ins = [(dt[0], shape, src_strides)] + ([(dt[1], [c])] * 2 if affine else [])
    outs = [(dt[0], shape)] + ([(dt[1], [shape[0], groups])] * 2 if stats else [])
    return one_op("GroupNorm", ins, outs, {**EPS, "groups": groups, "data_format": fmt, "use_affine": affine,
                                           "keep_stats": stats})


@pytest.mark.parametrize("shape,groups,fmt,affine,stats", [
    ([2, 6, 5, 4], 3, "NCX", True, True), ([2, 5, 4, 6], 2, "NXC", False, True),
    ([3, 4, 5], 5, "NXC", True, False), ([2, 4, 7], 1, "NCX", False, False), ([2, 6, 2, 3, 2], 6, "NCX", True, True)])
def test_group_norm(shape, groups, fmt, affine, stats):
    check_compiled(group_norm(shape, groups, fmt, affine=affine, stats=stats))


@pytest.mark.parametrize("dt", LN_DTYPES[1:])
def test_group_norm_dtypes(dt):
    check_compiled(group_norm([2, 4, 3, 5], 2, "NCX", dt))


def test_group_norm_strided():
    shape = [2, 6, 5, 4]
    check_compiled(group_norm(shape, 2, "NCX", src_strides=strides(shape, [0, 2, 3, 1], pad=2)))


@pytest.mark.parametrize("path", corpus_files(["gnorm"]), ids=lambda p: p.stem)
def test_group_norm_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))


# ----------------------------------------------------------------- RMSNorm
RMS_DTYPES = [("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32"), ("f16", "f16")]


def rms_norm(shape, begin=-1, gamma=None, dt=("f32", "f32"), src_strides=None):
    ins = [(dt[0], shape, src_strides)] + ([(dt[1], gamma)] if gamma is not None else [])
    return one_op("RMSNorm", ins, [(dt[0], shape)], {**EPS, "begin_norm_axis": begin})


@pytest.mark.parametrize("shape,begin,gamma", [
    ([4, 3, 9], -1, [9]), ([2, 3, 4, 5], 2, [1, 4, 1]), ([6, 10], 0, None), ([2, 1, 3, 2, 5], 1, [3, 2, 5])])
def test_rms_norm(shape, begin, gamma):
    check_compiled(rms_norm(shape, begin, gamma))


@pytest.mark.parametrize("dt", RMS_DTYPES)
def test_rms_norm_dtypes(dt):
    check_compiled(rms_norm([3, 4, 6], -1, [6], dt))


def test_rms_norm_strided():
    shape = [5, 3, 8]
    check_compiled(rms_norm(shape, 1, [3, 1], src_strides=strides(shape, [2, 0, 1])))


@pytest.mark.parametrize("path", corpus_files(["rmsnorm"]), ids=lambda p: p.stem)
def test_rms_norm_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))


# GroupNorm with channels innermost in memory (channels-last src): per-channel sums
# over all C channels as the lane, folded into group sums; groups 1, some and C,
# big enough for parallel chunks and for sums folded into f64 every FOLD_ROWS positions
@pytest.mark.parametrize("shape,groups,fmt,affine,stats", [
    ([2, 64, 12, 12], 32, "NCX", True, True), ([2, 64, 12, 12], 1, "NCX", False, True),
    ([2, 64, 12, 12], 64, "NCX", True, False), ([1, 16, 20, 20], 4, "NCX", False, False),
    ([3, 8, 5], 2, "NCX", True, True), ([2, 7, 8, 9], 3, "NXC", True, True)])
@pytest.mark.parametrize("dt", [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32")], ids="-".join)
def test_group_norm_channels_last(shape, groups, fmt, affine, stats, dt):
    order = [0] + list(range(2, len(shape))) + [1] if fmt == "NCX" else list(range(len(shape)))
    check_compiled(group_norm(shape, groups, fmt, dt, affine=affine, stats=stats, src_strides=strides(shape, order)))


def test_group_norm_channels_last_padded():
    shape = [2, 32, 9, 11]
    check_compiled(group_norm(shape, 8, "NCX", src_strides=strides(shape, [0, 3, 2, 1], pad=2)))


@pytest.mark.parametrize("shape,groups", [([1, 32, 96, 96], 8), ([2, 320, 24, 24], 32)])
def test_group_norm_channels_last_parallel(shape, groups):
    """Chunks of positions in parallel (one batch item: 64 chunks of 144 positions, sums
    folded into f64 inside a chunk; two batch items: one each); the per-channel sums of
    deviations and their squares in the kernel, no group lane."""
    g = group_norm(shape, groups, src_strides=strides(shape, [0, 2, 3, 1]))
    check_compiled(g, parallel=True)
    src = graphc.compile(g).source
    assert "dsum" in src and "dsq" in src


def test_group_norm_channels_last_fused():
    """A Swish epilogue after a channels-last GroupNorm: one kernel, the per-channel
    sums, stores through the fused ref."""
    shape = [2, 16, 6, 5]
    b = GraphBuilder()
    x = b.tensor("f32", shape, strides(shape, [0, 2, 3, 1]))
    n = b.op("GroupNorm", [x, b.tensor("f32", [16]), b.tensor("f32", [16])], out=[("f32", shape)],
             attrs={**EPS, "groups": 4, "keep_stats": False, "data_format": "NCX"})[0]
    b.op("Multiply", [n, b.op("Sigmoid", [n])[0]])
    g = b.finalize()
    check_compiled(g)
    cg = graphc.compile(g)
    assert len(cg.compiled) == 1 and "dsq" in cg.source


# GroupNorm channels-last, both moments from one read of src (per-chunk shifted sums
# combined by Chan's formula): data far from zero (a common offset of 1000, channel
# offsets, a ramp over the positions) against the reference; whole batch items per
# thread (N even) and chunks of positions (N = 1, 3), serial and parallel sizes
import numpy as np  # noqa: E402
from graphc.fill import make_inputs  # noqa: E402


def offset_inputs(g, shape, seed=0):
    """make_inputs of ``g`` with src (NCX shape) = 1000 + 0.5 c + a ramp over the positions + N(0, 1)."""
    inputs = make_inputs(g, seed)
    tid = g.input_ports[0]
    rng = np.random.default_rng(seed)
    n, c, rest = shape[0], shape[1], shape[2:]
    ramp = np.linspace(-3, 3, int(np.prod(rest))).reshape(rest)
    x = 1000 + 0.5 * np.arange(c).reshape([1, c] + [1] * len(rest)) + ramp + rng.standard_normal(shape)
    inputs[tid] = x.astype(inputs[tid].dtype)
    return inputs


def group_norm_offset(shape, groups, dt=("f32", "f32"), affine=True, stats=True, parallel=False):
    order = [0] + list(range(2, len(shape))) + [1]
    g = group_norm(shape, groups, "NCX", dt, affine=affine, stats=stats, src_strides=strides(shape, order))
    check_compiled(g, offset_inputs(g, shape), parallel=parallel)


@pytest.mark.parametrize("shape,groups,affine,stats,parallel", [
    ([2, 64, 12, 12], 8, True, True, False), ([1, 32, 96, 96], 1, False, True, True),
    ([3, 48, 10, 10], 48, True, False, False), ([2, 8, 5, 3], 2, False, False, False),
    ([4, 320, 4, 4], 32, True, True, False)])
@pytest.mark.parametrize("dt", [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32")], ids="-".join)
def test_group_norm_channels_last_offset(shape, groups, affine, stats, parallel, dt):
    """Serial (whole batch items) and parallel (position chunks of one batch item)."""
    group_norm_offset(shape, groups, dt, affine, stats, parallel)


@pytest.mark.parametrize("shape,groups", [([3, 64, 40, 40], 64), ([4, 32, 48, 48], 4)])
def test_group_norm_channels_last_offset_parallel(shape, groups):
    """Parallel: position chunks of three batch items (an odd count), whole batch items (four)."""
    group_norm_offset(shape, groups, parallel=True)


@pytest.mark.parametrize("shape", [[2, 320, 48, 48], [1, 320, 48, 48]])
def test_group_norm_channels_last_corpus_shape(shape):
    """The corpus case's shape, channels-last src and dst, plain and offset data (whole
    batch items per thread, or position chunks of one)."""
    st = strides(shape, [0, 2, 3, 1])
    g = one_op("GroupNorm", [("f32", shape, st), ("f32", [320]), ("f32", [320])], [("f32", shape, st)],
               {"epsilon": 1e-5, "groups": 32, "data_format": "NCX", "keep_stats": False})
    check_compiled(g, parallel=True)
    check_compiled(g, offset_inputs(g, shape, seed=1))
