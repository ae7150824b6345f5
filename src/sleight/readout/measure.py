"""Per-(item, variant) readings at the scored position (SPEC §4.1).

Per context, one ``continuation_logprobs`` call (the context's forward pass, its cache forked across
the options) gives the option mass in context, isolated and divergent, and every option's
full-sequence log-probability (single- and multi-token alike); one batched greedy decode per item
gives the unrestricted argmax, the top tokens and the continuation. Nothing here writes files.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import pyarrow as pa

from sleight.position import encode_continuation
from sleight.readout.batching import DEFAULT_ROWS_PER_PASS, sliced_rows
from sleight.readout.classify import classify_continuation, classify_token, is_numeric
from sleight.readout.items import AuditItem
from sleight.readout.variants import Skipped, make_variant, render

MASS_FLOOR = 0.5
TOP_TOKENS = 6
TAIL_CHARS = 80

TOP_TOKEN_TYPE = pa.struct([("id", pa.int64()), ("token", pa.string()), ("prob", pa.float64())])
SCHEMA = pa.schema(
    [
        ("item_id", pa.string()),
        ("variant", pa.string()),
        ("skipped", pa.bool_()),
        ("skip_reason", pa.string()),
        ("context", pa.string()),
        ("context_tail", pa.string()),
        ("n_context_tokens", pa.int64()),
        ("ends_with_whitespace", pa.bool_()),
        ("options", pa.list_(pa.string())),
        ("boundary_preserved", pa.bool_()),
        ("option_mass", pa.float64()),
        ("option_mass_isolated", pa.float64()),
        ("option_mass_divergent", pa.float64()),
        ("first_token_ids", pa.list_(pa.int64())),
        ("isolated_first_token_ids", pa.list_(pa.int64())),
        ("first_tokens_distinct", pa.bool_()),
        ("option_first_probs", pa.list_(pa.float64())),
        ("argmax_id", pa.int64()),
        ("argmax_token", pa.string()),
        ("argmax_prob", pa.float64()),
        ("argmax_class", pa.string()),
        ("top_tokens", pa.list_(TOP_TOKEN_TYPE)),
        ("option_logprobs", pa.list_(pa.float64())),
        ("score", pa.float64()),
        ("continuation", pa.string()),
        ("continuation_class", pa.string()),
        ("answer_then_grid", pa.bool_()),
        ("grid_anywhere", pa.bool_()),
        ("continuation_on_task", pa.bool_()),
        ("target", pa.float64()),
    ]
)


# -- pure maths ------------------------------------------------------------------------------------
def option_mass(logprobs: np.ndarray, first_ids: Sequence[int | None]) -> float | None:
    """Σ p(t) over the distinct first tokens; None (never 0) when any option has no first token
    in context (the prefix condition failed)."""
    if not first_ids or any(t is None for t in first_ids):
        return None
    return float(np.exp(np.asarray(logprobs, dtype=np.float64)[sorted(set(int(t) for t in first_ids))]).sum())


def renormalised_score(option_logprobs: Sequence[float | None], options: Sequence[str], scale: float = 100.0) -> float | None:
    """Numeric options: Σ (int(o)/scale)·p_o with p_o ∝ exp(ℓ_o); otherwise p of the first option.
    None when any ℓ_o is missing (boundary not preserved)."""
    if not option_logprobs or any(v is None or not math.isfinite(v) for v in option_logprobs):
        return None
    lp = np.asarray(option_logprobs, dtype=np.float64)
    p = np.exp(lp - lp.max())
    p /= p.sum()
    if is_numeric(options):
        return float(sum(int(o) / scale * pi for o, pi in zip(options, p)))
    return float(p[0])


def shared_token_prefix(encodings: Sequence[Sequence[int]]) -> int:
    """Number of leading tokens that every encoding shares."""
    if not encodings:
        return 0
    n = min(len(e) for e in encodings)
    k = 0
    while k < n and all(e[k] == encodings[0][k] for e in encodings):
        k += 1
    return k


def top_tokens(logprobs: np.ndarray, k: int) -> list[int]:
    """Ids of the k most probable tokens, most probable first (ties by id)."""
    idx = np.argpartition(-logprobs, k)[:k]
    return sorted(idx.tolist(), key=lambda t: (-float(logprobs[t]), t))


# -- contexts --------------------------------------------------------------------------------------
@dataclass
class Prepared:
    """One (item, variant) ready to score: its context, ids and option encodings."""

    item: AuditItem
    variant: str
    skip: str | None = None
    text: str = ""
    ids: list[int] = field(default_factory=list)
    options: tuple[str, ...] = ()
    enc: list[list[int] | None] = field(default_factory=list)
    iso_first: list[int] = field(default_factory=list)


def prepare(model, item: AuditItem, variant: str, stem: str | None = None) -> Prepared:
    """Render the variant and encode its options in context (the prefix condition) and alone."""
    spec = make_variant(item, variant, stem)
    if isinstance(spec, Skipped):
        return Prepared(item, variant, skip=spec.reason)
    text = render(model, spec)
    options = tuple(item.options or ())
    if item.move_trailing_whitespace:
        # lm-evaluation-harness: trailing whitespace of the context moves into every continuation.
        stripped = text.rstrip()
        ws = text[len(stripped) :]
        text, options = stripped, tuple(ws + o for o in options)
    enc = [encode_continuation(model, text, o) for o in options]
    iso = [model.encode(o) for o in options]
    return Prepared(item, variant, text=text, ids=model.encode(text), options=options, enc=enc, iso_first=[e[0] for e in iso if e])


def _echoes(item: AuditItem) -> list[str]:
    last_user = [m["content"] for m in item.messages if m.get("role") == "user"]
    lines = [ln for ln in (last_user[-1] if last_user else "").splitlines() if ln.strip()]
    return [t for t in (item.question, lines[-1] if lines else None) if t]


# -- the option readings of one context ------------------------------------------------------------
def option_readings(model, p: Prepared) -> dict[str, Any]:
    """Mass (in context, isolated, divergent), first tokens, option log-probs and score for one
    context, from one ``continuation_logprobs`` call (the context computed once, forked)."""
    kept = [e for e in p.enc if e is not None]
    conts = kept + [[t] for t in p.iso_first]
    res = model.continuation_logprobs(p.ids, conts) if conts else []
    by_kept = iter(res[: len(kept)])
    per_option = [next(by_kept) if e is not None else None for e in p.enc]
    iso_lp = {t: float(r[0]) for t, r in zip(p.iso_first, res[len(kept) :])}
    first = [e[0] if e is not None else None for e in p.enc]
    preserved = bool(p.enc) and all(e is not None for e in p.enc)
    first_lp = {e[0]: float(r[0]) for e, r in zip(p.enc, per_option) if e is not None}

    def mass_of(lps: dict[int, float], ids: Sequence[int | None]) -> float | None:
        if not ids or any(t is None for t in ids):
            return None
        return float(sum(math.exp(lps[t]) for t in set(ids)))  # each distinct token once

    divergent: float | None = None
    if preserved:
        k = shared_token_prefix(p.enc)  # type: ignore[arg-type]
        if k == 0:
            divergent = mass_of(first_lp, first)
        elif all(len(e) > k for e in p.enc):  # type: ignore[arg-type]
            after = {e[k]: float(r[k]) for e, r in zip(p.enc, per_option)}  # type: ignore[index]
            divergent = mass_of(after, list(after))
    lps = [float(np.sum(r)) if r is not None else None for r in per_option]
    return {
        "boundary_preserved": preserved,
        "option_mass": mass_of(first_lp, first),
        "option_mass_isolated": mass_of(iso_lp, p.iso_first) if len(p.iso_first) == len(p.options) else None,
        "option_mass_divergent": divergent,
        "first_token_ids": first,
        "isolated_first_token_ids": list(p.iso_first),
        "first_tokens_distinct": (len(set(first)) == len(first)) if preserved else None,
        "option_first_probs": [math.exp(first_lp[t]) if t is not None else None for t in first],
        "option_logprobs": lps,
        "score": renormalised_score(lps, p.item.options or (), p.item.score_scale),
    }


# -- the batched measurement -----------------------------------------------------------------------
def measure(
    model,
    items: Sequence[AuditItem],
    variants: Sequence[str],
    *,
    stem: str | None = None,
    max_new_tokens: int = 16,
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """Readings for every (item, variant), in item order then variant order (rows follow SCHEMA).

    Two passes per context. (1) ``continuation_logprobs`` over the in-context option encodings and
    the options' isolated first tokens: the context's full forward pass (the same computation as
    ``next_token_logprobs`` on that context alone) gives every option's first-token probability --
    hence the mass, in context and isolated -- and its full-sequence log-probability, and, for
    options sharing leading tokens, the probabilities after that shared prefix (the divergent mass).
    (2) One batched greedy decode per item (its variants share their leading tokens, computed once),
    whose first step is kept over the whole vocabulary: the unrestricted argmax, the top tokens and
    the continuation.
    """
    prepared = [prepare(model, item, v, stem) for item in items for v in variants]
    live = [p for p in prepared if p.skip is None]
    readings: dict[int, dict[str, Any]] = {}

    # 1. Option readings from the context's own forward pass.
    if progress:
        progress("option pass")
    for p in live:
        readings[id(p)] = option_readings(model, p)

    # 2. The unrestricted view: argmax, top tokens, continuation (batched greedy per item).
    if progress:
        progress("greedy pass")
    texts: list[str] = [""] * len(live)
    no_step: list[int] = []
    vocab = int(model.vocab_size)

    def unrestricted(i: int, lp: np.ndarray) -> None:
        p = live[i]
        r = readings[id(p)]
        first = r["first_token_ids"]
        opt_first = {t for t in first if t is not None} | (set() if r["boundary_preserved"] else set(p.iso_first))
        arg = int(np.argmax(lp))
        tok_text = model.token_text(arg)
        r.update(
            argmax_id=arg,
            argmax_token=tok_text,
            argmax_prob=float(np.exp(lp[arg])),
            argmax_class=classify_token(tok_text, is_special=_is_special(model, arg), is_option_first=arg in opt_first, letters=p.item.letters),
            top_tokens=[{"id": int(t), "token": model.token_text(int(t)), "prob": float(np.exp(lp[t]))} for t in top_tokens(lp, TOP_TOKENS)],
        )

    for group in _item_groups(live, max(1, rows_per_pass)):
        gens = model.greedy([live[i].ids for i in group], max_new_tokens, top_k=vocab)
        for i, g in zip(group, gens):
            texts[i] = model.decode(g.token_ids)
            if len(g.token_ids) == 0:
                no_step.append(i)  # the model ended at once: its distribution was not kept
                continue
            lp = np.full(vocab, -np.inf, dtype=np.float64)
            lp[np.asarray(g.top_ids[0], dtype=np.int64)] = np.asarray(g.top_logprobs[0], dtype=np.float64)
            unrestricted(i, lp)
    if no_step:
        sliced_rows(model.next_token_logprobs, [live[i].ids for i in no_step], lambda j, lp: unrestricted(no_step[j], np.asarray(lp, dtype=np.float64)), rows_per_pass)

    for p, cont in zip(live, texts):
        c = classify_continuation(cont, options=p.item.options or (), letters=p.item.letters, choices=p.item.choices, echoes=_echoes(p.item))
        readings[id(p)].update(
            continuation=cont,
            continuation_class=c.cls,
            answer_then_grid=c.answer_then_grid,
            grid_anywhere=c.grid_anywhere,
            continuation_on_task=c.on_task,
        )

    rows = []
    for p in prepared:
        row: dict[str, Any] = {name: None for name in SCHEMA.names}
        row.update(item_id=p.item.id, variant=p.variant, skipped=p.skip is not None, skip_reason=p.skip, target=p.item.target)
        if p.skip is None:
            row.update(
                context=p.text,
                context_tail=p.text[-TAIL_CHARS:],
                n_context_tokens=len(p.ids),
                ends_with_whitespace=bool(p.text) and p.text[-1].isspace(),
                options=list(p.options),
            )
            row.update(readings[id(p)])
        rows.append(row)
    return rows


def _item_groups(live: Sequence[Prepared], size: int) -> list[list[int]]:
    """Indices of ``live`` grouped by item (consecutive), each group cut to at most ``size`` rows."""
    groups: list[list[int]] = []
    for i, p in enumerate(live):
        if groups and live[groups[-1][0]].item is p.item and len(groups[-1]) < size:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _is_special(model, token_id: int) -> bool:
    fn = getattr(model, "is_special", None)
    return bool(fn(token_id)) if fn else token_id in model.eos_ids


def rows_to_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Readings as an Arrow table with the public schema."""
    return pa.Table.from_pylist([{k: r.get(k) for k in SCHEMA.names} for r in rows], schema=SCHEMA)
