"""graphc bench: finding --case and --batch files."""
from graphc.bench.knobs import parse
from graphc.bench.resolve import resolve


def tree(tmp_path):
    """inputs/graph/op/f32/add.json, harness in inputs/graph/op, nested batch in inputs/graph/op/sub."""
    root = tmp_path.resolve() / "inputs" / "graph"
    (root / "op" / "f32").mkdir(parents=True)
    (root / "op" / "sub").mkdir()
    (root / "op" / "f32" / "add.json").write_text("{}")
    (root / "op" / "sub" / "local.json").write_text("{}")
    (root / "op" / "sub" / "inner").write_text("--case=local.json --case=op/f32/add.json\n")
    (root / "op" / "harness").write_text("--case=op/f32/add.json\n--batch=sub/inner\n")
    return root


def test_as_given_first(tmp_path, monkeypatch):
    root = tree(tmp_path)
    monkeypatch.chdir(root)
    assert resolve("op/f32/add.json") == root / "op" / "f32" / "add.json"
    assert resolve(str(root / "op" / "f32" / "add.json")) == root / "op" / "f32" / "add.json"
    assert resolve("missing.json", (root / "op",)) is None


def test_batch_folder_and_its_parents(tmp_path, monkeypatch):
    root = tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    p = parse([f"--batch={root / 'op' / 'harness'}"])
    assert [c.path for c in p.cases] == ["op/f32/add.json", "local.json", "op/f32/add.json"]
    found = [resolve(c.path, c.batch_dirs) for c in p.cases]
    assert found == [root / "op" / "f32" / "add.json", root / "op" / "sub" / "local.json",
                     root / "op" / "f32" / "add.json"]
    assert p.cases[1].batch_dirs == (root / "op", root / "op" / "sub")


def test_inner_batch_folder_wins(tmp_path, monkeypatch):
    root = tree(tmp_path)
    (root / "op" / "sub" / "op" / "f32").mkdir(parents=True)
    shadow = root / "op" / "sub" / "op" / "f32" / "add.json"
    shadow.write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert resolve("op/f32/add.json", (root / "op", root / "op" / "sub")) == shadow


def test_inputs_dir_last(tmp_path, monkeypatch):
    root = tree(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert resolve("op/f32/add.json", (), root) == root / "op" / "f32" / "add.json"
    assert resolve("op/f32/add.json") is None
    p = parse([f"--inputs-dir={root}", "--batch=op/harness"])
    assert len(p.cases) == 3
