"""Generated kernels of the unary eltwise ops and their backward ops against
graphc's numpy reference (COMPILED tolerances): every op and attribute variant in
f32, a subset in bf16/f16, rank 0 and 1, strided inputs, NaN/inf and the f32
extremes at every position, the benchdnn corpus and the harness's kind / dtype /
attribute substitutions of it.

Cases that share a graph (kind, attributes, dtype, shape, strides) share one
kernel: the NaN/inf and by-hand tests reuse the shape of the per-op tests."""
import json

import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs

from support import NP, assert_close_each, assert_same, check_compiled, one_op
from support.fusion import one_partition

SHAPE = (3, 37)
CLAMP = {"min": -1.3, "max": 0.7}

FORWARD = [
    ("Abs", {}), ("Clamp", CLAMP), ("Elu", {"alpha": 0.7}), ("Exp", {}), ("GELU", {}),
    ("GELU", {"mode": "gelu_tanh"}), ("HardSigmoid", {"alpha": 0.2, "beta": 0.4}), ("HardSwish", {}),
    ("LeakyReLU", {"alpha": 0.1}), ("Log", {}), ("Mish", {}), ("Pow", {"beta": 2.5}), ("Pow", {"beta": -1.0}),
    ("Pow", {"beta": 3.0}), ("Pow", {"beta": 4.0}), ("Pow", {"beta": -2.0}),
    ("Reciprocal", {}), ("ReLU", {}), ("Round", {}), ("Sigmoid", {}), ("SoftPlus", {}), ("SoftPlus", {"beta": 2.0}),
    ("Sqrt", {}), ("Square", {}), ("Tanh", {}),
]
BACKWARD = [
    ("AbsBackward", {}), ("ClampBackward", CLAMP), ("ClampBackward", {**CLAMP, "use_dst": False}),
    ("EluBackward", {"alpha": 0.7}), ("EluBackward", {"alpha": 0.7, "use_dst": False}), ("GELUBackward", {}),
    ("GELUBackward", {"mode": "gelu_tanh"}), ("HardSigmoidBackward", {"alpha": 0.2, "beta": 0.4}),
    ("HardSwishBackward", {}), ("MishBackward", {}), ("ReLUBackward", {}), ("ReLUBackward", {"use_dst": False}),
    ("SigmoidBackward", {}), ("SigmoidBackward", {"use_dst": False}), ("SoftPlusBackward", {"beta": -1.0}),
    ("SqrtBackward", {}), ("SqrtBackward", {"use_dst": False}), ("TanhBackward", {}),
    ("TanhBackward", {"use_dst": False}),
]


def _id(kind, attrs):
    return kind + "".join(f"-{k}={v}" for k, v in attrs.items())


def params(cases, *only):
    """pytest params of ``cases``, or of those with the ids ``only``."""
    by_id = {_id(k, a): (k, a) for k, a in cases}
    return [pytest.param(*by_id[i], id=i) for i in (only or by_id)]


def graph(kind, attrs, dt="f32", shape=SHAPE, strides=None):
    """A one-op graph; ``strides`` (element strides) apply to input 0."""
    nin = 2 if kind.endswith("Backward") else 1
    return one_op(kind, [(dt, shape, strides if i == 0 else None) for i in range(nin)], [(dt, shape)], attrs)


def single_output(g, inputs):
    (out,) = check_compiled(g, inputs).values()
    return out


@pytest.mark.parametrize("kind, attrs", params(FORWARD + BACKWARD))
def test_f32(kind, attrs):
    check_compiled(graph(kind, attrs))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("kind, attrs", params(FORWARD + BACKWARD, "Exp", "GELU-mode=gelu_tanh", "Log", "Round",
                                               "EluBackward-alpha=0.7-use_dst=False", "TanhBackward"))
def test_low_precision(kind, attrs, dt):
    check_compiled(graph(kind, attrs, dt))


#: NaN, the infinities, zeros, the f32 extremes and powers of two past int64, values
#: whose products with small constants overflow f32 (HardSwish's x * 6 above 5.7e37),
#: large and subnormal ones, f16's extremes, kinks and ties
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235e38, -3.4028235e38, 3e38, -3e38, 6e37, -6e37, 1e38,
            2.0 ** 63, -(2.0 ** 63), 2.0 ** 64, 1e20, -1e20, 1.9e19, 1e30, -1e30, 88.0, -88.0, 100.0, 65504.0,
            -65504.0, 1.2e-38, -1e-40, 1e-45, 6e-8, 0.5, -0.5, 2.5, -3.0, 3.0, 1.5]


def rotations(g, dt):
    """Inputs of one-op graph ``g`` holding SPECIALS (as ``dt`` holds them) at every
    position in turn: the vectorised body of a kernel's loop and its scalar
    remainder see each value; a backward op's diff_dst holds them too, in another
    order, so that each meets every src."""
    n = len(SPECIALS)
    vals = np.array(SPECIALS, np.float64)
    with np.errstate(over="ignore"):
        vals = vals.astype(np.float32).astype(NP[dt])
    size = int(np.prod(SHAPE))
    for shift in range(n):
        # port 1 at (3p + 2s) % n while port 0 at (p + s) % n: every pair of values meets
        yield {tid: vals[(np.arange(size) * (1 + 2 * port) + shift * (1 + port)) % n].reshape(SHAPE)
               for port, tid in enumerate(g.input_ports)}


def check_specials(g, dt, feeds):
    """``g`` compiled against the reference on each of ``feeds``, element by element
    (a tensor's largest value does not set the scale of its small ones)."""
    cg = graphc.compile(g)
    for inputs in feeds:
        want = reference.run(g, inputs)
        got = cg.run(inputs)
        for tid, e in want.items():
            assert_close_each(got[tid], e, dt, what=f"{g.ops[0].kind} {dt} {inputs[g.input_ports[0]].ravel()[:3]}")


@pytest.mark.parametrize("kind, attrs", params(FORWARD + BACKWARD))
def test_specials(kind, attrs):
    """NaN, infinities, the f32 extremes, overflow and signed zeros land where the
    reference puts them, at every position of the tensor."""
    g = graph(kind, attrs)
    check_specials(g, "f32", rotations(g, "f32"))


@pytest.mark.parametrize("dt", ["bf16", "f16"])
@pytest.mark.parametrize("kind, attrs", params(FORWARD + BACKWARD, "Round", "HardSwish", "GELU-mode=gelu_tanh",
                                               "Exp", "HardSwishBackward", "TanhBackward"))
def test_specials_low_precision(kind, attrs, dt):
    """As test_specials in bf16 and f16 (an f16 NaN through Round stays NaN)."""
    g = graph(kind, attrs, dt)
    check_specials(g, dt, rotations(g, dt))


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 15, 16, 17, 31, 33, 64, 65, 100])
def test_round_specials_any_length(n):
    """Round of NaN, +-inf and |x| >= 2^63 is NaN, +-inf and x whatever the
    tensor's length (the vectorised body and the scalar remainder alike)."""
    x = np.resize(np.array([np.nan, np.inf, -np.inf, 2.0 ** 63, -(2.0 ** 64), 3e38, 1e20, 2.5], np.float32), n)
    g = graph("Round", {}, "f32", (n,))
    want = np.sign(x) * np.floor(np.abs(x) + 0.5)
    assert_same(single_output(g, {g.input_ports[0]: x}), want.astype(np.float32))


@pytest.mark.parametrize("kind", ["HardSwish", "Round", "SoftPlus"])
def test_specials_fused(kind):
    """The same values through a fused chain (x + c -> op -> x * c): HardSwish of x
    above 5.7e37 is x, not inf, inside a fused kernel too."""
    b = GraphBuilder()
    x, c = b.tensor("f32", SHAPE), b.tensor("f32", [1, SHAPE[1]])
    (y,) = b.op("Add", [x, c])
    (y,) = b.op(kind, [y], attrs={"beta": 2.0} if kind == "SoftPlus" else None)
    b.op("Multiply", [y, c])
    g = b.finalize()
    one_partition(g, "eltwise_chain", "eltwise")
    ones = np.ones((1, SHAPE[1]), np.float32)
    check_specials(g, "f32", ({x.id: a, c.id: ones} for (a,) in map(dict.values, rotations(graph(kind, {}), "f32"))))


def test_round_ties_away_from_zero():
    g = graph("Round", {})
    x = np.resize(np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997], np.float32), SHAPE)
    y = single_output(g, {g.input_ports[0]: x})
    np.testing.assert_array_equal(y, np.resize(np.array([1, 2, 3, -1, -2, -3, 0, 0], np.float32), SHAPE))


def test_clamp_backward_dst_at_f32_bound():
    """dst clamped to f32(-1.3) / f32(0.7) is at the bound: no gradient."""
    g = graph("ClampBackward", CLAMP)
    dst = np.resize(np.array([-1.3, 0.7, 0.0, -1.2999], np.float32), SHAPE)
    dx = single_output(g, dict(zip(g.input_ports, [dst, np.ones(SHAPE, np.float32)])))
    np.testing.assert_array_equal(dx, np.resize(np.array([0, 0, 1, 1], np.float32), SHAPE))


def test_reciprocal_of_zero_is_inf():
    g = graph("Reciprocal", {})
    x = np.resize(np.array([0.0, 2.0], np.float32), SHAPE)
    y = single_output(g, {g.input_ports[0]: x})
    np.testing.assert_array_equal(y, np.resize(np.array([np.inf, 0.5], np.float32), SHAPE))


# ------------------------------------------------------------ shapes and layouts
@pytest.mark.parametrize("kind, attrs, dt, shape", [
    ("ReLU", {}, "f32", ()), ("GELU", {}, "bf16", ()), ("ReLUBackward", {}, "f32", ()),
    ("Tanh", {}, "f32", (257,)), ("SigmoidBackward", {"use_dst": False}, "f16", (9,)),
    ("Elu", {"alpha": 0.7}, "f32", (1, 7, 1)), ("Exp", {}, "f32", (2, 0, 3)),
])
def test_shapes(kind, attrs, dt, shape):
    g = graph(kind, attrs, dt, shape)
    out = single_output(g, make_inputs(g))
    assert out.shape == shape


def permuted(rng, shape, order, dt):
    """Random data of logical ``shape`` laid out in memory in dim ``order``, and its
    element strides."""
    base = rng.uniform(-4, 4, [shape[d] for d in order]).astype(NP[dt])
    arr = base.transpose(np.argsort(order))
    return arr, tuple(s // arr.itemsize for s in arr.strides)


@pytest.mark.parametrize("kind, attrs, dt", [("GELU", {}, "f32"), ("Round", {}, "f32"), ("Exp", {}, "bf16"),
                                             ("ReLUBackward", {"use_dst": False}, "f32"),
                                             ("TanhBackward", {"use_dst": True}, "f16")])
def test_strided_input(kind, attrs, dt):
    """Input 0 laid out 'acb' (transposed, as a LogicalTensor with explicit strides),
    the gradient input dense."""
    rng = np.random.default_rng(0)
    shape = (4, 5, 6)
    x, strides = permuted(rng, shape, (0, 2, 1), dt)
    assert strides == (30, 1, 5) and not x.flags.c_contiguous
    g = graph(kind, attrs, dt, shape, strides)
    inputs = {g.input_ports[0]: x}
    if len(g.input_ports) == 2:
        inputs[g.input_ports[1]] = rng.uniform(-2, 2, shape).astype(NP[dt])
    check_compiled(g, inputs)


def test_strided_input_with_gaps():
    """Every other column of a wider buffer (strides (12, 2))."""
    x = np.random.default_rng(1).uniform(-4, 4, (5, 12)).astype(np.float32)[:, ::2]
    g = graph("HardSwish", {}, "f32", x.shape, (12, 2))
    check_compiled(g, {g.input_ports[0]: x})


# ------------------------------------------------------------------ the corpus
CORPUS = ["abs", "abs_bwd", "clamp", "clamp_bwd", "elu", "elu_bwd", "gelu", "hardsigmoid", "hardsigmoid_bwd",
          "reciprocal", "relu", "relu_bwd", "softplus_bwd"]
# harness_f32_ci: --op-kind substitutions and --op-attrs
F32_CI = [("abs", k, None) for k in ["Exp", "GELU", "HardSwish", "Log", "Mish", "Round", "Sigmoid", "Sqrt",
                                     "Square", "Tanh"]] + \
         [("elu", "LeakyReLU", None)] + \
         [("relu_bwd", k, None) for k in ["SigmoidBackward", "SqrtBackward", "TanhBackward"]] + \
         [("hardsigmoid_bwd", None, {"alpha": 2.0, "beta": 1.0})]
# harness_bf16_ci / harness_f16_ci: --dt with --op-kind or --op-attrs
LOW_CI = [(case, kind, attrs, dt) for dt in ["bf16", "f16"] for case, kind, attrs in
          [("abs_bwd", "AbsBackward", None), ("abs_bwd", "GELUBackward", None), ("abs_bwd", "MishBackward", None),
           ("clamp_bwd", None, None), ("hardsigmoid", None, {"beta": 1.0})]]


def corpus_graph(corpus, case, kind=None, attrs=None, dt=None):
    """The JSON graph of op/f32/<case>.json with op 0's kind, attributes or every
    tensor's dtype replaced, as benchdnn's --op-kind / --op-attrs / --dt do."""
    d = json.loads((corpus / "f32" / f"{case}.json").read_text())
    op = d["graph"][0]
    if kind:
        op["kind"] = kind
    for name, value in (attrs or {}).items():
        op["attrs"][name] = {"type": "f32", "value": value}
    if dt:
        for t in op["inputs"] + op["outputs"]:
            t["dtype"] = dt
    return graphc.load_graph(d)


@pytest.mark.parametrize("case", CORPUS)
def test_corpus(corpus, case):
    check_compiled(graphc.load_graph(corpus / "f32" / f"{case}.json"))


@pytest.mark.parametrize("case, kind, attrs", [pytest.param(c, k, a, id=f"{c}-{k or a}") for c, k, a in F32_CI])
def test_corpus_f32_ci(corpus, case, kind, attrs):
    check_compiled(corpus_graph(corpus, case, kind, attrs))


@pytest.mark.parametrize("case, kind, attrs, dt", [pytest.param(*c, id=f"{c[0]}-{c[1] or c[2]}-{c[3]}")
                                                   for c in LOW_CI])
def test_corpus_low_precision_ci(corpus, case, kind, attrs, dt):
    check_compiled(corpus_graph(corpus, case, kind, attrs, dt))


def test_positive_input_ranges():
    """Ops defined on positive src get positive generated data (graphc.fill)."""
    for kind, attrs in [("Log", {}), ("Sqrt", {}), ("Reciprocal", {}), ("Pow", {"beta": 0.5}),
                        ("SqrtBackward", {}), ("SqrtBackward", {"use_dst": False})]:
        g = graph(kind, attrs)
        x = make_inputs(g)[g.input_ports[0]]
        assert x.min() > 0, kind


def test_hardsigmoid_backward_kinks_as_the_reference():
    """(found by the fuzzer) alpha * x + beta next to 0 or 1: the kernel decides
    which side of a kink x is on as the reference does (in f64), for every x whose
    f32 value of alpha * x + beta rounds onto the other side."""
    from graphc.builder import single_op_graph
    alpha, beta = np.float32(1.28), np.float32(-1.0)
    # the f32 values around both kinks, x = -beta / alpha and (1 - beta) / alpha
    kinks = (np.float32(-beta / alpha), np.float32((1 - beta) / alpha))
    x = np.concatenate([k + np.arange(-64, 65, dtype=np.float32) * np.spacing(k) for k in kinks]).astype(np.float32)
    g = single_op_graph("HardSigmoidBackward", [("f32", [x.size]), ("f32", [x.size])], [("f32", [x.size])],
                        {"alpha": float(alpha), "beta": float(beta)})
    dy = np.ones_like(x)
    ins = dict(zip(g.input_ports, (x, dy)))
    got = graphc.compile(g).run(ins)
    want = reference.run(g, ins)
    (tid,) = want
    np.testing.assert_array_equal(got[tid], want[tid])
