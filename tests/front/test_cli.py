"""What the command line prints is escaped (graphc.terminal): op names, file
paths and error messages may hold terminal escape sequences, NUL, newlines or
lone surrogates; no command prints them raw or dies on them."""
import json
import os
import subprocess
import sys

import pytest

from graphc.terminal import SafeStream, printable, shown

#: an op name holding a lone surrogate, a clear-screen sequence, NUL, a carriage
#: return, a newline and a right-to-left override
NAME = "a\udc80b\x1b[2J\x00c\rd\nfake line\u202e"
ESCAPED = "a\\udc80b\\x1b[2J\\x00c\\rd\\nfake line\\u202e"


def lt(tid):
    return {"id": tid, "dtype": "f32", "shape": [2, 3], "stride": [], "layout_type": "strided",
            "property_type": "undef"}


def graph_file(folder, kind="ReLU", file_name="g.json"):
    d = {"version": "3.0.0", "graph": [{"id": 0, "name": NAME, "kind": kind, "attrs": {}, "inputs": [lt(0)],
                                        "outputs": [lt(1)]}]}
    path = folder / file_name
    path.write_text(json.dumps(d))   # valid JSON: the surrogate as an escape
    return path


def graphc_cli(*argv, encoding="utf-8"):
    env = dict(os.environ, PYTHONIOENCODING=encoding)
    return subprocess.run([sys.executable, "-m", "graphc", *map(str, argv)], capture_output=True, env=env)


def assert_clean(out: bytes):
    """No control byte but newline (and tab), no traceback, and UTF-8 that decodes."""
    text = out.decode("utf-8")
    assert not any(ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f for c in text), text
    assert "Traceback" not in text and "\u202e" not in text
    return text


def test_shown_and_printable():
    assert shown(NAME) == ESCAPED
    assert shown(3) == "3" and shown("caf\u00e9 \u4e2d") == "caf\u00e9 \u4e2d"
    assert printable("x\n\ty\x1b[2J\udc80", "utf-8") == "x\n\ty\\x1b[2J\\udc80"   # lines stay lines
    assert printable("caf\u00e9\n", "ascii") == "caf\\xe9\n"                         # what ascii cannot write


def test_safe_stream_writes_what_the_encoding_cannot():
    class Strict:
        encoding, written = "ascii", []

        def write(self, text):
            text.encode(self.encoding)   # raises as a real stream would
            self.written.append(text)
            return len(text)
    s = SafeStream(Strict())
    print("caf\u00e9 \udc80\x00", file=s)
    assert "".join(Strict.written) == "caf\\xe9 \\udc80\\x00\n" and s.encoding == "ascii"


@pytest.mark.parametrize("encoding", ["utf-8", "ascii"])
def test_partitions_escapes_names(tmp_path, encoding):
    r = graphc_cli("partitions", graph_file(tmp_path), encoding=encoding)
    assert r.returncode == 0, r.stderr
    text = assert_clean(r.stdout)
    assert f'op 0 ReLU "{ESCAPED}": (src=0) -> (dst=1)' in text
    assert not r.stderr


def test_validate_escapes_paths_and_errors(tmp_path):
    good = graph_file(tmp_path, file_name="ok\x1b[2J.json")
    bad = graph_file(tmp_path, kind="ReLUx", file_name="bad.json")
    r = graphc_cli("validate", good, bad)
    assert r.returncode == 1
    lines = assert_clean(r.stdout).splitlines()
    assert lines[0] == f"{tmp_path}/ok\\x1b[2J.json: OK (1 ops, inputs [0], outputs [1])"
    assert lines[1].startswith(f"{bad}: InvalidGraphOp: at graph[0], op 0 (ReLUx \"{ESCAPED}\"): unknown op kind")
    assert len(lines) == 2


def test_errors_on_stderr_are_escaped(tmp_path):
    r = graphc_cli("partitions", graph_file(tmp_path, kind="ReLUx"))
    assert r.returncode == 2 and not r.stdout
    text = assert_clean(r.stderr)
    assert text.startswith(f"graphc: InvalidGraphOp: at graph[0], op 0 (ReLUx \"{ESCAPED}\")")
    assert text.count("\n") == 1
    r = graphc_cli("ops", "x\x1b[2J")
    assert "found 'x\\x1b[2J'" in assert_clean(r.stderr)


def test_dot_quotes_names(tmp_path):
    r = graphc_cli("dot", graph_file(tmp_path))
    assert r.returncode == 0, r.stderr
    assert 'op0 [label="0: ReLU\\na\\udc80b\\u001b[2J\\u0000c\\rd\\nfake line\\u202e"];' in assert_clean(r.stdout)


def test_bench_lines_are_escaped(tmp_path):
    odd = graph_file(tmp_path, kind="ReLUx", file_name="odd\x1b[2J.json")
    r = graphc_cli("bench", f"--case={graph_file(tmp_path)}", f"--case={odd}")
    assert r.returncode == 1
    lines = assert_clean(r.stdout).splitlines()
    assert lines[0].startswith("0:PASSED")
    assert lines[1].startswith(f"1:INVALID_ARGUMENTS (InvalidGraphOp: at graph[0], op 0 (ReLUx \"a\\udc80b")
    assert lines[1].endswith(f"__REPRO: --graph --case={tmp_path}/odd\\x1b[2J.json")
    assert lines[2].startswith("tests:2 passed:1")
