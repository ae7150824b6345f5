"""``conditions`` runs: one of App. I's eight prompt conditions (Tables 14 and 15) over its own
records -- the first items of A.1's RACE-H list, or for D1 the first MMLU-Pro test rows -- through
the audit's measurement (:func:`~sleight.readout.audit.run.run_audit`, resumed as the audit resumes).

Each reading gains App. I's letter columns (Table 14's letter count, Table 15's letter pull with
Llama-3-8B-Instruct's article left out, the prose opening) and, on every row of the run, what holds
the checkpoint's scored position under the condition (:func:`~sleight.readout.audit.conditions.holding`,
Table 15's rows as 0/1), so a table's descriptive statistics read them directly.

N1's per-item notes (App. I): the twelve-word notes of the checkpoint named ``notes_by`` (the
paper: Qwen3-4B-Instruct-2507), shared by every checkpoint. That checkpoint writes them with App. H's
writer (:func:`~sleight.readout.audit.notes.write_notes`, App. H's 256 tokens an attempt unless
``note_tokens`` sets another cap) into its run's ``notes.json``; a checkpoint
run later in the same table reads that file. Where the writer has not run there (``--models`` naming
other checkpoints), the checkpoint writes its own notes with the same writer and budget, says so on
one line, and records the writer in ``notes.json`` and in the readings' ``note_writer``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

from sleight import rundir
from sleight.readout.reproduce.kinds.audit import audit_into
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int

FIELDS = ("condition", "variants", "max_new_tokens", "note", "notes_by", "note_words", "note_tokens", "own_stem")
DEFAULT_VARIANTS = ("original", "stem")  # App. I: the original ending and the condition's own stem
NOTES_JSON = "notes.json"


def condition_records(data: str, limit: int | None, condition: str) -> Sequence[Mapping[str, object]]:
    """The condition's records: MMLU-Pro rows in stored order for D1, else A.1's RACE-H list."""
    from sleight.readout.data import load_data

    ds = load_data(data)
    if condition == "D1":
        return [dict(r) for r in (ds.records[:limit] if limit is not None else ds.records)]
    return ds.view("forecast", limit)


def _read_notes(path: Any, ids: Sequence[str], words: int, tokens: int) -> dict[str, Any] | None:
    from sleight.readout.audit.notes import NOTE_MAX_NEW_TOKENS

    if not path.is_file():
        return None
    rec = rundir.read_json(path)  # a record from before ``tokens`` was kept was written at App. H's cap
    return rec if rec.get("items") == list(ids) and rec.get("words") == words and rec.get("tokens", NOTE_MAX_NEW_TOKENS) == tokens else None


def n1_notes(ctx: RunContext, records: Sequence[Mapping[str, Any]], writer: str, words: int, tokens: int) -> dict[str, Any]:
    """N1's notes for ``records``, who wrote them and how (see the module docstring), ``words`` the
    budget and ``tokens`` the cap an attempt; the record ``notes.json`` keeps once the run directory exists."""
    from sleight.readout.audit.notes import write_notes

    ids = [str(r["id"]) for r in records]
    shared = ctx.run_dir.parent.parent / writer / ctx.run_dir.name / NOTES_JSON  # <table>/<writer>/<run>
    found = (_read_notes(shared, ids, words, tokens) if ctx.checkpoint.name != writer else None) or _read_notes(ctx.run_dir / NOTES_JSON, ids, words, tokens)
    if found is not None:
        return found
    by = ctx.checkpoint.name
    if by != writer:
        print(
            f"{by}: N1's notes are {writer}'s (App. I), which has not run here; {by} writes them itself "
            f"(App. H's writer, {words} words), recorded in {ctx.run_dir / NOTES_JSON}",
            file=sys.stderr,
        )
    notes = write_notes(ctx.model(), [str(r.get("passage") or "") for r in records], words=words, max_new_tokens=tokens)
    return {
        "writer": by, "paper_writer": writer, "model": ctx.checkpoint.model, "words": words, "tokens": tokens, "items": ids,
        "notes": [n.text for n in notes], "ok": [n.ok for n in notes], "attempts": [n.attempts for n in notes],
    }


def condition_rows(ctx: RunContext) -> Rows:
    from sleight.readout.audit.conditions import FIXED_NOTE, N1_NOTE_WORDS, condition_items, holding, letter_columns
    from sleight.readout.audit.notes import NOTE_MAX_NEW_TOKENS
    from sleight.readout.audit.run import AuditConfig
    from sleight.readout.audit.token_rules import bare_token

    s = ctx.spec.settings
    condition = str(s["condition"])
    records = condition_records(ctx.data, ctx.limit, condition)
    written = None
    if condition == "N1":
        writer_name = str(s.get("notes_by") or ctx.checkpoint.name)
        written = n1_notes(ctx, records, writer_name, setting_int(s, "note_words", N1_NOTE_WORDS), setting_int(s, "note_tokens", NOTE_MAX_NEW_TOKENS))
    notes, writer = (list(written["notes"]), str(written["writer"])) if written else (None, None)
    items = condition_items(
        condition, records, notes=notes, note=str(s.get("note") or FIXED_NOTE), n=len(records), own_stem=bool(s.get("own_stem", True))
    )
    variants = tuple(s.get("variants") or DEFAULT_VARIANTS)
    config = AuditConfig(source=f"App. I condition {condition} ({ctx.data})", variants=variants, max_new_tokens=setting_int(s, "max_new_tokens", 16))
    rows = audit_into(ctx, items, config)
    if written is not None and _read_notes(ctx.run_dir / NOTES_JSON, written["items"], written["words"], written["tokens"]) != written:
        rundir.write_json(ctx.run_dir / NOTES_JSON, written)  # after the audit made the directory a run (it refuses strays)
    letters = {i.id: i.letters for i in items}
    for r in rows:
        token = r.get("argmax_token")
        r.update(condition=condition, note_writer=writer)
        r.update(letter_columns(str(token), letters[r["item_id"]], r.get("continuation")) if token is not None else dict.fromkeys(("letter", "letter_pull", "prose_opening"), False))
        r["argmax_bare"] = bare_token(str(token)) if token is not None else None  # which letter (App. C.2: "A modal on 18" under S1)
    held = holding([r for r in rows if r["variant"] == "original"], [r for r in rows if r["variant"] == "stem"])
    for r in rows:
        r.update({k: float(v) for k, v in held.items()})
    return rows


def _columns() -> tuple[str, ...]:
    from sleight.readout.audit.conditions import HOLDING
    from sleight.readout.audit.measure import SCHEMA

    return (*SCHEMA.names, "condition", "note_writer", "letter", "letter_pull", "prose_opening", "argmax_bare", *HOLDING)


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.audit.conditions import CONDITIONS
    from sleight.readout.audit.variants import KNOWN_VARIANTS

    return {"variant": tuple(KNOWN_VARIANTS), "condition": CONDITIONS}


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    n = len(s.get("variants") or DEFAULT_VARIANTS)
    note = (1, setting_int(s, "note_tokens", 256)) if s.get("condition") == "N1" else (0, 0)  # N1: App. H's writer, 256 tokens
    return n + note[0], n * setting_int(s, "max_new_tokens", 16) + note[1]


def _check(s: Mapping[str, Any]) -> str | None:
    from sleight.readout.audit.conditions import CONDITIONS
    from sleight.readout.audit.variants import KNOWN_VARIANTS

    if s.get("condition") not in CONDITIONS:
        return f"condition: expected one of {', '.join(CONDITIONS)}, got {s.get('condition')!r}"
    variants = s.get("variants") or DEFAULT_VARIANTS
    if not isinstance(variants, (list, tuple)) or any(v not in KNOWN_VARIANTS for v in variants):
        return f"variants: expected a list of the audit's variants, got {variants!r}"
    if s.get("condition") != "N1" and any(s.get(k) is not None for k in ("notes_by", "note_words", "note_tokens")):
        return "notes_by, note_words and note_tokens belong to condition N1 (App. I's per-item notes)"
    for key in ("note_words", "note_tokens"):
        v = s.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            return f"{key}: expected a whole number of at least 1, got {v!r}"
    return None


KINDS = (
    RunKind(
        "conditions",
        fields=lambda: FIELDS,
        columns=_columns,
        values=_values,
        families=lambda s: ("mmlu-pro",) if s.get("condition") == "D1" else ("race-h",),
        per_item=_per_item,
        rows=condition_rows,
        check=_check,
        target="target",
        unit="item_id",
        context_tokens=300,
    ),
)
