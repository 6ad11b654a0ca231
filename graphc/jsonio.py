"""oneDNN Graph JSON (version 3.x, and the 0.x files of oneDNN Graph's preview
releases, which have the same layout): load, dump, save.

Errors while loading carry the JSON path of the fault, e.g.
``graph[0].inputs[2].dtype``.  oneDNN's dumps write an unknown shape or
strides as ``[-9223372036854775808]`` (DNNL_GRAPH_UNKNOWN_DIM): such a shape
loads as an unknown rank (the op infers it), such strides as not given, and
the marker as one dim of a longer shape as an unknown dim (-1).
"""
from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from pathlib import Path

import numpy as np

from .errors import GraphcError, InvalidArguments, InvalidGraphOp, short
from .builder import Graph
from .graph import ensure_graph
from .op import Op
from .types import ATTR_JSON_TYPES, INT64_MAX, LogicalTensor

_LT_KEYS = ("id", "dtype", "shape", "stride", "layout_type", "property_type")
#: DNNL_GRAPH_UNKNOWN_DIM: what oneDNN's dumps write for a dim, shape or strides not known
UNKNOWN_DIM = -INT64_MAX - 1
#: the JSON versions read: oneDNN 3.x, and oneDNN Graph's 0.x preview releases (same layout)
VERSION = re.compile(r"[03](\.[0-9]+)*")


class _Path:
    def __init__(self, text=""):
        self.text = text

    def key(self, k):
        return _Path(f"{self.text}.{k}" if self.text else str(k))

    def idx(self, i):
        return _Path(f"{self.text}[{i}]")

    def __str__(self):
        return self.text or "(top level)"


def _fail(path, msg, cls=InvalidArguments, **kw):
    return cls(msg, path=str(path), **kw)


def _get(obj, key, path, types, required=True, default=None):
    if not isinstance(obj, dict):
        raise _fail(path, "expected a JSON object", found=type(obj).__name__)
    if key not in obj:
        if required:
            raise _fail(path.key(key), "missing key")
        return default
    v = obj[key]
    if types is not None and (not isinstance(v, types) or (isinstance(v, bool) and bool not in _tuple(types))):
        raise _fail(path.key(key), "wrong JSON type", expected=_tname(types), found=f"{type(v).__name__} {short(v, 60)}")
    return v


def _tuple(t):
    return t if isinstance(t, tuple) else (t,)


def _tname(types):
    names = {int: "integer", float: "number", str: "string", list: "array", dict: "object", bool: "boolean"}
    return " or ".join(names.get(t, t.__name__) for t in _tuple(types))


def _int_list(v, path):
    if not isinstance(v, list):
        raise _fail(path, "expected an array of integers", found=type(v).__name__)
    for i, x in enumerate(v):
        if isinstance(x, bool) or not isinstance(x, int):
            raise _fail(path.idx(i), "expected an integer", found=short(x))
    return v


def json_shape(shape: list) -> list | None:
    """A dumped shape as LogicalTensor takes it: None (unknown rank) for oneDNN's
    unknown-shape marker [UNKNOWN_DIM], -1 for an UNKNOWN_DIM among other dims."""
    if shape == [UNKNOWN_DIM]:
        return None
    return [-1 if v == UNKNOWN_DIM else v for v in shape]


def json_strides(stride: list | None) -> list | None:
    """Dumped strides as LogicalTensor takes them: None (not given) when absent,
    empty or holding oneDNN's unknown marker."""
    return None if not stride or UNKNOWN_DIM in stride else stride


def _lt_from_json(d, path) -> LogicalTensor:
    tid = _get(d, "id", path, int)
    dtype = _get(d, "dtype", path, str)
    shape = json_shape(_int_list(_get(d, "shape", path, list), path.key("shape")))
    stride = _get(d, "stride", path, list, required=False)
    if stride is not None:
        stride = json_strides(_int_list(stride, path.key("stride")))
    layout = _get(d, "layout_type", path, str, required=False, default="strided")
    prop = _get(d, "property_type", path, str, required=False, default="undef")
    try:
        return LogicalTensor(tid, dtype, shape, stride, layout, prop)
    except GraphcError as e:
        field = {"InvalidDataType": "dtype"}.get(type(e).__name__)
        if field is None:
            low = e.message.lower()
            field = ("stride" if "stride" in low else "shape" if ("dim" in low or "shape" in low)
                     else "layout_type" if "layout" in low else "property_type" if "property" in low else "id")
        raise type(e)(e.message, path=str(path.key(field)), expected=e.expected, found=e.found) from None


def _attrs_from_json(d, path) -> dict:
    attrs = {}
    if not isinstance(d, dict):
        raise _fail(path, "expected a JSON object", found=type(d).__name__)
    for name, spec in d.items():
        p = path.key(name)
        typ = _get(spec, "type", p, str)
        if typ not in ATTR_JSON_TYPES:
            raise _fail(p.key("type"), "unknown attribute type", expected=", ".join(ATTR_JSON_TYPES), found=short(typ))
        val = _get(spec, "value", p, None)
        if typ.endswith("[]") and not isinstance(val, list):
            raise _fail(p.key("value"), f"attribute of type {typ} needs an array", found=short(val))
        if not typ.endswith("[]") and isinstance(val, (list, dict)):
            raise _fail(p.key("value"), f"attribute of type {typ} needs a scalar", found=short(val))
        attrs[name] = val
    return attrs


#: the engine kinds of oneDNN a dumped file may name: its graph loads on graphc's
#: one engine, the CPU (benchdnn, too, runs a file on the engine it was given)
DUMPED_ENGINE_KINDS = ("cpu", "gpu")


def graph_from_dict(d: dict, errors: list | None = None) -> Graph:
    """The finalized Graph of JSON object ``d``.  With ``errors`` (a list), an
    op that fails its checks is left out and its error appended, and loading
    goes on with the next op, so that every bad op of a file is reported
    (``graphc validate``); the ports and the graph as a whole are checked only
    when every op passed (without the ops left out they would be judged on
    another graph), and None is returned when an op failed."""
    root = _Path()
    if not isinstance(d, dict):
        raise _fail(root, "a graph JSON must be an object", found=type(d).__name__)
    version = _get(d, "version", root, str, required=False, default="3.0.0")
    if not VERSION.fullmatch(version):
        raise _fail(root.key("version"), "unsupported JSON version", expected="3.x or 0.x", found=short(version))
    engine_kind = _get(d, "engine_kind", root, str, required=False, default="cpu")
    if engine_kind in DUMPED_ENGINE_KINDS:   # a file dumped on another engine runs on the CPU, as benchdnn runs it
        engine_kind = "cpu"
    fpmath_mode = _get(d, "fpmath_mode", root, str, required=False, default="strict")
    to_int = _get(d, "fpmath_mode_apply_to_int", root, (bool, str), required=False, default=False)
    if to_int not in (True, False, "true", "false"):
        raise _fail(root.key("fpmath_mode_apply_to_int"), "expected a boolean", expected="true or false",
                    found=short(to_int))
    det = _get(d, "deterministic", root, (bool, str), required=False, default=False)
    if det not in (True, False, "true", "false"):
        raise _fail(root.key("deterministic"), "expected a boolean", expected="true or false", found=short(det))
    try:
        g = Graph(engine_kind=engine_kind, fpmath_mode=fpmath_mode, fpmath_mode_apply_to_int=to_int in (True, "true"),
                  deterministic=det in (True, "true"))
    except GraphcError as e:
        raise _with_path(e, root.key("engine_kind" if "engine" in e.message else "fpmath_mode")) from None
    ops = _get(d, "graph", root, list)
    for i, od in enumerate(ops):
        try:
            _add_op(g, od, root.key("graph").idx(i))
        except GraphcError as e:
            if errors is None:
                raise
            errors.append(e)
    return _finish(g, d, root) if not errors else None


def _add_op(g: Graph, od, p) -> None:
    """Op JSON object ``od`` (at path ``p``) checked and added to ``g``."""
    oid = _get(od, "id", p, int)
    if not 0 <= oid <= INT64_MAX:
        raise _fail(p.key("id"), "op id must be a non-negative integer that fits in int64",
                    expected=f"0 to {INT64_MAX}", found=oid)
    kind = _get(od, "kind", p, str)
    name = _get(od, "name", p, str, required=False)
    attrs = _attrs_from_json(_get(od, "attrs", p, dict, required=False, default={}), p.key("attrs"))
    ins = [_lt_from_json(t, p.key("inputs").idx(j)) for j, t in enumerate(_get(od, "inputs", p, list))]
    outs = [_lt_from_json(t, p.key("outputs").idx(j)) for j, t in enumerate(_get(od, "outputs", p, list))]
    try:
        op = Op(oid, kind, ins, outs, attrs, name)
    except GraphcError as e:
        raise _with_path(e, p.key("id")) from None
    try:
        g.add_op(op)
    except GraphcError as e:
        raise _with_path(e, p) from None
    _check_attr_types(op, od.get("attrs", {}), p.key("attrs"))


def _finish(g: Graph, d: dict, root) -> Graph:
    inp = _get(d, "input_ports", root, list, required=False)
    outp = _get(d, "output_ports", root, list, required=False)
    if inp is not None:
        _int_list(inp, root.key("input_ports"))
    if outp is not None:
        _int_list(outp, root.key("output_ports"))
    try:
        g.set_ports(inp, outp)
    except GraphcError as e:
        raise _with_path(e, root.key("input_ports" if "input" in e.message else "output_ports")) from None
    try:
        g.finalize()
    except GraphcError as e:
        ports = (e.where or "").startswith("input_ports")
        raise _with_path(e, root.key("input_ports" if ports else "graph")) from None
    return g


def _check_attr_types(op: Op, specs: dict, path) -> None:
    """The declared JSON type of each attribute is the one its schema states."""
    for name, spec in specs.items():
        want = op.schema.attr_spec(name).type
        if spec["type"] != want:
            raise InvalidGraphOp("attribute has the wrong type", op=op, where=f"attribute '{name}'",
                                 expected=want, found=spec["type"], path=str(path.key(name).key("type")))


def _with_path(e: GraphcError, p) -> GraphcError:
    if e.path:
        return e
    return type(e)(e.message, op=e.op, where=e.where, expected=e.expected, found=e.found, path=str(p))


#: The largest graph file read (a oneDNN dump of a large model is a few MB).
MAX_GRAPH_FILE_BYTES = 256 << 20


def read_graph_file(path) -> str:
    """The text of a graph file: a regular file (not a device, FIFO or directory,
    which could block or never end) of at most MAX_GRAPH_FILE_BYTES, in UTF-8."""
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArguments("a graph file path must be a string or a path", found=type(path).__name__)
    shown = str(path) if len(str(path)) <= 200 else str(path)[:200] + "..."
    if str(path).strip() == "":
        raise InvalidArguments("empty graph file path", expected="the path of a graph JSON file", found=repr(shown))
    try:
        try:
            st = os.stat(path)
        except OSError:
            if str(path).lstrip().startswith(("{", "[")):
                raise InvalidArguments("expected a graph file path, found JSON text",
                                       expected="the path of a graph JSON file", found=repr(shown)) from None
            raise
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a character device" if stat.S_ISCHR(st.st_mode)
                    else "a block device" if stat.S_ISBLK(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                    else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise InvalidArguments("cannot read graph file: not a regular file", expected="a regular JSON file",
                                   found=f"{shown}: {kind}")
        if st.st_size > MAX_GRAPH_FILE_BYTES:
            raise InvalidArguments("graph file too large", expected=f"at most {MAX_GRAPH_FILE_BYTES} bytes",
                                   found=f"{shown}: {st.st_size} bytes")
        with open(path, "rb") as f:   # (a file may grow, and a /proc file has size 0)
            data = _read_at_most(f, MAX_GRAPH_FILE_BYTES + 1, st.st_size)
    except (OSError, ValueError) as e:
        raise InvalidArguments("cannot read graph file", found=f"{shown}: {e}") from None
    if len(data) > MAX_GRAPH_FILE_BYTES:
        raise InvalidArguments("graph file too large", expected=f"at most {MAX_GRAPH_FILE_BYTES} bytes",
                               found=f"{shown}: more")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArguments("graph file is not UTF-8 text", found=f"{shown}: {e}") from None


def _read_at_most(f, limit: int, size: int) -> bytes:
    """At most ``limit`` bytes of ``f``: the ``size`` stat gave, then what more
    there is in blocks (``f.read(limit)`` would allocate ``limit`` bytes for a
    file of any size)."""
    chunks, total = [], 0
    want = min(max(size, 0) + 1, limit)
    while total < limit:
        chunk = f.read(want)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        want = min(1 << 16, limit - total)
    return b"".join(chunks)


def load_graph_file(path: str | os.PathLike) -> Graph:
    """Load a finalized Graph from a file path only (what `graphc validate` does)."""
    return _parse(read_graph_file(path))


def graph_file_errors(path) -> tuple[Graph | None, list[GraphcError]]:
    """(the graph or None, every error found) of a graph file: each op that
    fails its checks, or else the first error of the ports and the graph as a
    whole; what ``graphc validate`` reports."""
    errors: list[GraphcError] = []
    try:
        text = read_graph_file(path)
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise InvalidArguments("not valid JSON", found=str(e)[:300]) from None
        g = graph_from_dict(d, errors)
    except GraphcError as e:
        errors.append(e)
        g = None
    return (g if not errors else None), errors


def load_graph(src: str | bytes | os.PathLike | dict) -> Graph:
    """Load a finalized Graph from a path, a JSON string (text starting with '{')
    or a dict."""
    if isinstance(src, dict):
        return graph_from_dict(src)
    if isinstance(src, (str, bytes)) and src.strip() == (b"" if isinstance(src, bytes) else ""):
        raise InvalidArguments("load_graph got an empty string", expected="a path, a JSON string or a dict",
                               found=short(src))
    if isinstance(src, os.PathLike) or (isinstance(src, str) and not src.lstrip().startswith(("{", "["))):
        text = read_graph_file(src)
    elif isinstance(src, (str, bytes, bytearray)):
        text = src
    else:
        raise InvalidArguments("load_graph expects a path, a JSON string or a dict", found=type(src).__name__)
    return _parse(text)


def _parse(text) -> Graph:
    try:
        d = json.loads(text)
    except (ValueError, RecursionError) as e:  # JSONDecodeError, bad UTF-8, ints of over 4300 digits
        raise InvalidArguments("not valid JSON", found=str(e)[:300]) from None
    return graph_from_dict(d)


def lt_to_json(t: LogicalTensor) -> dict:
    if t.unknown_rank:   # oneDNN's marker of an unknown shape
        return {"id": t.id, "dtype": t.dtype.value, "shape": [UNKNOWN_DIM], "stride": [UNKNOWN_DIM],
                "layout_type": t.layout_type.value, "property_type": t.property_type.value}
    return {"id": t.id, "dtype": t.dtype.value, "shape": list(t.shape),
            "stride": list(t.strides) if t.strides is not None else [],
            "layout_type": t.layout_type.value, "property_type": t.property_type.value}


def _f32_text(x: float) -> float:
    """The shortest decimal that reads back as the same f32 (1e-05, not 9.99999974e-06)."""
    return float(str(np.float32(x)))


def attr_to_json(spec, value) -> dict:
    typ = spec.type if spec is not None else "string"
    if typ == "f32":
        value = _f32_text(value)
    elif typ == "f32[]":
        value = [_f32_text(x) for x in value]
    v = list(value) if isinstance(value, tuple) else value
    return {"type": typ, "value": v}


def dump_graph(graph: Graph) -> dict:
    ensure_graph(graph, "dump_graph").finalize()
    ops = []
    for op in sorted(graph.ops.values(), key=lambda o: o.id):
        attrs = {k: attr_to_json(op.schema.attr_spec(k), op.attrs[k]) for k in sorted(op.raw_attrs)}
        ops.append({"id": op.id, "name": op.name if op.name is not None else f"{op.kind}_{op.id}",
                    "kind": op.kind, "attrs": attrs,
                    "inputs": [lt_to_json(graph.tensors.get(t.id, t)) for t in op.inputs],
                    "outputs": [lt_to_json(t) for t in op.outputs]})
    doc = {"version": "3.0.0", "engine_kind": graph.engine_kind, "fpmath_mode": graph.fpmath_mode,
           "fpmath_mode_apply_to_int": "true" if graph.fpmath_mode_apply_to_int else "false"}
    if graph.deterministic:
        doc["deterministic"] = True
    return doc | {"input_ports": graph.input_ports, "output_ports": graph.output_ports, "graph": ops}


def save_graph(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` as JSON to ``path`` (through a temporary file next to it,
    replaced at once); a path that cannot be written is InvalidArguments."""
    doc = dump_graph(graph)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise InvalidArguments("cannot write graph file", found=f"{short(str(path))}: {e.strerror or e}") from None
