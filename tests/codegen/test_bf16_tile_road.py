"""Where bf16 GEMMs take MKL's road (a CPU with AMX-BF16: graphc.codegen.blas_import.
bf16_tile_gemm), graphc's own AVX512-BF16 tile is still a road (``GRAPHC_BF16_TILE=1``,
and every CPU with AVX512-BF16 but no AMX): the tests of kernels on it run here in
a process that takes it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphc.codegen import bf16_tile, blas

ROOT = Path(__file__).resolve().parents[2]

#: the tests that pin the tile road (skipped in this process where it is not the road)
TILE_TESTS = ["tests/codegen/test_bf16_tile.py",
              "tests/ops/conv/test_conv_compiled.py::test_forward_on_the_tile",
              "tests/ops/conv/test_conv_compiled.py::test_data_gradient_at_unit_strides_on_the_tile",
              "tests/ops/conv/test_conv_compiled.py::test_strided_data_gradient_on_the_tile",
              "tests/ops/conv/test_conv_compiled.py::test_f32_under_fpmath_bf16_takes_the_tile",
              "tests/ops/conv/test_conv_compiled.py::test_bf16_one_by_one_reads_src_in_place"]


@pytest.mark.skipif(blas.OWN_BF16, reason="the tile is the road here: its tests run in this suite")
@pytest.mark.skipif(not bf16_tile.bind(), reason="the CPU has no AVX512-BF16")
def test_the_tile_road_where_mkl_is_the_default():
    env = dict(os.environ, GRAPHC_BF16_TILE="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist",
                        "-rs", *TILE_TESTS], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout and "SKIPPED" not in r.stdout, r.stdout[-2000:]
