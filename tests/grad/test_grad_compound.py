"""Training graphs of small networks (graphc.grad, compiled) against
torch.autograd: an MLP, a ResNet block in both data formats, attention with
head reshapes and transposes, a transformer block."""
import pytest

from support.blocks import resnet_block, transformer_block
from support.training import chain, check_training

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_mlp(dt):
    """MatMul + bias -> GELU -> MatMul."""
    g, ts = chain([(dt, (4, 8)), (dt, (8, 16)), (dt, (16,)), (dt, (16, 4))],
                  [("MatMul", [0, 1, 2], {}), ("GELU", [4], {}), ("MatMul", [5, 3], {})])
    check_training(g, [t.id for t in ts[:4]], lambda x, w1, b1, w2: F.gelu(x @ w1 + b1) @ w2)


@pytest.mark.parametrize("fmt", ["NCX", "NXC"])
def test_resnet_block(fmt):
    """Convolution -> BatchNormForwardTraining -> ReLU -> Convolution -> residual Add."""
    g, wrt, y, fn = resnet_block(fmt)
    tr, _ = check_training(g, wrt, fn, outputs=[y])
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
    g, wrt, y, fn = transformer_block()
    tr, _ = check_training(g, wrt, fn, outputs=[y])
    kinds = [op.kind for op in tr.graph.ops.values()]
    assert kinds.count("LayerNormBackward") == 2 and "SwiGluGrad" in kinds and "SoftMaxBackward" in kinds
