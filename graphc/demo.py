"""`graphc demo`: compile, run and check every bundled spec (specs/*.json,
installed as the package data of graphc.specs).

Prints one row per spec: partitions, compile and execute time, the largest
output error (scaled so that 1 is the tolerance) and the verdict.  Specs whose
ops this build cannot lower yet are ``unimplemented``, not failures; the exit
status is 1 only on a mismatch or an error.
"""
from __future__ import annotations

import json
from importlib.resources import files

from .bench.driver import FAILED, INVALID, Outcome, check
from .errors import GraphcError
from .jsonio import load_graph

COLUMNS = (("case", 30), ("partitions", 10), ("compile ms", 10), ("execute ms", 10), ("max error", 9),
           ("verdict", 13))


def spec_files() -> list:
    return sorted((f for f in files("graphc.specs").iterdir() if f.name.endswith(".json")), key=lambda f: f.name)


def run_spec(f) -> Outcome:
    try:
        graph = load_graph(json.loads(f.read_text()))
    except (GraphcError, ValueError) as e:
        return Outcome(INVALID, f"{type(e).__name__}: {e}")
    return check(graph, expected_partitions=0)


def _num(v: float) -> str:
    return "-" if v != v else f"{v:.3g}"


def _row(cells) -> str:
    return "  ".join(str(c).ljust(w) if i == 0 or i == len(COLUMNS) - 1 else str(c).rjust(w)
                     for i, (c, (_, w)) in enumerate(zip(cells, COLUMNS))).rstrip()


def main(args=None) -> int:
    print(_row([name for name, _ in COLUMNS]))
    notes, bad = [], 0
    for f in spec_files():
        out = run_spec(f)
        print(_row([f.name, out.partitions, _num(out.compile_ms), _num(out.execute_ms), _num(out.max_error),
                    out.status.lower()]))
        if out.reason:
            notes.append(f"{f.name}: {out.reason}")
        bad += out.status in (FAILED, INVALID)
    if notes:
        print()
        print("\n".join(notes))
    return 1 if bad else 0
