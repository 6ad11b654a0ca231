"""Quantization parameters fitted to a case's shapes, as benchdnn's graph driver fits them.

benchdnn rewrites every case's graph before building it (flex_rewrite), and
two of its steps keep quantization parameters in step with the shapes:

- per-channel Quantize / Dequantize: the ``scales`` become as many as the
  channels of the op's input along ``axis`` (the file's values repeated in
  turn); the ``zps`` of an int8 op (u8 / s8 data, zps given) become as many,
  the file's first and zeros after.  A case whose --in-shapes changes the
  channel count, or a file whose scales are written for another count, runs.
- per-group DynamicDequantize: when --in-shapes rewrites one of the op's
  inputs and --op-attrs leaves ``group_shape``, the group shape becomes
  src / scales dim by dim; when --op-attrs sets ``group_shape`` and --in-shapes
  leaves the inputs, the scales (and zero points) take the shape src / group.

Shapes that do not divide are left as they are: the op's validation says
what is wrong.
"""
from __future__ import annotations

INT8 = ("u8", "s8")


def _value(od, name, default=None):
    a = od.get("attrs", {}).get(name)
    return a.get("value", default) if isinstance(a, dict) else default


def fit_per_channel(od: dict, src_shape) -> None:
    """Resize the per-channel scales and zero points of Quantize / Dequantize ``od``
    (a JSON op, edited in place) to ``src_shape[axis]``, its input's channel count."""
    if od["kind"] not in ("Quantize", "Dequantize") or _value(od, "qtype") != "per_channel":
        return
    scales = _value(od, "scales")
    if not isinstance(scales, list) or not scales or not src_shape:
        return
    data = od["inputs"][0] if od["kind"] == "Dequantize" else (od["outputs"] or [{}])[0]
    int8 = data.get("dtype") in INT8
    zps = _value(od, "zps")
    if int8 and not isinstance(zps, list):
        return
    axis = _value(od, "axis", 1)
    if not isinstance(axis, int) or not -len(src_shape) <= axis < len(src_shape):
        return
    channels = src_shape[axis]
    if channels < 0:
        return
    od["attrs"]["scales"]["value"] = [scales[i % len(scales)] for i in range(channels)]
    if int8:
        od["attrs"]["zps"]["value"] = [zps[i] if i < len(zps) else 0 for i in range(channels)]


def _divide(a, b) -> list[int] | None:
    """a / b dim by dim, or None when the ranks differ or a dim does not divide."""
    if a is None or b is None or len(a) != len(b) or any(y <= 0 or x < 0 or x % y for x, y in zip(a, b)):
        return None
    return [x // y for x, y in zip(a, b)]


def fit_per_group(od: dict, known: dict, in_shapes: dict, op_attrs: dict) -> None:
    """Keep a per-group DynamicDequantize's group shape and scale shape in step.
    ``known``: {tensor id: (shape, strides)} of the inputs, edited for the scales
    and zero points; ``in_shapes`` / ``op_attrs``: the case's knob values."""
    if od["kind"] != "DynamicDequantize" or _value(od, "qtype") != "per_group" or len(od["inputs"]) < 2:
        return
    group = _value(od, "group_shape")
    if not isinstance(group, list):
        return
    ids = [t["id"] for t in od["inputs"]]
    src, scale = (known.get(i, (None, None))[0] for i in ids[:2])
    shapes_given = any(i in in_shapes for i in ids)
    group_given = "group_shape" in op_attrs.get(od["id"], {})
    if group_given and not shapes_given:
        new = _divide(src, group)
        if new is not None:
            for i in ids[1:3]:
                known[i] = (new, [])
    elif shapes_given and not group_given:
        new = _divide(src, scale)
        if new is not None:
            od["attrs"]["group_shape"]["value"] = new
