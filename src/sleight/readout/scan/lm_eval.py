"""``sleight readout scan --lm-eval-tasks DIR``: every multiple-choice task YAML, plain and chat.

lm-evaluation-harness scores a multiple-choice task by the log-likelihood of ``target_delimiter +
choice`` after ``doc_to_text``. With ``--apply_chat_template`` the context is rendered through the
model's template and the harness's split moves the context's trailing whitespace into every
continuation (``TemplateLM._encode_pair``), so the options are read as ``"\\n" + choice`` right after
``assistant`` (:mod:`.lm_eval`, :func:`sleight.readout.audit.measure.prepare`). This scan reads each task
in both modes at its scored position (one :func:`sleight.position.read_positions` pass per mode) and
flags, by fixed rules (:data:`LM_EVAL_FLAGS`): the delimiter moved in chat mode, shared first tokens,
a missing separator, a collapse of the option mass, and boundaries the tokenizer merges. Its rows
and summary are typed records (:class:`LmEvalRow`, :class:`LmEvalSummary`) whose ``as_record`` is
the JSON lm_eval_scan.json has always held.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sleight import rundir
from sleight.backends.base import LanguageModel
from sleight.errors import UserError
from sleight.position import read_positions
from sleight.readout.audit.checks import MASS_FLOOR
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.lm_eval import load_lm_eval_task
from sleight.readout.audit.measure import prepare
from sleight.readout.scan.records import PositionSummary
from sleight.readout.scan.run import position_summary

MODES = ("plain", "chat")
LM_EVAL_FLAGS: dict[str, str] = {
    "delimiter moved (chat mode)": "in chat mode the options start with different whitespace than in plain mode (the task's target_delimiter dropped, the template's trailing newline moved in)",
    "shared first tokens": "some document's options share their first token in context",
    "missing separator": "some context ends without whitespace and the options carry none",
    "collapse": "median option mass below the floor, or undefined",
    "boundary not preserved": "the tokenizer merges context and option for some document (no option score there)",
}


@dataclass(frozen=True)
class TaskSpec:
    """One task YAML: its items in each mode, or why it is not scanned."""

    path: Path
    name: str
    items: dict[str, list[AuditItem]]
    skipped: str | None = None


@dataclass(frozen=True)
class LmEvalRow:
    """One (task, mode) row of the task scan: how the options follow the context in that mode, the
    scored position's numbers (its record holds their keys after the row's own) and its flags."""

    task: str
    file: str
    mode: str
    n_docs: int
    option_whitespace: str
    context_ending: str  # the first document's context, its last 24 characters
    first_options: tuple[str, ...]  # the first document's options as read
    separator_rate: float
    position: PositionSummary
    flags: tuple[str, ...] = ()

    def as_record(self) -> dict[str, object]:
        return {
            "task": self.task, "file": self.file, "mode": self.mode, "n_docs": self.n_docs, "option_whitespace": self.option_whitespace,
            "context_ending": self.context_ending, "first_options": list(self.first_options), "separator_rate": self.separator_rate,
            **self.position.as_record(), "flags": list(self.flags),
        }

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> LmEvalRow:
        return cls(
            str(d["task"]), str(d["file"]), str(d["mode"]), int(d["n_docs"]), str(d["option_whitespace"]), str(d["context_ending"]),
            tuple(d["first_options"]), d["separator_rate"], PositionSummary.from_record(d), tuple(d["flags"]),
        )


@dataclass(frozen=True)
class LmEvalSummary:
    """What the task scan's reports state above the rows: the model record, the floor, the flag rules."""

    model: Mapping[str, object]
    floor: float
    flag_rules: Mapping[str, str] = field(default_factory=lambda: dict(LM_EVAL_FLAGS))
    tool: str = "sleight readout scan --lm-eval-tasks"

    def as_record(self) -> dict[str, object]:
        return {"tool": self.tool, "model": dict(self.model), "floor": self.floor, "flag_rules": dict(self.flag_rules)}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> LmEvalSummary:
        return cls(dict(d.get("model") or {}), d["floor"], dict(d.get("flag_rules") or {}), str(d.get("tool", cls.tool)))


@dataclass(frozen=True)
class LmEvalScanFile:
    """lm_eval_scan.json: the summary (its ``manifest``), the rows, and each task YAML not scanned
    with the reason (``file``, ``reason``)."""

    summary: LmEvalSummary
    rows: tuple[LmEvalRow, ...]
    skipped: tuple[Mapping[str, str], ...] = ()

    def as_record(self) -> dict[str, object]:
        return {"manifest": self.summary.as_record(), "rows": [r.as_record() for r in self.rows], "skipped": [dict(s) for s in self.skipped]}

    @classmethod
    def from_record(cls, d: Mapping[str, Any]) -> LmEvalScanFile:
        return cls(
            LmEvalSummary.from_record(d["manifest"]), tuple(LmEvalRow.from_record(r) for r in d["rows"]),
            tuple({"file": str(s["file"]), "reason": str(s["reason"])} for s in d.get("skipped") or ()),
        )


@dataclass
class LmEvalScanResult:
    out_dir: Path
    rows: list[LmEvalRow]
    skipped: list[dict[str, str]]
    files: dict[str, Path]


def find_tasks(folder: str | Path, *, limit: int | None = None) -> list[TaskSpec]:
    """Every ``*.yaml``/``*.yml`` in ``folder`` (sorted), loaded in both modes before any model
    work; a YAML that is not a supported multiple-choice task is kept with the reason it is skipped."""
    d = Path(folder)
    if not d.is_dir():
        raise UserError(f"--lm-eval-tasks: not a folder: {d}")
    paths = sorted(p for p in d.iterdir() if p.suffix.lower() in (".yaml", ".yml"))
    if not paths:
        raise UserError(f"--lm-eval-tasks: no task YAML in {d}")
    specs = []
    for p in paths:
        try:
            items = {m: load_lm_eval_task(p, chat=(m == "chat"), limit=limit) for m in MODES}
        except UserError as exc:
            specs.append(TaskSpec(p, p.stem, {}, skipped=str(exc)))
            continue
        specs.append(TaskSpec(p, str(items["plain"][0].meta.get("task", p.stem)), items))
    if all(s.skipped for s in specs):
        raise UserError(f"--lm-eval-tasks: no multiple-choice task could be loaded from {d} ({specs[0].skipped})")
    return specs


def leading_whitespace(options: Sequence[str]) -> str:
    """The whitespace every option starts with ('' when they differ or have none)."""
    heads = {o[: len(o) - len(o.lstrip())] for o in options}
    return heads.pop() if len(heads) == 1 else ""


def task_flags(row: LmEvalRow, plain_ws: str | None, floor: float) -> list[str]:
    """The rules of :data:`LM_EVAL_FLAGS` applied to one (task, mode) row."""
    flags = []
    pos = row.position
    if row.mode == "chat" and plain_ws is not None and row.option_whitespace != plain_ws:
        flags.append("delimiter moved (chat mode)")
    if pos.distinct_rate is not None and pos.distinct_rate < 1:
        flags.append("shared first tokens")
    if row.separator_rate < 1 and not row.option_whitespace:
        flags.append("missing separator")
    if pos.mass_median is None or pos.mass_median < floor:
        flags.append("collapse")
    if (pos.boundary_rate or 0) < 1:
        flags.append("boundary not preserved")
    return flags


def scan_task(model: LanguageModel, spec: TaskSpec, floor: float = MASS_FLOOR) -> list[LmEvalRow]:
    """One row per mode of one task."""
    rows = []
    plain_ws: str | None = None
    for mode in MODES:
        prepared = [prepare(model, it, "original") for it in spec.items[mode]]
        readings = read_positions(model, [p.text for p in prepared], [[p.options] for p in prepared])
        sets = [r.option_sets[0] for r in readings]
        ws = leading_whitespace([o for p in prepared for o in p.options])
        ends = [p.text[-1:].isspace() for p in prepared]
        row = LmEvalRow(
            task=spec.name,
            file=spec.path.name,
            mode=mode,
            n_docs=len(prepared),
            option_whitespace=ws,
            context_ending=prepared[0].text[-24:],
            first_options=tuple(prepared[0].options),
            separator_rate=sum(ends) / len(ends),
            position=position_summary(sets, floor),
        )
        row = replace(row, flags=tuple(task_flags(row, plain_ws, floor)))
        if mode == "plain":
            plain_ws = ws
        rows.append(row)
    return rows


def scan_lm_eval_tasks(model: LanguageModel, tasks: Sequence[TaskSpec], out_dir: str | Path, *, floor: float = MASS_FLOOR) -> LmEvalScanResult:
    """Every task in both modes; writes lm_eval_scan.json, .md and .html under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for t in tasks if not t.skipped for r in scan_task(model, t, floor)]
    skipped = [{"file": t.path.name, "reason": t.skipped} for t in tasks if t.skipped]
    summary = LmEvalSummary(model=model.info.as_dict(), floor=floor)
    files = {"scan_json": out / "lm_eval_scan.json", "scan_md": out / "lm_eval_scan.md", "scan_html": out / "lm_eval_scan.html"}
    rundir.write_json(files["scan_json"], LmEvalScanFile(summary, tuple(rows), tuple(skipped)).as_record())
    rundir.write_text(files["scan_md"], render_markdown(summary, rows, skipped))
    rundir.write_text(files["scan_html"], render_html(summary, rows, skipped))
    return LmEvalScanResult(out, rows, skipped, files)


HEADERS = ("task", "mode", "docs", "options start with", "context ending", "mass median", "first tokens distinct", "separator present", "flags")


def _cells(r: LmEvalRow) -> list[str]:
    f = lambda v: "–" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    return [r.task, r.mode, str(r.n_docs), repr(r.option_whitespace), repr(r.context_ending), f(r.position.mass_median), f(r.position.distinct_rate), f(r.separator_rate), "; ".join(r.flags) or "none"]


def render_markdown(summary: LmEvalSummary, rows: Sequence[LmEvalRow], skipped: Sequence[Mapping[str, str]]) -> str:
    lines = ["# lm-evaluation-harness task scan", "", f"Model: `{summary.model.get('model_id', '?')}`; floor {summary.floor}.", ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", "\\n") for c in _cells(r)) + " |" for r in rows]
    lines += ["", "Flags:", ""] + [f"- **{k}**: {v}." for k, v in LM_EVAL_FLAGS.items()]
    if skipped:
        lines += ["", "Not scanned:", ""] + [f"- `{s['file']}`: {s['reason']}" for s in skipped]
    return "\n".join(lines) + "\n"


def render_html(summary: LmEvalSummary, rows: Sequence[LmEvalRow], skipped: Sequence[Mapping[str, str]]) -> str:
    import html

    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join(f'<tr data-task="{html.escape(r.task)}" data-mode="{r.mode}">' + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    skip = "".join(f"<li><code>{html.escape(s['file'])}</code>: {html.escape(s['reason'])}</li>" for s in skipped)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>lm-eval task scan</title></head><body>"
        f"<h1>lm-evaluation-harness task scan</h1><p>Model <code>{html.escape(str(summary.model.get('model_id', '?')))}</code>.</p>"
        f"<table id='tasks' border='1'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        + (f"<h2>Not scanned</h2><ul>{skip}</ul>" if skipped else "")
        + "</body></html>"
    )


def load_lm_eval_scan(out_dir: str | Path) -> LmEvalScanFile:
    """A task scan's lm_eval_scan.json: its summary, rows and the task YAMLs not scanned."""
    return LmEvalScanFile.from_record(json.loads((Path(out_dir) / "lm_eval_scan.json").read_text(encoding="utf-8")))
