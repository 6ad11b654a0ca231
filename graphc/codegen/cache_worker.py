"""Compiling kernels in a worker process (see graphc.codegen.cache).

numba never frees what LLVM keeps of a kernel it compiled (its execution
engine and LLVM context hold about 0.6 MB per small kernel for the life of
the process, whether or not its dispatcher is collected); a kernel loaded as
machine code from the on-disk cache costs about 0.07 MB.  So after the first
few kernels compiled here, a process with a usable cache folder has kernels
compiled into the cache by a worker process (replaced every few dozen
kernels), and loads them from there.  The worker runs graphc.codegen.cache's
``_serve``, which answers requests through :func:`serve`.

The worker runs none of the caller's folder: Python starts isolated (``-I``: no
working directory, user site folder or PYTHON* variables on its import path),
in the cache folder (the current user's, private) rather than the caller's
working directory, with the parent's absolute import path given explicitly."""
from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
import warnings
from pathlib import Path

from .. import verbose
from .cache_folder import cache_dir

#: kernels compiled in this process before the worker takes over
COLD_IN_PROCESS = 32
#: kernels a worker compiles before it is replaced (its memory grows as this one's would)
WORKER_KERNELS = 48

_cold = 0
_worker = None
_worker_lock = threading.Lock()
_worker_broken = False
_in_worker = False


def worker_timeout() -> float:
    """Seconds to wait for the compile worker's answer (``GRAPHC_WORKER_TIMEOUT``,
    default 600): past it the worker is killed and kernels compile in process."""
    try:
        return max(1.0, float(os.environ.get("GRAPHC_WORKER_TIMEOUT", "600")))
    except ValueError:
        return 600.0


#: the worker's program: its import path is the parent's (argv), set before any import
_PROGRAM = "import sys; sys.path[:] = sys.argv[1:]; from graphc.codegen.cache import _serve; _serve()"


def import_path() -> list[str]:
    """The folders the worker imports from: the one graphc is imported from, then the
    parent's ``sys.path`` without relative entries (``''``, the script or ``-c``
    caller's working directory: the worker runs elsewhere, and nothing there may
    shadow numba or graphc)."""
    top = str(Path(__file__).resolve().parents[2])   # the folder graphc is imported from
    path = [top]
    for p in sys.path:
        if isinstance(p, str) and p and os.path.isabs(p) and p not in path:
            path.append(p)
    return path


def worker_command() -> list[str]:
    """The worker's command line: Python isolated (``-I``: neither the working
    directory, nor the user's site folder, nor PYTHON* variables), the parent's
    import path given explicitly."""
    return [sys.executable, "-I", "-c", _PROGRAM, *import_path()]


class _Worker:
    def __init__(self, root: Path):
        import subprocess
        env = dict(os.environ, GRAPHC_CACHE_DIR=str(root))
        self.root = str(root)
        self.pid = os.getpid()
        self.kernels = 0
        # run in the cache folder (checked: the current user's, private), not the caller's
        self.proc = subprocess.Popen(worker_command(), cwd=self.root,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, close_fds=True)
        verbose.emit(2, "worker", "start", self.proc.pid)

    def send(self, source: str, entry: str, sig: tuple) -> None:
        """Ask for one kernel (its answer: :meth:`answer`)."""
        msg = pickle.dumps((source, entry, sig), protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(len(msg).to_bytes(8, "little") + msg)
        self.proc.stdin.flush()
        self.kernels += 1

    def answer(self) -> bool:
        """The answer to the kernel asked for (True: compiled into the cache)."""
        return self.proc.stdout.readline() == b"ok\n"

    def compile(self, source: str, entry: str, sig: tuple) -> bool:
        self.send(source, entry, sig)
        import select
        ready, _, _ = select.select([self.proc.stdout], [], [], worker_timeout())
        if not ready:   # a hung worker: the caller closes it and compiles here from now on
            raise TimeoutError("the kernel compile worker did not answer")
        return self.answer()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            with contextlib.suppress(Exception):
                self.proc.kill()
                self.proc.wait(timeout=5)
        with contextlib.suppress(Exception):
            self.proc.stdout.close()


def _close_worker() -> None:
    global _worker
    with _worker_lock:
        if _worker is not None and _worker.pid == os.getpid():
            _worker.close()
        _worker = None


def compile_elsewhere(fn, sig: tuple) -> bool:
    """Have a worker process compile ``fn`` for ``sig`` into the on-disk cache
    (True: asked and done; the caller loads it from there)."""
    global _cold, _worker, _worker_broken
    if _in_worker or _worker_broken or not getattr(getattr(fn, "_cache", None), "_graphc_checked", False):
        return False
    ns = fn.py_func.__globals__
    source, entry = ns.get("__graphc_source__"), fn.py_func.__name__
    _cold += 1
    if source is None or _cold <= COLD_IN_PROCESS:
        return False
    d = cache_dir()
    if d is None:
        return False
    with _worker_lock:
        if _worker is not None and _worker.pid != os.getpid():
            _worker = None      # a forked child: that worker is its parent's
        try:
            if _worker is not None and (_worker.root != str(d.parent) or _worker.kernels >= WORKER_KERNELS
                                        or _worker.proc.poll() is not None):
                _worker.close()
                _worker = None
            if _worker is None:
                _worker = _Worker(d.parent)
                _at_exit()
            return _worker.compile(source, entry, sig)
        except BaseException as e:  # noqa: BLE001 - no worker (cannot start, died): compile here from now on
            if _worker is not None:   # (an answer may be pending: never ask this worker again)
                _worker.close()
                _worker = None
            if not isinstance(e, Exception):
                raise
            verbose.emit(2, "worker", "broken", f"{type(e).__name__}: {e}; kernels compile in this process")
            _worker_broken = True
            return False


def cores() -> int:
    """The cores this process may run on (the compile workers' count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def compile_in_parallel(fns: list) -> list[bool]:
    """Compile the kernels ``fns`` ((dispatcher, signature) pairs from
    graphc.codegen.cache.load_kernel) into the on-disk cache at once, on worker
    processes of their own, one per core; [compiled there] per kernel (the
    caller loads those from the cache and compiles the rest itself).  The
    workers end with the batch."""
    done = [False] * len(fns)
    d = cache_dir()
    jobs = [(i, (fn.py_func.__globals__.get("__graphc_source__"), fn.py_func.__name__, sig))
            for i, (fn, sig) in enumerate(fns)
            if getattr(getattr(fn, "_cache", None), "_graphc_checked", False)]
    jobs = [(i, job) for i, job in jobs if job[0] is not None]
    if _in_worker or _worker_broken or d is None or not jobs:
        return done
    import select
    workers: list[_Worker] = []
    busy: dict = {}   # worker -> the index of the kernel it compiles
    try:
        workers = [_Worker(d.parent) for _ in range(min(len(jobs), cores()))]
        while jobs or busy:
            for k, w in enumerate(workers):
                if w not in busy and jobs:
                    if w.kernels >= WORKER_KERNELS:   # (its memory grows as this process's would)
                        w.close()
                        w = workers[k] = _Worker(d.parent)
                    i, job = jobs.pop(0)
                    w.send(*job)
                    busy[w] = i
            ready, _, _ = select.select([w.proc.stdout for w in busy], [], [], worker_timeout())
            if not ready:
                raise TimeoutError("a kernel compile worker did not answer")
            for w in [w for w in busy if w.proc.stdout in ready]:
                done[busy.pop(w)] = w.answer()
    except Exception as e:  # noqa: BLE001 - the caller compiles what is not done
        verbose.emit(2, "worker", "broken", f"{type(e).__name__}: {e}; kernels compile in this process")
    finally:
        for w in workers:
            w.close()
    return done


_exit_hook: list = []


def _at_exit() -> None:
    if not _exit_hook:
        import atexit
        atexit.register(_close_worker)
        _exit_hook.append(_close_worker)




def serve(handle) -> None:
    """The worker: compile (source, entry, signature) requests from stdin into
    the on-disk cache, each by ``handle(source, entry, sig)`` (True: compiled
    there); answer ok or error on stdout."""
    global _in_worker
    _in_worker = True
    warnings.simplefilter("ignore")
    inp = sys.stdin.buffer
    out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())     # whatever prints cannot garble the answers
    while True:
        head = inp.read(8)
        if len(head) < 8:
            return
        msg = inp.read(int.from_bytes(head, "little"))
        try:
            ok = handle(*pickle.loads(msg))
        except BaseException:  # noqa: BLE001 - the asking process compiles it itself
            ok = False
        out.write(b"ok\n" if ok else b"error\n")
        out.flush()
