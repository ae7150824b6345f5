"""Per-(item, variant) readings at the scored position (SPEC §4.1).

The position itself is read once, through :func:`sleight.position.read_positions` (one batched
``read_next`` for every context of a call: option mass in context and isolated, first tokens,
distinctness, the unrestricted argmax and the top tokens; multi-token options scored to the end).
One batched greedy decode per item adds the unrestricted continuation. :func:`position_columns`
turns one reading into the audit's columns and :func:`option_columns` into the columns every
instrument's row has (:class:`OptionColumns`, the base of the audit's, the forecast's and P(True)'s
rows), so they record the same columns by the same definitions. Nothing here writes files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import numpy as np
import pyarrow as pa

from sleight.backends import LanguageModel
from sleight.backends.base import SpecialTokens
from sleight.position import OptionSetReading, PositionReading, distinct_mass, read_ids, read_positions, renormalise
from sleight.readout.audit.checks import TopToken
from sleight.readout.audit.classify import classify_continuation, classify_token, is_numeric
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.summary import MASS_FLOOR, at_floor, mass_interval
from sleight.readout.audit.variants import Skipped, make_variant, render

DEFAULT_ROWS_PER_PASS = 16  # contexts decoded together in one greedy pass (bounds memory)
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
        ("divergent_argmax_id", pa.int64()),
        ("divergent_argmax_hit", pa.bool_()),
        ("option_mass_low", pa.float64()),
        ("option_mass_high", pa.float64()),
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


class ContextColumns(TypedDict):
    """What the readings say about the rendered context itself (:func:`context_columns`)."""

    context: str
    context_tail: str
    n_context_tokens: int
    ends_with_whitespace: bool


class PositionColumns(TypedDict):
    """What one position says about one option set (:func:`position_columns`), by the names every
    instrument records it under: the options' mass and first tokens in context, the unrestricted
    argmax and top tokens, the options' full-sequence log-probabilities (None where the boundary is
    not preserved)."""

    boundary_preserved: bool
    option_mass: float | None
    first_token_ids: list[int | None]  # None: an option that encodes to nothing in context
    first_tokens_distinct: bool | None
    option_first_probs: list[float | None]
    argmax_id: int
    argmax_token: str
    argmax_prob: float
    argmax_class: str
    top_tokens: list[TopToken]  # SCHEMA's TOP_TOKEN_TYPE structs
    option_logprobs: list[float | None]


class MassColumns(TypedDict):
    """The audit's further readings of an option set's mass (:func:`mass_columns`): isolated,
    after the options' shared leading tokens, and as an interval."""

    option_mass_isolated: float | None
    option_mass_divergent: float | None
    divergent_argmax_id: int | None
    divergent_argmax_hit: bool | None
    option_mass_low: float | None
    option_mass_high: float | None
    isolated_first_token_ids: list[int]


class OptionColumns(TypedDict):
    """The columns every instrument's row has for one option set read at one position
    (:func:`option_columns`): the rendered context, the options, what the position says about them
    and the greedy continuation there. The base of the audit's :class:`Reading`, the forecast's and
    P(True)'s rows; None throughout where nothing was read (:func:`unread_columns`)."""

    context: str | None
    context_tail: str | None
    n_context_tokens: int | None
    ends_with_whitespace: bool | None
    options: list[str] | None
    boundary_preserved: bool | None
    option_mass: float | None
    first_token_ids: list[int | None] | None
    first_tokens_distinct: bool | None
    option_first_probs: list[float | None] | None
    argmax_id: int | None
    argmax_token: str | None
    argmax_prob: float | None
    argmax_class: str | None
    top_tokens: list[TopToken] | None
    option_logprobs: list[float | None] | None
    continuation: str | None
    continuation_class: str | None


class MeasuredColumns(OptionColumns):
    """What the audit measures of one (item, variant) (:func:`measure`): the option columns, the
    option mass's other readings, the renormalised score, the continuation's class and the item's
    target. A skipped variant has every measured column None. The forecast's rows carry these as
    they are (:class:`sleight.readout.forecast.pipeline.ForecastRow`)."""

    skipped: bool
    skip_reason: str | None
    option_mass_isolated: float | None
    option_mass_divergent: float | None
    divergent_argmax_id: int | None
    divergent_argmax_hit: bool | None
    option_mass_low: float | None
    option_mass_high: float | None
    isolated_first_token_ids: list[int] | None  # MassColumns', None where skipped
    score: float | None
    answer_then_grid: bool | None
    grid_anywhere: bool | None
    continuation_on_task: bool | None
    target: float | None


class Reading(MeasuredColumns):
    """One row of readings.parquet, one per (item, variant): its keys are :data:`SCHEMA`'s columns
    and it goes to the Arrow table as it is (:func:`rows_to_table`)."""

    item_id: str
    variant: str


# -- pure maths ------------------------------------------------------------------------------------
def renormalised_score(option_logprobs: Sequence[float | None], options: Sequence[str], scale: float = 100.0) -> float | None:
    """Numeric options: Σ (int(o)/scale)·p_o with p_o ∝ exp(ℓ_o); otherwise p of the first option.
    None when any ℓ_o is missing (boundary not preserved)."""
    p = renormalise(option_logprobs)
    if p is None:
        return None
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


def divergent_prefix(s: OptionSetReading) -> tuple[int, ...] | None:
    """The in-context tokens every option of ``s`` opens with (App. A's divergent position follows
    them; empty where they share none); None when the boundary is not preserved or an option *is*
    the shared prefix (no divergent position)."""
    if not s.boundary_preserved:
        return None
    encs = [e for e in s.encodings if e is not None]
    k = shared_token_prefix(encs)
    if k and not all(len(e) > k for e in encs):
        return None
    return tuple(encs[0][:k]) if encs else ()


def divergent_mass(s: OptionSetReading) -> float | None:
    """The options' mass after their shared leading tokens (the option mass when they share none);
    None when there is no divergent position (:func:`divergent_prefix`) or its tokens were not scored."""
    prefix = divergent_prefix(s)
    if prefix is None:
        return None
    if not prefix:
        return s.mass
    if s.token_logprobs is None:
        return None
    k = len(prefix)
    encs = [e for e in s.encodings if e is not None]
    after = {e[k]: toks[k] for e, toks in zip(encs, s.token_logprobs) if toks is not None}
    return distinct_mass(list(after), after.__getitem__)


def divergent_argmax(model: LanguageModel, readings: Sequence[PositionReading], *, listed: bool = False) -> list[int | None]:
    """The unrestricted argmax at each reading's divergent position (its first option set's), whose
    hits App. C.5 counts beside the divergent mass ("0 of 16 argmax hits"): the reading's own argmax
    where the options share no leading token, else one batched read of the context and the shared
    tokens (the scoring pass reports the options' tokens there, not the argmax); None where there is
    no divergent position."""
    prefixes = [divergent_prefix(r.option_sets[0]) for r in readings]
    seqs = [r.context_ids + p for r, p in zip(readings, prefixes) if p]
    after = iter(read_ids(model, seqs, listed=listed) if seqs else ())
    out: list[int | None] = []
    for r, p in zip(readings, prefixes):
        if p is None:
            out.append(None)
        else:
            out.append(int(next(after).top_ids[0]) if p else r.argmax_id)
    return out


def divergent_hit(s: OptionSetReading, argmax_id: int | None) -> bool | None:
    """Whether the argmax at the divergent position is one of the options' tokens there."""
    prefix = divergent_prefix(s)
    if prefix is None or argmax_id is None:
        return None
    k = len(prefix)
    return argmax_id in {e[k] for e in s.encodings if e is not None and len(e) > k}


# -- one reading as the audit's columns --------------------------------------------------------------
def position_columns(model: LanguageModel, pos: PositionReading, s: OptionSetReading, *, letters: Sequence[str]) -> PositionColumns:
    """The audit's columns for option set ``s`` read at ``pos`` (the same names everywhere)."""
    first = list(s.first_ids)
    opt_first = {t for t in first if t is not None}
    if not s.boundary_preserved:  # the isolated encodings are what a naive reader would look for
        opt_first |= {t for t in s.isolated_ids if t is not None}
    arg = pos.argmax_id
    token = model.token_text(arg)
    return PositionColumns(
        boundary_preserved=s.boundary_preserved,
        option_mass=s.mass,
        first_token_ids=first,
        first_tokens_distinct=s.distinct if s.boundary_preserved else None,
        option_first_probs=[float(np.exp(v)) if v is not None else None for v in s.first_logprobs],
        argmax_id=arg,
        argmax_token=token,
        argmax_prob=float(np.exp(pos.argmax_logprob)),
        argmax_class=classify_token(token, is_special=_is_special(model, arg), is_option_first=arg in opt_first, letters=letters),
        top_tokens=[
            TopToken(id=t, token=model.token_text(t), prob=float(np.exp(v))) for t, v in zip(pos.top_ids[:TOP_TOKENS], pos.top_logprobs[:TOP_TOKENS])
        ],
        option_logprobs=list(s.logprobs),
    )


def mass_columns(s: OptionSetReading, divergent_argmax_id: int | None) -> MassColumns:
    """The audit's further readings of option set ``s``'s mass (``divergent_argmax_id``: the argmax
    at its divergent position, :func:`divergent_argmax`)."""
    return MassColumns(
        option_mass_isolated=s.isolated_mass,
        option_mass_divergent=divergent_mass(s),
        divergent_argmax_id=divergent_argmax_id,
        divergent_argmax_hit=divergent_hit(s, divergent_argmax_id),
        option_mass_low=s.mass_bounds[0] if s.mass_bounds else None,
        option_mass_high=s.mass_bounds[1] if s.mass_bounds else None,
        isolated_first_token_ids=[t for t in s.isolated_ids if t is not None],
    )


def option_columns(
    context: ContextColumns, options: Sequence[str], pos: PositionColumns, continuation: str | None, continuation_class: str | None
) -> OptionColumns:
    """One option set's row columns: the rendered ``context``'s, the ``options``, what the position
    says about them (:func:`position_columns`) and the continuation there with its class."""
    return OptionColumns(**context, options=list(options), **pos, continuation=continuation, continuation_class=continuation_class)


def unread_columns(options: Sequence[str] | None = None) -> OptionColumns:
    """The same columns where nothing was read (a skipped variant, a readout without a context):
    None throughout but the ``options`` given."""
    return OptionColumns(
        context=None, context_tail=None, n_context_tokens=None, ends_with_whitespace=None,
        options=None if options is None else list(options), boundary_preserved=None, option_mass=None, first_token_ids=None,
        first_tokens_distinct=None, option_first_probs=None, argmax_id=None, argmax_token=None, argmax_prob=None,
        argmax_class=None, top_tokens=None, option_logprobs=None, continuation=None, continuation_class=None,
    )


def context_columns(text: str, ids: Sequence[int]) -> ContextColumns:
    """What the readings say about the rendered context itself."""
    return ContextColumns(
        context=text,
        context_tail=text[-TAIL_CHARS:],
        n_context_tokens=len(ids),
        ends_with_whitespace=bool(text) and text[-1].isspace(),
    )


def continuations(model: LanguageModel, contexts: Sequence[Sequence[int]], groups: Sequence[Sequence[int]], max_new_tokens: int) -> list[str]:
    """The greedy continuation of every context, decoded in the given groups (rows of a group share
    their leading tokens, which the engine computes once)."""
    texts = [""] * len(contexts)
    for group in groups:
        for i, g in zip(group, model.greedy([contexts[i] for i in group], max_new_tokens, top_k=1)):
            texts[i] = model.decode(g.token_ids)
    return texts


# -- contexts --------------------------------------------------------------------------------------
@dataclass
class Prepared:
    """One (item, variant) ready to score: its rendered context and its options."""

    item: AuditItem
    variant: str
    skip: str | None = None
    text: str = ""
    options: tuple[str, ...] = ()


def prepare(model: LanguageModel, item: AuditItem, variant: str, stem: str | None = None) -> Prepared:
    """Render the variant; with ``move_trailing_whitespace`` the context's trailing whitespace moves
    into every option, as lm-evaluation-harness's ``TemplateLM._encode_pair`` does."""
    spec = make_variant(item, variant, stem)
    if isinstance(spec, Skipped):
        return Prepared(item, variant, skip=spec.reason)
    text = render(model, spec)
    options = tuple(item.options or ())
    if item.move_trailing_whitespace:
        stripped = text.rstrip()
        ws = text[len(stripped) :]
        text, options = stripped, tuple(ws + o for o in options)
    return Prepared(item, variant, text=text, options=options)


def echoes(question: str | None, prompt: str) -> list[str]:
    """What a continuation that *recites* would repeat: the quoted question and the prompt's last line."""
    lines = [ln for ln in prompt.splitlines() if ln.strip()]
    return [t for t in (question, lines[-1] if lines else None) if t]


def _echoes(item: AuditItem) -> list[str]:
    last_user = [m["content"] for m in item.messages if m.get("role") == "user"]
    return echoes(item.question, last_user[-1] if last_user else "")


# -- the batched measurement -----------------------------------------------------------------------
def measure(
    model: LanguageModel,
    items: Sequence[AuditItem],
    variants: Sequence[str],
    *,
    stem: str | None = None,
    max_new_tokens: int = 16,
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
    progress: Callable[[str], None] | None = None,
) -> list[Reading]:
    """Readings for every (item, variant), in item order then variant order (rows follow SCHEMA).

    (1) One reading of every context's scored position (:func:`sleight.position.read_positions`,
    multi-token options scored to their end so the full-sequence log-probs and the divergent mass
    exist). (2) One batched greedy decode per item (its variants share their leading tokens,
    computed once) for the unrestricted continuation.
    """
    prepared = [prepare(model, item, v, stem) for item in items for v in variants]
    live = [p for p in prepared if p.skip is None]
    if progress:
        progress("scored positions")
    # listed: a server that lists its top-k alone gives an interval where an option is not among them
    readings = read_positions(model, [p.text for p in live], [[p.options] for p in live], top_k=TOP_TOKENS, score_options=True, listed=True)
    div_argmax = divergent_argmax(model, readings, listed=True)
    if progress:
        progress("greedy continuations")
    texts = continuations(model, [r.context_ids for r in readings], _item_groups(live, max(1, rows_per_pass)), max_new_tokens)

    measured: dict[int, MeasuredColumns] = {}
    for p, r, cont, div in zip(live, readings, texts, div_argmax):
        s = r.option_sets[0]
        pos = position_columns(model, r, s, letters=p.item.letters)
        c = classify_continuation(cont, options=p.item.options or (), letters=p.item.letters, choices=p.item.choices, echoes=_echoes(p.item))
        measured[id(p)] = MeasuredColumns(
            **option_columns(context_columns(p.text, r.context_ids), p.options, pos, cont, c.cls),
            **mass_columns(s, div),
            skipped=False,
            skip_reason=None,
            score=renormalised_score(pos["option_logprobs"], p.item.options or (), p.item.score_scale),
            answer_then_grid=c.answer_then_grid,
            grid_anywhere=c.grid_anywhere,
            continuation_on_task=c.on_task,
            target=p.item.target,
        )
    return [Reading(item_id=p.item.id, variant=p.variant, **(measured[id(p)] if p.skip is None else _skipped(p))) for p in prepared]


def _skipped(p: Prepared) -> MeasuredColumns:
    """A skipped variant's columns: why it was skipped, the item's target, every measured column None."""
    return MeasuredColumns(
        **unread_columns(), skipped=True, skip_reason=p.skip, option_mass_isolated=None, option_mass_divergent=None,
        divergent_argmax_id=None, divergent_argmax_hit=None, option_mass_low=None, option_mass_high=None, isolated_first_token_ids=None, score=None, answer_then_grid=None,
        grid_anywhere=None, continuation_on_task=None, target=p.item.target,
    )


def _item_groups(live: Sequence[Prepared], size: int) -> list[list[int]]:
    """Indices of ``live`` grouped by item (consecutive), each group cut to at most ``size`` rows."""
    groups: list[list[int]] = []
    for i, p in enumerate(live):
        if groups and live[groups[-1][0]].item is p.item and len(groups[-1]) < size:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _is_special(model: LanguageModel, token_id: int) -> bool:
    return model.is_special(token_id) if isinstance(model, SpecialTokens) else token_id in model.eos_ids


# -- the paper's readings of the rows (derived, not stored) ----------------------------------------------
DERIVED: tuple[str, ...] = (
    "form",
    "ending",
    "stemmed",
    "ends_with_newline",
    "argmax_bare",
    "token_class",
    "opening_word",
    "mass_argmax_disagree",
    "argmax_opens",
    "bare_number",
    "counted_class",
    "variant_row",
    "variant_distinct",
    "variant_isolated_equal",
    "variant_class_check",
    "variant_mass_factor",
    "passage_file",
)


def opens_with(continuation: str | None, token: str | None) -> bool | None:
    """Whether a continuation begins with the argmax token, read on the text: leading whitespace
    aside it starts with the token's text; a whitespace argmax, it starts with whitespace or is
    empty (a tokeniser may drop a leading space when it decodes)."""
    if continuation is None or token is None:
        return None
    t = token.strip()
    return continuation.lstrip().startswith(t) if t else (not continuation or continuation[0].isspace())


def derived_columns(rows: Sequence[Mapping[str, Any]], floor: float = MASS_FLOOR) -> list[dict[str, Any]]:
    """The readings with the paper's App. C/D readings added (:data:`DERIVED`), in their order.

    Per row: ``form``/``ending`` (:func:`sleight.readout.audit.composed.variant_cell`; ``stemmed``:
    the form is the answer stem's), ``ends_with_newline``, ``argmax_bare`` (the argmax without
    whitespace and a word-boundary marker), ``token_class`` and ``opening_word`` (App. D's two
    token-level rules, :mod:`sleight.readout.audit.token_rules`; the opening word only for a
    substitute with one), ``mass_argmax_disagree`` (App. C.1: the option mass at or above ``floor``
    and an option's first token at the argmax disagree; None where the mass's interval holds the floor), ``argmax_opens`` (App. D: the continuation
    begins with the argmax, :func:`opens_with`), ``bare_number`` and ``counted_class`` (App. D: the
    rule class in the judge's classes, a bare number counted as a forecast).

    Per variant, on each of its rows (``variant_row`` marks its first, for counts over variants):
    ``variant_distinct`` (first tokens distinct on every measured item), ``variant_isolated_equal``
    (isolated and in-context masses equal on every item, App. C.1), ``variant_class_check`` (App. D's
    token-class check for its ending; None for an ending the rule does not predict) and
    ``variant_mass_factor`` (its median mass over the median of the same form with the item's own
    instruction, App. D's deletion factor).

    ``passage_file``: a RACE item's passage file (its id before ``:``, ``high1845.txt``), by which the
    paper names single items (App. C.3's two exceptions), so a column can select one."""
    from sleight.readout.audit import judge, token_rules
    from sleight.readout.audit.composed import variant_cell
    from sleight.readout.data.race import passage_file

    out = []
    by_variant: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        row = dict(r)
        form, ending = variant_cell(str(row.get("variant")))
        cont = row.get("continuation")
        measured = not row.get("skipped") and row.get("argmax_token") is not None
        token = str(row.get("argmax_token") or "")
        above = at_floor(*mass_interval(row), floor)
        on_option = row.get("argmax_class") == "option"
        context = row.get("context")
        row.update(
            form=form,
            ending=ending,
            stemmed=None if form is None else form == "stemmed",
            ends_with_newline=None if context is None else str(context).endswith("\n"),
            argmax_bare=token_rules.bare_token(token) if measured else None,
            token_class=token_rules.token_class(token) if measured else None,
            opening_word=token_rules.opening_word_match(token, ending) if measured and ending in token_rules.SUBSTITUTES and ending != "empty" else None,
            mass_argmax_disagree=None if not measured or above is None else above != on_option,
            argmax_opens=opens_with(cont, token) if measured else None,
            passage_file=passage_file(row.get("item_id")),
            bare_number=judge.is_bare_number(cont) if measured and cont is not None else None,
            counted_class=(
                judge.counted_class(judge.RULE_TO_JURY.get(str(row.get("continuation_class")), "other"), cont) if measured and cont is not None else None
            ),
        )
        by_variant.setdefault(str(row.get("variant")), []).append(row)
        out.append(row)
    base: dict[str | None, float] = {}
    for rs in by_variant.values():
        if rs[0]["ending"] == "instruction":
            base[rs[0]["form"]] = _median([r.get("option_mass") for r in rs if r["argmax_bare"] is not None])
    for rs in by_variant.values():
        live = [r for r in rs if r["argmax_bare"] is not None]
        rule = rs[0]["ending"]  # App. D's ending: "instruction" (the item's own) or a substitute's key
        median = _median([r.get("option_mass") for r in live])
        b = base.get(rs[0]["form"], float("nan"))
        values = {
            "variant_distinct": all(r.get("first_tokens_distinct") is True for r in live) if live else None,
            "variant_isolated_equal": (
                all(r.get("option_mass") is not None and r.get("option_mass") == r.get("option_mass_isolated") for r in live) if live else None
            ),
            "variant_class_check": (
                token_rules.token_class_check([str(r["argmax_token"]) for r in live], rule) if live and rule in token_rules.PREDICTED_CLASS else None
            ),
            "variant_mass_factor": median / b if np.isfinite(median) and np.isfinite(b) and b > 0 else None,
        }
        for k, r in enumerate(rs):
            r.update(values, variant_row=k == 0)
    return out


def _median(values: Sequence[Any]) -> float:
    nums = [float(v) for v in values if v is not None and np.isfinite(v)]
    return float(np.median(nums)) if nums else float("nan")


def rows_to_table(rows: Sequence[Reading]) -> pa.Table:
    """Readings as an Arrow table with the public schema."""
    return pa.Table.from_pylist([{k: r.get(k) for k in SCHEMA.names} for r in rows], schema=SCHEMA)
