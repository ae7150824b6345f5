"""Progress of every long command: bars on a terminal, plain lines in a log (the only progress display).

A sweep is a sequence of *items* (a question, a chunk of items, a batch of votes), each worth some
*units* of the outer count (trials, items, votes) and, where the model decodes, up to a known
number of tokens. On a terminal the outer
count is a tqdm bar and the inner bar restarts at every item with that item's token budget as
its total, so it can never read more tokens than the item can decode. When stderr is not a
terminal (a log file, CI, a pipe) bars would write hundreds of carriage-return lines, so the same
progress is one plain line per finished item, plus a heartbeat line at most every
``every_s`` seconds while one long item runs. Stage messages (:meth:`SweepProgress.status`) are one
``sleight: ...`` line either way; a count that moves without an item finishing
(:meth:`SweepProgress.advance`, a vote between two commits) moves the bar and writes no line.

The tamper sweep, the readout audit, the forecast and P(True) pipelines, the judges and the report's
viewer pages all report through :class:`SweepProgress`; with ``--no-progress`` it prints nothing.

The line formats are pure functions (:func:`item_line`, :func:`heartbeat_line`), tested as such.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any, TextIO


def clock_text(seconds: float) -> str:
    """``m:ss`` or ``h:mm:ss``: short enough for a log line."""
    s = max(0, int(round(seconds)))
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


def item_line(
    desc: str, label: str, done: int, total: int, unit: str, tokens: int | None, item_s: float, elapsed_s: float, rate_units: float
) -> str:
    """One finished item: where the sweep stands, what the item cost (``tokens=None``: a sweep that
    decodes nothing, so no token count), and when it should end."""
    pct = 100.0 * done / total if total else 100.0
    left = (total - done) / rate_units if rate_units > 0 else None
    eta = clock_text(left) if left is not None else "?"
    cost = ""
    if tokens is not None:
        tok_s = tokens / item_s if item_s > 0 else 0.0
        cost = f"{tokens} tok in {item_s:.1f}s ({tok_s:.1f} tok/s); "
    return f"{desc}: {label} done ({done}/{total} {unit}s, {pct:.0f}%); {cost}elapsed {clock_text(elapsed_s)}, {rate_units:.2f} {unit}s/s, eta {eta}"


def heartbeat_line(desc: str, label: str, tokens: int, budget: int | None, item_s: float) -> str:
    """A long item still running: its tokens so far against what it can decode at most."""
    of = f"/{budget}" if budget else ""
    return f"{desc}: {label} running, {tokens}{of} tok after {item_s:.0f}s"


class SweepProgress:
    """Outer count over units (trials, items, votes) and an inner, per-item token count; see the module doc.

    ``interactive=None`` asks the stream (``isatty``); ``enabled=False`` prints nothing at all;
    ``tokens=False``: the sweep decodes nothing, so there is no inner bar and no token count.
    """

    def __init__(
        self,
        total: int,
        *,
        initial: int = 0,
        unit: str = "trial",
        desc: str = "progress",
        enabled: bool = True,
        stream: TextIO | None = None,
        interactive: bool | None = None,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.perf_counter,
        tokens: bool = True,
    ) -> None:
        self.total, self.done, self.unit, self.desc = total, initial, unit, desc
        self.enabled = enabled
        self.stream = stream if stream is not None else sys.stderr
        self.interactive = bool(interactive if interactive is not None else _isatty(self.stream))
        self.every_s = every_s
        self.clock = clock
        self.start = clock()
        self.session_units = 0  # units finished by this session (the rate and eta use these)
        self.label = ""
        self.budget: int | None = None
        self.item_tokens = 0  # tokens of the current item (all its phases)
        self.phase_tokens = 0  # tokens since the last start_item (what the inner bar shows)
        self.item_start = self.start
        self.last_line = self.start
        self.total_tokens = 0
        self._outer: Any = None
        self._inner: Any = None
        if enabled and self.interactive:
            from tqdm.auto import tqdm

            self._outer = tqdm(
                total=total,
                initial=initial,
                unit=unit,
                desc=desc,
                dynamic_ncols=True,
                file=self.stream,
                # units/s even below one per second (tqdm would switch to s/unit), and the ETA
                bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]",
            )
            if tokens:
                self._inner = tqdm(total=None, unit="tok", desc="  decoding", leave=False, dynamic_ncols=True, position=1, file=self.stream)

    def start_item(self, label: str, token_budget: int | None, *, new_item: bool = True) -> None:
        """A new item (or a new phase of the same item with ``new_item=False``): the inner count
        restarts at zero with ``token_budget`` as its total."""
        self.label = label
        self.budget = token_budget
        self.phase_tokens = 0
        if new_item:
            self.item_tokens = 0
            self.item_start = self.clock()
        if self._inner is not None:
            self._inner.reset(total=token_budget)
            self._inner.set_description(f"  {label}")

    def tokens(self, n: int) -> None:
        """``n`` more tokens decoded in the current item."""
        self.item_tokens += n
        self.phase_tokens += n
        self.total_tokens += n
        if not self.enabled:
            return
        if self._inner is not None:
            self._inner.update(n)
            return
        if self._outer is not None:  # bars without a token bar: nothing to show
            return
        now = self.clock()
        if now - self.last_line >= self.every_s:
            self._write(heartbeat_line(self.desc, self.label, self.phase_tokens, self.budget, now - self.item_start))
            self.last_line = now

    def already_done(self, units: int) -> None:
        """``units`` found done by an earlier session (a resumed run): counted, not in this session's rate."""
        self.done += units
        if self._outer is not None:
            self._outer.update(units)

    def advance(self, units: int) -> None:
        """``units`` more of the outer count are done, no item finished (the bar moves; no line)."""
        self.done += units
        self.session_units += units
        if self._outer is not None:
            self._outer.update(units)

    def finish_item(self, units: int, label: str | None = None) -> None:
        """The current item is committed: ``units`` more of the outer count are done."""
        self.advance(units)
        now = self.clock()
        elapsed = now - self.start
        rate = self.session_units / elapsed if elapsed > 0 else 0.0
        if not self.enabled:
            return
        if self._outer is not None:
            if self.total_tokens:
                self._outer.set_postfix_str(f"{self.total_tokens / max(elapsed, 1e-9):.0f} tok/s")
            return
        name = label if label is not None else self.label
        tokens = self.item_tokens if self.total_tokens else None
        self._write(item_line(self.desc, name, self.done, self.total, self.unit, tokens, now - self.item_start, elapsed, rate))
        self.last_line = now

    def show(self, done: int, line: str, *, changed: bool = True) -> None:
        """A whole state read from elsewhere (the sweep polls its runs' folders): ``done`` units and
        the ``line`` that describes them. On a terminal the bar moves to ``done`` with the line as
        its postfix; off a terminal the line is written when ``changed``."""
        if not self.enabled:
            return
        if self._outer is not None:
            self._outer.n = self.done = done
            self._outer.set_postfix_str(line, refresh=True)
        elif changed:
            self.done = done
            self._write(line)

    def status(self, message: str) -> None:
        """A stage of the command (loading, scoring, writing): one ``sleight: ...`` line, above the bars."""
        if not self.enabled:
            return
        line = f"sleight: {message}"
        if self._outer is not None:
            from tqdm.auto import tqdm

            tqdm.write(line, file=self.stream)
        else:
            self._write(line)

    def close(self) -> None:
        for bar in (self._inner, self._outer):
            if bar is not None:
                bar.close()
        self._inner = self._outer = None

    def _write(self, line: str) -> None:
        print(line, file=self.stream, flush=True)

    def __enter__(self) -> SweepProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _isatty(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or not a real file
        return False
