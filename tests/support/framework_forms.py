"""Small graphs of the forms frameworks dump around a compute op (oneDNN's pattern
corpus: int8/f8 MatMuls and convolutions with bf16 tails, smooth-quant, int8
sums, Select and Dropout after a MatMul, int8 pools with views, depthwise
weights reshaped around their quantization, gated MLPs of quantized weights,
binary-MatMul-binary), each one partition: tests/passes checks the
partitions, tests/codegen the compiled results.  Each builder returns
(graph, inputs or None); scales are powers of two so that int8 results are
exact."""
from __future__ import annotations

import numpy as np

from graphc.builder import GraphBuilder
from graphc.fill import make_inputs

from .fusion import dequantize

Q = {"qtype": "per_tensor", "scales": [0.25], "zps": [2]}
W = {"qtype": "per_tensor", "scales": [0.125], "zps": [0]}


def _weights(b, k, n, dt="s8", attrs=None):
    """Constant s8 weights [k, n] dequantized (per channel along n by default)."""
    w = b.tensor(dt, [k, n], property_type="constant")
    attrs = attrs or {"qtype": "per_channel", "axis": 1, "scales": [2.0 ** -(3 + i % 3) for i in range(n)],
                      "zps": [0] * n}
    return dequantize(b, w, attrs)


def int8_bf16_matmul():
    """u8 src and constant s8 weights Dequantized, TypeCast to bf16 -> MatMul ->
    TypeCast to f32 (the weights' Dequantize folds as constant alone)."""
    b = GraphBuilder()
    x = b.tensor("u8", [6, 16])
    dx = b.op("TypeCast", [dequantize(b, x, Q)], out=[("bf16", [6, 16])])[0]
    dw = b.op("TypeCast", [_weights(b, 16, 8)], out=[("bf16", [16, 8])])[0]
    y = b.op("MatMul", [dx, dw], out=[("bf16", [6, 8])])[0]
    b.op("TypeCast", [y], out=[("f32", [6, 8])])
    return b.finalize(), None


def smooth_quant():
    """bf16 MatMul -> Multiply -> TypeCast to f32 -> smooth-quant Multiply -> Quantize."""
    b = GraphBuilder()
    x = b.tensor("u8", [8, 16])
    dx = b.op("TypeCast", [dequantize(b, x, Q)], out=[("bf16", [8, 16])])[0]
    dw = b.op("TypeCast", [_weights(b, 16, 8)], out=[("bf16", [16, 8])])[0]
    y = b.op("MatMul", [dx, dw], out=[("bf16", [8, 8])])[0]
    y = b.op("Multiply", [y, b.tensor("bf16", [8, 8])], out=[("bf16", [8, 8])])[0]
    y = b.op("TypeCast", [y], out=[("f32", [8, 8])])[0]
    y = b.op("Multiply", [y, b.tensor("f32", [1, 8])], out=[("f32", [8, 8])])[0]
    b.op("Quantize", [y], out=[("s8", [8, 8])], attrs={"qtype": "per_tensor", "scales": [0.5], "zps": [0]})
    return b.finalize(), None


def int8_sum(typecast=False):
    """Dequantize -> MatMul (+ bias) -> Add of a second Dequantized input (either
    [TypeCast] to bf16 and back) -> ReLU -> Quantize: oneDNN's int8 sum."""
    b = GraphBuilder()
    dt = "bf16" if typecast else "f32"
    x, other = b.tensor("u8", [6, 16]), b.tensor("s8", [6, 8])
    dx, do = dequantize(b, x, Q), dequantize(b, other, W)
    dw = _weights(b, 16, 8)
    if typecast:
        dx, dw, do = (b.op("TypeCast", [t], out=[("bf16", list(t.shape))])[0] for t in (dx, dw, do))
    y = b.op("MatMul", [dx, dw, b.tensor(dt, [8])], out=[(dt, [6, 8])])[0]
    y = b.op("Add", [do, y], out=[(dt, [6, 8])])[0]
    y = b.op("ReLU", [y], out=[(dt, [6, 8])])[0]
    if typecast:
        y = b.op("TypeCast", [y], out=[("f32", [6, 8])])[0]
    b.op("Quantize", [y], out=[("u8", [6, 8])], attrs={"qtype": "per_tensor", "scales": [0.5], "zps": [1]})
    return b.finalize(), None


def matmul_select():
    b = GraphBuilder()
    y = b.op("MatMul", [b.tensor("f32", [2, 4, 16]), b.tensor("f32", [2, 16, 4])], out=[("f32", [2, 4, 4])])[0]
    b.op("Select", [b.tensor("boolean", [1, 4, 4]), b.tensor("f32", [1]), y], out=[("f32", [2, 4, 4])])
    return b.finalize(), None


def matmul_dropout():
    b = GraphBuilder()
    y = b.op("MatMul", [b.tensor("f32", [8, 16]), b.tensor("f32", [16, 12])], out=[("f32", [8, 12])])[0]
    seed, off, prob = b.tensor("s64", []), b.tensor("s64", []), b.tensor("f32", [])
    b.op("Dropout", [y, seed, off, prob], out=[("f32", [8, 12])])
    g = b.finalize()
    inputs = make_inputs(g, seed=2)
    inputs[prob.id] = np.array(0.25, np.float32)
    return g, inputs


def bf16_post_ops_then_typecast():
    """bf16 MatMul with an f32 dst -> BiasAdd -> Multiply -> ReLU -> Add -> TypeCast to bf16."""
    b = GraphBuilder()
    y = b.op("MatMul", [b.tensor("bf16", [8, 32]), b.tensor("bf16", [32, 16])], out=[("f32", [8, 16])])[0]
    y = b.op("BiasAdd", [y, b.tensor("f32", [16])], out=[("f32", [8, 16])])[0]
    y = b.op("Multiply", [y, b.tensor("bf16", [1, 1])], out=[("f32", [8, 16])])[0]
    y = b.op("ReLU", [y])[0]
    y = b.op("Add", [y, b.tensor("bf16", [1, 1])], out=[("f32", [8, 16])])[0]
    b.op("TypeCast", [y], out=[("bf16", [8, 16])])
    return b.finalize(), None


def int8_pool_view(view="StaticTranspose"):
    """int8 Dequantize -> AvgPool -> reshape/transpose -> Quantize."""
    b = GraphBuilder()
    d = dequantize(b, b.tensor("s8", [1, 2, 5, 5]), {"qtype": "per_tensor", "scales": [0.5], "zps": [-4]})
    p = b.op("AvgPool", [d], out=[("f32", [1, 2, 4, 4])],
             attrs={"kernel": [2, 2], "strides": [1, 1], "pads_begin": [0, 0], "pads_end": [0, 0],
                    "exclude_pad": False, "data_format": "NCX"})[0]
    if view == "StaticTranspose":
        v = b.op(view, [p], out=[("f32", [4, 4, 1, 2])], attrs={"order": [2, 3, 0, 1]})[0]
    else:
        v = b.op(view, [p], out=[("f32", [32])], attrs={"shape": [32], "special_zero": False})[0]
    b.op("Quantize", [v], out=[("s8", list(v.shape))], attrs={"qtype": "per_tensor", "scales": [0.25], "zps": [-4]})
    return b.finalize(), None


def depthwise_weights():
    """TensorFlow's depthwise convolution: constant f32 weights reshaped, quantized
    per channel, dequantized and reshaped to [H, W, 1, C] (NXC, XIO)."""
    b = GraphBuilder()
    x = dequantize(b, b.tensor("s8", [1, 9, 9, 6]), {"qtype": "per_tensor", "scales": [2.0 ** -7], "zps": [0]})
    w = b.tensor("f32", [3, 3, 3, 2], property_type="constant")
    w = b.op("StaticReshape", [w], out=[("f32", [3, 3, 6])], attrs={"shape": [3, 3, 6], "special_zero": False})[0]
    qa = {"qtype": "per_channel", "axis": 2, "scales": [2.0 ** -(3 + i % 2) for i in range(6)], "zps": [0] * 6}
    w = b.op("Quantize", [w], out=[("s8", [3, 3, 6])], attrs=qa)[0]
    w = dequantize(b, w, qa)
    w = b.op("StaticReshape", [w], out=[("f32", [3, 3, 1, 6])], attrs={"shape": [3, 3, 1, 6], "special_zero": False})[0]
    y = b.op("Convolution", [x, w], out=[("f32", [1, 9, 9, 6])],
             attrs={"strides": [1, 1], "pads_begin": [1, 1], "pads_end": [1, 1], "dilations": [1, 1], "groups": 6,
                    "data_format": "NXC", "weights_format": "XIO"})[0]
    b.op("Quantize", [y], out=[("s8", [1, 9, 9, 6])], attrs={"qtype": "per_tensor", "scales": [0.25], "zps": [0]})
    return b.finalize(), None


def gated_mlp_int4(join="Subtract"):
    """Gated MLP whose three weights are u4 with u8 zero points, DynamicDequantized
    per group to f16; the gate's swish and the up projection joined by ``join``."""
    b = GraphBuilder()
    x = b.tensor("f16", [2, 64])

    def weights(k, n):
        q = b.tensor("u4", [k, n])
        s, z = b.tensor("f16", [k, n // 32]), b.tensor("u8", [k, n // 32])
        return b.op("DynamicDequantize", [q, s, z], out=[("f16", [k, n])],
                    attrs={"qtype": "per_group", "group_shape": [1, 32], "axis": -1})[0]

    gate = b.op("MatMul", [x, weights(64, 96)], out=[("f32", [2, 96])])[0]
    sw = b.op("Multiply", [gate, b.op("Sigmoid", [gate])[0]])[0]
    up = b.op("MatMul", [x, weights(64, 96)], out=[("f32", [2, 96])])[0]
    h = b.op(join, [sw, up])[0]
    h = b.op("TypeCast", [h], out=[("f16", [2, 96])])[0]
    b.op("MatMul", [h, weights(96, 64)], out=[("f16", [2, 64])])
    return b.finalize(), None


def binary_matmul_binary(n=4):
    """n Multiplies of bf16 operands into f32 -> TypeCast -> MatMul -> n Adds -> TypeCast."""
    b = GraphBuilder()
    y = b.op("Multiply", [b.tensor("bf16", [2, 8, 8]), b.tensor("bf16", [2, 8, 8])], out=[("f32", [2, 8, 8])])[0]
    for _ in range(n - 1):
        y = b.op("Multiply", [y, b.tensor("bf16", [2, 8, 8])], out=[("f32", [2, 8, 8])])[0]
    y = b.op("TypeCast", [y], out=[("bf16", [2, 8, 8])])[0]
    y = b.op("MatMul", [y, b.tensor("bf16", [2, 8, 8])], out=[("f32", [2, 8, 8])])[0]
    for _ in range(n):
        y = b.op("Add", [y, b.tensor("bf16", [2, 8, 8])], out=[("f32", [2, 8, 8])])[0]
    b.op("TypeCast", [y], out=[("bf16", [2, 8, 8])])
    return b.finalize(), None


def vector_dot_scale():
    """MatMul of two vectors (a dst of no dims) times a [1] scale: one element each."""
    b = GraphBuilder()
    y = b.op("MatMul", [b.tensor("f32", [64]), b.tensor("f32", [64])], out=[("f32", [])])[0]
    b.op("Multiply", [y, b.tensor("f32", [1])], out=[("f32", [1])])
    return b.finalize(), None


#: (builder, the pattern that makes the one partition, whether int outputs are exact)
FORMS = {
    "int8_bf16_matmul": (int8_bf16_matmul, "quantized_compute"),
    "smooth_quant": (smooth_quant, "quantized_compute"),
    "int8_sum": (int8_sum, "quantized_compute"),
    "int8_sum_bf16": (lambda: int8_sum(True), "quantized_compute"),
    "matmul_select": (matmul_select, "matmul_post_ops"),
    "matmul_dropout": (matmul_dropout, "matmul_post_ops"),
    "bf16_post_ops_typecast": (bf16_post_ops_then_typecast, "matmul_post_ops"),
    "int8_pool_transpose": (int8_pool_view, "x8_pool_post_ops"),
    "int8_pool_reshape": (lambda: int8_pool_view("StaticReshape"), "x8_pool_post_ops"),
    "depthwise_weights": (depthwise_weights, "quantized_compute"),
    "gated_mlp_int4": (gated_mlp_int4, "gated_mlp"),
    "binary_matmul_binary": (binary_matmul_binary, "binary_matmul_binary"),
    "vector_dot_scale": (vector_dot_scale, "matmul_post_ops"),
}

__all__ = ["FORMS"]
