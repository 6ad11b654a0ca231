"""Generated kernels of the shuffle ops (Concat, StaticReshape, StaticTranspose, Reorder,
TypeCast) against graphc's numpy reference, bit for bit: every dtype the schemas allow,
rank 0 and 1, non-dense strides on either side, special values through TypeCast,
tiled transposing loops, and the corpus."""
import numpy as np
import pytest

import graphc
from graphc.builder import GraphBuilder
from graphc.fill import make_inputs

from support import NP, check_compiled, compiled_vs_reference, corpus_files, kernel_params, one_op


# ------------------------------------------------------------------------ Concat
@pytest.mark.parametrize("dt,ins,out,axis", [
    # one transposed input; dst in a (0, 2, 1) memory order
    ("f32", [([2, 3, 4],), ([2, 1, 4], [1, 8, 2]), ([2, 5, 4],)], ([2, 9, 4], [36, 1, 9]), 1),
    ("bf16", [([3],), ([0],), ([4],)], ([7],), 0),  # rank 1, with an empty input
    ("f16", [([2, 2],), ([2, 3],)], ([2, 5],), -1),
])
def test_concat(dt, ins, out, axis):
    g = one_op("Concat", [(dt, *spec) for spec in ins], [(dt, *out)], {"axis": axis})
    check_compiled(g, exact=True, what=f"Concat {dt}")


# ----------------------------------------------------------------- StaticReshape
@pytest.mark.parametrize("dt,src,dst,shape,special_zero", [
    ("f32", ([4, 6],), ([2, 3, 4],), [2, -1, 4], False),
    ("bf16", ([3, 4, 5], [1, 3, 12]), ([3, 20],), [0, -1], True),  # column-major src: runs of 3
    ("f16", ([6],), ([2, 1, 3], [1, 7, 2]), [2, 1, 3], False),     # strided dst
    ("f32", ([4, 6], [1, 4]), ([3, 8], [1, 3]), [3, 8], False),    # both column-major
    ("f32", ([],), ([1, 1],), [1, 1], False),
    ("bf16", ([1],), ([],), [], False),
    ("s64", ([4, 6], [1, 4]), ([3, 8],), [3, 8], False),      # graphc's extension: any type
    ("boolean", ([2, 3],), ([3, 1, 2], [1, 6, 3]), [3, 1, 2], False),
])
def test_static_reshape(dt, src, dst, shape, special_zero):
    g = one_op("StaticReshape", [(dt, *src)], [(dt, *dst)], {"shape": shape, "special_zero": special_zero})
    check_compiled(g, exact=True, what=f"StaticReshape {dt} {shape}")


# --------------------------------------------------------------- StaticTranspose
@pytest.mark.parametrize("dt,src,dst,order", [
    ("f32", ([2, 3, 4],), ([4, 2, 3],), [2, 0, 1]),
    ("bf16", ([5, 6], [1, 5]), ([6, 5],), [-1, 0]),
    ("f16", ([7], [2]), ([7],), [0]),
    ("f32", ([],), ([],), []),
    ("s64", ([2, 3, 4],), ([4, 2, 3],), [2, 0, 1]),
    ("s32", ([5, 6], [1, 5]), ([6, 5],), [1, 0]),
    ("boolean", ([3, 4],), ([4, 3],), [1, 0]),
])
def test_static_transpose(dt, src, dst, order):
    g = one_op("StaticTranspose", [(dt, *src)], [(dt, *dst)], {"order": order})
    check_compiled(g, exact=True, what=f"StaticTranspose {dt} {order}")


# ----------------------------------------------------------------------- Reorder
@pytest.mark.parametrize("dt,shape,src_strides,dst_strides", [
    ("f32", [2, 3, 4, 5], None, [60, 1, 15, 3]),    # to channels-last
    ("bf16", [2, 3, 4, 5], [60, 1, 15, 3], None),   # from channels-last
    ("f16", [4, 6], [1, 4], [8, 1]),                # column-major to padded rows
    ("f32", [5], [3], None),
    ("bf16", [], None, None),
])
def test_reorder(dt, shape, src_strides, dst_strides):
    g = one_op("Reorder", [(dt, shape, src_strides)], [(dt, shape, dst_strides)])
    check_compiled(g, exact=True, what=f"Reorder {dt}")


# ---------------------------------------------------------------------- TypeCast
# NaN, infinities, signed zero, ties between bf16/f16 neighbours (RNE), values
# that overflow f16, f16 subnormals and the smallest one's half
F32_SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 1 + 2 ** -8, 1 + 3 * 2 ** -8, 1 + 2 ** -11,
                         1 + 3 * 2 ** -11, 65504.0, 65520.0, 7e4, -1e38, 3e-5, -2 ** -24, 2 ** -25,
                         3 * 2 ** -26, 1e-40], np.float32)


@pytest.mark.parametrize("src,dst,shape,src_strides,dst_strides", [
    ("f32", "bf16", [17], None, None),
    ("f32", "f16", [17], [2], None),
    ("bf16", "f32", [3, 4], None, [1, 3]),
    ("f16", "f32", [3, 4], [1, 3], None),
    ("f32", "bf16", [], None, None),
])
def test_typecast(src, dst, shape, src_strides, dst_strides):
    g = one_op("TypeCast", [(src, shape, src_strides)], [(dst, shape, dst_strides)])
    x = make_inputs(g)
    if src == "f32" and shape:
        x[0] = F32_SPECIALS.reshape(shape)
    elif src == "f32":
        x[0] = np.array(1 + 2 ** -8, np.float32)
    else:  # every special value the narrow type holds
        x[0].reshape(-1)[:6] = np.array([np.nan, np.inf, -np.inf, -0.0, 2 ** -24, 65504.0]).astype(NP[src])
    check_compiled(g, x, exact=True, what=f"TypeCast {src}->{dst}")


@pytest.mark.parametrize("src", ["s32", "s64", "boolean"])
def test_typecast_integers_to_f32(src):
    """graphc's extension rows: integers (beyond f32's 2^24: rounded to nearest even) and
    booleans to f32."""
    g = one_op("TypeCast", [(src, [2, 3])], [("f32", [2, 3], [1, 2])])
    x = make_inputs(g)
    if src == "boolean":
        x[0] = np.array([[True, False, True], [False, False, True]])
    else:
        x[0].reshape(-1)[:3] = [(1 << 24) + 1, -(1 << 24) - 3, (1 << 30) + 65] if src == "s32" else \
            [(1 << 24) + 1, -(1 << 24) - 3, (1 << 62) + 65]
    got = check_compiled(g, x, exact=True, what=f"TypeCast {src}->f32")
    np.testing.assert_array_equal(got[1], x[0].astype(np.float32))


def test_typecast_anchors_fused_chain():
    # TypeCast reads and writes through load_nd / store_nd, so an eltwise chain
    # around it runs in its loop: one kernel, no scratch buffer
    b = GraphBuilder()
    x, y = b.tensor("f32", [5, 8]), b.tensor("f32", [8])
    t = b.op("Add", [x, y])[0]
    t = b.op("TypeCast", [t], [("bf16", [-1, -1])])[0]
    b.op("Abs", [t])
    g = b.finalize()
    cg, _ = compiled_vs_reference(g)
    assert len(cg.compiled) == 1 and not [p for p in kernel_params(cg)[0] if p.startswith("t")]


# ------------------------------------------------------------------------ corpus
CORPUS = ["concat", "concat_2", "concat_3", "static_reshape", "static_transpose", "reorder", "typecast"]


@pytest.mark.parametrize("path", corpus_files(CORPUS), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_shuffle_corpus(path, corpus):
    g = graphc.load_graph(path)
    check_compiled(g, exact=True, what=path.name)


# ------------------------------------------------------------- transposing loops
@pytest.mark.parametrize("kind, dt", [("Reorder", "f32"), ("TypeCast", "bf16"), ("Add", "f32")])
@pytest.mark.parametrize("shape", [(70, 45), (3, 33, 100)])
def test_transposing_loops_walk_tiles(kind, dt, shape):
    """An input read across its layout (a transpose) is walked in 32 x 32 tiles:
    edges of any size, every element written once."""
    transposed = []                      # strides of the reversed layout
    acc = 1
    for d in shape:
        transposed.append(acc)
        acc *= d
    src = ("f32", shape, transposed)
    ins = [src] + ([("f32", shape)] if kind == "Add" else [])
    out = ("f32" if kind != "TypeCast" else dt, shape)
    g = one_op(kind, ins, [out])
    cg, _ = compiled_vs_reference(g)
    assert "tile0" in cg.source and "min(ta0 + 32" in cg.source
