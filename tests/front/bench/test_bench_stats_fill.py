"""graphc bench's inputs for a training-backward graph: the softmax stats are the
log-sum-exp of the scores the graph computes (as the forward exports them), so that
Exp(scores - stats) does not overflow (random stats made every gradient non-finite)."""
import numpy as np

from graphc import reference
from graphc.bench.stats_fill import consistent_stats
from graphc.fill import make_inputs
from support.sdpa import sdpa_backward_graph, sdpa_backward_inputs


def test_stats_are_the_forwards():
    g, ids = sdpa_backward_graph("f32", n=1, h=2, sq=12, skv=20, d=8, mask="add")
    want = sdpa_backward_inputs(g, ids)            # stats from the forward's reference
    ins = {t: a for t, a in want.items() if t != ids["stats"]}
    ins[ids["stats"]] = np.zeros_like(want[ids["stats"]])
    got = consistent_stats(g, ins)
    np.testing.assert_allclose(got[ids["stats"]], want[ids["stats"]], rtol=1e-6, atol=1e-6)
    assert got[ids["q"]] is ins[ids["q"]]           # the other inputs as they were


def test_gradients_stay_finite():
    g, ids = sdpa_backward_graph("bf16", n=1, h=2, sq=16, skv=16, d=64, scale=None)
    raw = make_inputs(g, 0)
    assert not all(np.isfinite(v).all() for v in reference.run(g, raw).values())   # random stats overflow
    out = reference.run(g, consistent_stats(g, raw))
    assert all(np.isfinite(v.astype(np.float32)).all() for v in out.values())
