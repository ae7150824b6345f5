"""``sleight readout scan --lm-eval-tasks DIR``: every multiple-choice task YAML, plain and chat.

lm-evaluation-harness scores a multiple-choice task by the log-likelihood of ``target_delimiter +
choice`` after ``doc_to_text``. With ``--apply_chat_template`` the context is rendered through the
model's template and the harness's split moves the context's trailing whitespace into every
continuation (``TemplateLM._encode_pair``), so the options are read as ``"\\n" + choice`` right after
``assistant`` (:mod:`.lm_eval`, :func:`sleight.readout.audit.measure.prepare`). This scan reads each task
in both modes at its scored position (one :func:`sleight.position.read_positions` pass per mode) and
flags, by fixed rules (:data:`LM_EVAL_FLAGS`): the delimiter moved in chat mode, shared first tokens,
a missing separator, a collapse of the option mass, and boundaries the tokenizer merges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
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


@dataclass
class LmEvalScanResult:
    out_dir: Path
    rows: list[dict[str, Any]]
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


def task_flags(row: dict[str, Any], plain_ws: str | None, floor: float) -> list[str]:
    """The rules of :data:`LM_EVAL_FLAGS` applied to one (task, mode) row."""
    flags = []
    if row["mode"] == "chat" and plain_ws is not None and row["option_whitespace"] != plain_ws:
        flags.append("delimiter moved (chat mode)")
    if row["distinct_rate"] is not None and row["distinct_rate"] < 1:
        flags.append("shared first tokens")
    if (row["separator_rate"] is None or row["separator_rate"] < 1) and not row["option_whitespace"]:
        flags.append("missing separator")
    if row["mass_median"] is None or row["mass_median"] < floor:
        flags.append("collapse")
    if (row["boundary_rate"] or 0) < 1:
        flags.append("boundary not preserved")
    return flags


def scan_task(model: LanguageModel, spec: TaskSpec, floor: float = MASS_FLOOR) -> list[dict[str, Any]]:
    """One row per mode of one task."""
    rows = []
    plain_ws: str | None = None
    for mode in MODES:
        prepared = [prepare(model, it, "original") for it in spec.items[mode]]
        readings = read_positions(model, [p.text for p in prepared], [[p.options] for p in prepared])
        sets = [r.option_sets[0] for r in readings]
        ws = leading_whitespace([o for p in prepared for o in p.options])
        ends = [p.text[-1:].isspace() for p in prepared]
        row: dict[str, Any] = {
            "task": spec.name,
            "file": spec.path.name,
            "mode": mode,
            "n_docs": len(prepared),
            "option_whitespace": ws,
            "context_ending": prepared[0].text[-24:],
            "first_options": list(prepared[0].options),
            "separator_rate": sum(ends) / len(ends),
            **position_summary(sets, floor),
        }
        row["flags"] = task_flags(row, plain_ws, floor)
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
    manifest = {"tool": "sleight readout scan --lm-eval-tasks", "model": model.info.as_dict(), "floor": floor, "flag_rules": LM_EVAL_FLAGS}
    files = {"scan_json": out / "lm_eval_scan.json", "scan_md": out / "lm_eval_scan.md", "scan_html": out / "lm_eval_scan.html"}
    rundir.write_json(files["scan_json"], {"manifest": manifest, "rows": rows, "skipped": skipped})
    rundir.write_text(files["scan_md"], render_markdown(manifest, rows, skipped))
    rundir.write_text(files["scan_html"], render_html(manifest, rows, skipped))
    return LmEvalScanResult(out, rows, skipped, files)


HEADERS = ("task", "mode", "docs", "options start with", "context ending", "mass median", "first tokens distinct", "separator present", "flags")


def _cells(r: dict[str, Any]) -> list[str]:
    f = lambda v: "–" if v is None else (f"{v:.3f}" if isinstance(v, float) else str(v))  # noqa: E731
    return [r["task"], r["mode"], str(r["n_docs"]), repr(r["option_whitespace"]), repr(r["context_ending"]), f(r["mass_median"]), f(r["distinct_rate"]), f(r["separator_rate"]), "; ".join(r["flags"]) or "none"]


def render_markdown(manifest: dict[str, Any], rows: Sequence[dict[str, Any]], skipped: Sequence[dict[str, str]]) -> str:
    lines = ["# lm-evaluation-harness task scan", "", f"Model: `{manifest['model'].get('model_id', '?')}`; floor {manifest['floor']}.", ""]
    lines += ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(c.replace("|", "\\|").replace("\n", "\\n") for c in _cells(r)) + " |" for r in rows]
    lines += ["", "Flags:", ""] + [f"- **{k}**: {v}." for k, v in LM_EVAL_FLAGS.items()]
    if skipped:
        lines += ["", "Not scanned:", ""] + [f"- `{s['file']}`: {s['reason']}" for s in skipped]
    return "\n".join(lines) + "\n"


def render_html(manifest: dict[str, Any], rows: Sequence[dict[str, Any]], skipped: Sequence[dict[str, str]]) -> str:
    import html

    head = "".join(f"<th>{html.escape(h)}</th>" for h in HEADERS)
    body = "".join(f'<tr data-task="{html.escape(r["task"])}" data-mode="{r["mode"]}">' + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(r)) + "</tr>" for r in rows)
    skip = "".join(f"<li><code>{html.escape(s['file'])}</code>: {html.escape(s['reason'])}</li>" for s in skipped)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>lm-eval task scan</title></head><body>"
        f"<h1>lm-evaluation-harness task scan</h1><p>Model <code>{html.escape(str(manifest['model'].get('model_id', '?')))}</code>.</p>"
        f"<table id='tasks' border='1'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        + (f"<h2>Not scanned</h2><ul>{skip}</ul>" if skipped else "")
        + "</body></html>"
    )


def load_lm_eval_scan(out_dir: str | Path) -> dict[str, Any]:
    return json.loads((Path(out_dir) / "lm_eval_scan.json").read_text(encoding="utf-8"))
