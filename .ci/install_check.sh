#!/usr/bin/env bash
# A fresh, non-editable `pip install` of this checkout into a new venv, used from a
# folder outside the repository (so nothing resolves through the checkout itself):
#   - `graphc demo` passes (the bundled specs compiled, run and checked);
#   - `import specs` and `import passes` fail: the wheel adds no top-level module
#     besides graphc (checked on the installed files too);
#   - graphc.passes and the bundled specs (graphc.specs) are found in the install.
# The package is built from a copy of the files git tracks (as they are in the
# working tree), so neither a stale build/ folder nor a local venv leaks into it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

mkdir "$work/src"
(cd "$repo" && git ls-files -z --cached |
    while IFS= read -r -d '' f; do if [ -f "$f" ]; then printf '%s\0' "$f"; fi; done |
    xargs -0 cp --parents -t "$work/src")
python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q "$work/src"
rm -rf "$work/src"

cd "$work"
"$work/venv/bin/graphc" demo
for name in specs passes; do
    if "$work/venv/bin/python" -c "import $name" 2>/dev/null; then
        echo "install_check: 'import $name' works in the installed venv; it must not" >&2
        exit 1
    fi
done
"$work/venv/bin/python" - "$repo" <<'EOF'
import sys
from importlib.metadata import files
from importlib.resources import files as resources
from pathlib import Path

import graphc
import graphc.passes
from graphc.passes.legality import plan  # noqa: F401  (a module of the package, not only its __init__)

repo = Path(sys.argv[1])
site = Path(graphc.__file__).parent
assert not site.is_relative_to(repo), f"graphc imported from the checkout: {site}"
assert Path(graphc.passes.__file__).parent == site / "passes", graphc.passes.__file__
bundled = sorted(f.name for f in resources("graphc.specs").iterdir() if f.name.endswith(".json"))
expected = sorted(p.name for p in (repo / "specs").glob("*.json"))
assert bundled == expected, (bundled, expected)
top = {f.parts[0] for f in files("graphc") if f.parts[0] != ".." and not f.parts[0].endswith(".dist-info")}
assert top == {"graphc"}, f"the wheel installs top-level {sorted(top)}"
meta = {f.name for f in files("graphc") if f.parts[0].endswith(".dist-info")}
assert "LICENSE" in meta, f"no LICENSE in the distribution's metadata: {sorted(meta)}"
assert (site / "py.typed").is_file(), "py.typed is not installed"
# `graphc demo` above compiled kernels: numba wrote nothing inside the installed package
written = sorted(str(p.relative_to(site)) for p in site.rglob("*") if p.suffix in (".nbi", ".nbc"))
assert not written, f"numba cache files inside the installed package: {written[:5]}"
print(f"install_check: graphc.passes and {len(bundled)} bundled specs found in {site}; top level {sorted(top)}; "
      "LICENSE and py.typed shipped; nothing written in the package")
EOF
