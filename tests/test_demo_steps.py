"""``sleight demo``: every step is a command line the real parser accepts, and the demo prints each
step's wall time and the total (checked on cheap real commands; the demo itself is a benchmark)."""

from __future__ import annotations

import re

from sleight.cli.demo import demo_argvs, format_seconds, run_steps, timing_table
from sleight.cli.main import build_parser, main


def test_every_step_parses():
    fill = {"out": "runs/demo", "questions": "3", "substitutes": "6", "max_new_tokens": "96", "items": "6"}
    steps = demo_argvs(fill)
    assert len(steps) == 7
    parser = build_parser()
    for _, argv in steps:
        args = parser.parse_args(argv)
        assert callable(args.func)
        assert not any("{" in a for a in argv)


def test_times_each_step_and_the_total(capsys):
    steps = [("List models", ["models"]), ("A bad flag", ["tamper", "run", "--max-new-tokens", "0"]), ("Never run", ["models"])]
    code, times, total = run_steps(steps, main)
    out = capsys.readouterr().out
    assert code == 2 and [t for t, _ in times] == ["List models", "A bad flag"]  # stops at the failing step
    assert all(s >= 0 for _, s in times) and total >= sum(s for _, s in times)
    assert out.count("--- step ") == 2 and "=== [3/3]" not in out
    table = timing_table(times, total)
    assert re.search(r"1\. List models\s+\d+\.\d s", table) and re.search(r"total\s+\d+\.\d s", table)


def test_format_seconds():
    assert format_seconds(42.14) == "42.1 s" and format_seconds(185) == "3 min 05 s"
