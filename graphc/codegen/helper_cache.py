"""Where numba caches graphc's own ``cache=True`` functions (the runtime helpers,
fastmath's, the small-float conversions, the trampolines, the cost model's
triad): in the kernel cache's version folder (``<cache>/<version>/helpers``,
checked as the kernel cache is: the current user's, private), never in the
``__pycache__`` of the installed package, which may be read-only or shared.
When the kernel cache folder cannot be used, a private temporary folder of
this process (removed at exit) holds them.

A numba cache locator placed first among numba's, taking only functions whose
source file is inside graphc (``graphc/`` and its ``passes/``); numba's own
locators keep every other function, the user's among them."""
from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from numba.core import caching

_ROOTS = tuple(str(Path(p).resolve()) + os.sep for p in (Path(__file__).parents[1],
                                                       Path(__file__).parents[2] / "passes"))
_temp: list[str] = []


def _inside_graphc(py_file: str) -> bool:
    try:
        return str(Path(py_file).resolve()).startswith(_ROOTS)
    except OSError:
        return False


def _private_temp() -> str:
    if not _temp:
        path = tempfile.mkdtemp(prefix="graphc-helpers-")   # (0700)
        atexit.register(shutil.rmtree, path, True)
        _temp.append(path)
    return _temp[0]


def helper_folder() -> str:
    """The folder numba caches graphc's helpers in."""
    from .cache_folder import cache_dir
    d = cache_dir()
    if d is not None:
        path = d / "helpers"
        try:
            path.mkdir(mode=0o700, exist_ok=True)
            return str(path)
        except OSError:
            pass
    return _private_temp()


class GraphcHelperLocator(caching._SourceFileBackedLocatorMixin, caching._CacheLocator):
    """numba's cache locator for functions defined in graphc's own files."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(helper_folder(), self.get_suitable_cache_subpath(py_file))

    def get_cache_path(self):
        return self._cache_path

    def ensure_cache_path(self):
        os.makedirs(self._cache_path, mode=0o700, exist_ok=True)
        super().ensure_cache_path()

    @classmethod
    def from_function(cls, py_func, py_file):
        if not _inside_graphc(py_file):
            return None
        self = super().from_function(py_func, py_file)
        if self is None:   # the folder failed: a private one of this process, never the package's
            self = cls.__new__(cls)
            self._py_file, self._lineno = py_file, py_func.__code__.co_firstlineno
            self._cache_path = os.path.join(_private_temp(), self.get_suitable_cache_subpath(py_file))
            self.ensure_cache_path()
        return self


def install() -> None:
    """Put the locator first among numba's (once)."""
    locators = caching.CacheImpl._locator_classes
    if GraphcHelperLocator not in locators:
        locators.insert(0, GraphcHelperLocator)
