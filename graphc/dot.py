"""Graphviz DOT output: ops as nodes, tensors as edges, partitions as clusters."""
from __future__ import annotations

import json


def _q(s) -> str:
    return json.dumps(str(s))  # a quoted, escaped DOT string


def _dims(t) -> str:
    return "[?]" if t.shape is None else str(list(t.shape))


def to_dot(graph, partitions) -> str:
    lines = ["digraph graphc {", "  rankdir=TB;", "  node [shape=box, fontname=Helvetica];"]
    placed = set()
    for p in partitions:
        lines.append(f"  subgraph cluster_{int(p.id)} {{")
        lines.append(f"    label={_q(f'partition {p.id}')}; style=rounded;")
        for op in p.ops:
            label = f"{op.id}: {op.kind}" + (f"\n{op.name}" if op.name else "")
            lines.append(f"    op{int(op.id)} [label={_q(label)}];")
            placed.add(op.id)
        lines.append("  }")
    for op in graph.ops.values():
        if op.id not in placed:
            lines.append(f"  op{int(op.id)} [label={_q(f'{op.id}: {op.kind}')}, style=dashed];")
    for tid in graph.input_ports:
        t = graph.tensors[tid]
        lines.append(f"  t{int(tid)} [shape=ellipse, label={_q(f'{tid}: {t.dtype} {list(t.shape)}')}];")
        for cid, _ in graph.consumers.get(tid, []):
            lines.append(f"  t{int(tid)} -> op{int(cid)};")
    for tid, (a, _) in graph.producer.items():   # one edge per tensor and consumer (not per pair of ops)
        t = graph.tensors[tid]
        for b in dict.fromkeys(cid for cid, _ in graph.consumers.get(tid, [])):
            lines.append(f"  op{int(a)} -> op{int(b)} [label={_q(f'{t.id}: {t.dtype} {_dims(t)}')}];")
    for tid in graph.output_ports:
        if tid in graph.producer:
            t = graph.tensors[tid]
            lines.append(f"  t{int(tid)} [shape=ellipse, label={_q(f'{tid}: {t.dtype} {list(t.shape)}')}];")
            lines.append(f"  op{int(graph.producer[tid][0])} -> t{int(tid)};")
    lines.append("}")
    return "\n".join(lines)
