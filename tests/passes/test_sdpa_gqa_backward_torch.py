"""GQA/MQA training backward graphs (gqa.md) through graphc's reference and the
compiled attention kernel against torch autograd of the forward
softmax(Q K^T * f + mask) [* dropout mask / (1 - p)] @ V, K and V broadcast
over the query heads of their group by torch's matmul (its autograd sums their
gradients over those heads), the dropout mask from graphc's Dropout numbers."""
import numpy as np
import pytest

import graphc
from graphc import reference
from graphc.tolerances import ORACLE
from support import assert_close, n64, t64
from support.sdpa_gqa import gqa_backward_graph, gqa_backward_inputs

torch = pytest.importorskip("torch")


def torch_gradients(g, ids, ins):
    """dQ, dK, dV and dM (the scores' gradient) by torch autograd, float64."""
    from graphc.ops.misc import dropout_uniform
    q, k, v = (t64(ins[ids[n]]).requires_grad_() for n in ("q", "k", "v"))
    lead = list(g.tensors[ids["dm" if "dm" in ids else "stats"]].shape[:-2])   # the scores' batch dims
    kv = lead[:-1] + [1] if ids["dims"]["form"] == "gqa4d" else list(k.shape[:-2])   # (4-D GQA: as 5-D)
    s = q.reshape(lead + list(q.shape[-2:])) @ k.reshape(kv + list(k.shape[-2:])).transpose(-1, -2) * \
        float(ins[ids["scale"]][0])
    if "fill" in ids:
        s = s.masked_fill(~torch.from_numpy(np.asarray(ins[ids["mask"]])), float("-inf"))
    elif "mask" in ids:
        s = s + t64(ins[ids["mask"]]).reshape([lead[0]] + [1] * (len(lead) - 1) + list(s.shape[-2:]))
    s.retain_grad()
    p = torch.softmax(s, -1)
    if "prob" in ids:
        pr = float(ins[ids["prob"]][0])
        keep = dropout_uniform(tuple(p.shape), int(ins[ids["seed"]][0]), int(ins[ids["offset"]][0])) > pr
        p = p * torch.from_numpy(keep) / (1 - pr)
    o = p @ v.reshape(kv + list(v.shape[-2:]))
    o.backward(t64(ins[ids["do"]]).reshape(o.shape))
    return {"dq": q.grad, "dk": k.grad, "dv": v.grad, "dm": s.grad}


@pytest.mark.parametrize("dt", ["f32", "bf16"])
@pytest.mark.parametrize("form,mask,dropout", [("5d", None, False), ("5d", "causal", True), ("5d", "add", False),
                                               ("gqa4d", "add", True)])
def test_gqa_backward_vs_torch_autograd(dt, form, mask, dropout):
    g, ids = gqa_backward_graph(dt, n=1, hkv=2, rep=2, sq=16, skv=24, d=8, form=form, mask=mask, dropout=dropout,
                                dmask=True)
    ins = gqa_backward_inputs(g, ids, seed=7)
    want = torch_gradients(g, ids, ins)
    got = reference.run(g, ins)
    compiled = graphc.compile(g, "fusion").run(ins)
    for name in ("dq", "dk", "dv", "dm"):   # (dM is f32, from bf16 operands: compared at dt)
        assert_close(got[ids[name]], n64(want[name]), dt, ORACLE, f"reference {name} {dt} mask={mask}")
        assert_close(compiled[ids[name]], n64(want[name]), dt, ORACLE, f"compiled {name} {dt} mask={mask}")


def test_mqa_4d_backward_vs_torch_autograd():
    g, ids = gqa_backward_graph("f32", n=2, hkv=1, rep=3, form="mqa4d", sq=12, skv=20, d=8, mask="add")
    ins = gqa_backward_inputs(g, ids, seed=8)
    want = torch_gradients(g, ids, ins)
    got = graphc.compile(g, "fusion").run(ins)
    for name in ("dq", "dk", "dv"):
        assert_close(got[ids[name]], n64(want[name]), "f32", ORACLE, f"mqa {name}")
