"""The kernel cache's folder (see graphc.codegen.cache): ``$GRAPHC_CACHE_DIR`` or
``$XDG_CACHE_HOME/graphc`` or ``~/.cache/graphc``, with one version subfolder per graphc cache format/numba/
python version and per version of the code linked into cached kernels.

The folder, its version subfolder, their ``__pycache__`` and any parent graphc
creates must be directories of the current user that neither group nor others
may write to (numba's index and data files are pickles, which run code when
loaded); no one but the current user and root may replace the folder or one on
the way to it (:func:`path_problem`: the folder may be a symbolic link of the
current user or root, the folders leading to it must be theirs and not writable
by group or others without the sticky bit).  A folder that cannot be used (refused, not a directory, unwritable,
read-only) gives one warning per folder, and kernels are then compiled in
memory only.  Version folders of other builds no process used for
max_age_days() are removed."""
from __future__ import annotations

import importlib.util
import hashlib
import os
import re
import shutil
import stat
import sys
import time
import warnings
from pathlib import Path

import numba

from . import helpers
from .int8_tile import available as int8_tile_available
from .blas_import import bf16_amx_gemm, bf16_tile_gemm, dnnl_path, int8_amx_gemm, mkl_path
from .cpu import has_f16c

#: bumped when the layout or format of the files in the cache folder changes
_FORMAT = 2

_dirs: dict[str, Path | None] = {}               # cache root -> its checked version folder (None: refused)
_warned: set[str] = set()
_runtime_tag: str | None = None


class Refused(Exception):
    """A cache folder graphc will not use (the reason is the message)."""


def _linked_files() -> list[Path]:
    """The files whose code is compiled into what this cache holds, read rather than
    imported (launch starts numba's threads, blas loads the BLAS library): the
    modules kernels import helpers from (graphc.codegen.helpers: the runtime
    helpers, fastmath's, which kernels inline, the small-float conversions, the
    BLAS binding of kernels that multiply, and its library, see _runtime_digest),
    then parallel kernels' thread launch and the trampolines' call and unboxing,
    and graphc's own tiles with the GEMMs driving them (which blas.py imports), the
    calls of the helpers kernels call by symbol and the typing of helper calls."""
    here = Path(__file__).parent
    files = [Path(importlib.util.find_spec(m).origin) for m in helpers.linked_modules()]
    return files + [here / "launch.py", here / "entry.py", here / "bf16_tile.py", here / "bf16_gemm.py",
                    here / "int8_tile.py", here / "int8_gemm.py", here / "llvm_tile.py", here / "amx_tile.py",
                    here / "blas_abi.py",
                    here / "exported.py", here / "helper_jit.py"]


def _runtime_digest() -> str:
    global _runtime_tag
    if _runtime_tag is None:
        h = hashlib.sha256()
        for path in _linked_files():
            h.update(path.read_bytes())
        h.update(b"dnnl" if dnnl_path() else b"mkl" if mkl_path() else b"openblas")
        h.update(b"+bf16tile" if bf16_tile_gemm() else b"")   # (gemm_bf16's road, fixed when compiled)
        h.update(b"+int8tile" if int8_tile_available() else b"")   # (gemm_u8s8's road, the same)
        h.update(b"+amxbf16" if bf16_amx_gemm() else b"")     # (which tile those roads call)
        h.update(b"+amxint8" if int8_amx_gemm() else b"")
        h.update(b"+f16c" if has_f16c() else b"")   # (the f16 conversions' road, fixed when compiled)
        _runtime_tag = h.hexdigest()[:12]
    return _runtime_tag


def cache_root() -> Path:
    """``$GRAPHC_CACHE_DIR``, else ``graphc`` in ``$XDG_CACHE_HOME`` (an absolute
    path, as the XDG base directory specification wants; a relative one is
    ignored), else ``~/.cache/graphc``."""
    base = os.environ.get("GRAPHC_CACHE_DIR")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME", "")
        home = xdg if os.path.isabs(xdg) else os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(home, "graphc")
    return Path(os.path.abspath(base))


def euid() -> int | None:
    return os.geteuid() if hasattr(os, "geteuid") else None


def _warn_once(folder, why: str) -> None:
    folder = str(folder)
    if folder in _warned:
        return
    _warned.add(folder)
    warnings.warn(f"graphc kernel cache folder {folder} not used ({why}); "
                  "compiling kernels in memory only", RuntimeWarning, stacklevel=4)


def dir_problem(path) -> str | None:
    """Why ``path`` may not hold the cache (None: it may)."""
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    uid = euid()
    if uid is not None and st.st_uid != uid:
        return f"owned by uid {st.st_uid}, not by the current user (uid {uid})"
    if os.name == "posix" and st.st_mode & 0o022:
        return f"writable by group or others (mode {oct(st.st_mode & 0o777)})"
    return None


def _owner_problem(path, st: os.stat_result, what: str) -> str | None:
    uid = euid()
    if uid is None or st.st_uid in (uid, 0):
        return None
    return f"{path} is {what} owned by uid {st.st_uid}, neither the current user (uid {uid}) nor root"


def path_problem(path) -> str | None:
    """Why another user could replace the existing folder ``path`` or a folder on
    the way to it (None: no one but the current user and root can): every
    component of the path as given and of the path it resolves to, symbolic
    links included, must be the current user's or root's, and no folder on the
    way may be writable by group or others unless it has the sticky bit (as
    /tmp has: then only an entry's owner may rename or remove it)."""
    if os.name != "posix":
        return None
    p = Path(os.path.abspath(path))
    for chain in (p, Path(os.path.realpath(p))):
        for a in (chain, *chain.parents):
            st = os.lstat(a)
            if stat.S_ISLNK(st.st_mode):   # where it leads: the resolved chain
                why = _owner_problem(a, st, "a symbolic link")
            else:
                why = _owner_problem(a, st, "a folder" if stat.S_ISDIR(st.st_mode) else "a file")
                if why is None and stat.S_ISDIR(st.st_mode) and st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
                    why = (f"{a} is writable by group or others without the sticky bit "
                           f"(mode {oct(st.st_mode & 0o7777)}): another user could replace what it holds")
            if why is not None:
                return why
    return None


def _mkdir(path: Path) -> None:
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def _prepare(root: Path) -> Path:
    """The version folder under ``root``, created (0700) and checked; raises
    Refused or OSError."""
    created = []
    p = root
    while not os.path.lexists(p):
        created.append(p)
        if p.parent == p:
            break
        p = p.parent
    why = path_problem(p)   # the root, or the folder its missing parents are created in
    if why is not None:
        raise Refused(why)
    for p in reversed(created):
        _mkdir(p)
    tag = f"c{_FORMAT}-py{sys.version_info[0]}{sys.version_info[1]}-numba{numba.__version__}-rt{_runtime_digest()}"
    d = root / tag
    for p in (*reversed(created), root, d, d / "__pycache__"):
        if p == d or p == d / "__pycache__":
            _mkdir(p)
        if p != root and os.path.islink(p):   # (only the root may be a link, checked above)
            raise Refused(f"{p} is a symbolic link")
        why = dir_problem(p)
        if why is not None:
            raise Refused(f"{p} is {why}")
        if not os.access(p, os.W_OK | os.X_OK):
            raise Refused(f"{p} is not writable")
    return d


#: version folders of any graphc build: c<format>-py<ver>-numba<ver>-rt<digest> (older
#: builds left out the c<format>- part)
_VERSION_FOLDER = re.compile(r"(c\d+-)?py\d+-numba[0-9A-Za-z.+_-]+-rt[0-9a-f]{12}")
#: days a version folder no build used may stay (GRAPHC_CACHE_MAX_AGE_DAYS; 0: forever)
DEFAULT_MAX_AGE_DAYS = 30


def max_age_days() -> float:
    raw = os.environ.get("GRAPHC_CACHE_MAX_AGE_DAYS")
    try:
        return float(raw) if raw else DEFAULT_MAX_AGE_DAYS
    except ValueError:
        return DEFAULT_MAX_AGE_DAYS


def _prune(root: Path, current: Path) -> None:
    """Marks ``current`` used now and removes the version folders of other graphc
    builds (another runtime, numba or Python) that no process has used for
    max_age_days(): each runtime-helper change starts a new folder, and nothing
    else would ever remove the old ones.  Only this user's folders that group and
    others cannot write, named as graphc names them; never a failure of its own."""
    try:
        os.utime(current)
        days = max_age_days()
        if days <= 0:
            return
        cutoff = time.time() - days * 86400
        with os.scandir(root) as entries:
            for e in entries:
                if e.name == current.name or not _VERSION_FOLDER.fullmatch(e.name):
                    continue
                if not e.is_dir(follow_symlinks=False) or dir_problem(e.path) is not None:
                    continue
                if e.stat(follow_symlinks=False).st_mtime < cutoff:
                    shutil.rmtree(e.path, ignore_errors=True)
    except OSError:
        pass


def cache_dir() -> Path | None:
    """The checked version folder of the current cache root, or None (after one
    warning) when it cannot be used: kernels are then compiled in memory."""
    root = cache_root()
    key = str(root)
    if key in _dirs:
        return _dirs[key]
    try:
        d = _prepare(root)
        _prune(root, d)
    except Refused as e:
        _warn_once(root, str(e))
        d = None
    except OSError as e:
        _warn_once(root, f"{type(e).__name__}: {e.strerror or e}")
        d = None
    _dirs[key] = d
    return d


def refuse(d: Path, e: BaseException) -> None:
    """The folder failed in use (a write, a read): in memory from now on."""
    root = d.parent
    _dirs[str(root)] = None
    _warn_once(root, f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}")
