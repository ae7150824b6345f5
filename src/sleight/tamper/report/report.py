"""``sleight tamper report``: tables (md/csv/tex), plots and the static site for one or more runs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sleight import rundir
from sleight.errors import UserError
from sleight.progress import SweepProgress
from sleight.render import fmt
from sleight.tamper.report import plots, tables
from sleight.tamper.report.export import Section, to_latex, to_markdown, write_csv
from sleight.tamper.report.meta import ReportMeta
from sleight.tamper.report.paper import B_DEFAULT
from sleight.tamper.report.paper_sections import model_trials, paper_sections
from sleight.tamper.report.runs import RunData, load_runs
from sleight.tamper.report.site import write_site


@dataclass
class ReportPaths:
    out: Path
    markdown: Path
    latex: Path
    csv: list[Path] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    index: Path | None = None


def jury_preamble(runs: Sequence[RunData]) -> str:
    """Who judged each run, said plainly; a jury of one is named as such."""
    parts = []
    for r in runs:
        if r.verdicts is None:
            parts.append(f"{r.model}: not judged yet (sleight tamper judge --run {r.run_dir} --jury ...)")
            continue
        variant = r.jury_meta.get("prompt_variant", "default")
        who = ", ".join(r.jury)
        if len(r.jury) == 1:
            parts.append(f"{r.model}: JURY OF ONE ({who}) — its single vote is the verdict, no majority and no agreement can be measured")
        else:
            rule = (
                "a label true when two jurors say true, an unparsable reply read as false (the study's rules)"
                if r.jury_meta.get("conventions") == "study"
                else "majority = two agreeing non-abstaining votes"
            )
            parts.append(f"{r.model}: {r.jury_label} ({who}); {rule}")
        parts[-1] += f"; judge prompt '{variant}'"
        slot = tables.abstention_table([r])
        slot = slot[slot["Slots"] > 0]
        if len(slot):
            parts[-1] += "; label-slot votes, median slot mass " + ", ".join(
                f"{fmt(m, 'Median slot mass')}" + (f" ({tables._short(j)})" if len(r.jury) > 1 else "")
                for j, m in zip(slot["Juror"], slot["Median slot mass"])
            )
    return "Judges — " + " | ".join(parts) + "."


def sections(runs: Sequence[RunData], meta: ReportMeta | None = None, *, B: int = B_DEFAULT) -> list[Section]:
    """Every section in order: the paper's Table 1, the counts behind it, the paper's other tables and
    claims (:mod:`.paper_sections`), then the jury's agreement, abstentions and the lexical baseline."""
    t1 = tables.table1(runs)
    abst = tables.abstention_table(runs)
    _, paper = paper_sections(list(runs), meta, B=B)
    return [
        paper[0],
        Section(
            "leaderboard",
            "Table 1 — counts, undecided trials and both Δ definitions (sorted by flagged)",
            t1,
            tables.TABLE1_SHOWN,
            "Eligible: trials with ≥1 swap, the ones the jury is asked about and the denominator of every "
            "percentage. Voted: eligible trials with at least one valid (non-abstaining) vote. Undecided: eligible "
            "trials where some label had no majority (abstentions, split votes, not yet judged), kept in the "
            "denominator. A rate is — when no eligible trial was voted on or decided (under the study's rule an "
            "unparsable reply is a false vote, so a trial can be decided, every label false, without a valid vote). "
            "Flag. (M.E.): flagged among the entity substitute ('Mandela effect'). Ign.: every label has a false "
            "majority (none true). A label counts when "
            "the jury's majority says true. Δ: mean over eligible trials of the post-swap minus clean "
            "surprisal/entropy (top-20 entropy), in nats; 'matched' is the position-matched variant "
            "(non-overlapping windows vs the clean run's tokens after its own triggers).",
            warning=" ".join(tables.table1_warnings(t1)),
        ),
        *paper[1:],
        Section(
            "agreement",
            "Jury agreement",
            tables.agreement_table(runs),
            ["Model", "Label", "Measure", "κ", "n"],
            "Cohen's κ per pair of jurors and Fleiss' κ over the jury, on the trials where those jurors all "
            "voted (n). — : undefined (every vote in one category, or no shared votes).",
        ),
        Section(
            "abstentions",
            "Abstentions and slot mass per juror",
            abst,
            tables.ABSTENTION_COLUMNS,
            "Abstained: unparsable after one retry, or the request failed (Errors; asked again on the next "
            "'judge'). Missing: judged trials with no stored vote from that juror. Path: how the votes were cast "
            "(slots: P(true) vs P(false) read at each label's value in a prefilled JSON; schema: a server's JSON-schema "
            "response_format; text: a free reply, parsed). Median slot mass: the median, over the juror's label slots, "
            "of the next-token mass the two options hold there (the readout audit applied to the jury); Below floor: "
            f"slots under {tables.SLOT_MASS_FLOOR}.",
            warning=" ".join(tables.jury_warnings(abst)),
        ),
        Section(
            "lexical",
            "Lexical baseline (no model) beside the jury's flagged label",
            tables.lexical_table(runs),
            ["Model", "Eligible", "Lexical flag. %", "Jury flag. %", "Both", "Lexical only", "Jury only", "Neither", "Agreement %", "κ"],
            "The baseline flags replies that mention the substitute in meta-language (typo, I meant, replaced, "
            "should be, the word quoted). Agreement and κ over trials with a jury majority on flagged.",
        ),
    ]


def gold_section(runs: Sequence[RunData], gold_files: Sequence[Path]) -> Section | None:
    """Each juror's and the jury's agreement with people's labels (``--gold FILE``), per label."""
    if not gold_files:
        return None
    from sleight.tamper.jury.gold import GOLD_COLUMNS, gold_agreement, read_gold

    by_model = {r.model: r for r in runs}
    frames = []
    for path in gold_files:
        g = read_gold(Path(path))
        run = by_model.get(g.model) or (runs[0] if len(runs) == 1 and not g.model else None)
        if run is None:
            raise UserError(f"gold file {path} labels model '{g.model}', which none of the runs is ({', '.join(by_model)})")
        if run.verdicts is None:
            raise UserError(f"gold file {path}: run {run.run_dir} is not judged yet, so there is nothing to compare the people with")
        frames.append(gold_agreement(run.model, g.labels, run.votes, run.verdicts, run.jury))
    return Section(
        "gold",
        "Agreement with people (human gold subset)",
        pd.concat(frames, ignore_index=True),
        GOLD_COLUMNS,
        "Per label, each juror's and the jury's agreement with people's labels on the trials they labelled "
        "(sleight tamper gold draws them, stratified by the jury's labels; the viewer's labelling mode exports them). "
        "n: labelled trials where the rater voted (abstentions and labels without majority are Not voted, not "
        "disagreements); Accuracy: share of those where rater and people agree; κ: Cohen's κ (— when undefined: "
        "every label in one category).",
    )


def write_report(
    run_dirs: Sequence[Path],
    out: Path,
    *,
    site: bool = True,
    progress: bool = True,
    gold: Sequence[Path] = (),
    meta: ReportMeta | None = None,
    B: int = B_DEFAULT,
) -> ReportPaths:
    """Every output of the report for ``run_dirs`` (one run per model) under ``out``; ``gold``:
    people's label files to compare the jury with; ``meta``: the models' display names, thinking
    marks, sizes and pairs (:mod:`.meta`; without it, run names and no marks); ``B``: bootstrap
    replicates of every interval."""
    if not run_dirs:
        raise UserError("give at least one run directory to report on")
    runs = load_runs([Path(d) for d in run_dirs])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if B < 1:
        raise UserError(f"--bootstrap {B}: give at least one replicate")
    secs = sections(runs, meta, B=B)
    gold_sec = gold_section(runs, gold)
    if gold_sec is not None:
        secs.append(gold_sec)
    preamble = jury_preamble(runs)
    paths = ReportPaths(out, out / "leaderboard.md", out / "leaderboard.tex")
    rundir.write_text(paths.markdown, to_markdown(secs, "Sleight of Word — results", preamble))
    rundir.write_text(paths.latex, to_latex(secs))
    for s in secs:
        p = out / ("leaderboard.csv" if s.key == "leaderboard" else f"{s.key}.csv")
        write_csv(s, p)
        paths.csv.append(p)
    board = next(s for s in secs if s.key == "leaderboard")
    paths.plots.append(plots.plot_dissociation(board.frame, out / "dissociation.png"))
    paths.plots.append(plots.plot_swap_profile(plots.swap_profile(runs), out / "swap_profile.png"))
    if site:
        with SweepProgress(len(runs), unit="model", desc="viewer pages", enabled=progress, tokens=False) as prog:
            aliases = {model_trials(r, meta).display: r.model for r in runs}
            paths.index = write_site(
                out, runs, secs, [p.name for p in paths.plots], preamble=preamble, progress=lambda m: prog.finish_item(1, str(m)), aliases=aliases
            )
    return paths
