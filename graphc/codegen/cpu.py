"""What the CPU kernels are compiled for can do (numba compiles for this
machine's CPU unless NUMBA_CPU_NAME says otherwise)."""
from __future__ import annotations

import functools


@functools.cache
def has_f16c() -> bool:
    """F16C: f16 <-> f32 conversions in hardware (vcvtph2ps / vcvtps2ph), what
    LLVM's fpext and fptrunc between half and float become; without it LLVM
    would call a runtime library numba's JIT does not link."""
    from llvmlite import binding
    from numba.core import config
    if config.CPU_NAME not in (None, "host"):
        return False
    try:
        return bool(binding.get_host_cpu_features().get("f16c"))
    except RuntimeError:
        return False
