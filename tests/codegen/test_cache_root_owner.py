"""Who may replace the kernel cache folder: a root that is a symbolic link of
another user, or a folder on the way to it that another user owns or that group
and others may write without the sticky bit, is refused with one warning and
kernels compile in memory (graphc.codegen.cache_folder.path_problem); numba's
own cache folder is checked the same way (graphc.codegen.cache_files.guard)."""
from __future__ import annotations

import os
import stat
import warnings

import pytest
from numba.core.caching import NullCache

from graphc.codegen import cache, cache_folder
from support.kernel_cache import cache_warnings, check, kernel_of, root, version_dir  # noqa: F401 - root: a fixture

OTHER = 4242   # a uid that is neither the current user's nor root's

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid") or os.name != "posix", reason="POSIX owners and modes")


def _give_away(path) -> None:
    """``path`` (a link itself, not its target) owned by uid OTHER: only root may
    do that, as the suite runs here; elsewhere the test is skipped."""
    if os.geteuid() != 0:
        pytest.skip("making a file another user's needs root")
    os.lchown(path, OTHER, OTHER)


def _refused(root, match: str, shape):
    """Compiling with cache root ``root`` warns once, matching ``match``, and writes
    no kernel anywhere under ``root``: compiled in memory."""
    cache_folder._dirs.pop(str(root), None)
    with pytest.warns(RuntimeWarning, match="graphc kernel cache folder") as record:
        cg = check(shape)
        check((shape[0], shape[1] + 1))
    (w,) = cache_warnings(record)
    assert str(root) in str(w.message) and match in str(w.message), str(w.message)
    assert isinstance(kernel_of(cg)._cache, NullCache)
    assert cache_folder.cache_dir() is None
    return cg


def _used(root, shape):
    cache_folder._dirs.pop(str(root), None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cg = check(shape)
    assert not isinstance(kernel_of(cg)._cache, NullCache)
    return version_dir(root)


def test_root_symlink_of_another_user_is_refused(root, tmp_path):
    target = tmp_path / "mine"
    target.mkdir(mode=0o700)
    root.symlink_to(target)
    _give_away(root)
    _refused(root, f"a symbolic link owned by uid {OTHER}", (4, 31))
    assert not list(target.rglob("k_*")) and not list(target.iterdir())   # nothing written through the link


def test_root_symlink_of_the_current_user_is_used(root, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    root.symlink_to(target)
    d = _used(root, (4, 33))
    assert list(d.glob("k_*.py")) and d.resolve().parent == target.resolve()


@pytest.mark.parametrize("where", ["root_inside", "created_inside"])
def test_folder_others_may_write_without_the_sticky_bit_is_refused(tmp_path, monkeypatch, root, where):
    """A world-writable folder of another user (no sticky bit) on the way: the
    root in it, or a root whose missing parents would be created in it."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    _give_away(shared)
    r = shared / "cache" if where == "root_inside" else shared / "a" / "cache"
    if where == "root_inside":
        r.mkdir(mode=0o700)
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    _refused(r, f"{shared} is a folder owned by uid {OTHER}", (4, 35))
    assert [p.name for p in shared.iterdir()] == (["cache"] if where == "root_inside" else [])   # nothing created
    assert not list(shared.rglob("k_*"))


def test_root_owned_world_writable_folder_needs_the_sticky_bit(tmp_path, monkeypatch, root):
    if os.geteuid() != 0:
        pytest.skip("a folder of root's needs root")
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    r = shared / "cache"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    _refused(r, "writable by group or others without the sticky bit", (4, 37))
    assert not r.exists()
    shared.chmod(0o777 | stat.S_ISVTX)            # as /tmp: only an entry's owner may replace it
    _used(r, (4, 39))


def test_sticky_folder_of_another_user_is_refused(tmp_path, monkeypatch, root):
    """Its owner may remove or rename any entry, sticky bit or not."""
    shared = tmp_path / "sticky"
    shared.mkdir()
    shared.chmod(0o777 | stat.S_ISVTX)
    _give_away(shared)
    r = shared / "cache"
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    _refused(r, f"owned by uid {OTHER}", (4, 41))


def test_parent_of_another_user_is_refused(tmp_path, monkeypatch, root):
    parent = tmp_path / "theirs"
    parent.mkdir(mode=0o755)
    r = parent / "cache"
    r.mkdir(mode=0o700)
    _give_away(parent)
    monkeypatch.setenv("GRAPHC_CACHE_DIR", str(r))
    _refused(r, f"{parent} is a folder owned by uid {OTHER}", (4, 43))


def test_symlink_leading_into_a_folder_of_another_user_is_refused(tmp_path, monkeypatch, root):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "cache").mkdir(mode=0o700)
    _give_away(theirs)
    root.symlink_to(theirs / "cache")              # the current user's link, into their folder
    _refused(root, f"{theirs} is a folder owned by uid {OTHER}", (4, 45))


def test_numbas_own_folder_is_checked_as_the_cache_folder_is(root, tmp_path, monkeypatch):
    """With NUMBA_CACHE_DIR in a folder another user owns, the kernel cache
    folder is used for modules but numba's disk cache is off for the kernels."""
    from numba.core import config as numba_config
    theirs = tmp_path / "numba_theirs"
    theirs.mkdir(mode=0o755)
    (theirs / "nb").mkdir(mode=0o700)
    _give_away(theirs)
    monkeypatch.setattr(numba_config, "CACHE_DIR", str(theirs / "nb"))
    cache.clear_memory()
    cg = check((4, 47))
    assert isinstance(kernel_of(cg)._cache, NullCache)
    assert not list((theirs / "nb").rglob("*.nb?"))


def test_path_problem_of_a_private_chain_is_none(tmp_path):
    p = tmp_path / "a" / "b"
    p.mkdir(parents=True, mode=0o700)
    assert cache_folder.path_problem(p) is None
