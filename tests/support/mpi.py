"""Launching graphc under mpiexec (mpich from PyPI: the venv's own mpiexec)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MPIEXEC = shutil.which("mpiexec", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
needs_mpi = pytest.mark.skipif(MPIEXEC is None or importlib.util.find_spec("mpi4py") is None,
                               reason="needs mpi4py and mpiexec (pip install -e '.[mpi]')")


def run_mpiexec(n, argv, limit, env=None, what="") -> tuple[int, str, float]:
    """(exit status, stdout + stderr, seconds) of ``mpiexec -n n python argv...`` with
    NUMBA_NUM_THREADS=1 per rank; past ``limit`` seconds the whole process group
    is killed and the test fails (a rank left waiting)."""
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), **(env or {})}
    cmd = [MPIEXEC, "-n", str(n), sys.executable, *argv]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"mpiexec -n {n} {what} did not end in {limit} s: a rank is left waiting\n{out}")
    return proc.returncode, out, time.monotonic() - t0
