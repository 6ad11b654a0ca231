"""graphc bench: the knob parser, batch files and comma expansion."""
import pytest

from graphc.bench.knobs import FpMath, InShape, KnobError, batch_tokens, parse
from graphc.types import DataType, PropertyType

CONV = "pattern/f32/conv_post_ops_fusion.json"

# Every example command line of benchdnn's doc/driver_graph.md, verbatim.
DOC_EXAMPLES = [
    "./benchdnn --mode=P --graph --case=./tests/benchdnn/inputs/graph/pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=P --graph --case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:2x64x112x112+1:32x64x2x2 --case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:*dcba+1:*dcba --case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:*802816x25088x112x1 --case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:2x64x112x112*dcba+1:32x64x2x2*dcba "
    "--case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:2x64x112x112*802816x12544x112x1 "
    "--case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:2x64x112x112x112+1:32x64x2x2x2 "
    "--op-attrs=0:strides:1x1x1*pads_begin:0x0x0*pads_end:0x0x0*dilations:1x1x1 "
    "--case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:2x64x112x112x112*edcba+1:32x64x2x2x2*edcba "
    "--op-attrs=0:strides:1x1x1*pads_begin:0x0x0*pads_end:0x0x0*dilations:1x1x1 "
    "--case=pattern/f32/conv_post_ops_fusion.json",
    "./benchdnn --mode=C --graph --in-shapes=0:- --case=op/f32/add.json",
    "./benchdnn --mode=C --graph --in-shapes=0:0+1:0 --case=op/f32/add.json",
    "./benchdnn --mode=P --graph --op-attrs=,0:strides:4x4 --case=op/f32/conv_2d.json",
    "./benchdnn --mode=P --graph --batch=test_graph_ci",
    "./benchdnn --mode=P --engine=gpu --graph --batch=test_graph_ci",
    "./benchdnn --mode=P -v1 --graph --mb=1,2,3 --case=op/f32/conv_2d.json",
    "./benchdnn --mode=C --graph --case=op/f32/conv_2d.json",
    "./benchdnn --mode=c --graph --case=op/f32/conv_2d.json",
]
STRIDES_5D = "--op-attrs=0:strides:1x1x1*pads_begin:0x0x0*pads_end:0x0x0*dilations:1x1x1"


def doc(i, tmp_path=None):
    argv = DOC_EXAMPLES[i].split()[1:]
    if tmp_path is not None:
        argv.insert(0, f"--inputs-dir={tmp_path}")
    return parse(argv)


def only_case(parsed):
    assert len(parsed.cases) == 1
    return parsed.cases[0]


def test_doc_case_paths_and_modes():
    p = doc(0)
    assert p.globals.mode == "P"
    assert only_case(p).path == "./tests/benchdnn/inputs/graph/pattern/f32/conv_post_ops_fusion.json"
    c = only_case(doc(1))
    assert c.path == CONV and c.knobs_repro() == f"--case={CONV}"
    p = doc(15)
    assert p.globals.mode == "C" and only_case(p).path == "op/f32/conv_2d.json"
    assert doc(16).globals.mode == "C"


def test_doc_in_shapes():
    assert only_case(doc(2)).values["in-shapes"] == {0: InShape((2, 64, 112, 112)), 1: InShape((32, 64, 2, 2))}
    assert only_case(doc(3)).values["in-shapes"] == {0: InShape(None, tag="dcba"), 1: InShape(None, tag="dcba")}
    assert only_case(doc(4)).values["in-shapes"] == {0: InShape(None, strides=(802816, 25088, 112, 1))}
    assert only_case(doc(5)).values["in-shapes"] == {0: InShape((2, 64, 112, 112), tag="dcba"),
                                                     1: InShape((32, 64, 2, 2), tag="dcba")}
    assert only_case(doc(6)).values["in-shapes"] == {0: InShape((2, 64, 112, 112), (802816, 12544, 112, 1))}
    assert only_case(doc(10)).values["in-shapes"] == {0: InShape((0,)), 1: InShape((0,))}


def test_doc_rank_rewrite_with_attrs():
    c = only_case(doc(7))
    assert c.values["in-shapes"] == {0: InShape((2, 64, 112, 112, 112)), 1: InShape((32, 64, 2, 2, 2))}
    assert c.values["op-attrs"] == {0: {"strides": "1x1x1", "pads_begin": "0x0x0", "pads_end": "0x0x0",
                                        "dilations": "1x1x1"}}
    c = only_case(doc(8))
    assert c.values["in-shapes"][0] == InShape((2, 64, 112, 112, 112), tag="edcba")
    assert c.knobs_repro() == ("--in-shapes=0:2x64x112x112x112*edcba+1:32x64x2x2x2*edcba "
                               f"{STRIDES_5D} --case={CONV}")


def test_doc_rank_zero():
    c = only_case(doc(9))
    assert c.values["in-shapes"] == {0: InShape(())}
    assert c.knobs_repro() == "--in-shapes=0:- --case=op/f32/add.json"


def test_doc_empty_first_value_expands_to_default():
    p = doc(11)
    assert [c.values["op-attrs"] for c in p.cases] == [{}, {0: {"strides": "4x4"}}]
    assert [c.knobs_repro() for c in p.cases] == ["--case=op/f32/conv_2d.json",
                                                  "--op-attrs=0:strides:4x4 --case=op/f32/conv_2d.json"]


def test_doc_batch_from_inputs_dir(tmp_path):
    (tmp_path / "test_graph_ci").write_text("--reset --case=op/f32/add.json  # a comment\n"
                                            "# --case=skipped.json\n--dt=bf16 --case=op/f32/abs.json\n")
    p = doc(12, tmp_path)
    assert p.globals.mode == "P"
    assert [c.path for c in p.cases] == ["op/f32/add.json", "op/f32/abs.json"]
    assert [c.values["dt"] for c in p.cases] == [None, DataType.bf16]
    assert p.cases[0].batch_dirs == (tmp_path,)
    with pytest.raises(KnobError, match="not found"):
        doc(12)


def test_doc_gpu_engine_is_rejected(tmp_path):
    (tmp_path / "test_graph_ci").write_text("--case=op/f32/add.json\n")
    with pytest.raises(KnobError, match="cpu"):
        doc(13, tmp_path)


def test_doc_verbose_and_mb_expansion():
    p = doc(14)
    assert p.globals.verbose == 1 and p.globals.mode == "P"
    assert [c.values["mb"] for c in p.cases] == [1, 2, 3]
    assert [c.knobs_repro() for c in p.cases][2] == "--mb=3 --case=op/f32/conv_2d.json"


def test_comma_expansion_is_a_product_in_knob_order():
    p = parse(["--dt=f32,bf16", "--op-kind=0:Abs,0:Exp,0:Log", "--case=a.json"])
    assert len(p.cases) == 6
    assert [(c.values["op-kind"][0], c.raw["dt"]) for c in p.cases[:3]] == [("Abs", "f32"), ("Abs", "bf16"),
                                                                           ("Exp", "f32")]


def test_state_persists_until_reset_and_across_batches(tmp_path):
    (tmp_path / "inner").write_text("--case=b.json\n--mb=7\n")
    p = parse(["--mb=2", "--case=a.json", f"--batch={tmp_path / 'inner'}", "--case=c.json", "--reset",
               "--case=d.json"])
    assert [(c.path, c.values["mb"]) for c in p.cases] == [("a.json", 2), ("b.json", 2), ("c.json", 7),
                                                           ("d.json", 0)]


def test_knob_values():
    c = only_case(parse(["--op-attrs=0:axis:1*keep_dims:0+2:mode:linear", "--op-kind=0:Exp+3:undef",
                         "--dt=0:bf16+1:f16", "--tensor-property=1:constant", "--expected-n-partitions=0",
                         "--case=x.json"]))
    assert c.values["op-attrs"] == {0: {"axis": "1", "keep_dims": "0"}, 2: {"mode": "linear"}}
    assert c.values["op-kind"] == {0: "Exp", 3: "undef"}
    assert c.values["dt"] == {0: DataType.bf16, 1: DataType.f16}
    assert c.values["tensor-property"] == {1: PropertyType.constant}
    assert c.values["expected-n-partitions"] == 0
    assert c.error is None
    assert c.knobs_repro() == ("--op-attrs=0:axis:1*keep_dims:0+2:mode:linear --op-kind=0:Exp+3:undef "
                               "--dt=0:bf16+1:f16 --tensor-property=1:constant --expected-n-partitions=0 "
                               "--case=x.json")


def test_in_shapes_ids_read_as_benchdnn_does():
    # a harness line of op/harness_f32_all: benchdnn reads an id with std::stoll, so
    # '2*abc' is tensor 2 (the stray '*abc' ignored) and its entry the shape and tag after ':'
    c = only_case(parse(["--in-shapes=0:3x64x8*abc+1:3x1x8+2*abc:3x64x8*abc", "--case=x.json"]))
    assert c.error is None
    assert c.values["in-shapes"] == {0: InShape((3, 64, 8), tag="abc"), 1: InShape((3, 1, 8)),
                                     2: InShape((3, 64, 8), tag="abc")}
    assert c.knobs_repro() == "--in-shapes=0:3x64x8*abc+1:3x1x8+2*abc:3x64x8*abc --case=x.json"
    tag_only = only_case(parse(["--in-shapes=1:*acb", "--case=x.json"]))
    assert tag_only.values["in-shapes"] == {1: InShape(None, tag="acb")}


@pytest.mark.parametrize("knob", ["--in-shapes=0:2x3*abz", "--in-shapes=0:2x3*ab1", "--in-shapes=x:2x3",
                                  "--in-shapes=*0:2x3", "--in-shapes=0:2x3+0:4x5",
                                  "--in-shapes=0:2x3*abc", "--in-shapes=0:", "--dt=s8", "--dt=0:f99",
                                  "--op-attrs=0:axis", "--tensor-property=0:heavy", "--mb=-1",
                                  "--expected-n-partitions=one", "--attr-fpmath=bf8", "--attr-fpmath=bf16:maybe",
                                  "--attr-fpmath=bf16:"])
def test_bad_knob_values_make_their_cases_invalid(knob):
    p = parse([knob, "--case=x.json"])
    assert only_case(p).error


@pytest.mark.parametrize("argv", [["--frobnicate=1"], ["--mode=F"], ["--mode=Q"], ["--case="],
                                  ["--max-ms-per-prb=x"]])
def test_bad_options_stop_parsing(argv):
    with pytest.raises(KnobError):
        parse(argv + ["--case=x.json"])


def test_max_ms_is_saturated():
    assert parse(["--max-ms-per-prb=1"]).globals.max_ms == 10
    assert parse(["--max-ms-per-prb=100000"]).globals.max_ms == 60000


def test_batch_tokens_strip_comments():
    assert batch_tokens("# head\n--reset --case=a.json # tail\n\n  --mb=2\n") == ["--reset", "--case=a.json", "--mb=2"]


def test_batch_tokens_join_broken_lines_as_benchdnn_does():
    # complex_fusion/harness_mha_all breaks a long --in-shapes over lines with '\\'
    text = "--reset --in-shapes=1:1x2,\\\n         1:3x4,\\\n    1:5x6\n--case=a.json\n"
    assert batch_tokens(text) == ["--reset", "--in-shapes=1:1x2,1:3x4,1:5x6", "--case=a.json"]
    assert batch_tokens("--mb=1,\\ # note\n2 --case=a.json") == ["--mb=1,2", "--case=a.json"]
    assert batch_tokens("--mb=1, \\\n 2 --case=a.json") == ["--mb=1,2", "--case=a.json"]   # a lone '\\'


def test_broken_lines_expand_like_one(tmp_path):
    (tmp_path / "h").write_text("--in-shapes=0:1x2,\\\n   0:3x4\n--case=a.json\n")
    p = parse([f"--batch={tmp_path / 'h'}"])
    assert [c.values["in-shapes"][0].shape for c in p.cases] == [(1, 2), (3, 4)]


def test_attr_fpmath():
    # the corpus's two forms: pattern/harness_f32_all and pattern/harness_int8_all
    p = parse(["--attr-fpmath=strict,bf16,tf32", "--case=a.json",
               "--reset", "--attr-fpmath=strict:false,bf16:true,TF32:1", "--case=b.json", "--reset", "--case=c.json"])
    assert [c.values["attr-fpmath"] for c in p.cases] == [
        FpMath("strict"), FpMath("bf16"), FpMath("tf32"),
        FpMath("strict", False), FpMath("bf16", True), FpMath("tf32", True), None]
    assert p.cases[4].knobs_repro() == "--attr-fpmath=bf16:true --case=b.json"
    assert p.cases[6].knobs_repro() == "--case=c.json"
    c = only_case(parse(["--attr-fpmath=any", "--expected-n-partitions=2", "--case=x.json"]))
    assert c.knobs_repro() == "--attr-fpmath=any --expected-n-partitions=2 --case=x.json"


def test_batch_nesting_is_bounded(tmp_path):
    (tmp_path / "loop").write_text("--batch=loop\n")
    with pytest.raises(KnobError, match="nested"):
        parse([f"--batch={tmp_path / 'loop'}"])
