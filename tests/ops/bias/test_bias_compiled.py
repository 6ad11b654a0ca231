"""Generated kernels of BiasAdd, BiasAddBackward, PReLU and PReLUBackward against graphc's
numpy reference: every dtype row of their schemas, NCX and NXC, slopes broadcasting
every way, non-dense strides, shapes past the threading threshold, and the corpus
graphs."""
import numpy as np
import pytest

import graphc
from graphc.codegen.kernel import PARALLEL_THRESHOLD
from graphc.fill import make_inputs
from graphc.codegen.outline import runs_parallel

from support import channels, check_compiled, corpus_files, one_op, strides


# ---------------------------------------------------------------- BiasAdd
FLOATS = ["f32", "bf16", "f16"]
BIAS_SHAPES = [([2, 6, 5, 7], "NCX"), ([3, 4, 5], "NXC"), ([4, 9], "NCX"), ([2, 3, 1, 2, 4], "NXC")]


@pytest.mark.parametrize("shape,fmt", BIAS_SHAPES)
def test_bias_add(shape, fmt):
    check_compiled(one_op("BiasAdd", [("f32", shape), ("f32", [channels(shape, fmt)])], [("f32", shape)],
                          {"data_format": fmt}))


@pytest.mark.parametrize("dt", FLOATS[1:])
def test_bias_add_dtypes_and_strides(dt):
    shape = [2, 6, 5, 7]
    check_compiled(one_op("BiasAdd", [(dt, shape, strides(shape, [0, 2, 3, 1], pad=2)), (dt, [6])], [(dt, shape)],
                          {"data_format": "NCX"}))


@pytest.mark.parametrize("shape,fmt", BIAS_SHAPES + [([4, 48, 48, 32], "NXC"), ([2, 3, 240, 240], "NCX")])
def test_bias_add_backward(shape, fmt):
    g = one_op("BiasAddBackward", [("f32", shape)], [("f32", [channels(shape, fmt)])], {"data_format": fmt})
    check_compiled(g, parallel=np.prod(shape) >= PARALLEL_THRESHOLD)


@pytest.mark.parametrize("dt", FLOATS[1:])
def test_bias_add_backward_dtypes_and_strides(dt):
    shape = [2, 6, 5, 7]
    check_compiled(one_op("BiasAddBackward", [(dt, shape, strides(shape, [1, 0, 3, 2]))], [(dt, [6])],
                          {"data_format": "NCX"}))


@pytest.mark.parametrize("path", corpus_files(["biasadd", "biasadd_bwd"]), ids=lambda p: p.stem)
def test_bias_add_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))


# ------------------------------------------------------------------ PReLU
# (src shape, slope shape, data_format, per_channel_broadcast)
SLOPES = [
    ([2, 6, 5, 7], [6], "NCX", True),          # per channel
    ([2, 5, 7, 6], [6], "NXC", True),
    ([2, 6, 5, 7], [7], "NCX", False),         # 1-D along the last dim
    ([2, 6, 5, 7], [6, 1, 7], "NCX", True),    # numpy from the right
    ([3, 4], [3, 4], "NCX", True),             # full
    ([2, 3, 1, 2, 4], [1, 1, 1, 1, 1], "NCX", True),
    ([5], [1], "NXC", True),                   # rank 1
]


@pytest.mark.parametrize("src,slope,fmt,per_channel", SLOPES)
def test_prelu(src, slope, fmt, per_channel):
    g = one_op("PReLU", [("f32", src), ("f32", slope)], [("f32", src)],
               {"data_format": fmt, "per_channel_broadcast": per_channel})
    inputs = make_inputs(g)
    inputs[0].reshape(-1)[:2] = 0.0   # the boundary: src >= 0 passes through
    check_compiled(g, inputs)


@pytest.mark.parametrize("dt", FLOATS[1:])
def test_prelu_dtypes_and_strides(dt):
    shape = [2, 6, 5, 7]
    check_compiled(one_op("PReLU", [(dt, shape, strides(shape, [0, 2, 3, 1], pad=2)), (dt, [6])], [(dt, shape)],
                          {"data_format": "NCX"}))


@pytest.mark.parametrize("src,slope,fmt", [(s, sl, f) for s, sl, f, per_channel in SLOPES if per_channel]
                         + [([4, 48, 48, 32], [32], "NXC"), ([2, 3, 240, 240], [3, 1, 1], "NCX")])
def test_prelu_backward(src, slope, fmt):
    g = one_op("PReLUBackward", [("f32", src), ("f32", slope), ("f32", src)], [("f32", src), ("f32", slope)],
               {"data_format": fmt})
    inputs = make_inputs(g)
    inputs[0].reshape(-1)[:2] = 0.0
    assert runs_parallel(graphc.compile(g)) == (np.prod(src) >= PARALLEL_THRESHOLD)
    check_compiled(g, inputs)


@pytest.mark.parametrize("dt", FLOATS[1:])
def test_prelu_backward_dtypes_and_strides(dt):
    shape = [2, 6, 5, 7]
    check_compiled(one_op("PReLUBackward", [(dt, shape, strides(shape, [0, 2, 3, 1])), (dt, [6]),
                                            (dt, shape, strides(shape, [1, 0, 2, 3], pad=2))],
                          [(dt, shape), (dt, [6])], {"data_format": "NCX"}))


@pytest.mark.parametrize("path", corpus_files(["prelu", "prelu_bwd", "prelu_bwd_dw_5d"]), ids=lambda p: p.stem)
def test_prelu_corpus(path, corpus):
    check_compiled(graphc.load_graph(path))
