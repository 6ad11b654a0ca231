"""Helpers kernels call through a symbol (graphc.codegen.exported) and helpers
called by value (graphc.codegen.helper_jit).

A kernel calling an exported GEMM driver holds a call to its symbol, not a copy
of it; its machine code, compiled in one process and loaded from the kernel
cache in a fresh one (where nothing bound the symbol yet), runs and gives the
product.  A helper called with different integer constants compiles once."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from numba import njit, types

from graphc.codegen import blas, exported
from graphc.codegen.helper_jit import by_value
from support.kernel_cache import child_env, kernel_of, root  # noqa: F401 - root: a fixture

# A MatMul of each GEMM family: f32 (gemm_f32), bf16 (the bf16 drivers), int8 (u8 x s8)
_RUN = textwrap.dedent("""
    import json, sys
    import ml_dtypes, numpy as np
    import graphc
    from graphc import Graph, LogicalTensor, Op
    from graphc.codegen import exported
    dt = sys.argv[1]
    g = Graph()
    a, b = LogicalTensor(0, dt, [37, 53]), LogicalTensor(1, dt, [53, 40])
    g.add_op(Op(0, "MatMul", [a, b], [LogicalTensor(2, "f32" if dt != "bf16" else dt, [-1, -1])]))
    g.finalize()
    rng = np.random.default_rng(0)
    x = rng.integers(-1, 2, (37, 53)).astype(np.float32)    # (sums of 53 such products: exact in bf16)
    y = rng.integers(-1, 2, (53, 40)).astype(np.float32)
    np_dt = ml_dtypes.bfloat16 if dt == "bf16" else np.float32
    before = sorted(n for n, e in exported.EXPORTED.items() if e._cres is not None)
    out = graphc.compile(g).run({0: x.astype(np_dt), 1: y.astype(np_dt)})[2]
    cg = graphc.compile(g)
    k = next(cp.kernel for cp in cg.compiled if cp is not None and cp.kernel is not None)
    print(json.dumps({"exact": bool(np.array_equal(np.asarray(out, np.float32), x @ y)),
                      "hits": sum(k._cache_hits.values()), "bound_before": before}))
""")


def _fresh(root, dt):
    r = subprocess.run([sys.executable, "-c", _RUN, dt], env=child_env(root), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("dt", ["f32", "bf16"])
def test_a_kernel_calling_an_exported_helper_loads_from_the_cache_in_a_fresh_process(root, dt):
    first = _fresh(root, dt)
    assert first["exact"] and first["hits"] == 0 and first["bound_before"] == []
    again = _fresh(root, dt)
    assert again["exact"] and again["hits"] == 1     # the machine code from the cache, its symbol bound first


def test_a_kernel_declares_the_helper_it_calls_and_holds_no_copy_of_it():
    @njit
    def caller(a, b, c):
        return blas.gemm_bf16_packed(0, 8, 32, 16, a, 0, 16, b, 0, 1, 0, 0.0, c, 0, 32)

    u = np.zeros(1024, np.uint16)
    caller.compile((caller.typeof_pyval(u),) * 2 + (caller.typeof_pyval(np.zeros(256, np.float32)),))
    (cres,) = caller.overloads.values()
    ir = cres.library.get_llvm_str()
    symbol = exported.EXPORTED["gemm_bf16_packed"].symbol
    assert f"declare i32 @{symbol}(" in ir or f'declare i32 @"{symbol}"(' in ir
    assert "_pack_a" not in ir and "gemm_bf16_packed" not in ir.replace(symbol, "")


def test_a_helper_is_typed_by_value():
    calls = []

    @njit
    def _plus(n):
        return n + 1
    helper = by_value(_plus)

    @njit
    def three():
        return helper(3)

    @njit
    def five():
        return helper(5)
    calls.append(three())
    calls.append(five())
    assert calls == [4, 6]
    assert list(_plus.overloads) == [(types.int64,)]     # one compile, not one per constant


def test_an_exported_helper_refuses_arrays_of_another_dtype():
    @njit
    def caller(a, c):
        return blas.gemm_f32(0, 0, 2, 2, 2, a, 0, 2, a, 0, 2, 0.0, c, 0, 2)
    with pytest.raises(Exception, match="gemm_f32"):
        caller(np.zeros(4, np.float64), np.zeros(4, np.float32))
