"""graphc's own bf16 GEMM tile on AVX512-BF16 (``vdpbf16ps``), for CPUs whose
BLAS does not multiply bf16 natively (MKL on AMD's Zen 4/5 widens bf16 to f32
and runs its f32 code: 90 GFLOP/s a core here, the same as its sgemm; this
tile runs at about 500, as oneDNN's bf16 kernels inside torch do).

The tile is LLVM IR (vectors, the ``llvm.x86.avx512bf16.dpbf16ps.512``
intrinsic) compiled once per process by llvmlite for the host CPU and bound to
the symbol ``graphc_bf16_tile``; kernels reach it through
graphc.codegen.blas.gemm_bf16, by that name (never an address baked into
code, so they stay cacheable on disk).

``graphc_bf16_tile(a, b, c, kp)``: C[8][32] = A[8][2 kp] @ B[2 kp][32] in f32
from packed operands: A row-major with rows of 2 kp bf16 (a pair of k per
32-bit word, broadcast to every lane), B as kp rows of 32 (k, k+1) pairs
(``vdpbf16ps`` sums a pair's two products into each f32 lane).  Denormal bf16
inputs count as zero (the instruction's rule), as they do on AMX.
"""
from __future__ import annotations

import functools
import os

#: rows and columns of the tile (16 zmm accumulators: 8 rows x 2 x 16 lanes)
MR, NR = 8, 32
SYMBOL = "graphc_bf16_tile"


@functools.cache
def available() -> bool:
    """The host CPU has AVX512-BF16 (and ``GRAPHC_BF16_TILE`` is not ``0``)."""
    if os.environ.get("GRAPHC_BF16_TILE", "1") == "0":
        return False
    from llvmlite import binding as llb
    try:
        return bool(llb.get_host_cpu_features().get("avx512bf16"))
    except RuntimeError:
        return False


def tile_ir() -> str:
    """The tile's LLVM IR: a loop over the kp pairs of k, the 16 accumulators
    carried in registers, stored once at the end."""
    acc = [f"r{r}h{h}" for r in range(MR) for h in range(2)]
    lines = ["declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)",
             f"define void @{SYMBOL}(ptr %a, ptr %b, ptr %c, i64 %kp) {{",
             "entry:", "  %lda = shl i64 %kp, 1", "  %some = icmp sgt i64 %kp, 0",
             "  br i1 %some, label %loop, label %done", "loop:",
             "  %p = phi i64 [0, %entry], [%pn, %loop]"]
    lines += [f"  %{x} = phi <16 x float> [zeroinitializer, %entry], [%n{x}, %loop]" for x in acc]
    lines += ["  %bo = shl i64 %p, 6", "  %bp0 = getelementptr i16, ptr %b, i64 %bo",
              "  %bp1 = getelementptr i16, ptr %bp0, i64 32",
              "  %b0 = load <32 x bfloat>, ptr %bp0, align 2", "  %b1 = load <32 x bfloat>, ptr %bp1, align 2",
              "  %ak = shl i64 %p, 1"]
    for r in range(MR):
        lines += [f"  %ar{r} = mul i64 %lda, {r}", f"  %ao{r} = add i64 %ar{r}, %ak",
                  f"  %ap{r} = getelementptr i16, ptr %a, i64 %ao{r}", f"  %aw{r} = load i32, ptr %ap{r}, align 2",
                  f"  %ai{r} = insertelement <16 x i32> poison, i32 %aw{r}, i64 0",
                  f"  %as{r} = shufflevector <16 x i32> %ai{r}, <16 x i32> poison, <16 x i32> zeroinitializer",
                  f"  %ab{r} = bitcast <16 x i32> %as{r} to <32 x bfloat>"]
        for h in range(2):
            x = acc[2 * r + h]
            lines.append(f"  %n{x} = call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %{x}, "
                         f"<32 x bfloat> %ab{r}, <32 x bfloat> %b{h})")
    lines += ["  %pn = add i64 %p, 1", "  %more = icmp slt i64 %pn, %kp", "  br i1 %more, label %loop, label %done",
              "done:"]
    lines += [f"  %f{x} = phi <16 x float> [zeroinitializer, %entry], [%n{x}, %loop]" for x in acc]
    for r in range(MR):
        for h in range(2):
            lines += [f"  %cp{r}_{h} = getelementptr float, ptr %c, i64 {r * NR + 16 * h}",
                      f"  store <16 x float> %f{acc[2 * r + h]}, ptr %cp{r}_{h}, align 4"]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


_engine = None


def bind() -> bool:
    """Compile the tile for the host CPU and bind ``graphc_bf16_tile`` to it, once;
    False where the CPU has no AVX512-BF16."""
    global _engine
    if _engine is not None:
        return True
    if not available():
        return False
    from llvmlite import binding as llb
    llb.initialize_native_target()
    llb.initialize_native_asmprinter()
    module = llb.parse_assembly(tile_ir())
    module.verify()
    tm = llb.Target.from_default_triple().create_target_machine(
        cpu=llb.get_host_cpu_name(), features=llb.get_host_cpu_features().flatten(), opt=3)
    builder = llb.create_pass_builder(tm, llb.create_pipeline_tuning_options(3))
    builder.getModulePassManager().run(module, builder)
    engine = llb.create_mcjit_compiler(module, tm)
    engine.finalize_object()
    llb.add_symbol(SYMBOL, engine.get_function_address(SYMBOL))
    _engine = engine   # (kept for the life of the process: kernels call into its code)
    return True


__all__ = ["MR", "NR", "SYMBOL", "available", "tile_ir", "bind"]
