"""The jury's vote paths on a real run, timed against the engine's own prefill rate (issue 35).

    python benchmarks/jury.py --questions 2                 # makes a 2-question run (202 trials), then judges it
    python benchmarks/jury.py --run RUN_DIR --whole 32 --text 64
    python benchmarks/jury.py --questions 1 --substitutes 8 --whole 4 --text 4   # smoke, a minute

The juror is the bundled model (a jury of one, on hf), the prompt the shipped one. Printed:

- **label slots** (``--conventions sleight``): every judged trial's vote as ``LocalJuror`` casts it
  (``slot_casts`` a ``--batch-size`` chunk at a time, the case read once and its four slots forked),
  votes/s, the judge prompt's tokens a vote (and how many every vote shares), the tokens the engine
  computed a second, and the same on the first ``--whole`` votes with every slot's context read
  whole (the reading before the fork); the largest difference between the two readings' slot
  probabilities and masses, against the suite's tolerance (``tests/tolerances.py``);
- **free-text votes** (``--conventions study``: greedy, 256 tokens, one ask, the study's reply text)
  on the first ``--text`` trials, as ``LocalJuror`` casts them (each prompt read alone, the rows
  decoded together on one ragged stream): votes/s, prompt and reply tokens, and the prompt tokens a
  second against the engine's prefill rate;
- **the engine's prefill rate**: one forward pass a judge prompt, no padding, no cache kept (the
  rate the CPU gives this model on these prompts), and each path's computed tokens/s against it;
- the projected time for 10,100 votes (the full sweep's trials) at each path's rate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
import sleight  # noqa: E402,F401  its OpenMP settings, before torch loads (sleight/__init__.py)

FULL_TRIALS = 100 * 101
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def _make_run(out: Path, questions: int, substitutes: int) -> None:
    cmd = [sys.executable, "-m", "sleight.cli.main", "tamper", "run", "--questions", str(questions), "--substitutes", str(substitutes), "--out", str(out), "--no-progress"]
    print("run:", " ".join(cmd[2:]), flush=True)
    subprocess.run(cmd, check=True)


def _hours(votes_per_s: float) -> str:
    return f"{FULL_TRIALS / votes_per_s / 3600:.2f} h" if votes_per_s > 0 else "—"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run", type=Path, help="a run directory of 'sleight tamper run' (default: make one)")
    ap.add_argument("--questions", type=int, default=2, help="questions of the run made when --run is not given")
    ap.add_argument("--substitutes", type=int, default=101)
    ap.add_argument("--model", default="smollm2-135m-instruct", help="the juror")
    ap.add_argument("--batch-size", type=int, default=16, help="votes a call, as 'tamper judge --batch-size'")
    ap.add_argument("--whole", type=int, default=32, help="votes read the unforked way, for the comparison")
    ap.add_argument("--text", type=int, default=64, help="free-text votes timed (0: none)")
    args = ap.parse_args(argv)

    import torch

    from sleight.backends import load_model
    from sleight.backends.chat import LocalChat
    from sleight.cli.main import quiet_libraries
    from sleight.jury.cast import text_casts_local
    from sleight.jury.rules import rules_for
    from sleight.jury.slots import slot_casts, slot_contexts
    from sleight.jury.study_text import VLLMTextChat
    from sleight.tamper.jury.prompt import builtin_prompt
    from sleight.tamper.jury.run import _load_runs, add_study_reactions, case_of
    from tolerances import LOGPROB_ATOL

    quiet_libraries()
    with tempfile.TemporaryDirectory() as tmp:
        run = args.run
        if run is None:
            run = Path(tmp) / "run"
            _make_run(run, args.questions, args.substitutes)
        model = load_model(args.model, batch_size=args.batch_size)
        print(f"juror {model.info.model_id} ({model.info.engine}, {model.info.device}, {model.info.dtype}, torch threads {torch.get_num_threads()})")

        # -- label slots --------------------------------------------------------------------------
        runs, manifests = _load_runs([run])
        trials = runs[0].trials.to_dict("records")
        rules = rules_for("sleight")
        prompt = builtin_prompt("default")
        ballot = prompt.ballot.with_reading(rules.reading)
        convs = [prompt.messages(case_of(t)) for t in trials]
        contexts, _ = slot_contexts(model, convs, ballot)
        k = len(ballot.fields)
        ids = [list(model.encode(c)) for c in contexts[::k]]
        shared = _shared(ids)
        print(f"{len(convs)} judged trials; judge prompt a vote: median {statistics.median(map(len, ids)):.0f} tokens, {shared} shared by every vote")
        slot_casts(model, convs[:2], ballot)  # warm-up
        t = time.perf_counter()
        forked = []
        for lo in range(0, len(convs), args.batch_size):
            forked += slot_casts(model, convs[lo : lo + args.batch_size], ballot)
        t_fork = time.perf_counter() - t
        n_whole = max(1, min(args.whole, len(convs)))
        t = time.perf_counter()
        whole = []
        for lo in range(0, n_whole, args.batch_size):
            whole += slot_casts(model, convs[lo : min(lo + args.batch_size, n_whole)], ballot, fork=False)
        t_whole = time.perf_counter() - t
        raw = _prefill_rate(model, ids[: min(16, len(ids))])
        tok_fork = sum(len(i) - shared for i in ids) / t_fork  # what the forked path computes (slots' few tokens aside)
        tok_whole = k * sum(map(len, ids[:n_whole])) / t_whole
        print(f"engine prefill, one judge prompt a pass, no padding: {raw:.0f} tokens/s")
        print(
            f"slots, forked: {len(convs)} votes in {t_fork:.1f} s = {len(convs) / t_fork:.2f} votes/s, "
            f"{tok_fork:.0f} prompt tokens/s computed ({tok_fork / raw:.2f} of the engine's prefill); 10,100 votes: {_hours(len(convs) / t_fork)}"
        )
        print(
            f"slots, whole:  {n_whole} votes in {t_whole:.1f} s = {n_whole / t_whole:.2f} votes/s, "
            f"{tok_whole:.0f} prompt tokens/s computed; 10,100 votes: {_hours(n_whole / t_whole)}"
        )
        dp = max((abs(a - b) for f, w in zip(forked, whole) for n in f.soft for a, b in zip(f.soft[n] or (), w.soft[n] or ())), default=0.0)
        dm = max((abs((f.mass[n] or 0) - (w.mass[n] or 0)) for f, w in zip(forked, whole) for n in f.mass), default=0.0)
        same = sum(f.values == w.values for f, w in zip(forked, whole))
        print(f"forked vs whole on {n_whole} votes: {same} identical votes; max |Δ slot probability| {dp:.2e}, max |Δ slot mass| {dm:.2e} (suite tolerance {LOGPROB_ATOL:.0e})")

        # -- free-text votes ----------------------------------------------------------------------
        if args.text:
            study = rules_for("study")
            add_study_reactions(runs, manifests)
            texts = runs[0].trials.to_dict("records")[: args.text]
            tconvs = [prompt.messages(case_of(t)) for t in texts]
            chat = VLLMTextChat(LocalChat(model))
            tb = prompt.ballot.with_reading(study.reading)
            t = time.perf_counter()
            casts = []
            for lo in range(0, len(tconvs), args.batch_size):
                casts += text_casts_local(chat, tconvs[lo : lo + args.batch_size], tb, max_tokens=study.max_tokens, retry=study.retry)
            t_text = time.perf_counter() - t
            pids = [list(model.render_chat([dict(m) for m in c]).ids) for c in tconvs]
            reply_toks = [len(model.encode(c.raw_reply)) if c.raw_reply else 0 for c in casts]
            tok_text = sum(map(len, pids)) / t_text
            print(
                f"text (study): {len(casts)} votes in {t_text:.1f} s = {len(casts) / t_text:.2f} votes/s; prompts median "
                f"{statistics.median(map(len, pids)):.0f} tokens, replies median {statistics.median(reply_toks):.0f} tokens "
                f"(max {max(reply_toks)}); {tok_text:.0f} prompt tokens/s ({tok_text / raw:.2f} of the engine's prefill, "
                f"decoding included); 10,100 votes: {_hours(len(casts) / t_text)}"
            )
        if args.run is None:
            shutil.rmtree(run, ignore_errors=True)
    return 0


def _shared(ids: list[list[int]]) -> int:
    from sleight.backends.cache_ops import common_prefix_len

    return common_prefix_len(ids) if ids else 0


def _prefill_rate(model, ids: list[list[int]]) -> float:
    """Tokens a second of one forward pass a prompt (batch 1, the output layer at the last position)."""
    model.forward(*model.padded([ids[0][:32]]), last_only=True)
    t = time.perf_counter()
    for row in ids:
        model.forward(*model.padded([row]), last_only=True)
    return sum(map(len, ids)) / (time.perf_counter() - t)


if __name__ == "__main__":
    raise SystemExit(main())
