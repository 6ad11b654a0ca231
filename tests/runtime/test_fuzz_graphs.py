"""Random small graphs built from mutated ops of the benchdnn corpus: compiling
and running one either raises a GraphcError or gives graphc's numpy reference
(graphc.reference.run) within graphc.tolerances.

Each node of a graph comes from a corpus op (op/{f32,bf16,f16}/*.json: eltwise
and their backward, binary ops with broadcasting, reductions, norms, softmax,
typecasts, reorders, transposes, bias and PReLU): its kind may be swapped for
another of its family, its attributes are re-aimed at the small shapes used
here (and now and then set to a random, possibly invalid value), its dtypes are
drawn from the rows of the kind's dtype table, and its extra inputs get the
shape relation they have in the corpus file (same shape, broadcast, per
channel, per last dim, the leading dims).  Nodes read any earlier tensor, so the
graphs are DAGs; graph inputs and Reorder outputs get random strided layouts.
A graph's first input has a dim of 0 now and then (ZERO_SHAPES), and in about a
quarter of the graphs the float inputs of unary ops hold NaN, infinities, the
f32 extremes and other hard values (SPECIAL_VALUES) in a quarter of their elements.
Pairs of graphs also run from two threads that start together.

The CI version runs a few dozen graphs on shapes reused across examples (they
hit the kernel cache).  The long version, e.g. 20000 graphs, keeps going past
failures and writes outcome counts (and every failing graph) to a JSON report::

    GRAPHC_FUZZ_EXAMPLES=20000 GRAPHC_FUZZ_REPORT=/tmp/fuzz.json \\
        .venv/bin/pytest -p no:cacheprovider -p no:xdist -q tests/runtime/test_fuzz_graphs.py

(``GRAPHC_FUZZ_SEED`` picks another sequence of graphs; ``GRAPHC_FUZZ_LENIENT=1``
judges each output by the least precise float on its way instead of its own
dtype.)  About 10 graphs a second once the kernel cache is warm.
"""
import json
import os
import threading
import traceback
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import graphc
from conftest import OP_CORPUS
from graphc.errors import GraphcError
from graphc.fill import make_inputs
from graphc import Graph   # (the public graph: the core one has no get_partitions)
from graphc.op import Op
from graphc.ops import get_schema
from graphc.types import DataType, LogicalTensor
from support import assert_outputs

EXAMPLES = int(os.environ.get("GRAPHC_FUZZ_EXAMPLES", "0") or 0)
LONG = EXAMPLES > 0
REPORT = os.environ.get("GRAPHC_FUZZ_REPORT")
#: GRAPHC_FUZZ_LENIENT=1: judge outputs by the least precise float on their way (see _judged_as)
LENIENT = os.environ.get("GRAPHC_FUZZ_LENIENT") == "1"

#: the families whose corpus ops the graphs are made of
FAMILIES = {"eltwise", "eltwise_bwd", "binary", "reduce", "norm", "softmax", "shuffle", "bias", "misc"}
SKIP_KINDS = {"Concat", "StaticReshape", "BatchNormTrainingBackward", "Dropout", "End", "Wildcard",
              "AddBackward"}
#: kinds a node may become instead of its corpus kind (same family, same ports)
SWAPS = {
    "eltwise": ["Abs", "Clamp", "Elu", "Exp", "GELU", "HardSigmoid", "HardSwish", "LeakyReLU", "Log", "Mish",
                "ReLU", "Reciprocal", "Round", "Sigmoid", "SoftPlus", "Sqrt", "Square", "Tanh"],
    "eltwise_bwd": ["AbsBackward", "ClampBackward", "EluBackward", "GELUBackward", "HardSigmoidBackward",
                    "HardSwishBackward", "MishBackward", "ReLUBackward", "SigmoidBackward", "SoftPlusBackward",
                    "SqrtBackward", "TanhBackward"],
    "binary": ["Add", "Subtract", "Multiply", "Divide", "Maximum", "Minimum", "SquaredDifference", "GreaterEqual"],
    "reduce": ["ReduceL1", "ReduceL2", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum"],
}
#: kinds whose result is ill-conditioned in some input (a division by it, a log or
#: square root near 0, a threshold): they read graph inputs only, since a one-ulp
#: difference in a computed input (f32 kernel math vs the reference's rounded f64)
#: can grow past any tolerance there (e.g. GELU's far tail, then SqrtBackward
#: dividing by it); their outputs feed any node
SENSITIVE = {"Reciprocal", "Divide", "Log", "Sqrt", "SqrtBackward", "Pow", "Round", "GreaterEqual", "ReduceProd"}
#: base shapes, few so that kernels repeat across examples
SHAPES = [(2, 3), (3, 4), (2, 3, 4), (1, 3, 2, 2), (2, 4, 1, 3), (5,), (4, 1, 3)]
#: shapes with a dim of 0 (empty tensors; a broadcast operand may keep 1 there)
ZERO_SHAPES = [(0, 3), (2, 0, 4), (3, 0), (1, 3, 0, 2)]
#: kinds besides the normalizations whose kernels multiply two f32 values of their
#: inputs and sum the products (of softmax's dst, between 0 and 1, in a real graph)
RANGE_LIMITED = {"SoftMaxBackward", "LogSoftmaxBackward", "PReLUBackward"}
#: values put into the float inputs of unary ops now and then: NaN, the infinities,
#: zeros, the f32 extremes, values whose f32 square or product with a small constant
#: overflows, powers of two past int64, f16's largest, subnormals, a tie
SPECIAL_VALUES = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.4028235e38, -3.4028235e38, 3e38, -1e38, 6e37,
                           1e20, -1.9e19, 2.0 ** 63, -(2.0 ** 64), 65504.0, 1.2e-38, -1e-45, 2.5])


def _relation(x, s, attrs):
    """How an extra input of shape s relates to input 0 of shape x in a corpus op."""
    x, s = list(x), list(s)
    if s == x:
        return "same"
    nxc = attrs.get("data_format") == "NXC"
    if len(s) == 1 and len(x) >= 2 and s[0] == x[-1 if nxc else 1] and not (s[0] == 1 and x[1] != 1):
        return "channel"
    if len(s) == 1 and x and s[0] == x[-1]:
        return "last"
    if len(s) == len(x) and all(b in (a, 1) for a, b in zip(x, s)):
        return "bcast"
    if 0 < len(s) < len(x) and s == x[:len(s)]:
        return "lead"
    return None


def _load_seeds():
    """(kind, attrs, [(dtype, relation)] of its inputs, [dtype] of its outputs) per corpus op."""
    seeds, seen = [], set()
    if not OP_CORPUS.is_dir():
        return seeds
    for path in sorted(OP_CORPUS.glob("*/*.json")):
        try:
            doc = json.loads(path.read_text())
        except ValueError:
            continue
        for od in doc.get("graph", []):
            kind = od.get("kind")
            try:
                schema = get_schema(kind)
            except GraphcError:
                continue
            if schema.family not in FAMILIES or kind in SKIP_KINDS or len(od["inputs"]) == 0:
                continue
            attrs = {k: v["value"] for k, v in od.get("attrs", {}).items()}
            x = od["inputs"][0]["shape"]
            rels = [_relation(x, t["shape"], attrs) for t in od["inputs"][1:]]
            if None in rels:
                continue
            ins = [(t["dtype"], r) for t, r in zip(od["inputs"], ["same"] + rels)]
            outs = [t["dtype"] for t in od["outputs"]]
            key = json.dumps([kind, attrs, ins, outs], sort_keys=True)
            if key not in seen:
                seen.add(key)
                seeds.append((kind, attrs, ins, outs))
    return seeds


SEEDS = _load_seeds()
OUTCOMES = Counter()
NODES = Counter()        # (long version) kinds of the nodes built, and of the nodes rejected
FAILURES = []


def _dump_report():
    if REPORT:
        with open(REPORT, "w") as f:
            json.dump({"examples": sum(OUTCOMES.values()), "outcomes": dict(OUTCOMES.most_common()),
                       "nodes": dict(NODES.most_common()),
                       "failures": FAILURES[:200]}, f, indent=1)


# ------------------------------------------------------------ graph building
def _layout(draw, shape):
    """None (dense) or random strides: a permutation of the dims, maybe with a gap."""
    if len(shape) < 2 or not draw(st.integers(0, 3)) == 0:
        return None
    order = draw(st.permutations(range(len(shape))))
    strides, step = [0] * len(shape), 1
    for d in reversed(order):
        strides[d] = step
        step *= shape[d] + (1 if draw(st.integers(0, 4)) == 0 else 0)
    return strides


def _random_attr(draw, spec):
    t = spec.type
    if spec.choices and draw(st.booleans()):
        return draw(st.sampled_from(list(spec.choices) + ["junk"]))
    if t == "s64":
        return draw(st.integers(-5, 5))
    if t == "s64[]":
        return draw(st.lists(st.integers(-5, 5), max_size=4))
    if t == "f32":
        return draw(st.sampled_from([0.0, 0.5, 1.0, -1.0, 2.0, 1e-5, -0.25, 3.0]))
    if t == "f32[]":
        return draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, -1.0]), max_size=3))
    if t == "bool":
        return draw(st.booleans())
    return draw(st.sampled_from(["junk", "", "none", "NCX", "NXC"]))


def _aim_attrs(draw, kind, attrs, x):
    """The seed's attrs re-aimed at input shape x (axes, groups, order...), some
    of them replaced with random values now and then."""
    schema = get_schema(kind)
    r = len(x)
    out = {k: v for k, v in attrs.items() if schema.attr_spec(k) is not None}
    for spec in schema.attrs:
        name = spec.name
        if spec.required and name not in out:
            out[name] = {"f32": 0.5, "s64": 0, "bool": False}.get(spec.type, 0)
        if name == "axes" and r:
            axes = draw(st.lists(st.integers(0, r - 1), min_size=1, max_size=r, unique=True))
            out[name] = [a - r if draw(st.booleans()) else a for a in axes]
        elif name in ("axis", "begin_norm_axis") and r:
            out[name] = draw(st.integers(-r, r - 1))
        elif name == "order":
            out[name] = draw(st.permutations(range(r)))
        elif name == "groups" and r >= 2:
            c = x[-1 if out.get("data_format") == "NXC" else 1]
            out[name] = draw(st.sampled_from([g for g in range(1, c + 1) if c % g == 0] or [1]))
        elif name in ("min", "max") and kind.startswith("Clamp"):
            out[name] = draw(st.sampled_from([-1.0, -0.5, 0.0, 0.5, 1.0]))
        elif name == "data_format" and draw(st.integers(0, 3)) == 0:
            out[name] = "NXC"
        if draw(st.integers(0, 24)) == 0:  # a random, maybe invalid value
            out[name] = _random_attr(draw, spec)
    if kind.startswith("Clamp") and out.get("min", 0) > out.get("max", 0) and draw(st.integers(0, 3)):
        out["min"], out["max"] = out["max"], out["min"]
    return out


def _extra_shape(draw, rel, x, attrs):
    if rel == "same":
        return tuple(x)
    if rel == "channel":
        return (x[-1 if attrs.get("data_format") == "NXC" else 1],) if len(x) >= 2 else tuple(x[:1]) or (1,)
    if rel == "last":
        return (x[-1],) if x else ()
    if rel == "lead":
        return tuple(x[:-1])
    # bcast: each dim kept or 1, sometimes fewer leading dims (numpy rules)
    s = [d if draw(st.booleans()) else 1 for d in x]
    return tuple(s[draw(st.integers(0, len(s))):]) if draw(st.integers(0, 3)) == 0 else tuple(s)


def _dtype_rows(schema, main_port, dt):
    """Rows of the dtype table allowing dt on the main input port."""
    table = schema.dtypes
    if table is None:
        return [None]
    rows = []
    for row in table.rows:
        for col, allowed in zip(table.columns, row):
            if main_port in col and dt not in allowed:
                break
        else:
            rows.append(row)
    return rows


def _port_dtype(draw, schema, row, port, fallback):
    if row is None:
        return fallback
    for col, allowed in zip(schema.dtypes.columns, row):
        if port in col:
            return draw(st.sampled_from(sorted(allowed, key=lambda d: d.value)))
    return fallback


class Builder:
    def __init__(self, draw):
        self.draw = draw
        self.graph = Graph()
        self.pool = []           # LogicalTensors that nodes may read
        self.next_tensor = 0
        self.next_op = 0
        self.rejected = []       # GraphcErrors of nodes that did not validate
        self.specials = False    # SPECIAL_VALUES in the inputs of unary ops

    def tensor(self, dtype, shape, strides=None):
        t = LogicalTensor(self.next_tensor, dtype, shape, strides)
        self.next_tensor += 1
        return t

    def graph_input(self, dtype, shape):
        return self.tensor(dtype, shape, _layout(self.draw, shape))

    def add(self, kind, ins, outs, attrs):
        op = Op(self.next_op, kind, ins, outs, attrs)
        self.next_op += 1
        try:
            self.graph.add_op(op)
        except GraphcError as e:
            self.rejected.append(type(e).__name__)
            NODES[f"rejected {kind}: {type(e).__name__}"] += LONG
            return []
        NODES[kind] += LONG
        return op.outputs

    def node(self):
        draw = self.draw
        kind, attrs, ins, outs = draw(st.sampled_from(SEEDS))
        family = get_schema(kind).family
        if family in SWAPS and draw(st.booleans()):
            kind = draw(st.sampled_from(SWAPS[family]))
        schema = get_schema(kind)
        try:
            names = schema.input_names(None, len(ins))
            out_names = schema.output_names(None, len(outs))
        except GraphcError:
            return
        main_port = names[0]
        sensitive = kind in SENSITIVE
        sources = [t for t in self.pool if not sensitive or t.id not in self.graph.producer]
        if not sources:
            return
        x = draw(st.sampled_from(sources))
        rows = _dtype_rows(schema, main_port, x.dtype)
        if not rows and x.dtype in (DataType.f32, DataType.bf16, DataType.f16):
            rows = [None]
        if not rows:
            return
        row = draw(st.sampled_from(rows))
        attrs = _aim_attrs(draw, kind, attrs, x.shape)
        inputs = [x]
        for (seed_dt, rel), port in zip(ins[1:], names[1:]):
            dt = _port_dtype(draw, schema, row, port, x.dtype if seed_dt == ins[0][0] else DataType.parse(seed_dt))
            shape = _extra_shape(draw, rel, x.shape, attrs)
            same = [t for t in sources if t.shape == shape and t.dtype == dt and t is not x]
            inputs.append(draw(st.sampled_from(same)) if same and draw(st.booleans())
                          else self.graph_input(dt, shape))
        out_lts = []
        for seed_dt, port in zip(outs, out_names):
            dt = _port_dtype(draw, schema, row, port, x.dtype if seed_dt == ins[0][0] else DataType.parse(seed_dt))
            if kind == "Reorder":
                out_lts.append(self.tensor(dt, x.shape, _layout(draw, x.shape) or list(x.strides or []) or None))
            else:
                out_lts.append(self.tensor(dt, ()))
        if kind == "TypeCast":
            choices = {DataType.f32: ["bf16", "f16"], DataType.bf16: ["f32"], DataType.f16: ["f32"]}
            out_lts = [self.tensor(draw(st.sampled_from(choices.get(x.dtype, ["f32"]))), ())]
        self.pool.extend(self.add(kind, inputs, out_lts, attrs))


@st.composite
def graphs(draw):
    b = Builder(draw)
    shape = draw(st.sampled_from(SHAPES + ZERO_SHAPES if draw(st.integers(0, 5)) == 0 else SHAPES))
    b.specials = draw(st.integers(0, 3)) == 0
    dt = draw(st.sampled_from([DataType.f32, DataType.f32, DataType.bf16, DataType.f16]))
    b.pool.append(b.graph_input(dt, shape))
    for _ in range(draw(st.integers(1, 4))):
        b.node()
    return b


def _check(b):
    """The outcome of one graph: 'build:<error>', 'compile:<error>', 'run:<error>',
    'reference:<error>' or 'equal'; an AssertionError when the results differ."""
    g = b.graph
    if not g.ops:
        return "build:" + (b.rejected[0] if b.rejected else "empty")
    try:
        g.finalize()
        inputs = make_inputs(g, seed=len(g.ops))
    except GraphcError as e:
        return f"build:{type(e).__name__}"
    if b.specials:
        _put_specials(g, inputs, np.random.default_rng(len(g.ops)))
    try:
        cg = graphc.compile(g)
    except GraphcError as e:
        return f"compile:{type(e).__name__}"
    try:
        got = cg.run(inputs)
    except GraphcError as e:
        outcome = f"run:{type(e).__name__}"
        try:
            graphc.reference.run(g, inputs)
        except GraphcError:
            return outcome + "(reference too)"
        return outcome
    try:
        want = graphc.reference.run(g, inputs)
    except GraphcError as e:
        return f"reference:{type(e).__name__}"
    assert_outputs(got, want, dtypes={tid: (_judged_as(g, tid) if LENIENT else g.tensors[tid].dtype)
                                      for tid in want}, what="output")
    return "equal"


def _put_specials(g, inputs, rng):
    """SPECIAL_VALUES (as each dtype holds them) at random places of the float graph
    inputs that unary eltwise ops read (about a quarter of their elements).  In a
    graph with an op that multiplies two of its values in f32 (the normalizations'
    squared deviations, SoftMaxBackward's dy * dst, ...: RANGE_LIMITED), finite values
    only up to f16's largest: products of values past 1.8e19, or of what the ops
    between make of them, overflow f32 there (docs/design.md#numerics)."""
    values = SPECIAL_VALUES
    if any(o.schema.family == "norm" or o.kind in RANGE_LIMITED for o in g.ops.values()):
        values = values[~(np.abs(values) > 65504) | ~np.isfinite(values)]
    for tid, arr in inputs.items():
        lt = g.tensors[tid]
        unary = any(g.ops[o].schema.family == "eltwise" for o, _ in g.consumers.get(tid, []))
        if not unary or lt.dtype not in (DataType.f32, DataType.bf16, DataType.f16) or not arr.flags.c_contiguous:
            continue
        flat = arr.reshape(-1)
        where = rng.random(flat.size) < 0.25
        with np.errstate(over="ignore"):
            vals = values.astype(np.float32).astype(arr.dtype)
        flat[where] = vals[rng.integers(0, vals.size, size=int(where.sum()))]


#: floats from the least to the most precise
_PRECISION = [DataType.f8_e5m2, DataType.f8_e4m3, DataType.bf16, DataType.f16, DataType.f32, DataType.f64]


def _judged_as(g, tid):
    """The dtype whose tolerance judges output tid: the least precise float on its
    way from the inputs, since a fused kernel keeps a chain's intermediate values
    in f32 where the reference rounds each to its tensor's dtype (e.g. f16 ->
    Sigmoid -> f16 -> TypeCast -> f32 is judged as f16)."""
    dt = g.tensors[tid].dtype
    if dt not in _PRECISION:
        return dt
    seen, stack, least = set(), [tid], dt
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        d = g.tensors[t].dtype
        if d in _PRECISION and _PRECISION.index(d) < _PRECISION.index(least):
            least = d
        if t in g.producer:
            stack.extend(i.id for i in g.ops[g.producer[t][0]].inputs)
    return least


def _describe(g):
    return [f"{op.kind}{dict(op.attrs)} in={[(t.id, str(t.dtype), list(t.shape), t.strides) for t in op.inputs]} "
            f"out={[(t.id, str(t.dtype), list(t.shape), t.strides) for t in op.outputs]}" for op in g.ops.values()]


_settings = settings(max_examples=EXAMPLES or 30, deadline=None, derandomize=not LONG, database=None,
                     suppress_health_check=list(HealthCheck), print_blob=True)


@pytest.mark.skipif(not SEEDS, reason=f"benchdnn corpus not found at {OP_CORPUS} (set GRAPHC_SHARED)")
@seed(int(os.environ.get("GRAPHC_FUZZ_SEED", "0")))
@_settings
@given(graphs())
def test_random_graphs_raise_graphc_errors_or_match_the_reference(b):
    if not LONG:
        OUTCOMES[_check(b)] += 1
        return
    try:
        outcome = _check(b)
    except Exception as e:  # keep going: every failure goes to the report
        outcome = f"FAILED:{type(e).__name__}"
        FAILURES.append({"error": "".join(traceback.format_exception_only(type(e), e))[-2000:],
                         "graph": _describe(b.graph)})
    OUTCOMES[outcome] += 1
    if sum(OUTCOMES.values()) % 100 == 0:
        _dump_report()


_pair_settings = settings(max_examples=max(EXAMPLES // 10, 8), deadline=None, derandomize=not LONG, database=None,
                          suppress_health_check=list(HealthCheck), print_blob=True)


@pytest.mark.skipif(not SEEDS, reason=f"benchdnn corpus not found at {OP_CORPUS} (set GRAPHC_SHARED)")
@seed(int(os.environ.get("GRAPHC_FUZZ_SEED", "0")) + 1)
@_pair_settings
@given(graphs(), graphs())
def test_two_graphs_from_two_threads_at_once(a, b):
    """Two random graphs finalized, compiled, run and checked from two threads that
    start together: each ends as it does alone (a GraphcError or the reference's
    result); a thread's exception of any other kind fails the test."""
    start = threading.Barrier(2)

    def check(g):
        start.wait()
        return _check(g)

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(check, g) for g in (a, b)]
        outcomes = [f.result() for f in futures]   # re-raises an AssertionError or a foreign exception
    for o in outcomes:
        OUTCOMES["threads:" + o] += 1


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("kind", ["Sigmoid", "GELU", "Tanh"])
def test_fused_narrow_intermediate_is_rounded(kind, dtype):
    """(found by the fuzzer) x -> op -> [dtype] -> TypeCast -> f32 in one fused
    kernel: the TypeCast sees the intermediate rounded to its dtype, as the
    reference does, not its f32 value (judged with f32's tolerance)."""
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    x = b.tensor(dtype, [7])
    y = b.op(kind, [x])[0]
    z = b.op("TypeCast", [y], out=[("f32", [7])])[0]
    g = b.finalize()
    cg = graphc.compile(g)
    assert len(cg.partitions) == 1, "the chain should fuse"
    xv = (np.arange(7, dtype=np.float32) / 3 - 1).astype(DataType.parse(dtype).np)
    got, want = cg.run({x.id: xv})[z.id], graphc.reference.run(g, {x.id: xv})[z.id]
    np.testing.assert_array_equal(got, got.astype(xv.dtype).astype(np.float32))  # representable in dtype
    assert_outputs({z.id: got}, {z.id: want}, dtypes={z.id: "f32"})


def test_zz_fuzz_report():
    """(after the fuzz test) the long version fails here if any graph failed;
    both versions must have run some graphs through to a comparison."""
    _dump_report()
    # (under xdist the fuzz test may have run in another worker than this one, and
    # only the two-thread test here: its outcomes are not the fuzz test's)
    if not SEEDS or not any(not key.startswith("threads:") for key in OUTCOMES):
        pytest.skip("the fuzz test did not run in this process")
    assert not FAILURES, f"{len(FAILURES)} failing graphs, see {REPORT or 'GRAPHC_FUZZ_REPORT'}: {FAILURES[:3]}"
    assert OUTCOMES["equal"] > 0, dict(OUTCOMES)
