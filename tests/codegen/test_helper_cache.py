"""The kernel cache's folder honours XDG_CACHE_HOME, and numba's cache of
graphc's own cache=True helpers lives there, never inside the package."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import graphc
from graphc.codegen import cache_folder, helper_cache

PACKAGE = Path(graphc.__file__).resolve().parent
PASSES = Path(graphc.passes.__file__).resolve().parent if hasattr(graphc, "passes") else None


def test_cache_root_order(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("GRAPHC_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert cache_folder.cache_root() == tmp_path / "home" / ".cache" / "graphc"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_folder.cache_root() == tmp_path / "xdg" / "graphc"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")   # not absolute: ignored, as the specification says
    assert cache_folder.cache_root() == tmp_path / "home" / ".cache" / "graphc"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_folder.cache_root() == tmp_path / "mine"


def test_the_locator_takes_graphc_files_only():
    assert helper_cache._inside_graphc(str(PACKAGE / "codegen" / "runtime.py"))
    assert not helper_cache._inside_graphc(str(Path(os.__file__)))
    from numba.core import caching
    assert caching.CacheImpl._locator_classes[0] is helper_cache.GraphcHelperLocator


PROGRAM = """
import numpy as np, graphc
from graphc import Graph, LogicalTensor as L, Op
from graphc.codegen import runtime
g = Graph()
g.add_op(Op(0, "GELU", [L(0, "bf16", [8])], [L(1, "bf16", [8])]))
graphc.compile(g.finalize()).run({0: np.ones(8, graphc.DataType.bf16.np)})
print(runtime.f32_to_bits._cache._cache_path)
"""


def _numba_files(folder: Path) -> set[Path]:
    return {p for p in folder.rglob("*") if p.suffix in (".nbi", ".nbc")}


def test_helpers_cache_under_xdg_not_in_the_package(tmp_path):
    before = _numba_files(PACKAGE) | (_numba_files(PASSES) if PASSES else set())
    env = {k: v for k, v in os.environ.items() if k not in ("GRAPHC_CACHE_DIR", "NUMBA_CACHE_DIR")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    path = Path(done.stdout.strip().splitlines()[-1])
    assert path.is_relative_to(tmp_path / "xdg" / "graphc") and "helpers" in path.parts
    assert _numba_files(tmp_path / "xdg" / "graphc")
    after = _numba_files(PACKAGE) | (_numba_files(PASSES) if PASSES else set())
    assert after <= before   # nothing new written inside the package
