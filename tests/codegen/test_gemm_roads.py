"""bf16 and int8 GEMMs take one road per process (graphc.codegen.blas_import):
graphc's AMX tiles where the CPU has AMX, else its AVX-512 tiles (AVX512-BF16,
AVX512-VNNI), else MKL's GEMM; switches pick the others (``GRAPHC_AMX=0``,
``GRAPHC_BF16_TILE=1``).  The tests pinned to a road that is not this
process's run here, in a process that takes it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphc.codegen import bf16_tile, blas
from graphc.codegen.blas_import import bf16_amx_gemm, mkl_bf16_on_amx

ROOT = Path(__file__).resolve().parents[2]

#: the tests that pin the AVX512-BF16 tile's road
BF16_TILE_TESTS = ["tests/codegen/test_bf16_tile.py",
                   "tests/ops/conv/test_conv_compiled.py::test_forward_on_the_tile",
                   "tests/ops/conv/test_conv_compiled.py::test_data_gradient_at_unit_strides_on_the_tile",
                   "tests/ops/conv/test_conv_compiled.py::test_strided_data_gradient_on_the_tile",
                   "tests/ops/conv/test_conv_compiled.py::test_f32_under_fpmath_bf16_takes_the_tile",
                   "tests/ops/conv/test_conv_compiled.py::test_bf16_one_by_one_reads_src_in_place"]
#: the tests that pin MKL's bf16 GEMM (on AMX)
MKL_TESTS = ["tests/ops/matmul/test_matmul_compiled.py::test_bf16_gemm_tiles_of_l2_under_an_epilogue_on_mkls_road"]

#: (env, does the road differ from this process's and exist here, the tests)
ROADS = {
    "AVX-512 tiles where AMX's are the road": (
        {"GRAPHC_AMX": "0", "GRAPHC_BF16_TILE": "1"}, lambda: bf16_amx_gemm(),
        BF16_TILE_TESTS + ["tests/codegen/test_int8_tile.py", "tests/ops/conv/test_conv_int8_compiled.py"]),
    "the AVX512-BF16 tile where MKL's GEMM is the road": (
        {"GRAPHC_BF16_TILE": "1"}, lambda: not blas.OWN_BF16 and bf16_tile.bind(), BF16_TILE_TESTS),
    "MKL's GEMM where AMX's tiles are the road": (
        {"GRAPHC_AMX": "0"}, lambda: bf16_amx_gemm() and mkl_bf16_on_amx(), MKL_TESTS),
}


@pytest.mark.parametrize("road", list(ROADS))
def test_a_road_that_is_not_this_process_s(road):
    env, other, tests = ROADS[road]
    if not other():
        pytest.skip("this process takes the road, or the CPU has no such road")
    env = dict(os.environ, **env)
    env.pop("PYTEST_XDIST_WORKER", None)
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-rs", *tests],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and "skipped" not in r.stdout and "SKIPPED" not in r.stdout, r.stdout[-2000:]
