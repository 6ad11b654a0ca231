"""graphc's own GEMM tiles on AMX (Intel's Advanced Matrix Extensions: eight
tile registers of 16 rows x 64 bytes and a unit multiplying them), for CPUs
with AMX-BF16 and AMX-INT8: a 32 x 32 block of C in four tile registers, the
K loop multiplying two 16-row tiles of A by two 16-column tiles of B
(``tdpbf16ps``: bf16 pairs into f32; ``tdpbusd``: u8 x s8 quads into s32,
wrapping as ``vpdpbusd`` does).

The tiles take the operands graphc's AVX-512 tiles take (graphc.codegen.
bf16_tile, int8_tile), from the same packed B: a panel of 32 columns is rows of
128 bytes, a pair (bf16) or a quad (int8) of k for each column, so one AMX B
tile is 16 such rows, 64 bytes of each (16 columns), read with a stride of
128.  A tile of A is 64 bytes (32 bf16 or 64 u8 of k) of each of 16 rows: read
in A's own rows where their stride lets L1 hold a tile's lines
(:data:`CONFLICT_STRIDE`), else from A packed in tiles (16 rows of 64 bytes
side by side, 1 KB; the tiles of a group of 16 rows one after the other in
the order of k).  A tile consumes 16 pairs or quads of k at a time, so the
packed blocks of k are whole multiples of 16 (bf16_gemm.KP_ALIGN,
int8_gemm.KQ_ALIGN).

``graphc_amx_bf16_tile(a, b, c, kp, lda, ldc, acc)`` and
``graphc_amx_int8_tile(a, b, c, kq, lda, ldc, acc)``: C[32][32] (+)= A @ B with
the AVX-512 tiles' arguments but for ``lda``: A packed in tiles, the elements
from its first group of 16 rows to its second (``ldc`` in elements of C;
``acc`` nonzero adds into C); kp or kq a multiple of 16.
``graphc_amx_bf16_rows`` and ``graphc_amx_int8_rows`` take A in its rows,
``lda`` elements apart, as the AVX-512 tiles do.
``graphc_amx_bf16_taps(a, b, c, kp, lda, ldc, acc, aoffs, bstep, ntaps)`` (and
``graphc_amx_int8_taps``, kq for kp) is the rows tile summing ``ntaps``
products (a convolution's taps, each its own A rows ``aoffs[t]`` elements from
``a`` and its own packed B ``t * bstep`` elements from ``b``) in the tile registers: C is loaded or zeroed once and
stored once, not once per tap (oneDNN's batch-reduce GEMM).  ``graphc_amx_config()``
loads the tile configuration into the calling thread: the GEMM drivers call
it once per call of theirs, before their tiles (the thread's tile registers
may have been configured by another library since: oneDNN and MKL run on AMX
too).

Linux gives a process the AMX state only when it asks (``arch_prctl``
``ARCH_REQ_XCOMP_PERM``; without it the first tile instruction kills the
process): :func:`available` asks, once, and says no where it is refused.
``GRAPHC_AMX=0`` switches these tiles off.
"""
from __future__ import annotations

import ctypes
import functools
import platform

from .llvm_tile import bind_ir, host_has

MR, NR = 32, 32
#: pairs (bf16) or quads (int8) of k one tile instruction consumes
K_STEP = 16
BF16 = "graphc_amx_bf16_tile"
INT8 = "graphc_amx_int8_tile"
#: the same tiles reading A in place, in its own rows
BF16_ROWS, INT8_ROWS = "graphc_amx_bf16_rows", "graphc_amx_int8_rows"
#: the batch-reduce tiles: A in its own rows, one product per tap summed in the tile registers
BF16_TAPS, INT8_TAPS = "graphc_amx_bf16_taps", "graphc_amx_int8_taps"
#: A is read in place unless its rows are a multiple of this many bytes apart:
#: then a tile's 16 lines fall in 8 or fewer of L1's 64 sets, two A tiles
#: overflow its 12 ways, and A packed in tiles (1,024 contiguous bytes each) is
#: faster (a 1024^3 GEMM on one core, rows 2 KB apart: 3.8-4.0 ms in place,
#: 2.3-3.6 packed, in runs alternating on a noisy machine)
CONFLICT_STRIDE = 512
CONFIG = "graphc_amx_config"

#: arch_prctl's number on x86-64, its request for permission and the feature it asks
#: for (linux/arch/x86/include/uapi/asm/prctl.h; XFEATURE_XTILEDATA)
_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA = 158, 0x1023, 18


@functools.cache
def _permitted() -> bool:
    """Ask Linux for the AMX tile state for this process (idempotent)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0
    except (OSError, AttributeError):
        return False


@functools.cache
def available(kind: str) -> bool:
    """The host CPU has the AMX tiles for ``kind`` (``"bf16"``: AMX-BF16,
    ``"int8"``: AMX-INT8), ``GRAPHC_AMX`` is not ``0``, and Linux grants the
    process the tile state."""
    feature = {"bf16": "amx-bf16", "int8": "amx-int8"}[kind]
    return host_has("amx-tile", "GRAPHC_AMX") and host_has(feature, "GRAPHC_AMX") and _permitted()


def _config() -> str:
    """The tile configuration (palette 1; all eight tiles 16 rows of 64 bytes)
    as an LLVM constant of 64 bytes: byte 0 the palette, bytes 16-31 each
    tile's bytes per row (u16), bytes 48-55 its rows."""
    cfg = bytearray(64)
    cfg[0] = 1
    for t in range(8):
        cfg[16 + 2 * t] = 64
        cfg[48 + t] = 16
    return "[" + ", ".join(f"i8 {v}" for v in cfg) + "]"


def _step_pointers(i: str, tag: str, tiled: bool, a_bytes: int, taps: bool) -> list[str]:
    """The A and B tile addresses of step ``i`` of the K loop (A's tiles 1 KB
    apart when packed, 64 bytes along its rows in place; B's 16 rows of 128
    bytes).  ``taps``: step i is step i % n of tap i / n, whose A lies
    ``aoffs[tap]`` elements from ``a`` and whose B ``tap * bstep`` from ``b``."""
    a_shift = 10 if tiled else 6
    if taps:
        offsets = [f"  %t{tag} = udiv i64 {i}, %n", f"  %s{tag} = urem i64 {i}, %n",
                   f"  %aop{tag} = getelementptr i64, ptr %aoffs, i64 %t{tag}", f"  %ao{tag} = load i64, ptr %aop{tag}",
                   f"  %aob{tag} = mul i64 %ao{tag}, {a_bytes}", f"  %as{tag} = shl i64 %s{tag}, {a_shift}",
                   f"  %ak{tag} = add i64 %aob{tag}, %as{tag}", f"  %bt{tag} = mul i64 %t{tag}, %bstepb",
                   f"  %bs{tag} = shl i64 %s{tag}, 11", f"  %bo{tag} = add i64 %bt{tag}, %bs{tag}"]
    else:
        offsets = [f"  %ak{tag} = shl i64 {i}, {a_shift}", f"  %bo{tag} = shl i64 {i}, 11"]
    return offsets + [f"  %pa0{tag} = getelementptr i8, ptr %a, i64 %ak{tag}",
                      f"  %pa1{tag} = getelementptr i8, ptr %a16, i64 %ak{tag}",
                      f"  %pb0{tag} = getelementptr i8, ptr %b, i64 %bo{tag}",
                      f"  %pb1{tag} = getelementptr i8, ptr %pb0{tag}, i64 64"]


def _load(tile: int, tag: str) -> str:
    """Load A tile 4/5 (rows %ldab bytes apart) or B tile 6/7 from step ``tag``'s address."""
    name, stride = {4: ("pa0", "%ldab"), 5: ("pa1", "%ldab"), 6: ("pb0", 128), 7: ("pb1", 128)}[tile]
    return f"  call void @llvm.x86.tileloadd64(i8 {tile}, ptr %{name}{tag}, i64 {stride})"


def tile_ir(symbol: str, dot: str, a_bytes: int, tiled: bool, taps: bool = False) -> str:
    """One tile function: C tiles 0-3 (rows 0-15 and 16-31, columns 0-15 and
    16-31), A tiles 4-5, B tiles 6-7; ``a_bytes`` the size of an element of A;
    ``tiled``: A packed in tiles (``lda``: the elements from its first 16 rows'
    tiles to the second's), else in its own rows (``lda`` elements apart).
    The K loop is software-pipelined: tile registers are not renamed, so a
    load waits for the products still reading the register it fills; each of
    the next step's loads is issued right after the last product that reads
    its register (the first step's loads before the loop, the last step's
    products after it).  ``taps`` (a batch-reduce tile): three arguments more,
    ``aoffs`` (``ntaps`` int64 element offsets of each tap's A from ``a``),
    ``bstep`` (elements from one tap's packed B to the next's) and ``ntaps``;
    C (+)= the sum of the taps' products, kept in the tile registers from the
    first tap's first step to the last tap's last."""
    c_at = {0: "%c", 1: "%c1", 2: "%c2", 3: "%c3"}
    dots = {(r, h): f"  call void @llvm.x86.{dot}(i8 {2 * r + h}, i8 {4 + r}, i8 {6 + h})"
            for r in range(2) for h in range(2)}
    extra = ", ptr %aoffs, i64 %bstep, i64 %ntaps" if taps else ""
    lines = [f"define void @{symbol}(ptr %a, ptr %b, ptr %c, i64 %kp, i64 %lda, i64 %ldc, i64 %acc{extra}) {{",
             "entry:", *([f"  %bstepb = mul i64 %bstep, {a_bytes}"] if taps else []),
             f"  %ldae = mul i64 %lda, {a_bytes}", "  %ldcb = shl i64 %ldc, 2",
             *(["  %a16o = add i64 %ldae, 0", "  %ldab = add i64 64, 0"] if tiled else
               ["  %a16o = shl i64 %ldae, 4", "  %ldab = add i64 %ldae, 0"]),
             "  %a16 = getelementptr i8, ptr %a, i64 %a16o",
             "  %c16o = shl i64 %ldcb, 4", "  %c1 = getelementptr i8, ptr %c, i64 64",
             "  %c2 = getelementptr i8, ptr %c, i64 %c16o", "  %c3 = getelementptr i8, ptr %c2, i64 64",
             "  %isacc = icmp ne i64 %acc, 0", "  br i1 %isacc, label %load, label %zero", "load:"]
    lines += [f"  call void @llvm.x86.tileloadd64(i8 {t}, ptr {c_at[t]}, i64 %ldcb)" for t in range(4)]
    lines += ["  br label %pre", "zero:"] + [f"  call void @llvm.x86.tilezero(i8 {t})" for t in range(4)]
    count = "%nt" if taps else "%n"
    lines += ["  br label %pre", "pre:", "  %n = lshr i64 %kp, 4", *(["  %nt = mul i64 %n, %ntaps"] if taps else []),
              f"  %some = icmp sgt i64 {count}, 0",
              "  br i1 %some, label %first, label %done", "first:", *_step_pointers("0", "f", tiled, a_bytes, taps),
              *(_load(t, "f") for t in (4, 6, 7, 5)), f"  %last = sub i64 {count}, 1",
              "  %steps = icmp sgt i64 %last, 0", "  br i1 %steps, label %loop, label %tail", "loop:",
              "  %i = phi i64 [0, %first], [%in, %loop]", "  %in = add i64 %i, 1",
              *_step_pointers("%in", "", tiled, a_bytes, taps),
              dots[0, 0], dots[0, 1], _load(4, ""), dots[1, 0], _load(6, ""), dots[1, 1], _load(7, ""),
              _load(5, ""), "  %more = icmp slt i64 %in, %last", "  br i1 %more, label %loop, label %tail", "tail:",
              *dots.values(), "  br label %done", "done:"]
    lines += [f"  call void @llvm.x86.tilestored64(i8 {t}, ptr {c_at[t]}, i64 %ldcb)" for t in range(4)]
    lines += ["  ret void", "}"]
    return "\n".join(lines)


def config_ir() -> str:
    """``graphc_amx_config()``: load the tile configuration (palette 1, all eight
    tiles 16 rows of 64 bytes) into the calling thread."""
    return "\n".join([f"@{CONFIG}_data = private unnamed_addr constant [64 x i8] {_config()}, align 64",
                      f"define void @{CONFIG}() {{", f"  call void @llvm.x86.ldtilecfg(ptr @{CONFIG}_data)",
                      "  ret void", "}"])


def module_ir() -> str:
    """The configuration and both tiles, with the declarations of the AMX intrinsics they call."""
    decls = ["declare void @llvm.x86.ldtilecfg(ptr)", "declare void @llvm.x86.tilezero(i8 immarg)",
             "declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)",
             "declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)",
             "declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)",
             "declare void @llvm.x86.tdpbusd(i8 immarg, i8 immarg, i8 immarg)"]
    tiles = [tile_ir(BF16, "tdpbf16ps", 2, True), tile_ir(BF16_ROWS, "tdpbf16ps", 2, False),
             tile_ir(INT8, "tdpbusd", 1, True), tile_ir(INT8_ROWS, "tdpbusd", 1, False),
             tile_ir(BF16_TAPS, "tdpbf16ps", 2, False, taps=True), tile_ir(INT8_TAPS, "tdpbusd", 1, False, taps=True)]
    return "\n".join(decls + [config_ir()] + tiles)


_bound = False


def bind() -> bool:
    """Compile both tiles for the host CPU and bind their symbols, once; False
    where the CPU or the OS gives no AMX-BF16 (AMX-INT8 comes with it on every
    CPU that has AMX)."""
    global _bound
    if not _bound and available("bf16") and available("int8"):
        bind_ir(module_ir(), (CONFIG, BF16, BF16_ROWS, INT8, INT8_ROWS, BF16_TAPS, INT8_TAPS))
        _bound = True
    return _bound


__all__ = ["MR", "NR", "K_STEP", "BF16", "INT8", "BF16_ROWS", "INT8_ROWS", "BF16_TAPS", "INT8_TAPS", "CONFIG",
           "CONFLICT_STRIDE", "available", "tile_ir", "config_ir", "module_ir", "bind"]
