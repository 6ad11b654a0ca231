"""graphc's architecture, read from its source with ``ast``: the import graph of
graphc/ and passes/ (installed as graphc.passes) against the layers of
docs/layers.json, and the size of files and functions.

- Every module belongs to a layer: the part whose ``is`` lists its file, or else
  the part with the longest folder holding it.
- An import (any: module level, in a function, under a condition) from one layer
  to another goes down ``order`` (lowest layer first), never up, and never along
  a ``never`` arrow; and no modules import each other in a circle.
- No file over 700 lines, no function over 120.
"""
from __future__ import annotations

import ast
import functools
import json
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
LAYERS = json.loads((ROOT / "docs" / "layers.json").read_text())
#: where each package's modules live in the repository (pyproject.toml's package-dir)
SOURCES = {"graphc": "graphc", "graphc.passes": "passes"}
MAX_FILE_LINES = 700
MAX_FUNCTION_LINES = 120



# ------------------------------------------------------------------ the modules
def modules() -> dict[str, Path]:
    """{dotted module name: its file} for every module of graphc/ and passes/."""
    out = {}
    for package, folder in SOURCES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join((package, *parts))] = path
    return out


def imported(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that module ``name`` (file ``path``) imports, with
    relative imports resolved: ``from x import y`` imports x.y if that is a module,
    else x; an import of a name inside graphc that is no module counts for the
    nearest enclosing module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets.update(f"{source}.{a.name}" if f"{source}.{a.name}" in known else source for a in node.names)
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def import_graph() -> nx.DiGraph:
    known = modules()
    g = nx.DiGraph()
    g.add_nodes_from(known)
    for name, path in known.items():
        g.add_edges_from((name, target) for target in imported(name, path, known))
    return g


# ------------------------------------------------------------------- the layers
def layer_of(path: Path) -> str | None:
    """The part of docs/layers.json that holds ``path``: the part listing the file,
    else the one with the longest folder above it."""
    rel = path.relative_to(ROOT).as_posix()
    best, best_len = None, -1
    for part, spec in LAYERS["parts"].items():
        for entry in spec["is"]:
            if entry == rel:
                return part
            if entry.endswith("/") and rel.startswith(entry) and len(entry) > best_len:
                best, best_len = part, len(entry)
    return best


@functools.cache
def violations() -> dict[tuple[str, str], list[str]]:
    """{(importer, imported): the rules that import breaks} in the tree."""
    return rule_breaks(import_graph(), modules())


def rule_breaks(g: nx.DiGraph, files: dict[str, Path]) -> dict[tuple[str, str], list[str]]:
    """{(importer, imported): the rules that import breaks} in import graph ``g``."""
    rank = {part: i for i, part in enumerate(LAYERS["order"])}
    never = {(a, b): why for a, b, why in LAYERS["never"]}
    circle = {m: i for i, scc in enumerate(nx.strongly_connected_components(g)) if len(scc) > 1 for m in scc}
    out = {}
    for a, b in g.edges:
        la, lb = layer_of(files[a]), layer_of(files[b])
        why = []
        if a in circle and circle.get(b) == circle[a]:
            why.append("in an import circle")
        if rank[la] < rank[lb]:
            why.append(f"up from {la} to {lb}")
        if (la, lb) in never:
            why.append(f"never {la} -> {lb}: {never[la, lb]}")
        if why:
            out[a, b] = why
    return out


def test_every_module_has_a_layer():
    unplaced = sorted(name for name, path in modules().items() if layer_of(path) is None)
    assert not unplaced, f"modules in no part of docs/layers.json: {unplaced}"


def test_layer_table_is_complete():
    assert sorted(LAYERS["order"]) == sorted(LAYERS["parts"]), "order lists every part once"
    for a, b, _ in LAYERS["never"]:
        assert a in LAYERS["parts"] and b in LAYERS["parts"], (a, b)
    for folder in SOURCES.values():
        assert (ROOT / folder / "__init__.py").is_file(), folder


def test_no_import_breaks_the_layers():
    bad = violations()
    assert not bad, "imports breaking docs/layers.json:\n" + "\n".join(
        f"  {a} -> {b}: {'; '.join(why)}" for (a, b), why in sorted(bad.items()))


def test_the_check_sees_an_import_up_a_never_arrow_and_a_circle():
    """The rules, on the tree's import graph with three imports added: an op family
    importing code generation (up, and never Ops -> Codegen), and the IR and
    its printer importing each other (a circle)."""
    g = import_graph().copy()
    g.add_edge("graphc.ops.eltwise", "graphc.codegen.kernel")
    g.add_edge("graphc.codegen.ir", "graphc.codegen.printer")
    bad = rule_breaks(g, modules())
    assert "up from Ops to Codegen" in bad["graphc.ops.eltwise", "graphc.codegen.kernel"]
    assert any(w.startswith("never Ops -> Codegen") for w in bad["graphc.ops.eltwise", "graphc.codegen.kernel"])
    assert bad["graphc.codegen.ir", "graphc.codegen.printer"] == ["in an import circle"]
    assert bad["graphc.codegen.printer", "graphc.codegen.ir"] == ["in an import circle"]


# --------------------------------------------------------------------- the sizes
def source_files() -> list[Path]:
    return sorted(p for folder in SOURCES.values() for p in (ROOT / folder).rglob("*.py"))


@functools.cache
def long_files() -> set[str]:
    return {p.relative_to(ROOT).as_posix() for p in source_files()
            if len(p.read_text().splitlines()) > MAX_FILE_LINES}


@functools.cache
def long_functions() -> set[str]:
    out = set()

    def visit(node, prefix, rel):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef) and child.end_lineno - child.lineno + 1 > MAX_FUNCTION_LINES:
                    out.add(f"{rel}:{qual}")
                visit(child, qual + ".", rel)
            else:
                visit(child, prefix, rel)

    for path in source_files():
        visit(ast.parse(path.read_text(), str(path)), "", path.relative_to(ROOT).as_posix())
    return out


def test_no_long_file():
    assert not long_files(), f"files over {MAX_FILE_LINES} lines: {sorted(long_files())}"


def test_no_long_function():
    assert not long_functions(), f"functions over {MAX_FUNCTION_LINES} lines: {sorted(long_functions())}"
