"""Each contender in a process of its own: numba's and torch's thread pools starve
each other in one process, so a benchmark script runs itself again per case
(``--child ...``) and reads the JSON value the child prints last."""
from __future__ import annotations

import json
import subprocess
import sys
import time


def run_child(script: str, *args: str):
    """The JSON value on the last line ``python script *args`` prints; exits with
    the child's stderr when it fails."""
    p = subprocess.run([sys.executable, script, *args], capture_output=True, text=True)
    if p.returncode:
        raise SystemExit(f"{' '.join(args)} failed:\n{p.stderr}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def load_average() -> str:
    """This machine's 1-minute load average, as /proc/loadavg holds it."""
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def call_times(fn, repeat: int, warmup: int = 2) -> list[float]:
    """The times (seconds) of ``repeat`` calls of ``fn`` after ``warmup`` untimed ones, sorted."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)


def fastest(fn, repeat: int) -> float:
    """The fastest of ``repeat`` calls of ``fn`` (seconds), after two warm-up calls."""
    return call_times(fn, repeat)[0]
