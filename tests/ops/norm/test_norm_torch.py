"""Normalization ops against PyTorch (float64 torch on the very values graphc
reads, compared at each output's dtype), and float64 finite-difference
gradchecks of BatchNormTrainingBackward and LayerNormBackward against the
forward references."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import (NP, assert_close, assert_grad_close, assert_outputs, data, n64, numeric_grad, reference64,
                     run_single, t64)

torch = pytest.importorskip("torch")
F = torch.nn.functional

EPS = 0.0625
NCX_SHAPE = (2, 3, 4, 2)                      # N, C, H, W
FORMATS = ["NCX", "NXC"]
#: (src dtype, statistics / gamma / beta dtype), the rows of the norm ops' dtype tables
DTYPES = [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32")]


def layout(ncx_shape, fmt):
    n, c, *x = ncx_shape
    return (n, *x, c) if fmt == "NXC" else tuple(ncx_shape)


def to_ncx(t, fmt):
    return t.movedim(-1, 1) if fmt == "NXC" else t


def from_ncx(t, fmt):
    return t.movedim(1, -1) if fmt == "NXC" else t


def stats_of(t, dims):
    """(mean, biased variance) of a torch tensor over dims."""
    var, mean = torch.var_mean(t.detach(), dim=dims, correction=0)
    return mean, var


def as_input(t, dt):
    """A torch statistic as a graphc input array of dtype dt."""
    return n64(t).astype(NP[dt])


# ------------------------------------------------------------------- BatchNorm
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dt, sdt", DTYPES)
def test_batchnorm_inference(fmt, dt, sdt):
    rng = np.random.default_rng(0)
    shape, c = layout(NCX_SHAPE, fmt), NCX_SHAPE[1]
    x = data(rng, shape, dt)
    gamma, beta, mean = (data(rng, [c], sdt) for _ in range(3))
    var = data(rng, [c], sdt, positive=True)
    (y,) = run_single("BatchNormInference", [x, gamma, beta, mean, var], [(dt, shape)],
                      {"epsilon": EPS, "data_format": fmt})
    expected = F.batch_norm(to_ncx(t64(x), fmt), t64(mean), t64(var), t64(gamma), t64(beta), training=False, eps=EPS)
    assert_close(y, n64(from_ncx(expected, fmt)), dt, ORACLE, "dst")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dt, sdt", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_forward_training(fmt, dt, sdt, affine):
    rng = np.random.default_rng(1)
    shape, c = layout(NCX_SHAPE, fmt), NCX_SHAPE[1]
    x = data(rng, shape, dt)
    old_mean, old_var = data(rng, [c], sdt), data(rng, [c], sdt, positive=True)
    gamma_beta = [data(rng, [c], sdt), data(rng, [c], sdt)] if affine else []
    got = run_single("BatchNormForwardTraining", [x, old_mean, old_var, *gamma_beta],
                     [(dt, shape)] + [(sdt, [c])] * 4, {"epsilon": EPS, "data_format": fmt, "momentum": 0.25})
    xt = to_ncx(t64(x), fmt)
    w, b = (t64(v) for v in gamma_beta) if affine else (None, None)
    y = F.batch_norm(xt, None, None, w, b, training=True, eps=EPS)
    mean, var = stats_of(xt, (0, 2, 3))
    # oneDNN's convention: running = momentum * old + (1 - momentum) * batch, biased batch variance
    expected = [from_ncx(y, fmt), 0.25 * t64(old_mean) + 0.75 * mean, 0.25 * t64(old_var) + 0.75 * var, mean, var]
    assert_outputs(got, expected, [dt] + [sdt] * 4, ORACLE,
                   names=["dst", "running_mean", "running_variance", "batch_mean", "batch_variance"])


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dt, sdt", DTYPES)
@pytest.mark.parametrize("case", ["gamma", "no_gamma", "gamma_ignored"])
def test_batchnorm_backward(fmt, dt, sdt, case):
    """gamma: all outputs; no_gamma: diff_gamma/diff_beta with gamma = 1;
    gamma_ignored: diff_src only, so gamma given but unused."""
    rng = np.random.default_rng(2)
    shape, c = layout(NCX_SHAPE, fmt), NCX_SHAPE[1]
    x, dy, gamma = data(rng, shape, dt), data(rng, shape, dt), data(rng, [c], sdt)
    xt = t64(x, grad=True)
    w = t64(gamma if case == "gamma" else np.ones(c), grad=True)
    b = t64(np.zeros(c), grad=True)
    F.batch_norm(to_ncx(xt, fmt), None, None, w, b, training=True, eps=EPS).backward(to_ncx(t64(dy), fmt))
    mean, var = stats_of(to_ncx(xt, fmt), (0, 2, 3))
    ins = [x, dy, as_input(mean, sdt), as_input(var, sdt)] + ([] if case == "no_gamma" else [gamma])
    n_out = 1 if case == "gamma_ignored" else 3
    got = run_single("BatchNormTrainingBackward", ins, [(dt, shape), (sdt, [c]), (sdt, [c])][:n_out],
                     {"epsilon": EPS, "data_format": fmt})
    assert_outputs(got, [xt.grad, w.grad, b.grad][:n_out], [dt, sdt, sdt], ORACLE,
                   names=["diff_src", "diff_gamma", "diff_beta"])


# ------------------------------------------------------------------- LayerNorm
LN_SHAPE = (2, 3, 4)


@pytest.mark.parametrize("dt, sdt", DTYPES)
@pytest.mark.parametrize("bna", [-1, 1])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm(dt, sdt, bna, affine):
    rng = np.random.default_rng(3)
    x = data(rng, LN_SHAPE, dt)
    norm_shape = LN_SHAPE[bna:]
    gamma_beta = [data(rng, norm_shape, sdt), data(rng, norm_shape, sdt)] if affine else []
    lead = list(LN_SHAPE[:bna])
    got = run_single("LayerNorm", [x, *gamma_beta], [(dt, LN_SHAPE), (sdt, lead), (sdt, lead)],
                     {"begin_norm_axis": bna, "use_affine": affine, "epsilon": EPS})
    xt = t64(x)
    w, b = (t64(v) for v in gamma_beta) if affine else (None, None)
    y = F.layer_norm(xt, norm_shape, w, b, eps=EPS)
    mean, var = stats_of(xt, tuple(range(bna % 3, 3)))
    assert_outputs(got, [y, mean, var], [dt, sdt, sdt], ORACLE, names=["dst", "mean", "variance"])


@pytest.mark.parametrize("dt, sdt", DTYPES)
@pytest.mark.parametrize("bna", [-1, 1])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_backward(dt, sdt, bna, affine):
    rng = np.random.default_rng(4)
    x, dy = data(rng, LN_SHAPE, dt), data(rng, LN_SHAPE, dt)
    norm_shape = LN_SHAPE[bna:]
    gamma, beta = data(rng, norm_shape, sdt), data(rng, norm_shape, sdt)
    xt = t64(x, grad=True)
    w, b = (t64(gamma, grad=True), t64(beta, grad=True)) if affine else (None, None)
    F.layer_norm(xt, norm_shape, w, b, eps=EPS).backward(t64(dy))
    mean, var = stats_of(xt, tuple(range(bna % 3, 3)))
    ins = [x, dy, as_input(mean, sdt), as_input(var, sdt)] + ([gamma, beta] if affine else [])
    outs = [(dt, LN_SHAPE)] + ([(sdt, norm_shape)] * 2 if affine else [])
    got = run_single("LayerNormBackward", ins, outs, {"begin_norm_axis": bna, "use_affine": affine, "epsilon": EPS})
    expected = [xt.grad] + ([w.grad, b.grad] if affine else [])
    assert_outputs(got, expected, [dt, sdt, sdt], ORACLE, names=["diff_src", "diff_gamma", "diff_beta"])


# ------------------------------------------------------------------- GroupNorm
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dt, sdt", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_groupnorm(fmt, dt, sdt, affine):
    rng = np.random.default_rng(5)
    ncx, groups = (2, 6, 3, 2), 3
    shape, c = layout(ncx, fmt), ncx[1]
    x = data(rng, shape, dt)
    gamma_beta = [data(rng, [c], sdt), data(rng, [c], sdt)] if affine else []
    got = run_single("GroupNorm", [x, *gamma_beta], [(dt, shape), (sdt, [2, groups]), (sdt, [2, groups])],
                     {"groups": groups, "use_affine": affine, "epsilon": EPS, "data_format": fmt})
    xt = to_ncx(t64(x), fmt)
    w, b = (t64(v) for v in gamma_beta) if affine else (None, None)
    y = F.group_norm(xt, groups, w, b, eps=EPS)
    mean, var = stats_of(xt.reshape(2, groups, -1), (2,))
    assert_outputs(got, [from_ncx(y, fmt), mean, var], [dt, sdt, sdt], ORACLE, names=["dst", "mean", "variance"])


# --------------------------------------------------------------------- RMSNorm
@pytest.mark.parametrize("dt, gdt", [("f32", "f32"), ("bf16", "f32"), ("bf16", "bf16"), ("f16", "f32"),
                                     ("f16", "f16")])
@pytest.mark.parametrize("bna", [-1, 1])
@pytest.mark.parametrize("with_gamma", [True, False])
def test_rmsnorm(dt, gdt, bna, with_gamma):
    rng = np.random.default_rng(6)
    x = data(rng, LN_SHAPE, dt)
    norm_shape = LN_SHAPE[bna:]
    gamma = [data(rng, norm_shape, gdt)] if with_gamma else []
    (y,) = run_single("RMSNorm", [x, *gamma], [(dt, LN_SHAPE)], {"begin_norm_axis": bna, "epsilon": EPS})
    expected = F.rms_norm(t64(x), norm_shape, t64(gamma[0]) if with_gamma else None, eps=EPS)
    assert_close(y, n64(expected), dt, ORACLE, "dst")


def test_rmsnorm_broadcast_gamma():
    rng = np.random.default_rng(7)
    x, gamma = data(rng, LN_SHAPE), data(rng, (3, 1))
    (y,) = run_single("RMSNorm", [x, gamma], [("f32", LN_SHAPE)], {"epsilon": EPS})
    expected = F.rms_norm(t64(x), LN_SHAPE[-1:], None, eps=EPS) * t64(gamma)
    assert_close(y, n64(expected), "f32", ORACLE, "dst")


# ------------------------------------------------------- finite differences
def grads_of(forward, args, dy, names):
    """Numeric gradients of sum(dy * forward(*args)) w.r.t. each of args."""
    out = []
    for i, _ in enumerate(names):
        def f(v, i=i):
            return forward(*args[:i], v, *args[i + 1:])
        out.append(numeric_grad(f, args[i], dy))
    return out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_backward_gradcheck(fmt, affine):
    rng = np.random.default_rng(8)
    shape, c = layout((2, 3, 2), fmt), 3
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    gamma = rng.standard_normal(c) if affine else np.ones(c)
    beta = rng.standard_normal(c)
    attrs = {"epsilon": EPS, "data_format": fmt}
    outs = [("f32", shape)] + [("f32", [c])] * 4

    def forward(x, gamma, beta):
        return reference64("BatchNormForwardTraining", [x, np.zeros(c), np.ones(c), gamma, beta], outs, attrs)[0]

    _, _, _, mean, var = reference64("BatchNormForwardTraining", [x, np.zeros(c), np.ones(c), gamma, beta], outs,
                                     attrs)
    ins = [x, dy, mean, var] + ([gamma] if affine else [])
    got = reference64("BatchNormTrainingBackward", ins, [("f32", shape), ("f32", [c]), ("f32", [c])], attrs)
    names = ["diff_src", "diff_gamma", "diff_beta"]
    for g, n, name in zip(got, grads_of(forward, [x, gamma, beta], dy, names), names):
        assert_grad_close(g, n, what=name)


@pytest.mark.parametrize("bna", [-1, 1])
@pytest.mark.parametrize("affine", [True, False])
def test_layernorm_backward_gradcheck(bna, affine):
    rng = np.random.default_rng(9)
    x, dy = rng.standard_normal(LN_SHAPE), rng.standard_normal(LN_SHAPE)
    norm_shape, lead = LN_SHAPE[bna:], list(LN_SHAPE[:bna])
    gamma, beta = rng.standard_normal(norm_shape), rng.standard_normal(norm_shape)
    attrs = {"begin_norm_axis": bna, "use_affine": affine, "epsilon": EPS}
    outs = [("f32", LN_SHAPE), ("f32", lead), ("f32", lead)]

    def forward(x, gamma, beta):
        return reference64("LayerNorm", [x, gamma, beta] if affine else [x], outs, attrs)[0]

    _, mean, var = reference64("LayerNorm", [x], outs, {**attrs, "use_affine": False})
    ins = [x, dy, mean, var] + ([gamma, beta] if affine else [])
    got = reference64("LayerNormBackward", ins, [("f32", LN_SHAPE)] + [("f32", norm_shape)] * (2 if affine else 0),
                      attrs)
    names = ["diff_src", "diff_gamma", "diff_beta"][:len(got)]
    for g, n, name in zip(got, grads_of(forward, [x, gamma, beta], dy, names), names):
        assert_grad_close(g, n, what=name)
