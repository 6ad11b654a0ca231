import importlib.util
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a fused partition lowering one op at a time is an error in tests (graphc/lowering.py)
os.environ.setdefault("GRAPHC_STRICT_FUSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))


def _same_checkout() -> None:
    """graphc.passes and graphc.specs live in passes/ and specs/ at the top of the
    repository and are mapped into graphc by the install (pyproject.toml's
    package-dir).  When graphc comes from this checkout, they must come from it
    too: not from another checkout's editable install (PYTHONPATH pointing at a
    second tree) nor from a stale passes/ folder left with only
    __pycache__ in it, which Python takes for an empty namespace package."""
    origin = importlib.util.find_spec("graphc").origin
    if Path(origin).resolve().parent != ROOT / "graphc":
        return   # an installed graphc: its own passes and specs
    for name, folder in (("graphc.passes", "passes"), ("graphc.specs", "specs")):
        spec = importlib.util.find_spec(name)
        found = spec and (spec.origin or list(spec.submodule_search_locations))   # a namespace has no origin
        if not isinstance(found, str) or Path(found).resolve() != ROOT / folder / "__init__.py":
            pytest.exit(f"{name} resolves to {found}, not {ROOT / folder}: install this checkout "
                        f"(pip install -e .) and delete a left-over graphc/{folder}/ folder", returncode=4)


_same_checkout()

def _find_shared() -> Path:
    for cand in (os.environ.get("GRAPHC_SHARED"), ROOT.parent / "shared", "/work/shared"):
        if cand and Path(cand).is_dir():
            return Path(cand)
    return ROOT.parent / "shared"


SHARED = _find_shared()
OP_CORPUS = SHARED / "onednn" / "benchdnn" / "inputs" / "graph" / "op"


@pytest.fixture
def corpus():
    if not OP_CORPUS.is_dir():
        pytest.skip(f"benchdnn corpus not found at {OP_CORPUS} (set GRAPHC_SHARED)")
    return OP_CORPUS


@pytest.fixture
def parallel(monkeypatch):
    """Kernels take their parallel paths (prange, chunked partial sums) from small sizes on."""
    from graphc.codegen import kernel
    monkeypatch.setattr(kernel, "PARALLEL_THRESHOLD", 256)
    return True
