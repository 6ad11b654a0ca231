"""Each op kind's vjp rule (graphc.grad): the compiled training graph of one op
(or of a few where the op needs company) against torch.autograd in float64 on
the very values graphc reads, in f32 and bf16 at the dtype's ORACLE tolerance;
finite differences through graphc's reference where torch has no such op."""
import numpy as np
import pytest

import graphc
from graphc import reference
from support import assert_grad_close, assert_outputs, numeric_grad, run_single, uniform
from support.training import chain, check_training, training_inputs

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = ["f32", "bf16"]
X = (2, 3, 8)


def _softplus(x):
    return F.softplus(x, threshold=1e9)


# (kind, attrs, torch function)
UNARY = [
    ("Abs", {}, torch.abs),
    ("Clamp", {"min": -1.3, "max": 0.7}, lambda x: torch.clamp(x, -1.3, 0.7)),  # bounds off the data grid
    ("Elu", {"alpha": 0.7}, lambda x: F.elu(x, 0.7)),
    ("Exp", {}, torch.exp),
    ("GELU", {}, F.gelu),
    ("GELU", {"mode": "gelu_tanh"}, lambda x: F.gelu(x, approximate="tanh")),
    ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, F.hardsigmoid),
    ("HardSwish", {}, F.hardswish),
    ("LeakyReLU", {"alpha": 0.1}, lambda x: F.leaky_relu(x, 0.1)),
    ("Log", {}, torch.log),
    ("Mish", {}, F.mish),
    ("Pow", {"beta": 2.5}, lambda x: torch.pow(x, 2.5)),
    ("Pow", {"beta": 0.0}, lambda x: torch.pow(x, 0.0)),
    ("Reciprocal", {}, torch.reciprocal),
    ("ReLU", {}, F.relu),
    ("Round", {}, lambda x: torch.sign(x) * torch.floor(x.abs() + 0.5)),   # half away from zero
    ("Sigmoid", {}, torch.sigmoid),
    ("SoftPlus", {}, _softplus),
    ("Sqrt", {}, torch.sqrt),
    ("Square", {}, torch.square),
    ("Tanh", {}, torch.tanh),
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind,attrs,fn", UNARY, ids=[f"{k}-{i}" for i, (k, _, _) in enumerate(UNARY)])
def test_unary(kind, attrs, fn, dt):
    """src uniform off the 1/64 grid of graphc.fill (which meets the kinks, where
    graphc's backward ops and torch choose different sides), positive where the
    op asks for it."""
    g, ts = chain([(dt, X)], [(kind, [0], attrs)])
    low = 0.25 if g.ops[0].schema.input_range(g.ops[0], 0) else -4.0
    tr, _ = check_training(g, [ts[0].id], fn, inputs={ts[0].id: uniform(X, dt, 7, low, 4.0)})
    back = {op.kind for op in tr.graph.ops.values()} - {kind}
    schema = graphc.ops.get_schema(kind)
    if schema.backward:
        assert f"{kind}Backward" in back
        use_dst = schema.backward_reads_dst and graphc.ops.get_schema(schema.backward).attr_spec("use_dst") is not None
        bw = next(op for op in tr.graph.ops.values() if op.kind == f"{kind}Backward")
        assert bw.inputs[0].id == (ts[1].id if use_dst else ts[0].id)   # dst where the backward op reads it


BINARY = [
    ("Add", torch.add), ("Subtract", torch.sub), ("Multiply", torch.mul), ("Divide", torch.div),
    ("Maximum", torch.maximum), ("Minimum", torch.minimum), ("SquaredDifference", lambda a, b: (a - b) ** 2),
]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind,fn", BINARY, ids=[k for k, _ in BINARY])
@pytest.mark.parametrize("shapes", [(X, X), (X, (3, 1)), ((3, 1), (2, 1, 8))], ids=["same", "bcast1", "bcast0"])
def test_binary(kind, fn, dt, shapes):
    g, ts = chain([(dt, shapes[0]), (dt, shapes[1])], [(kind, [0, 1], {})])
    positive = {ts[1].id: uniform(shapes[1], dt, 3, 0.5, 2.0)} if kind == "Divide" else None
    tr, _ = check_training(g, [ts[0].id, ts[1].id], fn, inputs=positive)
    if shapes[0] != shapes[1]:
        assert "ReduceSum" in {op.kind for op in tr.graph.ops.values()}


def test_add_with_broadcasting_is_the_seeds_add_backward():
    """The derived gradients of a broadcasting Add are what the seed op
    AddBackward (ttnn.add_bw) gives for the same diff_dst."""
    a, b = (2, 3, 8), (3, 1)
    g, ts = chain([("f32", a), ("f32", b)], [("Add", [0, 1], {})])
    tr = graphc.grad(g, [ts[0].id, ts[1].id])
    feed = training_inputs(g, tr)
    got = graphc.compile(tr.graph).run(feed)
    want = run_single("AddBackward", [feed[tr.grad_in(ts[2].id)], feed[ts[0].id], feed[ts[1].id]],
                      [("f32", a), ("f32", b)])
    assert_outputs([got[tr.grad_out(ts[0].id)], got[tr.grad_out(ts[1].id)]], want)


def test_binary_mixed_dtypes():
    """f32 + bf16 -> f32: the bf16 operand's gradient is cast back to bf16."""
    g, ts = chain([("f32", X), ("bf16", (8,))], [("Multiply", [0, 1], {})])
    tr, got = check_training(g, [ts[0].id, ts[1].id], torch.mul)
    assert got[tr.grad_out(ts[1].id)].dtype == graphc.DataType.bf16.np


@pytest.mark.parametrize("dt", DTYPES)
def test_select(dt):
    g, ts = chain([("boolean", X), (dt, X), (dt, (8,))], [("Select", [0, 1, 2], {}, dt)])
    check_training(g, [ts[1].id, ts[2].id], torch.where)


MATMUL = [  # (src shape, weights shape, attrs, with bias)
    ((2, 3, 4), (4, 5), {}, False),
    ((4, 3), (2, 5, 4), {"transpose_a": True, "transpose_b": True}, False),
    ((2, 1, 3, 4), (3, 5, 4), {"transpose_b": True}, True),
    ((4,), (2, 4, 5), {}, False),
    ((2, 3, 4), (4,), {}, False),
]


def _matmul(attrs):
    def fn(a, b, *bias):
        a = a.transpose(-1, -2) if attrs.get("transpose_a") else a
        b = b.transpose(-1, -2) if attrs.get("transpose_b") else b
        return torch.matmul(a, b) + (bias[0] if bias else 0)
    return fn


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("src,wei,attrs,bias", MATMUL, ids=[str(i) for i in range(len(MATMUL))])
def test_matmul(src, wei, attrs, bias, dt):
    ins = [(dt, src), (dt, wei)] + [(dt, (5,))] * bias
    g, ts = chain(ins, [("MatMul", list(range(len(ins))), attrs)])
    tr, _ = check_training(g, [t.id for t in ts[:len(ins)]], _matmul(attrs))
    if len(wei) == 2 and len(src) > 2 and not attrs.get("transpose_a"):   # src's batch dims folded into rows
        assert "ReduceSum" not in [op.kind for op in tr.graph.ops.values()]


def test_matmul_bf16_into_f32():
    """bf16 operands, f32 dst: diff_dst is cast to bf16 for the backward MatMuls."""
    g, ts = chain([("bf16", (3, 4)), ("bf16", (4, 5))], [("MatMul", [0, 1], {}, "f32")])
    check_training(g, [ts[0].id, ts[1].id], torch.matmul)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_bias_add(dt, fmt):
    g, ts = chain([(dt, (2, 3, 4)), (dt, (3 if fmt == "NCX" else 4,))], [("BiasAdd", [0, 1], {"data_format": fmt})])
    tr, _ = check_training(g, [ts[0].id, ts[1].id], lambda x, b: x + (b[:, None] if fmt == "NCX" else b))
    assert "BiasAddBackward" in {op.kind for op in tr.graph.ops.values()}


@pytest.mark.parametrize("dt", DTYPES)
def test_reshape_transpose_typecast(dt):
    other = "f32" if dt == "bf16" else "bf16"
    g, ts = chain([(dt, (2, 3, 4))], [("StaticReshape", [0], {"shape": [6, -1], "special_zero": False}),
                                      ("StaticTranspose", [1], {"order": [1, 0]}), ("Tanh", [2], {}),
                                      ("TypeCast", [3], {}, other)])
    check_training(g, [ts[0].id], lambda x: torch.tanh(x.reshape(6, 4).T), tol_dtype="bf16")


@pytest.mark.parametrize("dt", DTYPES)
def test_softmax(dt):
    g, ts = chain([(dt, X)], [("SoftMax", [0], {"axis": -1}), ("LogSoftmax", [0], {"axis": 1})])
    tr, _ = check_training(g, [ts[0].id], lambda x: (torch.softmax(x, -1), torch.log_softmax(x, 1)))
    kinds = [op.kind for op in tr.graph.ops.values()]
    assert "SoftMaxBackward" in kinds and "LogSoftmaxBackward" in kinds


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("keep_stats", [True, False])
def test_layer_norm(dt, keep_stats):
    outs = [dt, "f32", "f32"] if keep_stats else dt
    g, ts = chain([(dt, X), ("f32", (8,)), ("f32", (8,))], [("LayerNorm", [0, 1, 2], {"keep_stats": keep_stats}, outs)])
    tr, _ = check_training(g, [t.id for t in ts[:3]], lambda x, w, b: F.layer_norm(x, (8,), w, b),
                           outputs=[ts[3].id])
    bw = next(op for op in tr.graph.ops.values() if op.kind == "LayerNormBackward")
    ln = next(op for op in tr.graph.ops.values() if op.kind == "LayerNorm")
    assert [t.id for t in bw.inputs[2:4]] == [t.id for t in ln.outputs[1:3]]   # the forward's own statistics


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_batch_norm_training(dt, fmt):
    shape = (4, 3, 5) if fmt == "NCX" else (4, 5, 3)
    ins = [(dt, shape)] + [("f32", (3,))] * 4
    g, ts = chain(ins, [("BatchNormForwardTraining", [0, 1, 2, 3, 4], {"epsilon": 1e-5, "data_format": fmt},
                         [dt] + ["f32"] * 4)])

    def fn(x, m, v, w, b):
        x = x if fmt == "NCX" else x.transpose(1, 2)
        y = F.batch_norm(x, None, None, w, b, training=True, eps=1e-5)
        return y if fmt == "NCX" else y.transpose(1, 2)
    tr, _ = check_training(g, [ts[0].id, ts[3].id, ts[4].id], fn, outputs=[ts[5].id])
    bw = next(op for op in tr.graph.ops.values() if op.kind == "BatchNormTrainingBackward")
    assert [t.id for t in bw.inputs[2:4]] == [ts[8].id, ts[9].id]   # batch_mean, batch_variance


CONV = {"strides": [2, 2], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1]}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_convolution(dt, fmt):
    ncx = fmt == "NCX"
    src = (2, 3, 6, 6) if ncx else (2, 6, 6, 3)
    wei = (4, 3, 3, 3) if ncx else (3, 3, 3, 4)
    attrs = dict(CONV, data_format=fmt, weights_format="OIX" if ncx else "XIO")
    g, ts = chain([(dt, src), (dt, wei), (dt, (4,))], [("Convolution", [0, 1, 2], attrs)])

    def fn(x, w, b):
        if not ncx:
            x, w = x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)
        y = F.conv2d(x, w, b, stride=2, padding=1)
        return y if ncx else y.permute(0, 2, 3, 1)
    tr, _ = check_training(g, [t.id for t in ts[:3]], fn)
    kinds = {op.kind for op in tr.graph.ops.values()}
    assert {"ConvolutionBackwardData", "ConvolutionBackwardWeights", "BiasAddBackward"} <= kinds


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_conv_transpose(dt, fmt):
    """ConvTranspose from 3 to 4 channels, stride 2: ConvTransposeBackwardData and -Weights."""
    ncx = fmt == "NCX"
    src = (2, 3, 4, 4) if ncx else (2, 4, 4, 3)
    wei = (4, 3, 3, 3) if ncx else (3, 3, 3, 4)
    attrs = dict(CONV, data_format=fmt, weights_format="OIX" if ncx else "XIO", output_padding=[1, 1])
    g, ts = chain([(dt, src), (dt, wei), (dt, (4,))], [("ConvTranspose", [0, 1, 2], attrs)])

    def fn(x, w, b):
        w = w.transpose(0, 1) if ncx else w.permute(2, 3, 0, 1)    # torch: [C_in, C_out, kh, kw]
        y = F.conv_transpose2d(x if ncx else x.permute(0, 3, 1, 2), w, b, stride=2, padding=1, output_padding=1)
        return y if ncx else y.permute(0, 2, 3, 1)
    tr, _ = check_training(g, [t.id for t in ts[:3]], fn)
    kinds = {op.kind for op in tr.graph.ops.values()}
    assert {"ConvTransposeBackwardData", "ConvTransposeBackwardWeights", "BiasAddBackward"} <= kinds


POOL = {"strides": [2, 2], "pads_begin": [1, 1], "pads_end": [1, 1], "kernel": [3, 3]}


def _nxc(fn, fmt):
    """``fn`` of NCX tensors applied to ``fmt`` ones."""
    if fmt == "NCX":
        return fn
    return lambda x: tuple(y.permute(0, 2, 3, 1) for y in fn(x.permute(0, 3, 1, 2)))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_pools(dt, fmt):
    pool = dict(POOL, data_format=fmt)
    g, ts = chain([(dt, (2, 3, 6, 6))], [("MaxPool", [0], pool), ("AvgPool", [0], dict(pool, exclude_pad=False))])
    check_training(g, [ts[0].id], _nxc(lambda x: (F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 3, 2, 1)), fmt))


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_interpolate(dt, fmt):
    attrs = {"mode": "bilinear", "sizes": [8, 8], "data_format": fmt}
    g, ts = chain([(dt, (1, 2, 4, 4))], [("Interpolate", [0], attrs)])
    check_training(g, [ts[0].id], _nxc(lambda x: (F.interpolate(x, size=(8, 8), mode="bilinear"),), fmt))


@pytest.mark.parametrize("dt", DTYPES)
def test_reductions(dt):
    g, ts = chain([(dt, X)], [("ReduceSum", [0], {"axes": [0, 2]}), ("ReduceMean", [0], {"axes": [1], "keep_dims": True}),
                              ("ReduceL2", [0], {"axes": [2]}), ("ReduceL1", [0], {"axes": [1]})])
    check_training(g, [ts[0].id], lambda x: (x.sum((0, 2)), x.mean(1, keepdim=True), x.norm(dim=2), x.abs().sum(1)))


@pytest.mark.parametrize("dt", DTYPES)
def test_reduce_max_min(dt):
    """src uniform (no ties): the gradient goes to the extreme element."""
    g, ts = chain([(dt, X)], [("ReduceMax", [0], {"axes": [2]}), ("ReduceMin", [0], {"axes": [0, 1], "keep_dims": True})])
    check_training(g, [ts[0].id], lambda x: (x.amax(2), x.amin((0, 1), keepdim=True)),
                   inputs={ts[0].id: uniform(X, dt, 5)})


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_batch_norm_inference(dt, fmt):
    shape = (4, 3, 5) if fmt == "NCX" else (4, 5, 3)
    g, ts = chain([(dt, shape)] + [("f32", (3,))] * 4,
                  [("BatchNormInference", [0, 1, 2, 3, 4], {"epsilon": 1e-3, "data_format": fmt})])

    def fn(x, gamma, beta, mean, var):
        view = (3, 1) if fmt == "NCX" else (3,)
        return (x - mean.reshape(view)) / torch.sqrt(var.reshape(view) + 1e-3) * gamma.reshape(view) \
            + beta.reshape(view)
    check_training(g, [t.id for t in ts[:5]], fn)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_group_norm(dt, fmt):
    shape = (2, 6, 2, 3) if fmt == "NCX" else (2, 2, 3, 6)
    g, ts = chain([(dt, shape), ("f32", (6,)), ("f32", (6,))],
                  [("GroupNorm", [0, 1, 2], {"groups": 3, "data_format": fmt, "keep_stats": False})])

    def fn(x, w, b):
        y = F.group_norm(x if fmt == "NCX" else x.permute(0, 3, 1, 2), 3, w, b, 1e-5)
        return y if fmt == "NCX" else y.permute(0, 2, 3, 1)
    check_training(g, [t.id for t in ts[:3]], fn)


@pytest.mark.parametrize("dt", DTYPES)
def test_rms_norm(dt):
    g, ts = chain([(dt, X), ("f32", (8,))], [("RMSNorm", [0, 1], {"epsilon": 1e-5})])
    check_training(g, [ts[0].id, ts[1].id], lambda x, w: F.rms_norm(x, (8,), w, 1e-5))


@pytest.mark.parametrize("dt", DTYPES)
def test_swiglu(dt):
    g, ts = chain([(dt, (2, 3, 8))], [("SwiGlu", [0], {})])
    tr, _ = check_training(g, [ts[0].id], lambda x: F.silu(x[..., :4]) * x[..., 4:])
    assert "SwiGluGrad" in {op.kind for op in tr.graph.ops.values()}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("it", ["s32", "s64"])
def test_embedding(dt, it):
    """d weight = EmbeddingBackward(indices, weight, dy): repeated indices sum, a
    row no index reads gets zeros; the indices get no gradient."""
    g, ts = chain([(it, (3, 5)), (dt, (7, 6))], [("Embedding", [0, 1], {}, dt), ("Tanh", [2], {})])
    idx = np.array([[0, 3, 3, 6, 1], [3, 0, 2, 2, 6], [1, 1, 1, 3, 0]], graphc.DataType(it).np)   # (no 4, no 5)
    tr, got = check_training(g, [ts[1].id], lambda i, w: torch.tanh(F.embedding(i.long(), w)),
                             inputs={ts[0].id: idx})
    (bw,) = [op for op in tr.graph.ops.values() if op.kind == "EmbeddingBackward"]
    assert bw.inputs[0].id == ts[0].id and bw.inputs[1].id == ts[1].id
    assert not got[tr.grad_out(ts[1].id)][[4, 5]].astype(np.float32).any()


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_prelu(dt, fmt):
    g, ts = chain([(dt, (2, 3, 4)), (dt, (3 if fmt == "NCX" else 4,))], [("PReLU", [0, 1], {"data_format": fmt})])
    check_training(g, [ts[0].id, ts[1].id],
                   lambda x, s: F.prelu(x, s) if fmt == "NCX" else F.prelu(x.transpose(1, 2), s).transpose(1, 2))


def test_dropout_against_finite_differences():
    """Dropout (no torch counterpart with graphc's stream): the training graph's
    gradient through graphc's reference in f64 against central differences of
    the forward reference."""
    g, ts = chain([("f32", (3, 8)), ("s64", (1,)), ("s64", (1,)), ("f32", (1,))],
                  [("Dropout", [0, 1, 2, 3], {})])
    tr = graphc.grad(g, [ts[0].id])
    feed = training_inputs(g, tr, inputs={ts[1].id: np.array([7]), ts[2].id: np.array([3]),
                                          ts[3].id: np.array([0.25], np.float32)})
    got = reference.run(tr.graph, feed)
    dy = feed[tr.grad_in(ts[4].id)].astype(np.float64)
    op = g.ops[0]
    fixed = [feed[t.id] for t in ts[1:4]]
    numeric = numeric_grad(lambda x: op.schema.reference(op, x, *fixed)[0], feed[ts[0].id], dy)
    assert_grad_close(got[tr.grad_out(ts[0].id)], numeric, "Dropout")


def test_select_with_a_one_element_operand():
    """The corpus's Select: src_0 of one element broadcast to [1, 12, 128, 128]
    (its gradient sums every element); cond broadcast one way."""
    g, ts = chain([("boolean", (1, 1, 1, 16)), ("f32", (1,)), ("f32", (1, 3, 4, 16))], [("Select", [0, 1, 2], {}, "f32")])
    check_training(g, [ts[1].id, ts[2].id], torch.where)
