"""Sleight of Word engine vs the naive one-trial-at-a-time algorithm, on the same model and trials.

    python benchmarks/tamper.py                       # 5 questions x 101 substitutes (the issue's setting)
    python benchmarks/tamper.py --questions 2 --substitutes 101 --reference-substitutes 10

Both run in this one process on the same questions and substitutes: the engine (``run_tamper``:
clean run + one forked batch per question, Parquet writes included) and the reference
(``sleight.tamper.reference``: generate to the budget, cut at the first trigger, splice, regenerate,
repeat). The reference's cost per trial does not depend on how many substitutes there are, so
``--reference-substitutes K`` times it on the first K substitutes of each question only (it is
slow); rates are per trial. Printed: trials/s and tokens/s of each, their ratio, the token agreement
between the two (engine trial vs the same trial decoded alone), bytes per stored trial, and the
time the full 100 x 101 sweep would take at the engine's measured rate.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m-instruct")
    ap.add_argument("--questions", type=int, default=5)
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--reference-substitutes", type=int, default=None, help="time the reference on the first K substitutes (default: all)")
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--full-trials", type=int, default=10_100, help="trials of the full sweep, for the projection")
    args = ap.parse_args(argv)

    from sleight.backends import load_model, spec_of
    from sleight.cli.main import quiet_libraries
    from sleight.tamper.data import load_questions, load_substitutes
    from sleight.tamper.engine import TamperConfig, render_question
    from sleight.tamper.job import plan_run
    from sleight.tamper.reference import reference_trial
    from sleight.tamper.runner import run_tamper
    from sleight.tamper.store import load_trials

    quiet_libraries()
    model = load_model(args.model, batch_size=args.batch_size)
    questions, _ = load_questions(limit=args.questions)
    subs, _ = load_substitutes(limit=args.substitutes)
    k_ref = min(args.reference_substitutes or len(subs), len(subs))
    config = TamperConfig(max_new_tokens=args.max_new_tokens)
    print(f"model {model.info.model_id} ({model.info.engine}, {model.info.device}, {model.info.dtype}, torch threads {_threads()})")
    print(f"{len(questions)} questions x {len(subs)} substitutes, budget {config.max_new_tokens} tokens; reference on {len(questions)} x {k_ref}")

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        summary = run_tamper(model, plan_run(spec_of(model), questions, subs, Path(tmp) / "run", config), progress=False)
        eng_s = time.perf_counter() - t0
        trials = load_trials(Path(tmp) / "run")
        stored_bytes = sum(p.stat().st_size for p in (Path(tmp) / "run" / "trials.parquet").glob("*.parquet"))
    eng_trials = len(trials)
    eng_tokens = int(trials["n_tokens"].sum())
    print(f"engine:    {eng_trials} trials in {eng_s:.1f}s = {eng_trials / eng_s:.3f} trials/s; "
          f"{eng_tokens / eng_s:.1f} trial tokens/s ({summary.tokens} tokens decoded = {summary.tokens / eng_s:.1f}/s)")

    ref_s = 0.0
    ref_trials = ref_tokens = ref_decoded = 0
    same_trials = same_tokens = all_tokens = 0
    for qi, q in enumerate(questions):
        rendered = render_question(model, q.question)
        for si in range(k_ref):
            t0 = time.perf_counter()
            ref = reference_trial(model, rendered, subs[si], config)
            ref_s += time.perf_counter() - t0
            ref_trials += 1
            ref_tokens += len(ref.token_ids)
            ref_decoded += ref.decoded
            eng = [int(x) for x in trials[(trials.question_index == qi) & (trials.substitute_index == si)].iloc[0]["token_ids"]]
            same_trials += eng == ref.token_ids
            same_tokens += sum(a == b for a, b in zip(eng, ref.token_ids))
            all_tokens += max(len(eng), len(ref.token_ids))
        print(f"  reference {q.id}: {ref_trials} trials, {ref_s:.1f}s so far", flush=True)
    print(f"reference: {ref_trials} trials in {ref_s:.1f}s = {ref_trials / ref_s:.3f} trials/s; "
          f"{ref_tokens / ref_s:.1f} trial tokens/s ({ref_decoded} tokens decoded = {ref_decoded / ref_s:.1f}/s)")
    ratio = (eng_trials / eng_s) / (ref_trials / ref_s)
    print(f"speed-up (trials/s, engine / reference): {ratio:.1f}x")
    print(f"agreement engine vs one-at-a-time: {same_trials}/{ref_trials} trials identical, "
          f"{same_tokens}/{all_tokens} tokens ({same_tokens / max(all_tokens, 1):.4f})")
    print(f"storage: {stored_bytes / eng_trials / 1024:.1f} KiB per trial (trials.parquet, zstd)")
    full_h = args.full_trials / (eng_trials / eng_s) / 3600
    print(f"projected full sweep ({args.full_trials} trials) at the engine's rate: {full_h:.1f} h "
          f"(reference: {args.full_trials / (ref_trials / ref_s) / 3600:.1f} h)")
    return 0


def _threads() -> int:
    import torch

    return torch.get_num_threads()


if __name__ == "__main__":
    sys.exit(main())
