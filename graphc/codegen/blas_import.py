"""The import line a generated kernel's module gets when its IR calls ``gemm_f32``
(kept apart from blas.py so that building kernel source does not load numba's
BLAS bindings and scipy; the kernel module's import does, and sets the thread
limit once)."""
IMPORT = "from graphc.codegen.blas import gemm_f32, single_threaded_blas\nsingle_threaded_blas()"
