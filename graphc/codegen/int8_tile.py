"""graphc's own u8 x s8 -> s32 GEMM tile on AVX512-VNNI (``vpdpbusd``), for CPUs
whose BLAS has no fast int8 GEMM (MKL's cblas_gemm_s8u8s32 takes a generic path
on AMD's Zen 5: about 50 GOP/s a core, where torch's ``_int_mm`` runs oneDNN's
VNNI kernels at about 900).

The tile is LLVM IR (the ``llvm.x86.avx512.vpdpbusd.512`` intrinsic) compiled
once per process by llvmlite for the host CPU and bound to the symbol
``graphc_int8_tile`` (with B's packing, ``graphc_int8_pack``), as
graphc.codegen.bf16_tile is; kernels reach it through
graphc.codegen.blas.gemm_u8s8 and graphc.codegen.int8_gemm by that name.

``graphc_int8_tile(a, b, c, kq, lda, ldc, acc)``: C[8][32] = A[8][4 kq] @
B[4 kq][32] in s32 (``acc`` nonzero: C += A @ B) from packed operands: A u8
row-major with rows ``lda`` bytes apart (four k a 32-bit word, broadcast to
every lane), B s8 as kq rows of 32 (k, k+1, k+2, k+3) quads, one per column
(``vpdpbusd`` multiplies each u8 of A by the s8 of B beside it and adds the
four products of a lane into its s32 accumulator, wrapping, never
saturating: ``vpdpbusds`` is the saturating one); C's rows are ``ldc`` s32
apart.  The sums are exact while they fit in s32 (callers check that:
graphc.codegen.gemm_int8.S32_LIMIT).
"""
from __future__ import annotations

import functools

from .llvm_tile import bind_ir, host_has

#: rows and columns of the tile (16 zmm accumulators: 8 rows x 2 x 16 lanes)
MR, NR = 8, 32
SYMBOL = "graphc_int8_tile"
#: B's packing: four rows of k interleaved into (k, .., k+3) quads, 32 columns a
#: panel, the columns' sums added up on the way
PACK = "graphc_int8_pack"
#: B stored transposed (a column's k contiguous): a panel's quads gathered from its 32 rows
PACK_T = "graphc_int8_pack_t"
#: the sums of rows of u8 (``vpsadbw``: 64 bytes a step), the compensation of B's zero point
ROW_SUMS = "graphc_u8_row_sums"
_DOT = "llvm.x86.avx512.vpdpbusd.512"


@functools.cache
def available() -> bool:
    """The host CPU has AVX512-VNNI (and ``GRAPHC_INT8_TILE`` is not ``0``)."""
    return host_has("avx512vnni", "GRAPHC_INT8_TILE")


def tile_ir() -> str:
    """The tile's LLVM IR: a loop over the kq quads of k, the 16 accumulators
    carried in registers, stored (or added into C) once at the end."""
    acc = [f"r{r}h{h}" for r in range(MR) for h in range(2)]
    lines = [f"declare <16 x i32> @{_DOT}(<16 x i32>, <64 x i8>, <64 x i8>)",
             f"define void @{SYMBOL}(ptr %a, ptr %b, ptr %c, i64 %kq, i64 %lda, i64 %ldc, i64 %acc) {{",
             "entry:", "  %some = icmp sgt i64 %kq, 0",
             "  br i1 %some, label %loop, label %done", "loop:",
             "  %p = phi i64 [0, %entry], [%pn, %loop]"]
    lines += [f"  %{x} = phi <16 x i32> [zeroinitializer, %entry], [%n{x}, %loop]" for x in acc]
    lines += ["  %bo = shl i64 %p, 7", "  %bp0 = getelementptr i8, ptr %b, i64 %bo",
              "  %bp1 = getelementptr i8, ptr %bp0, i64 64",
              "  %b0 = load <64 x i8>, ptr %bp0, align 1", "  %b1 = load <64 x i8>, ptr %bp1, align 1",
              "  %ak = shl i64 %p, 2"]
    for r in range(MR):
        lines += [f"  %ar{r} = mul i64 %lda, {r}", f"  %ao{r} = add i64 %ar{r}, %ak",
                  f"  %ap{r} = getelementptr i8, ptr %a, i64 %ao{r}", f"  %aw{r} = load i32, ptr %ap{r}, align 1",
                  f"  %ai{r} = insertelement <16 x i32> poison, i32 %aw{r}, i64 0",
                  f"  %as{r} = shufflevector <16 x i32> %ai{r}, <16 x i32> poison, <16 x i32> zeroinitializer",
                  f"  %ab{r} = bitcast <16 x i32> %as{r} to <64 x i8>"]
        for h in range(2):
            x = acc[2 * r + h]
            lines.append(f"  %n{x} = call <16 x i32> @{_DOT}(<16 x i32> %{x}, <64 x i8> %ab{r}, <64 x i8> %b{h})")
    lines += ["  %pn = add i64 %p, 1", "  %more = icmp slt i64 %pn, %kq", "  br i1 %more, label %loop, label %done",
              "done:"]
    lines += [f"  %f{x} = phi <16 x i32> [zeroinitializer, %entry], [%n{x}, %loop]" for x in acc]
    lines += ["  %add = icmp ne i64 %acc, 0"]
    for r in range(MR):
        lines.append(f"  %co{r} = mul i64 %ldc, {r}")
        for h in range(2):
            x = acc[2 * r + h]
            lines += [f"  %cq{r}_{h} = add i64 %co{r}, {16 * h}",
                      f"  %cp{r}_{h} = getelementptr i32, ptr %c, i64 %cq{r}_{h}",
                      f"  %old{x} = load <16 x i32>, ptr %cp{r}_{h}, align 4",
                      f"  %sum{x} = add <16 x i32> %old{x}, %f{x}",
                      f"  %out{x} = select i1 %add, <16 x i32> %sum{x}, <16 x i32> %f{x}",
                      f"  store <16 x i32> %out{x}, ptr %cp{r}_{h}, align 4"]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def pack_ir() -> str:
    """``graphc_int8_pack(b, ldb, out, npan, pstride, sums)``: for each of npan
    panels jp, the 128 bytes ``out[jp * pstride:][:128]`` = the four rows
    ``b[e * ldb + 32 jp + j]`` (e < 4) interleaved, column j's four bytes side by
    side (j < 32), and the four rows' values (s8) added into the s32
    ``sums[32 jp + j]``: four vector loads and one shuffle a panel."""
    cat = ", ".join(f"i32 {i}" for i in range(64))
    order = ", ".join(f"i32 {32 * (i % 4) + i // 4}" for i in range(128))
    lines = [f"define void @{PACK}(ptr %b, i64 %ldb, ptr %out, i64 %npan, i64 %pstride, ptr %sums) {{",
             "entry:", "  %some = icmp sgt i64 %npan, 0", "  br i1 %some, label %loop, label %done", "loop:",
             "  %j = phi i64 [0, %entry], [%jn, %loop]", "  %src = shl i64 %j, 5"]
    for e in range(4):
        lines += [f"  %o{e} = mul i64 %ldb, {e}", f"  %s{e} = add i64 %o{e}, %src",
                  f"  %p{e} = getelementptr i8, ptr %b, i64 %s{e}", f"  %v{e} = load <32 x i8>, ptr %p{e}, align 1",
                  f"  %w{e} = sext <32 x i8> %v{e} to <32 x i32>"]
    lines += [f"  %lo = shufflevector <32 x i8> %v0, <32 x i8> %v1, <64 x i32> <{cat}>",
              f"  %hi = shufflevector <32 x i8> %v2, <32 x i8> %v3, <64 x i32> <{cat}>",
              f"  %iv = shufflevector <64 x i8> %lo, <64 x i8> %hi, <128 x i32> <{order}>",
              "  %dst = mul i64 %j, %pstride", "  %po = getelementptr i8, ptr %out, i64 %dst",
              "  store <128 x i8> %iv, ptr %po, align 1",
              "  %t01 = add <32 x i32> %w0, %w1", "  %t23 = add <32 x i32> %w2, %w3", "  %t = add <32 x i32> %t01, %t23",
              "  %ps = getelementptr i32, ptr %sums, i64 %src", "  %old = load <32 x i32>, ptr %ps, align 4",
              "  %new = add <32 x i32> %old, %t", "  store <32 x i32> %new, ptr %ps, align 4",
              "  %jn = add i64 %j, 1", "  %more = icmp slt i64 %jn, %npan",
              "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}"]
    return "\n".join(lines)


def pack_t_ir() -> str:
    """``graphc_int8_pack_t(b, ldb, out, kq, sums)``: one panel of B stored
    transposed (column jj's k at ``b[jj * ldb:]``, jj < 32): for each of kq
    quads p, the 128 bytes ``out[128 p:]`` = the 32 columns' bytes 4p..4p+3,
    two gathers of 16 words; the columns' sums (s8) added into the s32
    ``sums[:32]`` (``vpdpbusd`` of the words by ones)."""
    lanes = ", ".join(f"i64 {i}" for i in range(16))
    upper = ", ".join(f"i64 {i + 16}" for i in range(16))
    ones = ", ".join(["i8 1"] * 64)
    gather = "llvm.masked.gather.v16i32.v16p0"
    lines = [f"declare <16 x i32> @{gather}(<16 x ptr>, i32, <16 x i1>, <16 x i32>)",
             f"define void @{PACK_T}(ptr %b, i64 %ldb, ptr %out, i64 %kq, ptr %sums) {{",
             "entry:", "  %l0 = insertelement <16 x i64> poison, i64 %ldb, i64 0",
             "  %ld = shufflevector <16 x i64> %l0, <16 x i64> poison, <16 x i32> zeroinitializer",
             f"  %rows0 = mul <16 x i64> %ld, <{lanes}>", f"  %rows1 = mul <16 x i64> %ld, <{upper}>",
             "  %some = icmp sgt i64 %kq, 0", "  br i1 %some, label %loop, label %done", "loop:",
             "  %p = phi i64 [0, %entry], [%pn, %loop]",
             "  %s0 = phi <16 x i32> [zeroinitializer, %entry], [%s0n, %loop]",
             "  %s1 = phi <16 x i32> [zeroinitializer, %entry], [%s1n, %loop]",
             "  %ko = shl i64 %p, 2", "  %k0 = insertelement <16 x i64> poison, i64 %ko, i64 0",
             "  %kv = shufflevector <16 x i64> %k0, <16 x i64> poison, <16 x i32> zeroinitializer",
             "  %dst = shl i64 %p, 7"]
    for h in range(2):
        lines += [f"  %o{h} = add <16 x i64> %rows{h}, %kv", f"  %ptr{h} = getelementptr i8, ptr %b, <16 x i64> %o{h}",
                  f"  %g{h} = call <16 x i32> @{gather}(<16 x ptr> %ptr{h}, i32 1, <16 x i1> splat (i1 true), "
                  "<16 x i32> poison)",
                  f"  %d{h} = add i64 %dst, {64 * h}", f"  %po{h} = getelementptr i8, ptr %out, i64 %d{h}",
                  f"  store <16 x i32> %g{h}, ptr %po{h}, align 1", f"  %gb{h} = bitcast <16 x i32> %g{h} to <64 x i8>",
                  f"  %s{h}n = call <16 x i32> @{_DOT}(<16 x i32> %s{h}, <64 x i8> <{ones}>, <64 x i8> %gb{h})"]
    lines += ["  %pn = add i64 %p, 1", "  %more = icmp slt i64 %pn, %kq", "  br i1 %more, label %loop, label %done",
              "done:"]
    lines += [f"  %f{h} = phi <16 x i32> [zeroinitializer, %entry], [%s{h}n, %loop]" for h in range(2)]
    for h in range(2):
        lines += [f"  %ps{h} = getelementptr i32, ptr %sums, i64 {16 * h}", f"  %old{h} = load <16 x i32>, ptr %ps{h}, align 4",
                  f"  %new{h} = add <16 x i32> %old{h}, %f{h}", f"  store <16 x i32> %new{h}, ptr %ps{h}, align 4"]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def row_sums_ir() -> str:
    """``graphc_u8_row_sums(a, lda, m, k, out)``: ``out[i]`` (f64) = the sum of the
    k bytes (u8) of row i of ``a`` (rows ``lda`` apart), i < m: ``vpsadbw``
    against zero adds 64 bytes into eight 64-bit lanes a step, the last k % 64
    bytes one at a time."""
    return "\n".join([
        "declare <8 x i64> @llvm.x86.avx512.psad.bw.512(<64 x i8>, <64 x i8>)",
        "declare i64 @llvm.vector.reduce.add.v8i64(<8 x i64>)",
        f"define void @{ROW_SUMS}(ptr %a, i64 %lda, i64 %m, i64 %k, ptr %out) {{",
        "entry:", "  %kv = and i64 %k, -64", "  %some = icmp sgt i64 %m, 0", "  br i1 %some, label %row, label %done",
        "row:", "  %i = phi i64 [0, %entry], [%in, %rowend]", "  %base = mul i64 %i, %lda",
        "  %rp = getelementptr i8, ptr %a, i64 %base", "  %hasv = icmp sgt i64 %kv, 0",
        "  br i1 %hasv, label %vec, label %vecend",
        "vec:", "  %q = phi i64 [0, %row], [%qn, %vec]", "  %acc = phi <8 x i64> [zeroinitializer, %row], [%accn, %vec]",
        "  %vp = getelementptr i8, ptr %rp, i64 %q", "  %v = load <64 x i8>, ptr %vp, align 1",
        "  %s = call <8 x i64> @llvm.x86.avx512.psad.bw.512(<64 x i8> %v, <64 x i8> zeroinitializer)",
        "  %accn = add <8 x i64> %acc, %s", "  %qn = add i64 %q, 64", "  %more = icmp slt i64 %qn, %kv",
        "  br i1 %more, label %vec, label %vecend",
        "vecend:", "  %vacc = phi <8 x i64> [zeroinitializer, %row], [%accn, %vec]",
        "  %vs = call i64 @llvm.vector.reduce.add.v8i64(<8 x i64> %vacc)", "  %hast = icmp slt i64 %kv, %k",
        "  br i1 %hast, label %tail, label %rowend",
        "tail:", "  %t = phi i64 [%kv, %vecend], [%tn, %tail]", "  %ts = phi i64 [%vs, %vecend], [%tsn, %tail]",
        "  %tp = getelementptr i8, ptr %rp, i64 %t", "  %tb = load i8, ptr %tp, align 1", "  %tz = zext i8 %tb to i64",
        "  %tsn = add i64 %ts, %tz", "  %tn = add i64 %t, 1", "  %tmore = icmp slt i64 %tn, %k",
        "  br i1 %tmore, label %tail, label %rowend",
        "rowend:", "  %sum = phi i64 [%vs, %vecend], [%tsn, %tail]", "  %f = sitofp i64 %sum to double",
        "  %op = getelementptr double, ptr %out, i64 %i", "  store double %f, ptr %op, align 8",
        "  %in = add i64 %i, 1", "  %rmore = icmp slt i64 %in, %m", "  br i1 %rmore, label %row, label %done",
        "done:", "  ret void", "}"])


_bound = False


def bind() -> bool:
    """Compile the tile for the host CPU and bind ``graphc_int8_tile`` to it, once;
    False where the CPU has no AVX512-VNNI."""
    global _bound
    if not _bound and available():
        bind_ir("\n".join((tile_ir(), pack_ir(), pack_t_ir(), row_sums_ir())), (SYMBOL, PACK, PACK_T, ROW_SUMS))
        _bound = True
    return _bound


__all__ = ["MR", "NR", "SYMBOL", "PACK", "PACK_T", "ROW_SUMS", "available", "tile_ir", "pack_ir", "pack_t_ir",
           "row_sums_ir", "bind"]
