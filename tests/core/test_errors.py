"""What errors say: every part an error quotes is capped (graphc.errors.quote),
so that a message stays bounded whatever the size of the shapes, lists and
names it quotes."""
import pytest

from graphc import Graph, LogicalTensor, Op
from graphc.errors import MAX_ITEMS, MAX_QUOTE, InvalidGraph, InvalidShape, describe_op, quote


def test_a_wrong_rank_among_million_dim_shapes_gives_a_short_message():
    g = Graph()
    src = LogicalTensor(0, "f32", [1] * 1_000_000)
    with pytest.raises(InvalidShape) as e:
        g.add_op(Op(0, "ReLU", [src], [LogicalTensor(1, "f32", [1] * 999_999)], name="r" * 100_000))
    text = str(e.value)
    assert len(text) < 6 * MAX_QUOTE + 200
    assert "output rank differs from the inferred one" in text and "output 0 (dst, tensor 1)" in text
    assert f"expected [{', '.join(['1'] * MAX_ITEMS)}, ... ({1_000_000 - MAX_ITEMS} more)]" in text
    assert f"found [{', '.join(['1'] * MAX_ITEMS)}, ... ({999_999 - MAX_ITEMS} more)]" in text
    assert f"... ({100_000 - MAX_QUOTE} more characters)" in text   # the op's name
    assert len(e.value.found) == 999_999   # the error keeps what it found whole


@pytest.mark.parametrize("value, shown", [
    ([1, 2, 3], "[1, 2, 3]"),
    (tuple(range(MAX_ITEMS)), str(tuple(range(MAX_ITEMS)))),
    (list(range(MAX_ITEMS + 1)), "[" + ", ".join(map(str, range(MAX_ITEMS))) + ", ... (1 more)]"),
    (("a",) * (MAX_ITEMS + 2), "(" + ", ".join(["'a'"] * MAX_ITEMS) + ", ... (2 more))"),
    ("x" * (MAX_QUOTE + 7), "x" * MAX_QUOTE + "... (7 more characters)"),
    ("short", "short"),
    (None, "None"),
])
def test_quote(value, shown):
    assert quote(value) == shown


def test_quote_caps_nested_lists_and_every_part():
    nested = [[0] * 1000] * 1000
    assert len(quote(nested)) <= MAX_QUOTE + 40
    e = InvalidGraph("m" * 10_000, op="o" * 10_000, where="w" * 10_000, expected=nested, found="f" * 10_000,
                     path="p" * 10_000)
    assert len(str(e)) < 6 * (MAX_QUOTE + 40)
    assert str(e).count("more characters") == 6   # each of the six parts cut


def test_describe_op_caps_the_name():
    class Named:
        id, kind, name = 3, "ReLU", "n" * 5000
    assert describe_op(Named()) == f'op 3 (ReLU "{"n" * MAX_QUOTE}... ({5000 - MAX_QUOTE} more characters)")'


def _deep(n=50_000, kind=dict):
    x = 0
    for _ in range(n):
        x = {"a": x} if kind is dict else [x]
    return x


def test_short_quotes_any_value_in_bounded_depth_and_length():
    from graphc.errors import short
    assert short([1, 2, "x"]) == "[1, 2, 'x']" and short("x" * 10, 5) == "'xxxx... (7 more characters)"
    assert short(_deep()) == "{'a': {'a': {'a': {...}}}}" and short(_deep(kind=list)) == "[[[[...]]]]"
    assert len(short(list(range(10 ** 6)))) < 120


D, L = _deep(), _deep(kind=list)


@pytest.mark.parametrize("make", [
    lambda: Op(0, "ReLU", name=D),
    lambda: Op(D, "ReLU"),
    lambda: Graph().add_op(Op(0, L, [LogicalTensor(0, "f32", [2])], [LogicalTensor(1, "f32", [2])])),
    lambda: Graph().add_op(Op(0, "Elu", [LogicalTensor(0, "f32", [2])], [LogicalTensor(1, "f32", [2])], {"alpha": D})),
    lambda: Graph().add_op(Op(0, "StaticTranspose", [LogicalTensor(0, "f32", [2])], [LogicalTensor(1, "f32", [2])],
                              {"order": L})),
    lambda: LogicalTensor(0, "f32", L),
    lambda: LogicalTensor(0, "f32", [D]),
    lambda: LogicalTensor(D, "f32", [2]),
    lambda: LogicalTensor(0, D, [2]),
    lambda: LogicalTensor(0, "f32", [2], [L]),
    lambda: LogicalTensor(0, "f32", [2], None, D),
    lambda: LogicalTensor(0, "f32", [2], None, "strided", L),
    lambda: Graph(engine_kind=D),
    lambda: Graph(fpmath_mode=L),
    lambda: Graph().set_ports(inputs=L),
    lambda: Graph().set_ports(outputs=[D]),
])
def test_values_nested_50000_deep_give_graphc_errors(make):
    """Building with the Python API: every value an error quotes is quoted a few
    levels deep (a RecursionError came from repr of the whole of it)."""
    from graphc.errors import GraphcError
    with pytest.raises(GraphcError) as e:
        make()
    assert len(str(e.value)) < 1000
