"""The fusion catalog: oneDNN's fusion patterns (../doc/fusion_patterns), the
training patterns, and the seed ops with their neighbours, as small graphs for
the one matching engine (passes/pattern.py).

Each entry is a function building one :class:`Pattern`; :func:`catalog` lists
them.  Each pattern declares the kernel shape its matches lower to (``kernel=``:
eltwise, anchor, staged, attention or views) and labels the ops a kernel gives a
part to (the attention roles: ``qk``, ``softmax``, ``pv``, ``reorder``, ...).
Which matches become partitions, and what their kernels keep in registers, is
decided by passes/legality.py from the match and its roles; how a fused
partition lowers, by graphc/codegen/fusion.py.  Patterns whose anchor has no kernel in this build
(MatMul, Convolution, pools) are listed already: legality refuses them until
their kernels exist, and then their post-ops fuse through the same epilogue
hook as every other anchor.

Reshapes and transposes are views (graphc/views.py): a chain of them is one
partition whose output views its input, and around a MatMul or an elementwise
chain they fold into the kernel's strides (the views block at the end).
"""
from __future__ import annotations

from functools import lru_cache

from graphc.ops import all_kinds, get_schema
from graphc.ops.common import Binary, Unary, UnaryBackward

from .pattern import Pattern

MAX_POST_OPS = 20


def _kinds(base) -> list[str]:
    return [k for k in all_kinds() if isinstance(get_schema(k), base)]


UNARY = _kinds(Unary)
BINARY = [k for k in _kinds(Binary) if k != "GreaterEqual"]
UNARY_BWD = _kinds(UnaryBackward)
ELTWISE = UNARY + BINARY
REDUCE = ["ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"]


# -- decision functions --------------------------------------------------------------------
def keeps_shape(x):
    """A post-op keeps the shape of the value it continues (``x``): the other
    operand of a binary broadcasts into it, never the chain value into a larger one."""
    return lambda o, m: tuple(o.outputs[0].shape) == tuple(m.tensor(x).shape)


def f32_dst(o, m) -> bool:
    return o.outputs[0].dtype.value == "f32"


def per_tensor(o, m) -> bool:
    return o.attr("qtype", "per_tensor") == "per_tensor"


def int8_quant(o, m) -> bool:
    """oneDNN's is_int8_quantization: s8/u8 on the quantized side, per tensor."""
    t = o.outputs[0] if o.kind == "Quantize" else o.inputs[0]
    return t.dtype.value in ("s8", "u8") and per_tensor(o, m)


def no_broadcast(o, m) -> bool:
    return o.attr("auto_broadcast", "numpy") == "none" or tuple(o.inputs[0].shape) == tuple(o.inputs[1].shape)


def same_quant_params(o, m) -> bool:
    """Every Dequantize into the Concat has the same scales and zero points."""
    ps = {(tuple(m.graph.ops[m.graph.producer[t.id][0]].attr("scales")),
           tuple(m.graph.ops[m.graph.producer[t.id][0]].attr("zps") or ())) for t in o.inputs
          if t.id in m.graph.producer}
    return len(ps) <= 1


# -- reusable pieces -------------------------------------------------------------------------
def post_op(q, x):
    """One unary or binary post-op continuing ``x`` (the other operand from outside)."""
    return q.op(ELTWISE, x, None, either_order=True, pred=keeps_shape(x), label="post")


def post_ops(p, x, lo=0, hi=MAX_POST_OPS):
    return p.repeat(post_op, x, lo, hi, label="post-ops")


def typecast(p, x):
    return p.op("TypeCast", x, optional=True, label="typecast")


def quantize(p, x):
    return p.op("Quantize", x, optional=True, pred=per_tensor, label="quantize")


def epilogue(p, x, lo=0):
    """[TypeCast] -> 0..20 post-ops -> [Quantize] (oneDNN's epilogue subgraph)."""
    return quantize(p, post_ops(p, typecast(p, x), lo))


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


def anchor_post_ops(name, kinds, doc, priority=8):
    """The epilogue hook of compute ops: [BiasAdd] -> post-ops (binary per-tensor,
    per-channel or full, i.e. sum; eltwise) -> [TypeCast] -> [Quantize]."""
    def build():
        p = Pattern(name, priority, doc, kernel="anchor")
        a = p.op(kinds, p.input())
        b = p.op("BiasAdd", a, optional=True)
        epilogue(p, b)
        return p
    return build


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
    anchor_post_ops("matmul_post_ops", ["MatMul"], "MatMul -> [BiasAdd] -> post-ops -> [TypeCast] -> [Quantize]"),
    anchor_post_ops("conv_post_ops", ["Convolution", "ConvTranspose"],
                    "Convolution/ConvTranspose -> [BiasAdd] -> post-ops -> [Quantize]"),
    anchor_post_ops("pool_post_ops", ["AvgPool", "MaxPool"], "AvgPool/MaxPool -> post-ops", 7),
    anchor_post_ops("interpolate_post_ops", ["Interpolate"], "Interpolate -> post-ops", 7),
    quantized_matmul,
]


# ==== quantized compute, gated MLP, binary-MatMul-binary (issue 14) =========================
COMPUTE = ["MatMul", "Convolution", "ConvTranspose"]


#: Dequantize and DynamicDequantize (scales and zero points as tensors, also per group)
DEQUANTIZE = ["Dequantize", "DynamicDequantize"]


def static_quant(o, m) -> bool:
    """Per-tensor or per-channel scales and zero points, or DynamicDequantize's
    (also per group) given as tensors (legality decides where a per-channel or
    grouped one may be computed in registers: passes/legality.py)."""
    return o.kind == "DynamicDequantize" or o.attr("qtype", "per_tensor") in ("per_tensor", "per_channel")


def q2f(p, x, weights: bool):
    """oneDNN's Q2F conversion: [Dynamic]Dequantize -> [TypeCast]; for weights also
    Quantize -> Dequantize -> [TypeCast] (f32 weights quantized in the graph).
    DynamicDequantize of int8/int4 weights into an f32/bf16/f16 MatMul is the
    weight-only-quantized MatMul."""
    if weights:
        x = p.op("Quantize", x, optional=True, pred=static_quant)
    d = p.op(DEQUANTIZE, x, optional=True, pred=static_quant)
    return p.op("TypeCast", d, optional=True)


def quantized_compute():
    p = Pattern("quantized_compute", 9.5,
                "[Dynamic]Dequantize (per tensor, channel or group, [TypeCast]) on src and weights -> MatMul/Convolution/"
                "ConvTranspose -> [BiasAdd] -> post-ops -> [TypeCast] -> [[Dynamic]Quantize per tensor or channel]",
                anchor="mm", kernel=("anchor", "staged"))
    mm = p.op(COMPUTE, q2f(p, p.input(), False), q2f(p, p.input(), True), label="mm")
    b = p.op("BiasAdd", mm, optional=True)
    p.op(["Quantize", "DynamicQuantize"], typecast(p, post_ops(p, b)), optional=True, pred=static_quant)
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
    Sigmoid for GLU, ...), Multiply, [TypeCast] (bf16/f16), FC down MatMul ->
    post-ops.  A staged kernel: up and gate into scratch, the gated product
    computed while the down MatMul packs its src."""
    p = Pattern("gated_mlp", 9.5, "MatMul up, MatMul gate (one src) -> [swish/GELU/...] -> Multiply -> "
                                  "[TypeCast] -> MatMul down -> post-ops", kernel="staged")
    x = p.input("src")
    up = p.op("MatMul", x, None, label="up")
    gate = p.op("MatMul", x, None, label="gate")
    act = p.optional_block(lambda q, g: q.alt(g, swish, activation), gate, label="gate activation")
    glu = p.op("Multiply", up, act, either_order=True, label="glu")
    down = p.op("MatMul", typecast(p, glu), None, label="down")
    post_ops(p, down)
    return p


def binary_matmul_binary():
    p = Pattern("binary_matmul_binary", 8.5, "a binary op on MatMul's src -> MatMul -> [BiasAdd] -> post-ops",
                anchor="mm", kernel="anchor")
    pro = p.op(BINARY, p.input(), None, label="prologue")
    mm = p.op("MatMul", pro, None, label="mm")
    post_ops(p, p.op("BiasAdd", mm, optional=True))
    return p


BUILDERS += [quantized_compute, gated_mlp, binary_matmul_binary]
# ==== end of issue 14's quantized compute and gated MLP block ==============================


# ==== scaled dot-product attention forward (issue 14: SDPA, MHA/MQA/GQA) ===================
SDPA_REORDERS = ["StaticReshape", "StaticTranspose"]


def viewed(p, label=""):
    """An outside tensor through [StaticReshape] -> [StaticTranspose] -> [StaticReshape]
    (the kernel reads them as views of its buffer: legality checks they are)."""
    return viewed_from(p, p.input(label))


def viewed_from(p, x, pred=None):
    """``x`` through [StaticReshape] -> [StaticTranspose] -> [StaticReshape] (role ``reorder``)."""
    x = p.op("StaticReshape", x, optional=True, pred=pred, label="reorder")
    x = p.op("StaticTranspose", x, optional=True, pred=pred, label="reorder")
    return p.op("StaticReshape", x, optional=True, pred=pred, label="reorder")


def of_computed(o, m) -> bool:
    """A reorder whose src is computed in the graph by a (Dynamic)Dequantize or a
    TypeCast, through reorders (so that a reorder of an outside tensor binds to one
    place of ``sdpa_operand`` only)."""
    src = o.inputs[0]
    while src.id in m.graph.producer:
        op = m.graph.ops[m.graph.producer[src.id][0]]
        if op.kind in DEQUANTIZE or op.kind == "TypeCast":
            return True
        if op.kind not in SDPA_REORDERS:
            return False
        src = op.inputs[0]
    return False


def sdpa_operand(p, label):
    """Q, K or V: an outside tensor through reorders -> [[Dynamic]Dequantize] (sdpa_quantized.md's
    fp8/int8 Q/K/V, sdpa_with_compressed_kv.md's int8/int4 K/V with grouped scales and zero
    points) -> [TypeCast] -> [reorders]; the kernel dequantizes while it packs its tiles."""
    x = p.op(DEQUANTIZE, viewed(p, label), optional=True, label=f"{label} dequantize")
    return viewed_from(p, p.op("TypeCast", x, optional=True, label=f"{label} typecast"), of_computed)


def sdpa_scale(x):
    """Multiply (either order) or Divide (scores / factor) keeping the scores' shape."""
    keeps = keeps_shape(x)
    return lambda o, m: keeps(o, m) and (o.kind == "Multiply" or o.inputs[0].id == m.tensor(x).id)


def gen_index_axis(last):
    """GenIndex over the rows (-2) or the columns (-1) of the scores."""
    return lambda o, m: o.attr("axis") % max(1, len(o.outputs[0].shape)) == len(o.outputs[0].shape) - 2 + last


def causal_mask(q, x):
    """The implicit causal mask: Select(GreaterEqual(row [+ s_kv] [- s_q], col), x, -inf);
    top-left without the Add and Subtract, bottom-right with them."""
    row = q.op("GenIndex", x, pred=gen_index_axis(0), label="row")
    col = q.op("GenIndex", x, pred=gen_index_axis(1), label="col")
    r = q.op("Add", row, None, either_order=True, optional=True)
    r = q.op("Subtract", r, None, optional=True)
    return q.op("Select", q.op("GreaterEqual", r, col), x, None, label="causal")


def add_mask(q, x):
    return q.op("Add", x, viewed(q, "mask"), either_order=True, pred=keeps_shape(x), label="mask")


def select_mask(q, x):
    return q.op("Select", viewed(q, "mask"), x, None, pred=keeps_shape(x), label="mask")


def last_axis(o, m) -> bool:
    return o.attr("axis") % max(1, o.inputs[0].ndim) == o.inputs[0].ndim - 1


def sdpa():
    """sdpa.md / gqa.md (inference and training forward), sdpa_with_compressed_kv.md and
    sdpa_quantized.md (dequantized operands: ``sdpa_operand``): MatMul Q@K^T -> [scale] ->
    [mask: causal (GenIndex/GreaterEqual/Select), Add or Select] -> SoftMax (last axis, [stats
    exported]) -> [Dropout] -> [Quantize -> Dequantize] -> MatMul @V ->
    [reorders/TypeCasts] -> [Quantize]; GQA/MQA as StaticReshapes around the MatMuls.  One
    flash-style kernel (legality's attention plan, graphc/codegen/attention.py)."""
    p = Pattern("sdpa", 11, "[reorder] -> [(Dynamic)Dequantize] -> MatMul QK -> [Multiply/Divide] -> "
                            "[causal/Add/Select mask] -> SoftMax [stats] -> [Dropout] -> [Quantize/Dequantize] -> "
                            "MatMul V -> [reorder/TypeCast] -> [Quantize]", anchor="qk", kernel="attention")
    qk = p.op("MatMul", sdpa_operand(p, "query"), sdpa_operand(p, "key"), label="qk")
    s = p.optional_block(lambda q, x: q.op(["Multiply", "Divide"], x, viewed(q, "scale"), either_order=True,
                                           pred=sdpa_scale(x), label="scale"), qk, label="scale")
    s = p.optional_block(lambda q, x: q.alt(x, causal_mask, add_mask, select_mask), s, label="mask")
    sm = p.op("SoftMax", s, pred=last_axis, label="softmax")
    sm = p.op("Dropout", sm, None, None, None, optional=True, label="dropout")
    sm = p.op("Dequantize", p.op("Quantize", sm, optional=True, pred=per_tensor, label="p quantize"),
              optional=True, pred=per_tensor, label="p dequantize")
    o = p.op("MatMul", sm, sdpa_operand(p, "value"), label="pv")
    o = p.repeat(lambda q, x: q.op(SDPA_REORDERS + ["TypeCast"], x, label="output"), o, 0, 4, label="output reorders")
    p.op("Quantize", o, optional=True, pred=per_tensor, label="output quantize")
    return p


def sdpa_backward():
    """sdpa.md (training backpropagation): S = Q@K^T -> [scale] -> [Add/Select mask] ->
    Subtract Stats -> Exp = P; dV = ([Dropout] -> [TypeCast] P)^T @ dO; dP = dO@V^T ->
    [Dropout]; dS = P * (dP - ReduceSum(O * dO)) (dM when it leaves) -> [scale] ->
    [TypeCast] -> dQ = dS@K and dK = dS^T@Q (GQA/MQA: K, V broadcast over the query
    heads of a group, dK and dV ReduceSums over them; 4-D GQA: the inputs reshaped to
    5-D and the gradients back, views in the kernel).  One flash-style backward kernel
    (legality's attention plan, graphc/codegen/attention.py)."""
    p = Pattern("sdpa_backward", 11, "MatMul QK -> [scale] -> [mask] -> Subtract stats -> Exp -> "
                                     "MatMuls dV, dP -> dS = P * (dP - ReduceSum(O * dO)) -> MatMuls dQ, dK",
                anchor="qk", kernel="attention")
    q, k, do = viewed(p, "query"), viewed(p, "key"), viewed(p, "diff_dst")

    def over_batch(o, m):
        nd = o.inputs[0].ndim
        return all(a % nd < nd - 2 for a in o.attr("axes") or [])

    def head_sum(p, x, label):
        """gqa.md: dK / dV a ReduceSum of the MatMul over the query heads sharing a K/V head
        -> [reorders] (4-D GQA: back to [N, H, S, D])."""
        x = p.op("ReduceSum", x, optional=True, pred=over_batch, label=f"{label} heads")
        return p.repeat(lambda b, y: b.op(SDPA_REORDERS, y, label="output"), x, 0, 4, label=f"{label} reorders")

    qk = p.op("MatMul", q, k, label="qk")
    s = p.optional_block(lambda b, x: b.op(["Multiply", "Divide"], x, b.input("scale"), either_order=True,
                                           pred=sdpa_scale(x), label="scale"), qk, label="scale")
    s = p.optional_block(lambda b, x: b.alt(x, add_mask, select_mask), s, label="mask")
    prob = p.op("Exp", p.op("Subtract", s, viewed(p, "stats"), label="minus stats"), label="p")
    pd = p.op("TypeCast", p.op("Dropout", prob, None, None, None, optional=True), optional=True)
    head_sum(p, p.op("MatMul", pd, do, label="dv"), "dv")
    dp = p.op("Dropout", p.op("MatMul", do, viewed(p, "value"), label="dp"), None, None, None, optional=True)
    rs = p.op("ReduceSum", p.op("Multiply", viewed(p, "dst"), do, either_order=True, label="o*do"), label="rowsum")
    ds = p.op("Multiply", prob, p.op("Subtract", dp, rs), either_order=True, label="ds")
    ds = p.optional_block(lambda b, x: b.op(["Multiply", "Divide"], x, b.input("scale"), either_order=True,
                                            pred=sdpa_scale(x), label="scale"), ds, label="ds scale")
    ds = p.op("TypeCast", ds, optional=True)
    p.repeat(lambda b, y: b.op(SDPA_REORDERS, y, label="output"), p.op("MatMul", ds, k, label="dq"), 0, 4,
             label="dq reorders")
    head_sum(p, p.op("MatMul", ds, q, label="dk"), "dk")
    return p


BUILDERS += [sdpa, sdpa_backward]
# ==== end of the scaled dot-product attention block ========================================


# ==== views folded into fused kernels (issue 19) ===========================================
VIEWS = ["StaticReshape", "StaticTranspose"]


def has_view(m) -> bool:
    return any(o.kind in VIEWS for o in m.ops)


def output_views(p, x):
    """Up to four reshapes/transposes after the value: stored through the inverse
    strides of the output (legality folds them when nothing else reads)."""
    return p.repeat(lambda q, y: q.op(VIEWS, y), x, 0, 4, label="output views")


def matmul_views():
    """A transformer's head split and merge around a MatMul: reshape/transpose views
    of its inputs -> MatMul -> [BiasAdd] -> post-ops -> reshape/transpose views.
    No data moves for the views: the GEMM reads and writes through strides."""
    p = Pattern("matmul_views", 8.5, "[reshape/transpose] -> MatMul -> [BiasAdd] -> post-ops -> "
                                     "[reshape/transpose]", anchor="mm", kernel="anchor")
    mm = p.op("MatMul", viewed(p, "src"), viewed(p, "weights"), label="mm")
    output_views(p, post_ops(p, p.op("BiasAdd", mm, optional=True)))
    p.check = has_view
    return p


def eltwise_views():
    """Reshape/transpose views of an input -> unary/binary chain -> [reshape/transpose
    views]: one loop, the views folded into its indexing.  (Anchored at the first
    view: views are rare, elementwise ops are not.)"""
    p = Pattern("eltwise_views", 5.5, "reshape/transpose -> unary/binary chain -> [reshape/transpose]",
                anchor="view", kernel="eltwise")
    v = p.repeat(lambda q, x: q.op(VIEWS, x), p.op(VIEWS, p.input("src"), label="view"), 0, 2)
    first = p.op(ELTWISE + ["TypeCast"], v)
    chain = p.repeat(lambda q, x: q.op(ELTWISE + ["TypeCast"], x, None, either_order=True, pred=keeps_shape(x)),
                     first, 0, MAX_POST_OPS)
    output_views(p, chain)
    return p


def view_chain():
    """Reshapes and transposes one after another: one view when the strides allow."""
    p = Pattern("view_chain", 4, "reshape/transpose -> reshape/transpose ...", kernel="views")
    p.repeat(lambda q, x: q.op(VIEWS, x), p.op(VIEWS, p.input()), 1, 8)
    return p


BUILDERS += [matmul_views, eltwise_views, view_chain]
# ==== end of the views block =================================================================


# ==== quantized pooling (issue 14) ====
POOLS = ["AvgPool", "MaxPool"]


def pool_rule(o, m) -> bool:
    """oneDNN's check_avgpool_attributes: no AvgPool with rounding_type ceil and exclude_pad false."""
    return not (o.kind == "AvgPool" and o.attr("rounding_type", "floor") == "ceil" and not o.attr("exclude_pad"))


def int8_pool(p):
    """int8 per-tensor Dequantize -> AvgPool/MaxPool (the pool is the anchor: the
    kernel dequantizes each tap as it loads it)."""
    d = p.op("Dequantize", p.input("src"), pred=int8_quant)
    return p.op(POOLS, d, pred=pool_rule, label="pool")


def x8_pool_post_ops():
    """oneDNN's x8_pool_post_ops, and x8_pool_reshape_transpose without its optional
    view: legality folds a view into a kernel's output only when the view's dst leaves
    the partition; one between the pool and the Quantize would make a staged kernel
    with two scratch buffers, so that variant is left out."""
    p = Pattern("x8_pool_post_ops", 10, "int8 Dequantize -> AvgPool/MaxPool -> post-ops -> int8 Quantize",
                anchor="pool", kernel="anchor")
    p.op("Quantize", post_ops(p, int8_pool(p)), pred=int8_quant)
    return p


def x8_pool_add_post_ops():
    """oneDNN's x8_pool_add_post_ops_cpu: the Add's other operand (either side)
    dequantized in the kernel where the pool stores."""
    p = Pattern("x8_pool_add_post_ops", 10.1, "int8 Dequantize -> AvgPool/MaxPool -> Add (a Dequantize) -> "
                                              "post-ops -> int8 Quantize", anchor="pool", kernel="anchor")
    pool = int8_pool(p)
    other = p.op("Dequantize", p.input("other"), label="other")
    add = p.op("Add", pool, other, either_order=True, pred=keeps_shape(pool), label="sum")
    p.op("Quantize", post_ops(p, add), pred=int8_quant)
    return p


BUILDERS += [x8_pool_post_ops, x8_pool_add_post_ops]
# ==== end of quantized pooling block ====

@lru_cache(maxsize=1)
def catalog() -> tuple[Pattern, ...]:
    return tuple(b() for b in BUILDERS)
