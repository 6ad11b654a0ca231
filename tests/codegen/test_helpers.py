"""The kernel helper registry (graphc/codegen/helpers.py): one declaration per
helper gives its result type, its import line and where that line goes."""
import ast
import importlib
from pathlib import Path

import numpy as np
import pytest

from graphc.codegen import helpers, ir
from graphc.codegen.kernel import HEADER, KernelBuilder
from graphc.types import LogicalTensor

CODEGEN = Path(helpers.__file__).parent


def _imported(text: str) -> dict:
    """name -> module of each ``from module import name`` in ``text``."""
    return {a.asname or a.name: node.module for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.ImportFrom) for a in node.names}


@pytest.mark.parametrize("name", sorted(helpers.HELPERS))
def test_each_helper_is_imported_by_its_line_from_its_module(name):
    h = helpers.HELPERS[name]
    assert _imported(h.imports.text).get(name) == h.imports.module
    assert callable(getattr(importlib.import_module(h.imports.module), name))
    assert ir.FUNCS[name] is h.result and h.imports.place in (helpers.HEADER, helpers.TOP, helpers.IN_ORDER)
    assert all(d in helpers.HELPERS for d in h.needs)


def test_every_kernel_module_imports_the_header_helpers():
    header = {n for n, h in helpers.HELPERS.items() if h.imports.place == helpers.HEADER}
    assert set(_imported(helpers.HEADER_IMPORTS.text)) == header and helpers.HEADER_IMPORTS.text in HEADER


def test_result_types_and_one_declaration_per_name():
    x32, x64 = ir.var("x", "f32"), ir.var("y", "f64")
    assert ir.call("bf16_to_f32", ir.var("b", "int")).dt == "f32"
    assert ir.call("round_half_away", x32).dt == "f32" and ir.call("round_half_away", x64).dt == "f64"
    assert ir.call("key_f32", x32).dt == "int" and ir.call("gemm_f32", x32).dt == "int"
    with pytest.raises(ValueError, match="twice"):
        helpers.declare("sigmoid_f32", "f32", "graphc.codegen.fastmath")
    with pytest.raises(ValueError, match="no such kernel function"):
        ir.call("not_a_helper", x32)


def test_lines_go_where_their_place_says():
    kb = KernelBuilder()
    kb.helpers.append("x = 1")
    helpers.use_helper(kb, "gelu_erf_f32")   # after erf_f32, after fma_f32
    assert kb.helpers == ["x = 1"] + [f"from graphc.codegen.fastmath import {n}"
                                       for n in ("fma_f32", "erf_f32", "gelu_erf_f32")]
    helpers.use_helper(kb, "erf_f32")          # once
    helpers.use_helper(kb, "sigmoid")          # in every module's header already
    assert len(kb.helpers) == 4
    helpers.import_called(kb, {"get_thread_id", "f4e2m1_to_f32", "exp_le0_f32", "bf16_to_f32"})
    fm = "from graphc.codegen.fastmath import "
    assert kb.helpers == sorted(helpers.HELPERS[n].imports.text for n in ("get_thread_id", "f4e2m1_to_f32")) + [
        "x = 1", fm + "fma_f32", fm + "erf_f32", fm + "gelu_erf_f32", helpers.HELPERS["bits_to_f32"].imports.text,
        fm + "expm1_poly_f32", fm + "exp_neg_f32", fm + "exp_le0_f32"]


def test_a_kernel_source_imports_what_its_kernel_calls():
    kb = KernelBuilder()
    a, o = kb.arg(LogicalTensor(0, "f32", (4,))), kb.arg(LogicalTensor(1, "f32", (4,)), "o")
    with kb.for_(4) as i:
        kb.emit(o.store(i, ir.call("tanh_f32", a.load(i))))
    src = kb.source()
    lines = src.splitlines()
    for n in ("fma_f32", "exp_neg_f32", "tanh_f32"):
        assert f"from graphc.codegen.fastmath import {n}" in lines
    assert lines.index("from graphc.codegen.runtime import bits_to_f32, f32_to_bits") < lines.index(
        "from graphc.codegen.fastmath import exp_neg_f32")


def test_the_cache_digest_covers_every_linked_module():
    from graphc.codegen import cache_folder
    assert set(helpers.linked_modules()) >= {"graphc.codegen.runtime", "graphc.codegen.fastmath",
                                             "graphc.codegen.smallfloat", "graphc.codegen.blas"}
    names = [p.name for p in cache_folder._linked_files()]
    assert {"runtime.py", "fastmath.py", "smallfloat.py", "blas.py", "launch.py", "entry.py", "bf16_tile.py",
            "bf16_gemm.py", "blas_abi.py"} <= set(names)


def test_the_ir_is_a_leaf():
    for name in ("ir.py", "printer.py"):
        tree = ast.parse((CODEGEN / name).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level:
                assert node.module in ("ir", "printer"), (name, node.module)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert not (mod or "").startswith("graphc"), (name, mod)


def test_philox_helper_is_the_references():
    """runtime.philox4x32_10, the kernels' Philox rounds as a compiled function (a
    lowering brings it in with use_helper once helpers.py declares it)."""
    from graphc.codegen.runtime import philox4x32_10
    from graphc.ops.misc import philox4x32_10 as reference
    rng = np.random.default_rng(0)
    for _ in range(20):
        c = [int(v) for v in rng.integers(0, 2 ** 32, 4, dtype=np.uint64)]
        k = [int(v) for v in rng.integers(0, 2 ** 32, 2, dtype=np.uint64)]
        got = philox4x32_10(*(np.uint64(v) for v in c + k))
        want = reference([np.array([v], np.uint64) for v in c], k)
        assert [int(g) for g in got] == [int(w[0]) for w in want]
