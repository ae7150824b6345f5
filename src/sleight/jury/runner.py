"""One juror through a list of cases: votes cast as they complete, committed a batch at a time,
counted (asked, cast, abstained, retried, errors, votes/s, slot masses) for the summary line.

Instrument-neutral: the caller says how a vote becomes a stored row and where rows go
(``collect``), and how a batch is committed (``commit``); a crash loses only the rows not committed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sleight.backends.chat import Messages
from sleight.jury.ballot import Ballot
from sleight.jury.cast import Cast
from sleight.jury.jurors import Juror
from sleight.jury.slots import MASS_FLOOR
from sleight.progress import SweepProgress


@dataclass
class JurorStats:
    juror: str
    vote: str = ""  # how this juror votes: slots, schema or text
    asked: int = 0  # votes requested in this call
    skipped: int = 0  # already stored
    abstained: int = 0  # of the asked: unparsable after the retry, or a transport error
    retried: int = 0
    errors: int = 0
    seconds: float = 0.0
    paths: dict[str, int] = field(default_factory=dict)  # votes per path that produced them
    masses: list[float] = field(default_factory=list)  # slot masses of this call's votes
    last_error: str | None = None
    # The rules read an unparsable reply as a false vote (the study's: ``scripts/panel_combine.py``
    # lines 71-75 at 08d2bae count only true votes), so such a reply is a vote cast, stored as it came.
    unparsable_is_false: bool = False
    read_false: int = 0  # of the abstained: unparsable replies (not failed requests) those rules read as false votes

    @property
    def valid(self) -> int:
        """Readable votes cast in this call."""
        return self.asked - self.abstained

    @property
    def cast(self) -> int:
        """Votes cast in this call, as the rules count them: the readable ones, and under the
        study's rules the unparsable replies too (each a false vote)."""
        return self.valid + self.read_false

    @property
    def votes_per_s(self) -> float:
        return self.asked / self.seconds if self.seconds > 0 else 0.0

    @property
    def median_mass(self) -> float | None:
        return statistics.median(self.masses) if self.masses else None

    @property
    def below_floor(self) -> int:
        return sum(m < MASS_FLOOR for m in self.masses)

    def count(self, cast: Cast) -> None:
        self.asked += 1
        self.abstained += cast.abstained
        self.read_false += int(cast.abstained and cast.error is None and self.unparsable_is_false)
        self.retried += cast.attempts == 2
        self.errors += cast.error is not None
        self.last_error = cast.error or self.last_error
        self.paths[cast.path] = self.paths.get(cast.path, 0) + 1
        self.masses += [m for m in cast.mass.values() if m is not None]

    def lines(self) -> list[str]:
        """This juror's summary: asked, cast, abstained, speed, paths, and its slot mass."""
        votes = f"cast {self.valid} valid vote(s)"
        if self.read_false:
            votes = f"cast {self.cast} vote(s) ({self.valid} valid, {self.read_false} unparsable read as false by the study's rule)"
        line = (
            f"  {self.juror}: asked {self.asked}, {votes}, already stored {self.skipped}, abstained "
            f"{self.abstained} (retried {self.retried}, transport errors {self.errors}), {self.seconds:.1f}s"
        )
        if self.asked:
            line += f" ({self.votes_per_s:.2f} votes/s; " + ", ".join(f"{k} {v}" for k, v in sorted(self.paths.items())) + ")"
        out = [line]
        if self.median_mass is not None:
            out.append(f"    slot mass: median {self.median_mass:.3f} over {len(self.masses)} slots, {self.below_floor} below {MASS_FLOOR}")
            if self.median_mass < MASS_FLOOR:
                out.append("    warning: this juror's label slots hold less than half the next-token mass; it is read where it was about to write something else")
        return out


def no_vote_line(stats: Sequence[JurorStats]) -> str:
    """The one line a judge command fails with when the jury cast no valid vote at all."""
    asked = sum(j.asked for j in stats)
    errors = sum(j.errors for j in stats)
    abstained = sum(j.abstained for j in stats) - errors
    failing = next((j for j in stats if j.last_error), None)
    last = "" if failing is None else f"; last error from {short(failing.juror)}: {failing.last_error[:160]}"  # type: ignore[index]
    text = f"the jury cast no valid vote: {asked} asked, {errors} failed request(s), {abstained} unreadable reply(ies){last}; stored votes are kept, rerun to ask again"
    return text.replace("\n", " ")


def short(juror: str) -> str:
    return juror.rsplit("#", 1)[-1] if juror.startswith("openai:") else juror


def run_juror(
    judge: Juror,
    stats: JurorStats,
    conversations: Sequence[Messages],
    ballot: Ballot,
    collect: Callable[[int, Cast], Hashable],
    commit: Callable[[Hashable], int],
    *,
    max_tokens: int,
    batch: int,
    progress: bool = True,
) -> None:
    """Cast ``judge``'s votes on ``conversations``.

    ``collect(i, vote)`` stores the row of case ``i`` in a bucket and returns the bucket's key;
    ``commit(key)`` writes that bucket's pending rows and returns how many it wrote. A bucket is
    committed as soon as it holds ``batch`` rows, and every bucket once at the end (even after an
    error). Progress (:class:`sleight.progress.SweepProgress`): a bar on a terminal, one plain line per commit elsewhere.
    """
    stats.vote = judge.mode
    start = time.perf_counter()
    prog = SweepProgress(len(conversations), unit="vote", desc=f"judge {short(stats.juror)} ({judge.mode})", enabled=progress, tokens=False)
    pending: dict[Hashable, int] = {}
    try:
        for i, cast in judge.cast(conversations, ballot, max_tokens=max_tokens):
            bucket = collect(i, cast)
            stats.count(cast)
            pending[bucket] = pending.get(bucket, 0) + 1
            prog.advance(1)
            if pending[bucket] >= max(batch, 1):
                commit(bucket)
                pending[bucket] = 0
                prog.finish_item(0, f"{stats.asked} asked, {stats.abstained} abstained")
    finally:
        for bucket, n in pending.items():
            if n:
                commit(bucket)
        if stats.asked and any(pending.values()):
            prog.finish_item(0, f"{stats.asked} asked, {stats.abstained} abstained")
        prog.close()
        stats.seconds += time.perf_counter() - start


Loader = Callable[[str], Any]



class Tally:
    """What every judge command's summary shares: its jurors' counts and the lines it prints about
    them (a mixin for the commands' summary dataclasses, which declare ``jurors`` and ``compacted``)."""

    jurors: list[JurorStats]
    compacted: int

    @property
    def asked(self) -> int:
        return sum(j.asked for j in self.jurors)

    @property
    def cast(self) -> int:
        """Votes cast as the rules count them (:attr:`JurorStats.cast`); none at all fails the command."""
        return sum(j.cast for j in self.jurors)

    @property
    def valid(self) -> int:
        return sum(j.valid for j in self.jurors)

    @property
    def read_false(self) -> int:
        return sum(j.read_false for j in self.jurors)

    def tally_lines(self) -> list[str]:
        """Each juror's lines, the jury-of-one note, compaction, and valid votes cast of those asked;
        under the study's rules, how many unparsable replies were read as false votes, with a
        warning when no reply at all could be read."""
        lines: list[str] = []
        for j in self.jurors:
            lines += j.lines()
        if len(self.jurors) == 1:
            lines.append("  note: a jury of one -- its vote is the verdict; the report labels it as such")
        if self.compacted:
            lines.append(f"  {self.compacted} superseded vote row(s) compacted away")
        line = f"valid votes cast: {self.valid} of {self.asked} asked"
        if self.read_false:
            line += f"; the study's rule reads the {self.read_false} unparsable reply(ies) as false votes (every label false)"
        lines.append(line)
        if self.asked and not self.valid and self.read_false:
            lines.append(study_no_valid_vote_line(self.jurors))
        return lines


def study_no_valid_vote_line(stats: Sequence[JurorStats]) -> str:
    """The warning a judge command prints, and does not fail with, when the jury wrote no readable
    reply but the study's rule counts the unparsable ones: what that rule made of them."""
    read_false = sum(j.read_false for j in stats)
    return (
        f"warning: {no_vote_line(stats).split(';')[0]}; under the study's conventions each of the {read_false} unparsable "
        "reply(ies) counts as a false vote, as the study counted them (scripts/panel_combine.py lines 71-75 at 08d2bae), "
        "so every label of those trials is false"
    )
