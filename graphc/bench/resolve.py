"""Finding --case and --batch files.

A path is tried as given (absolute, or relative to the working directory),
then against the folder of each enclosing batch file (innermost first) and
each of that folder's parents, then against --inputs-dir.  So
``--case=op/f32/abs.json`` in ``.../inputs/graph/op/harness_f32_ci`` finds
``.../inputs/graph/op/f32/abs.json``, as benchdnn does.
"""
from __future__ import annotations

from pathlib import Path


def candidates(path: str, batch_dirs=(), inputs_dir=None) -> list[Path]:
    p = Path(path)
    if p.is_absolute():
        return [p]
    out = [p]
    for d in reversed(batch_dirs):
        d = Path(d).resolve()
        out += [base / p for base in (d, *d.parents)]
    if inputs_dir is not None:
        out.append(Path(inputs_dir) / p)
    return out


def resolve(path: str, batch_dirs=(), inputs_dir=None) -> Path | None:
    """The first candidate that is a file (as an absolute path), or None."""
    for c in candidates(path, batch_dirs, inputs_dir):
        if c.is_file():
            return c.resolve()
    return None
