"""SDPA for training (sdpa.md): the forward exporting the SoftMax's stats, with
and without a Dropout on the probabilities, is one partition and one
flash-style kernel whose outputs (attention and stats) equal graphc's
reference; the kernel drops exactly the elements the Dropout reference drops."""
import numpy as np
import pytest

from graphc import reference
from support import check_compiled
from support.sdpa import (check_sdpa, check_sdpa_backward, sdpa_backward_graph, sdpa_backward_inputs, sdpa_graph,
                          sdpa_inputs)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "add", "causal_tl"])
def test_forward_exports_stats(dt, mask):
    g, ids = sdpa_graph(dt, mask=mask, stats=True, sq=70, skv=150)
    out = check_sdpa(g, ids)
    assert out[ids["stats"]].shape == (2, 2, 70, 1)


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "causal_br"])
def test_forward_dropout_and_stats(dt, mask):
    g, ids = sdpa_graph(dt, mask=mask, stats=True, dropout=True, sq=70, skv=150)
    check_sdpa(g, ids)


def test_dropout_drops_the_reference_elements():
    """With V the identity the output rows are the dropped probabilities
    themselves: zeros exactly where the reference's Dropout mask is 0."""
    g, ids = sdpa_graph("f32", n=1, hq=2, sq=40, skv=16, d=16, stats=True, dropout=True)
    ins = sdpa_inputs(g, ids)
    ins[ids["v"]] = np.broadcast_to(np.eye(16, dtype=np.float32), (1, 2, 16, 16)).copy()
    got = check_compiled(g, ins)[ids["out"]]
    want = reference.run(g, ins)[ids["out"]]
    assert ((got == 0) == (want == 0)).all() and (want == 0).mean() > 0.2


def test_dropout_bad_probability_is_a_fault_naming_the_dropout():
    from graphc.errors import RuntimeFault
    g, ids = sdpa_graph("f32", n=1, hq=1, sq=8, skv=8, d=8, dropout=True)
    ins = sdpa_inputs(g, ids)
    ins[ids["prob"]] = np.array([1.5], np.float32)
    cp = g.get_partitions("fusion")[0].compile()
    with pytest.raises(RuntimeFault, match="Dropout|probability"):
        cp.execute(ins)


def test_training_forward_gqa_layout():
    g, ids = sdpa_graph("f32", hq=4, hkv=2, gqa=True, layout="bshd", mask="add", stats=True, dropout=True,
                        sq=40, skv=72)
    check_sdpa(g, ids)


# -- backward ---------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("dropout", [False, True])
def test_backward_one_kernel(dt, dropout):
    g, ids = sdpa_backward_graph(dt, mask="add", dropout=dropout)
    check_sdpa_backward(g, ids)


@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_backward_with_dmask_output(dt):
    g, ids = sdpa_backward_graph(dt, scale="div", mask="add", dropout=True, dmask=True, sq=40, skv=72)
    out = check_sdpa_backward(g, ids)
    assert out[ids["dm"]].shape == (2, 2, 40, 72)


def test_backward_no_scale_no_mask_odd_sizes():
    g, ids = sdpa_backward_graph("f32", n=1, h=3, sq=130, skv=67, d=24, scale=None)
    check_sdpa_backward(g, ids)


def test_backward_gradients_match_forward_dropout_mask():
    """The backward's dV is zero in exactly the key rows no query keeps: with every
    query dropping key 0 the gradient of V's row 0 is 0 (p = 1 drops all: dV = 0)."""
    g, ids = sdpa_backward_graph("f32", n=1, h=1, sq=16, skv=16, d=8, dropout=True)
    ins = sdpa_backward_inputs(g, ids)
    ins[ids["prob"]] = np.array([1.0], np.float32)
    got = check_compiled(g, ins)
    assert (got[ids["dv"]] == 0).all()
