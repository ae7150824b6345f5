"""``named-items`` runs: the audit's forecast preset on items named by id rather than by position
(Figure 1: high6240.txt of A.1's list with its constructed note, App. B), plus the probability of
named tokens at the original position (Figure 1 prints the six most probable: A, Answer, D, After,
5, The on Qwen3-4B-Instruct-2507).

The audit rows are ``readout audit``'s; each named token adds one row (``variant`` ``named_token``,
``token``, ``token_prob``: the token's in-context first-token probability at the original ending,
read through :func:`sleight.position.read_positions`), kept in ``named_tokens.json`` beside them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from sleight import rundir
from sleight.readout.reproduce.kinds.audit import audit_into
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int

FIELDS = ("ids", "note", "variants", "max_new_tokens", "tokens")
DEFAULT_VARIANTS = ("original", "stem")
TOKEN_VARIANT = "named_token"
TOKENS_JSON = "named_tokens.json"


def token_rows(ctx: RunContext, rows: Rows, tokens: list[str]) -> Rows:
    """One row per (item, named token): its probability as the next token at the original ending."""
    from sleight.position import read_positions

    original = [r for r in rows if r["variant"] == "original" and not r["skipped"]]
    key = {"contexts": rundir.digest([r["context"] for r in original]), "tokens": tokens}
    path = ctx.run_dir / TOKENS_JSON
    cached = rundir.read_json(path) if path.is_file() else None
    if cached and cached.get("key") == key:
        return list(cached["rows"])
    readings = read_positions(ctx.model(), [r["context"] for r in original], [[tokens]] * len(original), top_k=1)
    out = [
        {"item_id": r["item_id"], "variant": TOKEN_VARIANT, "token": t, "token_prob": None if lp is None else math.exp(lp)}
        for r, reading in zip(original, readings)
        for t, lp in zip(tokens, reading.option_sets[0].first_logprobs)
    ]
    rundir.write_json(path, {"key": key, "rows": out})
    return out


def named_rows(ctx: RunContext) -> Rows:
    from sleight.readout.audit.presets import FORECAST_STEM, forecast_items, select_ids
    from sleight.readout.audit.run import AuditConfig
    from sleight.readout.data import load_data

    s = ctx.spec.settings
    records = load_data(ctx.data).view("forecast")  # the whole list: the items are named, not placed
    chosen = select_ids(records, [str(x) for x in s["ids"]])[: ctx.limit]
    items = forecast_items(chosen, note=str(s.get("note") or "constructed"))
    variants = tuple(s.get("variants") or DEFAULT_VARIANTS)
    config = AuditConfig(
        source=f"preset forecast, items {', '.join(i.id for i in items)} ({ctx.data})", preset="forecast", stem=FORECAST_STEM,
        variants=variants, max_new_tokens=setting_int(s, "max_new_tokens", 16),
    )
    rows = audit_into(ctx, items, config)
    tokens = [str(t) for t in s.get("tokens") or ()]
    return rows + (token_rows(ctx, rows, tokens) if tokens else [])


def _columns() -> tuple[str, ...]:
    from sleight.readout.audit.measure import SCHEMA

    return (*SCHEMA.names, "token", "token_prob")


def _values() -> dict[str, tuple[str, ...]]:
    from sleight.readout.audit.variants import KNOWN_VARIANTS

    return {"variant": (*KNOWN_VARIANTS, TOKEN_VARIANT)}


def _check(s: Mapping[str, Any]) -> str | None:
    from sleight.readout.audit.presets import NOTE_MODES

    ids = s.get("ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) and x for x in ids):
        return "ids: expected a list of item ids (e.g. [high6240.txt])"
    if s.get("note") is not None and s["note"] not in NOTE_MODES:
        return f"note: expected one of {', '.join(NOTE_MODES)}"
    tokens = s.get("tokens") or []
    if not isinstance(tokens, list) or not all(isinstance(t, str) and t for t in tokens):
        return "tokens: expected a list of non-empty strings"
    return None


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    n = len(s.get("variants") or DEFAULT_VARIANTS)
    return n + 1, n * setting_int(s, "max_new_tokens", 16)


KINDS = (
    RunKind(
        "named-items",
        fields=lambda: FIELDS,
        columns=_columns,
        values=_values,
        families=lambda _s: ("race-h",),
        per_item=_per_item,
        rows=named_rows,
        check=_check,
        target="target",
        unit="item_id",
        context_tokens=250,
    ),
)
