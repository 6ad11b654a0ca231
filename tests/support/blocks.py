"""Network blocks as forward graphs with their torch counterparts, for the
training-graph tests (tests/grad) and benchmarks/bench_training.py: a ResNet
block (Convolution, BatchNormForwardTraining, ReLU, Convolution, residual Add)
in NCX or NXC, and a transformer block (LayerNorm, attention, SwiGlu MLP).
Each builder returns (graph, wrt ids, output id, torch function of the graph's
inputs in input-port order)."""
from __future__ import annotations

from graphc.builder import GraphBuilder

from .training import chain


def resnet_block(fmt: str = "NCX", n: int = 2, c: int = 4, hw: int = 5, dt: str = "f32"):
    """Convolution (3x3, pad 1) -> BatchNormForwardTraining -> ReLU ->
    Convolution -> residual Add on an [n, c, hw, hw] image (NCX) or its NXC
    form; wrt: the image, both weights, gamma and beta."""
    ncx = fmt == "NCX"
    x = (n, c, hw, hw) if ncx else (n, hw, hw, c)
    w = (c, c, 3, 3) if ncx else (3, 3, c, c)
    conv = {"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1],
            "data_format": fmt, "weights_format": "OIX" if ncx else "XIO"}
    g, ts = chain([(dt, x), (dt, w), (dt, (c,)), (dt, (c,)), (dt, (c,)), (dt, (c,)), (dt, w)],
                  [("Convolution", [0, 1], conv),
                   ("BatchNormForwardTraining", [7, 2, 3, 4, 5], {"epsilon": 1e-5, "data_format": fmt}, [dt] * 5),
                   ("ReLU", [8], {}), ("Convolution", [13, 6], conv), ("Add", [14, 0], {})])

    def fn(x, w1, m, v, gamma, beta, w2):
        import torch.nn.functional as F
        if not ncx:
            x, w1, w2 = x.permute(0, 3, 1, 2), w1.permute(3, 2, 0, 1), w2.permute(3, 2, 0, 1)
        h = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, gamma, beta, training=True, eps=1e-5))
        y = F.conv2d(h, w2, padding=1) + x
        return y if ncx else y.permute(0, 2, 3, 1)
    return g, [ts[i].id for i in (0, 1, 4, 5, 6)], ts[-1].id, fn


def transformer_block(b: int = 2, s: int = 4, h: int = 2, d: int = 4, f: int = 12, dt: str = "f32"):
    """LayerNorm -> attention (Q, K, V projections, heads, scaled SoftMax,
    output projection) -> residual Add -> LayerNorm -> gated MLP (SwiGlu, hidden
    ``f``) -> residual Add on [b, s, h*d]; wrt: the input and every weight but
    the scale."""
    e = h * d
    bld = GraphBuilder()
    x = bld.tensor(dt, (b, s, e))
    params = {name: bld.tensor(dt, shape) for name, shape in [
        ("g1", (e,)), ("b1", (e,)), ("wq", (e, e)), ("wk", (e, e)), ("wv", (e, e)), ("scale", (1,)),
        ("wo", (e, e)), ("g2", (e,)), ("b2", (e,)), ("wup", (e, 2 * f)), ("wdown", (f, e))]}

    def op(kind, ins, attrs=None):
        return bld.op(kind, ins, [(dt, None)], attrs)[0]

    def heads(t):
        t = op("StaticReshape", [t], {"shape": [b, s, h, d], "special_zero": False})
        return op("StaticTranspose", [t], {"order": [0, 2, 1, 3]})

    n1 = op("LayerNorm", [x, params["g1"], params["b1"]], {"keep_stats": False})
    q, k, v = (heads(op("MatMul", [n1, params[w]])) for w in ("wq", "wk", "wv"))
    p = op("SoftMax", [op("Multiply", [op("MatMul", [q, k], {"transpose_b": True}), params["scale"]])], {"axis": -1})
    o = op("StaticTranspose", [op("MatMul", [p, v])], {"order": [0, 2, 1, 3]})
    o = op("StaticReshape", [o], {"shape": [b, s, e], "special_zero": False})
    r1 = op("Add", [op("MatMul", [o, params["wo"]]), x])
    n2 = op("LayerNorm", [r1, params["g2"], params["b2"]], {"keep_stats": False})
    y = op("Add", [op("MatMul", [op("SwiGlu", [op("MatMul", [n2, params["wup"]])]), params["wdown"]]), r1])
    g = bld.finalize()

    def fn(x, g1, b1, wq, wk, wv, scale, wo, g2, b2, wup, wdown):
        import torch
        import torch.nn.functional as F
        n1 = F.layer_norm(x, (e,), g1, b1)
        q, k, v = ((n1 @ w).reshape(b, s, h, d).transpose(1, 2) for w in (wq, wk, wv))
        o = (torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v).transpose(1, 2).reshape(b, s, e)
        r1 = o @ wo + x
        u = F.layer_norm(r1, (e,), g2, b2) @ wup
        return (F.silu(u[..., :f]) * u[..., f:]) @ wdown + r1
    wrt = [x.id] + [t.id for name, t in params.items() if name != "scale"]
    return g, wrt, y.id, fn
