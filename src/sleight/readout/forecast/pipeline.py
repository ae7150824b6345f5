"""The reader-forecast study's pipeline (SPEC §4.4): does the forecast rank the reader's correctness?

For each RACE-style item:

1. **Note.** The model writes its own note about the passage with App. H's writer
   (:func:`sleight.readout.audit.notes.write_notes`, the project's one note writer: App. H's prompt,
   greedy within 256 new tokens, a note kept when it ends at end-of-sequence with 1 to 32 words, an
   over-budget or unfinished attempt retried up to four times at floor(32 / (r + 1)) words). The
   writer is not shown the question. ``inferred:`` a passage whose five attempts all fail is read
   with an empty note (``note_ok`` false, counted in the summary); App. H's rows all have notes.
2. **Reader.** The same model reads only the note and the quoted item (question, the choices
   printed ``A: ...`` as in Appendix H, "Answer with exactly one of: A, B, C, D.") and picks the
   option with the highest full-sequence log-probability, once with the option strings
   `` A``..`` D`` (spaced) and once with ``A``..``D`` (unspaced), both read at one position (the
   rendered context ends in the template's ``assistant\\n``). How often the two pick the same letter
   is reported. Correctness of the *spaced* reader against the gold letter is the target, as Table 4
   reads it (``reader="unspaced"``: the unspaced one, this pipeline's target before issue #19).
3. **Forecast.** The study's forecast prompt (the note, "A future reader will be shown ONLY the note
   above...", the quoted item, "Out of 100 such readers, how many answer correctly? Reply with
   exactly one of: 10, 30, 50, 70, 90.") is read at the original position (after the generation
   prompt) and at the stemmed position ("Out of 100 such readers, about " prefilled), over the same
   declared set, renormalised: ``p_S = Σ (int(o)/100)·p_o`` with ``p_o ∝ exp(ℓ_o)``.

The scoring (AUROC, Brier, paired gain with a cluster bootstrap over passages, references) is in
:func:`summarise`, a pure function of the per-item table. The readings at the scored positions come
from :func:`sleight.readout.audit.measure.measure`, the audit's own measurement, so the option-mass
diagnostics here and in ``sleight readout audit`` are the same numbers; the reader reads its
position through the same :func:`sleight.position.read_positions`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypedDict, cast

import numpy as np

from sleight.backends import LanguageModel, Rendered
from sleight.errors import UserError
from sleight.position import read_positions, renormalise
from sleight.readout.audit.items import AuditItem
from sleight.readout.audit.measure import MASS_FLOOR, MeasuredColumns, PositionColumns, measure, position_columns
from sleight.readout.audit.notes import NOTE_MAX_NEW_TOKENS, NOTE_RETRIES, NOTE_WORDS, Note, write_notes
from sleight.readout.audit.presets import (
    FORECAST_ITEM_INSTRUCTION,
    FORECAST_OPTIONS,
    FORECAST_STEM,
    LETTERS,
    choices_block,
    forecast_prompt,
)
from sleight.readout.audit.reader import letter_correct, reader_generated_letters
from sleight.readout.items import DEFAULT_RACE_ITEMS as DEFAULT_ITEMS  # noqa: F401 - re-exported
from sleight.readout.items import RaceItem
from sleight.readout.items import load_race_items as load_race_items
from sleight.readout.items import race_item_from_record as race_item_from_record
from sleight.stats.downstream import (
    JsonRecord,
    MassSummary,
    MetricInterval,
    PairedDifference,
    clean,
    cluster_codes,
    counts,
    mass_summary,
    metric_interval,
    paired_difference,
)

SPACINGS = {"unspaced": tuple(LETTERS), "spaced": tuple(f" {x}" for x in LETTERS)}
POSITIONS = ("original", "stem")
READERS = ("spaced", "unspaced")  # whose correctness is the target; Table 4 reads the spaced letters
DEFAULT_READER = "spaced"
CONTINUATION_TOKENS = 48  # greedy tokens at each scored position: readout (f) decodes 48 (Appendix H)


# ---------------------------------------------------------------------------------------------
# pure text pieces
# ---------------------------------------------------------------------------------------------


def quoted_item(item: RaceItem) -> str:
    """The multiple-choice item as the reader and the forecast prompt quote it."""
    return f"{item.question}\n{choices_block(item.choices)}\n{FORECAST_ITEM_INSTRUCTION}"


def reader_prompt(note: str, item: RaceItem) -> str:
    """What the note-only reader sees: the note and the quoted item, nothing of the passage."""
    return f"Note: {note}\n\n{quoted_item(item)}"


def pick(option_logprobs: Sequence[float | None]) -> int | None:
    """Index of the option with the highest full-sequence log-probability (first on ties); None
    when any option has no score (its boundary was not preserved)."""
    if not option_logprobs or any(v is None or not math.isfinite(v) for v in option_logprobs):
        return None
    return int(np.argmax(np.asarray(option_logprobs, dtype=np.float64)))


# ---------------------------------------------------------------------------------------------
# the model steps
# ---------------------------------------------------------------------------------------------


def forecast_item(item: RaceItem, note: str, target: float | None) -> AuditItem:
    """The study's forecast prompt for this item and note, as an audit item (options 10..90, stem)."""
    prompt, quoted, block = forecast_prompt(note, item.question, item.choices)
    return AuditItem(
        id=item.id,
        messages=({"role": "user", "content": prompt},),
        options=FORECAST_OPTIONS,
        quoted_instruction=FORECAST_ITEM_INSTRUCTION,
        choices_block=block,
        quoted=quoted,
        choices=item.choices,
        question=item.question,
        letters=LETTERS,
        target=target,
        stem=FORECAST_STEM,
    )


def check_reader(reader: str) -> str:
    if reader not in READERS:
        raise UserError(f"unknown reader '{reader}' (choose from {', '.join(READERS)})")
    return reader


class ReaderChoice(TypedDict):
    """The note-only reader on one item (:func:`read_notes`): columns of readings.parquet, copied
    into each of the item's rows unchanged, so a TypedDict of the row's keys."""

    reader_choice: str | None
    reader_choice_spaced: str | None
    reader_agree: bool | None
    reader_logprobs: list[float | None]
    reader_logprobs_spaced: list[float | None]
    reader_mass: float | None
    reader_mass_spaced: float | None
    reader_argmax_token: str | None
    reader_argmax_class: str | None
    correct: bool | None
    correct_spaced: bool | None
    reader_target: str
    reader_generated: str | None  # App. C.7: the first standalone letter of 16 greedy tokens (None: it names none)
    correct_generated: bool | None


class ForecastRow(ReaderChoice, MeasuredColumns):
    """One row of the forecast's readings.parquet (:data:`sleight.readout.downstream_run.FORECAST_SCHEMA`):
    the item and its note, the reader (:class:`ReaderChoice`), then the audit's readings at one
    position (:class:`sleight.readout.audit.measure.MeasuredColumns`, what
    :func:`~sleight.readout.audit.measure.measure` records less ``item_id`` and ``variant``) and the
    forecast's renormalised option probabilities. A TypedDict: the row is written to Parquet and
    read back unchanged, keyed by column."""

    item_id: str
    cluster: int
    position: str
    gold: str
    note: str
    note_ok: bool | None
    note_attempts: int | None
    note_raw: str | None
    note_tokens: int | None
    note_finish: str | None
    option_probs: list[float] | None


def reader_readings(model: LanguageModel, items: Sequence[RaceItem], notes: Sequence[str]) -> list[tuple[PositionColumns, PositionColumns]]:
    """The note-only reader's position for each (item, note text), read once against the unspaced and
    the spaced letters (App. C.7): per item the audit's columns of each set, (unspaced, spaced)."""
    return _read_reader_contexts(model, [c.text for c in _reader_chats(model, items, notes)])


def _reader_chats(model: LanguageModel, items: Sequence[RaceItem], notes: Sequence[str]) -> list[Rendered]:
    """The note-only reader's prompt per (item, note text), rendered with the model's chat template."""
    return [model.render_chat([{"role": "user", "content": reader_prompt(n, it)}]) for it, n in zip(items, notes)]


def _read_reader_contexts(model: LanguageModel, contexts: Sequence[str]) -> list[tuple[PositionColumns, PositionColumns]]:
    sets = [SPACINGS["unspaced"], SPACINGS["spaced"]]
    out = []
    for r in read_positions(model, contexts, [sets] * len(contexts), score_options=True):
        unspaced, spaced = (position_columns(model, r, s, letters=LETTERS) for s in r.option_sets)
        out.append((unspaced, spaced))
    return out


def read_notes(model: LanguageModel, items: Sequence[RaceItem], notes: Sequence[str], *, reader: str = DEFAULT_READER) -> list[ReaderChoice]:
    """The note-only reader's choice per item (``notes``: the note text each item is read with),
    with spaced and unspaced option strings.

    Both option sets are read at the same rendered position, so one reading per item serves both
    (:func:`sleight.position.read_positions`). ``correct`` is the target: the ``reader``'s
    correctness (spaced by default, Table 4); ``correct_spaced`` is always the spaced reader's;
    ``correct_generated`` the letter the reader writes in 16 greedy tokens (App. C.7's third reading).
    """
    check_reader(reader)
    chats = _reader_chats(model, items, notes)
    readings = _read_reader_contexts(model, [c.text for c in chats])
    written = reader_generated_letters(model, [c.ids for c in chats])
    out: list[ReaderChoice] = []
    for it, (ru, rs), gen in zip(items, readings, written):
        ku, ks = pick(ru["option_logprobs"]), pick(rs["option_logprobs"])
        choice = LETTERS[ku] if ku is not None else None
        choice_sp = LETTERS[ks] if ks is not None else None
        out.append(
            ReaderChoice(
                reader_choice=choice,
                reader_choice_spaced=choice_sp,
                reader_agree=(choice == choice_sp) if choice and choice_sp else None,
                reader_logprobs=ru["option_logprobs"],
                reader_logprobs_spaced=rs["option_logprobs"],
                reader_mass=ru["option_mass"],
                reader_mass_spaced=rs["option_mass"],
                reader_argmax_token=ru["argmax_token"],
                reader_argmax_class=ru["argmax_class"],
                correct=letter_correct(choice_sp if reader == "spaced" else choice, it.answer),
                correct_spaced=letter_correct(choice_sp, it.answer),
                reader_target=reader,
                reader_generated=gen,
                correct_generated=letter_correct(gen, it.answer),
            )
        )
    return out


def run_forecast(
    model: LanguageModel,
    items: Sequence[RaceItem],
    *,
    max_words: int = NOTE_WORDS,
    note_max_new_tokens: int = NOTE_MAX_NEW_TOKENS,
    continuation_tokens: int = CONTINUATION_TOKENS,
    status: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    clusters: Sequence[int] | None = None,
    reader: str = DEFAULT_READER,
) -> list[ForecastRow]:
    """All model work: one row per (item, position) with the note, the reader and the readings.

    Notes are written once per distinct passage with App. H's writer (``max_words``: its word
    budget; ``note_max_new_tokens``: its cap per attempt), items that share a passage sharing a note
    and a cluster. ``status`` is told which step runs; ``progress`` counts note tokens. ``clusters``:
    each item's passage cluster over the whole run, when ``items`` is one committed part of it.
    ``reader``: whose correctness is the target (:data:`READERS`; spaced, as Table 4 reads it).
    ``continuation_tokens``: the greedy continuation at each position (48, Appendix H's readout (f)).
    """
    if not items:
        raise UserError("no items to run")
    check_reader(reader)
    say = status or (lambda _msg: None)
    passages = list(dict.fromkeys(it.passage for it in items))
    say(f"writing {len(passages)} notes")
    by_passage = dict(zip(passages, write_notes(model, passages, words=max_words, max_new_tokens=note_max_new_tokens, progress=progress)))
    notes: list[Note] = [by_passage[it.passage] for it in items]
    codes = list(cluster_codes([it.passage for it in items])) if clusters is None else list(clusters)
    say("note-only reader")
    picks = read_notes(model, items, [n.text for n in notes], reader=reader)
    say("forecast at the original and stemmed positions")
    f_items = [forecast_item(it, n.text, None if r["correct"] is None else float(r["correct"])) for it, n, r in zip(items, notes, picks)]
    readings = measure(model, f_items, list(POSITIONS), max_new_tokens=continuation_tokens)
    rows: list[ForecastRow] = []
    for k, reading in enumerate(readings):
        i = k // len(POSITIONS)
        it, note = items[i], notes[i]
        row: dict[str, object] = {
            "item_id": it.id,
            "cluster": int(codes[i]),
            "position": reading["variant"],
            "gold": it.answer,
            "note": note.text,
            "note_ok": note.ok,
            "note_attempts": note.attempts,
            "note_raw": note.raw,
            "note_tokens": note.n_tokens,
            "note_finish": note.finish_reason,
            **picks[i],
        }
        row.update({key: val for key, val in reading.items() if key not in ("item_id", "variant")})
        row["option_probs"] = _renormalised(reading.get("option_logprobs"))
        rows.append(cast(ForecastRow, row))  # the measurement's columns are FORECAST_SCHEMA's: the row is complete
    return rows


def _renormalised(option_logprobs: Sequence[float | None] | None) -> list[float] | None:
    p = renormalise(option_logprobs or [])
    return None if p is None else p.tolist()


# ---------------------------------------------------------------------------------------------
# scoring (pure)
# ---------------------------------------------------------------------------------------------


def _num(v: Any) -> float:
    """A float read back from summary.json, where null is the NaN :func:`clean` wrote as null."""
    return math.nan if v is None else float(v)


@dataclass(frozen=True)
class NoteSummary(JsonRecord):
    """App. H's writer over one row per item (:func:`note_summary`); field names and order are
    summary.json's ``notes`` keys. The counts are None for readings made before ``note_ok``."""

    max_words: int
    retries: int
    kept: int | None
    not_kept: int | None
    retried: int | None
    mean_attempts: float
    mean_words: float


@dataclass(frozen=True)
class ReaderSummary(JsonRecord):
    """The note-only reader over the items: its target, accuracies (NaN where none is defined),
    how often the spacings agree, its choices and option mass; summary.json's ``reader`` keys."""

    target: str
    accuracy_target: float
    accuracy: float
    accuracy_spaced: float
    spaced_unspaced_agreement: float
    n_agree: int
    n_compared: int
    choices: Mapping[str, int]
    choices_spaced: Mapping[str, int]
    gold: Mapping[str, int]
    mass: MassSummary
    mass_spaced: MassSummary


@dataclass(frozen=True)
class PositionSummary(JsonRecord):
    """The forecast at one position: AUROC and Brier with intervals (None without scored items),
    its mean, the option mass and what the model would say there; summary.json's keys."""

    auroc: MetricInterval | None
    brier: MetricInterval | None
    mean_forecast: float
    mass: MassSummary
    first_tokens_distinct: float
    argmax_class: Mapping[str, int]
    argmax_token: Mapping[str, int]
    continuation_class: Mapping[str, int]


@dataclass(frozen=True)
class BrierReference(JsonRecord):
    """What a forecast that knows nothing scores: the constant 0.5 and the in-sample base rate
    (``base_rate_value``); JSON keys ``constant_0.5``, ``base_rate``, ``base_rate_value``."""

    constant_half: float
    base_rate: float
    base_rate_value: float

    def as_json(self) -> dict[str, object]:
        return {"constant_0.5": self.constant_half, "base_rate": self.base_rate, "base_rate_value": self.base_rate_value}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> BrierReference:
        return cls(_num(d["constant_0.5"]), _num(d["base_rate"]), _num(d["base_rate_value"]))


@dataclass(frozen=True)
class ForecastSummary(JsonRecord):
    """Everything the forecast report states: summary.json less the run's description, field names
    its keys, the nested records :mod:`sleight.stats.downstream`'s and this module's; ``as_json`` is
    the JSON (NaN as null)."""

    n_items: int
    n_scored: int
    n_clusters: int
    B: int
    seed: int
    level: float
    notes: NoteSummary  # App. H's writer: max_words, retries, kept, retried, mean_attempts, mean_words
    reader: ReaderSummary  # the note-only reader: target, accuracies, choices, mass
    positions: Mapping[str, PositionSummary]  # per position: auroc, brier, mass, classes
    brier_reference: BrierReference  # constant_0.5, base_rate, base_rate_value
    gain: Mapping[str, PairedDifference | None]  # stem minus original, per metric (None without scored items)

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = clean({f.name: getattr(self, f.name) for f in fields(self)})
        return out


def note_summary(rows: Sequence[Mapping[str, Any]]) -> NoteSummary:
    """App. H's writer over one row per item: its limits, how many notes were kept (``kept``),
    how many of those took a retry, the mean attempts and the kept notes' mean length in words.
    Readings from the writer that cut notes to 32 words (before issue 34 item 1) have no ``note_ok``:
    their counts are None."""
    ok = [r.get("note_ok") for r in rows]
    known = rows if rows and all(v is not None for v in ok) else []
    kept = [r for r in known if r["note_ok"]]
    return NoteSummary(
        max_words=NOTE_WORDS,
        retries=NOTE_RETRIES,
        kept=len(kept) if known else None,
        not_kept=len(known) - len(kept) if known else None,
        retried=sum(int(r["note_attempts"]) > 1 for r in kept) if known else None,
        mean_attempts=float(np.mean([r["note_attempts"] for r in known])) if known else math.nan,
        mean_words=float(np.mean([len(str(r["note"]).split()) for r in kept])) if kept else math.nan,
    )


def summarise(rows: Sequence[Mapping[str, Any]], *, B: int = 20000, seed: int = 0, level: float = 0.95) -> ForecastSummary:
    """Everything the report states, from the per-(item, position) rows.

    Items without a defined target (the reader's boundary not preserved) or without a score at
    either position are left out of the scoring and counted, so both positions are always scored on
    the same items (the paired gain needs that).
    """
    by_pos = {p: [r for r in rows if r["position"] == p] for p in POSITIONS}
    orig, stem = by_pos["original"], by_pos["stem"]
    if [r["item_id"] for r in orig] != [r["item_id"] for r in stem]:
        raise ValueError("the original and stem rows must cover the same items in the same order")
    usable = [
        i for i, (a, b) in enumerate(zip(orig, stem)) if a["correct"] is not None and a["score"] is not None and b["score"] is not None
    ]
    y = np.asarray([float(orig[i]["correct"]) for i in usable])
    clusters = np.asarray([orig[i]["cluster"] for i in usable])
    scores = {p: np.asarray([by_pos[p][i]["score"] for i in usable], dtype=np.float64) for p in POSITIONS}
    agree = [r["reader_agree"] for r in orig if r["reader_agree"] is not None]
    target = (orig[0].get("reader_target") if orig else None) or "unspaced"  # readings from before issue #19 have no column: unspaced
    correct = [r["reader_choice"] == r["gold"] for r in orig if r["reader_choice"] is not None]
    correct_sp = [r["correct_spaced"] for r in orig if r["correct_spaced"] is not None]
    correct_target = [r["correct"] for r in orig if r["correct"] is not None]
    reader_summary = ReaderSummary(
        target=target,
        accuracy_target=float(np.mean(correct_target)) if correct_target else math.nan,
        accuracy=float(np.mean(correct)) if correct else math.nan,
        accuracy_spaced=float(np.mean(correct_sp)) if correct_sp else math.nan,
        spaced_unspaced_agreement=float(np.mean(agree)) if agree else math.nan,
        n_agree=int(sum(agree)),
        n_compared=len(agree),
        choices=counts([r["reader_choice"] for r in orig]),
        choices_spaced=counts([r["reader_choice_spaced"] for r in orig]),
        gold=counts([r["gold"] for r in orig]),
        mass=mass_summary([r["reader_mass"] for r in orig], MASS_FLOOR),
        mass_spaced=mass_summary([r["reader_mass_spaced"] for r in orig], MASS_FLOOR),
    )
    base = float(y.mean()) if y.size else math.nan
    reference = BrierReference(
        constant_half=0.25 if y.size else math.nan,
        base_rate=base * (1.0 - base) if y.size else math.nan,
        base_rate_value=base,
    )
    positions = {}
    for p in POSITIONS:
        rs = by_pos[p]
        positions[p] = PositionSummary(
            auroc=metric_interval("auroc", scores[p], y, clusters=clusters, B=B, seed=seed, level=level) if y.size else None,
            brier=metric_interval("brier", scores[p], y, clusters=clusters, B=B, seed=seed, level=level) if y.size else None,
            mean_forecast=float(scores[p].mean()) if y.size else math.nan,
            mass=mass_summary([r["option_mass"] for r in rs], MASS_FLOOR),
            first_tokens_distinct=float(np.mean([bool(r["first_tokens_distinct"]) for r in rs])) if rs else math.nan,
            argmax_class=counts([r["argmax_class"] for r in rs]),
            argmax_token=counts([r["argmax_token"] for r in rs]),
            continuation_class=counts([r["continuation_class"] for r in rs]),
        )
    gain = {
        m: paired_difference(m, scores["stem"], scores["original"], y, clusters=clusters, B=B, seed=seed, level=level, name_a="stem", name_b="original")
        if y.size
        else None
        for m in ("auroc", "brier")
    }
    return ForecastSummary(
        n_items=len(orig), n_scored=len(usable), n_clusters=int(np.unique(clusters).size), B=B, seed=seed, level=level,
        notes=note_summary(orig), reader=reader_summary, positions=positions, brier_reference=reference, gain=gain,
    )
