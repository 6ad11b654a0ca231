"""benchdnn graph-driver knobs: parsing, batch files and comma expansion.

As in benchdnn, the command line (and each batch file) is read as a state
machine: knobs set the state, ``--case=FILE`` emits one case per combination of
the comma-separated knob values, ``--reset`` restores the driver knobs'
defaults, and ``--batch=FILE`` reads more knobs and cases from a file (``#``
starts a comment) with the same state.  Global knobs (``--mode``,
``--fix-times-per-prb``, ``--max-ms-per-prb``, ``--inputs-dir``, ``-vN``) are
not reset.  A knob value that cannot be read makes its cases invalid (the
driver reports them); an unknown option or a missing batch file stops the
parse with a KnobError.  A token ending in a backslash continues on the next
token, as benchdnn joins a batch file's broken lines.
"""
from __future__ import annotations

import itertools
import string
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..types import DataType, PropertyType
from .resolve import resolve


class KnobError(ValueError):
    """A command line or batch file that cannot be parsed."""


# ------------------------------------------------------------- value parsers
def _int(text, what, minimum=0) -> int:
    try:
        v = int(text)
    except ValueError:
        raise KnobError(f"{what}: expected an integer, found {text!r}") from None
    if v < minimum:
        raise KnobError(f"{what}: expected an integer >= {minimum}, found {v}")
    return v


def _entries(text, what, read_id=None) -> list[tuple[int, str]]:
    """'ID:REST+ID:REST' -> [(id, rest)]; '' -> [].  ``read_id(text, what)``
    reads an id (default: the whole text is a non-negative integer)."""
    if not text:
        return []
    out = []
    for item in text.split("+"):
        tid, sep, rest = item.partition(":")
        if not sep or not rest:
            raise KnobError(f"{what}: expected ID:VALUE, found {item!r}")
        out.append((read_id(tid, what) if read_id else _int(tid, f"{what} id"), rest))
    return out


def _leading_id(text, what) -> int:
    """An id read as benchdnn reads --in-shapes ids (std::stoll): the leading
    digits, anything after them ignored, so the harness entry '2*abc:3x64x8*abc'
    is tensor 2 with shape 3x64x8 and tag abc."""
    digits = text[:len(text) - len(text.lstrip(string.digits))]
    if not digits:
        raise KnobError(f"{what} id: expected an integer, found {text!r}")
    return int(digits)


@dataclass(frozen=True)
class InShape:
    """One --in-shapes entry: a new shape, and strides as numbers or a tag."""

    shape: tuple[int, ...] | None
    strides: tuple[int, ...] | None = None
    tag: str | None = None


def _dims(text, what) -> tuple[int, ...]:
    if text == "-":
        return ()
    return tuple(_int(d, what) for d in text.split("x"))


def parse_in_shapes(text) -> dict[int, InShape]:
    out = {}
    for tid, spec in _entries(text, "--in-shapes", _leading_id):
        if tid in out:
            raise KnobError(f"--in-shapes: tensor {tid} is given twice")
        shape_txt, star, stride_txt = spec.partition("*")
        shape = _dims(shape_txt, "--in-shapes dim") if shape_txt else None
        strides = tag = None
        if star:
            if not stride_txt:
                raise KnobError(f"--in-shapes: strides missing after '*' in {spec!r}")
            if stride_txt[0].isdigit():
                strides = _dims(stride_txt, "--in-shapes stride")
            elif set(stride_txt) <= set(string.ascii_lowercase):
                tag = stride_txt
            else:
                raise KnobError(f"--in-shapes: strides must be numbers (8x4x1) or a tag (acdb), found {stride_txt!r}")
        elif shape is None:
            raise KnobError(f"--in-shapes: empty shape for tensor {tid}")
        if shape is not None and (strides or tag) and len(strides or tag) != len(shape):
            raise KnobError(f"--in-shapes: strides {stride_txt!r} do not match the rank of shape {shape_txt!r}")
        out[tid] = InShape(shape, strides, tag)
    return out


def parse_op_attrs(text) -> dict[int, dict[str, str]]:
    """{op id: {attribute name: value text}}; values are converted per the
    attribute's schema type when the graph is built."""
    out: dict[int, dict[str, str]] = {}
    for oid, attrs in _entries(text, "--op-attrs"):
        for item in attrs.split("*"):
            name, sep, value = item.partition(":")
            if not sep or not name:
                raise KnobError(f"--op-attrs: expected NAME:VALUE, found {item!r}")
            out.setdefault(oid, {})[name] = value
    return out


def parse_op_kind(text) -> dict[int, str]:
    return dict(_entries(text, "--op-kind"))


GLOBAL_DTS = ("f32", "bf16", "f16")


def parse_dt(text):
    """None (undef), a DataType for every f32 tensor, or {tensor id: DataType}."""
    if text == "undef":
        return None
    if ":" not in text:
        if text not in GLOBAL_DTS:
            raise KnobError(f"--dt: expected undef or one of {', '.join(GLOBAL_DTS)}, found {text!r}")
        return DataType(text)
    out = {}
    for tid, dt in _entries(text, "--dt"):
        try:
            out[tid] = DataType(dt)
        except ValueError:
            raise KnobError(f"--dt: unknown data type {dt!r} for tensor {tid}") from None
    return out


def parse_tensor_property(text) -> dict[int, PropertyType]:
    out = {}
    for tid, prop in _entries(text, "--tensor-property"):
        try:
            out[tid] = PropertyType(prop)
        except ValueError:
            choices = ", ".join(p.value for p in PropertyType)
            raise KnobError(f"--tensor-property: expected one of {choices}, found {prop!r}") from None
    return out


#: benchdnn's --attr-fpmath modes (doc/knobs_attr.md), as a graph's fpmath_mode takes them
FPMATH_MODES = ("strict", "bf16", "f16", "tf32", "any")
_BOOL_TEXT = {"true": True, "1": True, "false": False, "0": False}


@dataclass(frozen=True)
class FpMath:
    """One --attr-fpmath value: the graph's fpmath mode, and whether it applies to integral ops."""

    mode: str
    apply_to_int: bool = False


def parse_fpmath(text) -> FpMath | None:
    """'' (the JSON file's own mode) -> None; 'MODE[:BOOL]' -> FpMath."""
    if not text:
        return None
    mode, colon, to_int = text.partition(":")
    if mode.lower() not in FPMATH_MODES:
        raise KnobError(f"--attr-fpmath: expected one of {', '.join(FPMATH_MODES)}, found {mode!r}")
    if colon and to_int.lower() not in _BOOL_TEXT:
        raise KnobError(f"--attr-fpmath: APPLY_TO_INT must be true or false, found {to_int!r}")
    return FpMath(mode.lower(), bool(colon) and _BOOL_TEXT[to_int.lower()])


def _parse_value(knob, text):
    """The parsed value, or the KnobError: a bad value makes its cases invalid
    (reported per case, as the library would) rather than stopping the run."""
    try:
        return knob.parse(text)
    except KnobError as e:
        return e


@dataclass(frozen=True)
class Knob:
    name: str
    default: str
    parse: Callable[[str], object]


#: the driver knobs, in the order of comma expansion (outermost first) and of repro lines
KNOBS = (
    Knob("mb", "0", lambda t: _int(t, "--mb")),
    Knob("in-shapes", "", parse_in_shapes),
    Knob("op-attrs", "", parse_op_attrs),
    Knob("op-kind", "", parse_op_kind),
    Knob("dt", "undef", parse_dt),
    Knob("tensor-property", "", parse_tensor_property),
    Knob("attr-fpmath", "", parse_fpmath),
    Knob("expected-n-partitions", "1", lambda t: _int(t, "--expected-n-partitions")),
)
_BY_NAME = {k.name: k for k in KNOBS}


@dataclass(frozen=True)
class Case:
    """One problem: a case file and one value per driver knob."""

    path: str                               # as given to --case
    batch_dirs: tuple[Path, ...]            # folders of the enclosing batch files, outermost first
    raw: dict                               # knob name -> value text
    values: dict                            # knob name -> parsed value

    @property
    def error(self) -> str | None:
        """Why a knob value of this case cannot be read, or None."""
        bad = [str(v) for v in self.values.values() if isinstance(v, KnobError)]
        return "; ".join(bad) or None

    def knobs_repro(self) -> str:
        """The non-default knobs and the case, e.g. '--in-shapes=0:2x3 --case=op/f32/abs.json'."""
        parts = [f"--{k.name}={self.raw[k.name]}" for k in KNOBS if self.raw[k.name] != k.default]
        return " ".join(parts + [f"--case={self.path}"])


@dataclass
class Globals:
    mode: str = "C"
    fix_times: int = 0
    max_ms: int = 3000
    inputs_dir: Path | None = None
    verbose: int = 0
    summary: bool = False
    deterministic: bool = False


MODES = {"c": "C", "p": "P", "l": "L"}
MAX_BATCH_DEPTH = 16


@dataclass
class Parsed:
    globals: Globals = field(default_factory=Globals)
    cases: list[Case] = field(default_factory=list)


class _Parser:
    def __init__(self):
        self.out = Parsed()
        self.state = self._defaults()

    @staticmethod
    def _defaults() -> dict[str, list[tuple[str, object]]]:
        return {k.name: [(k.default, k.parse(k.default))] for k in KNOBS}

    def run(self, tokens, batch_dirs: tuple[Path, ...] = ()):
        for tok in tokens:
            self.token(tok, batch_dirs)

    def token(self, tok: str, batch_dirs):
        g = self.out.globals
        name, _, value = tok.partition("=")
        if tok == "--reset":
            self.state = self._defaults()
        elif tok == "--graph":
            pass  # benchdnn's driver selector: graph is the only driver here
        elif name == "--case":
            self.emit(value, batch_dirs)
        elif name == "--batch":
            self.batch(value, batch_dirs)
        elif name.startswith("--") and name[2:] in _BY_NAME:
            knob = _BY_NAME[name[2:]]
            self.state[knob.name] = [(v, _parse_value(knob, v)) for v in value.split(",")]
        elif name == "--mode":
            if value.lower() not in MODES:
                raise KnobError(f"--mode: the graph driver supports C (correctness), P (performance) and "
                                f"L (listing), found {value!r}")
            g.mode = MODES[value.lower()]
        elif name == "--fix-times-per-prb":
            g.fix_times = _int(value, name)
        elif name == "--max-ms-per-prb":
            g.max_ms = min(max(_int(value, name, 1), 10), 60000)
        elif name == "--inputs-dir":
            g.inputs_dir = Path(value)
        elif name == "--engine":
            if value not in ("cpu", "cpu:0"):
                raise KnobError(f"--engine: graphc runs on the cpu engine only, found {value!r}")
        elif tok == "-v":
            g.verbose = 1
        elif name == "--deterministic":
            if value.lower() not in ("", "true", "false"):
                raise KnobError(f"--deterministic: expected true or false, found {value!r}")
            g.deterministic = value.lower() != "false"
        elif name == "--summary":
            if value.lower() not in ("", "true", "false"):
                raise KnobError(f"--summary: expected true or false, found {value!r}")
            g.summary = value.lower() != "false"
        elif name == "--verbose" or (tok.startswith("-v") and tok[2:].isdigit()):
            g.verbose = _int(value if name == "--verbose" else tok[2:], "--verbose")
        else:
            raise KnobError(f"unknown option {tok!r}")

    def emit(self, path: str, batch_dirs):
        if not path:
            raise KnobError("--case: a file name is required")
        names = [k.name for k in KNOBS]
        for combo in itertools.product(*(self.state[n] for n in names)):
            self.out.cases.append(Case(path, batch_dirs, {n: c[0] for n, c in zip(names, combo)},
                                       {n: c[1] for n, c in zip(names, combo)}))

    def batch(self, path: str, batch_dirs):
        if len(batch_dirs) >= MAX_BATCH_DEPTH:
            raise KnobError(f"--batch: nested more than {MAX_BATCH_DEPTH} deep at {path!r}")
        found = resolve(path, batch_dirs, self.out.globals.inputs_dir)
        if found is None:
            raise KnobError(f"--batch: file not found: {path!r}")
        self.run(batch_tokens(found.read_text()), batch_dirs + (found.parent,))


def batch_tokens(text: str) -> list[str]:
    """Whitespace-separated tokens of a batch file, '#' comments removed.  A token
    ending in a backslash is joined with the next one (a lone backslash joins the
    tokens on either side), so a knob value broken over lines reads as one."""
    out: list[str] = []
    joined = False
    for tok in (tok for line in text.splitlines() for tok in line.partition("#")[0].split()):
        if joined and out:
            tok = out.pop() + tok
        joined = tok.endswith("\\")
        if joined:
            tok = tok[:-1]
            if not tok:
                continue
        out.append(tok)
    return out


def parse(argv) -> Parsed:
    """Parse a command line (a list of tokens); raises KnobError."""
    p = _Parser()
    p.run(list(argv))
    return p.out
