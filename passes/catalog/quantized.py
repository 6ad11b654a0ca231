"""Quantized compute, the gated MLP and binary-MatMul-binary."""
from __future__ import annotations

from ..pattern import Pattern
from .pieces import BINARY, MAX_POST_OPS, UNARY, compute_post_ops, keeps_shape, per_tensor, post_ops, typecast


COMPUTE = ["MatMul", "Convolution", "ConvTranspose"]
VIEWS = ["StaticReshape", "StaticTranspose"]


#: Dequantize and DynamicDequantize (scales and zero points as tensors, also per group)
DEQUANTIZE = ["Dequantize", "DynamicDequantize"]


def static_quant(o, m) -> bool:
    """Per-tensor or per-channel scales and zero points, or DynamicDequantize's
    (also per group) given as tensors (legality decides where a per-channel or
    grouped one may be computed in registers: passes/legality.py)."""
    return o.kind == "DynamicDequantize" or o.attr("qtype", "per_tensor") in ("per_tensor", "per_channel")


def q2f(p, x, weights: bool):
    """oneDNN's Q2F conversion: [Dynamic]Dequantize -> [TypeCast]; for weights also
    [view] -> Quantize -> Dequantize -> [view] -> [TypeCast] (f32 weights quantized
    in the graph; the views reshape a depthwise convolution's weights, as
    TensorFlow dumps them, around their per-channel quantization).
    DynamicDequantize of int8/int4 weights into an f32/bf16/f16 MatMul is the
    weight-only-quantized MatMul."""
    if weights:
        x = p.op("Quantize", p.op(VIEWS, x, optional=True), optional=True, pred=static_quant)
    d = p.op(DEQUANTIZE, x, optional=True, pred=static_quant)
    if weights:
        d = p.op(VIEWS, d, optional=True)
    return p.op("TypeCast", d, optional=True)


def quantized_compute():
    p = Pattern("quantized_compute", 9.5,
                "[Dynamic]Dequantize (per tensor, channel or group, [TypeCast]) on src and weights -> MatMul/Convolution/"
                "ConvTranspose -> [BiasAdd] -> post-ops (an int8 sum, TypeCasts, smooth-quant Multiply among them) -> "
                "[[Dynamic]Quantize per tensor or channel]",
                anchor="mm", kernel=("anchor", "staged"))
    mm = p.op(COMPUTE, q2f(p, p.input(), False), q2f(p, p.input(), True), label="mm")
    b = p.op("BiasAdd", mm, optional=True)
    p.op(["Quantize", "DynamicQuantize"], compute_post_ops(p, b), optional=True, pred=static_quant)
    p.check = lambda m: any(o.kind in DEQUANTIZE or o.kind == "DynamicQuantize"
                            or (o.kind == "Quantize" and not per_tensor(o, m)) for o in m.ops)
    return p


def swish(q, x):
    return q.op("Multiply", x, q.op("Sigmoid", x), either_order=True, label="swish")


def activation(q, x):
    return q.op(UNARY, x, label="activation")


def gated_mlp():
    """gated_mlp.md: FC up and FC gate MatMuls of one src, an optional activation
    on the gate (swish as Sigmoid and Multiply, or any unary op: GELU, ReLU,
    Sigmoid for GLU, ...), a binary op joining them (Multiply; oneDNN takes any),
    [TypeCast] (bf16/f16), FC down MatMul -> post-ops; each MatMul's weights
    maybe [Dynamic]Dequantized (oneDNN's quantized_gated_mlp: int4/int8 weights).
    A staged kernel: up and gate into scratch, the gated product computed while
    the down MatMul packs its src."""
    p = Pattern("gated_mlp", 9.6, "MatMul up, MatMul gate (one src; weights [Dynamic]Dequantized) -> "
                                  "[swish/GELU/...] -> a binary op -> [TypeCast] -> MatMul down -> post-ops",
                anchor="up", kernel="staged")
    x = p.input("src")
    up = p.op("MatMul", x, q2f(p, p.input(), False), label="up")
    gate = p.op("MatMul", x, q2f(p, p.input(), False), label="gate")
    act = p.optional_block(lambda q, g: q.alt(g, swish, activation), gate, label="gate activation")
    glu = p.op(BINARY, act, up, either_order=True, label="glu")
    down = p.op("MatMul", typecast(p, glu), q2f(p, p.input(), False), label="down")
    post_ops(p, down)
    return p


def prologue_step(q, x):
    return q.op(BINARY, x, None, either_order=True, pred=keeps_shape(x), label="prologue")


def binary_matmul_binary():
    """oneDNN's float_bmb: binary ops one after another -> [TypeCast] -> MatMul's src
    (computed while the GEMM packs it) -> [BiasAdd] -> post-ops.  Anchored at the
    first binary op (the prologue is found forward from it)."""
    p = Pattern("binary_matmul_binary", 8.5, "binary ops on MatMul's src -> [TypeCast] -> MatMul -> [BiasAdd] -> "
                                             "post-ops", anchor="first", kernel="anchor")
    first = p.op(BINARY, p.input(), None, label="first")
    pro = p.repeat(prologue_step, first, 0, MAX_POST_OPS - 1, label="prologue")
    mm = p.op("MatMul", typecast(p, pro), None, label="mm")
    compute_post_ops(p, p.op("BiasAdd", mm, optional=True))
    return p


BUILDERS = [quantized_compute, gated_mlp, binary_matmul_binary]
