"""Real models: eager torch, torch.compile (inductor) and torch.compile(backend="graphc").

    OMP_WAIT_POLICY=PASSIVE python benchmarks/bench_models.py [--models bert,gpt2,resnet50]
        [--modes infer_f32,infer_bf16,train_f32,train_bf16] [--contenders eager,inductor,graphc] [--repeat N]

Models (transformers architectures from configs, random weights, no download):
  bert      BERT-base with 2 layers (hidden 768, 12 heads), batch 4, sequence 128
  gpt2      GPT-2 (768, 12 heads) with 2 layers, batch 4, sequence 128
  resnet50  ResNet-50 (transformers' ResNetModel, its default config), batch 2, 224x224
Modes: inference in f32, inference under bf16 autocast, one training step in f32 (forward,
backward of the sum of the output, no optimizer), the same step under bf16 autocast
(``train_bf16``).
Each (model, mode, contender) runs in its OWN process: the first call (compile included) and the
median of --repeat timed calls after two warm-ups; graphc's also reports its coverage (the share
of ATen nodes run in graphc kernels).  The machine's load average is printed with every row.

First calls, cold and warm: inductor and graphc each get a fresh, empty cache folder per
(model, mode) (TORCHINDUCTOR_CACHE_DIR; GRAPHC_CACHE_DIR and NUMBA_CACHE_DIR), so a first process
compiles everything as on a fresh machine ("cold"); a second process with the same folders
starts from what the first stored ("warm") and its steady-state median is the one reported.
``--warm-only``: one process each, with the caches as they are (no cold column).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from children import call_times


def _model(name: str):
    import torch
    import transformers
    g = torch.Generator().manual_seed(0)
    if name == "bert":
        cfg = transformers.BertConfig(num_hidden_layers=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        return transformers.BertModel(cfg), (torch.randint(0, cfg.vocab_size, (4, 128), generator=g),)
    if name == "gpt2":
        cfg = transformers.GPT2Config(n_layer=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return transformers.GPT2Model(cfg), (torch.randint(0, cfg.vocab_size, (4, 128), generator=g),)
    if name == "resnet50":
        return transformers.ResNetModel(transformers.ResNetConfig()), (torch.randn(2, 3, 224, 224, generator=g),)
    raise SystemExit(f"unknown model {name}")


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else getattr(out, "last_hidden_state", out)


def child(model_name: str, mode: str, contender: str, repeat: int) -> dict:
    import contextlib
    import torch
    torch.manual_seed(0)
    model, inputs = _model(model_name)
    train = mode.startswith("train")
    model.train(train)
    fn = model if contender == "eager" else torch.compile(model, backend="inductor" if contender == "inductor"
                                                           else "graphc")

    def call():
        ctx = torch.autocast("cpu", dtype=torch.bfloat16) if mode.endswith("bf16") else contextlib.nullcontext()
        if train:
            with ctx:
                out = _first(fn(*inputs))
            out.float().sum().backward()
            return
        with torch.no_grad(), ctx:
            fn(*inputs)

    start = time.perf_counter()
    call()
    first = time.perf_counter() - start
    times = call_times(call, repeat)
    out = {"first_s": first, "median_ms": 1e3 * times[len(times) // 2]}
    if contender == "graphc":
        from graphc.torch.backend import REPORTS
        total = sum(r.aten_nodes for r in REPORTS)
        out["coverage"] = sum(r.in_graphc for r in REPORTS) / total if total else 0.0
    return out


def _run(model, mode, contender, repeat, env=None) -> dict | str:
    """The child's JSON result, or the last line of its error."""
    res = subprocess.run([sys.executable, __file__, "--child", model, mode, contender, "--repeat", str(repeat)],
                         capture_output=True, text=True, env=env)
    if res.returncode != 0:
        return f"failed: {(res.stderr.strip().splitlines() or ['?'])[-1][:120]}"
    return json.loads(res.stdout.strip().splitlines()[-1])


def _caches(folder: str) -> dict:
    """The environment of a child whose compile caches live in ``folder``."""
    return dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(folder, "inductor"),
                GRAPHC_CACHE_DIR=os.path.join(folder, "graphc"), NUMBA_CACHE_DIR=os.path.join(folder, "numba"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert,gpt2,resnet50")
    ap.add_argument("--modes", default="infer_f32,infer_bf16,train_f32")
    ap.add_argument("--contenders", default="eager,inductor,graphc")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "MODE", "CONTENDER"))
    ap.add_argument("--warm-only", action="store_true",
                    help="one process per contender, with the compile caches as they are (no cold first call)")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args.repeat)))
        return
    print(f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY')}")
    print("| model | mode | contender | median ms | vs eager | first call cold s | first call warm s | coverage "
          "| load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        for mode in args.modes.split(","):
            eager = None
            for contender in args.contenders.split(","):
                load = f"{os.getloadavg()[0]:.1f}"
                if contender == "eager" or args.warm_only:
                    r, cold = _run(model, mode, contender, args.repeat), None
                else:
                    with tempfile.TemporaryDirectory(prefix="bench-models-") as folder:
                        cold = _run(model, mode, contender, 1, _caches(folder))
                        r = _run(model, mode, contender, args.repeat, _caches(folder))
                if isinstance(r, str) or isinstance(cold, str):
                    print(f"| {model} | {mode} | {contender} | {r if isinstance(r, str) else cold} | | | | | {load} |",
                          flush=True)
                    continue
                eager = r["median_ms"] if contender == "eager" else eager
                ratio = f"{eager / r['median_ms']:.2f}x" if eager else ""
                cov = f"{r['coverage']:.1%}" if "coverage" in r else ""
                first_cold = f"{cold['first_s']:.1f}" if cold else ""
                print(f"| {model} | {mode} | {contender} | {r['median_ms']:.1f} | {ratio} | {first_cold} | "
                      f"{r['first_s']:.1f} | {cov} | {load} |", flush=True)


if __name__ == "__main__":
    main()
