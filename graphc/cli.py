"""The `graphc` command line."""
from __future__ import annotations

import argparse
import sys

from .errors import GraphcError
from .terminal import safe_output, shown


def _cmd_ops(args) -> int:
    from .ops import all_kinds, aliases, get_schema
    if args.kind:
        print(get_schema(args.kind).describe())
        return 0
    al = {}
    for a, k in aliases().items():
        al.setdefault(k, []).append(a)
    for k in all_kinds():
        s = get_schema(k)
        extra = f" (alias {', '.join(al[k])})" if k in al else ""
        print(f"{k:32s} {s.family:12s}{extra}")
    return 0


def _cmd_validate(args) -> int:
    """Every error of each file, one line each (ops that fail their checks are
    left out and the rest checked on), or OK."""
    from .jsonio import graph_file_errors
    bad = 0
    for path in args.files:
        g, errors = graph_file_errors(path)
        if g is not None:
            print(f"{shown(path)}: OK ({len(g.ops)} ops, inputs {g.input_ports}, outputs {g.output_ports})")
            continue
        bad += 1
        if len(errors) > 1:
            print(f"{shown(path)}: {len(errors)} errors")
        for e in errors:
            print(f"{shown(path)}: {type(e).__name__}: {shown(e)}")
    return 1 if bad else 0


def _cmd_partitions(args) -> int:
    from .jsonio import load_graph_file
    g = load_graph_file(args.file)
    if getattr(args, "passes", False):
        from .partition import run_passes
        run_passes(g, policy=args.policy, verbose=True, out=sys.stdout)
    for p in g.get_partitions(args.policy):
        sup = "supported" if p.is_supported() else "unsupported"
        print(f"partition {p.id}: {p.kind} [{sup}]" + (f" pattern {p.pattern}" if p.pattern else ""))
        if p.plan is not None:
            print(f"  plan: {p.plan.describe()}")
        for op in p.ops:
            ins = ", ".join(f"{n}={t.id}" for n, t in zip(op.input_names, op.inputs))
            outs = ", ".join(f"{n}={t.id}" for n, t in zip(op.output_names, op.outputs))
            print(f"  op {op.id} {op.kind}" + (f' "{shown(op.name)}"' if op.name else "") + f": ({ins}) -> ({outs})")
        print("  inputs:  " + ", ".join(repr(t) for t in p.inputs))
        print("  outputs: " + ", ".join(repr(t) for t in p.outputs))
        if args.source:
            if not p.is_supported():
                print("  (no kernel: this build cannot lower it)")
                continue
            cp = p.compile(p.inputs, p.outputs)
            print("  source:")
            print("\n".join("    " + ln for ln in cp.source.splitlines()))
    return 0


def _id_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected tensor ids separated by commas, found {text!r}") from None


def _cmd_grad(args) -> int:
    from .grad import grad
    from .grad.emitter import GRAD_TYPES
    from .jsonio import load_graph_file, save_graph
    g = load_graph_file(args.file)
    wrt = args.wrt if args.wrt is not None else [tid for tid in g.input_ports if g.tensors[tid].dtype in GRAD_TYPES]
    if not wrt:
        print(f"graphc: {shown(args.file)}: no tensor to differentiate (no f32, bf16 or f16 input): give --wrt",
              file=sys.stderr)
        return 2
    tr = grad(g, wrt, args.outputs)
    save_graph(tr.graph, args.output)
    print(f"{shown(args.output)}: {len(tr.graph.ops)} ops ({len(g.ops)} forward), "
          f"inputs {tr.graph.input_ports}, outputs {tr.graph.output_ports}")
    for out, seed in tr.seeds.items():
        print(f"  seed dL/d{out}: input {seed}")
    for tid, gid in tr.grads.items():
        print(f"  gradient dL/d{tid}: output {gid}")
    return 0


def _cmd_dot(args) -> int:
    from .jsonio import load_graph_file
    from .dot import to_dot
    g = load_graph_file(args.file)
    print(to_dot(g, g.get_partitions(args.policy)))
    return 0


def _cmd_demo(args) -> int:
    from .demo import main as demo_main
    return demo_main(args)


def _cmd_distributed_layernorm(args) -> int:
    from .distributed_demo import main as dist_main
    return dist_main(args)


def build_parser() -> argparse.ArgumentParser:
    from .distributed_demo import add_arguments as distributed_arguments

    from . import __version__
    p = argparse.ArgumentParser(prog="graphc", description="graphc: an operation graph compiler lowering to Numba")
    p.add_argument("--version", action="version", version=f"graphc {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("ops", help="list op kinds, or print one kind's schema")
    s.add_argument("kind", nargs="?")
    s.set_defaults(fn=_cmd_ops)
    s = sub.add_parser("validate", help="load and check graph JSON files")
    s.add_argument("files", nargs="+")
    s.set_defaults(fn=_cmd_validate)
    s = sub.add_parser("partitions", help="show a graph's partitions")
    s.add_argument("file")
    s.add_argument("--policy", default="fusion", choices=("fusion", "debug"))
    s.add_argument("--source", action="store_true", help="print each partition's generated kernel source")
    s.add_argument("--passes", action="store_true", help="show what each compiler pass changed")
    s.set_defaults(fn=_cmd_partitions)
    s = sub.add_parser("grad", help="write the training graph of a forward graph (graphc.grad) as JSON")
    s.add_argument("file")
    s.add_argument("--wrt", type=_id_list, help="tensor ids to differentiate, comma-separated "
                                                "(default: every f32, bf16 and f16 input)")
    s.add_argument("--outputs", type=_id_list, help="forward outputs the gradients flow from (default: all)")
    s.add_argument("-o", "--output", required=True, help="the training graph's JSON file")
    s.set_defaults(fn=_cmd_grad)
    s = sub.add_parser("dot", help="Graphviz DOT of a graph with partitions as clusters")
    s.add_argument("file")
    s.add_argument("--policy", default="fusion", choices=("fusion", "debug"))
    s.set_defaults(fn=_cmd_dot)
    s = sub.add_parser("demo", help="compile, run and check the bundled specs")
    s.set_defaults(fn=_cmd_demo)
    # (main hands `graphc bench ...` to the driver before parsing: this entry is for --help)
    sub.add_parser("bench", add_help=False,
                   help="benchdnn-compatible graph driver: [knobs] --case=FILE.json | --batch=FILE "
                        "(graphc bench --help)")
    s = sub.add_parser("distributed-layernorm",
                       help="LayerNorm with the hidden dim split over MPI ranks (run under mpiexec), checked")
    distributed_arguments(s)
    s.set_defaults(fn=_cmd_distributed_layernorm)
    return p


def main(argv=None) -> int:
    """Run a command; everything it prints goes through graphc.terminal's
    SafeStream (names in a graph may hold escape sequences, NUL or lone
    surrogates), one-line fields escaped whole (terminal.shown)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with safe_output():
        try:
            if argv and argv[0] == "bench":
                from .bench.driver import main as bench_main   # (imports the compile step)
                return bench_main(argv[1:])
            args = build_parser().parse_args(argv)
            return args.fn(args)
        except GraphcError as e:
            print(f"graphc: {type(e).__name__}: {shown(e)}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            return 0


if __name__ == "__main__":
    sys.exit(main())
