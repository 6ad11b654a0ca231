"""The kernel cache's files (see graphc.codegen.cache): read only when trusted,
written privately, numba's index and data files checked.

Every module, index and data file is created 0600 by graphc; one that is not a
regular file of the current user, or is writable by group/others, is never
loaded (a module file is rewritten, an index or data file removed: a miss).
Index and data files carry a SHA-256 of their payload: a corrupt or truncated
file is removed and treated as a miss."""
from __future__ import annotations

import hashlib
import os
import pickle
import stat
import uuid

from . import cache_folder as folder


def _untrusted(st: os.stat_result) -> bool:
    uid = folder.euid()
    return (not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid)
            or (os.name == "posix" and bool(st.st_mode & 0o022)))


def remove(path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def read_trusted(path) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of the current user that
    group/others cannot write; None if missing; an untrusted file is removed
    and None returned."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _NONBLOCK | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    except OSError:            # a symlink (ELOOP), unreadable...
        remove(path)
        return None
    with os.fdopen(fd, "rb") as f:
        if _untrusted(os.fstat(fd)):
            bad = True
        else:
            bad = False
            data = f.read()
    if bad:
        remove(path)
        return None
    return data


def write_private(path, data: bytes) -> None:
    """Write ``path`` atomically, as a 0600 file of the current user."""
    tmp = f"{path}.tmp.{os.getpid()}.{uuid.uuid4().hex[:12]}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | getattr(os, "O_BINARY", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        remove(tmp)
        raise


_MAGIC = b"graphc-nb1\n"


def read_checked(path) -> bytes | None:
    """The payload of a file written by :func:`write_checked`; None if missing,
    untrusted or corrupt (removed)."""
    data = read_trusted(path)
    if data is None:
        return None
    n = len(_MAGIC)
    payload = data[n + 32:]
    if data[:n] != _MAGIC or len(data) < n + 32 or hashlib.sha256(payload).digest() != data[n:n + 32]:
        remove(path)
        return None
    return payload


def write_checked(path, payload: bytes) -> None:
    write_private(path, _MAGIC + hashlib.sha256(payload).digest() + payload)


def guard(disp) -> None:
    """Make a dispatcher's numba on-disk cache load only checked files of the
    current user and treat any failure as a miss; or, when that cannot be done
    (numba internals not as expected, a folder graphc would refuse: numba's own,
    such as one under ``$NUMBA_CACHE_DIR``, is checked as the kernel cache
    folder is, with the folders leading to it), turn its disk cache off."""
    from numba.core.caching import NullCache
    cache = getattr(disp, "_cache", None)
    if cache is None or isinstance(cache, NullCache):
        return
    try:
        cf = cache._cache_file
        needed = (cf._index_path, cf._source_stamp, cf._version, cf._data_path, cf._dump,
                  cache._load_overload, cache._save_overload)
        if folder.dir_problem(cache._cache_path) is not None or folder.path_problem(cache._cache_path) is not None:
            raise folder.Refused(cache._cache_path)
    except Exception:  # noqa: BLE001 - anything unexpected: no disk cache for it
        disp._cache = NullCache()
        return
    index_path, data_path, dump = cf._index_path, cf._data_path, cf._dump
    load_overload, save_overload = cache._load_overload, cache._save_overload

    def load_index():
        payload = read_checked(index_path)
        if payload is None:
            return {}
        try:
            version, stamp, overloads = pickle.loads(payload)
            if not (isinstance(overloads, dict)
                    and all(isinstance(v, str) and os.sep not in v and v != ".." for v in overloads.values())):
                raise ValueError("bad index")
        except Exception:  # noqa: BLE001 - corrupt: a miss
            remove(index_path)
            return {}
        if version != cf._version or stamp != cf._source_stamp:
            return {}
        return overloads

    def save_index(overloads):
        write_checked(index_path, dump((cf._version, cf._source_stamp, overloads)))

    def load_data(name):
        path = data_path(name)
        payload = read_checked(path)
        if payload is None:
            raise OSError(f"no usable cache data in {path}")   # IndexDataCacheFile.load: a miss
        try:
            return pickle.loads(payload)
        except Exception as e:  # noqa: BLE001 - corrupt: a miss
            remove(path)
            raise OSError(f"corrupt cache data in {path}") from e

    def save_data(name, data):
        write_checked(data_path(name), dump(data))

    def checked_load_overload(sig, target_context):
        try:
            return load_overload(sig, target_context)
        except Exception:  # noqa: BLE001 - data that does not rebuild: a miss, recompiled and saved again
            remove(index_path)
            return None

    def checked_save_overload(sig, data):
        try:
            save_overload(sig, data)
        except Exception:  # noqa: BLE001 - the kernel is compiled; only the next process misses it
            pass

    cache._graphc_checked = True
    cf._load_index, cf._save_index = load_index, save_index
    cf._load_data, cf._save_data = load_data, save_data
    cache._load_overload, cache._save_overload = checked_load_overload, checked_save_overload
