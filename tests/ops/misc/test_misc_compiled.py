"""Generated kernels of GenIndex and Dropout against graphc's numpy reference, bit for
bit: every dtype the schemas allow, Philox masks, edge probabilities and faults, and the
corpus; a Wildcard is not lowered."""
import numpy as np
import pytest

import graphc
from graphc.builder import single_op_graph
from graphc.errors import RuntimeFault, Unimplemented
from graphc.fill import make_inputs

from support import check_compiled, corpus_files, one_op


# ---------------------------------------------------------------------- GenIndex
@pytest.mark.parametrize("dt,src,dst,axis", [
    ("f32", ([3, 4, 5],), ([3, 4, 5],), 1),
    ("bf16", ([2, 3], [1, 2]), ([2, 3], [1, 4]), -1),
    ("f16", ([6],), ([6],), 0),
])
def test_genindex(dt, src, dst, axis):
    g = one_op("GenIndex", [(dt, *src)], [("s32", *dst)], {"axis": axis})
    check_compiled(g, exact=True, what=f"GenIndex {dt}")


# ----------------------------------------------------------------------- Dropout
def _dropout_graph(dt, shape, seed_dt, offset_dt, mask=True, strides=None):
    outs = [(dt, shape)] + ([("u8", shape)] if mask else [])
    return one_op("Dropout", [(dt, shape, strides), (seed_dt, [1]), (offset_dt, []), ("f32", [1])], outs)


def _dropout_inputs(g, seed, offset, p):
    x = make_inputs(g)
    x[1] = np.array([seed], dtype=g.tensors[1].dtype.np)
    x[2] = np.array(offset, dtype=g.tensors[2].dtype.np)
    x[3] = np.array([p], np.float32)
    return x


@pytest.mark.parametrize("dt,shape,seed_dt,offset_dt,seed,offset,p,strides", [
    ("f32", [37], "s32", "u32", -7, 3_000_000_000, 0.3, None),        # 37: the last Philox block is partial
    ("bf16", [3, 5, 7], "u32", "s32", 4_000_000_000, -2, 0.5, [1, 3, 15]),
    ("f16", [2, 3], "s8", "u8", 5, 200, 0.75, None),
    ("f32", [300, 129], "s32", "s32", 12345, 678, 0.25, None),          # big enough for prange
    ("f32", [], "u8", "u8", 9, 1, 0.5, None),
])
def test_dropout_matches_reference_bit_for_bit(dt, shape, seed_dt, offset_dt, seed, offset, p, strides):
    g = _dropout_graph(dt, shape, seed_dt, offset_dt, strides=strides)
    got = check_compiled(g, _dropout_inputs(g, seed, offset, p), exact=True, what=f"Dropout {dt}")
    mask = got[g.ops[0].outputs[1].id]
    if mask.size > 1000:
        assert abs(mask.mean() - (1 - p)) < 0.02


def test_dropout_edge_probabilities_and_faults():
    g = _dropout_graph("f16", [2, 3], "s32", "s32", mask=False)
    for p in (0.0, 1.0):
        check_compiled(g, _dropout_inputs(g, 1, 2, p), exact=True, what=f"Dropout p={p}")
    cg = graphc.compile(g)
    for p in (1.5, -0.25, np.nan):
        with pytest.raises(RuntimeFault, match="probability"):
            cg.run(_dropout_inputs(g, 1, 2, p))


# ------------------------------------------------------------------- not lowered
def test_wildcard_is_not_lowered():
    g = single_op_graph("Wildcard", [("f32", [2])], [("f32", [2])])
    assert not g.get_partitions()[0].is_supported()
    with pytest.raises(Unimplemented):
        graphc.compile(g)


# ------------------------------------------------------------------------ corpus
@pytest.mark.parametrize("path", corpus_files(["genindex"]), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_misc_corpus(path, corpus):
    g = graphc.load_graph(path)
    check_compiled(g, exact=True, what=path.name)
