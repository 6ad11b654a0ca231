"""Elementwise kernels over f32 and narrower floats compute in float32: their
float literals are typed float32, so no float64 creeps in (numba types a bare
Python float literal float64, and float32 op float64 is float64)."""
import io

import pytest

import graphc
from graphc.builder import GraphBuilder

from support import one_op


def _variable_types(g) -> str:
    """numba's annotation of the graph's one kernel, compiled afresh from its
    source (annotations are not kept for kernels loaded from the disk cache)."""
    cg = graphc.compile(g)
    (cp,) = cg.compiled
    ns = {}
    exec(compile(cp.source.replace("cache=True", "cache=False"), "<kernel>", "exec"), ns)
    fresh = ns["kernel"]
    fresh.compile(cp.kernel.signatures[0])
    buf = io.StringIO()
    fresh.inspect_types(file=buf)
    return buf.getvalue()


def _one(kind, dt, n_in, attrs=None):
    return one_op(kind, [(dt, (4, 33))] * n_in, [(dt, (4, 33))], attrs)


def _chain(dt):
    b = GraphBuilder()
    x, bias, scale, res = b.tensor(dt, (4, 33)), b.tensor(dt, (33,)), b.tensor(dt, (1, 33)), b.tensor(dt, (4, 33))
    (y,) = b.op("Add", [x, bias])
    (y,) = b.op("HardSwish", [y])
    (y,) = b.op("Multiply", [y, scale])
    b.op("Add", [y, res])
    return b.finalize()


@pytest.mark.parametrize("name, make", [
    ("ReLUBackward f32", lambda: _one("ReLUBackward", "f32", 2, {"use_dst": False})),
    ("GELU bf16", lambda: _one("GELU", "bf16", 1)),
    ("Elu f16", lambda: _one("Elu", "f16", 1, {"alpha": 0.5})),
    ("fused Add->HardSwish->Multiply->Add f32", lambda: _chain("f32")),
])
def test_kernel_has_no_float64(name, make):
    """No value of the kernel is a float64 except the literals np.float32() narrows."""
    types = _variable_types(make())
    assert "float32" in types, name
    f64 = [ln.strip() for ln in types.splitlines() if ln.rstrip().endswith(":: float64") and "= const(float" not in ln]
    assert not f64, f"{name}: float64 values:\n" + "\n".join(f64)
