"""Large outputs over recycled buffers (graphc.compiler.recycle): a buffer is handed
out again only once no array refers to it, never while a result lives."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import graphc
from graphc.compiler import recycle

from support import one_op

N = 512 * 1024   # 2 MiB of f32: above recycle.MIN_BYTES (256 KiB)


def _address(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


@pytest.fixture(scope="module")
def relu():
    return graphc.compile(one_op("ReLU", [("f32", [N])], [("f32", [N])]))


def test_a_dropped_output_is_reused_and_a_live_one_never(relu):
    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    first = relu.run({0: x})[1]
    second = relu.run({0: -x})[1]                 # (the first is alive: a buffer of its own)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, np.maximum(x, 0))
    np.testing.assert_array_equal(second, np.maximum(-x, 0))
    view = second[::2]                            # a view keeps its buffer alive too
    spots = {_address(second)}
    del second
    third = relu.run({0: x})[1]
    assert _address(third) not in spots | {_address(first)}
    np.testing.assert_array_equal(view, np.maximum(-x, 0)[::2])
    spots.add(_address(third))
    del third, view
    fourth = relu.run({0: x})[1]                  # now free: the same pages again
    assert _address(fourth) in spots
    np.testing.assert_array_equal(fourth, np.maximum(x, 0))


def test_small_outputs_and_the_limit_leave_numpy_to_allocate(relu, monkeypatch):
    small = graphc.compile(one_op("ReLU", [("f32", [8])], [("f32", [8])]))
    out = small.run({0: np.ones(8, np.float32)})[1]
    assert out.base is None                       # (numpy's own allocation)
    monkeypatch.setattr(recycle, "LIMIT", 0)
    big = relu.run({0: np.ones(N, np.float32)})[1]
    assert big.base is None and big.flags.writeable


def test_threads_get_buffers_of_their_own(relu):
    xs = [np.full(N, i, np.float32) for i in range(4)]
    got = [None] * 4

    def work(i):
        for _ in range(20):
            got[i] = relu.run({0: xs[i]})[1]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, a in enumerate(got):
        assert (a == i).all()
    assert len({_address(a) for a in got}) == 4


def test_the_limit_holds_and_free_buffers_make_room(monkeypatch):
    """Under a limit of three buffers: a fourth live output is numpy's own; once
    the kept ones are dropped, a buffer of another size takes their room."""
    size = 2 << 20
    monkeypatch.setattr(recycle, "_held", {})
    monkeypatch.setattr(recycle, "_bytes", 0)
    monkeypatch.setattr(recycle, "LIMIT", 3 * size)
    live = [recycle.empty((size // 4,), np.float32) for _ in range(4)]
    assert [a.base is None for a in live] == [False, False, False, True]
    assert recycle.kept_bytes() == 3 * size
    del live
    other = recycle.empty((size // 2,), np.float32)       # 2 buffers' worth: two free ones released
    assert other.base is not None and recycle.kept_bytes() <= 3 * size
    assert recycle.kept_bytes() == size + 2 * size
