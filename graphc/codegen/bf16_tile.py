"""graphc's own bf16 GEMM tile on AVX512-BF16 (``vdpbf16ps``), for CPUs whose
BLAS does not multiply bf16 natively (MKL on AMD's Zen 4/5 widens bf16 to f32
and runs its f32 code: 90 GFLOP/s a core here, the same as its sgemm; this
tile runs at about 500, as oneDNN's bf16 kernels inside torch do).  Where the
CPU has AMX-BF16, graphc's AMX tile (graphc.codegen.amx_tile) takes its place
in the same drivers, from the same packed B (graphc.codegen.blas_import.
bf16_amx_gemm); this module's packs serve both.

The tile is LLVM IR (vectors, the ``llvm.x86.avx512bf16.dpbf16ps.512``
intrinsic) compiled once per process by llvmlite for the host CPU and bound to
the symbol ``graphc_bf16_tile`` (with B's packing, ``graphc_bf16_pack``, and a
transposed B's, ``graphc_bf16_pack_t``, and a transpose of 16 x 16 blocks of
16-bit values, ``graphc_u16_transpose``: channels-first src into the rows of
positions the convolutions' tiles read);
kernels reach it through graphc.codegen.blas.gemm_bf16 (graphc.codegen.bf16_gemm),
by that name (never an address baked into
code, so they stay cacheable on disk).

``graphc_bf16_tile(a, b, c, kp, lda, ldc, acc)``: C[8][32] = A[8][2 kp] @
B[2 kp][32] in f32 (``acc`` nonzero: C += A @ B) from packed operands: A
row-major with rows ``lda`` bf16 apart (a pair of k per 32-bit word,
broadcast to every lane), B as kp rows of 32 (k, k+1) pairs (``vdpbf16ps``
sums a pair's two products into each f32 lane); C's rows are ``ldc`` floats
apart.  Denormal bf16 inputs count as zero (the instruction's rule), as they
do on AMX.
"""
from __future__ import annotations

import functools

from .llvm_tile import bind_ir, host_has

#: rows and columns of the tile (16 zmm accumulators: 8 rows x 2 x 16 lanes)
MR, NR = 8, 32
SYMBOL = "graphc_bf16_tile"
#: B's packing: two rows of k interleaved into (k, k+1) pairs, 32 columns a panel
PACK = "graphc_bf16_pack"
#: a transposed B's packing: a panel's 32 columns, each a row of k in memory, gathered a pair at a time
PACK_T = "graphc_bf16_pack_t"
#: 16 x 16 blocks of 16-bit values transposed in registers (channels-first src into rows of positions)
TRANSPOSE = "graphc_u16_transpose"


@functools.cache
def available() -> bool:
    """The host CPU has AVX512-BF16 (and ``GRAPHC_BF16_TILE`` is not ``0``)."""
    return host_has("avx512bf16", "GRAPHC_BF16_TILE")


def tile_ir() -> str:
    """The tile's LLVM IR: a loop over the kp pairs of k, the 16 accumulators
    carried in registers, stored (or added into C) once at the end."""
    acc = [f"r{r}h{h}" for r in range(MR) for h in range(2)]
    lines = ["declare <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float>, <32 x bfloat>, <32 x bfloat>)",
             f"define void @{SYMBOL}(ptr %a, ptr %b, ptr %c, i64 %kp, i64 %lda, i64 %ldc, i64 %acc) {{",
             "entry:", "  %some = icmp sgt i64 %kp, 0",
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
    lines += ["  %add = icmp ne i64 %acc, 0"]
    for r in range(MR):
        lines.append(f"  %co{r} = mul i64 %ldc, {r}")
        for h in range(2):
            x = acc[2 * r + h]
            lines += [f"  %cq{r}_{h} = add i64 %co{r}, {16 * h}",
                      f"  %cp{r}_{h} = getelementptr float, ptr %c, i64 %cq{r}_{h}",
                      f"  %old{x} = load <16 x float>, ptr %cp{r}_{h}, align 4",
                      f"  %sum{x} = fadd <16 x float> %old{x}, %f{x}",
                      f"  %out{x} = select i1 %add, <16 x float> %sum{x}, <16 x float> %f{x}",
                      f"  store <16 x float> %out{x}, ptr %cp{r}_{h}, align 4"]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def pack_ir() -> str:
    """``graphc_bf16_pack(r0, r1, out, npan, pstride)``: for each of npan panels jp,
    the 64 bf16 ``out[jp * pstride:][:64]`` = r0[32 jp + j], r1[32 jp + j]
    interleaved (j < 32): one pair of rows of B into its panels' layout, a
    shuffle of two vector loads per panel."""
    order = ", ".join(f"i32 {j // 2 + 32 * (j % 2)}" for j in range(64))
    return "\n".join([
        f"define void @{PACK}(ptr %r0, ptr %r1, ptr %out, i64 %npan, i64 %pstride) {{",
        "entry:", "  %some = icmp sgt i64 %npan, 0", "  br i1 %some, label %loop, label %done", "loop:",
        "  %j = phi i64 [0, %entry], [%jn, %loop]", "  %src = shl i64 %j, 5",
        "  %p0 = getelementptr i16, ptr %r0, i64 %src", "  %p1 = getelementptr i16, ptr %r1, i64 %src",
        "  %v0 = load <32 x i16>, ptr %p0, align 2", "  %v1 = load <32 x i16>, ptr %p1, align 2",
        f"  %iv = shufflevector <32 x i16> %v0, <32 x i16> %v1, <64 x i32> <{order}>",
        "  %dst = mul i64 %j, %pstride", "  %po = getelementptr i16, ptr %out, i64 %dst",
        "  store <64 x i16> %iv, ptr %po, align 2", "  %jn = add i64 %j, 1", "  %more = icmp slt i64 %jn, %npan",
        "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}"])


def pack_t_ir() -> str:
    """``graphc_bf16_pack_t(b, out, ldb, kp)``: one full panel of a B stored
    transposed (its 32 columns are rows of memory ``ldb`` bf16 apart, from
    ``b``): for each of kp pairs p, the 64 bf16 ``out[64 p:][:64]`` = the (k, k+1)
    pair 2p of each column, the 32-bit words at the same place of 32 rows
    gathered by two 16-lane gathers."""
    lanes = [", ".join(f"i64 {j}" for j in range(h * 16, h * 16 + 16)) for h in range(2)]
    gather = "@llvm.masked.gather.v16i32.v16p0"
    ones = ", ".join(["i1 true"] * 16)
    lines = [f"declare <16 x i32> {gather}(<16 x ptr>, i32 immarg, <16 x i1>, <16 x i32>)",
             f"define void @{PACK_T}(ptr %b, ptr %out, i64 %ldb, i64 %kp) {{", "entry:",
             "  %rb = shl i64 %ldb, 1", "  %ri = insertelement <16 x i64> poison, i64 %rb, i64 0",
             "  %rs = shufflevector <16 x i64> %ri, <16 x i64> poison, <16 x i32> zeroinitializer"]
    lines += [f"  %o{h} = mul <16 x i64> %rs, <{lanes[h]}>" for h in range(2)]
    lines += ["  %some = icmp sgt i64 %kp, 0", "  br i1 %some, label %loop, label %done", "loop:",
              "  %p = phi i64 [0, %entry], [%pn, %loop]", "  %pb = shl i64 %p, 2",
              "  %base = getelementptr i8, ptr %b, i64 %pb", "  %po = shl i64 %p, 7",
              "  %dst0 = getelementptr i8, ptr %out, i64 %po"]
    for h in range(2):
        lines += [f"  %g{h} = getelementptr i8, ptr %base, <16 x i64> %o{h}",
                  f"  %v{h} = call <16 x i32> {gather}(<16 x ptr> %g{h}, i32 2, <16 x i1> <{ones}>, "
                  "<16 x i32> poison)"]
    lines += ["  %dst1 = getelementptr i8, ptr %dst0, i64 64", "  store <16 x i32> %v0, ptr %dst0, align 2",
              "  store <16 x i32> %v1, ptr %dst1, align 2", "  %pn = add i64 %p, 1",
              "  %more = icmp slt i64 %pn, %kp", "  br i1 %more, label %loop, label %done", "done:", "  ret void", "}"]
    return "\n".join(lines)


def transpose_ir() -> str:
    """``graphc_u16_transpose(s, lds, d, ldd, nblk)``: for each of nblk blocks b,
    the 16 x 16 block of 16-bit values whose rows are 16 values of ``s`` from
    ``16 b``, rows ``lds`` apart, stored transposed: row p of it (16 values) at
    ``d`` from ``(16 b + p) ldd``.  Sixteen vector loads, four rounds of sixteen
    two-source shuffles (each round swaps the off-diagonal quadrants of blocks
    half the size of the last), sixteen vector stores."""
    vec = "<16 x i16>"
    lines = [f"define void @{TRANSPOSE}(ptr %s, i64 %lds, ptr %d, i64 %ldd, i64 %nblk) {{", "entry:",
             "  %some = icmp sgt i64 %nblk, 0", "  br i1 %some, label %loop, label %done", "loop:",
             "  %b = phi i64 [0, %entry], [%bn, %loop]", "  %so = shl i64 %b, 4"]
    for r in range(16):
        lines += [f"  %sr{r} = mul i64 %lds, {r}", f"  %sa{r} = add i64 %sr{r}, %so",
                  f"  %sp{r} = getelementptr i16, ptr %s, i64 %sa{r}", f"  %v0_{r} = load {vec}, ptr %sp{r}, align 2"]
    cur = {r: f"%v0_{r}" for r in range(16)}
    for st, half in enumerate((8, 4, 2, 1), start=1):
        lo = ", ".join(f"i32 {k if k & half == 0 else 16 + k - half}" for k in range(16))
        hi = ", ".join(f"i32 {k + half if k & half == 0 else 16 + k}" for k in range(16))
        nxt = {}
        for i in range(16):
            if i & half:
                continue
            j = i + half
            lines += [f"  %v{st}_{i} = shufflevector {vec} {cur[i]}, {vec} {cur[j]}, <16 x i32> <{lo}>",
                      f"  %v{st}_{j} = shufflevector {vec} {cur[i]}, {vec} {cur[j]}, <16 x i32> <{hi}>"]
            nxt[i], nxt[j] = f"%v{st}_{i}", f"%v{st}_{j}"
        cur = nxt
    for p in range(16):
        lines += [f"  %dq{p} = add i64 %so, {p}", f"  %dr{p} = mul i64 %dq{p}, %ldd",
                  f"  %dp{p} = getelementptr i16, ptr %d, i64 %dr{p}", f"  store {vec} {cur[p]}, ptr %dp{p}, align 2"]
    lines += ["  %bn = add i64 %b, 1", "  %more = icmp slt i64 %bn, %nblk", "  br i1 %more, label %loop, label %done",
              "done:", "  ret void", "}"]
    return "\n".join(lines)


_bound = False


def bind() -> bool:
    """Compile the tile for the host CPU and bind ``graphc_bf16_tile`` to it, once;
    False where the CPU has no AVX512-BF16."""
    global _bound
    if not _bound and available():
        bind_ir("\n".join((tile_ir(), pack_ir(), pack_t_ir(), transpose_ir())), (SYMBOL, PACK, PACK_T, TRANSPOSE))
        _bound = True
    return _bound


__all__ = ["MR", "NR", "SYMBOL", "PACK", "PACK_T", "TRANSPOSE", "available", "tile_ir", "pack_ir", "pack_t_ir",
           "transpose_ir", "bind"]
