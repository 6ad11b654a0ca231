"""Scaled dot-product attention graphs (sdpa.md, gqa.md) for the fusion and
oracle tests: ``sdpa_graph`` returns the finalized graph and the ids of its
interesting tensors."""
from __future__ import annotations

from graphc.builder import GraphBuilder


def sdpa_graph(dt="f32", n=2, hq=2, hkv=None, sq=70, skv=300, d=16, scale="mul", mask=None, layout="bhsd",
               gqa=False, out_cast=None, s_dt="f32"):
    """Q [n, hq, sq, d] @ K^T -> scale -> mask -> SoftMax -> @ V -> O [n, hq, sq, d].

    * ``scale``: "mul" (scores * f), "mul_swapped" (f * scores), "div" (scores / f) or None;
    * ``mask``: None, "add" (+ mask [n, 1, sq, skv]), "select" (boolean mask,
      fill), "causal_tl" / "causal_br" (GenIndex, [Add s_kv, Subtract s_q],
      GreaterEqual, Select with fill);
    * ``layout``: "bhsd" (4-D inputs and output) or "bshd": Q/K/V given as
      [n, s, h * d] and reshaped/transposed in (K transposed straight to
      [n, h, d, s]), the output transposed and reshaped back to [n, sq, hq * d];
    * ``hkv``: K/V heads (MQA: 1 broadcasting; with ``gqa``, 4-D GQA through
      StaticReshapes to 5-D around the MatMuls, the mask reshaped too);
    * ``out_cast``: a TypeCast of the output to that dtype;
    * ``s_dt``: the dtype of the scores (the first MatMul's dst and the ops after it).
    Returns (graph, ids: {"q", "k", "v", "scale", "mask", "fill", "s_kv", "s_q", "out"})."""
    hkv = hq if hkv is None else hkv
    b = GraphBuilder()
    ids = {}

    def reshape(x, shape):
        return b.op("StaticReshape", [x], out=[(x.dtype, shape)], attrs={"shape": shape, "special_zero": False})[0]

    def transpose(x, order):
        shape = [x.shape[i] for i in order]
        return b.op("StaticTranspose", [x], out=[(x.dtype, shape)], attrs={"order": order})[0]

    transpose_b = True
    if layout == "bshd":
        q0, k0, v0 = b.tensor(dt, [n, sq, hq * d]), b.tensor(dt, [n, skv, hkv * d]), b.tensor(dt, [n, skv, hkv * d])
        q = transpose(reshape(q0, [n, sq, hq, d]), [0, 2, 1, 3])
        k = transpose(reshape(k0, [n, skv, hkv, d]), [0, 2, 3, 1])
        v = transpose(reshape(v0, [n, skv, hkv, d]), [0, 2, 1, 3])
        transpose_b = False
    else:
        q0, k0, v0 = b.tensor(dt, [n, hq, sq, d]), b.tensor(dt, [n, hkv, skv, d]), b.tensor(dt, [n, hkv, skv, d])
        q, k, v = q0, k0, v0
    ids.update(q=q0.id, k=k0.id, v=v0.id)
    lead = [n, hq]
    if gqa:
        rep = hq // hkv
        q = reshape(q, [n, hkv, rep, sq, d])
        k = reshape(k, [n, hkv, 1] + list(k.shape[2:]))
        v = reshape(v, [n, hkv, 1, skv, d])
        lead = [n, hkv, rep]
    sshape = lead + [sq, skv]
    x = b.op("MatMul", [q, k], out=[(s_dt, sshape)], attrs={"transpose_b": transpose_b})[0]
    if scale:
        f = b.tensor(s_dt, [1])
        ids["scale"] = f.id
        kind = "Divide" if scale == "div" else "Multiply"
        x = b.op(kind, [f, x] if scale == "mul_swapped" else [x, f], out=[(s_dt, sshape)])[0]
    if mask in ("add", "select"):
        m = b.tensor(s_dt if mask == "add" else "boolean", [n, 1, sq, skv])
        ids["mask"] = m.id
        if gqa:
            m = reshape(m, [n, 1, 1, sq, skv])
        if mask == "add":
            x = b.op("Add", [x, m], out=[(s_dt, sshape)])[0]
        else:
            fill = b.tensor(s_dt, [1])
            ids["fill"] = fill.id
            x = b.op("Select", [m, x, fill], out=[(s_dt, sshape)])[0]
    elif mask in ("causal_tl", "causal_br"):
        row = b.op("GenIndex", [x], out=[("s32", sshape)], attrs={"axis": -2})[0]
        col = b.op("GenIndex", [x], out=[("s32", sshape)], attrs={"axis": -1})[0]
        if mask == "causal_br":
            s_kv, s_q = b.tensor("s32", [1]), b.tensor("s32", [1])
            ids.update(s_kv=s_kv.id, s_q=s_q.id)
            row = b.op("Add", [row, s_kv], out=[("s32", sshape)])[0]
            row = b.op("Subtract", [row, s_q], out=[("s32", sshape)])[0]
        cond = b.op("GreaterEqual", [row, col], out=[("boolean", sshape)])[0]
        fill = b.tensor(s_dt, [1])
        ids["fill"] = fill.id
        x = b.op("Select", [cond, x, fill], out=[(s_dt, sshape)])[0]
    p = b.op("SoftMax", [x], out=[(dt, sshape)], attrs={"axis": -1})[0]
    o = b.op("MatMul", [p, v], out=[(dt, lead + [sq, d])])[0]
    if gqa:
        o = reshape(o, [n, hq, sq, d])
    if layout == "bshd":
        o = reshape(transpose(o, [0, 2, 1, 3]), [n, sq, hq * d])
    if out_cast:
        o = b.op("TypeCast", [o], out=[(out_cast, list(o.shape))])[0]
    ids["out"] = o.id
    return b.finalize(), ids


def sdpa_inputs(g, ids, seed=0, fill=float("-inf")):
    """Random inputs (graphc.fill) with a scale of 1/sqrt(d)-like size, the mask
    fill ``fill`` and, for the bottom-right causal mask, s_kv and s_q the real lengths."""
    import numpy as np

    from graphc.fill import make_inputs
    ins = make_inputs(g, seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("q", "k", "v"):
        ins[ids[name]] = (rng.standard_normal(ins[ids[name]].shape) * 1.5).astype(ins[ids[name]].dtype)
    if "scale" in ids:
        ins[ids["scale"]] = np.array([0.3], ins[ids["scale"]].dtype)
    if "fill" in ids:
        ins[ids["fill"]] = np.array([fill], ins[ids["fill"]].dtype)
    if "s_kv" in ids:
        q, k = g.tensors[ids["q"]], g.tensors[ids["k"]]
        ins[ids["s_kv"]] = np.array([k.shape[-2]], np.int32)
        ins[ids["s_q"]] = np.array([q.shape[-2]], np.int32)
    return ins
