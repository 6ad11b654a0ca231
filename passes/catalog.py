"""The fusion catalog: oneDNN's fusion patterns whose ops graphc lowers, the
training patterns, and the seed ops with their neighbours.

Each entry is data for the one matching engine in passes/pattern.py.  A fused
partition lowers to one kernel (graphc/codegen/fusion.py): an eltwise chain as one
expression in one loop; an anchor op (norm, softmax, reduction, SwiGlu, ...)
with its prologue folded into its loads and its epilogue into its stores.
"""
from __future__ import annotations

from graphc.ops import all_kinds, get_schema
from graphc.ops.common import Binary, Unary, UnaryBackward

from .pattern import Pattern, op, optional, repeat

MAX_POST_OPS = 20


def _kinds(base) -> list[str]:
    return [k for k in all_kinds() if isinstance(get_schema(k), base)]


def _post_op(o, graph, port) -> bool:
    """Unary, or binary whose output keeps the shape of the chain operand (the
    other operand broadcasts into it, never the chain value into a larger one)."""
    if o.kind in UNARY:
        return True
    return o.kind in BINARY and port is not None and o.inputs[port].shape == o.outputs[0].shape


def _f32_dst(o, graph, port) -> bool:
    return o.outputs[0].dtype.value == "f32"


def _per_tensor(o, graph, port) -> bool:
    return o.attr("qtype", "per_tensor") == "per_tensor"


UNARY = _kinds(Unary)
BINARY = [k for k in _kinds(Binary) if k != "GreaterEqual"]
UNARY_BWD = _kinds(UnaryBackward)
ELTWISE = UNARY + BINARY
POST = repeat(op(ELTWISE, pred=_post_op), 0, MAX_POST_OPS)
TYPECAST = optional(op("TypeCast"))
QUANTIZE = optional(op("Quantize", pred=_per_tensor))
REDUCE = ["ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"]


def catalog() -> list[Pattern]:
    return [
        # training: ReLUBackward feeding whichever BatchNormTrainingBackward input
        Pattern("relu_bwd_bnorm_bwd", [op("ReLUBackward"), op("BatchNormTrainingBackward")], 10,
                "ReLUBackward -> BatchNormTrainingBackward"),
        # norm patterns (norm_fusion_patterns.md)
        Pattern("bnorm_inference_relu", [op("BatchNormInference"), op("ReLU")], 9,
                "BatchNormInference -> ReLU (oneDNN allows only one ReLU here)"),
        Pattern("norm_post_ops", [op("LayerNorm", "GroupNorm", "RMSNorm"), TYPECAST, POST, QUANTIZE], 8,
                "LayerNorm/GroupNorm/RMSNorm -> [TypeCast] -> post-ops -> [Quantize]"),
        # softmax (softmax_fusion_patterns.md): optional subgraphs need an f32 softmax dst
        Pattern("softmax_post_ops", [op("SoftMax", "LogSoftmax", pred=_f32_dst), POST, TYPECAST, QUANTIZE], 8,
                "SoftMax -> post-ops -> [TypeCast] -> [Quantize]"),
        # reduction (reduction_fusion_patterns.md)
        Pattern("reduction_post_ops", [op(REDUCE), POST], 8, "Reduce* -> post-ops"),
        # seed ops with their neighbours
        Pattern("pre_swiglu", [repeat(op(UNARY), 1, MAX_POST_OPS), op("SwiGlu", "SwiGluGrad", port=None)], 7,
                "eltwise -> SwiGlu/SwiGluGrad"),
        Pattern("swiglu_post_ops", [op("SwiGlu", "SwiGluGrad"), POST], 7, "SwiGlu/SwiGluGrad -> post-ops"),
        Pattern("ln_post_all_gather_post_ops", [op("LayerNormPostAllGather"), POST, TYPECAST], 7,
                "LayerNormPostAllGather -> post-ops"),
        # quantized eltwise: Dequantize -> eltwise chain -> Quantize
        Pattern("dequant_eltwise_quant", [op("Dequantize", pred=_per_tensor), repeat(op(ELTWISE, pred=_post_op), 0,
                                                                                  MAX_POST_OPS), QUANTIZE], 6,
                "Dequantize -> eltwise -> Quantize"),
        # unary and binary with epilogues (unary/binary_fusion_patterns.md), typecasts in the chain
        Pattern("eltwise_chain", [op(ELTWISE + UNARY_BWD + ["TypeCast"]),
                                  repeat(op(ELTWISE + ["TypeCast"], pred=_post_op_or_cast), 1, MAX_POST_OPS)], 5,
                "unary/binary -> up to 20 unary/binary post-ops"),
        # shuffles
        Pattern("shuffle_chain", [op("StaticReshape", "StaticTranspose", "Reorder"),
                                  repeat(op("StaticReshape", "StaticTranspose", "Reorder"), 1, 8)], 4,
                "reshape/transpose/reorder chains"),
    ]


def _post_op_or_cast(o, graph, port) -> bool:
    return o.kind == "TypeCast" or _post_op(o, graph, port)
