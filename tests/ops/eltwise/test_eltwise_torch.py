"""Unary eltwise ops and their backward ops against PyTorch (float64 torch on the
very values graphc reads, compared at the dtype's ORACLE tolerance), and float64
finite-difference gradchecks of every backward op against its forward reference."""
import numpy as np
import pytest

from graphc.ops import get_schema
from graphc.tolerances import ORACLE
from support import NP, assert_close, assert_grad_close, data, n64, numeric_grad, reference64, run_single, t64

torch = pytest.importorskip("torch")
F = torch.nn.functional

SHAPE = (3, 4, 5)
DTYPES = ["f32", "bf16", "f16"]
CLAMP = {"min": -1.3, "max": 0.7}
# ClampBackward with use_dst compares the stored dst with the f32 bounds: bf16/f16
# hold f32(-1.3) only approximately, so those tests use bounds exact in every dtype
CLAMP_EXACT = {"min": -1.25, "max": 0.75}
HSIG = {"alpha": 0.2, "beta": 0.4}  # kinks where 0.2 * x + 0.4 is 0 or 1: x = -2 and 3


def _hardsigmoid(a):
    return lambda x: torch.clamp(a["alpha"] * x + a["beta"], 0.0, 1.0)


def _softplus(beta):
    # a huge threshold keeps torch on the formula (it switches to x above beta * x > threshold)
    return lambda x: F.softplus(x, beta=beta, threshold=1e9)


# (kind, attrs, torch function, domain of src)
FORWARD = [
    ("Abs", {}, torch.abs, "any"),
    ("Clamp", CLAMP, lambda x: torch.clamp(x, CLAMP["min"], CLAMP["max"]), "any"),
    ("Elu", {"alpha": 0.7}, lambda x: F.elu(x, 0.7), "any"),
    ("Elu", {"alpha": 0.0}, lambda x: F.elu(x, 0.0), "any"),
    ("Exp", {}, torch.exp, "any"),
    ("GELU", {}, F.gelu, "any"),
    ("GELU", {"mode": "gelu_erf"}, F.gelu, "any"),
    ("GELU", {"mode": "gelu_tanh"}, lambda x: F.gelu(x, approximate="tanh"), "any"),
    ("HardSigmoid", {"alpha": 1 / 6, "beta": 0.5}, F.hardsigmoid, "any"),  # torch's fixed slope and offset
    ("HardSigmoid", HSIG, _hardsigmoid(HSIG), "any"),
    ("HardSigmoid", {"alpha": -0.5, "beta": 0.25}, _hardsigmoid({"alpha": -0.5, "beta": 0.25}), "any"),
    ("HardSwish", {}, F.hardswish, "any"),
    ("LeakyReLU", {"alpha": 0.1}, lambda x: F.leaky_relu(x, 0.1), "any"),
    ("LeakyReLU", {"alpha": -2.0}, lambda x: F.leaky_relu(x, -2.0), "any"),
    ("Log", {}, torch.log, "positive"),
    ("Mish", {}, F.mish, "any"),
    ("Pow", {"beta": 2.5}, lambda x: torch.pow(x, 2.5), "positive"),
    ("Pow", {"beta": -1.5}, lambda x: torch.pow(x, -1.5), "positive"),
    ("Pow", {"beta": 3.0}, lambda x: torch.pow(x, 3.0), "any"),
    ("Pow", {"beta": 0.0}, lambda x: torch.pow(x, 0.0), "any"),
    ("Reciprocal", {}, torch.reciprocal, "nonzero"),
    ("ReLU", {}, F.relu, "any"),
    ("Sigmoid", {}, torch.sigmoid, "any"),
    ("SoftPlus", {}, _softplus(1.0), "any"),
    ("SoftPlus", {"beta": 2.0}, _softplus(2.0), "any"),
    ("SoftPlus", {"beta": 0.5}, _softplus(0.5), "any"),
    ("SoftPlus", {"beta": -1.0}, _softplus(-1.0), "any"),
    ("Sqrt", {}, torch.sqrt, "positive"),
    ("Square", {}, torch.square, "any"),
    ("Tanh", {}, torch.tanh, "any"),
]


def _id(kind, attrs):
    return kind + "".join(f"-{k}={v:.3g}" if isinstance(v, float) else f"-{k}={v}" for k, v in attrs.items())


def src_data(rng, dt, domain, shape=SHAPE):
    """Normal data times 2 (powers of two scale exactly in every dtype); 'positive'
    is |x| + 0.5, 'nonzero' the same with random signs."""
    if domain == "any":
        return scaled(data(rng, shape, dt), 2)
    x = data(rng, shape, dt, positive=True)
    return scaled(x, rng.choice([-1, 1], size=shape)) if domain == "nonzero" else x


def scaled(x, k):
    """``x * k`` in x's dtype (exact for powers of two)."""
    return (x.astype(np.float64) * k).astype(x.dtype)


def off_kinks(x, kinks, gap=0.05):
    """``x`` with values within ``gap`` of a kink moved 2 * gap to the right."""
    v = x.astype(np.float64)
    for k in kinks:
        v = np.where(np.abs(v - k) < gap, v + 2 * gap, v)
    return v.astype(x.dtype)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind, attrs, fn, domain", [pytest.param(*f, id=_id(*f[:2])) for f in FORWARD])
def test_forward(kind, attrs, fn, domain, dt):
    x = src_data(np.random.default_rng(0), dt, domain)
    (y,) = run_single(kind, [x], [(dt, SHAPE)], attrs)
    assert_close(y, n64(fn(t64(x))), dt, ORACLE, "dst")


@pytest.mark.parametrize("dt", DTYPES)
def test_round(dt):
    """oneDNN rounds half away from zero, torch half to even: torch judges the
    non-ties, ties are checked by hand."""
    x = scaled(src_data(np.random.default_rng(1), dt, "any"), 4)
    (y,) = run_single("Round", [x], [(dt, SHAPE)])
    v = x.astype(np.float64)
    tie = np.abs(v - np.trunc(v)) == 0.5
    assert_close(y[~tie], n64(torch.round(t64(x)))[~tie], dt, ORACLE, "dst")

    ties = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 100.5, -7.5], dtype=NP[dt])
    (y,) = run_single("Round", [ties], [(dt, ties.shape)])
    np.testing.assert_array_equal(y.astype(np.float64), [1, 2, 3, -1, -2, -3, 101, -8])


@pytest.mark.parametrize("dt", DTYPES)
def test_special_values(dt):
    """Reciprocal of 0 is inf (doc); log of 0 is -inf, sqrt and log of negatives NaN."""
    x = np.array([0.0, -1.0, np.inf], dtype=NP[dt])
    (r,) = run_single("Reciprocal", [x[:1]], [(dt, [1])])
    (lg,) = run_single("Log", [x], [(dt, [3])])
    (sq,) = run_single("Sqrt", [x], [(dt, [3])])
    np.testing.assert_array_equal(r.astype(np.float64), [np.inf])
    np.testing.assert_array_equal(lg.astype(np.float64), [-np.inf, np.nan, np.inf])
    np.testing.assert_array_equal(sq.astype(np.float64), [0.0, np.nan, np.inf])


# ------------------------------------------------------------------ backward ops
def test_clamp_backward_dst_at_f32_bound():
    """A dst clamped to f32(min) or f32(max) is at the bound: no gradient, though
    the attributes (-1.3, 0.7) are not f32 values."""
    dst = np.array([-1.3, 0.7, 0.0, -1.2999], dtype=np.float32)
    dy = np.ones(4, dtype=np.float32)
    (dx,) = run_single("ClampBackward", [dst, dy], [("f32", [4])], CLAMP)
    np.testing.assert_array_equal(dx, [0, 0, 1, 1])


# (backward kind, attrs, forward kind, torch forward, domain of src, kinks to avoid)
BACKWARD = [
    ("AbsBackward", {}, "Abs", torch.abs, "any", [0]),
    ("ClampBackward", {**CLAMP_EXACT, "use_dst": True}, "Clamp", lambda x: torch.clamp(x, -1.25, 0.75), "any",
     [-1.25, 0.75]),
    ("ClampBackward", {**CLAMP, "use_dst": False}, "Clamp", lambda x: torch.clamp(x, CLAMP["min"], CLAMP["max"]),
     "any", [CLAMP["min"], CLAMP["max"]]),
    ("EluBackward", {"alpha": 0.7}, "Elu", lambda x: F.elu(x, 0.7), "any", [0]),  # use_dst defaults to true
    ("EluBackward", {"alpha": 0.7, "use_dst": False}, "Elu", lambda x: F.elu(x, 0.7), "any", [0]),
    ("EluBackward", {"alpha": 1.5, "use_dst": True}, "Elu", lambda x: F.elu(x, 1.5), "any", [0]),
    ("GELUBackward", {}, "GELU", F.gelu, "any", []),
    ("GELUBackward", {"mode": "gelu_tanh"}, "GELU", lambda x: F.gelu(x, approximate="tanh"), "any", []),
    ("HardSigmoidBackward", HSIG, "HardSigmoid", _hardsigmoid(HSIG), "any", [-2, 3]),
    ("HardSigmoidBackward", {"alpha": 1 / 6, "beta": 0.5}, "HardSigmoid", F.hardsigmoid, "any", [-3, 3]),
    ("HardSwishBackward", {}, "HardSwish", F.hardswish, "any", [-3, 3]),
    ("MishBackward", {}, "Mish", F.mish, "any", []),
    ("ReLUBackward", {"use_dst": True}, "ReLU", F.relu, "any", [0]),
    ("ReLUBackward", {"use_dst": False}, "ReLU", F.relu, "any", [0]),
    ("SigmoidBackward", {}, "Sigmoid", torch.sigmoid, "any", []),
    ("SigmoidBackward", {"use_dst": False}, "Sigmoid", torch.sigmoid, "any", []),
    ("SoftPlusBackward", {}, "SoftPlus", _softplus(1.0), "any", []),
    ("SoftPlusBackward", {"beta": 2.0}, "SoftPlus", _softplus(2.0), "any", []),
    ("SoftPlusBackward", {"beta": -1.0}, "SoftPlus", _softplus(-1.0), "any", []),
    ("SqrtBackward", {"use_dst": True}, "Sqrt", torch.sqrt, "positive", []),
    ("SqrtBackward", {"use_dst": False}, "Sqrt", torch.sqrt, "positive", []),
    ("TanhBackward", {"use_dst": True}, "Tanh", torch.tanh, "any", []),
    ("TanhBackward", {"use_dst": False}, "Tanh", torch.tanh, "any", []),
]
BACKWARD_PARAMS = [pytest.param(*b, id=_id(*b[:2])) for b in BACKWARD]


def uses_dst(kind, attrs):
    """True when input 0 of the backward op is the forward's dst (use_dst, default true)."""
    return any(a.name == "use_dst" for a in get_schema(kind).attrs) and attrs.get("use_dst", True)


def forward_attrs(attrs):
    return {k: v for k, v in attrs.items() if k != "use_dst"}


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind, attrs, fwd_kind, fn, domain, kinks", BACKWARD_PARAMS)
def test_backward(kind, attrs, fwd_kind, fn, domain, kinks, dt):
    rng = np.random.default_rng(2)
    x = off_kinks(src_data(rng, dt, domain), kinks)
    dy = data(rng, SHAPE, dt)
    xt = t64(x, grad=True)
    y = fn(xt)
    y.backward(t64(dy))
    # with use_dst, the op reads the forward's dst as stored in dt
    first = n64(y).astype(NP[dt]) if uses_dst(kind, attrs) else x
    (dx,) = run_single(kind, [first, dy], [(dt, SHAPE)], attrs)
    assert_close(dx, n64(xt.grad), dt, ORACLE, "diff_src")


@pytest.mark.parametrize("kind, attrs, fwd_kind, fn, domain, kinks", BACKWARD_PARAMS)
def test_gradcheck(kind, attrs, fwd_kind, fn, domain, kinks):
    rng = np.random.default_rng(3)
    x = rng.uniform(0.3, 4.0, SHAPE) if domain == "positive" else rng.uniform(-4.0, 4.0, SHAPE)
    x = off_kinks(x, kinks)
    dy = rng.standard_normal(SHAPE)

    def f(v):
        return reference64(fwd_kind, [v], [("f32", SHAPE)], forward_attrs(attrs))[0]

    first = f(x) if uses_dst(kind, attrs) else x
    (dx,) = reference64(kind, [first, dy], [("f32", SHAPE)], attrs)
    assert_grad_close(dx, numeric_grad(f, x, dy), what="diff_src")
