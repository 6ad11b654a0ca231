"""Scaled dot-product attention, forward and backward (SDPA, MHA/MQA/GQA)."""
from __future__ import annotations

from ..pattern import Pattern
from .pieces import keeps_shape, per_tensor
from .quantized import DEQUANTIZE


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
    """Select(mask, x, fill) (GPT: the masked scores replaced) or Select(mask, fill, x)
    (DistilBERT: the kept scores are the else branch)."""
    return q.alt(x, lambda b, y: b.op("Select", viewed(b, "mask"), y, None, pred=keeps_shape(y), label="mask"),
                 lambda b, y: b.op("Select", viewed(b, "mask"), None, y, pred=keeps_shape(y), label="mask"))


def scale(q, x):
    return q.op(["Multiply", "Divide"], x, viewed(q, "scale"), either_order=True, pred=sdpa_scale(x), label="scale")


def soft_cap(q, x):
    """Gemma-2's soft-capping: [Multiply 1/cap] -> Tanh -> Multiply cap (the scales are ``scale``s)."""
    return q.op("Tanh", x, label="soft cap")


#: at most this many ops between the Q@K^T MatMul and the SoftMax (scales, masks, soft-capping)
MAX_SCORE_OPS = 6


def score_ops(p, x):
    """The ops on the scores before the SoftMax, in any order (frameworks dump them so:
    GPT's Select -> Divide -> Add, DistilBERT's Divide -> Select, Gemma-2's Multiply ->
    Tanh -> Multiply -> Select): scales (Multiply/Divide), masks (implicit causal, Add,
    Select with the scores in either branch) and soft-capping."""
    return p.repeat(lambda q, y: q.alt(y, scale, causal_mask, add_mask, select_mask, soft_cap), x,
                    0, MAX_SCORE_OPS, label="score ops")


def probabilities(p, x):
    """The probabilities into @V: [Dropout] -> TypeCasts and a per-tensor Quantize ->
    Dequantize (quantized SDPA; int8-bf16 casts to f32 around them)."""
    x = p.op("Dropout", x, None, None, None, optional=True, label="dropout")
    return p.repeat(lambda q, y: q.alt(
        y, lambda b, z: b.op("TypeCast", z, label="p typecast"),
        lambda b, z: b.op("Quantize", z, pred=per_tensor, label="p quantize"),
        lambda b, z: b.op("Dequantize", z, pred=per_tensor, label="p dequantize")), x, 0, 5, label="p chain")


def last_axis(o, m) -> bool:
    return o.attr("axis") % max(1, o.inputs[0].ndim) == o.inputs[0].ndim - 1


def p_at_v(q, x):
    """O = P @ V."""
    return q.op("MatMul", x, sdpa_operand(q, "value"), label="pv")


def swaps_last_two(o, m) -> bool:
    order = [a % max(1, o.inputs[0].ndim) for a in o.attr("order")]
    return len(order) >= 2 and order == list(range(len(order) - 2)) + [len(order) - 1, len(order) - 2]


def v_at_p_transposed(q, x):
    """JAX: O^T = V^T @ P^T, the probabilities transposed (StaticTranspose of the last two
    axes -> [Reorder]) into the second input; the output transposed back after."""
    t = q.op("StaticTranspose", x, pred=swaps_last_two, label="p transpose")
    t = q.op("Reorder", t, optional=True, label="p transpose")
    return q.op("MatMul", sdpa_operand(q, "value"), t, label="pv")


def splits_columns(o, m) -> bool:
    """A StaticReshape splitting the scores' last dim in two: [.., M, H*N] -> [.., M, H, N]."""
    src, dst = tuple(o.inputs[0].shape), tuple(o.outputs[0].shape)
    return len(dst) == len(src) + 1 and dst[:-2] == src[:-1] and dst[-2] * dst[-1] == src[-1]


def merges_heads(o, m) -> bool:
    """A StaticReshape merging the last two dims: [.., M, H, N] -> [.., M, H*N]."""
    src, dst = tuple(o.inputs[0].shape), tuple(o.outputs[0].shape)
    return len(src) == len(dst) + 1 and src[:-2] == dst[:-1] and src[-2] * src[-1] == dst[-1]


def swaps_rows_and_heads(o, m) -> bool:
    """A StaticTranspose swapping the third- and second-last axes ([.., M, H, N] <-> [.., H, M, N])."""
    n = o.inputs[0].ndim
    order = [a % max(1, n) for a in o.attr("order")]
    return n >= 3 and order == list(range(n - 3)) + [n - 2, n - 3, n - 1]


def score_views(p, x):
    """JAX MQA: the scores [.., M, H*N] reshaped to [.., M, H, N], the heads moved before the
    rows ([.., H, M, N]); the kernel reads K split by heads instead."""
    return p.optional_block(lambda b, y: b.op("StaticTranspose", b.op("StaticReshape", y, pred=splits_columns,
                                                                       label="score view"),
                                              pred=swaps_rows_and_heads, label="score view"), x, label="score views")


def v_at_p_rows(q, x):
    """JAX MQA (oneDNN's float_mqa_jax_fusion): O = V @ P contracted over the probabilities'
    rows (the queries), P [.., H, M, N] -> [StaticTranspose -> StaticReshape back to
    [.., M, H*N]] into the second input, untransposed."""
    x = q.optional_block(lambda b, y: b.op("StaticReshape", b.op("StaticTranspose", y, pred=swaps_rows_and_heads,
                                                                 label="p rows"),
                                           pred=merges_heads, label="p rows"), x, label="p rows views")
    return q.op("MatMul", sdpa_operand(q, "value"), x, label="pv rows")


def sdpa():
    """sdpa.md / gqa.md (inference and training forward), sdpa_with_compressed_kv.md and
    sdpa_quantized.md (dequantized operands: ``sdpa_operand``): MatMul Q@K^T -> [scale] ->
    [mask: causal (GenIndex/GreaterEqual/Select), Add or Select] -> SoftMax (last axis, [stats
    exported]) -> [Dropout] -> [Quantize -> Dequantize] -> MatMul @V ->
    [reorders/TypeCasts] -> [Quantize] (JAX: O^T = V^T @ P^T, ``v_at_p_transposed``; JAX MQA: the
    scores split by heads, ``score_views``, and O = V @ P over the queries, ``v_at_p_rows``: the
    ``attention_rows`` kernel); GQA/MQA as StaticReshapes around the MatMuls.  One
    flash-style kernel (legality's attention plan, graphc/codegen/attention.py)."""
    p = Pattern("sdpa", 11, "[reorder] -> [(Dynamic)Dequantize] -> MatMul QK -> [scales, causal/Add/Select "
                            "masks, Tanh soft-capping, any order] -> SoftMax [stats] -> [Dropout] -> "
                            "[TypeCast/Quantize/Dequantize] -> MatMul V -> [reorder/Reorder/TypeCast] -> [Quantize]",
                anchor="qk", kernel="attention")
    qk = p.op("MatMul", sdpa_operand(p, "query"), sdpa_operand(p, "key"), label="qk")
    sm = p.op("SoftMax", score_ops(p, score_views(p, qk)), pred=last_axis, label="softmax")
    o = p.alt(probabilities(p, sm), p_at_v, v_at_p_transposed, v_at_p_rows, label="@V")
    o = p.repeat(lambda q, x: q.op(SDPA_REORDERS + ["Reorder", "TypeCast"], x, label="output"), o, 0, 5,
                 label="output reorders")
    p.op("Quantize", o, optional=True, pred=per_tensor, label="output quantize")
    return p


def sdpa_backward():
    """sdpa.md (training backpropagation): S = Q@K^T -> the forward's score ops (scales, masks
    with the implicit causal one, in any order) ->
    Subtract Stats -> Exp = P; dV = ([Dropout] -> [TypeCast] P)^T @ dO; dP = dO@V^T ->
    [Dropout]; dS = P * (dP - ReduceSum(O * dO)) (dM when it leaves) -> [scale] ->
    [TypeCast] -> dQ = dS@K and dK = dS^T@Q (GQA/MQA: K, V broadcast over the query
    heads of a group, dK and dV ReduceSums over them; 4-D GQA: the inputs reshaped to
    5-D and the gradients back, views in the kernel).  One flash-style backward kernel
    (legality's attention plan, graphc/codegen/attention.py)."""
    p = Pattern("sdpa_backward", 11, "MatMul QK -> [scales, masks] -> Subtract stats -> Exp -> "
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
    s = score_ops(p, qk)
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


BUILDERS = [sdpa, sdpa_backward]
