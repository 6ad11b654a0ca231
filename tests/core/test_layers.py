"""graphc's architecture, read from its source with ``ast``: the import graph of
graphc/ and passes/ (installed as graphc.passes) against the layers of
docs/layers.json, and the size of files and functions.

- Every module belongs to a layer: the part whose ``is`` lists its file, or else
  the part with the longest folder holding it.
- An import (any: module level, in a function, under a condition) from one layer
  to another goes down ``order`` (lowest layer first), never up, and never along
  a ``never`` arrow; and no modules import each other in a circle.
- No file over 700 lines, no function over 120.

Today's tree still breaks some of these rules. Each test carries the offenders
of the day in a KNOWN set that may only shrink: a new offender fails, and so does
a KNOWN entry that no longer offends (delete it: the fix holds from then on)."""
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

#: (importer, imported) pairs that break a rule today; this set may only shrink
KNOWN_VIOLATIONS: set[tuple[str, str]] = {
    # IR -> IR: in an import circle
    ("graphc.codegen.ir", "graphc.codegen.printer"),
    ("graphc.codegen.printer", "graphc.codegen.ir"),
    # Codegen -> Codegen: in an import circle
    ("graphc.codegen.attention", "graphc.codegen.fusion"),
    ("graphc.codegen.fusion", "graphc.codegen.attention"),
}

#: files over MAX_FILE_LINES today (paths from the repository's top); may only shrink
KNOWN_LONG_FILES: set[str] = {
    "graphc/codegen/cache.py",
    "graphc/codegen/grouped.py",
}

#: functions over MAX_FUNCTION_LINES today ("path:qualified name"); may only shrink
KNOWN_LONG_FUNCTIONS: set[str] = {
    "graphc/codegen/attention.py:lower_attention",
    "graphc/codegen/attention.py:lower_attention_backward",
}


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
    """{(importer, imported): the rules that import breaks}."""
    g, files = import_graph(), modules()
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


def test_no_new_import_violation():
    new = {pair: why for pair, why in violations().items() if pair not in KNOWN_VIOLATIONS}
    assert not new, "imports breaking docs/layers.json:\n" + "\n".join(
        f"  {a} -> {b}: {'; '.join(why)}" for (a, b), why in sorted(new.items()))


def test_known_violations_still_occur():
    gone = sorted(KNOWN_VIOLATIONS - set(violations()))
    assert not gone, f"fixed, delete from KNOWN_VIOLATIONS: {gone}"


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


def test_no_new_long_file():
    new = sorted(long_files() - KNOWN_LONG_FILES)
    assert not new, f"files over {MAX_FILE_LINES} lines: {new}"


def test_known_long_files_still_long():
    gone = sorted(KNOWN_LONG_FILES - long_files())
    assert not gone, f"short enough now, delete from KNOWN_LONG_FILES: {gone}"


def test_no_new_long_function():
    new = sorted(long_functions() - KNOWN_LONG_FUNCTIONS)
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines: {new}"


def test_known_long_functions_still_long():
    gone = sorted(KNOWN_LONG_FUNCTIONS - long_functions())
    assert not gone, f"short enough now, delete from KNOWN_LONG_FUNCTIONS: {gone}"
