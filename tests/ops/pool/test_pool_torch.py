"""Pooling (forward and backward) against PyTorch CPU in float64.  Asymmetric pads are
applied with F.pad; backward ops are compared with autograd.  graphc runs in f32, so
the ORACLE f32 tolerance applies."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from support import assert_close, run_graph, t64
from support.windows import from_nxc, nxc, randn_from, same_pads, torch_pads

torch = pytest.importorskip("torch")
F = torch.nn.functional

randn = randn_from(7)

AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


# ------------------------------------------------------------------------ pooling
# (N, C, spatial, kernel, strides, pads (both sides), ceil)
POOL_CASES = [
    (2, 3, (9,), (3,), (2,), (1,), False),
    (1, 2, (7, 8), (3, 2), (2, 2), (1, 1), True),
    (2, 2, (6, 7), (2, 3), (1, 2), (0, 1), False),
    (1, 2, (5, 6, 7), (2, 3, 2), (2, 1, 2), (1, 1, 0), True),
]


@pytest.mark.parametrize("data_format", ["NCX", "NXC"])
@pytest.mark.parametrize("exclude_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{len(c[2])}d_{'ceil' if c[-1] else 'floor'}")
def test_avg_pool_and_backward(case, exclude_pad, data_format):
    n, c, sp, k, s, p, ceil = case
    if ceil and not exclude_pad:
        pytest.skip("torch clips the divisor of windows overhanging the pads; the doc divides by the kernel size")
    x = randn(n, c, *sp)
    xt = t64(x, True)
    yt = AVG[len(sp)](xt, k, s, p, ceil_mode=ceil, count_include_pad=not exclude_pad)
    dy = randn(*yt.shape)
    yt.backward(t64(dy))
    attrs = dict(kernel=k, strides=s, pads_begin=p, pads_end=p, exclude_pad=exclude_pad, data_format=data_format)
    io = nxc if data_format == "NXC" else (lambda a: a)
    back = from_nxc if data_format == "NXC" else (lambda a: a)
    y = run_graph("AvgPool", [io(x)], dict(attrs, rounding_type="ceil" if ceil else "floor"))
    assert_close(back(y), yt.detach().numpy(), "f32", ORACLE, "AvgPool")
    dx = run_graph("AvgPoolBackward", [io(dy)], dict(attrs, src_shape=io(x).shape))
    assert_close(back(dx), xt.grad.numpy(), "f32", ORACLE, "AvgPoolBackward")


@pytest.mark.parametrize("exclude_pad", [True, False])
def test_avg_pool_asymmetric_pads(exclude_pad):
    x = randn(1, 2, 7, 6)
    k, s, pb, pe = (3, 2), (2, 2), (2, 0), (0, 1)
    total = F.avg_pool2d(F.pad(t64(x), torch_pads(pb, pe)), k, s) * 6
    count = F.avg_pool2d(F.pad(torch.ones(1, 1, 7, 6, dtype=torch.float64), torch_pads(pb, pe)), k, s) * 6
    want = (total / (count if exclude_pad else 6)).numpy()
    attrs = dict(kernel=k, strides=s, pads_begin=pb, pads_end=pe, exclude_pad=exclude_pad, data_format="NCX")
    assert_close(run_graph("AvgPool", [x], attrs), want, "f32", ORACLE, "AvgPool")


MAX_CASES = [  # (N, C, spatial, kernel, strides, dilations, pads_begin, pads_end, ceil)
    (2, 3, (9,), (3,), (2,), (1,), (1,), (0,), False),
    (1, 2, (8, 9), (3, 2), (2, 1), (1, 2), (1, 0), (0, 1), False),
    (1, 2, (7, 8), (2, 3), (2, 2), (2, 1), (1, 1), (1, 1), True),
    (1, 2, (5, 6, 7), (2, 2, 3), (1, 2, 2), (1, 2, 1), (0, 1, 1), (1, 0, 1), False),
]


@pytest.mark.parametrize("data_format", ["NCX", "NXC"])
@pytest.mark.parametrize("case", MAX_CASES, ids=lambda c: f"{len(c[2])}d_{'ceil' if c[-1] else 'floor'}")
def test_max_pool_and_backward(case, data_format):
    n, c, sp, k, s, d, pb, pe, ceil = case
    x = randn(n, c, *sp)
    xt = t64(x, True)
    if pb == pe:
        yt = MAX[len(sp)](xt, k, s, pb, dilation=d, ceil_mode=ceil)
    else:
        yt = MAX[len(sp)](F.pad(xt, torch_pads(pb, pe), value=-np.inf), k, s, 0, dilation=d, ceil_mode=ceil)
    dy = randn(*yt.shape)
    yt.backward(t64(dy))
    attrs = dict(kernel=k, strides=s, dilations=d, pads_begin=pb, pads_end=pe, data_format=data_format)
    io = nxc if data_format == "NXC" else (lambda a: a)
    back = from_nxc if data_format == "NXC" else (lambda a: a)
    y = run_graph("MaxPool", [io(x)], dict(attrs, rounding_type="ceil" if ceil else "floor"))
    assert_close(back(y), yt.detach().numpy(), "f32", ORACLE, "MaxPool")
    dx = run_graph("MaxPoolBackward", [io(x), io(dy)], attrs)
    assert_close(back(dx), xt.grad.numpy(), "f32", ORACLE, "MaxPoolBackward")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_max_pool_auto_pad(auto_pad):
    x = randn(1, 2, 7, 8)
    k, s = (3, 4), (2, 3)
    pb, pe = zip(*[same_pads(i, kk, st, 1, auto_pad) for i, kk, st in zip((7, 8), k, s)])
    want = F.max_pool2d(F.pad(t64(x), torch_pads(pb, pe), value=-np.inf), k, s).numpy()
    attrs = dict(kernel=k, strides=s, pads_begin=(0, 0), pads_end=(0, 0), auto_pad=auto_pad, data_format="NCX")
    assert_close(run_graph("MaxPool", [x], attrs), want, "f32", ORACLE, auto_pad)
