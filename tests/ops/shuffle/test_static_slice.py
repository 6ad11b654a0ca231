"""StaticSlice (graphc's own op: src[begin:end] on listed axes, step 1): the
reference against numpy slicing, the generated kernel against the reference bit
for bit, its errors, and the JSON round trip."""
import numpy as np
import pytest

import graphc
from graphc.builder import GraphBuilder, single_op_graph
from graphc.op import Op
from graphc.types import LogicalTensor
from graphc.errors import InvalidDataType, InvalidGraphOp, InvalidShape
from graphc.jsonio import dump_graph, load_graph
from support import check_compiled, inferred_shape, one_op, run_single

# (src shape, attrs, the numpy index giving dst)
CASES = [
    ((5, 7), {"begin": [1, 2], "end": [4, 7]}, np.s_[1:4, 2:7]),
    ((2, 6, 4), {"begin": [2], "end": [5], "axes": [1]}, np.s_[:, 2:5]),
    ((2, 6, 4), {"begin": [-3, 0], "end": [-1, 1], "axes": [-1, 0]}, np.s_[0:1, :, 1:3]),
    ((3, 4), {"begin": [1], "end": [1]}, np.s_[1:1]),                 # empty
    ((4,), {"begin": [0], "end": [4]}, np.s_[:]),                      # whole
    ((2, 3, 4, 5), {"begin": [1, 1], "end": [4, 3], "axes": [3, 1]}, np.s_[:, 1:3, :, 1:4]),
]


@pytest.mark.parametrize("src,attrs,index", CASES, ids=[str(i) for i in range(len(CASES))])
def test_reference_is_numpy_slicing(src, attrs, index):
    x = np.arange(np.prod(src), dtype=np.float32).reshape(src)
    assert inferred_shape("StaticSlice", [("f32", list(src))], attrs=attrs) == x[index].shape
    (y,) = run_single("StaticSlice", [x], [("f32", None)], attrs)
    np.testing.assert_array_equal(y, x[index])


@pytest.mark.parametrize("dt", ["f32", "bf16", "f16", "s64", "boolean"])
@pytest.mark.parametrize("src,attrs,index", CASES, ids=[str(i) for i in range(len(CASES))])
def test_compiled_against_reference(src, attrs, index, dt):
    shape = np.zeros(src)[index].shape
    g = one_op("StaticSlice", [(dt, list(src))], [(dt, list(shape))], attrs)
    check_compiled(g, exact=True, what=f"StaticSlice {dt} {attrs}")


@pytest.mark.parametrize("src_strides,dst_strides", [([1, 3, 12], None), (None, [1, 2, 6])],
                         ids=["column-major-src", "column-major-dst"])
def test_compiled_with_strides(src_strides, dst_strides):
    g = one_op("StaticSlice", [("f32", [3, 4, 5], src_strides)], [("f32", [2, 3, 4], dst_strides)],
               {"begin": [1, 0, 1], "end": [3, 3, 5]})
    check_compiled(g, exact=True, what="StaticSlice strided")


@pytest.mark.parametrize("attrs,error,where", [
    ({"begin": [0, 0], "end": [1]}, InvalidGraphOp, "attribute 'end'"),
    ({"begin": [0, 0, 0], "end": [1, 1, 1]}, InvalidGraphOp, "attribute 'begin'"),
    ({"begin": [0], "end": [1], "axes": [0, 1]}, InvalidGraphOp, "attribute 'axes'"),
    ({"begin": [0, 0], "end": [1, 1], "axes": [1, -1]}, InvalidGraphOp, "attribute 'axes'"),
    ({"begin": [0], "end": [1], "axes": [2]}, InvalidGraphOp, "attribute 'axes'"),
    ({"begin": [0], "end": [6]}, InvalidShape, "attribute 'end'"),
    ({"begin": [-6], "end": [2]}, InvalidShape, "attribute 'begin'"),
    ({"begin": [3], "end": [2]}, InvalidShape, "attributes 'begin' and 'end'"),
    ({"begin": [0]}, InvalidGraphOp, "attribute 'end'"),
])
def test_errors_name_the_op_and_attribute(attrs, error, where):
    with pytest.raises(error) as e:
        single_op_graph("StaticSlice", [("f32", [5, 4])], [("f32", None)], attrs)
    assert "StaticSlice" in str(e.value) and where in str(e.value)
    assert "expected" in str(e.value) and ("found" in str(e.value) or "missing" in str(e.value))


def test_dtypes():
    """Any type a view moves (graphc's extension: integers, booleans), src's for dst."""
    for dt in ("s32", "s64", "boolean", "f64"):
        single_op_graph("StaticSlice", [(dt, [4])], [(dt, None)], {"begin": [0], "end": [1]})
    with pytest.raises(InvalidDataType):
        single_op_graph("StaticSlice", [("f32", [4])], [("bf16", None)], {"begin": [0], "end": [1]})
    with pytest.raises(InvalidDataType, match="(?s)StaticSlice.*found src=s64, dst=s32"):
        single_op_graph("StaticSlice", [("s64", [4])], [("s32", None)], {"begin": [0], "end": [1]})


def test_unknown_dims():
    assert inferred_shape("StaticSlice", [("f32", [-1, 6])], attrs={"begin": [0, 1], "end": [2, 3]}) == (-1, 2)
    assert inferred_shape("StaticSlice", [("f32", [-1, 6])], attrs={"begin": [1], "end": [3], "axes": [1]}) == (-1, 2)


def test_json_round_trip():
    g = one_op("StaticSlice", [("bf16", [2, 6, 4])], [("bf16", [2, 3, 4])], {"begin": [-4], "end": [5], "axes": [1]})
    back = load_graph(dump_graph(g))
    op = next(iter(back.ops.values()))
    assert op.kind == "StaticSlice"
    assert (op.attr("begin"), op.attr("end"), op.attr("axes")) == ((-4,), (5,), (1,))
    x = np.arange(48, dtype=np.float32).reshape(2, 6, 4).astype(graphc.DataType.bf16.np)
    (tid,) = back.input_ports
    out = graphc.compile(back).run({tid: x})
    np.testing.assert_array_equal(next(iter(out.values())), x[:, 2:5])


def _compiled_one(g):
    (cp,) = graphc.compile(g).compiled
    return cp


def test_a_window_keeping_the_layout_is_a_view():
    """Rows of a dense src (dense dst, the same strides) and any window into a
    dst of layout ``any`` share src's memory; a dense dst that the window's
    strides do not give is a copy kernel."""
    x = np.arange(60, dtype=np.float32).reshape(5, 12)
    rows = one_op("StaticSlice", [("f32", [5, 12])], [("f32", [2, 12])], {"begin": [1], "end": [3]})
    cp = _compiled_one(rows)
    assert cp.is_view and cp.get_inplace_ports() == []
    y = cp.execute({0: x})[1]
    assert np.shares_memory(y, x)
    np.testing.assert_array_equal(y, x[1:3])

    b = GraphBuilder()
    src, dst = b.tensor("f32", [5, 12]), LogicalTensor(1, "f32", [5, 4], layout_type="any")
    b.graph.add_op(Op(0, "StaticSlice", [src], [dst], {"begin": [-6], "end": [-2], "axes": [1]}))
    cp = _compiled_one(b.finalize())
    assert cp.is_view and cp.query_logical_tensor(dst.id).strides == (12, 1)
    y = cp.execute({0: x})[1]
    assert np.shares_memory(y, x)
    np.testing.assert_array_equal(y, x[:, 6:10])
    out = np.zeros((5, 4), np.float32)                  # a caller-given output gets a copy
    cp.execute({0: x}, outputs={1: out})
    np.testing.assert_array_equal(out, x[:, 6:10])

    cols = one_op("StaticSlice", [("f32", [5, 12])], [("f32", [5, 4])], {"begin": [6], "end": [10], "axes": [1]})
    cp = _compiled_one(cols)
    assert not cp.is_view and cp.kernel is not None
    np.testing.assert_array_equal(cp.execute({0: x})[1], x[:, 6:10])
