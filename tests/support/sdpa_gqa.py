"""GQA and MQA training backward graphs (gqa.md): K and V have fewer heads than
Q and broadcast over the query heads of their group in the MatMuls; dK and dV
are ReduceSums of the per-query-head gradients over those heads.

* ``form="5d"``: gqa.md's shapes, Q/O/dO [n, hkv, rep, sq, d], K/V
  [n, hkv, 1, skv, d], dK/dV reduced over axis 2 (kept, or not: 4-D dK/dV);
* ``form="mqa4d"``: MQA by numpy broadcast, Q/O/dO [n, rep, sq, d], K/V [n, 1, skv, d]
  (``hkv`` must be 1), dK/dV reduced over axis 1;
* ``form="gqa4d"``: gqa.md's 4-D GQA, Q/O/dO [n, hkv * rep, sq, d], Stats, K/V
  [n, hkv, skv, d] (and an added mask) StaticReshaped to the 5-D shapes, dQ and
  dK/dV (kept dims) reshaped back to 4-D.

The forward (O and Stats the backward reads) is graphc's reference of the
matching forward graph (support.sdpa.sdpa_graph: 4-D GQA through reshapes, or
MQA), on the same Q, K, V, mask and Dropout numbers."""
from __future__ import annotations

import numpy as np

from graphc.builder import GraphBuilder


def gqa_backward_graph(dt="f32", n=2, hkv=2, rep=2, sq=40, skv=72, d=16, form="5d", scale="mul", mask=None,
                       dropout=False, dmask=False, keep_dims=True, sum_dv=True):
    """sdpa.md's backward graph with GQA/MQA shapes.  ``mask``: None, "add" (+ mask)
    or "causal" (Select(boolean top-left causal mask, S, -inf)), the mask
    broadcast over every head; ``sum_dv=False``: dV per query head (no ReduceSum).
    Returns (graph, ids: q, k, v, o, do, stats, scale, mask, fill, seed, offset,
    prob, dq, dk, dv, dm, and the dims in ids["dims"])."""
    assert form != "mqa4d" or hkv == 1
    lead, kv_lead, axis = ([n, hkv, rep], [n, hkv, 1], 2) if form != "mqa4d" else ([n, rep], [n, 1], 1)
    ss = lead + [sq, skv]
    b = GraphBuilder()

    def op(kind, ins, shape=ss, odt="f32", **attrs):
        return b.op(kind, ins, out=[(odt, shape)], attrs=attrs)[0]

    def reshape(x, shape):
        if form != "gqa4d":
            return x
        return b.op("StaticReshape", [x], out=[(x.dtype, shape)], attrs={"shape": shape, "special_zero": False})[0]

    def given(xdt, shape):
        """An input of ``shape`` (gqa4d: given with the 5-D dims 1 and 2 merged)."""
        return b.tensor(xdt, shape[:1] + [shape[1] * shape[2]] + shape[3:] if form == "gqa4d" else shape)

    q0, o0, do0 = (given(dt, lead + [sq, d]) for _ in range(3))
    k0, v0 = given(dt, kv_lead + [skv, d]), given(dt, kv_lead + [skv, d])
    stats0 = given("f32", lead + [sq, 1])
    q, o, do = (reshape(x, lead + [sq, d]) for x in (q0, o0, do0))
    k, v = (reshape(x, kv_lead + [skv, d]) for x in (k0, v0))
    stats = reshape(stats0, lead + [sq, 1])
    ids = dict(q=q0.id, k=k0.id, v=v0.id, o=o0.id, do=do0.id, stats=stats0.id,
               dims=dict(n=n, hkv=hkv, rep=rep, sq=sq, skv=skv, d=d, form=form, scale=scale, mask=mask))

    def cast(x):
        return op("TypeCast", [x], list(x.shape), dt) if dt != "f32" else x

    if dropout:
        seed, offset, prob = b.tensor("s64", [1]), b.tensor("s64", [1]), b.tensor("f32", [1])
        ids.update(seed=seed.id, offset=offset.id, prob=prob.id)

    def drop(x):
        return op("Dropout", [x, seed, offset, prob]) if dropout else x

    kind = "Divide" if scale == "div" else "Multiply"
    f = b.tensor("f32", [1]) if scale else None
    s = op("MatMul", [q, k], transpose_b=True)
    if f is not None:
        ids["scale"] = f.id
        s = op(kind, [s, f])
    if mask:
        mshape = [n] + [1] * (len(lead) - 1) + [sq, skv]
        m = given("f32", mshape) if mask == "add" else b.tensor("boolean", mshape)
        ids["mask"] = m.id
        if mask == "add":
            s = op("Add", [s, reshape(m, mshape)])
        else:
            fill = b.tensor("f32", [1])
            ids["fill"] = fill.id
            s = op("Select", [m, s, fill])
    p = op("Exp", [op("Subtract", [s, stats])])

    def head_sum(x, really=True):
        if not really:
            return x
        shape = list(x.shape)
        shape[axis] = 1
        if not keep_dims:
            del shape[axis]
        x = op("ReduceSum", [x], shape, dt, axes=[axis], keep_dims=keep_dims)
        return reshape(x, [n, hkv, skv, d]) if keep_dims else x

    dv = head_sum(op("MatMul", [cast(drop(p)), do], lead + [skv, d], dt, transpose_a=True), sum_dv)
    dp = drop(op("MatMul", [do, v], transpose_b=True))
    r = op("ReduceSum", [op("Multiply", [o, do], lead + [sq, d], dt)], lead + [sq, 1], dt, axes=[-1], keep_dims=True)
    ds = op("Multiply", [p, op("Subtract", [dp, r])])
    if dmask:
        b.op("End", [ds], out=[])
        ids["dm"] = ds.id
    if f is not None:
        ds = op(kind, [ds, f])
    ds = cast(ds)
    dq = op("MatMul", [ds, k], lead + [sq, d], dt)
    dq = reshape(dq, [n, hkv * rep, sq, d])
    dk = head_sum(op("MatMul", [ds, q], lead + [skv, d], dt, transpose_a=True))
    ids.update(dq=dq.id, dk=dk.id, dv=dv.id)
    b.graph.set_ports(outputs=[dq.id, dk.id, dv.id] + ([ids["dm"]] if dmask else []))
    return b.finalize(), ids


def gqa_backward_inputs(g, ids, seed=0):
    """Random Q, K, V, dO (a mask), and the O and Stats of graphc's reference of the
    forward (support.sdpa.sdpa_graph on the same values, its 4-D tensors reshaped)."""
    from graphc import reference
    from graphc.fill import make_inputs

    from .sdpa import sdpa_graph
    dims = ids["dims"]
    n, hkv, rep, sq, skv, d = (dims[x] for x in ("n", "hkv", "rep", "sq", "skv", "d"))
    ins = make_inputs(g, seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("q", "k", "v", "do"):
        ins[ids[name]] = rng.standard_normal(ins[ids[name]].shape).astype(ins[ids[name]].dtype)
    if "scale" in ids:
        ins[ids["scale"]] = np.array([0.3], np.float32)
    if dims["mask"] == "causal":
        ins[ids["mask"]] = np.broadcast_to(np.tri(sq, skv, dtype=bool), g.tensors[ids["mask"]].shape).copy()
        ins[ids["fill"]] = np.array([-np.inf], np.float32)
    if "seed" in ids:
        ins[ids["seed"]] = np.array([1234567 + seed], ins[ids["seed"]].dtype)
        ins[ids["offset"]] = np.array([89], ins[ids["offset"]].dtype)
        ins[ids["prob"]] = np.array([0.3], np.float32)
    fg, fids = sdpa_graph(g.tensors[ids["q"]].dtype.value, n=n, hq=hkv * rep, hkv=hkv, gqa=dims["form"] != "mqa4d",
                          sq=sq, skv=skv, d=d, stats=True, dropout="seed" in ids, scale=dims["scale"],
                          mask="add" if dims["mask"] else None)
    fins = {fids[x]: ins[ids[x]].reshape(fg.tensors[fids[x]].shape)
            for x in ("q", "k", "v", "scale", "mask", "seed", "offset", "prob") if x in ids}
    if dims["mask"] == "causal":   # the forward adds -inf where the backward's Select fills it
        fins[fids["mask"]] = np.where(ins[ids["mask"]], 0, -np.inf).astype(np.float32).reshape(-1, 1, sq, skv)
    out = reference.run(fg, fins)
    ins[ids["o"]] = out[fids["out"]].reshape(g.tensors[ids["o"]].shape).astype(ins[ids["o"]].dtype)
    ins[ids["stats"]] = out[fids["stats"]].reshape(g.tensors[ids["stats"]].shape).astype(np.float32)
    return ins


def check_gqa_backward(g, ids, seed=0):
    """One partition (End aside), planned as attention, its kernel keeping no S x S
    buffer nor any per-query-head dK/dV; dQ, dK, dV (and dM) against the reference."""
    from graphc.codegen.attention import BK, BQ
    from graphc.codegen.kernel import NUM_THREADS
    from support import check_compiled
    parts = [p for p in g.get_partitions("fusion") if any(o.kind != "End" for o in p.ops)]
    assert len(parts) == 1, [(p.kind, [o.id for o in p.ops]) for p in parts]
    (part,) = parts
    assert part.pattern == "sdpa_backward" and part.plan.shape == "attention"
    assert len(part.ops) == len([o for o in g.ops.values() if o.kind != "End"])
    cp = part.compile()
    assert "gemm_f32" in cp.source and "tmp" not in [k for k, _ in cp.arg_plan]
    ws = [n for kind, (n, _) in ((kind, r) for kind, r in cp.arg_plan if kind == "ws")]
    rows = int(np.prod(g.tensors[ids["q"]].shape[:-1]))
    assert max(ws) <= max(NUM_THREADS * BQ * max(BK, g.tensors[ids["q"]].shape[-1]), rows)
    return check_compiled(g, gqa_backward_inputs(g, ids, seed))
