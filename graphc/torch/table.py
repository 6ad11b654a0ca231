"""The one mapping table: ATen op -> graphc ops, with each row's guard (when
graphc takes the node) and dtypes.  A converter adds the node's ops to a
RegionBuilder and returns its result's logical tensor (a tuple for an op of
several outputs, None where an output is not computed).  A node whose row is
missing or whose guard says no stays an ATen call (graphc.torch.lower).  The
README's table is ``markdown()``."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from .build import FLOAT, DTYPES, dense_strides, meta, static_dims

aten = torch.ops.aten
ANY = tuple(DTYPES.values())


@dataclass(frozen=True)
class Row:
    targets: tuple            # ATen overloads
    ops: str                  # the graphc ops it becomes (for the table)
    convert: Callable         # (builder, node) -> LogicalTensor | tuple
    guard: Callable | None    # (node) -> None when graphc takes it, else the reason
    dtypes: tuple = FLOAT
    says: str = ""            # the guards in words


TABLE: dict = {}


def row(targets, ops, dtypes=FLOAT, says="", guard=None):
    def register(convert):
        r = Row(tuple(targets), ops, convert, guard, dtypes, says)
        for t in r.targets:
            TABLE[t] = r
        return convert
    return register


def _users_of_outputs(node) -> set:
    """The output indices of a multi-output node that something reads."""
    import operator
    return {u.args[1] for u in node.users if u.target is operator.getitem}


def _only_first_output(node):
    used = _users_of_outputs(node)
    return None if used <= {0} else f"outputs {sorted(used - {0})} are read (only output 0 is computed)"


def _alpha_one(node):
    return None if node.kwargs.get("alpha", 1) == 1 else "alpha != 1"


# ------------------------------------------------------------------ GEMMs
@row([aten.mm.default, aten.bmm.default], "MatMul")
def _mm(b, n):
    return b.op("MatMul", [b.value(n.args[0]), b.value(n.args[1])], [b.out(n)])


@row([aten.addmm.default], "MatMul (bias)", says="beta = alpha = 1",
     guard=lambda n: None if n.kwargs.get("beta", 1) == 1 and n.kwargs.get("alpha", 1) == 1 else "beta or alpha != 1")
def _addmm(b, n):
    bias, a, w = (b.value(x) for x in n.args[:3])
    return b.op("MatMul", [a, w, bias], [b.out(n)])


# ------------------------------------------------------------------ pointwise
_BINARY = {aten.add.Tensor: "Add", aten.sub.Tensor: "Subtract", aten.mul.Tensor: "Multiply",
           aten.div.Tensor: "Divide", aten.maximum.default: "Maximum", aten.minimum.default: "Minimum"}


def _binary_guard(n):
    if n.target in (aten.add.Tensor, aten.sub.Tensor) and _alpha_one(n):
        return _alpha_one(n)
    if not any(isinstance(a, torch.fx.Node) for a in n.args[:2]):
        return "no tensor operand"
    return None


@row([aten.div.Tensor, aten.maximum.default, aten.minimum.default], "Divide / Maximum / Minimum",
     says="a number operand is a constant tensor", guard=_binary_guard)
def _binary(b, n):
    out = b.out(n)
    x, y = (b.value(a, like=out) for a in n.args[:2])
    return b.op(_BINARY[n.target], [x, y], [out])


@row([aten.div.Scalar], "Divide", says="a constant tensor of the number")
def _binary_scalar(b, n):
    out = b.out(n)
    return b.op("Divide", [b.value(n.args[0]), b.value(n.args[1], like=out)], [out])


_UNARY = {aten.relu.default: "ReLU", aten.tanh.default: "Tanh", aten.sigmoid.default: "Sigmoid",
          aten.exp.default: "Exp", aten.sqrt.default: "Sqrt", aten.abs.default: "Abs", aten.log.default: "Log"}


_RESHAPES = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)


def _pointwise(b, n, kind, **attrs):
    """A one-operand pointwise op; on a reshape of a value the region computes (a
    Linear's [rows, out] seen as [batch, seq, out]) it is applied before the
    reshape, so the GEMM's post-op pattern takes it (the reshape's own view, then
    unread, moves no data)."""
    src = n.args[0]
    if isinstance(src, torch.fx.Node) and src.target in _RESHAPES and len(src.users) == 1 and \
            isinstance(src.args[0], torch.fx.Node) and src.args[0].op != "placeholder" and src.args[0] in b.env:
        inner = b.value(src.args[0])
        if not isinstance(inner, tuple):
            y = b.op(kind, [inner], [b.tmp(inner)], **attrs)
            out = b.out(n)
            return b.op("StaticReshape", [y], [out], shape=list(out.shape), special_zero=False)
    return b.op(kind, [b.value(src)], [b.out(n)], **attrs)


@row(list(_UNARY), "ReLU / Tanh / Sigmoid / Exp / Sqrt / Abs / Log (before a reshape it reads)")
def _unary(b, n):
    return _pointwise(b, n, _UNARY[n.target])


@row([aten.gelu.default], "GELU (gelu_erf, gelu_tanh; before a reshape it reads)")
def _gelu(b, n):
    mode = "gelu_tanh" if n.kwargs.get("approximate", "none") == "tanh" else "gelu_erf"
    return _pointwise(b, n, "GELU", mode=mode)


@row([aten.pow.Tensor_Scalar], "Pow", says="a number exponent")
def _pow(b, n):
    return b.op("Pow", [b.value(n.args[0])], [b.out(n)], beta=float(n.args[1]))


@row([aten.neg.default], "Multiply (by -1)")
def _neg(b, n):
    out = b.out(n)
    return b.op("Multiply", [b.value(n.args[0]), b.value(-1.0, like=out)], [out])


@row([aten.rsqrt.default], "Sqrt, Reciprocal")
def _rsqrt(b, n):
    x = b.value(n.args[0])
    return b.op("Reciprocal", [b.op("Sqrt", [x], [b.tmp(x)])], [b.out(n)])


# ------------------------------------------------------------------ normalization, softmax
def _layer_norm_guard(n):
    w, bias = n.args[2], n.args[3]
    return "only one of weight and bias" if (w is None) != (bias is None) else None


@row([aten.native_layer_norm.default], "LayerNorm (+ Add, Pow, StaticReshape for mean and rstd)",
     says="weight and bias both or neither", guard=_layer_norm_guard)
def _layer_norm(b, n):
    x, shape, w, bias, eps = n.args[:5]
    src = b.value(x)
    affine = w is not None
    ins = [src] + ([b.value(w), b.value(bias)] if affine else [])
    used = _users_of_outputs(n)
    begin = src.ndim - len(shape)
    if not used & {1, 2}:
        y = b.op("LayerNorm", ins, [b.out(n, 0)], keep_stats=False, begin_norm_axis=begin, use_affine=affine,
                 epsilon=float(eps))
        return (y, None, None)
    lead = list(src.shape[:begin])
    y, mean, var = b.op("LayerNorm", ins, [b.out(n, 0), b.tmp(src, lead), b.tmp(src, lead)], keep_stats=True,
                        begin_norm_axis=begin, use_affine=affine, epsilon=float(eps))
    mean_t, rstd_t = b.out(n, 1), b.out(n, 2)
    b.op("StaticReshape", [mean], [mean_t], shape=list(mean_t.shape), special_zero=False)
    b.op("StaticReshape", [b.rstd(var, eps)], [rstd_t], shape=list(rstd_t.shape), special_zero=False)
    return (y, mean_t, rstd_t)


def _layer_norm_backward_guard(n):
    w, bias = n.args[5], n.args[6]
    if w is None or bias is None:
        return "no weight or bias"
    return None


@row([aten.native_layer_norm_backward.default], "LayerNormBackward (variance from rstd: Pow, Subtract)",
     says="with weight and bias", guard=_layer_norm_backward_guard)
def _layer_norm_backward(b, n):
    grad, x, shape, mean, rstd, w, bias = n.args[:7]
    src = b.value(x)
    begin = src.ndim - len(shape)
    lead = list(src.shape[:begin])
    eps = 1e-12   # (torch saves rstd: graphc gets var = rstd ** -2 - eps and adds eps back)
    mean_g = b.op("StaticReshape", [b.value(mean)], [b.tmp(src, lead)], shape=lead, special_zero=False)
    r = b.op("StaticReshape", [b.value(rstd)], [b.tmp(src, lead)], shape=lead, special_zero=False)
    inv2 = b.op("Pow", [r], [b.tmp(r)], beta=-2.0)
    var = b.op("Subtract", [inv2, b.value(eps, like=inv2)], [b.tmp(r)])
    ins = [src, b.value(grad), mean_g, var, b.value(w), b.value(bias)]
    return tuple(b.op("LayerNormBackward", ins, [b.out(n, 0), b.out(n, 1), b.out(n, 2)], begin_norm_axis=begin,
                      use_affine=True, epsilon=eps))


@row([aten._softmax.default], "SoftMax", says="no half-to-float",
     guard=lambda n: "half_to_float" if n.args[2] else None)
def _softmax(b, n):
    return b.op("SoftMax", [b.value(n.args[0])], [b.out(n)], axis=int(n.args[1]))


@row([aten._native_batch_norm_legit_no_training.default], "BatchNormInference",
     says="NCX; saved mean and rstd unread", guard=_only_first_output)
def _batch_norm(b, n):
    if n in b.folded:   # (into the convolution before it)
        return (b.folded[n], None, None)
    x, w, bias, mean, var, _momentum, eps = n.args[:7]
    src = b.value(x)
    ins = [src, b.value(w), b.value(bias), b.value(mean), b.value(var)]
    return (b.op("BatchNormInference", ins, [b.out(n, 0)], epsilon=float(eps), data_format="NCX"), None, None)


@row([aten._softmax_backward_data.default], "SoftMaxBackward")
def _softmax_backward(b, n):
    grad, y, dim = n.args[:3]
    return b.op("SoftMaxBackward", [b.value(grad), b.value(y)], [b.out(n)], axis=int(dim))


@row([aten.gelu_backward.default], "GELUBackward")
def _gelu_backward(b, n):
    mode = "gelu_tanh" if n.kwargs.get("approximate", "none") == "tanh" else "gelu_erf"
    return b.op("GELUBackward", [b.value(n.args[1]), b.value(n.args[0])], [b.out(n)], mode=mode)


@row([aten.tanh_backward.default], "TanhBackward (from the output)")
def _tanh_backward(b, n):
    return b.op("TanhBackward", [b.value(n.args[1]), b.value(n.args[0])], [b.out(n)], use_dst=True)


@row([aten.threshold_backward.default], "ReLUBackward", says="threshold 0",
     guard=lambda n: None if n.args[2] == 0 else "threshold != 0")
def _threshold_backward(b, n):
    return b.op("ReLUBackward", [b.value(n.args[1]), b.value(n.args[0])], [b.out(n)], use_dst=False)


def _to_copy_guard(n):
    extra = set(n.kwargs) - {"dtype", "memory_format", "layout", "device"}
    if extra or n.kwargs.get("layout") not in (None, torch.strided) or \
            n.kwargs.get("memory_format") not in (None, torch.preserve_format):
        return f"arguments {sorted(extra) or 'layout / memory_format'}"
    src, dst = DTYPES.get(meta(n.args[0]).dtype), DTYPES.get(meta(n).dtype)
    if dst == "boolean" and src in FLOAT + ("s32", "s64"):
        return None
    return None if src != dst and (dst == "f32" or src == "f32" and dst in FLOAT) else f"a cast {src} -> {dst}"


@row([aten._to_copy.default], "TypeCast; NotEqual (0) to bool", dtypes=FLOAT + ("s32", "s64", "boolean"),
     says="f32 <-> bf16 / f16 (autocast's casts); s32, s64, bool -> f32; numbers -> bool", guard=_to_copy_guard)
def _to_copy(b, n):
    x, out = b.value(n.args[0]), b.out(n)
    if out.dtype == "boolean":
        return b.op("NotEqual", [x, b.constant(np.zeros((), x.dtype.np))], [out])
    return b.op("TypeCast", [x], [out])


# ------------------------------------------------------------------ embedding
_INDEX_TYPES = (torch.int32, torch.int64)


def _embedding_guard(n):
    w, idx = n.args[:2]
    if DTYPES.get(meta(w).dtype) not in FLOAT or meta(idx).dtype not in _INDEX_TYPES:
        return f"dtypes {meta(w).dtype}, {meta(idx).dtype}"
    return None if meta(w).ndim == 2 else "weight not 2-D"


@row([aten.embedding.default], "Embedding (indices checked by the kernel)", dtypes=FLOAT + ("s32", "s64"),
     says="float weight, s32 / s64 indices (padding_idx, scale_grad_by_freq, sparse change only the gradient)",
     guard=_embedding_guard)
def _embedding(b, n):
    w, idx = n.args[:2]
    return b.op("Embedding", [b.value(idx), b.value(w)], [b.out(n)])


def _index_select_guard(n):
    x, dim, idx = n.args[:3]
    if DTYPES.get(meta(x).dtype) not in FLOAT or meta(idx).dtype not in _INDEX_TYPES:
        return f"dtypes {meta(x).dtype}, {meta(idx).dtype}"
    if meta(x).ndim == 0 or dim % meta(x).ndim != 0 or meta(idx).ndim != 1:
        return "not 1-D indices on dim 0"
    return None


@row([aten.index_select.default], "Embedding (StaticReshape to and from [rows, the rest])",
     dtypes=FLOAT + ("s32", "s64"), says="float source, 1-D s32 / s64 indices on dim 0", guard=_index_select_guard)
def _index_select(b, n):
    x, _dim, idx = (b.value(a) if isinstance(a, torch.fx.Node) else a for a in n.args[:3])
    out = b.out(n)
    rows = [x.shape[0], math.prod(x.shape[1:])]
    if list(x.shape) != rows:
        x = b.op("StaticReshape", [x], [b.tmp(x, rows)], shape=rows, special_zero=False)
    if out.ndim == 2:
        return b.op("Embedding", [idx, x], [out])
    y = b.op("Embedding", [idx, x], [b.tmp(x, [idx.shape[0], rows[1]])])
    return b.op("StaticReshape", [y], [out], shape=list(out.shape), special_zero=False)


def _embedding_backward_guard(n):
    grad, idx, num, pad = n.args[:4]
    if (n.args[4] if len(n.args) > 4 else n.kwargs.get("scale_grad_by_freq", False)):
        return "scale_grad_by_freq"
    if DTYPES.get(meta(grad).dtype) not in FLOAT or meta(idx).dtype not in (torch.int32, torch.int64):
        return f"dtypes {meta(grad).dtype}, {meta(idx).dtype}"
    return None if -1 <= pad < num else "padding_idx"


@row([aten.embedding_dense_backward.default], "EmbeddingBackward (indices checked by the kernel)",
     dtypes=FLOAT + ("s32", "s64"), says="not scale_grad_by_freq; float gradient, s32 / s64 indices",
     guard=_embedding_backward_guard)
def _embedding_backward(b, n):
    grad, idx, num, pad = n.args[:4]
    dy = b.value(grad)
    # (EmbeddingBackward reads only the weight's shape: a broadcast zero, no memory)
    w = b.constant(np.broadcast_to(np.zeros((), dy.dtype.np), (int(num), dy.shape[-1])), strides=[0, 0])
    attrs = {"padding_idx": int(pad)} if pad >= 0 else {}
    return b.op("EmbeddingBackward", [b.value(idx), w, dy], [b.out(n)], **attrs)


# ------------------------------------------------------------------ views
@row([aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.unsqueeze.default,
      aten.squeeze.dim, aten.squeeze.dims], "StaticReshape", dtypes=ANY)
def _view(b, n):
    out = b.out(n)
    return b.op("StaticReshape", [b.value(n.args[0])], [out], shape=list(out.shape), special_zero=False)


@row([aten.permute.default], "StaticTranspose", dtypes=ANY)
def _permute(b, n):
    x = b.value(n.args[0])
    return b.op("StaticTranspose", [x], [b.out(n)], order=[d % x.ndim for d in n.args[1]])


@row([aten.transpose.int, aten.t.default], "StaticTranspose", dtypes=ANY)
def _transpose(b, n):
    x = b.value(n.args[0])
    d0, d1 = (n.args[1] % x.ndim, n.args[2] % x.ndim) if len(n.args) > 1 else (0, 1)
    order = list(range(x.ndim))
    order[d0], order[d1] = order[d1], order[d0]
    return b.op("StaticTranspose", [x], [b.out(n)], order=order)


@row([aten.clone.default, aten.alias.default, aten.lift_fresh_copy.default],
     "StaticReshape (identity); an alias of a value the region computes is that value (no op)", dtypes=ANY)
def _identity(b, n):
    src = n.args[0]
    if n.target is aten.alias.default and src.op != "placeholder":
        # (training saves activations as aliases: the region returns the same buffer
        # twice, as eager's alias shares its storage; a copy cost a pass over memory)
        return b.value(src)
    out = b.out(n)
    return b.op("StaticReshape", [b.value(src)], [out], shape=list(out.shape), special_zero=False)


@row([aten.cat.default], "Concat (empty operands left out; one left: StaticReshape)",
     says="an operand not empty", guard=lambda n: None if any(meta(a).numel() for a in n.args[0]) else "all empty")
def _cat(b, n):
    ins = [b.value(a) for a in n.args[0] if meta(a).numel()]   # (a cache's empty past, say)
    out = b.out(n)
    if len(ins) == 1:
        return b.op("StaticReshape", ins, [out], shape=list(out.shape), special_zero=False)
    return b.op("Concat", ins, [out], axis=int(n.args[1] if len(n.args) > 1 else 0) % out.ndim)


# ------------------------------------------------------------------ broadcasting, masks
#: the rows whose graphc ops broadcast their operands (numpy's rules; Select's cond one way;
#: graphc.torch.table_index adds the comparisons and boolean logic)
BROADCASTING = set(_BINARY) | {aten.where.self}


def _expand_guard(n):
    """An expand adds no op: to its own shape it is its input; broadcasting, it is
    folded into its users when each is an op that broadcasts, graphc takes it and it
    computes the same shape from expand's input (a region output is expanded as a torch view)."""
    src = tuple(meta(n.args[0]).shape)
    if tuple(meta(n).shape) == src:
        return None
    if n.users and all(u.target in BROADCASTING and reason_not_taken(u) is None and
                       tuple(meta(u).shape) == tuple(torch.broadcast_shapes(
                           *[src if a is n else tuple(meta(a).shape) for a in u.args if isinstance(a, torch.fx.Node)]))
                       for u in n.users):
        return None
    return "broadcasts into an op that does not broadcast"


#: what an expand becomes (a view: a region of views alone is left to torch)
EXPAND_OPS = "none: its input (its users broadcast: binary ops, Select)"


@row([aten.expand.default], EXPAND_OPS, dtypes=ANY,
     says="to its own shape, or every user broadcasts expand's input to the same shape", guard=_expand_guard)
def _expand(b, n):
    return b.value(n.args[0])


def _scalar_tensor_guard(n):
    if n.kwargs.get("layout") not in (None, torch.strided):
        return "layout"
    users = list(n.users)
    return None if users and all(reason_not_taken(u) is None for u in users) else "a user graphc does not take"


@row([aten.scalar_tensor.default], "a constant tensor (of its users)", says="every user taken by graphc",
     guard=_scalar_tensor_guard)
def _scalar_tensor(b, n):
    return b.constant(np.array(n.args[0], dtype=b.lt(meta(n)).dtype.np))


def _where_guard(n):
    cond, x, y = n.args[:3]
    if not all(isinstance(a, torch.fx.Node) for a in (cond, x, y)) or meta(cond).dtype is not torch.bool:
        return "a condition not a bool tensor"
    if not meta(x).dtype == meta(y).dtype == meta(n).dtype:
        return "operands of different dtypes"
    operands = [tuple(meta(a).shape) for a in (x, y)]
    if tuple(torch.broadcast_shapes(*operands)) != tuple(meta(n).shape) and \
            not any(a.target is aten.scalar_tensor.default and len(a.users) == 1 for a in (x, y)):
        return "the condition broadcasts the operands (not a number of its own)"
    return None


@row([aten.where.self], "Select", dtypes=FLOAT + ("boolean",),
     says="a bool condition; operands of the result's dtype, broadcast to its shape by themselves or numbers",
     guard=_where_guard)
def _where(b, n):
    cond, x, y = (b.value(a) for a in n.args[:3])
    out = b.out(n)
    if [max(d) for d in zip(*[[1] * (out.ndim - t.ndim) + list(t.shape) for t in (x, y)])] != list(out.shape):
        # (the condition alone has the result's shape: a number operand is spread over it, zero strides)
        at = 1 if x.id in b.constants else 2
        number = b.constants.pop((x, y)[at - 1].id)   # (its only user: _where_guard)
        full = b.constant(np.broadcast_to(number, out.shape), strides=[0] * out.ndim)
        x, y = (full, y) if at == 1 else (x, full)
    return b.op("Select", [cond, x, y], [out])


# ------------------------------------------------------------------ convolution and pooling
def _conv_guard(n):
    return "transposed" if n.args[6] else None


def _constant_root(b, node):
    """The constant placeholder ``node`` is, or is a dtype cast of (autocast's
    weight copies), else None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node in b.constant_nodes:
        return node
    if node.target is aten._to_copy.default and node.args[0] in b.constant_nodes:
        return node.args[0]
    return None


def _folded_batch_norm(b, n):
    """The inference batch norm that is the only user of convolution ``n`` (in
    this region), with constant f32 statistics and affine parameters, or None."""
    users = list(n.users)
    if len(users) != 1 or users[0].target is not aten._native_batch_norm_legit_no_training.default:
        return None
    bn = users[0]
    x, *params = bn.args[:5]
    if x is not n or reason_not_taken(bn) is not None or \
            any(p is None or p not in b.constant_nodes or meta(p).dtype is not torch.float32 for p in params):
        return None
    return bn


def _conv_weights(b, n, w_node, bn):
    """(weights, bias, weights_format) of convolution ``n``.  Constant weights
    (inference) are laid out once as XIO, rows BLAS reads in place (the constant
    tensor cache keeps them: OIX would be packed at every call), with the folded
    batch norm ``bn`` (or None) multiplied in: W * s per output channel and
    (bias - mean) * s + beta, s = gamma / sqrt(var + eps), in f32, then cast."""
    bias_node = n.args[2]
    root = _constant_root(b, w_node)
    if root is None:
        return b.value(w_node), (b.value(bias_node) if bias_node is not None else None), "OIX"
    w = b.value(root)
    out_dt = b.lt(meta(n)).dtype
    order = list(range(2, w.ndim)) + [1, 0]
    wt = b.op("StaticTranspose", [w], [b.tmp(w, [w.shape[i] for i in order], dense=True)], order=order)
    bias = None
    if bn is not None:
        gamma, beta, mean, var = (b.value(a) for a in bn.args[1:5])
        scale = b.op("Multiply", [gamma, b.rstd(var, bn.args[6])], [b.tmp(var)])
        wt = b.op("Multiply", [wt, scale], [b.tmp(wt, dense=True)])
        centred = mean if bias_node is None else b.op("Subtract", [mean, b.value(bias_node)], [b.tmp(mean)])
        bias = b.op("Subtract", [beta, b.op("Multiply", [centred, scale], [b.tmp(mean)])], [b.tmp(mean)])
    elif bias_node is not None:
        bias = b.value(bias_node)
    return b.cast(wt, out_dt), None if bias is None else b.cast(bias, out_dt), "XIO"


@row([aten.convolution.default], "Convolution (constant weights laid out XIO once; an inference batch norm "
     "after it folded into its weights and bias)", says="NCX / OIX, not transposed", guard=_conv_guard)
def _convolution(b, n):
    x, w_node, _bias, stride, padding, dilation, _t, _op, groups = n.args[:9]
    bn = _folded_batch_norm(b, n)
    w, bias, fmt = _conv_weights(b, n, w_node, bn)
    out = b.out(bn, 0) if bn is not None else b.out(n)
    y = b.op("Convolution", [b.value(x), w] + ([bias] if bias is not None else []), [out], strides=list(stride),
             pads_begin=list(padding), pads_end=list(padding), dilations=list(dilation), groups=int(groups),
             data_format="NCX", weights_format=fmt)
    if bn is not None:
        b.folded[bn] = y
    return y


def _pool_args(n, ndim):
    kernel = list(n.args[1])
    stride = list(n.args[2]) if len(n.args) > 2 and n.args[2] else kernel
    pad = list(n.args[3]) if len(n.args) > 3 else [0] * len(kernel)
    return kernel * (ndim if len(kernel) == 1 else 1), stride, pad


def _max_pool_guard(n):
    dil = n.args[4] if len(n.args) > 4 else [1]
    if any(d != 1 for d in dil):
        return "dilation"
    return _only_first_output(n)


@row([aten.max_pool2d_with_indices.default], "MaxPool", says="NCX; indices unread; floor rounding",
     guard=lambda n: "ceil_mode" if len(n.args) > 5 and n.args[5] else _max_pool_guard(n))
def _max_pool(b, n):
    kernel, stride, pad = _pool_args(n, 2)
    pad = pad * (2 if len(pad) == 1 else 1)
    stride = stride * (2 if len(stride) == 1 else 1)
    y = b.op("MaxPool", [b.value(n.args[0])], [b.out(n, 0)], kernel=kernel, strides=stride, pads_begin=pad,
             pads_end=pad, data_format="NCX")
    return (y, None)


@row([aten.mean.dim, aten.sum.dim_IntList], "ReduceMean / ReduceSum", dtypes=("f32", "bf16", "f16"),
     says="given dims", guard=lambda n: None if n.args[1] and not n.kwargs.get("dtype") else "all dims or a dtype")
def _reduce(b, n):
    x = b.value(n.args[0])
    axes = [d % x.ndim for d in n.args[1]]
    keep = bool(n.args[2]) if len(n.args) > 2 else bool(n.kwargs.get("keepdim", False))
    kind = "ReduceMean" if n.target is aten.mean.dim else "ReduceSum"
    return b.op(kind, [x], [b.out(n)], axes=axes, keep_dims=keep)


# ------------------------------------------------------------------ attention
def sdpa_operands_guard(n, q, k, v):
    """Why not (or None) for the SDPA operands and mask of node ``n``: K and V of Q's
    batch and heads, a boolean mask or one of Q's dtype."""
    if any(list(meta(t).shape[:-2]) != list(meta(q).shape[:-2]) for t in (k, v)):
        return "K or V heads differ from Q's"
    mask = n.kwargs.get("attn_mask")
    if mask is not None and meta(mask).dtype not in (torch.bool, meta(q).dtype):
        return "mask dtype"
    return None


def _sdpa_guard(n):
    dropout = n.args[3] if len(n.args) > 3 else n.kwargs.get("dropout_p", 0.0)
    return "dropout" if dropout else sdpa_operands_guard(n, *n.args[:3])


def sdpa_scores(b, q, k, causal, mask, scale):
    """S = Q @ K^T * scale, then the causal mask (top left) and ``mask`` (an FX
    node: boolean, selecting, or added); (the forward and backward SDPA rows)."""
    scale = scale or 1.0 / math.sqrt(q.shape[-1])
    s_shape = list(q.shape[:-1]) + [k.shape[-2]]
    s = b.op("MatMul", [q, k], [b.tmp(q, s_shape)], transpose_b=True)
    s = b.op("Multiply", [s, b.value(float(scale), like=s)], [b.tmp(s)])
    L, S = q.shape[-2], k.shape[-2]
    if causal:
        keep = np.tril(np.ones((L, S), dtype=bool))
        s = b.op("Select", [b.constant(keep), s, b.value(-math.inf, like=s)], [b.tmp(s)])
    if mask is not None:
        m = b.value(mask)
        if m.dtype == "boolean":
            s = b.op("Select", [m, s, b.value(-math.inf, like=s)], [b.tmp(s)])
        else:
            s = b.op("Add", [s, m], [b.tmp(s)])
    return s


@row([aten._scaled_dot_product_flash_attention_for_cpu.default],
     "MatMul, Multiply, Add / Select (mask), SoftMax (its stats: logsumexp), MatMul (the attention pattern)",
     says="no dropout; K and V of Q's heads", guard=_sdpa_guard)
def _sdpa(b, n):
    q, k, v = (b.value(a) for a in n.args[:3])
    causal = n.args[4] if len(n.args) > 4 else n.kwargs.get("is_causal", False)
    s = sdpa_scores(b, q, k, causal, n.kwargs.get("attn_mask"), n.kwargs.get("scale"))
    if 1 not in _users_of_outputs(n):
        p = b.op("SoftMax", [s], [b.tmp(s)], axis=-1)
        return (b.op("MatMul", [p, v], [b.out(n, 0)]), None)
    p, stats = b.op("SoftMax", [s], [b.tmp(s), b.tmp(s, list(s.shape[:-1]) + [1], dtype="f32")], axis=-1)
    lse = b.out(n, 1)
    b.op("StaticReshape", [stats], [lse], shape=list(lse.shape), special_zero=False)
    # (training: the output is saved for the backward and read by the next layer's views
    # too; laid out as torch's (heads inside rows), both are views of it)
    o = meta(n)[0]
    return (b.op("MatMul", [p, v], [b.lt(o, strides=dense_strides(o))]), lse)


#: rows taking a boolean mask beside their float operands
BOOL_MASKS = (aten._scaled_dot_product_flash_attention_for_cpu.default,
              aten._scaled_dot_product_flash_attention_for_cpu_backward.default)


def markdown() -> str:
    """The table as Markdown: ATen op | graphc ops | taken when | dtypes."""
    lines = ["| ATen op | graphc ops | graphc takes it when | dtypes |", "|---|---|---|---|"]
    seen = set()
    for r in TABLE.values():
        if id(r) in seen:
            continue
        seen.add(id(r))
        names = ", ".join(f"`{t.name()}`" for t in r.targets)
        dts = "any" if r.dtypes == ANY else ", ".join(r.dtypes)
        lines.append(f"| {names} | {r.ops} | {r.says or 'always'} | {dts} |")
    return "\n".join(lines)


def reason_not_taken(node) -> str | None:
    """None when graphc takes ``node``, else why not (no row, a guard, a dtype, a shape)."""
    import operator
    if node.op != "call_function":
        return "not an op call"
    if node.target is operator.getitem:
        return None if node.args[0].target in TABLE and reason_not_taken(node.args[0]) is None else "of an ATen op"
    r = TABLE.get(node.target)
    if r is None:
        return "no mapping"
    vals = [meta(a) for a in node.all_input_nodes] + _flat(meta(node))
    if any(not isinstance(v, torch.Tensor) for v in vals):
        return "a non-tensor value"
    for v in vals:
        if v.device.type != "cpu" or not static_dims(v):
            return "not a static CPU tensor"
        if DTYPES.get(v.dtype) not in r.dtypes and not (v.dtype is torch.bool and r.targets[0] in BOOL_MASKS):
            return f"dtype {v.dtype}"
    return r.guard(node) if r.guard is not None else None


def _flat(v):
    """The outputs whose dtypes matter: of an op of several, the first computed
    (the others are statistics, indices or gradients the rows check themselves)."""
    if isinstance(v, (tuple, list)):
        return [next((t for t in v if t is not None), None)]
    return [v]
