"""``sleight.progress``: the inner count restarts per item and never exceeds what the item can
decode; off a terminal, one plain line per item (plus rare heartbeats) instead of bar redraws."""

from __future__ import annotations

import io
import re

from sleight.progress import SweepProgress, clock_text, heartbeat_line, item_line


class Clock:
    """A clock the test advances by hand (the progress reads time only through it)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_line_formats():
    assert clock_text(5) == "0:05" and clock_text(125) == "2:05" and clock_text(3725) == "1:02:05"
    line = item_line("tamper", "q003", 18, 36, "trial", 576, 12.0, 30.0, 0.6)
    assert line == "tamper: q003 done (18/36 trials, 50%); 576 tok in 12.0s (48.0 tok/s); elapsed 0:30, 0.60 trials/s, eta 0:30"
    assert item_line("tamper", "q1", 0, 6, "trial", 0, 0.0, 0.0, 0.0).endswith("eta ?")
    assert heartbeat_line("tamper", "q003 x6", 200, 576, 31.0) == "tamper: q003 x6 running, 200/576 tok after 31s"


def test_plain_lines_off_a_terminal():
    out, clock = io.StringIO(), Clock()
    prog = SweepProgress(18, initial=6, desc="tamper", stream=out, every_s=30, clock=clock)
    assert not prog.interactive  # a StringIO is no terminal
    for q, tokens in (("q002", 300), ("q003", 250)):
        prog.start_item(f"{q} clean", 96)
        prog.tokens(40)
        prog.start_item(f"{q} x6", 6 * 80, new_item=False)
        for _ in range(tokens // 10):
            clock.t += 1.0
            prog.tokens(10)
        prog.finish_item(6, q)
    prog.close()
    lines = out.getvalue().splitlines()
    done = [ln for ln in lines if " done " in ln]
    assert [ln.split()[1] for ln in done] == ["q002", "q003"]
    assert "(12/18 trials, 67%); 340 tok" in done[0] and "(18/18 trials, 100%); 290 tok" in done[1]
    beats = [ln for ln in lines if "running" in ln]
    # 30 s of a 30 s-long question in the first item, then 25 s: one heartbeat, phase tokens under the phase budget
    assert len(beats) == 1 and re.search(r"q002 x6 running, (\d+)/480 tok", beats[0])
    assert int(re.search(r"running, (\d+)/", beats[0]).group(1)) <= 480
    assert len(lines) == 3 and "\r" not in out.getvalue()


def test_inner_bar_restarts_per_item_with_its_budget():
    out = io.StringIO()
    prog = SweepProgress(18, desc="tamper", stream=out, interactive=True)
    seen = []
    for q in ("q001", "q002", "q003"):
        prog.start_item(f"{q} clean", 96)
        prog.tokens(50)
        seen.append((prog._inner.n, prog._inner.total))
        prog.start_item(f"{q} x6", 576, new_item=False)
        for _ in range(6):
            prog.tokens(90)
        seen.append((prog._inner.n, prog._inner.total))
        prog.finish_item(6, q)
    assert seen == [(50, 96), (540, 576)] * 3  # never "1146 tok" of a 576-token question
    assert prog._outer.n == 18 and prog.total_tokens == 3 * 590
    prog.close()
    assert "q003 x6" in out.getvalue()


def test_disabled_prints_nothing_but_counts():
    out = io.StringIO()
    prog = SweepProgress(4, desc="tamper", stream=out, enabled=False)
    prog.start_item("q1", 10)
    prog.tokens(7)
    prog.finish_item(4)
    prog.close()
    assert out.getvalue() == "" and prog.total_tokens == 7 and prog.done == 4
