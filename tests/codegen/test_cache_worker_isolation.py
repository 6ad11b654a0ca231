"""The compile worker runs none of the caller's folder: Python isolated (-I), its
working directory the cache folder, its import path the parent's given
explicitly (graphc.codegen.cache_worker)."""
from __future__ import annotations

import os
import sys

import pytest

from graphc.codegen import cache_worker
from support.kernel_cache import check, kernel_of, root  # noqa: F401 - root: a fixture

PLANTED = ("numba", "numpy", "graphc", "pickle", "select")


@pytest.fixture
def planted(tmp_path, monkeypatch):
    """The caller's working directory holds modules named as what the worker imports,
    each of which leaves a marker file when it runs; returns the markers' folder."""
    cwd, marks = tmp_path / "cwd", tmp_path / "marks"
    cwd.mkdir()
    marks.mkdir()
    for name in PLANTED:
        (cwd / f"{name}.py").write_text(f"open({str(marks / name)!r}, 'w').write('ran')\n")
    monkeypatch.chdir(cwd)
    return marks


@pytest.fixture
def through_worker(monkeypatch):
    monkeypatch.setattr(cache_worker, "COLD_IN_PROCESS", 0)
    monkeypatch.setattr(cache_worker, "_worker_broken", False)
    yield
    cache_worker._close_worker()


def test_planted_modules_in_the_working_directory_do_not_run(root, planted, through_worker):
    cg = check((3, 29), op="Abs")          # a cold kernel: compiled by the worker
    assert sorted(os.listdir(planted)) == []
    assert not cache_worker._worker_broken
    assert sum(kernel_of(cg)._cache_hits.values()) == 1   # compiled there, loaded here


def test_worker_command_is_isolated(root, planted):
    cmd = cache_worker.worker_command()
    assert cmd[:3] == [sys.executable, "-I", "-c"]
    path = cmd[4:]
    assert all(os.path.isabs(p) for p in path)
    assert os.getcwd() not in path and "" not in path
    assert path[0] == str(cache_worker.Path(cache_worker.__file__).resolve().parents[2])


def test_relative_entries_of_the_parents_path_are_left_out(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "path", ["", ".", "rel/dir", str(tmp_path), *sys.path])
    path = cache_worker.import_path()
    assert str(tmp_path) in path
    assert not {"", ".", "rel/dir"} & set(path)
    assert len(path) == len(set(path))
