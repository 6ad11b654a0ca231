"""GRAPHC_VERBOSE lines, the graphc logger and CompiledPartition.get_impl_info."""
from __future__ import annotations

import logging
import os
import subprocess
import sys

import numpy as np
import pytest

import graphc
from graphc import Graph, LogicalTensor as L, Op, verbose
from graphc.codegen.blas import BACKEND
from graphc.compiler import compiled_partition

from support.sdpa import sdpa_graph

#: fields of a compile or exec line, after graphc_verbose,<event>
PARTITION_FIELDS = ["graph", "partition", "pattern", "kernel", "impl", "inputs", "outputs", "ms"]

PROGRAM = """
import numpy as np, graphc
from graphc import Graph, LogicalTensor as L, Op
g = Graph()
g.add_op(Op(0, "MatMul", [L(0, "f32", [8, 16]), L(1, "f32", [16, 4])], [L(2, "f32", [8, 4])]))
g.add_op(Op(1, "ReLU", [L(2, "f32", [8, 4])], [L(3, "f32", [8, 4])]))
g.add_op(Op(2, "ReduceSum", [L(3, "f32", [8, 4])], [L(4, "f32", [8])], attrs={"axes": [1]}))
cg = graphc.compile(g.finalize())
x = {0: np.ones((8, 16), np.float32), 1: np.ones((16, 4), np.float32)}
for _ in range(3):
    out = cg.run(x)
assert np.allclose(out[4], 64.0)
print("impl", *[cp.get_impl_info() for cp in cg.compiled], sep="|")
"""


def _run(level: str | None, tmp_path, program: str = PROGRAM):
    env = {k: v for k, v in os.environ.items() if k != "GRAPHC_VERBOSE"}
    if level is not None:
        env["GRAPHC_VERBOSE"] = level
    env["GRAPHC_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout, [ln for ln in done.stderr.splitlines() if ln.startswith("graphc_verbose,")]


def _partition_lines(lines, event):
    out = []
    for ln in lines:
        fields = ln.split(",")
        if fields[1] == event:
            assert len(fields) == 2 + len(PARTITION_FIELDS), ln
            out.append(dict(zip(PARTITION_FIELDS, fields[2:])))
    return out


def test_verbose_1_one_line_per_compile_and_per_execution(tmp_path):
    stdout, lines = _run("1", tmp_path)
    impls = stdout.split("impl|")[1].strip().split("|")
    compiles, execs = _partition_lines(lines, "compile"), _partition_lines(lines, "exec")
    assert [c["partition"] for c in compiles] == ["0", "1"]
    assert [e["partition"] for e in execs] == ["0", "1"] * 3
    assert {c["graph"] for c in compiles + execs} == {compiles[0]["graph"]}
    assert [c["impl"] for c in compiles] == impls
    assert compiles[0]["pattern"] == "matmul_post_ops" and compiles[1]["pattern"] == "-"
    assert compiles[0]["kernel"] == "MatMul+ReLU" and compiles[1]["kernel"] == "ReduceSum"
    assert compiles[0]["inputs"] == "0:f32:8x16:dense 1:f32:16x4:dense"
    assert compiles[0]["outputs"] == "3:f32:8x4:dense" and execs[1]["outputs"] == "4:f32:8:dense"
    assert all(float(x["ms"]) >= 0 for x in compiles + execs)
    assert not [ln for ln in lines if ln.split(",")[1] in ("cache", "worker", "fallback")]   # level 2 only


def test_verbose_2_tells_the_cache(tmp_path):
    _, cold = _run("2", tmp_path)
    _, warm = _run("2", tmp_path)   # the same cache folder: machine code loaded from disk
    cache = lambda lines: [tuple(ln.split(",")[2:4]) for ln in lines if ln.split(",")[1] == "cache"]  # noqa: E731
    assert ("miss", "compiled") in cache(cold) and ("hit", "disk") not in cache(cold)
    assert ("hit", "disk") in cache(warm) and not [c for c in cache(warm) if c[0] == "miss"]
    assert len(_partition_lines(warm, "compile")) == 2


def test_unset_prints_nothing(tmp_path):
    _, lines = _run(None, tmp_path)
    assert lines == []


def test_reference_fallback_is_told_at_level_2(tmp_path):
    program = """
import warnings, numpy as np, graphc
from graphc import Graph, LogicalTensor as L, Op
from graphc.compiler import build
build.can_compile = lambda p: False
import graphc.partition as part
part.Partition.is_supported = lambda self: False
g = Graph()
g.add_op(Op(0, "ReLU", [L(0, "f32", [4])], [L(1, "f32", [4])]))
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    graphc.compile(g.finalize(), fallback="reference").run({0: np.ones(4, np.float32)})
"""
    _, lines = _run("2", tmp_path, program)
    fallback = [ln.split(",") for ln in lines if ln.split(",")[1] == "fallback"]
    assert len(fallback) == 1 and fallback[0][3:5] == ["0", "reference"] and "ReLU" in fallback[0][5]
    assert _partition_lines(lines, "exec")[0]["impl"] == "reference:ReLU"


@pytest.fixture
def logged():
    """Records of the graphc logger at DEBUG, the verbose level 1 without stderr."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler, log = Keep(), logging.getLogger("graphc")
    old_level = log.level
    log.addHandler(handler)
    log.setLevel(logging.DEBUG)
    verbose.set_verbose(1, stderr=False)
    try:
        yield records
    finally:
        verbose.set_verbose(0)
        log.removeHandler(handler)
        log.setLevel(old_level)


def _two_op_graph():
    g = Graph()
    g.add_op(Op(0, "Add", [L(0, "f32", [4, 4]), L(1, "f32", [4, 4])], [L(2, "f32", [4, 4])]))
    g.add_op(Op(1, "SoftMax", [L(2, "f32", [4, 4])], [L(3, "f32", [4, 4])], attrs={"axis": 1}))
    return g.finalize()


def test_lines_go_to_the_logger(logged, capsys):
    cg = graphc.compile(_two_op_graph())
    x = np.ones((4, 4), np.float32)
    cg.run({0: x, 1: x})
    messages = [r.getMessage() for r in logged if r.levelno == logging.INFO]
    assert len([m for m in messages if m.split(",")[1] == "exec"]) == len(cg.compiled)
    assert len([m for m in messages if m.split(",")[1] == "compile"]) == len(cg.compiled)
    assert all(r.name == "graphc" for r in logged)
    assert "graphc_verbose" not in capsys.readouterr().err   # stderr=False: the logger alone


def test_execute_is_the_plain_method_when_off():
    assert verbose.get_verbose() == 0
    assert graphc.CompiledPartition.execute is compiled_partition._plain_execute
    assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger("graphc").handlers)


# ------------------------------------------------------------------ impl info
def test_impl_info_matmul_names_the_gemm():
    g = Graph()
    g.add_op(Op(0, "MatMul", [L(0, "f32", [64, 128]), L(1, "f32", [128, 96])], [L(2, "f32", [64, 96])]))
    g.add_op(Op(1, "GELU", [L(2, "f32", [64, 96])], [L(3, "f32", [64, 96])]))
    (cp,) = graphc.compile(g.finalize()).compiled
    assert cp.get_impl_info().startswith(f"anchor:MatMul+GELU/{BACKEND}_sgemm")


@pytest.mark.parametrize("kernel, channels, road", [((3, 3), 32, "winograd"), ((3, 3), 4, "shifted_gemm"),
                                                     ((1, 1), 32, "channels_first")])
def test_impl_info_convolution_names_its_road(kernel, channels, road):
    g = Graph()
    g.add_op(Op(0, "Convolution", [L(0, "f32", [1, channels, 12, 12]), L(1, "f32", [channels, channels, *kernel])],
                [L(2, "f32", [-1, -1, -1, -1])],
                attrs=dict(strides=[1, 1], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1], groups=1,
                           data_format="NCX", weights_format="OIX")))
    (cp,) = graphc.compile(g.finalize()).compiled
    roads = cp.get_impl_info().split("/")
    assert roads[0] == "op:Convolution" and road in roads and f"{BACKEND}_sgemm" in roads


@pytest.mark.parametrize("fmt, road", [("NXC", "im2col"), ("NCX", "channels_first")])
def test_impl_info_strided_convolution_road(fmt, road):
    g = Graph()
    x, w = ([1, 12, 12, 8], [3, 3, 8, 8]) if fmt == "NXC" else ([1, 8, 12, 12], [8, 8, 3, 3])
    g.add_op(Op(0, "Convolution", [L(0, "f32", x), L(1, "f32", w)],
                [L(2, "f32", [-1, -1, -1, -1])],
                attrs=dict(strides=[2, 2], pads_begin=[0, 0], pads_end=[0, 0], dilations=[1, 1], groups=1,
                           data_format=fmt, weights_format="XIO" if fmt == "NXC" else "OIX")))
    (cp,) = graphc.compile(g.finalize()).compiled
    assert road in cp.get_impl_info().split("/")


def test_impl_info_sdpa_is_one_flash_kernel():
    g, _ = sdpa_graph(sq=16, skv=32)
    (cp,) = graphc.compile(g).compiled
    head, *roads = cp.get_impl_info().split("/")
    assert head.startswith("attention:") and "flash" in roads


def test_impl_info_of_a_view():
    g = Graph()
    g.add_op(Op(0, "StaticReshape", [L(0, "f32", [2, 6])], [L(1, "f32", [3, 4])],
                attrs={"shape": [3, 4], "special_zero": False}))
    (cp,) = graphc.compile(g.finalize()).compiled
    assert cp.get_impl_info() == "view:StaticReshape"
