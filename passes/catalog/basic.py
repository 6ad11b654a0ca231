"""oneDNN's fusion patterns around norms, softmax, reductions, eltwise chains, int8 data movement and the compute anchors' epilogues."""
from __future__ import annotations

from ..pattern import Pattern
from .pieces import (BINARY, ELTWISE, MAX_POST_OPS, REDUCE, UNARY, UNARY_BWD, compute_epilogue, epilogue, f32_dst,
                     int8_quant,
                     keeps_shape, no_broadcast, per_tensor, post_ops, quantize, same_quant_params, typecast)


# -- the patterns ----------------------------------------------------------------------------
def relu_bwd_bnorm_bwd(port):
    def build():
        p = Pattern("relu_bwd_bnorm_bwd", 10,
                    "ReLUBackward -> BatchNormTrainingBackward (either data input)", kernel="anchor")
        r = p.op("ReLUBackward", p.input(), p.input())
        p.op("BatchNormTrainingBackward", *([None] * port), r)
        return p
    return build


def bnorm_inference_relu():
    p = Pattern("bnorm_inference_relu", 9, "BatchNormInference -> ReLU (oneDNN allows only one ReLU here)",
                kernel="anchor")
    p.op("ReLU", p.op("BatchNormInference", p.input()))
    return p


def bnorm_fwd_train_relu():
    p = Pattern("bnorm_fwd_train_relu", 9, "BatchNormForwardTraining -> ReLU", kernel="anchor")
    p.op("ReLU", p.op("BatchNormForwardTraining", p.input()))
    return p


def norm_swish():
    p = Pattern("norm_swish", 9, "GroupNorm/LayerNorm/RMSNorm -> swish (x * sigmoid(x)) -> post-ops -> [Quantize]",
                kernel="anchor")
    n = p.op(["GroupNorm", "LayerNorm", "RMSNorm"], p.input())
    s = p.op("Sigmoid", n)
    epilogue(p, p.op("Multiply", n, s, either_order=True))
    return p


def norm_post_ops():
    p = Pattern("norm_post_ops", 8, "LayerNorm/GroupNorm/RMSNorm -> [TypeCast] -> post-ops -> [Quantize]",
                kernel="anchor")
    epilogue(p, p.op(["LayerNorm", "GroupNorm", "RMSNorm"], p.input()), lo=0)
    return p


def softmax_post_ops():
    p = Pattern("softmax_post_ops", 8, "SoftMax -> post-ops -> [TypeCast] -> [Quantize] (f32 softmax dst)",
                kernel="anchor")
    s = p.op(["SoftMax", "LogSoftmax"], p.input(), pred=f32_dst)
    quantize(p, typecast(p, post_ops(p, s)))
    return p


def reduction_post_ops():
    p = Pattern("reduction_post_ops", 8, "Reduce* -> post-ops", kernel="anchor")
    post_ops(p, p.op(REDUCE, p.input()), lo=1)
    return p


def swiglu():
    p = Pattern("swiglu_prologue_epilogue", 7, "eltwise -> ... -> SwiGlu/SwiGluGrad -> post-ops",
                kernel="anchor")
    u = p.op(UNARY, p.input())
    pro = p.repeat(lambda q, x: q.op(UNARY, x), u, 0, MAX_POST_OPS - 1, label="prologue")
    post_ops(p, p.op(["SwiGlu", "SwiGluGrad"], pro))
    return p


def swiglu_grad_dy():
    p = Pattern("swiglu_grad_prologue", 7, "eltwise -> ... -> SwiGluGrad's diff_dst", kernel="anchor")
    u = p.op(UNARY, p.input())
    pro = p.repeat(lambda q, x: q.op(UNARY, x), u, 0, MAX_POST_OPS - 1, label="prologue")
    post_ops(p, p.op("SwiGluGrad", p.input(), pro))
    return p


def swiglu_post_ops():
    p = Pattern("swiglu_post_ops", 7, "SwiGlu/SwiGluGrad -> post-ops", kernel="anchor")
    post_ops(p, p.op(["SwiGlu", "SwiGluGrad"], p.input()), lo=1)
    return p


def ln_post_all_gather_post_ops():
    p = Pattern("ln_post_all_gather_post_ops", 7, "LayerNormPostAllGather -> post-ops -> [TypeCast]",
                kernel="anchor")
    typecast(p, post_ops(p, p.op("LayerNormPostAllGather", p.input())))
    return p


def eltwise_dropout():
    p = Pattern("eltwise_dropout", 7, "eltwise -> Dropout (training)", kernel="anchor")
    p.op("Dropout", p.op(ELTWISE + UNARY_BWD, p.input()))
    return p


def reorder_sum():
    p = Pattern("reorder_sum", 10, "Reorder -> Add (no broadcast): oneDNN's fp_reorder_sum", kernel="eltwise")
    p.op("Add", p.op("Reorder", p.input()), None, pred=no_broadcast)
    return p


def x8_reorder():
    p = Pattern("x8_reorder", 10, "int8 Dequantize -> Reorder -> Quantize", kernel="eltwise")
    d = p.op("Dequantize", p.input(), pred=int8_quant)
    p.op("Quantize", p.op("Reorder", d), pred=int8_quant)
    return p


def int8_concat():
    p = Pattern("int8_concat", 10, "N int8 Dequantize -> Concat -> Quantize", anchor="concat", kernel="anchor")
    c = p.op("Concat", pred=same_quant_params, label="concat")
    p.each_input(c, "Dequantize", pred=int8_quant)
    p.op("Quantize", c, pred=int8_quant)
    return p


def s8f32s8_bnorm():
    p = Pattern("s8f32s8_bnorm", 10, "int8 Dequantize -> BatchNormInference -> [ReLU] -> Quantize",
                kernel="anchor")
    d = p.op("Dequantize", p.input(), pred=int8_quant)
    b = p.op("BatchNormInference", d)
    p.op("Quantize", p.op("ReLU", b, optional=True), pred=int8_quant)
    return p


def typecast_quantize():
    p = Pattern("typecast_quantize", 6, "TypeCast -> Quantize", kernel="eltwise")
    p.op("Quantize", p.op("TypeCast", p.input()), pred=per_tensor)
    return p


def dequant_eltwise_quant():
    p = Pattern("dequant_eltwise_quant", 6, "Dequantize -> eltwise -> [Quantize]", kernel="eltwise")
    d = p.op("Dequantize", p.input(), pred=per_tensor)
    quantize(p, post_ops(p, d))
    return p


def two_branches():
    p = Pattern("two_branches", 6, "two unary branches of one input meeting in a binary op -> post-ops",
                kernel="eltwise")
    x = p.input()
    a, b = p.op(UNARY, x), p.op(UNARY, x)
    post_ops(p, p.op(BINARY, a, b))
    return p


def eltwise_chain():
    """A post-op's other operand may be computed inside the chain: a fork that
    rejoins (swish ``x * sigmoid(x)``) or a residual add is one chain."""
    p = Pattern("eltwise_chain", 5, "unary/binary -> up to 20 unary/binary post-ops and typecasts",
                kernel="eltwise")
    first = p.op(ELTWISE + UNARY_BWD + ["TypeCast"], p.input())
    p.repeat(lambda q, x: q.op(ELTWISE + ["TypeCast"], x, None, either_order=True, pred=keeps_shape(x)),
             first, 1, MAX_POST_OPS)
    return p


def anchor_post_ops(name, kinds, doc, priority=8, dropout=False):
    """The epilogue hook of compute ops: [BiasAdd] -> post-ops (binary per-tensor,
    per-channel or full, i.e. sum; eltwise; TypeCasts and Select between them) ->
    [Quantize]; with ``dropout``, oneDNN's fp_matmul_dropout too (a Dropout after
    the chain: a second stage of the kernel)."""
    def build():
        p = Pattern(name, priority, doc, kernel=("anchor", "staged") if dropout else "anchor")
        a = p.op(kinds, p.input())
        b = p.op("BiasAdd", a, optional=True)
        y = compute_epilogue(p, b)
        if dropout:
            p.op("Dropout", y, optional=True)
        return p
    return build


def conv_depthwise():
    """oneDNN's fp_conv_postops_depthwise_postops_cpu: the fused kernel keeps the 1x1
    convolution's dst in a tile (legality: passes/conv_depthwise_plan.py)."""
    p = Pattern("conv_depthwise", 10.3, "1x1 Convolution -> [BiasAdd] -> post-ops -> depthwise Convolution -> "
                "[BiasAdd] -> post-ops", anchor="pw", kernel="conv_depthwise")
    pw = p.op("Convolution", p.input(), label="pw")
    x = post_ops(p, p.op("BiasAdd", pw, optional=True))
    dw = p.op("Convolution", x, label="dw")
    post_ops(p, p.op("BiasAdd", dw, optional=True))
    return p


def quantized_matmul():
    p = Pattern("quantized_matmul", 9, "Dequantize on src and weights -> MatMul -> post-ops -> [Quantize]",
                anchor="mm", kernel=("anchor", "staged"))
    da = p.op("Dequantize", p.input(), optional=True)
    dw = p.op("Dequantize", p.input(), optional=True)
    mm = p.op(["MatMul", "Convolution", "ConvTranspose"], da, dw, label="mm")
    epilogue(p, p.op("BiasAdd", mm, optional=True))
    p.check = lambda m: any(o.kind == "Dequantize" for o in m.ops)
    return p


BUILDERS = [
    relu_bwd_bnorm_bwd(0), relu_bwd_bnorm_bwd(1), bnorm_inference_relu, bnorm_fwd_train_relu, norm_swish,
    norm_post_ops, softmax_post_ops, reduction_post_ops, swiglu, swiglu_grad_dy, swiglu_post_ops,
    ln_post_all_gather_post_ops, eltwise_dropout, reorder_sum, x8_reorder, int8_concat, s8f32s8_bnorm,
    typecast_quantize, dequant_eltwise_quant, two_branches, eltwise_chain,
    anchor_post_ops("matmul_post_ops", ["MatMul"], "MatMul -> [BiasAdd] -> post-ops, TypeCasts, Select -> "
                    "[Quantize] -> [Dropout]", dropout=True),
    anchor_post_ops("conv_post_ops", ["Convolution", "ConvTranspose"],
                    "Convolution/ConvTranspose -> [BiasAdd] -> post-ops, TypeCasts -> [Quantize]"),
    anchor_post_ops("pool_post_ops", ["AvgPool", "MaxPool"], "AvgPool/MaxPool -> post-ops", 7),
    anchor_post_ops("interpolate_post_ops", ["Interpolate"], "Interpolate -> post-ops", 7),
    quantized_matmul, conv_depthwise,
]
