"""The kernel IR and its printer: typing (no silent float64), structural
equality, common subexpressions computed once and never across a write,
precedence, and only known functions callable."""
import numpy as np
import pytest

from graphc.codegen import ir
from graphc.codegen.kernel import KernelBuilder
from graphc.codegen.printer import expr_source, print_body


def f32v(name="x"):
    return ir.var(name, "f32")


def test_python_numbers_take_the_float32_type():
    x = f32v()
    e = 0.5 * x + 2
    assert e.dt == "f32"
    assert all(n.dt == "f32" for n in ir.walk(e) if n.op == "const")
    assert expr_source(e) == "np.float32(0.5) * x + np.float32(2.0)"


def test_promotion_follows_numba():
    x, i, d = f32v(), ir.var("i"), ir.var("d", "f64")
    assert (x * i).dt == "f64"          # float32 with int64 is float64 in numba
    assert (x * d).dt == "f64"
    assert (i + 1).dt == "int"
    assert (i / 2).dt == "f64"          # true division
    assert ir.f32(i).dt == "f32" and (x * ir.f32(i)).dt == "f32"
    assert ir.call("math.exp", x).dt == "f32"
    assert ir.call("np.maximum", x, 0.0).args[1][1].dt == "f32"


def test_structural_equality():
    a = ir.call("math.erf", f32v() * 0.7) + 1.0
    b = ir.call("math.erf", f32v() * 0.7) + 1.0
    assert a == b and hash(a) == hash(b)
    assert a != ir.call("math.erf", f32v() * 0.7) + 2.0
    nan = ir.const(float("nan"), "f32")
    assert nan == ir.const(float("nan"), "f32")


def test_precedence():
    a, b, c = (ir.var(n, "f64") for n in "abc")
    assert expr_source((a + b) * c) == "(a + b) * c"
    assert expr_source(a - (b - c)) == "a - (b - c)"
    assert expr_source(a - b - c) == "a - b - c"
    assert expr_source(-(a + b)) == "-(a + b)"
    assert expr_source(a ** 2) == "a ** 2"
    assert expr_source((a > b) & (b > c)) == "(a > b) & (b > c)"
    assert expr_source(ir.select(a > 0.0, a, b * c)) == "(a if a > 0.0 else b * c)"


def test_only_known_functions():
    with pytest.raises(ValueError):
        ir.call("os.system", ir.const(1))
    with pytest.raises(ValueError):
        ir.call("__import__", ir.const(1))


def _run(stmts, args, params):
    """Print ``stmts`` as a plain Python function and run it on ``args``."""
    src = f"def f({', '.join(params)}):\n" + "\n".join(print_body(stmts, 1))
    env = {"np": np, "math": __import__("math")}
    exec(src, env)  # noqa: S102 - source made by the printer from IR built here
    return env["f"](*args), src


def test_common_subexpression_computed_once():
    x = ir.array("a", "f64")
    out = ir.array("o", "f64")
    i = ir.var("i")
    v = ir.call("math.exp", x[i] * 2.0)
    body = [ir.For(i, ir.const(0), ir.const(4), [ir.Store(out, i, v + v * v)])]
    a, o = np.arange(4.0), np.zeros(4)
    _, src = _run(body, (a, o), ["a", "o"])
    assert src.count("math.exp") == 1 and src.count("a[i]") == 1, src
    np.testing.assert_allclose(o, np.exp(2 * a) + np.exp(2 * a) ** 2)


def test_no_reuse_across_a_store():
    buf = ir.array("b", "f64")
    out = ir.array("o", "f64")
    zero = ir.const(0)
    load = buf[zero] * 3.0
    body = [ir.Store(out, zero, load), ir.Store(buf, zero, ir.const(5.0)), ir.Store(out, ir.const(1), load)]
    b, o = np.array([1.0]), np.zeros(2)
    _, src = _run(body, (b, o), ["b", "o"])
    assert src.count("b[0] * 3.0") == 2, src
    assert o.tolist() == [3.0, 15.0]


def test_guarded_subexpression_is_not_made_eager():
    # the log is only computed where its argument is positive: not hoisted
    x = ir.var("x", "f64")
    guarded = ir.call("math.log", x)
    e = ir.select(x > 0.0, guarded, 0.0) + ir.select(x > 1.0, guarded, 1.0)
    out = ir.var("y", "f64")
    body = [ir.Let(out, e), ir.Return(out)]
    got, src = _run(body, (-1.0,), ["x"])
    assert "cse" not in src, src
    assert got == 1.0


def test_no_temporary_crosses_a_loop():
    acc = ir.var("s", "f64")
    i = ir.var("i")
    body = [ir.Assign(acc, ir.const(0.0)),
            ir.For(i, ir.const(0), ir.const(3), [ir.Assign(acc, acc + 1.0)]),
            ir.Return(acc * acc + acc * acc)]
    got, src = _run(body, (), [])
    assert got == 18.0, src


def test_kernel_builder_let_names_and_loops():
    kb = KernelBuilder()
    x = kb.let(ir.const(3.0, "f32"), "x")
    assert x.op == "const"   # a number needs no name
    with kb.for_(8, "i", parallel=True) as i:
        y = kb.let(ir.f32(i) * 0.5, "y")
        kb.emit(ir.Store(ir.array("o0", "f32"), i, y + x))
    src = kb.source()
    # the parallel loop runs as a function of its own on numba's threads (graphc.codegen.outline)
    assert "launch(kernel_loop0, 0, 8, (o0,))" in src and "for i0 in range(_lo, _hi):" in src
    assert "prange(" not in src and "parallel=True" not in src
    assert "y0 = np.float32(i0) * np.float32(0.5)" in src


def test_graph_text_never_enters_source():
    # names, kinds and strings of a graph are never arguments of IR nodes that print as text
    import graphc
    from graphc.builder import GraphBuilder
    b = GraphBuilder()
    x = b.tensor("f32", [4, 8])
    t = b.op("ReLU", [x], name="__import__('os').system('echo pwned')")[0]
    b.op("Sigmoid", [t], name="evil\nimport os")
    cg = graphc.compile(b.finalize())
    assert "pwned" not in cg.source and "evil" not in cg.source


def test_store_to_an_element_read_twice_is_kept():
    # b[0] is read twice (a temporary), then stored: the store writes b[0], not the temporary
    buf = ir.array("b", "f64")
    zero = ir.const(0)
    body = [ir.Store(buf, zero, buf[zero] * buf[zero] + 1.0), ir.Return(buf[zero])]
    b = np.array([3.0])
    got, src = _run(body, (b,), ["b"])
    assert b[0] == 10.0 and got == 10.0, src


def test_each_compute_type_has_its_numpy_type():
    """ir.NP_TYPE is the type TYPE_CTOR names (the compile step allocates workspaces
    of each element type from it)."""
    for t, ctor in ir.TYPE_CTOR.items():
        assert f"np.{ir.NP_TYPE[t].__name__}" in (ctor, ctor.rstrip("_"))
