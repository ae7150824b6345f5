"""``sleight readout forecast`` and ``sleight readout ptrue``: does a score rank its target?

Both commands load items (validated before the model loads), run the model steps of their pipeline
into the run directory ``--out`` (:mod:`sleight.readout.downstream_run`: resumable after a kill, a
changed config refused), and write ``readings.parquet`` (one row per item and scored position /
readout), ``summary.json`` (every number of the report, with the run's model record), ``report.md``,
``report.html`` and PNG plots.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from sleight.cli.common import RESUME, add_model_args, add_output_args, add_progress_arg, check_writable, model_from_args
from sleight.errors import UserError
from sleight.render import MISSING, fmt, interval


def _fixture(name: str) -> str:
    """Path of a shipped fixture (``sleight/data/fixtures``)."""
    import sleight

    return str(Path(sleight.__file__).parent / "data" / "fixtures" / name)


def _common(p: argparse.ArgumentParser, fixture: str, out: str) -> None:
    p.add_argument("--items", default=None, help=f"JSONL items (default: the shipped fixture {fixture})")
    add_output_args(p, out, overwrite=RESUME)
    p.add_argument("--limit", type=int, default=None, help="use only the first N items (quick runs)")
    p.add_argument("--B", type=int, default=20000, help="bootstrap replicates (default: 20000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    p.add_argument("--continuation-tokens", type=int, default=16, help="greedy tokens decoded at each scored position, as in the audit (default: 16)")
    add_progress_arg(p)
    p.add_argument("--rescore", action="store_true", help="no model: re-score the readings already in --out (e.g. with another --B or --seed) and rewrite the reports")
    p.add_argument("--chunk", type=int, default=8, metavar="N", help="items per committed part: a killed run redoes at most one part (default: 8)")
    add_model_args(p, batch_size=64)


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``forecast`` and ``ptrue`` to ``sleight readout``."""
    p = sub.add_parser(
        "forecast",
        help="reader-forecast pipeline: does the forecast rank the note-only reader's correctness?",
        description=(
            "The study's pipeline (SPEC 4.4): the model writes a <=32-word note per passage, answers the item from the note "
            "alone (highest full-sequence log-prob of A-D, spaced and unspaced), and forecasts how many of 100 such readers "
            "answer correctly, read at the original and the stemmed position. Reports AUROC and Brier per position, the "
            "paired gain with a cluster-bootstrap interval, and the option-mass diagnostics."
        ),
    )
    _common(p, "race_items.jsonl", "runs/readout-forecast")
    p.add_argument("--note-words", type=int, default=32, help="notes are cut to this many words (default: 32)")
    p.add_argument("--note-tokens", type=int, default=64, help="greedy budget for writing a note (default: 64)")
    p.set_defaults(func=cmd_forecast)

    p = sub.add_parser(
        "ptrue",
        help="P(True) experiment: do five readouts of lm-polygraph's prompt rank answer correctness?",
        description=(
            "The model answers each question greedily; correctness is the first standalone letter (lettered items) or an "
            "alias match on word boundaries (free answers). lm-polygraph's P(True) prompt is read five ways (Library, "
            "Renormalised, Labels in place, Moved, Deleted); each gets AUROC and PRR with intervals, its option mass and "
            "argmax class at the scored position, and paired differences against Library."
        ),
    )
    _common(p, "qa_items.jsonl", "runs/readout-ptrue")
    p.add_argument(
        "--answers",
        default="both",
        choices=["own", "constructed", "both"],
        help="own: the model's greedy answers (lm-polygraph's setting); constructed: gold vs wrong answer per question; both (default)",
    )
    p.add_argument("--max-new-tokens", type=int, default=32, help="greedy budget for the model's answers (default: 32)")
    p.add_argument("--no-instruct", dest="instruct", action="store_false", help="lm-polygraph's instruct=False: answer and score the raw prompt strings, no chat template")
    p.set_defaults(func=cmd_ptrue)


def _check_args(args: argparse.Namespace) -> None:
    if args.B < 1:
        raise UserError(f"--B must be a positive number of replicates, got {args.B}")
    if args.continuation_tokens < 1:
        raise UserError(f"--continuation-tokens must be at least 1, got {args.continuation_tokens}")
    for name in ("note_words", "note_tokens", "max_new_tokens", "chunk"):
        if getattr(args, name, 1) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")


class _Progress:
    """A tqdm bar over generated tokens plus one-line stage messages (silent with --no-progress)."""

    def __init__(self, enabled: bool, total: int, unit: str) -> None:
        self.enabled = enabled
        self.total, self.unit = total, unit
        self.bar: Any = None

    def status(self, msg: str) -> None:
        if self.enabled:
            self.close()
            print(f"sleight: {msg}", file=sys.stderr, flush=True)

    def tokens(self, n: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit=self.unit, desc="greedy", file=sys.stderr, leave=False)
        self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _config(kind: str, args: argparse.Namespace, items_path: str, items: Sequence[Any]) -> dict[str, Any]:
    """What decides the readings (a resume with another value is refused); B and seed only score."""
    from sleight import rundir

    cfg: dict[str, Any] = {
        "model": args.model,
        "engine": args.engine,
        "dtype": args.dtype,
        "items": {"path": items_path, "n": len(items), "sha256": rundir.digest([repr(it) for it in items])},
        "limit": args.limit,
        "continuation_tokens": args.continuation_tokens,
        "chunk": args.chunk,
    }
    if kind == "forecast":
        cfg.update(note_words=args.note_words, note_tokens=args.note_tokens)
    else:
        cfg.update({k: v for k, v in vars(args).items() if k in ("answers", "max_new_tokens", "instruct", "raw_prompt")})
    return cfg


def _meta(manifest: Mapping[str, Any], seconds: float | None) -> dict[str, Any]:
    """The run's description in summary.json and the report."""
    keep = {k: manifest.get(k) for k in ("kind", "command", "items", "n_items", "model")}
    if manifest.get("kind") == "ptrue":  # the rendering of the prompt (lm-polygraph's instruct flag)
        keep["instruct"] = (manifest.get("config") or {}).get("instruct", True)
    return {**keep, "seconds": seconds}


def _score_and_report(
    out: Path,
    meta: Mapping[str, Any],
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    summarise: Callable[..., dict[str, Any]],
    build_report: Callable[..., Any],
) -> dict[str, Any]:
    """summary.json and the reports from the rows (the bootstrap runs here, no model needed)."""
    from sleight import rundir
    from sleight.readout.downstream_report import write_report

    meta = {**meta, "B": args.B, "seed": args.seed}
    summary = {**meta, **summarise(rows, B=args.B, seed=args.seed)}
    rundir.write_json(out / "summary.json", summary)
    write_report(build_report(summary, rows, meta, out), out)
    return summary


def _run(
    kind: str,
    args: argparse.Namespace,
    load_items: Callable[[str, int | None], list[Any]],
    fixture: str,
    pipeline: Callable[[_Progress, list[Any]], Any],
    summarise: Callable[..., dict[str, Any]],
    build_report: Callable[..., Any],
    tokens_total: Callable[[list[Any]], int],
) -> dict[str, Any]:
    """Items -> model work, resumable, into --out -> summary and reports; or, with ``--rescore``,
    the last step from the folder's own readings and manifest (a new B or seed, a crashed report)."""
    from sleight.readout import downstream_run as dr

    _check_args(args)
    out = Path(args.out)
    if args.rescore:
        rows, manifest = dr.read_readings(out, kind)
        return _score_and_report(out, _meta(manifest, manifest.get("seconds", dr.work_seconds(manifest))), rows, args, summarise, build_report)
    items_path = args.items or _fixture(fixture)
    items = load_items(items_path, args.limit)
    check_writable(out, "--out")
    prog = _Progress(not args.no_progress, tokens_total(items), "tok")
    extra = {"command": _command(kind, args, items_path), "items": items_path, "n_items": len(items)}
    try:
        result = dr.run_pipeline(
            pipeline(prog, items), items, out, _config(kind, args, items_path, items),
            load_model=lambda: model_from_args(args), extra=extra, chunk=args.chunk, overwrite=args.overwrite, status=prog.status,
        )
    finally:
        prog.close()
    prog.status("scoring (bootstrap) and writing the report")
    return _score_and_report(out, _meta(result.manifest, dr.work_seconds(result.manifest)), result.rows, args, summarise, build_report)


def cmd_forecast(args: argparse.Namespace) -> int:
    from sleight.readout.downstream_report import forecast_report
    from sleight.readout.downstream_run import FORECAST_SCHEMA, Pipeline
    from sleight.readout.forecast import pipeline as fp
    from sleight.stats.downstream import cluster_codes

    def pipeline(prog: _Progress, all_items: list[Any]) -> Pipeline:
        clusters = cluster_codes([it.passage for it in all_items])  # over the whole run, not per part

        def work(model: Any, items: list[Any], indices: list[int]) -> list[dict[str, Any]]:
            return fp.run_forecast(
                model,
                items,
                max_words=args.note_words,
                note_max_new_tokens=args.note_tokens,
                continuation_tokens=args.continuation_tokens,
                status=prog.status,
                progress=prog.tokens,
                clusters=[int(clusters[i]) for i in indices],
            )

        return Pipeline(
            "forecast", FORECAST_SCHEMA, work, rows_per_item=lambda _it: len(fp.POSITIONS),
            order=lambda r, index: (index[r["item_id"]], fp.POSITIONS.index(r["position"])), group=lambda it: it.passage,
        )

    s = _run(
        "forecast", args, fp.load_race_items, "race_items.jsonl", pipeline, fp.summarise, forecast_report,
        lambda items: len({it.passage for it in items}) * args.note_tokens,
    )
    rd, pos, g = s["reader"], s["positions"], s["gain"]
    print(f"reader accuracy {fmt(rd['accuracy'])} (spaced {fmt(rd['accuracy_spaced'])}; spaced/unspaced agree on {rd['n_agree']}/{rd['n_compared']})")
    for p in ("original", "stem"):
        print(f"{p:>8}: AUROC {interval(pos[p]['auroc'])}  Brier {interval(pos[p]['brier'])}  median mass {fmt(pos[p]['mass']['median'])}")
    print(f"stem - original: AUROC gain {_gain(g['auroc'])}  Brier gain {_gain(g['brier'])}  (constant-0.5 Brier 0.250)")
    print(f"wrote {args.out}/report.md, report.html, summary.json, readings.parquet")
    return 0


def cmd_ptrue(args: argparse.Namespace) -> int:
    from sleight.readout.downstream_report import ptrue_report
    from sleight.readout.ptrue import pipeline as pp
    from sleight.readout.ptrue.answers import load_qa_items

    settings = pp.parse_settings(args.answers)

    from sleight.readout.downstream_run import PTRUE_SCHEMA, Pipeline
    from sleight.readout.ptrue.readouts import READOUTS

    def pipeline(prog: _Progress, all_items: list[Any]) -> Pipeline:
        sources = ("own", "gold", "wrong")

        def rows_per_item(it: Any) -> int:
            pairs = ("own" in settings) + (len(pp.constructed_pairs([it])) if "constructed" in settings else 0)
            return pairs * len(READOUTS)

        def order(r: Mapping[str, Any], index: Mapping[str, int]) -> tuple:
            readouts = [x if isinstance(x, str) else x.name for x in READOUTS]
            return (pp.SETTINGS.index(r["setting"]), index[r["item_id"]], sources.index(r["answer_source"]), readouts.index(r["readout"]))

        return Pipeline("ptrue", PTRUE_SCHEMA, lambda model, items, _idx: work(model, items, prog), rows_per_item, order)

    def work(model: Any, items: list[Any], prog: _Progress) -> list[dict[str, Any]]:
        return pp.run_ptrue(
            model,
            items,
            settings=settings,
            instruct=args.instruct,
            max_new_tokens=args.max_new_tokens,
            continuation_tokens=args.continuation_tokens,
            status=prog.status,
            progress=prog.tokens,
        )

    s = _run(
        "ptrue", args, load_qa_items, "qa_items.jsonl", pipeline, pp.summarise, ptrue_report,
        lambda items: len(items) * args.max_new_tokens if "own" in settings else 0,
    )
    for setting, st in s["settings"].items():
        print(f"[{setting}] {st['n_pairs']} pairs, {st['n_correct']} correct")
        for r, d in st["readouts"].items():
            print(f"  {pp.READOUT_LABELS[r]:<16} AUROC {interval(d['auroc'])}  PRR {interval(d['prr'])}  median mass {fmt(d['mass']['median'])}  argmax {next(iter(d['argmax_class']), 'n/a')}")
    print(f"wrote {args.out}/report.md, report.html, summary.json, readings.parquet")
    return 0


def _command(kind: str, args: argparse.Namespace, items_path: str) -> str:
    """The command line that reproduces this run (defaults spelled out where they matter)."""
    parts = ["sleight", "readout", kind, "--model", args.model, "--items", items_path, "--out", args.out]
    if args.limit is not None:
        parts += ["--limit", str(args.limit)]
    parts += ["--B", str(args.B), "--seed", str(args.seed), "--continuation-tokens", str(args.continuation_tokens)]
    if kind == "forecast":
        parts += ["--note-words", str(args.note_words), "--note-tokens", str(args.note_tokens)]
    else:
        parts += ["--answers", args.answers, "--max-new-tokens", str(args.max_new_tokens)]
        if not args.instruct:
            parts.append("--no-instruct")
    if args.engine != "hf":
        parts += ["--engine", args.engine]
    return " ".join(shlex.quote(p) for p in parts)


def _gain(d: Mapping[str, Any] | None) -> str:
    if not d or d.get("gain") is None:
        return MISSING
    return f"{fmt(d['gain'])} [{fmt(d['gain_low'])}, {fmt(d['gain_high'])}]"
