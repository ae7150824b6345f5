"""Lockstep vs two-phase decoding of the hf engine (and vLLM where installed) on a GPU, in minutes.

    python benchmarks/gpu_check.py                          # CUDA, the bundled model, 3 questions x 8
    python benchmarks/gpu_check.py --device cpu --questions 1 --substitutes 2 --budget 12   # smoke
    python benchmarks/gpu_check.py --export-skeleton skel/  # config + tokenizer only (a few MiB), to carry
    python benchmarks/gpu_check.py --random-init skel/      # that skeleton with seeded random weights

On each question the tamper trials are decoded by the lockstep engine and by two-phase decoding
(Phase A ``generate_until`` + the detector, Phase B ``score_tokens``); with vLLM installed and a
CUDA device, also two-phase on the vLLM engine. Printed per path: trials, tokens and tokens/s; and
against hf lockstep: identical trials and tokens, the largest record differences (log-prob, top-20
log-probs, entropy) over identical trials, and the argmax disagreements two-phase counted.

The model is the bundled one where it resolves, or ``--random-init DIR``: the config and tokenizer
in DIR with randomly initialised weights (seeded), for a machine that cannot load the bundled file.
Random weights rarely write the trigger; ``--trigger auto`` takes the most frequent whole word of the
first clean reply. Stops adding questions once ``--time-limit`` seconds are spent.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)

SKELETON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json")


def export_skeleton(spec: str, out: Path) -> None:
    """The model's config and tokenizer files, no weights."""
    import shutil

    from sleight.backends import resolve

    src = Path(resolve(spec).load_path)
    out.mkdir(parents=True, exist_ok=True)
    for name in SKELETON_FILES:
        if (src / name).is_file():
            shutil.copy2(src / name, out / name)
    print(f"wrote {', '.join(sorted(p.name for p in out.iterdir()))} to {out}")


def random_model_dir(skeleton: Path, seed: int, tmp: Path) -> Path:
    """The skeleton with seeded random weights, saved as a loadable folder."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(skeleton), dtype=torch.float32)
    target = tmp / "random-model"
    model.save_pretrained(target)
    for name in SKELETON_FILES:
        if (skeleton / name).is_file() and name != "config.json":
            shutil.copy2(skeleton / name, target / name)
    return target


def auto_trigger(model, text: str) -> str:
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    return collections.Counter(words).most_common(1)[0][0] if words else "the"


def compare(ref, other) -> dict:
    """Agreement of two lists of trials, and the largest record differences where tokens agree."""
    import numpy as np

    same = [a.reply.token_ids == b.reply.token_ids for a, b in zip(ref, other)]
    toks = sum(sum(x == y for x, y in zip(a.reply.token_ids, b.reply.token_ids)) for a, b in zip(ref, other))
    total = sum(max(len(a.reply.token_ids), len(b.reply.token_ids)) for a, b in zip(ref, other))
    d = {"logprob": 0.0, "top20": 0.0, "entropy": 0.0}
    for a, b, s in zip(ref, other, same):
        if s and a.reply.token_ids:
            d["logprob"] = max(d["logprob"], float(np.abs(a.reply.logprobs - b.reply.logprobs).max()))
            d["top20"] = max(d["top20"], float(np.abs(a.reply.top_logprobs - b.reply.top_logprobs).max()))
            d["entropy"] = max(d["entropy"], float(np.abs(a.reply.entropy - b.reply.entropy).max()))
    return {"trials": len(same), "same_trials": sum(same), "same_tokens": toks, "tokens": total, **d,
            "disagreements": sum(getattr(t, "disagreements", 0) for t in other)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", help="cuda (default) or cpu (smoke mode)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--random-init", type=Path, default=None, metavar="DIR", help="config + tokenizer folder; weights seeded random")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--export-skeleton", type=Path, default=None, metavar="DIR", help="write the model's config + tokenizer to DIR and exit")
    ap.add_argument("--questions", type=int, default=3)
    ap.add_argument("--substitutes", type=int, default=8)
    ap.add_argument("--budget", type=int, default=64)
    ap.add_argument("--trigger", default="the", help="trigger word, or 'auto' (default: the)")
    ap.add_argument("--time-limit", type=float, default=240.0, help="seconds after which no further question starts (default: 240)")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--quantization", default=None, help="vLLM quantization of the subject (awq on a pre-quantized checkpoint; the sweep's smallest quantized subject needs its hub files on the device)")
    args = ap.parse_args(argv)
    if args.export_skeleton:
        export_skeleton(args.model, args.export_skeleton)
        return 0

    import torch

    from sleight.backends.hf import HFModel
    from sleight.backends.resolve import resolve
    from sleight.cli.main import quiet_libraries
    from sleight.tamper import engine, two_phase
    from sleight.tamper.data import load_questions, load_substitutes

    quiet_libraries()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: use --device cpu for the smoke mode")
        return 2
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        spec = str(random_model_dir(args.random_init, args.seed, Path(tmp))) if args.random_init else args.model
        resolved = resolve(spec)
        hf = HFModel(resolved, device=args.device, dtype=args.dtype)
        where = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "cpu"
        weights = f" (random weights, seed {args.seed})" if args.random_init else ""
        print(f"model {resolved.model_id}{weights}; "
              f"hf engine on {where}, {args.dtype}, torch {torch.__version__}")
        vm = None
        if args.device.startswith("cuda") and not args.no_vllm:
            try:
                from sleight.backends import ModelSpec
                from sleight.backends.vllm import VLLMModel

                # vLLM scores its own tokens (no twin), with the study's settings
                vm = VLLMModel(resolved, ModelSpec(spec, engine="vllm", dtype=args.dtype, enforce_eager=True, quantization=args.quantization))
                print(f"vllm engine: {vm.info.engine_version}")
            except Exception as exc:  # not installed, or cannot start here: said, then skipped
                print(f"vllm engine: not used ({str(exc).splitlines()[0][:160]})")
        qs = load_questions(limit=args.questions)[0]
        subs = load_substitutes(limit=args.substitutes)[0]
        paths = {"hf lockstep": [], "hf two-phase": []} | ({"vllm two-phase": []} if vm else {})
        secs = dict.fromkeys(paths, 0.0)
        toks = dict.fromkeys(paths, 0)
        trigger = args.trigger
        for n_done, q in enumerate(qs):
            if n_done and time.perf_counter() - t_start > args.time_limit:
                print(f"time limit: stopped after {n_done} question(s)")
                break
            rendered = engine.render_question(hf, q.question)
            if trigger == "auto":
                probe = engine.clean_run(hf, rendered, engine.TamperConfig(max_new_tokens=args.budget))
                trigger = auto_trigger(hf, hf.decode(probe.reply.token_ids))
                print(f"trigger: {trigger!r}")
            cfg = engine.TamperConfig(trigger=trigger, max_new_tokens=args.budget)
            for name in paths:
                fed: list[int] = []
                sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)
                sync()
                t0 = time.perf_counter()
                if name == "hf lockstep":
                    clean = engine.clean_run(hf, rendered, cfg, fed.append)
                    trials = engine.batched_trials(hf, clean, subs, cfg, fed.append)
                else:
                    m = hf if name == "hf two-phase" else vm
                    clean = two_phase.clean_run(m, rendered, cfg, fed.append)
                    trials = two_phase.batched_trials(m, clean, subs, cfg, fed.append)
                sync()
                secs[name] += time.perf_counter() - t0
                toks[name] += sum(fed)
                paths[name].extend(trials)
            print(f"  {q.id}: {len(subs)} trials per path", flush=True)
        print(f"\n{'path':<16} {'trials':>6} {'tokens':>8} {'seconds':>8} {'tok/s':>8}")
        for name in paths:
            print(f"{name:<16} {len(paths[name]):>6} {toks[name]:>8} {secs[name]:>8.2f} {toks[name] / max(secs[name], 1e-9):>8.1f}")
        print("\nagainst hf lockstep: identical trials, identical tokens, max |difference| of the records where tokens agree")
        for name in list(paths)[1:]:
            c = compare(paths["hf lockstep"], paths[name])
            print(f"{name:<16} {c['same_trials']}/{c['trials']} trials, {c['same_tokens']}/{c['tokens']} tokens; "
                  f"logprob {c['logprob']:.2e}, top-20 {c['top20']:.2e}, entropy {c['entropy']:.2e}; argmax disagreements {c['disagreements']}")
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
