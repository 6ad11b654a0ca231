"""Kind lists, decision functions and reusable pattern pieces shared by the catalog's blocks."""
from __future__ import annotations

from graphc.ops import all_kinds, get_schema
from graphc.ops.common import Binary, Predicate, Unary, UnaryBackward


MAX_POST_OPS = 20


def _kinds(base) -> list[str]:
    return [k for k in all_kinds() if isinstance(get_schema(k), base)]


UNARY = _kinds(Unary)
BINARY = [k for k in _kinds(Binary) if not isinstance(get_schema(k), Predicate)]   # (boolean results: no post-ops)
UNARY_BWD = _kinds(UnaryBackward)
ELTWISE = UNARY + BINARY
REDUCE = ["ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"]


# -- decision functions --------------------------------------------------------------------
def keeps_shape(x):
    """A post-op keeps the shape of the value it continues (``x``): the other
    operand of a binary broadcasts into it, never the chain value into a larger one
    (but for one element becoming one element of another rank: a MatMul of two
    vectors, whose dst has no dims, times a [1] scale)."""
    return lambda o, m: one_frame(o.outputs[0].shape, m.tensor(x).shape)


def one_frame(a, b) -> bool:
    """Shapes ``a`` and ``b`` are one frame: equal, or both of one element."""
    return tuple(a) == tuple(b) or (all(d == 1 for d in a) and all(d == 1 for d in b))


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


def int8_sum(q, x):
    """A binary post-op whose other operand is dequantized in the kernel: oneDNN's
    int8 sum (Dequantize -> [TypeCast] -> Add), either side."""
    d = q.op("Dequantize", None, pred=per_tensor, label="other")
    other = q.op("TypeCast", d, optional=True)
    return q.op(BINARY, x, other, either_order=True, pred=keeps_shape(x), label="post")


def cast_step(q, x):
    """A TypeCast between post-ops (bf16 MatMul dst -> f32 post-ops, or back)."""
    return q.op("TypeCast", x, label="typecast")


def select_step(q, x):
    """oneDNN's optional Select after the post-ops: the chain's value is src_1."""
    return q.op("Select", None, None, x, pred=keeps_shape(x), label="post")


def compute_post_ops(p, x, lo=0, hi=MAX_POST_OPS):
    """What a compute anchor (MatMul, Convolution, ConvTranspose, pools) takes after
    its [BiasAdd]: up to ``hi`` steps, each a unary or binary post-op, one whose
    other operand is dequantized (int8 sum), a TypeCast or a Select, in any order
    (oneDNN's post-ops -> [Select] -> [TypeCast] -> [Add] -> [smooth-quant
    Multiply] of its int8 and bf16 MatMul and convolution patterns are all such
    chains)."""
    return p.repeat([int8_sum, post_op, cast_step, select_step], x, lo, hi, label="post-ops")


def typecast(p, x):
    return p.op("TypeCast", x, optional=True, label="typecast")


def quantize(p, x):
    return p.op("Quantize", x, optional=True, pred=per_tensor, label="quantize")


def compute_epilogue(p, x, lo=0):
    """compute_post_ops -> [Quantize per tensor] (the compute anchors' epilogue)."""
    return quantize(p, compute_post_ops(p, x, lo))


def epilogue(p, x, lo=0):
    """[TypeCast] -> 0..20 post-ops -> [Quantize] (oneDNN's epilogue subgraph)."""
    return quantize(p, post_ops(p, typecast(p, x), lo))
