"""Kernel generation: source for concrete shapes, strides and dtypes, compiled by Numba.

Importing this package sets numba's CPU target to prefer 512-bit vectors on a
CPU with AVX-512: LLVM's tuning for the AVX-512 Xeons (skylake-avx512 to
sapphirerapids, and this machine's VM) prefers 256-bit vectors, and graphc's
row kernels (SoftMax, LayerNorm over 4096x1024, f32 and bf16) run 6-30% faster
with zmm registers (measured side by side, each in its own process).  The
choice is numba's ``CPU_FEATURES`` (the host's features plus
``-prefer-256-bit``), set only when the user set neither NUMBA_CPU_NAME nor
NUMBA_CPU_FEATURES and numba has not built its CPU code generator yet; numba's
caches key compiled code by those features.  ``GRAPHC_VECTOR_BITS=256`` in the
environment keeps LLVM's choice (to compare the two).
"""
import os


def _prefer_512_bit_vectors() -> None:
    if os.environ.get("GRAPHC_VECTOR_BITS") == "256":
        return
    from numba.core import config
    from numba.core.codegen import get_host_cpu_features
    if config.CPU_NAME is not None or config.CPU_FEATURES is not None:
        return
    features = get_host_cpu_features()
    if "+avx512f" not in features.split(",") or "prefer-256-bit" in features:
        return
    from numba.core.registry import cpu_target
    if "_toplevel_target_context" in vars(cpu_target):
        return          # numba's code generator exists already, with its features
    config.CPU_FEATURES = features + ",-prefer-256-bit"


_prefer_512_bit_vectors()

from .helper_cache import install as _install_helper_cache  # noqa: E402

_install_helper_cache()   # (before any module with numba's cache=True functions is imported)

from . import helpers  # noqa: E402,F401  (declares the kernel helpers to the kernel IR)
