"""``sleight demo``: both instruments end to end on the bundled model, each step timed.

The demo is a list of ordinary ``sleight`` command lines run in-process one after the other, so
what it shows is exactly what a user would type; it prints each step's wall time and the total,
which is how its "minutes, not hours" promise is checked on a given machine.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

from sleight.backends.resolve import DEFAULT_MODEL

# (title, argv template); templates are filled from the demo's own flags.
DEMO_STEPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("A greedy answer, token by token", ("generate", "--max-new-tokens", "24")),
    (
        "Sleight of Word: a small sweep",
        ("tamper", "run", "--questions", "{questions}", "--substitutes", "{substitutes}", "--max-new-tokens", "{max_new_tokens}", "--out", "{out}/tamper/run"),
    ),
    # Label slots: the juror's P(true) vs P(false) at each label's value, a real vote where a free reply
    # from a 135M model is mostly an abstention.
    (
        "The jury (the default model alone: a jury of one, voting by label slots)",
        ("tamper", "judge", "--run", "{out}/tamper/run", "--jury", DEFAULT_MODEL, "--vote", "slots", "--max-new-tokens", "64"),
    ),
    ("Leaderboard, plots and site", ("tamper", "report", "{out}/tamper/run", "--out", "{out}/tamper/report")),
    (
        "Readout audit of the reader-forecast prompt",
        ("readout", "audit", "--preset", "forecast", "--limit", "{items}", "--variants", "original,space,stem,deleted_instruction", "--overwrite", "--out", "{out}/readout/audit"),
    ),
    ("Does the forecast rank the reader's correctness?", ("readout", "forecast", "--limit", "{items}", "--out", "{out}/readout/forecast")),
    ("P(True): five readouts of one prompt", ("readout", "ptrue", "--limit", "{items}", "--out", "{out}/readout/ptrue")),
)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``demo`` to the top-level subcommands."""
    p = sub.add_parser(
        "demo",
        help="run both instruments end to end on the bundled model (small sizes), timing each step",
        description="A small tamper sweep judged by a jury of one and reported, then a readout audit, the forecast "
        "pipeline and the P(True) readouts, all on the bundled default model. Prints each step's wall time and the "
        "total. Rerunning resumes the tamper sweep.",
    )
    p.add_argument("--out", default="runs/demo", help="output folder (default: runs/demo)")
    p.add_argument("--questions", type=int, default=3, help="tamper questions (default: 3)")
    p.add_argument("--substitutes", type=int, default=6, help="substitutes per question, 'Mandela effect' first (default: 6)")
    p.add_argument("--max-new-tokens", type=int, default=96, help="tamper budget per reply (default: 96; the benchmark uses 256)")
    p.add_argument("--items", type=int, default=6, help="readout items per step (default: 6)")
    p.set_defaults(func=cmd_demo)


def demo_argvs(fill: dict[str, str]) -> list[tuple[str, list[str]]]:
    """Every step's title and command line, the templates filled from the demo's flags."""
    return [(title, [a.format(**fill) for a in argv]) for title, argv in DEMO_STEPS]


def format_seconds(s: float) -> str:
    """``42.1 s`` or ``3 min 05 s``: easy to compare with a minutes budget."""
    if s < 60:
        return f"{s:.1f} s"
    m, sec = divmod(int(round(s)), 60)
    return f"{m} min {sec:02d} s"


def timing_table(times: Sequence[tuple[str, float]], total: float) -> str:
    """The closing summary: one line per step, then the total."""
    width = max((len(t) for t, _ in times), default=0)
    lines = [f"  {i}. {title:<{width}}  {format_seconds(s):>12}" for i, (title, s) in enumerate(times, 1)]
    lines.append(f"  {'total':<{width + 3}}  {format_seconds(total):>12}")
    return "\n".join(lines)


def run_steps(steps: Sequence[tuple[str, list[str]]], run: Callable[[list[str]], int], clock: Callable[[], float] = time.perf_counter) -> tuple[int, list[tuple[str, float]], float]:
    """Run the steps in order, stopping at the first that fails; (exit code, per-step times, total)."""
    times: list[tuple[str, float]] = []
    start = clock()
    for i, (title, argv) in enumerate(steps, 1):
        print(f"\n=== [{i}/{len(steps)}] {title}\n$ sleight {' '.join(argv)}", flush=True)
        t0 = clock()
        code = run(argv)
        times.append((title, clock() - t0))
        print(f"--- step {i} took {format_seconds(times[-1][1])}", flush=True)
        if code:
            return code, times, clock() - start
    return 0, times, clock() - start


def cmd_demo(args: argparse.Namespace) -> int:
    """Both instruments end to end on the bundled model, small enough for a laptop CPU."""
    from sleight.cli.common import check_writable
    from sleight.errors import UserError

    for flag in ("questions", "substitutes", "max_new_tokens", "items"):
        if getattr(args, flag) < 1:
            raise UserError(f"--{flag.replace('_', '-')} must be at least 1 (got {getattr(args, flag)})")
    check_writable(args.out, "--out")
    fill = {k: str(v) for k, v in vars(args).items()}
    code, times, total = run_steps(demo_argvs(fill), args.run_argv)
    print("\nWall time per step:\n" + timing_table(times, total), flush=True)
    if code:
        print(f"\nThe demo stopped at step {len(times)} (exit code {code}); rerun 'sleight demo' to resume.")
        return code
    out = args.out
    print(f"\nDone. Open {out}/tamper/report/index.html (or: sleight tamper view {out}/tamper/report),")
    print(f"{out}/tamper/report/leaderboard.md, {out}/readout/audit/report.md, {out}/readout/forecast/report.md and {out}/readout/ptrue/report.md.")
    return 0
