"""The mapping table's training rows (added to graphc.torch.table's TABLE when
graphc.torch is imported): convolution_backward, batch norm with the batch's
statistics (with and without running ones) and its backward, SDPA's backward from
the forward's logsumexp, and max pool's backward."""
from __future__ import annotations

import math

import numpy as np
import torch

from .build import DTYPES, meta
from .table import _users_of_outputs, row, sdpa_operands_guard, sdpa_scores

aten = torch.ops.aten


# ------------------------------------------------------------------ convolution_backward
def _conv_backward_guard(n):
    grad, x, w, _bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask = n.args[:11]
    if transposed:
        return "transposed"
    if any(output_padding):
        return "output_padding"
    if not 1 <= meta(x).ndim - 2 <= 3:
        return "not 1, 2 or 3 spatial dims"
    unread = {i for i, m in enumerate(mask) if not m} & _users_of_outputs(n)
    return f"outputs {sorted(unread)} are read but not asked for" if unread else None


@row([aten.convolution_backward.default],
     "ConvolutionBackwardData, ConvolutionBackwardWeights, ReduceSum (bias)",
     says="NCX / OIX, not transposed, 1-3 spatial dims; the output_mask's gradients only", guard=_conv_backward_guard)
def _convolution_backward(b, n):
    grad, x, w, _bias_sizes, stride, padding, dilation, _t, _op, groups, mask = n.args[:11]
    dy = b.value(grad)
    window = dict(strides=list(stride), pads_begin=list(padding), pads_end=list(padding), dilations=list(dilation),
                  groups=int(groups), data_format="NCX", weights_format="OIX")
    dx = dw = db = None
    if mask[0]:
        dx = b.op("ConvolutionBackwardData", [dy, b.value(w)], [b.out(n, 0)], dst_shape=list(meta(x).shape),
                  **window)
    if mask[1]:
        dw = b.op("ConvolutionBackwardWeights", [b.value(x), dy], [b.out(n, 1)], weights_shape=list(meta(w).shape),
                  **window)
    if mask[2]:
        db = b.op("ReduceSum", [dy], [b.out(n, 2)], axes=[0] + list(range(2, dy.ndim)), keep_dims=False)
    return (dx, dw, db)


# ------------------------------------------------------------------ batch norm in training
def _batch_norm_training_guard(n):
    x, w, bias, _rm, _rv, training, momentum, _eps = n.args[:8]
    if not training:
        return "not training"
    if (w is None) != (bias is None):
        return "only one of weight and bias"
    if not isinstance(momentum, float) or not 0.0 < momentum < 1.0:
        return "momentum not in (0, 1)"
    t = meta(x)
    return None if t.ndim >= 2 and t.numel() > t.shape[1] else "one value per channel"


@row([aten._native_batch_norm_legit_functional.default],
     "BatchNormForwardTraining (+ Add, Pow for rstd; Multiply, Add for the unbiased running variance)",
     says="training; NCX; weight and bias both or neither; 0 < momentum < 1", guard=_batch_norm_training_guard)
def _batch_norm_training(b, n):
    """torch: running = (1 - momentum) * running + momentum * batch, with the
    unbiased batch variance there (N / (N - 1) times the biased one graphc's op uses)."""
    x, w, bias, rm, rv, _training, momentum, eps = n.args[:8]
    src = b.value(x)
    ins = [src, b.value(rm), b.value(rv)] + ([b.value(w), b.value(bias)] if w is not None else [])
    per = meta(x).numel() // meta(x).shape[1]
    c = [meta(x).shape[1]]
    # (the batch's statistics in the running ones' dtype, as graphc's op takes them all in one;
    # under bf16 autocast torch's trace may save them as bf16: cast on the way out)
    stats = DTYPES[meta(rm).dtype]
    mean_out, rstd_out = b.out(n, 1), b.out(n, 2)
    y, run_mean, run_var, mean, var = b.op(
        "BatchNormForwardTraining", ins,
        [b.out(n, 0), b.out(n, 3), b.tmp(src, c, "f32"), _in(b, mean_out, stats), b.tmp(src, c, "f32")],
        epsilon=float(eps), momentum=1.0 - float(momentum), data_format="NCX")
    mean = _cast(b, mean, mean_out)
    rstd = _cast(b, b.rstd(var, eps, _in(b, rstd_out, var.dtype)), rstd_out)
    extra = b.op("Multiply", [var, b.value(float(momentum) / (per - 1), like=var)], [b.tmp(var)])
    run_var = b.op("Add", [run_var, extra], [b.out(n, 4)])
    return (y, mean, rstd, run_mean, run_var)


def _in(b, out, dtype):
    """``out`` where it holds ``dtype``, else a new tensor of its shape in ``dtype``."""
    return out if out.dtype == dtype else b.tmp(out, dtype=dtype)


def _cast(b, t, out):
    """``t`` as ``out`` (a TypeCast into it where ``t`` is another tensor)."""
    return t if t is out else b.op("TypeCast", [t], [out])


def _batch_norm_no_stats_guard(n):
    x, w, bias, training = n.args[:4]
    if not training:
        return "not training"
    return "only one of weight and bias" if (w is None) != (bias is None) else None


@row([aten._native_batch_norm_legit.no_stats], "BatchNormForwardTraining (+ Add, Pow for rstd)",
     says="training; NCX; weight and bias both or neither", guard=_batch_norm_no_stats_guard)
def _batch_norm_no_stats(b, n):
    """Batch norm without running statistics: graphc's op reads zero-strided zeros
    as the running ones and its running outputs are left unread."""
    x, w, bias, _training, _momentum, eps = n.args[:6]
    src = b.value(x)
    c = [meta(x).shape[1]]
    zeros = b.constant(np.broadcast_to(np.zeros((), dtype=np.float32), c))
    ins = [src, zeros, zeros] + ([b.value(w), b.value(bias)] if w is not None else [])
    y, _rm, _rv, mean, var = b.op("BatchNormForwardTraining", ins,
                                  [b.out(n, 0)] + [b.tmp(src, c, "f32") for _ in range(2)] +
                                  [b.out(n, 1), b.tmp(src, c, "f32")], epsilon=float(eps), data_format="NCX")
    return (y, mean, b.rstd(var, eps, b.out(n, 2)))


def _batch_norm_backward_guard(n):
    _g, _x, w, _rm, _rv, save_mean, save_rstd, train = n.args[:8]
    if not train:
        return "not training"
    if save_mean is None or save_rstd is None:
        return "no saved statistics"
    mask = n.args[9]
    return "weight gradients without a weight" if w is None and (mask[1] or mask[2]) else None


@row([aten.native_batch_norm_backward.default], "BatchNormTrainingBackward (variance from rstd: Pow, Subtract)",
     says="training; NCX; from the saved mean and rstd", guard=_batch_norm_backward_guard)
def _batch_norm_backward(b, n):
    grad, x, w, _rm, _rv, save_mean, save_rstd, _train, eps, mask = n.args[:10]
    src = b.value(x)
    # (the statistics in gamma's dtype, as graphc's op takes them: bf16 ones saved under bf16
    # autocast are cast to its f32)
    stats = DTYPES[meta(w).dtype] if w is not None else None
    rstd = b.cast(b.value(save_rstd), stats)
    # torch saves rstd: graphc gets var = rstd ** -2 - eps and adds eps back
    var = b.op("Subtract", [b.op("Pow", [rstd], [b.tmp(rstd)], beta=-2.0), b.value(float(eps), like=rstd)],
               [b.tmp(rstd)])
    ins = [src, b.value(grad), b.cast(b.value(save_mean), stats), var] + ([b.value(w)] if w is not None else [])
    outs = [b.out(n, 0) if mask[0] else b.tmp(src)]
    if w is not None:   # (with a weight, its gradients are asked for: graphc's op ignores gamma otherwise)
        c = list(meta(w).shape)
        outs += [b.out(n, i) if mask[i] else b.tmp(rstd, c, DTYPES[meta(w).dtype]) for i in (1, 2)]
    grads = b.op("BatchNormTrainingBackward", ins, outs, epsilon=float(eps), data_format="NCX")
    grads = grads if w is not None else [grads, None, None]
    return tuple(g if m else None for g, m in zip(grads, mask))


# ------------------------------------------------------------------ attention backward
def _sdpa_backward_guard(n):
    _g, q, k, v, _o, _lse, dropout = n.args[:7]
    return "dropout" if dropout else sdpa_operands_guard(n, q, k, v)


@row([aten._scaled_dot_product_flash_attention_for_cpu_backward.default],
     "MatMul, Multiply, Add / Select (mask), Subtract logsumexp, Exp, MatMuls, ReduceSum "
     "(the attention backward pattern)", says="no dropout; K and V of Q's heads", guard=_sdpa_backward_guard)
def _sdpa_backward(b, n):
    grad, q, k, v, o, lse, _dropout, causal = n.args[:8]
    q, k, v, o, do = (b.value(a) for a in (q, k, v, o, grad))
    scale = n.kwargs.get("scale") or 1.0 / math.sqrt(q.shape[-1])
    s = sdpa_scores(b, q, k, causal, n.kwargs.get("attn_mask"), scale)
    rows = list(s.shape[:-1]) + [1]    # (logsumexp is [..., L]: the SoftMax stats' [..., L, 1])
    stats = b.op("StaticReshape", [b.value(lse)], [b.tmp(s, rows, "f32")], shape=rows, special_zero=False)
    p = b.op("Exp", [b.op("Subtract", [s, stats], [b.tmp(s)])], [b.tmp(s)])
    dv = b.op("MatMul", [p, do], [b.out(n, 2)], transpose_a=True)
    dp = b.op("MatMul", [do, v], [b.tmp(s)], transpose_b=True)
    rowsum = b.op("ReduceSum", [b.op("Multiply", [o, do], [b.tmp(o)])], [b.tmp(o, rows)], axes=[-1], keep_dims=True)
    ds = b.op("Multiply", [p, b.op("Subtract", [dp, rowsum], [b.tmp(s)])], [b.tmp(s)])
    ds = b.op("Multiply", [ds, b.value(float(scale), like=ds)], [b.tmp(ds)])
    return (b.op("MatMul", [ds, k], [b.out(n, 0)]), b.op("MatMul", [ds, q], [b.out(n, 1)], transpose_a=True), dv)


# ------------------------------------------------------------------ max pool backward
def _max_pool_backward_guard(n):
    return "ceil_mode" if n.args[6] else None


@row([aten.max_pool2d_with_indices_backward.default], "MaxPoolBackward (from the forward's src, not its indices)",
     says="NCX; floor rounding; the first maximum of a window (as torch's indices)",
     dtypes=("f32", "bf16", "f16", "s64"), guard=_max_pool_backward_guard)
def _max_pool_backward(b, n):
    grad, x, kernel, stride, padding, dilation = n.args[:6]

    def two(v, default):
        v = list(v) if v else list(default)
        return v * 2 if len(v) == 1 else v
    kernel = two(kernel, ())
    return b.op("MaxPoolBackward", [b.value(x), b.value(grad)], [b.out(n)], kernel=kernel,
                strides=two(stride, kernel), pads_begin=two(padding, [0]), pads_end=two(padding, [0]),
                dilations=two(dilation, [1]), data_format="NCX")
