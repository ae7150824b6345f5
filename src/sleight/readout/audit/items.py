"""Audit items: what one scored prompt is, and loading it from JSONL or CSV with line-numbered errors.

Everything here runs before any model is loaded, so a malformed input stops the run in a second
with one line naming the file, the line and the field, instead of after a model load.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sleight.errors import UserError
from sleight.readout.items import read_text

DEFAULT_LETTERS: tuple[str, ...] = ("A", "B", "C", "D")

# Fields an item may carry; anything else is kept in ``meta`` (data files often carry extras).
_KNOWN = {
    "id", "messages", "prompt", "options", "quoted_instruction", "choices_block", "quoted", "choices",
    "question", "letters", "target", "stem", "score_scale", "move_trailing_whitespace", "chat_template",
}


@dataclass(frozen=True)
class AuditItem:
    """One prompt whose next-token readout is audited.

    ``messages`` is the chat up to the scored position. The optional fields name parts of a *quoted*
    item inside the prompt (its answer instruction, its lettered choice list, the whole quoted span)
    so that the interventions can delete, replace or fence them; a variant whose part is missing is
    skipped, never guessed.
    """

    id: str
    messages: tuple[Mapping[str, str], ...]
    options: tuple[str, ...] | None = None
    quoted_instruction: str | None = None
    choices_block: str | None = None
    quoted: str | None = None
    choices: tuple[str, ...] | None = None  # texts of the quoted item's choices (continuation rules)
    question: str | None = None  # the quoted item's question (continuation rule "recites")
    letters: tuple[str, ...] = DEFAULT_LETTERS  # the quoted item's answer letters
    target: float | None = None  # for the downstream check
    stem: str | None = None  # per-item answer stem (overrides the run's)
    score_scale: float = 100.0  # numeric options: score = sum(int(o)/scale * p_o)
    move_trailing_whitespace: bool = False  # emulate lm-evaluation-harness's context/continuation split
    chat_template: bool = True  # False: the prompt text is the context as is (base-model evals)
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def prompt_text(self) -> str:
        """All message contents joined (where the quoted parts are looked for)."""
        return "\n".join(m["content"] for m in self.messages)


def parse_options(text: str) -> tuple[str, ...]:
    """Run-level options: a JSON list (keeps leading spaces) or comma-separated values (stripped)."""
    text = text.strip()
    if not text:
        raise UserError("--options is empty: give e.g. --options \"10,30,50,70,90\"")
    if text.startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"--options is not a valid JSON list: {exc.msg}") from None
    else:
        values = [v.strip() for v in text.split(",")]
    return validate_options(values, "--options")


def validate_options(values: Any, where: str) -> tuple[str, ...]:
    """Options must be a non-empty list of distinct, non-empty strings."""
    if not isinstance(values, (list, tuple)) or not values:
        raise UserError(f"{where}: options must be a non-empty list of strings")
    if not all(isinstance(v, str) and v != "" for v in values):
        raise UserError(f"{where}: every option must be a non-empty string, got {list(values)!r}")
    if len(set(values)) != len(values):
        dup = sorted({v for v in values if list(values).count(v) > 1})
        raise UserError(f"{where}: options are not distinct strings (repeated: {dup!r})")
    return tuple(values)


def _str_list(value: Any, name: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise UserError(f"{where}: '{name}' must be a list of strings")
    return tuple(value)


def _opt_str(rec: Mapping[str, Any], name: str, where: str) -> str | None:
    value = rec.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise UserError(f"{where}: '{name}' must be a non-empty string")
    return value


def item_from_record(rec: Mapping[str, Any], where: str) -> AuditItem:
    """Validate one record (a parsed JSONL line or CSV row) into an :class:`AuditItem`."""
    if not isinstance(rec, Mapping):
        raise UserError(f"{where}: expected a JSON object, got {type(rec).__name__}")
    if "id" not in rec or rec["id"] in (None, ""):
        raise UserError(f"{where}: missing 'id'")
    if not isinstance(rec["id"], (str, int)):
        raise UserError(f"{where}: 'id' must be a string or an integer")
    item_id = str(rec["id"])
    if "messages" in rec and rec["messages"] is not None:
        msgs = rec["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise UserError(f"{where}: 'messages' must be a non-empty list of {{role, content}} objects")
        for k, m in enumerate(msgs):
            if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise UserError(f"{where}: messages[{k}] must have string 'role' and 'content'")
        messages = tuple({"role": m["role"], "content": m["content"]} for m in msgs)
    elif isinstance(rec.get("prompt"), str) and rec["prompt"]:
        messages = ({"role": "user", "content": rec["prompt"]},)
    else:
        raise UserError(f"{where}: needs 'messages' (a chat) or 'prompt' (a non-empty string)")

    options = validate_options(rec["options"], where) if rec.get("options") is not None else None
    choices = _str_list(rec["choices"], "choices", where) if rec.get("choices") is not None else None
    letters = _str_list(rec["letters"], "letters", where) if rec.get("letters") is not None else DEFAULT_LETTERS
    target = rec.get("target")
    if target is not None:
        if isinstance(target, bool):
            target = float(target)
        elif isinstance(target, (int, float)):
            target = float(target)
        else:
            raise UserError(f"{where}: 'target' must be a number or a boolean, got {target!r}")
    scale = rec.get("score_scale", 100.0)
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or scale <= 0:
        raise UserError(f"{where}: 'score_scale' must be a positive number")
    stem = rec.get("stem")
    if stem is not None and not isinstance(stem, str):
        raise UserError(f"{where}: 'stem' must be a string")

    item = AuditItem(
        id=item_id,
        messages=messages,
        options=options,
        quoted_instruction=_opt_str(rec, "quoted_instruction", where),
        choices_block=_opt_str(rec, "choices_block", where),
        quoted=_opt_str(rec, "quoted", where),
        choices=choices,
        question=_opt_str(rec, "question", where),
        letters=letters,
        target=target,
        stem=stem or None,
        score_scale=float(scale),
        move_trailing_whitespace=bool(rec.get("move_trailing_whitespace", False)),
        chat_template=bool(rec.get("chat_template", True)),
        meta={k: v for k, v in rec.items() if k not in _KNOWN},
    )
    text = item.prompt_text
    for name in ("quoted_instruction", "choices_block", "quoted"):
        part = getattr(item, name)
        if part is not None and part not in text:
            raise UserError(f"{where}: '{name}' does not occur in the prompt text (it must be copied verbatim)")
    return item


def _check_unique(items: Sequence[AuditItem], wheres: Sequence[str]) -> None:
    seen: dict[str, str] = {}
    for item, where in zip(items, wheres):
        if item.id in seen:
            raise UserError(f"{where}: duplicate id '{item.id}' (first at {seen[item.id]})")
        seen[item.id] = where


_JSONISH = re.compile(r"^\s*[\[{]")


def load_csv_records(path: str | Path) -> list[tuple[dict[str, Any], str]]:
    """CSV rows as records; list/object cells are JSON, ``target``/``score_scale`` numbers.

    ``options`` may also be comma-separated (``10,30,50``); empty cells are absent fields.
    """
    p = Path(path)
    if not p.is_file():
        raise UserError(f"items file not found: {p}")
    out = []
    with io.StringIO(read_text(p), newline="") as f:
        reader = csv.DictReader(f)
        for n, row in enumerate(reader, start=2):
            where = f"{p.name} row {n}"
            rec: dict[str, Any] = {}
            for key, cell in row.items():
                if key is None:
                    raise UserError(f"{where}: more cells than header columns")
                if cell is None or cell == "":
                    continue
                if _JSONISH.match(cell):
                    try:
                        rec[key] = json.loads(cell)
                        continue
                    except json.JSONDecodeError as exc:
                        raise UserError(f"{where}: column '{key}' is not valid JSON ({exc.msg})") from None
                if key == "options":
                    rec[key] = [v.strip() for v in cell.split(",")]
                elif key in ("target", "score_scale"):
                    try:
                        rec[key] = float(cell)
                    except ValueError:
                        raise UserError(f"{where}: column '{key}' must be a number, got {cell!r}") from None
                elif key in ("move_trailing_whitespace", "chat_template"):
                    rec[key] = cell.strip().lower() in ("1", "true", "yes")
                else:
                    rec[key] = cell
            out.append((rec, where))
    if not out:
        raise UserError(f"items file has no rows: {p}")
    return out


def items_from_records(records: Iterable[tuple[Mapping[str, Any], str]]) -> list[AuditItem]:
    """Validate records (with their location labels) and check ids are unique."""
    pairs = [(item_from_record(rec, where), where) for rec, where in records]
    items = [i for i, _ in pairs]
    _check_unique(items, [w for _, w in pairs])
    return items


def resolve_options(items: Sequence[AuditItem], run_options: Sequence[str] | None) -> list[AuditItem]:
    """Give every item its option set (its own, else the run's); an item with none is an error."""
    from dataclasses import replace

    out = []
    for item in items:
        if item.options is None:
            if not run_options:
                raise UserError(f"item '{item.id}' has no options: pass --options (e.g. \"10,30,50,70,90\") or give 'options' per item")
            item = replace(item, options=tuple(run_options))
        out.append(item)
    return out
