import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# a fused partition lowering one op at a time is an error in tests (graphc/lowering.py)
os.environ.setdefault("GRAPHC_STRICT_FUSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent))

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
