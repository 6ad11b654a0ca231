"""Convolutions and transposed convolutions (forward and backward) against PyTorch CPU in
float64.  Asymmetric pads are applied with F.pad (or a crop of the transposed
convolution's full output); backward ops are compared with autograd.  graphc runs in
f32, so the ORACLE f32 tolerance applies."""
import numpy as np
import pytest

from graphc.tolerances import ORACLE
from graphc.types import DataType
from support import assert_close, run_graph, t64
from support.windows import from_nxc, nxc, randn_from, same_pads, torch_pads

torch = pytest.importorskip("torch")
F = torch.nn.functional

randn = randn_from(7)

CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
DECONV = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


# ------------------------------------------------------------------ convolution
# (N, C, spatial, OC, kernel, strides, dilations, pads_begin, pads_end, groups)
CONV_CASES = [
    (2, 4, (9,), 6, (3,), (2,), (1,), (1,), (2,), 2),
    (1, 3, (7, 8), 4, (3, 2), (1, 2), (2, 1), (0, 1), (2, 0), 1),
    (2, 6, (6, 5), 6, (2, 3), (2, 1), (1, 2), (1, 0), (0, 2), 3),
    (1, 4, (5, 4, 6), 4, (2, 3, 2), (1, 2, 1), (2, 1, 1), (1, 0, 1), (0, 1, 1), 2),
]


def conv_weights_in(w, fmt):
    """torch's (OC, IC/G, *K) weights in graphc's weights_format."""
    return w if fmt == "OIX" else w.transpose(*range(2, w.ndim), 1, 0)


def conv_weights_out(w, fmt):
    return w if fmt == "OIX" else w.transpose(w.ndim - 1, w.ndim - 2, *range(w.ndim - 2))


@pytest.mark.parametrize("data_format", ["NCX", "NXC"])
@pytest.mark.parametrize("weights_format", ["OIX", "XIO"])
@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[2])}d_g{c[-1]}")
def test_convolution_and_its_gradients(case, data_format, weights_format):
    n, c, sp, oc, k, s, d, pb, pe, g = case
    x, w, b = randn(n, c, *sp), randn(oc, c // g, *k), randn(oc)
    xt, wt = t64(x, True), t64(w, True)
    yt = CONV[len(sp)](F.pad(xt, torch_pads(pb, pe)), wt, t64(b), stride=s, dilation=d, groups=g)
    dy = randn(*yt.shape)
    yt.backward(t64(dy))
    attrs = dict(strides=s, dilations=d, pads_begin=pb, pads_end=pe, groups=g, data_format=data_format,
                 weights_format=weights_format)
    io = nxc if data_format == "NXC" else (lambda a: a)
    back = from_nxc if data_format == "NXC" else (lambda a: a)
    wf = conv_weights_in(w, weights_format)

    y = run_graph("Convolution", [io(x), wf, b], attrs)
    assert_close(back(y), yt.detach().numpy(), "f32", ORACLE, "Convolution")
    dx = run_graph("ConvolutionBackwardData", [io(dy), wf], dict(attrs, dst_shape=io(x).shape))
    assert_close(back(dx), xt.grad.numpy(), "f32", ORACLE, "ConvolutionBackwardData")
    dw = run_graph("ConvolutionBackwardWeights", [io(x), io(dy)], dict(attrs, weights_shape=wf.shape))
    assert_close(conv_weights_out(dw, weights_format), wt.grad.numpy(), "f32", ORACLE, "ConvolutionBackwardWeights")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER", "VALID", "same_upper", "valid"])
def test_convolution_auto_pad(auto_pad):
    x, w = randn(1, 2, 7, 6), randn(3, 2, 4, 3)
    s, d = (2, 1), (1, 2)
    if auto_pad.upper() == "VALID":
        pb = pe = (0, 0)
    else:
        pb, pe = zip(*[same_pads(i, k, st, dl, auto_pad.upper()) for i, k, st, dl in zip((7, 6), (4, 3), s, d)])
    want = F.conv2d(F.pad(t64(x), torch_pads(pb, pe)), t64(w), stride=s, dilation=d).numpy()
    attrs = dict(strides=s, dilations=d, pads_begin=(9, 9), pads_end=(9, 9), auto_pad=auto_pad,
                 data_format="NCX", weights_format="OIX")
    assert_close(run_graph("Convolution", [x, w], attrs), want, "f32", ORACLE, auto_pad)


# ------------------------------------------------------------ transposed convolution
# (N, C, spatial, OC, kernel, strides, dilations, pads (both sides), output_padding, groups)
DECONV_CASES = [
    (2, 4, (5,), 6, (3,), (2,), (1,), (1,), (1,), 2),
    (1, 3, (4, 5), 4, (3, 2), (2, 3), (1, 2), (1, 0), (1, 2), 1),
    (2, 6, (3, 4), 9, (2, 3), (3, 1), (2, 1), (0, 1), (2, 0), 3),
    (1, 2, (3, 2, 3), 4, (2, 2, 3), (2, 1, 2), (1, 2, 1), (1, 0, 1), (1, 0, 0), 2),
]


def deconv_weights_in(w, g, fmt):
    """torch's (IC, OC/G, *K) weights in graphc's format: IOX is torch's order (I
    every group's input channels, O one group's outputs, as in oneDNN's corpus);
    OIX/XIO have O = all output channels and I = input channels of one group."""
    ic, ocg, *k = w.shape
    sp = tuple(range(2, w.ndim))
    if fmt in ("IOX", "XOI"):
        return w if fmt == "IOX" else w.transpose(*sp, 1, 0)
    per_group = w.reshape(g, ic // g, ocg, *k).transpose(1, 0, 2, *range(3, 3 + len(k))).reshape(ic // g, g * ocg, *k)
    return per_group.transpose(1, 0, *sp) if fmt == "OIX" else per_group.transpose(*sp, 0, 1)


def deconv_weights_out(w, g, fmt):
    """graphc's weights in ``fmt`` back to torch's (IC, OC/G, *K)."""
    r = w.ndim
    if fmt in ("IOX", "XOI"):
        return w if fmt == "IOX" else w.transpose(r - 1, r - 2, *range(r - 2))
    to_iox = {"OIX": (1, 0), "XIO": (r - 2, r - 1)}[fmt]
    sp = tuple(range(2, r)) if fmt[0] != "X" else tuple(range(r - 2))
    iox = w.transpose(*to_iox, *sp)
    icg, oc, *k = iox.shape
    return iox.reshape(icg, g, oc // g, *k).transpose(1, 0, 2, *range(3, 3 + len(k))).reshape(g * icg, oc // g, *k)


@pytest.mark.parametrize("data_format", ["NCX", "NXC"])
@pytest.mark.parametrize("weights_format", ["IOX", "OIX", "XOI", "XIO"])
@pytest.mark.parametrize("case", DECONV_CASES, ids=lambda c: f"{len(c[2])}d_g{c[-1]}")
def test_conv_transpose_and_its_gradients(case, data_format, weights_format):
    n, c, sp, oc, k, s, d, p, op_, g = case
    x, w, b = randn(n, c, *sp), randn(c, oc // g, *k), randn(oc)
    xt, wt = t64(x, True), t64(w, True)
    yt = DECONV[len(sp)](xt, wt, t64(b), stride=s, padding=p, output_padding=op_, groups=g, dilation=d)
    dy = randn(*yt.shape)
    yt.backward(t64(dy))
    attrs = dict(strides=s, dilations=d, pads_begin=p, pads_end=p, output_padding=op_, groups=g,
                 data_format=data_format, weights_format=weights_format)
    io = nxc if data_format == "NXC" else (lambda a: a)
    back = from_nxc if data_format == "NXC" else (lambda a: a)
    wf = deconv_weights_in(w, g, weights_format)

    assert_close(back(run_graph("ConvTranspose", [io(x), wf, b], attrs)), yt.detach().numpy(), "f32", ORACLE,
                 "ConvTranspose")
    assert_close(back(run_graph("ConvTransposeBackwardData", [io(dy), wf], attrs)), xt.grad.numpy(), "f32", ORACLE,
                 "ConvTransposeBackwardData")
    dw = run_graph("ConvTransposeBackwardWeights", [io(x), io(dy)], dict(attrs, weights_shape=wf.shape))
    assert_close(deconv_weights_out(dw, g, weights_format), wt.grad.numpy(), "f32", ORACLE,
                 "ConvTransposeBackwardWeights")


def test_conv_transpose_asymmetric_pads_crop_the_full_output():
    x, w = randn(1, 2, 4, 5), randn(2, 3, 3, 2)
    s, pb, pe = (2, 1), (2, 0), (1, 1)
    full = F.conv_transpose2d(t64(x), t64(w), stride=s).numpy()
    want = full[:, :, pb[0]:full.shape[2] - pe[0], pb[1]:full.shape[3] - pe[1]]
    attrs = dict(strides=s, dilations=(1, 1), pads_begin=pb, pads_end=pe, data_format="NCX", weights_format="IOX")
    assert_close(run_graph("ConvTranspose", [x, w], attrs), want, "f32", ORACLE, "ConvTranspose")


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_transpose_same_pads_give_input_times_stride(auto_pad):
    x, w = randn(1, 2, 4, 3), randn(2, 3, 4, 5)
    s, d = (2, 3), (1, 1)
    full = F.conv_transpose2d(t64(x), t64(w), stride=s).numpy()
    sl = []
    for i, k, st in zip((4, 3), (4, 5), s):
        total = k - st                     # ONNX: total = s * (i - 1) + k - i * s
        lo = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        sl.append(slice(lo, lo + i * st))
    attrs = dict(strides=s, dilations=d, pads_begin=(0, 0), pads_end=(0, 0), auto_pad=auto_pad,
                 data_format="NCX", weights_format="IOX")
    assert_close(run_graph("ConvTranspose", [x, w], attrs), full[:, :, sl[0], sl[1]], "f32", ORACLE, auto_pad)


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_low_precision_convolution_rounds_once(dtype):
    np_dt = DataType(dtype).np
    x, w = randn(1, 3, 6, 5).astype(np_dt).astype(np.float64), randn(4, 3, 3, 2).astype(np_dt).astype(np.float64)
    want = F.conv2d(t64(x), t64(w), stride=(1, 2), padding=1).numpy()
    attrs = dict(strides=(1, 2), dilations=(1, 1), pads_begin=(1, 1), pads_end=(1, 1), data_format="NCX",
                 weights_format="OIX")
    y = run_graph("Convolution", [x, w], attrs, dtype=dtype)
    assert y.dtype == np_dt
    assert_close(y, want, dtype, ORACLE, dtype)
