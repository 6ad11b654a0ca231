"""The backend as a user meets it: found by name in a fresh process, explain's
report, and a region graphc refuses at compile time left to ATen with a warning
naming the node and the reason (the model still runs)."""
from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import graphc.torch as gt  # noqa: E402
from graphc.torch import table  # noqa: E402
from graphc.torch.lower import GraphcFallbackWarning  # noqa: E402
from graphc.tolerances import ORACLE  # noqa: E402

from support.torch_backend import assert_tensors_close, check_against_eager  # noqa: E402


def test_backend_by_name_in_a_fresh_process():
    code = ("import torch\n"
            "m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))\n"
            "x = torch.randn(3, 8)\n"
            "with torch.no_grad():\n"
            "    got, want = torch.compile(m, backend='graphc')(x), m(x)\n"
            "import sys\n"
            "print(float((got - want).abs().max() / want.abs().max()), 'graphc.torch.region' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    err, used = out.stdout.split()
    assert float(err) < 1e-4 and used == "True"


def test_explain_reports_coverage_fallback_and_kernels():
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    report = gt.explain(lambda x: torch.cumsum(m(x), 1), torch.randn(3, 8))
    assert report.fallback == {"aten::cumsum": 1}
    assert report.reasons["aten::cumsum"] == "no mapping"
    # addmm, relu, addmm and the two weight transposes in graphc; cumsum in torch
    assert report.aten_nodes == 6 and report.coverage == pytest.approx(5 / 6)
    assert report.regions == 1 and report.kernels >= 1 and report.partitions >= report.kernels
    assert report.compile_seconds > 0
    text = str(report)
    assert "83.3% of 6 ATen nodes" in text and "fallback aten::cumsum" in text


def test_a_region_graphc_refuses_runs_in_aten_with_a_warning(monkeypatch):
    """A converter building what graphc's checks refuse (here a reshape to a
    wrong shape, as a bad dtype or shape combination would): the region runs in ATen."""
    def bad_relu(b, n):
        x = b.value(n.args[0])
        out = b.out(n)
        return b.op("StaticReshape", [x], [out], shape=[7], special_zero=False)
    row = table.TABLE[torch.ops.aten.relu.default]
    monkeypatch.setitem(table.TABLE, torch.ops.aten.relu.default,
                        table.Row(row.targets, row.ops, bad_relu, None, row.dtypes))
    with pytest.warns(GraphcFallbackWarning, match=r"aten::relu \(node relu\): .*wrong shape|shape"):
        lowered = check_against_eager(lambda x: torch.relu(x) * 2, torch.randn(4, 6), table=ORACLE)
    # the refused node is left out and the regions formed again: the Multiply still runs in graphc
    assert lowered.fallback == {"aten::relu": 1} and lowered.coverage == 0.5


def test_parameters_are_constant_tensors_in_inference_only():
    import graphc
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8)
    graphc.set_constant_tensor_cache(1)
    try:
        inference = check_against_eager(m, x, table=ORACLE)
        inference_again = check_against_eager(m, x, table=ORACLE)   # (outputs of constant partitions kept)
    finally:
        graphc.set_constant_tensor_cache(0)
    assert inference.reports[0].constant_inputs == 4 and inference_again.coverage == 1.0
    training = check_against_eager(m, x, table=ORACLE, train=True, params=list(m.parameters()))
    assert sum(r.constant_inputs for r in training.reports) == 0



@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
def test_region_outputs_are_buffers_torch_allocated(dt, monkeypatch):
    """A region's outputs are tensors torch allocated and graphc wrote in place
    (no tensor made over numpy's memory: torch.from_numpy is never called once
    compiled), of the FX node's strides and dtype, and eager's values."""
    from graphc.torch.backend import REPORTS
    def fn(x):
        y = torch.relu(x)
        return y.permute(2, 0, 1), y.sum(2)
    x = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0)).to(dt)
    torch._dynamo.reset()
    first = len(REPORTS)
    compiled = torch.compile(fn, backend=gt.backend)
    with torch.no_grad():
        compiled(x)                              # (compiles)

        def no_numpy_memory(*args):
            raise AssertionError("a region output made over numpy's memory")
        monkeypatch.setattr(torch, "from_numpy", no_numpy_memory)
        got = compiled(x)
    report, = REPORTS[first:]
    assert report.regions == 1 and not report.fallback, report.fallback
    want = fn(x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and g.stride() == w.stride()
    assert_tensors_close(got, want, ORACLE)


def test_parameters_changed_in_place_are_read_again(monkeypatch):
    """In inference the backend turns graphc's constant tensor cache on (the user
    left it alone): what is computed from the parameters alone (autocast's bf16
    copies of the weights) is kept between calls, and computed again once a
    parameter changes in place."""
    from graphc.compiler import constant_cache
    from graphc.torch.region import GraphcRegion
    cache = constant_cache.CONSTANT_CACHE
    monkeypatch.setattr(cache, "configured", False)
    monkeypatch.setattr(cache, "_flag", False)
    monkeypatch.setattr(cache, "_capacity", {"cpu": 0})
    regions, made = [], GraphcRegion.__init__

    def recorded(self, *args, **kwargs):
        made(self, *args, **kwargs)
        regions.append(self)
    monkeypatch.setattr(GraphcRegion, "__init__", recorded)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4))
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(1))
    torch._dynamo.reset()
    compiled = torch.compile(m, backend=gt.backend)

    def bf16(f):   # (each call in an autocast region of its own: torch's autocast keeps
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):   # its weight casts per region)
            return f(x)
    first = bf16(compiled)
    assert cache.enabled() and regions
    kept = [cp for r in regions for cp in r.compiled.compiled if cp is not None and cp._constant_outputs is not None]
    assert kept, "no output computed from the parameters alone was kept"
    assert_tensors_close(bf16(compiled), bf16(m), ORACLE)
    with torch.no_grad():
        m[0].weight.add_(0.5)                    # in place: the kept bf16 copy is stale
    again = bf16(compiled)
    assert_tensors_close(again, bf16(m), ORACLE)
    assert not torch.equal(again, first)
