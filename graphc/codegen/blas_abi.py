"""What the BLAS intrinsics share (graphc.codegen.blas, graphc.codegen.bf16_gemm):
a pointer into a flat array at an element offset, the check that arguments
are 1-D arrays of one dtype, and a copy of a run of elements."""
from __future__ import annotations

from llvmlite import ir as llir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import amx_tile

VOIDP = llir.IntType(8).as_pointer()


def pointer(context, builder, aty, val, off, offty):
    """An i8* to element ``off`` (of numba type ``offty``) of the array ``val`` (type ``aty``)."""
    data = context.make_array(aty)(context, builder, val).data
    off = context.cast(builder, off, offty, types.intp)
    return builder.bitcast(builder.gep(data, [off]), VOIDP)


def arrays(dtype, *arrs) -> bool:
    """Are ``arrs`` all 1-D arrays of ``dtype``?"""
    return all(isinstance(a, types.Array) and a.dtype == dtype and a.ndim == 1 for a in arrs)


def call_symbol(context, builder, symbol: str, signature, args, parts) -> None:
    """Call the void function ``symbol`` (LLVM IR of graphc's own, bound by name)
    from an intrinsic's codegen with ``parts`` for its arguments, in its order:
    ``("p", i, j)`` a pointer to element ``args[j]`` of the array ``args[i]``,
    ``("i", i)`` the integer ``args[i]`` as int64."""
    sa = signature.args
    i64 = llir.IntType(64)
    vals = [pointer(context, builder, sa[p[1]], args[p[1]], args[p[2]], sa[p[2]]) if p[0] == "p"
            else context.cast(builder, args[p[1]], sa[p[1]], types.int64) for p in parts]
    fnty = llir.FunctionType(llir.VoidType(), [VOIDP if p[0] == "p" else i64 for p in parts])
    builder.call(cgutils.get_or_insert_function(builder.module, fnty, symbol), vals)


@intrinsic
def copy_elements(typingctx, dst, d_off, src, s_off, count):
    """``dst[d_off:d_off + count] = src[s_off:s_off + count]`` (1-D arrays of one
    dtype; the runs do not overlap) as one memcpy, without a slice's views: the
    packs of A copy runs of 32 or 64 elements."""
    if not (isinstance(dst, types.Array) and arrays(dst.dtype, dst, src)):
        return None

    def codegen(context, builder, signature, args):
        sa = signature.args
        size = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(sa[0].dtype)))
        n = builder.mul(context.cast(builder, args[4], sa[4], types.intp), size)
        cgutils.raw_memcpy(builder, pointer(context, builder, sa[0], args[0], args[1], sa[1]),
                           pointer(context, builder, sa[2], args[2], args[3], sa[3]), n, 1)
        return context.get_dummy_value()
    return types.void(dst, d_off, src, s_off, count), codegen


@intrinsic
def amx_config(typingctx):
    """Load graphc.codegen.amx_tile's configuration into the calling thread
    (``graphc_amx_config()``)."""
    def codegen(context, builder, signature, args):
        fnty = llir.FunctionType(llir.VoidType(), [])
        builder.call(cgutils.get_or_insert_function(builder.module, fnty, amx_tile.CONFIG), [])
        return context.get_dummy_value()
    return types.void(), codegen


def tile_call(symbol: str, a_dtype, b_dtype, c_dtype):
    """An intrinsic calling the GEMM tile ``symbol`` (graphc.codegen.bf16_tile,
    int8_tile, amx_tile: ``symbol(a, b, c, k_steps, lda, ldc, acc)``) as
    ``tile(a, a_off, b, b_off, c, c_off, k_steps, lda, ldc, acc)``: A, packed B
    and C 1-D arrays of the given numba dtypes, each from an element offset."""
    @intrinsic
    def call(typingctx, a, a_off, b, b_off, c, c_off, steps, lda, ldc, acc):
        if not (arrays(a_dtype, a) and arrays(b_dtype, b) and arrays(c_dtype, c)):
            return None

        def codegen(context, builder, signature, args):
            sa = signature.args
            i64 = llir.IntType(64)
            fnty = llir.FunctionType(llir.VoidType(), [VOIDP, VOIDP, VOIDP, i64, i64, i64, i64])
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
            builder.call(fn, [pointer(context, builder, sa[0], args[0], args[1], sa[1]),
                              pointer(context, builder, sa[2], args[2], args[3], sa[3]),
                              pointer(context, builder, sa[4], args[4], args[5], sa[5])]
                         + [context.cast(builder, args[i], sa[i], types.int64) for i in range(6, 10)])
            return context.get_dummy_value()
        return types.void(a, a_off, b, b_off, c, c_off, steps, lda, ldc, acc), codegen
    return call


def taps_call(symbol: str, a_dtype, b_dtype, c_dtype):
    """An intrinsic calling AMX's batch-reduce tile ``symbol`` (graphc.codegen.
    amx_tile's ``taps`` tiles) as ``taps(a, a_off, aoffs, b, b_off, bstep, c,
    c_off, steps, lda, ntaps)``: C[32][32] (rows 32 apart, from ``c_off``) = the
    sum over ``ntaps`` taps t of A_t @ B_t, A_t the rows of ``a`` from ``a_off +
    aoffs[t]`` (``lda`` apart; ``aoffs`` int64), B_t the packed panel from
    ``b_off + t * bstep``; ``steps`` pairs or quads of k each."""
    @intrinsic
    def call(typingctx, a, a_off, aoffs, b, b_off, bstep, c, c_off, steps, lda, ntaps):
        if not (arrays(a_dtype, a) and arrays(b_dtype, b) and arrays(c_dtype, c) and arrays(types.int64, aoffs)):
            return None

        def codegen(context, builder, signature, args):
            sa = signature.args
            i64 = llir.IntType(64)
            fnty = llir.FunctionType(llir.VoidType(), [VOIDP, VOIDP, VOIDP, i64, i64, i64, i64, VOIDP, i64, i64])
            fn = cgutils.get_or_insert_function(builder.module, fnty, symbol)
            cast = [context.cast(builder, args[i], sa[i], types.int64) for i in (8, 9, 5, 10)]
            builder.call(fn, [pointer(context, builder, sa[0], args[0], args[1], sa[1]),
                              pointer(context, builder, sa[3], args[3], args[4], sa[4]),
                              pointer(context, builder, sa[6], args[6], args[7], sa[7]),
                              cast[0], cast[1], i64(32), i64(0),
                              pointer(context, builder, sa[2], args[2], context.get_constant(types.intp, 0),
                                      types.intp),
                              cast[2], cast[3]])
            return context.get_dummy_value()
        return types.void(a, a_off, aoffs, b, b_off, bstep, c, c_off, steps, lda, ntaps), codegen
    return call


def road_tiles(amx: bool, amx_symbols, avx512_symbol: str, avx512_rows: int, *dtypes):
    """(MR, tile, rows_tile): the rows of C a tile call makes and the intrinsics
    (:func:`tile_call`) calling the road's tile with A packed and with A in its
    own rows: AMX's two (``amx_symbols``, 32 rows) where ``amx``, else the one
    AVX-512 tile (``avx512_symbol``, ``avx512_rows`` rows) for both."""
    if amx:
        return amx_tile.MR, tile_call(amx_symbols[0], *dtypes), tile_call(amx_symbols[1], *dtypes)
    call = tile_call(avx512_symbol, *dtypes)
    return avx512_rows, call, call
