"""Applying a case's knobs to a graph JSON (as a dict) and loading the result.

The file is first read as benchdnn reads it: on the driver's engine (the CPU:
a file dumped on a GPU engine runs here), strides written with a rank other
than the shape's taken as dense (benchdnn's plain tag), declared input ports
that no op consumes left out.  Kinds, attributes,
data types, properties and the fpmath mode are edited in place; new input
shapes are propagated op by op through shape inference (ranks may change),
quantization parameters fitted to the shapes (graphc.bench.quant), then
``graphc.load_graph`` checks the whole graph.  Tensors whose shape comes out
unchanged keep their declared strides (a Reorder's output layout).
Everything wrong with the knobs or the resulting graph raises a GraphcError,
which the driver reports as invalid_arguments.
"""
from __future__ import annotations

import copy
import re
from string import ascii_lowercase

from ..errors import GraphcError, InvalidArguments, InvalidDataType
from ..jsonio import json_shape, json_strides, load_graph
from ..op import Op
from ..ops import get_schema
from ..types import LogicalTensor
from .quant import fit_per_channel, fit_per_group

#: op families whose kind --op-kind may change (or remove, with undef)
KIND_FAMILIES = ("eltwise", "eltwise_bwd", "binary")
#: input ports whose dim 0 is the minibatch, and shape attributes that hold it
MB_PORTS = ("src", "src_0", "src_1", "diff_dst", "dst")
MB_ATTRS = ("src_shape", "dst_shape")


def build_graph(doc: dict, values: dict):
    """A finalized Graph from the JSON dict ``doc`` with the knob ``values``
    ({knob name: parsed value}) applied; ``doc`` is not modified."""
    if not _well_formed(doc):
        return load_graph(doc)  # the loader says what is wrong
    d = copy.deepcopy(doc)
    ops = d["graph"]
    _as_benchdnn_reads(d)
    if values["attr-fpmath"] is not None:
        d["fpmath_mode"] = values["attr-fpmath"].mode
        d["fpmath_mode_apply_to_int"] = values["attr-fpmath"].apply_to_int
    reshape = bool(values["op-kind"] or values["op-attrs"] or values["in-shapes"] or values["mb"])
    for oid, kind in values["op-kind"].items():
        _set_kind(d, _op(ops, oid), kind)
    for oid, attrs in values["op-attrs"].items():
        _set_attrs(_op(ops, oid), attrs)
    _set_dtypes(ops, values["dt"])
    for tid, prop in values["tensor-property"].items():
        for t in _occurrences(ops, tid, "--tensor-property"):
            t["property_type"] = prop.value
    if reshape:
        inputs = _input_ids(ops)
        new = _input_shapes(ops, inputs, values["in-shapes"])
        if values["mb"]:
            _set_mb(ops, inputs, new, values["mb"])
        _propagate(d, new, values)
    else:
        for od in ops:
            if od["inputs"]:
                fit_per_channel(od, json_shape(od["inputs"][0]["shape"]))
    return load_graph(d)


# ------------------------------------------------------------------ helpers
def _well_formed(d) -> bool:
    """The keys and JSON types the edits below rely on are there."""
    def lt_ok(t):
        return isinstance(t, dict) and isinstance(t.get("id"), int) and isinstance(t.get("dtype"), str) \
            and isinstance(t.get("shape"), list) and isinstance(t.get("stride", []), list)

    def op_ok(od):
        attrs = od.get("attrs", {}) if isinstance(od, dict) else None
        return isinstance(attrs, dict) and all(isinstance(a, dict) for a in attrs.values()) \
            and isinstance(od.get("id"), int) and isinstance(od.get("kind"), str) \
            and all(isinstance(od.get(k), list) and all(map(lt_ok, od[k])) for k in ("inputs", "outputs"))

    return isinstance(d, dict) and isinstance(d.get("graph"), list) and all(map(op_ok, d["graph"])) \
        and all(isinstance(d.get(k, []), list) for k in ("input_ports", "output_ports"))


def _as_benchdnn_reads(d) -> None:
    """The file as benchdnn's driver takes it: on its own engine, which is the CPU
    here; with strides of another rank than the shape's (not oneDNN's unknown
    marker) dropped, so that the tensor is dense (benchdnn's plain tag); and
    without declared input ports that no op consumes (benchdnn builds the graph
    from its ops alone)."""
    d["engine_kind"] = "cpu"
    for t in _tensors(d["graph"]):
        stride, shape = json_strides(t.get("stride")), json_shape(t["shape"])
        if stride is not None and shape is not None and len(stride) != len(shape):
            t["stride"] = []
    _drop_unused_input_ports(d)


def _drop_unused_input_ports(d) -> None:
    """Leave out the declared input ports that no op consumes."""
    if "input_ports" in d:
        used = {t["id"] for od in d["graph"] for t in od["inputs"]}
        d["input_ports"] = [p for p in d["input_ports"] if not isinstance(p, int) or p in used]


def _op(ops, oid) -> dict:
    for od in ops:
        if od["id"] == oid:
            return od
    raise InvalidArguments("no op with this id in the graph", found=oid)


def _tensors(ops):
    for od in ops:
        yield from od["inputs"]
        yield from od["outputs"]


def _occurrences(ops, tid, knob) -> list[dict]:
    found = [t for t in _tensors(ops) if t["id"] == tid]
    if not found:
        raise InvalidArguments(f"{knob}: no tensor with this id in the graph", found=tid)
    return found


def _producers(ops) -> dict[int, dict]:
    return {t["id"]: od for od in ops for t in od["outputs"]}


def _input_ids(ops) -> list[int]:
    produced = _producers(ops)
    out = []
    for od in ops:
        for t in od["inputs"]:
            if t["id"] not in produced and t["id"] not in out:
                out.append(t["id"])
    return out


# ---------------------------------------------------------------- op kinds
def _family(kind: str) -> str:
    return get_schema(kind).family


def _set_kind(d, od, kind):
    if _family(od["kind"]) not in KIND_FAMILIES:
        raise InvalidArguments("--op-kind applies to binary and eltwise ops only", found=f"op {od['id']} {od['kind']}")
    if kind == "undef":
        _remove(d, od)
        return
    if _family(kind) not in KIND_FAMILIES:
        raise InvalidArguments("--op-kind: the new kind must be a binary or eltwise op", found=kind)
    od["kind"] = kind


def _remove(d, od):
    """Drop ``od``, passing its (produced) input through to its output's consumers."""
    ops = d["graph"]
    produced = _producers(ops)
    ins = od["inputs"]
    if len(ins) == 1:
        keep = ins[0]
    else:
        fed = [t for t in ins if t["id"] in produced]
        if len(ins) != 2 or len(fed) != 1:
            raise InvalidArguments("--op-kind=undef: cannot tell which input passes through: exactly one input "
                                   "of a binary op must come from another op", found=f"op {od['id']}")
        keep = fed[0]
    gone = [t["id"] for t in od["outputs"]]
    ops.remove(od)
    for other in ops:
        other["inputs"] = [copy.deepcopy(keep) if t["id"] in gone else t for t in other["inputs"]]
    if "output_ports" in d:
        d["output_ports"] = [keep["id"] if p in gone else p for p in d["output_ports"]]
    _drop_unused_input_ports(d)


# --------------------------------------------------------------- attributes
_BOOLS = {"0": False, "1": True, "false": False, "true": True}


def _leading_s64(text: str) -> int:
    """One s64[] element as benchdnn reads the dims of an --op-attrs value
    (std::stoll): a sign and digits, anything after them ignored, so the
    harness's Interpolate entry 'sizes:1.666667x1' is sizes [1, 1]."""
    m = re.match(r"[+-]?[0-9]+", text)
    if m is None:
        raise ValueError(f"not an integer: {text!r}")
    return int(m.group())


def attr_value(typ: str, text: str):
    """A knob's attribute text as a JSON value of schema type ``typ``:
    s64[] / f32[] / bool[] as '1x2x3' (s64[] elements read as benchdnn reads
    them, see _leading_s64), bool as 0/1/true/false; ValueError when the text
    is not one."""
    if typ == "s64[]":
        return [_leading_s64(v) for v in text.split("x")] if text else []
    if typ.endswith("[]"):
        return [attr_value(typ[:-2], v) for v in text.split("x")] if text else []
    if typ == "s64":
        return int(text)
    if typ == "f32":
        return float(text)
    if typ == "bool":
        if text.lower() not in _BOOLS:
            raise ValueError(f"not a bool: {text!r}")
        return _BOOLS[text.lower()]
    return text


def _set_attrs(od, attrs: dict):
    schema = get_schema(od["kind"])
    table = od.setdefault("attrs", {})
    for name, text in attrs.items():
        spec = schema.attr_spec(name)
        if spec is None:
            raise InvalidArguments(f"--op-attrs: {schema.kind} has no attribute '{name}'",
                                   expected=", ".join(a.name for a in schema.attrs) or "(none)")
        try:
            table[name] = {"type": spec.type, "value": attr_value(spec.type, text)}
        except ValueError:
            raise InvalidArguments("--op-attrs: cannot read the value", where=f"attribute '{name}'",
                                   expected=spec.type, found=repr(text)) from None


# ------------------------------------------------------------- data types
def _set_dtypes(ops, dt):
    if dt is None:
        return
    if isinstance(dt, dict):
        for tid, new in dt.items():
            for t in _occurrences(ops, tid, "--dt"):
                t["dtype"] = new.value
        return
    # as if every f32 in the file said dt, except where an op then rejects the
    # combination: its ports outside the dtype table's first (data) column stay
    # f32, as normalization statistics and scales do in f16 graphs
    was_f32 = {t["id"] for t in _tensors(ops) if t["dtype"] == "f32"}
    for t in _tensors(ops):
        if t["id"] in was_f32:
            t["dtype"] = dt.value
    for od in ops:
        try:
            op = _as_op(od)
        except GraphcError:
            continue  # malformed: the final load reports it
        try:
            op.validate()
        except InvalidDataType:
            table = op.schema.dtypes
            data = set(table.columns[0]) if table is not None else set()
            ports = zip(op.input_names + op.output_names, od["inputs"] + od["outputs"])
            keep = {t["id"] for name, t in ports if name not in data and t["id"] in was_f32}
            for t in _tensors(ops):
                if t["id"] in keep:
                    t["dtype"] = "f32"
        except GraphcError:
            pass  # not a data type matter: the final load reports it


# ------------------------------------------------------------------ shapes
def _tag_strides(shape, tag: str) -> list[int]:
    """Strides for a tag like 'acdb': letters name dims, outermost first."""
    letters = ascii_lowercase[:len(shape)]
    if len(tag) != len(shape) or sorted(tag) != list(letters):
        raise InvalidArguments("--in-shapes: the tag must name each dim once", expected=f"a permutation of "
                               f"'{letters}'", found=repr(tag))
    strides = [0] * len(shape)
    acc = 1
    for ch in reversed(tag):
        dim = ord(ch) - ord("a")
        strides[dim] = acc
        acc *= max(shape[dim], 1)
    return strides


def _tag_of(strides) -> str:
    """The tag of a layout: dims from the largest stride to the smallest."""
    order = sorted(range(len(strides)), key=lambda i: -strides[i])
    return "".join(ascii_lowercase[i] for i in order)


def _input_shapes(ops, inputs, in_shapes) -> dict[int, tuple[list, list]]:
    """{graph input id: (shape, strides)} after --in-shapes."""
    first = {}
    for t in _tensors(ops):
        first.setdefault(t["id"], t)
    new = {tid: (list(first[tid]["shape"]), list(first[tid].get("stride") or [])) for tid in inputs}
    for tid, spec in in_shapes.items():
        if tid not in new:
            continue  # not a graph input (benchdnn's harnesses name outputs, or ports of older op versions)
        shape, strides = new[tid]
        if spec.shape is not None:
            shape, strides = list(spec.shape), []
        if spec.tag is not None:
            strides = _tag_strides(shape, spec.tag)
        elif spec.strides is not None:
            if len(spec.strides) != len(shape):
                raise InvalidArguments("--in-shapes: strides and shape differ in rank", expected=len(shape),
                                       found=len(spec.strides))
            strides = list(spec.strides)
        new[tid] = (shape, strides)
    return new


def _set_mb(ops, inputs, new, mb):
    """dim 0 of the graph's data inputs (and of src_shape / dst_shape
    attributes) that carry the minibatch of the first one; layouts are kept."""
    data = set()
    for od in ops:
        names = get_schema(od["kind"]).input_names(None, len(od["inputs"]))
        data |= {t["id"] for n, t in zip(names, od["inputs"]) if n in MB_PORTS and t["id"] in inputs}
    carriers = [tid for tid in inputs if tid in data and new[tid][0]]
    if not carriers:
        return
    old = new[carriers[0]][0][0]
    for tid in carriers:
        shape, strides = new[tid]
        if shape[0] == old:
            shape = [mb] + shape[1:]
            new[tid] = (shape, _tag_strides(shape, _tag_of(strides)) if strides else [])
    for od in ops:
        for name in MB_ATTRS:
            a = od.get("attrs", {}).get(name)
            if a and isinstance(a.get("value"), list) and a["value"] and a["value"][0] == old:
                a["value"] = [mb] + a["value"][1:]


def _topo(ops) -> list[dict]:
    produced = _producers(ops)
    done, order = set(), []

    def visit(od, stack=()):
        if id(od) in done:
            return
        if id(od) in stack:
            raise InvalidArguments("graph has a cycle", found=f"op {od['id']}")
        for t in od["inputs"]:
            if t["id"] in produced:
                visit(produced[t["id"]], stack + (id(od),))
        done.add(id(od))
        order.append(od)

    for od in ops:
        visit(od)
    return order


def _as_op(od, known=None, infer=False) -> Op:
    """An unvalidated Op for a JSON op; input shapes from ``known``
    ({id: (shape, strides)}) where given; with ``infer``, outputs of unknown
    rank so that validation infers them."""
    known = known or {}
    ins = []
    for t in od["inputs"]:
        shape, strides = known.get(t["id"], (json_shape(t["shape"]), json_strides(t.get("stride"))))
        ins.append(LogicalTensor(t["id"], t["dtype"], shape, strides or None))
    outs = [LogicalTensor(t["id"], t["dtype"], [] if infer else json_shape(t["shape"]),
                          None if infer else json_strides(t.get("stride"))) for t in od["outputs"]]
    attrs = {k: v.get("value") for k, v in od.get("attrs", {}).items()}
    return Op(od["id"], od["kind"], ins, outs, attrs, od.get("name"))


def _propagate(d, new: dict, values: dict):
    """Infer every op's output shapes from the new input shapes, in topological
    order, fitting quantization parameters to them on the way (the case's knob
    ``values`` say which were given), and write the shapes back (strides become
    dense where a shape changed)."""
    ops = d["graph"]
    known = dict(new)
    for od in _topo(ops):
        fit_per_group(od, known, values["in-shapes"], values["op-attrs"])
        if od["inputs"]:
            fit_per_channel(od, known.get(od["inputs"][0]["id"], (None,))[0])
        op = _as_op(od, known, infer=True)
        op.validate()
        for t, lt in zip(od["outputs"], op.outputs):
            declared = t.get("stride") or []
            keep = list(lt.shape) == list(t["shape"]) and len(declared) == len(lt.shape)
            known[t["id"]] = (list(lt.shape), declared if keep else [])
    for t in _tensors(ops):
        if t["id"] in known:
            t["shape"], t["stride"] = known[t["id"]]
