"""The kernel cache's tests share these (tests/codegen/test_kernel_cache*.py and
the ``root`` fixture of tests/codegen/conftest.py): an Add -> unary graph
compiled and checked against numpy, its kernel, the version folder of a cache
root, and graphc's warnings about cache folders; the ``root`` fixture (a test
module imports it by name)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from numba.core import config as numba_config

import graphc
from graphc import LogicalTensor, Op
from graphc.codegen import cache, cache_worker

from .graphs import graph_of

#: the repository (tests import graphc from it)
ROOT = Path(__file__).resolve().parents[2]

posix_only = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners and modes")


@pytest.fixture
def root(tmp_path, monkeypatch):
    """A kernel cache root (not yet created) that graphc uses for this test."""
    r = tmp_path / "cache"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    # cold kernels compile in this process (however many this test process
    # compiled before), unless a test asks for the worker
    monkeypatch.setattr(cache_worker, "COLD_IN_PROCESS", 1 << 30)
    # numba's files next to the kernels (where these tests look for them), even
    # when the user's NUMBA_CACHE_DIR sends them elsewhere
    monkeypatch.setattr(numba_config, "CACHE_DIR", "")
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)   # and in the compile worker
    cache.clear_memory()   # every kernel of the test comes from this folder
    return r


def child_env(root: Path) -> dict:
    """A fresh process's environment with its kernel cache in ``root`` (numba's
    files next to the kernels, where graphc checks them: no NUMBA_CACHE_DIR)."""
    env = dict(os.environ, GRAPHC_CACHE_DIR=str(root), PYTHONPATH=str(ROOT))
    env.pop("NUMBA_CACHE_DIR", None)
    return env


def add_then(shape, op="ReLU"):
    """Add -> ``op`` on two f32 inputs of ``shape`` (ids 0, 1; output 3)."""
    a, b = LogicalTensor(0, "f32", list(shape)), LogicalTensor(1, "f32", list(shape))
    c, d = LogicalTensor(2, "f32", [-1] * len(shape)), LogicalTensor(3, "f32", [-1] * len(shape))
    return graph_of(Op(0, "Add", [a, b], [c]), Op(1, op, [c], [d]))


def check(shape, op="ReLU"):
    """Compile and run Add -> op (ReLU or Abs) on ``shape``; return the CompiledGraph."""
    rng = np.random.default_rng(sum(shape))
    x, y = (rng.standard_normal(shape).astype(np.float32) for _ in range(2))
    cg = graphc.compile(add_then(shape, op))
    out = cg.run({0: x, 1: y})[3]
    want = np.maximum(x + y, 0) if op == "ReLU" else np.abs(x + y)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    return cg


def kernel_of(cg):
    """The numba dispatcher of the first compiled partition that has a kernel."""
    return next(cp.kernel for cp in cg.compiled if cp is not None and cp.kernel is not None)


def version_dir(root: Path) -> Path:
    """The one version folder graphc made under cache root ``root``."""
    (d,) = [p for p in root.iterdir() if p.is_dir()]
    return d


def cache_warnings(record):
    """graphc's warnings about a cache folder it does not use, of a warnings record."""
    return [w for w in record if "graphc kernel cache folder" in str(w.message)]
