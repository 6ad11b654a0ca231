"""Scaled dot-product attention graphs (sdpa.md) through graphc's reference
against torch.nn.functional.scaled_dot_product_attention (float64 torch on the
very values graphc reads, compared at the output's dtype with the ORACLE
tolerances): no mask, the implicit causal masks (top-left, bottom-right) and
explicit masks (Add, Select), GQA through reshapes."""
import numpy as np
import pytest

from graphc import reference
from graphc.tolerances import ORACLE
from support import assert_close, n64, t64
from support.sdpa import sdpa_graph, sdpa_inputs

torch = pytest.importorskip("torch")
F = torch.nn.functional


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("mask", [None, "causal_tl", "causal_br", "add", "select"])
def test_sdpa_reference_vs_torch(dt, mask):
    sq, skv = 24, 40
    g, ids = sdpa_graph(dt, n=2, hq=3, sq=sq, skv=skv, d=8, mask=mask, scale="div")
    ins = sdpa_inputs(g, ids, seed=4)
    got = reference.run(g, ins)[ids["out"]]
    q, k, v = (t64(ins[ids[n]]) for n in ("q", "k", "v"))
    scale = 1 / float(ins[ids["scale"]][0])
    attn_mask, causal = None, False
    if mask == "causal_tl":
        causal = True        # torch's is_causal is the top-left alignment
    elif mask == "causal_br":
        attn_mask = torch.ones(sq, skv, dtype=torch.bool).tril(diagonal=skv - sq)
    elif mask == "add":
        attn_mask = t64(ins[ids["mask"]])
    elif mask == "select":
        attn_mask = torch.from_numpy(np.asarray(ins[ids["mask"]]))
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, is_causal=causal, scale=scale)
    assert_close(got, n64(want), dt, ORACLE, f"sdpa {dt} mask={mask}")


def test_gqa_reference_vs_torch():
    g, ids = sdpa_graph("f32", n=1, hq=4, hkv=2, gqa=True, sq=16, skv=16, d=8, mask="causal_tl")
    ins = sdpa_inputs(g, ids, seed=5)
    got = reference.run(g, ins)[ids["out"]]
    q, k, v = (t64(ins[ids[n]]) for n in ("q", "k", "v"))
    k, v = (x.repeat_interleave(2, dim=1) for x in (k, v))   # each K/V head serves 2 query heads
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=float(ins[ids["scale"]][0]))
    assert_close(got, n64(want), "f32", ORACLE, "gqa")


def test_training_forward_stats_vs_torch_logsumexp():
    g, ids = sdpa_graph("f32", n=1, hq=2, sq=16, skv=24, d=8, mask="add", stats=True)
    ins = sdpa_inputs(g, ids, seed=6)
    got = reference.run(g, ins)[ids["stats"]]
    q, k, m = (t64(ins[ids[n]]) for n in ("q", "k", "mask"))
    s = q @ k.transpose(-1, -2) * float(ins[ids["scale"]][0]) + m
    assert_close(got, n64(torch.logsumexp(s, -1, keepdim=True)), "f32", ORACLE, "stats")


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("dropout", [False, True])
def test_sdpa_backward_reference_vs_torch_autograd(dt, dropout):
    """sdpa.md's backward graph through graphc's reference against torch autograd of
    the forward (softmax(Q K^T * f + mask) [* dropout mask / (1 - p)]) @ V, the
    dropout mask taken from graphc's Dropout numbers (graphc.ops.misc.dropout_uniform)."""
    from graphc.ops.misc import dropout_uniform
    from support.sdpa import sdpa_backward_graph, sdpa_backward_inputs
    g, ids = sdpa_backward_graph(dt, n=1, h=2, sq=16, skv=24, d=8, mask="add", dropout=dropout, dmask=True)
    ins = sdpa_backward_inputs(g, ids, seed=7)
    out = reference.run(g, ins)
    q, k, v = (t64(ins[ids[n]]).requires_grad_() for n in ("q", "k", "v"))
    s = q @ k.transpose(-1, -2) * float(ins[ids["scale"]][0]) + t64(ins[ids["mask"]])
    s.retain_grad()
    p = torch.softmax(s, -1)
    if dropout:
        pr = float(ins[ids["prob"]][0])
        keep = dropout_uniform(p.shape, int(ins[ids["seed"]][0]), int(ins[ids["offset"]][0])) > pr
        p = p * torch.from_numpy(keep) / (1 - pr)
    (p @ v).backward(t64(ins[ids["do"]]))
    for name, t in (("dq", q), ("dk", k), ("dv", v)):
        assert_close(out[ids[name]], n64(t.grad), dt, ORACLE, f"{name} {dt} dropout={dropout}")
    assert_close(out[ids["dm"]], n64(s.grad), "f32" if dt == "f32" else dt, ORACLE, "dmask")
