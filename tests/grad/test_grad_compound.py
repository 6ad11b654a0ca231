"""Training graphs of small networks (graphc.grad, compiled) against
torch.autograd: an MLP, a ResNet block in both data formats, attention with
head reshapes and transposes, a transformer block."""
import pytest

from graphc.builder import GraphBuilder
from support.training import chain, check_training

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_mlp(dt):
    """MatMul + bias -> GELU -> MatMul."""
    g, ts = chain([(dt, (4, 8)), (dt, (8, 16)), (dt, (16,)), (dt, (16, 4))],
                  [("MatMul", [0, 1, 2], {}), ("GELU", [4], {}), ("MatMul", [5, 3], {})])
    check_training(g, [t.id for t in ts[:4]], lambda x, w1, b1, w2: F.gelu(x @ w1 + b1) @ w2)


CONV = {"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1]}


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_resnet_block(fmt):
    """Convolution -> BatchNormForwardTraining -> ReLU -> Convolution -> residual Add."""
    ncx = fmt == "NCX"
    x = (2, 4, 5, 5) if ncx else (2, 5, 5, 4)
    w = (4, 4, 3, 3) if ncx else (3, 3, 4, 4)
    conv = dict(CONV, data_format=fmt, weights_format="OIX" if ncx else "XIO")
    g, ts = chain([("f32", x), ("f32", w), ("f32", (4,)), ("f32", (4,)), ("f32", (4,)), ("f32", (4,)), ("f32", w)],
                  [("Convolution", [0, 1], conv),
                   ("BatchNormForwardTraining", [7, 2, 3, 4, 5], {"epsilon": 1e-5, "data_format": fmt}, ["f32"] * 5),
                   ("ReLU", [8], {}), ("Convolution", [13, 6], conv), ("Add", [14, 0], {})])

    def fn(x, w1, m, v, gamma, beta, w2):
        if not ncx:
            x, w1, w2 = x.permute(0, 3, 1, 2), w1.permute(3, 2, 0, 1), w2.permute(3, 2, 0, 1)
        h = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, gamma, beta, training=True, eps=1e-5))
        y = F.conv2d(h, w2, padding=1) + x
        return y if ncx else y.permute(0, 2, 3, 1)
    wrt = [ts[i].id for i in (0, 1, 4, 5, 6)]
    tr, _ = check_training(g, wrt, fn, outputs=[ts[-1].id])
    kinds = [op.kind for op in tr.graph.ops.values()]
    assert kinds.count("ConvolutionBackwardData") == 2 and "BatchNormTrainingBackward" in kinds
    patterns = {p.pattern for p in tr.graph.get_partitions()}
    assert {"bnorm_fwd_train_relu", "relu_bwd_bnorm_bwd"} <= patterns     # fused as forward graphs are


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_attention(dt):
    """Q, K, V [B, S, H*D] to heads [B, H, S, D], scaled scores, SoftMax, the
    weighted V back to [B, S, H*D]."""
    b, s, h, d = 2, 4, 2, 8
    heads = [("StaticReshape", None, {"shape": [b, s, h, d], "special_zero": False}),
             ("StaticTranspose", None, {"order": [0, 2, 1, 3]})]
    ops = []
    for i in range(3):                           # q, k, v: inputs 0, 1, 2; scale: input 3
        first = 4 + 2 * i
        ops += [(heads[0][0], [i], heads[0][2]), (heads[1][0], [first], heads[1][2])]
    ops += [("MatMul", [5, 7], {"transpose_b": True}), ("Multiply", [10, 3], {}), ("SoftMax", [11], {"axis": -1}),
            ("MatMul", [12, 9], {}), ("StaticTranspose", [13], {"order": [0, 2, 1, 3]}),
            ("StaticReshape", [14], {"shape": [b, s, h * d], "special_zero": False})]
    g, ts = chain([(dt, (b, s, h * d))] * 3 + [(dt, (1,))], ops)

    def fn(q, k, v, scale):
        q, k, v = (t.reshape(b, s, h, d).transpose(1, 2) for t in (q, k, v))
        p = torch.softmax(q @ k.transpose(-1, -2) * scale, -1)
        return (p @ v).transpose(1, 2).reshape(b, s, h * d)
    tr, _ = check_training(g, [t.id for t in ts[:3]], fn)
    assert "SoftMaxBackward" in [op.kind for op in tr.graph.ops.values()]


def test_transformer_block():
    """LayerNorm -> attention (Q, K, V projections, heads, SoftMax, output
    projection) -> residual Add -> LayerNorm -> gated MLP (SwiGlu) -> residual Add."""
    b, s, h, d, f = 2, 4, 2, 4, 12
    e = h * d
    bld = GraphBuilder()
    x = bld.tensor("f32", (b, s, e))
    params = {name: bld.tensor("f32", shape) for name, shape in [
        ("g1", (e,)), ("b1", (e,)), ("wq", (e, e)), ("wk", (e, e)), ("wv", (e, e)), ("scale", (1,)),
        ("wo", (e, e)), ("g2", (e,)), ("b2", (e,)), ("wup", (e, 2 * f)), ("wdown", (f, e))]}

    def op(kind, ins, attrs=None, outs=1):
        return bld.op(kind, ins, [("f32", None)] * outs, attrs)

    def heads(t):
        t = op("StaticReshape", [t], {"shape": [b, s, h, d], "special_zero": False})[0]
        return op("StaticTranspose", [t], {"order": [0, 2, 1, 3]})[0]

    n1 = op("LayerNorm", [x, params["g1"], params["b1"]], {"keep_stats": False})[0]
    q, k, v = (heads(op("MatMul", [n1, params[w]])[0]) for w in ("wq", "wk", "wv"))
    p = op("SoftMax", [op("Multiply", [op("MatMul", [q, k], {"transpose_b": True})[0], params["scale"]])[0]],
           {"axis": -1})[0]
    o = op("StaticTranspose", [op("MatMul", [p, v])[0]], {"order": [0, 2, 1, 3]})[0]
    o = op("StaticReshape", [o], {"shape": [b, s, e], "special_zero": False})[0]
    r1 = op("Add", [op("MatMul", [o, params["wo"]])[0], x])[0]
    n2 = op("LayerNorm", [r1, params["g2"], params["b2"]], {"keep_stats": False})[0]
    mlp = op("MatMul", [op("SwiGlu", [op("MatMul", [n2, params["wup"]])[0]])[0], params["wdown"]])[0]
    y = op("Add", [mlp, r1])[0]
    g = bld.finalize()

    def fn(x, g1, b1, wq, wk, wv, scale, wo, g2, b2, wup, wdown):
        n1 = F.layer_norm(x, (e,), g1, b1)
        q, k, v = ((n1 @ w).reshape(b, s, h, d).transpose(1, 2) for w in (wq, wk, wv))
        o = (torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v).transpose(1, 2).reshape(b, s, e)
        r1 = o @ wo + x
        u = F.layer_norm(r1, (e,), g2, b2) @ wup
        return (F.silu(u[..., :f]) * u[..., f:]) @ wdown + r1
    wrt = [x.id] + [t.id for name, t in params.items() if name != "scale"]
    tr, _ = check_training(g, wrt, fn, outputs=[y.id])
    kinds = [op.kind for op in tr.graph.ops.values()]
    assert kinds.count("LayerNormBackward") == 2 and "SwiGluGrad" in kinds and "SoftMaxBackward" in kinds
