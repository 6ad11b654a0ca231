"""fpmath_mode: bf16/f16/tf32 let f32 MatMul and convolutions read their inputs
rounded to that precision (in the reference and the compiled kernels alike);
strict and any keep f32; other ops and non-f32 inputs are untouched."""
import ml_dtypes
import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.builder import GraphBuilder
from graphc.tolerances import assert_close
from support.compiled import check_compiled

rng = np.random.default_rng(7)


def matmul_graph(mode, dtype="f32"):
    b = GraphBuilder(fpmath_mode=mode)
    x, w = b.tensor(dtype, [16, 40]), b.tensor(dtype, [40, 24])
    b.op("MatMul", [x, w], out=[(dtype, [16, 24])])
    return b.finalize()


def conv_graph(mode):
    b = GraphBuilder(fpmath_mode=mode)
    x, w = b.tensor("f32", [1, 6, 6, 8]), b.tensor("f32", [3, 3, 8, 5])
    b.op("Convolution", [x, w], out=[("f32", [-1, -1, -1, -1])],
         attrs=dict(strides=(1, 1), dilations=(1, 1), pads_begin=(1, 1), pads_end=(1, 1)))
    return b.finalize()


def feeds(g):
    return {tid: rng.standard_normal(g.tensors[tid].shape).astype(np.float32) for tid in g.input_ports}


@pytest.mark.parametrize("mode,narrow", [("bf16", ml_dtypes.bfloat16), ("f16", np.float16)])
def test_matmul_reads_inputs_rounded(mode, narrow):
    g = matmul_graph(mode)
    ins = feeds(g)
    a, w = (ins[t].astype(narrow).astype(np.float64) for t in g.input_ports)
    want = a @ w                                         # independent: numpy's own rounding of the inputs
    got = reference.run(g, ins)[g.output_ports[0]]
    assert_close(got, want, "f32", what=f"{mode} reference")
    strict = reference.run(matmul_graph("strict"), dict(zip(matmul_graph("strict").input_ports, ins.values())))
    assert not np.array_equal(got, next(iter(strict.values())))   # results do differ from strict
    check_compiled(g, ins, what=mode)


@pytest.mark.parametrize("mode", ["tf32", "any", "strict"])
def test_other_modes(mode):
    g = matmul_graph(mode)
    ins = feeds(g)
    a, w = (ins[t].astype(np.float64) for t in g.input_ports)
    got = reference.run(g, ins)[g.output_ports[0]]
    if mode == "tf32":   # 10 mantissa bits: within 2^-11 relative per input
        assert not np.allclose(got, a @ w, rtol=1e-6, atol=0)
        np.testing.assert_allclose(got, a @ w, rtol=0, atol=2 * 2.0 ** -11 * (np.abs(a) @ np.abs(w)).max())
    else:
        assert_close(got, a @ w, "f32", what=mode)
    check_compiled(g, ins, what=mode)
    if mode != "strict":
        assert ("f32_to_bits" in graphc.compile(g).source) == (mode == "tf32")


def test_conv_reads_inputs_rounded():
    g = conv_graph("bf16")
    ins = feeds(g)
    rounded = {t: v.astype(ml_dtypes.bfloat16).astype(np.float32) for t, v in ins.items()}
    strict = conv_graph("strict")
    want = reference.run(strict, dict(zip(strict.input_ports, rounded.values())))[strict.output_ports[0]]
    assert_close(reference.run(g, ins)[g.output_ports[0]], want, "f32", what="conv bf16")
    check_compiled(g, ins, what="conv bf16")


def test_bf16_inputs_are_not_rounded_to_f16():
    g = matmul_graph("f16", "bf16")
    assert g.ops[0].fpmath_mode == "f16"
    assert "f32_to_f16" not in graphc.compile(g).source.split("def kernel")[1]
    check_compiled(g)
