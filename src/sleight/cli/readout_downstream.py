"""``sleight readout forecast`` and ``sleight readout ptrue``: does a score rank its target?

Both commands load items (validated before the model loads), run the model steps of their pipeline,
and write into ``--out``: ``readings.parquet`` (one row per item and scored position / readout),
``summary.json`` (every number of the report, with the run's model record), ``report.md``,
``report.html`` and PNG plots.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from sleight.cli.common import add_model_args, check_writable, model_from_args
from sleight.errors import UserError


def _fixture(name: str) -> str:
    """Path of a shipped fixture (``sleight/data/fixtures``)."""
    import sleight

    return str(Path(sleight.__file__).parent / "data" / "fixtures" / name)


def _common(p: argparse.ArgumentParser, fixture: str, out: str) -> None:
    p.add_argument("--items", default=None, help=f"JSONL items (default: the shipped fixture {fixture})")
    p.add_argument("--out", default=out, help=f"output folder (default: {out})")
    p.add_argument("--limit", type=int, default=None, help="use only the first N items (quick runs)")
    p.add_argument("--B", type=int, default=20000, help="bootstrap replicates (default: 20000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default: 0)")
    p.add_argument("--continuation-tokens", type=int, default=16, help="greedy tokens decoded at each scored position, as in the audit (default: 16)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--rescore", action="store_true", help="no model: re-score the readings already in --out (e.g. with another --B or --seed) and rewrite the reports")
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
    _common(p, "race_items.jsonl", "runs/forecast")
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
    _common(p, "qa_items.jsonl", "runs/ptrue")
    p.add_argument(
        "--answers",
        default="both",
        choices=["own", "constructed", "both"],
        help="own: the model's greedy answers (lm-polygraph's setting); constructed: gold vs wrong answer per question; both (default)",
    )
    p.add_argument("--max-new-tokens", type=int, default=32, help="greedy budget for the model's answers (default: 32)")
    p.set_defaults(func=cmd_ptrue)


def _check_args(args: argparse.Namespace) -> None:
    if args.B < 1:
        raise UserError(f"--B must be a positive number of replicates, got {args.B}")
    if args.continuation_tokens < 1:
        raise UserError(f"--continuation-tokens must be at least 1, got {args.continuation_tokens}")
    for name in ("note_words", "note_tokens", "max_new_tokens"):
        if getattr(args, name, 1) < 1:
            raise UserError(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")


def _out_dir(path: str) -> Path:
    out = check_writable(path, "--out")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create --out folder {out}: {exc.strerror}") from None
    return out


class _Progress:
    """A tqdm bar over generated tokens plus one-line stage messages (silent with --no-progress)."""

    def __init__(self, enabled: bool, total: int, unit: str) -> None:
        self.enabled = enabled
        self.total, self.unit = total, unit
        self.bar = None

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


def write_readings(rows: Sequence[Mapping[str, Any]], path: Path) -> Path:
    """Rows as Parquet; every row gets every column (missing ones null), types inferred by Arrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    keys = list(dict.fromkeys(k for r in rows for k in r))
    table = pa.Table.from_pylist([{k: r.get(k) for k in keys} for r in rows])
    tmp = path.with_suffix(".parquet.tmp")
    pq.write_table(table, tmp)
    tmp.replace(path)
    return path


def read_readings(path: Path) -> list[dict[str, Any]]:
    """The rows back from Parquet as plain Python values (nulls stay None)."""
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _manifest(kind: str, args: argparse.Namespace, items_path: str, n_items: int, model: Any) -> dict[str, Any]:
    return {
        "kind": kind,
        "command": _command(kind, args, items_path),
        "items": items_path,
        "n_items": n_items,
        "model": model.info.as_dict(),
    }


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)


def _score_and_report(
    out: Path,
    manifest: Mapping[str, Any],
    rows: list[dict[str, Any]],
    args: argparse.Namespace,
    summarise: Callable[..., dict[str, Any]],
    build_report: Callable[..., Any],
) -> dict[str, Any]:
    """summary.json and the reports from the rows (the bootstrap runs here, no model needed)."""
    from sleight.readout.downstream_report import write_report

    meta = {**manifest, "B": args.B, "seed": args.seed}
    summary = {**meta, **summarise(rows, B=args.B, seed=args.seed)}
    _write_json(out / "summary.json", summary)
    write_report(build_report(summary, rows, meta, out), out)
    return summary


def _run(
    kind: str,
    args: argparse.Namespace,
    load_items: Callable[[str, int | None], list[Any]],
    fixture: str,
    work: Callable[[Any, list[Any], _Progress], list[dict[str, Any]]],
    summarise: Callable[..., dict[str, Any]],
    build_report: Callable[..., Any],
    tokens_total: Callable[[list[Any]], int],
) -> dict[str, Any]:
    """Items -> model work -> readings.parquet -> summary and reports; or, with ``--rescore``, the
    last two steps from the folder's own readings and manifest (a new B or seed, a crashed report)."""
    _check_args(args)
    out = Path(args.out)
    if args.rescore:
        if not (out / "readings.parquet").is_file() or not (out / "manifest.json").is_file():
            raise UserError(f"--rescore needs {out}/readings.parquet and {out}/manifest.json from an earlier run of this command")
        manifest = json.loads((out / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("kind") != kind:
            raise UserError(f"{out} holds a '{manifest.get('kind')}' run, not '{kind}'")
        return _score_and_report(out, manifest, read_readings(out / "readings.parquet"), args, summarise, build_report)
    items_path = args.items or _fixture(fixture)
    items = load_items(items_path, args.limit)
    out = _out_dir(args.out)
    started = time.time()
    model = model_from_args(args)
    manifest = _manifest(kind, args, items_path, len(items), model)
    _write_json(out / "manifest.json", manifest)
    prog = _Progress(not args.no_progress, tokens_total(items), "tok")
    try:
        rows = work(model, items, prog)
    finally:
        prog.close()
    manifest["seconds"] = time.time() - started
    _write_json(out / "manifest.json", manifest)
    write_readings(rows, out / "readings.parquet")
    prog.status("scoring (bootstrap) and writing the report")
    return _score_and_report(out, manifest, rows, args, summarise, build_report)


def cmd_forecast(args: argparse.Namespace) -> int:
    from sleight.readout import forecast_pipeline as fp
    from sleight.readout.downstream_report import forecast_report

    def work(model: Any, items: list[Any], prog: _Progress) -> list[dict[str, Any]]:
        return fp.run_forecast(
            model,
            items,
            max_words=args.note_words,
            note_max_new_tokens=args.note_tokens,
            continuation_tokens=args.continuation_tokens,
            status=prog.status,
            progress=prog.tokens,
        )

    s = _run(
        "forecast", args, fp.load_race_items, "race_items.jsonl", work, fp.summarise, forecast_report,
        lambda items: len({it.passage for it in items}) * args.note_tokens,
    )
    rd, pos, g = s["reader"], s["positions"], s["gain"]
    print(f"reader accuracy {_f(rd['accuracy'])} (spaced {_f(rd['accuracy_spaced'])}; spaced/unspaced agree on {rd['n_agree']}/{rd['n_compared']})")
    for p in ("original", "stem"):
        print(f"{p:>8}: AUROC {_ci(pos[p]['auroc'])}  Brier {_ci(pos[p]['brier'])}  median mass {_f(pos[p]['mass']['median'])}")
    print(f"stem - original: AUROC gain {_gain(g['auroc'])}  Brier gain {_gain(g['brier'])}  (constant-0.5 Brier 0.250)")
    print(f"wrote {args.out}/report.md, report.html, summary.json, readings.parquet")
    return 0


def cmd_ptrue(args: argparse.Namespace) -> int:
    from sleight.readout import ptrue_pipeline as pp
    from sleight.readout.downstream_report import ptrue_report
    from sleight.readout.ptrue_answers import load_qa_items

    settings = pp.parse_settings(args.answers)

    def work(model: Any, items: list[Any], prog: _Progress) -> list[dict[str, Any]]:
        return pp.run_ptrue(
            model,
            items,
            settings=settings,
            max_new_tokens=args.max_new_tokens,
            continuation_tokens=args.continuation_tokens,
            status=prog.status,
            progress=prog.tokens,
        )

    s = _run(
        "ptrue", args, load_qa_items, "qa_items.jsonl", work, pp.summarise, ptrue_report,
        lambda items: len(items) * args.max_new_tokens if "own" in settings else 0,
    )
    for setting, st in s["settings"].items():
        print(f"[{setting}] {st['n_pairs']} pairs, {st['n_correct']} correct")
        for r, d in st["readouts"].items():
            print(f"  {pp.READOUT_LABELS[r]:<16} AUROC {_ci(d['auroc'])}  PRR {_ci(d['prr'])}  median mass {_f(d['mass']['median'])}  argmax {next(iter(d['argmax_class']), 'n/a')}")
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
    if args.engine != "hf":
        parts += ["--engine", args.engine]
    return " ".join(shlex.quote(p) for p in parts)


def _f(x: Any) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def _ci(d: Mapping[str, Any] | None) -> str:
    if not d or d.get("estimate") is None:
        return "n/a"
    if d.get("low") is None:
        return _f(d["estimate"])
    return f"{_f(d['estimate'])} [{_f(d['low'])}, {_f(d['high'])}]"


def _gain(d: Mapping[str, Any] | None) -> str:
    if not d or d.get("gain") is None:
        return "n/a"
    return f"{_f(d['gain'])} [{_f(d['gain_low'])}, {_f(d['gain_high'])}]"
