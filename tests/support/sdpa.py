"""Scaled dot-product attention graphs (sdpa.md, gqa.md) for the fusion and
oracle tests: ``sdpa_graph`` returns the finalized graph and the ids of its
interesting tensors."""
from __future__ import annotations

from graphc.builder import GraphBuilder


def sdpa_graph(dt="f32", n=2, hq=2, hkv=None, sq=70, skv=300, d=16, scale="mul", mask=None, layout="bhsd",
               gqa=False, out_cast=None, s_dt="f32", stats=False, dropout=False, k_quant=None, v_quant=None,
               k_dhs=False, quant=None, out_quant=False, kv_pages=None, k_out=False, fpmath=None):
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
    * ``s_dt``: the dtype of the scores (the first MatMul's dst and the ops after it);
    * ``stats``: the SoftMax exports its stats (training forward, ids["stats"]);
    * ``dropout``: a Dropout on the probabilities (ids "seed", "offset", "prob");
    * ``k_quant`` / ``v_quant`` (sdpa_with_compressed_kv.md): K / V given as
      ``(dtype, group, axis, zps, cast)``: s8/u8/s4/u4 through a per-group
      DynamicDequantize to ``dt`` (``cast``: to f32, then a TypeCast to ``dt``)
      with groups of ``group`` along the head dim (``axis`` "d") or the sequence
      ("s"), with zero points of the src's dtype if ``zps`` (ids "k_scales",
      "k_zps", ...); in the bshd layout the dequantized tensor is reshaped and
      transposed after;
    * ``k_dhs``: K stored [n, h, d, s] (the MatMul does not transpose it);
    * ``kv_pages``: K/V stored as pages [n, h * pages, s / pages, d] (dequantized
      per page), reshaped to [n, h, s, d];
    * ``k_out``: the dequantized K is a graph output too (ids "k_deq");
    * ``fpmath``: the graph's fpmath_mode (applied to integer inputs too, as the
      compressed-KV doc asks);
    * ``quant`` (sdpa_quantized.md): Q/K/V of that dtype (f8_e4m3, f8_e5m2, s8, u8)
      through per-tensor Dequantize to f32 and the probabilities through a
      Quantize -> Dequantize pair; ``out_quant``: the output quantized to it too.
    Returns (graph, ids: {"q", "k", "v", "scale", "mask", "fill", "s_kv", "s_q", "out", ...})."""
    hkv = hq if hkv is None else hkv
    b = GraphBuilder(**({"fpmath_mode": fpmath, "fpmath_mode_apply_to_int": True} if fpmath else {}))
    ids = {}

    def reshape(x, shape):
        return b.op("StaticReshape", [x], out=[(x.dtype, shape)], attrs={"shape": shape, "special_zero": False})[0]

    def transpose(x, order):
        shape = [x.shape[i] for i in order]
        return b.op("StaticTranspose", [x], out=[(x.dtype, shape)], attrs={"order": order})[0]

    def operand(name, shape, spec):
        """(the graph's input, the operand's value): ``dt``, or dequantized from ``spec`` / ``quant``."""
        if quant:
            x = b.tensor(quant, shape)
            zps = [128] if quant == "u8" else [0] if quant == "s8" else None
            attrs = {"qtype": "per_tensor", "scales": [QUANT_SCALES[name]]} | ({"zps": zps} if zps else {})
            return x, b.op("Dequantize", [x], out=[("f32", shape)], attrs=attrs)[0]
        if spec is None:
            x = b.tensor(dt, shape)
            return x, x
        qdt, group, axis, zps, cast = spec
        x = b.tensor(qdt, shape)
        groups = [1] * len(shape)
        groups[-1 if (axis == "d") != (name == "k" and k_dhs) else -2] = group
        pshape = [e // g for e, g in zip(shape, groups)]
        sdt = "f32" if cast else dt
        params = [b.tensor(sdt, pshape)] + ([b.tensor(qdt, pshape)] if zps else [])
        ids[f"{name}_scales"] = params[0].id
        if zps:
            ids[f"{name}_zps"] = params[1].id
        y = b.op("DynamicDequantize", [x] + params, out=[(sdt, shape)],
                 attrs={"qtype": "per_group", "group_shape": groups})[0]
        if cast:
            y = b.op("TypeCast", [y], out=[(dt, shape)])[0]
        ids[f"{name}_deq"] = y.id
        return x, y

    transpose_b = True
    if layout == "bshd":
        (q0, q), (k0, k), (v0, v) = (operand(x, [n, s_, h * d], spec) for x, s_, h, spec in
                                     (("q", sq, hq, None), ("k", skv, hkv, k_quant), ("v", skv, hkv, v_quant)))
        q = transpose(reshape(q, [n, sq, hq, d]), [0, 2, 1, 3])
        k = transpose(reshape(k, [n, skv, hkv, d]), [0, 2, 3, 1])
        v = transpose(reshape(v, [n, skv, hkv, d]), [0, 2, 1, 3])
        transpose_b = False
    else:
        q0, q = operand("q", [n, hq, sq, d], None)
        kv = [n, hkv * kv_pages, skv // kv_pages, d] if kv_pages else [n, hkv, skv, d]
        k0, k = operand("k", [n, hkv, d, skv] if k_dhs else kv, k_quant)
        v0, v = operand("v", kv, v_quant)
        if kv_pages:
            k, v = reshape(k, [n, hkv, skv, d]), reshape(v, [n, hkv, skv, d])
        transpose_b = not k_dhs
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
    if quant:
        dt = "f32"   # the dequantized values and the probabilities
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
    sm_out = [(dt, sshape)] + ([("f32", sshape[:-1] + [1])] if stats else [])
    p, *st = b.op("SoftMax", [x], out=sm_out, attrs={"axis": -1})
    if stats:
        ids["stats"] = st[0].id
    if dropout:
        seed, offset, prob = b.tensor("s64", [1]), b.tensor("s64", [1]), b.tensor("f32", [1])
        ids.update(seed=seed.id, offset=offset.id, prob=prob.id)
        p = b.op("Dropout", [p, seed, offset, prob], out=[(dt, sshape)])[0]
    if quant:
        pq = {"qtype": "per_tensor", "scales": [QUANT_SCALES["p"]]} | ({"zps": [0]} if quant in ("s8", "u8") else {})
        p = b.op("Quantize", [p], out=[(quant, sshape)], attrs=pq)[0]
        p = b.op("Dequantize", [p], out=[("f32", sshape)], attrs=pq)[0]
    o = b.op("MatMul", [p, v], out=[(dt, lead + [sq, d])])[0]
    if gqa:
        o = reshape(o, [n, hq, sq, d])
    if layout == "bshd":
        o = reshape(transpose(o, [0, 2, 1, 3]), [n, sq, hq * d])
    if out_cast:
        o = b.op("TypeCast", [o], out=[(out_cast, list(o.shape))])[0]
    if out_quant:
        o = b.op("Quantize", [o], out=[(quant, list(o.shape))],
                 attrs={"qtype": "per_tensor", "scales": [QUANT_SCALES["out"]]})[0]
    ids["out"] = o.id
    if k_out:
        b.op("End", [b.graph.tensors[ids["k_deq"]]], out=[])
        b.graph.set_ports(outputs=[o.id, ids["k_deq"]])
    return b.finalize(), ids


#: per-tensor scales of quantized SDPA's Dequantize (Q, K, V), of the probabilities and the output
QUANT_SCALES = {"q": 0.0625, "k": 0.125, "v": 0.25, "p": 1 / 128, "out": 0.05}
#: the range of each compressed K/V dtype (raw values drawn in it, zero points near its middle)
INT_RANGE = {"s8": (-128, 127), "u8": (0, 255), "s4": (-8, 7), "u4": (0, 15)}


def sdpa_inputs(g, ids, seed=0, fill=float("-inf")):
    """Random inputs (graphc.fill) with a scale of 1/sqrt(d)-like size, the mask
    fill ``fill`` and, for the bottom-right causal mask, s_kv and s_q the real lengths."""
    import numpy as np

    from graphc.fill import make_inputs
    ins = make_inputs(g, seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("q", "k", "v"):
        x = ins[ids[name]]
        lt = g.tensors[ids[name]]
        if lt.dtype.value in INT_RANGE:   # compressed K/V or int8 quantized SDPA: (x - zp) * scale ~ N(0, 1.5)
            lo, hi = INT_RANGE[lt.dtype.value]
            ins[ids[name]] = rng.integers(lo, hi + 1, x.shape).astype(x.dtype)
            if f"{name}_scales" in ids:
                sc = ins[ids[f"{name}_scales"]]
                ins[ids[f"{name}_scales"]] = (rng.uniform(1.0, 2.0, sc.shape) * 1.5 / (hi - lo)).astype(sc.dtype)
            if f"{name}_zps" in ids:
                zp = ins[ids[f"{name}_zps"]]
                mid, spread = (lo + hi + 1) // 2, max(1, (hi - lo) // 16)
                ins[ids[f"{name}_zps"]] = rng.integers(mid - spread, mid + spread + 1, zp.shape).astype(zp.dtype)
        else:
            ins[ids[name]] = (rng.standard_normal(x.shape) * 1.5).astype(x.dtype)
    if "scale" in ids:
        ins[ids["scale"]] = np.array([0.3], ins[ids["scale"]].dtype)
    if "fill" in ids:
        ins[ids["fill"]] = np.array([fill], ins[ids["fill"]].dtype)
    if "seed" in ids:
        ins[ids["seed"]] = np.array([1234567 + seed], ins[ids["seed"]].dtype)
        ins[ids["offset"]] = np.array([89], ins[ids["offset"]].dtype)
        ins[ids["prob"]] = np.array([0.3], np.float32)
    if "s_kv" in ids:
        q, k = g.tensors[ids["q"]], g.tensors[ids["k"]]
        ins[ids["s_kv"]] = np.array([k.shape[-2]], np.int32)
        ins[ids["s_q"]] = np.array([q.shape[-2]], np.int32)
    return ins


def check_sdpa(g, ids, seed=0, fill=float("-inf")):
    """One partition, planned as attention, whose kernel keeps no S x S buffer;
    its outputs against the reference (check_compiled)."""
    from graphc.codegen.attention import BM_PACKED, BM_WIDE, BN_WIDE, FEW_KEYS_TILE, SCORES_MAX
    from graphc.codegen.kernel import NUM_THREADS
    from support import check_compiled
    parts = g.get_partitions("fusion")
    assert len(parts) == 1, [(p.kind, [o.id for o in p.ops]) for p in parts]
    (part,) = parts
    assert part.pattern == "sdpa" and part.plan.shape == "attention"
    assert len(part.ops) == len(g.ops)
    cp = part.compile()
    assert "attn_exp_row" in cp.source and ("gemm_f32" in cp.source or "gemm_bf16" in cp.source)
    kinds = [k for k, _ in cp.arg_plan]
    assert "tmp" not in kinds                       # no intermediate tensor in memory (no dequantized K/V)
    ws = [n for k, (n, _) in ((k, r) for k, r in cp.arg_plan if k == "ws")]
    # workspaces: tiles, whatever the sequence length (query blocks grow when K/V are dequantized),
    # or a head's K^T or V in the bf16 tile's panels (keys x head dim, padded): never S x S
    packed = any(o.kind in ("Dequantize", "DynamicDequantize") for o in g.ops.values())
    sm = next(o for o in part.ops if o.kind == "SoftMax")
    sq, skv = sm.inputs[0].shape[-2:]
    mm1, mm2 = (o for o in part.ops if o.kind == "MatMul")
    d = mm1.inputs[0].shape[-2 if mm1.attr("transpose_a") else -1]
    dv = max(e for e in mm2.outputs[0].shape[-2:] if e != sq) if set(mm2.outputs[0].shape[-2:]) != {sq} else sq
    panels = -(-skv // BN_WIDE) * BN_WIDE * 32 * (-(-max(d, dv) // 32) + 1)   # (a panel is 32 columns wide)
    # (and a query block's scores over all keys, at most SCORES_MAX, kept between two sweeps; with
    # every key in one block, tall query blocks of at most FEW_KEYS_TILE scores and output rows)
    tiles = max((BM_PACKED if packed else BM_WIDE) * BN_WIDE, FEW_KEYS_TILE)
    assert max(ws) <= NUM_THREADS * max(tiles, panels, SCORES_MAX)
    return check_compiled(g, sdpa_inputs(g, ids, seed, fill))


def sdpa_backward_graph(dt="f32", n=2, h=2, sq=70, skv=150, d=16, scale="mul", mask=None, dropout=False,
                        dmask=False):
    """sdpa.md's training backward: S = Q @ K^T -> [scale] -> [Add mask or ``mask="causal_tl"``:
    the implicit causal Select(GenIndex row >= GenIndex col, S, -inf)] -> Subtract stats
    -> Exp = P; dV = ([Dropout] -> [TypeCast] P)^T @ dO; dP = dO @ V^T -> [Dropout];
    dS = P * (dP - ReduceSum(O * dO)) (``dmask``: dS leaves through an End: dM);
    -> [scale] -> [TypeCast] -> dQ = dS @ K, dK = dS^T @ Q.  Q/K/V/O/dO and the
    gradients are ``dt``, Stats and the scores f32 (bf16/f16: TypeCasts before the
    gradient MatMuls, O * dO in ``dt``).  Returns (graph, ids: q, k, v, o, do, stats,
    scale, mask, seed, offset, prob, dq, dk, dv, dm)."""
    b = GraphBuilder()
    q, k, v = b.tensor(dt, [n, h, sq, d]), b.tensor(dt, [n, h, skv, d]), b.tensor(dt, [n, h, skv, d])
    o, do = b.tensor(dt, [n, h, sq, d]), b.tensor(dt, [n, h, sq, d])
    stats = b.tensor("f32", [n, h, sq, 1])
    ids = dict(q=q.id, k=k.id, v=v.id, o=o.id, do=do.id, stats=stats.id)
    ss = [n, h, sq, skv]
    kind = "Divide" if scale == "div" else "Multiply"
    f = b.tensor("f32", [1]) if scale else None
    if f is not None:
        ids["scale"] = f.id

    def cast(x):
        return b.op("TypeCast", [x], out=[(dt, list(x.shape))])[0] if dt != "f32" else x

    if dropout:
        seed, offset, prob = b.tensor("s64", [1]), b.tensor("s64", [1]), b.tensor("f32", [1])
        ids.update(seed=seed.id, offset=offset.id, prob=prob.id)

    def drop(x):
        return b.op("Dropout", [x, seed, offset, prob], out=[("f32", ss)])[0] if dropout else x

    s = b.op("MatMul", [q, k], out=[("f32", ss)], attrs={"transpose_b": True})[0]
    if f is not None:
        s = b.op(kind, [s, f], out=[("f32", ss)])[0]
    if mask == "add":
        m = b.tensor("f32", [n, 1, sq, skv])
        ids["mask"] = m.id
        s = b.op("Add", [s, m], out=[("f32", ss)])[0]
    elif mask == "causal_tl":   # torchbench's implicit causal mask: Select(row >= col, S, fill)
        row = b.op("GenIndex", [s], out=[("s32", ss)], attrs={"axis": -2})[0]
        col = b.op("GenIndex", [s], out=[("s32", ss)], attrs={"axis": -1})[0]
        fill = b.tensor("f32", [1])
        ids["fill"] = fill.id
        s = b.op("Select", [b.op("GreaterEqual", [row, col], out=[("boolean", ss)])[0], s, fill],
                 out=[("f32", ss)])[0]
    p = b.op("Exp", [b.op("Subtract", [s, stats], out=[("f32", ss)])[0]], out=[("f32", ss)])[0]
    dv = b.op("MatMul", [cast(drop(p)), do], out=[(dt, [n, h, skv, d])], attrs={"transpose_a": True})[0]
    dp = drop(b.op("MatMul", [do, v], out=[("f32", ss)], attrs={"transpose_b": True})[0])
    od = b.op("Multiply", [o, do], out=[(dt, [n, h, sq, d])])[0]
    r = b.op("ReduceSum", [od], out=[(dt, [n, h, sq, 1])], attrs={"axes": [-1], "keep_dims": True})[0]
    ds = b.op("Multiply", [p, b.op("Subtract", [dp, r], out=[("f32", ss)])[0]], out=[("f32", ss)])[0]
    if dmask:
        b.op("End", [ds], out=[])
        ids["dm"] = ds.id
    if f is not None:
        ds = b.op(kind, [ds, f], out=[("f32", ss)])[0]
    ds = cast(ds)
    dq = b.op("MatMul", [ds, k], out=[(dt, [n, h, sq, d])])[0]
    dk = b.op("MatMul", [ds, q], out=[(dt, [n, h, skv, d])], attrs={"transpose_a": True})[0]
    ids.update(dq=dq.id, dk=dk.id, dv=dv.id)
    b.graph.set_ports(outputs=[dq.id, dk.id, dv.id] + ([ids["dm"]] if dmask else []))
    return b.finalize(), ids


def sdpa_backward_inputs(g, ids, seed=0):
    """Random Q, K, V, dO, a mask, and O and Stats that graphc's reference of the
    forward computes from them (so that the backward sees a consistent forward)."""
    import numpy as np

    from graphc import reference
    from graphc.fill import make_inputs
    ins = make_inputs(g, seed)
    rng = np.random.default_rng(seed + 1)
    for name in ("q", "k", "v", "do"):
        ins[ids[name]] = (rng.standard_normal(ins[ids[name]].shape)).astype(ins[ids[name]].dtype)
    if "scale" in ids:
        ins[ids["scale"]] = np.array([0.3], np.float32)
    if "seed" in ids:
        ins[ids["seed"]] = np.array([1234567 + seed], ins[ids["seed"]].dtype)
        ins[ids["offset"]] = np.array([89], ins[ids["offset"]].dtype)
        ins[ids["prob"]] = np.array([0.3], np.float32)
    q, k, v = (g.tensors[ids[x]] for x in ("q", "k", "v"))
    n, h, sq, d = q.shape
    fg, fids = sdpa_graph(q.dtype.value, n=n, hq=h, sq=sq, skv=k.shape[-2], d=d, stats=True,
                          dropout="seed" in ids, mask="add" if "mask" in ids else "causal_tl" if "fill" in ids else None,
                          scale=None if "scale" not in ids else
                          "div" if any(o.kind == "Divide" for o in g.ops.values()) else "mul")
    if "fill" in ids:
        ins[ids["fill"]] = np.array([-np.inf], np.float32)
    fins = {fids[x]: ins[ids[x]] for x in ("q", "k", "v", "scale", "mask", "fill", "seed", "offset", "prob")
            if x in ids}
    out = reference.run(fg, fins)
    ins[ids["o"]] = out[fids["out"]].astype(ins[ids["o"]].dtype)
    ins[ids["stats"]] = out[fids["stats"]].astype(np.float32)
    return ins


def check_sdpa_backward(g, ids, seed=0):
    """The backward graph is one partition (End aside), planned as attention, whose
    kernel keeps no S x S buffer; dQ, dK, dV (and dM) against the reference."""
    from graphc.codegen.attention import BK, BQ
    from graphc.codegen.kernel import NUM_THREADS
    from support import check_compiled
    parts = [p for p in g.get_partitions("fusion") if any(o.kind != "End" for o in p.ops)]
    assert len(parts) == 1, [(p.kind, [o.id for o in p.ops]) for p in parts]
    (part,) = parts
    assert part.pattern == "sdpa_backward" and part.plan.shape == "attention"
    cp = part.compile()
    assert "gemm_f32" in cp.source and "tmp" not in [k for k, _ in cp.arg_plan]
    q = g.tensors[ids["q"]]
    ws = [n for kind, (n, _) in ((kind, r) for kind, r in cp.arg_plan if kind == "ws")]
    rows = q.shape[0] * q.shape[1] * q.shape[2]
    assert max(ws) <= max(NUM_THREADS * BQ * max(BK, q.shape[-1]), rows)   # tiles and one value per row
    return check_compiled(g, sdpa_backward_inputs(g, ids, seed))


def mqa_rows_graph(dt="f32", n=2, m=40, d=8, h=3, nk=72, dv=5, mask=True):
    """JAX MQA (oneDNN's float_mqa_jax_fusion): S = Q [n, m, d] @ K [n, d, h * nk], split by
    heads to [n, h, m, nk], [+ mask] -> SoftMax -> merged back to [n, m, h * nk] ->
    O = V [n, dv, m] @ P: the second MatMul sums over the queries (the softmax's rows)."""
    b = GraphBuilder()
    q, k, v = b.tensor(dt, [n, m, d]), b.tensor(dt, [n, d, h * nk]), b.tensor(dt, [n, dv, m])
    s = b.op("MatMul", [q, k], out=[(dt, [n, m, h * nk])])[0]
    s = b.op("StaticReshape", [s], out=[(dt, [n, m, h, nk])], attrs={"shape": [n, m, h, nk], "special_zero": False})[0]
    s = b.op("StaticTranspose", [s], out=[(dt, [n, h, m, nk])], attrs={"order": [0, 2, 1, 3]})[0]
    if mask:
        s = b.op("Add", [s, b.tensor(dt, [n, h, m, nk])], out=[(dt, [n, h, m, nk])])[0]
    p = b.op("SoftMax", [s], out=[(dt, [n, h, m, nk])], attrs={"axis": 3, "mode": "inf_as_zero"})[0]
    p = b.op("StaticTranspose", [p], out=[(dt, [n, m, h, nk])], attrs={"order": [0, 2, 1, 3]})[0]
    p = b.op("StaticReshape", [p], out=[(dt, [n, m, h * nk])],
             attrs={"shape": [n, m, h * nk], "special_zero": False})[0]
    b.op("MatMul", [v, p], out=[(dt, [n, dv, h * nk])])
    return b.finalize()


def check_mqa_rows(g):
    """One ``attention_rows`` partition whose workspaces are tiles of whole rows (no M x N
    matrix); its output against the reference (check_compiled)."""
    from graphc.codegen.attention_rows import BM
    from graphc.codegen.kernel import NUM_THREADS
    from support import check_compiled
    parts = g.get_partitions("fusion")
    assert [(p.pattern, p.plan.shape) for p in parts] == [("sdpa", "attention_rows")]
    cp = parts[0].compile()
    assert "attn_exp_row" in cp.source and ("gemm_f32" in cp.source or "gemm_bf16" in cp.source)
    assert "tmp" not in [k for k, _ in cp.arg_plan]
    sm = next(o for o in g.ops.values() if o.kind == "SoftMax")
    m, nk = sm.outputs[0].shape[-2:]
    ws = [n for kind, (n, _) in ((kind, r) for kind, r in cp.arg_plan if kind == "ws")]
    assert max(ws) < m * nk * NUM_THREADS or m <= BM   # a block of rows, not the scores
    return check_compiled(g)
