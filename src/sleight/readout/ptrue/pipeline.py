"""The P(True) experiment: do five readouts of lm-polygraph's P(True) prompt rank answer correctness?

Steps:

1. The model answers each question greedily (:mod:`sleight.readout.ptrue.answers`); correctness is
   the first standalone letter for lettered items, alias matching on word boundaries for free ones.
2. Pairs (question, answer, label) are built in one or both *settings*:

   * ``own`` -- the model's own greedy answer, labelled by its correctness. This is the usual
     lm-polygraph setting (P(True) as an uncertainty score for the model's own generation).
   * ``constructed`` -- each question twice, with its gold answer (label 1) and with the fixture's
     plausible wrong answer (label 0; for lettered items a seeded non-gold letter, printed bare as App. E prints it). Balanced
     labels by construction, so the ranking is measurable even when a small model gets most
     questions wrong; the two rows of a question form one bootstrap cluster.

3. The readouts of :data:`sleight.readout.ptrue.readouts.READOUTS` score every pair
   (:func:`~sleight.readout.ptrue.readouts.score_pairs`): one reading of each readout's scored position
   gives its value, its option mass over its own options, the unrestricted argmax and its class;
   a greedy decode there gives the continuation. Library reproduces lm-polygraph 0.7.0 (its EOS
   masking included); ``instruct=False`` reads the raw prompt string, as the library does for a
   model that is not an instruct model.

:func:`summarise` (pure) gives AUROC, PRR and PRR at 0.5 with cluster-bootstrap intervals per
readout, the paired differences against Library and between every pair of readouts (on the pairs
every readout scores; both readouts on the same replicates), per-letter AUROC and the gold / printed /
neither split of the argmax on lettered items, and the position diagnostics.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NotRequired, TypedDict, cast

import numpy as np

from sleight.backends import LanguageModel
from sleight.errors import UserError
from sleight.readout.audit.measure import MASS_FLOOR
from sleight.readout.items import PRINTED_SEED, printed_wrong_letter
from sleight.readout.ptrue.answers import (
    LETTERS,
    Answer,
    QAItem,
    Sampling,
    fused_gold_letter,
    greedy_answers,
    judge_answer,
    library_match,
    sampled_answers,
)
from sleight.readout.ptrue.readouts import READOUT_LABELS, READOUT_NAMES, READOUTS, ReadoutRow, score_pairs
from sleight.stats.downstream import (
    AnswerLetterInterval,
    JsonRecord,
    LetterAuroc,
    MassSummary,
    MetricInterval,
    PairedDifference,
    all_pairs,
    answer_letter_auroc_interval,
    clean,
    cluster_codes,
    counts,
    mass_summary,
    metric_interval,
    paired_difference,
    per_letter_auroc,
)

SETTINGS = ("own", "constructed")
ANSWER_MAX_NEW_TOKENS = 32
CONTINUATION_TOKENS = 16
READOUT_OPTIONS: dict[str, tuple[str, str]] = {r.name: r.options for r in READOUTS}


def parse_settings(text: str) -> tuple[str, ...]:
    """``--answers``: ``own``, ``constructed`` or ``both``."""
    if text == "both":
        return SETTINGS
    if text not in SETTINGS:
        raise UserError(f"unknown --answers '{text}' (choose from own, constructed, both)")
    return (text,)


ARGMAX_SPLIT = ("gold", "printed", "neither")


class Pair(TypedDict):
    """One (question, answer, label) pair the readouts score: its fields become columns of every
    row of the pair (:func:`score_pair_rows`, less ``deleted_question``), so a TypedDict of those
    keys. ``answer_tokens``/``answer_finish`` and the two other labels of App. E exist for own answers
    only (:func:`own_pairs`); ``setting`` once :func:`run_ptrue` sorts the pair into one."""

    setting: NotRequired[str]
    item_id: str
    question: str
    deleted_question: str | None
    answer: str
    answer_source: str  # own | gold | wrong
    label: float
    matched: str | None
    answer_tokens: NotRequired[int]
    answer_finish: NotRequired[str | None]
    label_library: NotRequired[float | None]
    fused_letter: NotRequired[bool | None]
    label_fused: NotRequired[float | None]


class PTrueRow(ReadoutRow):
    """One row of ptrue.parquet / readings.parquet (:data:`sleight.readout.audit.ptrue_table.PTRUE_SCHEMA`):
    the pair's fields, then its readout's (:class:`~sleight.readout.ptrue.readouts.ReadoutRow`).
    A TypedDict: the row is written to Parquet and read back unchanged, keyed by column."""

    setting: NotRequired[str]
    item_id: str
    question: str
    answer: str
    answer_source: str
    label: float
    matched: str | None
    answer_tokens: NotRequired[int]
    answer_finish: NotRequired[str | None]
    label_library: NotRequired[float | None]
    fused_letter: NotRequired[bool | None]
    label_fused: NotRequired[float | None]


def argmax_split(argmax_token: str | None, gold_letter: str | None, printed_letter: str | None) -> str | None:
    """Where the unrestricted argmax points on a lettered item with one printed answer: ``gold``
    (the gold letter), ``printed`` (the printed non-gold answer's letter), or ``neither``. The token
    is read as a letter once whitespace and an opening parenthesis are stripped (`` B``, ``(B``);
    None when the gold letter is unknown."""
    if gold_letter is None:
        return None
    tok = (argmax_token or "").strip().lstrip("(").strip()
    if tok == gold_letter:
        return "gold"
    if printed_letter is not None and tok == printed_letter:
        return "printed"
    return "neither"


def constructed_pairs(items: Sequence[QAItem], *, seed: int = PRINTED_SEED) -> list[Pair]:
    """Gold (label 1) and wrong (label 0) answer per item; items without a wrong answer give only
    their gold row, which still counts but cannot pair. A lettered item prints bare letters, as
    App. E's wrong printed answer does: the gold letter, and the seeded non-gold letter
    (:func:`printed_wrong_letter`)."""
    pairs: list[Pair] = []
    for it in items:
        wrong: str | None
        if it.choices is not None and it.gold_letter is not None:
            # App. E: the printed possible answer replaced by a letter (the library prints the
            # model's own answer, a bare letter on MMLU): gold's letter, or a seeded non-gold one
            gold = it.gold_letter
            wrong = printed_wrong_letter(it.id, it.gold_letter, seed)
        else:
            gold, wrong = it.aliases[0], it.wrong
        dq = it.prompt_without_instruction
        pairs.append(Pair(item_id=it.id, question=it.prompt, deleted_question=dq, answer=gold, answer_source="gold", label=1.0, matched=None))
        if wrong:
            pairs.append(Pair(item_id=it.id, question=it.prompt, deleted_question=dq, answer=wrong, answer_source="wrong", label=0.0, matched=None))
    return pairs


def own_pairs(items: Sequence[QAItem], answers: Sequence[Answer], *, rule: str = "first_line") -> list[Pair]:
    """The model's own answer per item, labelled by the correctness rule (``rule``: the free-answer
    rule of :func:`~sleight.readout.ptrue.answers.judge_answer`), with App. E's two other labels: on a
    free answer the library's own (``label_library``, :func:`~sleight.readout.ptrue.answers.library_match`),
    on a lettered one the gold letter fused to lowercase text counted correct too (``fused_letter``,
    ``label_fused``, :func:`~sleight.readout.ptrue.answers.fused_gold_letter`)."""
    pairs: list[Pair] = []
    for it, ans in zip(items, answers):
        ok, matched = judge_answer(it, ans.text, rule=rule)
        fused = fused_gold_letter(ans.text, it.gold_letter) if it.lettered else None
        pairs.append(
            Pair(
                item_id=it.id,
                question=it.prompt,
                deleted_question=it.prompt_without_instruction,
                answer=ans.text,
                answer_source="own",
                label=float(ok),
                matched=matched,
                answer_tokens=ans.n_tokens,
                answer_finish=ans.finish_reason,
                label_library=None if it.lettered else float(library_match(ans.text, it.aliases) is not None),
                fused_letter=fused,
                label_fused=None if fused is None else float(ok or fused),
            )
        )
    return pairs


def score_pair_rows(
    model: LanguageModel,
    pairs: Sequence[Mapping[str, Any]],
    *,
    instruct: bool = True,
    continuation_tokens: int = CONTINUATION_TOKENS,
) -> list[PTrueRow]:
    """One row per (pair, readout): the pair's fields, then the readout's row from
    :func:`~sleight.readout.ptrue.readouts.score_pairs`. ``readout ptrue`` and ``readout audit --preset ptrue``
    both record these rows."""
    scored = score_pairs(
        model,
        [p["question"] for p in pairs],
        [p["answer"] for p in pairs],
        deleted_questions=[p.get("deleted_question") for p in pairs],
        instruct=instruct,
        continuation_tokens=continuation_tokens,
    )
    n = len(READOUTS)
    bare = [{k: v for k, v in p.items() if k != "deleted_question"} for p in pairs]
    # a pair's fields and a readout's are PTRUE_SCHEMA's columns between them: the row is complete
    return [cast(PTrueRow, {**p, **row}) for k, p in enumerate(bare) for row in scored[k * n : (k + 1) * n]]


def no_instruction_note(items: Sequence[QAItem]) -> str | None:
    """One line when some items carry no instruction (their Deleted readout is not read)."""
    missing = [it.id for it in items if it.prompt_without_instruction is None]
    if not missing:
        return None
    return f"Deleted not read for {len(missing)} of {len(items)} items: no 'instruction' in the item (first: {missing[0]})"


def run_ptrue(
    model: LanguageModel,
    items: Sequence[QAItem],
    *,
    settings: Sequence[str] = SETTINGS,
    instruct: bool = True,
    max_new_tokens: int = ANSWER_MAX_NEW_TOKENS,
    continuation_tokens: int = CONTINUATION_TOKENS,
    status: Callable[[str], None] | None = None,
    progress: Callable[[int], None] | None = None,
    sampling: Sampling | None = None,
    rule: str = "first_line",
    seed: int = PRINTED_SEED,
) -> list[PTrueRow]:
    """All model work: one row per (setting, pair, readout).

    ``sampling``: the own answers sampled as lm-polygraph samples them
    (:func:`~sleight.readout.ptrue.answers.sampled_answers`); None: greedy. ``rule``: the free-answer
    correctness rule (``first_line``, the paper's; ``anywhere``). ``seed``: the printed non-gold
    answer's draw (:func:`printed_wrong_letter`). Items without an instruction are said in one line
    on ``status`` (their Deleted rows have no reading).

    ``score`` is the readout's value: log P(True) for Library (the library's own number; ``exp`` of
    it is in ``library_prob``), a probability in [0, 1] for the others, None where a label's
    boundary is not preserved in context. ``instruct`` as in lm-polygraph: False answers and scores
    the raw prompt strings, with no chat template.
    """
    if not items:
        raise UserError("no items to run")
    say = status or (lambda _msg: None)
    note = no_instruction_note(items)
    if note:
        say(note)
    pairs: list[Pair] = []
    if "own" in settings:
        if sampling is None:
            say(f"answering {len(items)} questions greedily")
            answers = greedy_answers(model, items, max_new_tokens, instruct=instruct, progress=progress)
        else:
            say(f"answering {len(items)} questions by sampling (temperature {sampling.temperature}, top-k {sampling.top_k}, top-p {sampling.top_p}, seed {sampling.seed})")
            answers = sampled_answers(model, items, max_new_tokens, sampling, instruct=instruct, progress=progress)
        pairs += [{"setting": "own", **p} for p in own_pairs(items, answers, rule=rule)]
    if "constructed" in settings:
        pairs += [{"setting": "constructed", **p} for p in constructed_pairs(items, seed=seed)]
    say(f"{len(READOUTS)} P(True) readouts of {len(pairs)} (question, answer) pairs")
    return score_pair_rows(model, pairs, instruct=instruct, continuation_tokens=continuation_tokens)


# ---------------------------------------------------------------------------------------------
# scoring (pure)
# ---------------------------------------------------------------------------------------------


def _setting_summary(rows: Sequence[Mapping[str, Any]], B: int, seed: int, level: float) -> SettingSummary:
    by_r = {r: [x for x in rows if x["readout"] == r] for r in READOUT_NAMES}
    ref = by_r["library"]
    y = np.asarray([x["label"] for x in ref], dtype=np.float64)
    clusters = cluster_codes([x["item_id"] for x in ref])
    scores = {r: np.asarray([np.nan if x["score"] is None else x["score"] for x in by_r[r]], dtype=np.float64) for r in READOUT_NAMES}
    readouts: dict[str, ReadoutSummary] = {}
    vs_library: dict[str, dict[str, PairedDifference | None]] = {}
    gold, printed = _letters(ref)
    for r in READOUT_NAMES:
        ok = np.isfinite(scores[r])
        rs = by_r[r]
        per_letter: dict[str, LetterAuroc] | None = None
        split: dict[str, int] | None = None
        answer_letter: AnswerLetterInterval | None = None
        if any(g is not None for g in gold):
            lettered = ok & np.asarray([g is not None for g in gold])
            per_letter = per_letter_auroc(scores[r][lettered], y[lettered], [str(g) for g, m in zip(gold, lettered) if m])
            split = counts(
                [argmax_split(x["argmax_token"], g, p) for x, g, p in zip(rs, gold, printed) if g is not None and x["argmax_token"] is not None]
            )
        if any(g is not None for g in gold) and any(x.get("answer_source") == "own" for x in rs):
            codes = _answer_letter_codes(rs)
            keep = ok & np.isfinite(codes)
            answer_letter = answer_letter_auroc_interval(scores[r][keep], y[keep], codes[keep], B=B, seed=seed, level=level, clusters=clusters[keep])
        readouts[r] = ReadoutSummary(
            label=READOUT_LABELS[r],
            n_scored=int(ok.sum()),
            auroc=metric_interval("auroc", scores[r][ok], y[ok], clusters=clusters[ok], B=B, seed=seed, level=level) if ok.any() else None,
            prr=metric_interval("prr", scores[r][ok], y[ok], clusters=clusters[ok], B=B, seed=seed, level=level) if ok.any() else None,
            prr_half=metric_interval("prr_0.5", scores[r][ok], y[ok], clusters=clusters[ok], B=B, seed=seed, level=level) if ok.any() else None,
            options=list(READOUT_OPTIONS[r]),
            mass=mass_summary([x["option_mass"] for x in rs], MASS_FLOOR),
            first_tokens_distinct=float(np.mean([bool(x["first_tokens_distinct"]) for x in rs])) if rs else math.nan,
            argmax_class=counts([x["argmax_class"] for x in rs]),
            argmax_token=counts([x["argmax_token"] for x in rs]),
            continuation_class=counts([x["continuation_class"] for x in rs]),
            per_letter_auroc=per_letter,
            argmax_split=split,
            answer_letter_auroc=answer_letter,
        )
        if r == "library":
            continue
        both = ok & np.isfinite(scores["library"])
        vs_library[r] = {
            m: paired_difference(
                m, scores[r][both], scores["library"][both], y[both], clusters=clusters[both], B=B, seed=seed, level=level, name_a=r, name_b="library"
            )
            if both.any()
            else None
            for m in ("auroc", "prr")
        }
    full = np.all([np.isfinite(scores[r]) for r in READOUT_NAMES], axis=0) if len(ref) else np.zeros(0, dtype=bool)
    pairs: dict[str, dict[str, PairedDifference]] = {}
    if full.any():
        common = {r: scores[r][full] for r in READOUT_NAMES}
        pairs = {m: all_pairs(m, common, y[full], clusters=clusters[full], B=B, seed=seed, level=level) for m in ("auroc", "prr", "prr_0.5")}
    return SettingSummary(
        n_pairs=len(ref),
        n_clusters=int(np.unique(clusters).size) if len(ref) else 0,
        n_correct=int(y.sum()),
        rate_correct=float(y.mean()) if y.size else math.nan,
        readouts=readouts,
        vs_library=vs_library,
        pairs=pairs,
        n_all_readouts=int(full.sum()),
    )


def _answer_letter_codes(rows: Sequence[Mapping[str, Any]]) -> np.ndarray:
    """Per row, the model's own answer's letter as a code 0-3 (its first standalone A-D letter, App.
    E's label rule); NaN where the answer names none."""
    from sleight.readout.ptrue.answers import first_standalone_letter

    letters = [first_standalone_letter(str(x.get("answer") or "")) for x in rows]
    return np.asarray([np.nan if v is None else float(LETTERS.index(v)) for v in letters], dtype=np.float64)


def _letters(rows: Sequence[Mapping[str, Any]]) -> tuple[list[str | None], list[str | None]]:
    """Per row, the item's gold letter and the printed answer's letter, where the rows say them:
    a lettered answer is a bare letter (``"B"``; ``"B. <choice>"`` is read too); the gold row of an
    item gives its gold letter."""
    import re

    def letter(text: Any) -> str | None:
        m = re.match(r"\s*([A-D])(?:\. |\s*\Z)", text) if isinstance(text, str) else None
        return m.group(1) if m else None

    gold_of = {x["item_id"]: letter(x.get("answer")) for x in rows if x.get("answer_source") == "gold"}
    gold = [gold_of.get(x["item_id"]) for x in rows]
    printed = [letter(x.get("answer")) if x.get("answer_source") in ("gold", "wrong") else None for x in rows]
    return gold, printed


def _num(v: Any) -> float:
    """A float read back from summary.json, where null is the NaN :func:`clean` wrote as null."""
    return math.nan if v is None else float(v)


def _interval(d: Mapping[str, Any] | None) -> MetricInterval | None:
    return None if d is None else MetricInterval.from_json(d)


@dataclass(frozen=True)
class ReadoutSummary(JsonRecord):
    """One readout in one setting: AUROC, PRR and PRR at 0.5 with intervals (None where it scores
    nothing), its options, option mass and what the model would say there; field names and order
    are summary.json's keys (``prr_half`` is ``prr_0.5``). The lettered items' per-letter AUROC and
    argmax split, and the own answers' answer-letter AUROC, are None (and not in the JSON) where
    the rows have none."""

    label: str
    n_scored: int
    auroc: MetricInterval | None
    prr: MetricInterval | None
    prr_half: MetricInterval | None
    options: list[str]
    mass: MassSummary
    first_tokens_distinct: float
    argmax_class: Mapping[str, int]
    argmax_token: Mapping[str, int]
    continuation_class: Mapping[str, int]
    per_letter_auroc: Mapping[str, LetterAuroc] | None = None
    argmax_split: Mapping[str, int] | None = None
    answer_letter_auroc: AnswerLetterInterval | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "label": self.label, "n_scored": self.n_scored, "auroc": self.auroc, "prr": self.prr, "prr_0.5": self.prr_half,
            "options": self.options, "mass": self.mass, "first_tokens_distinct": self.first_tokens_distinct,
            "argmax_class": self.argmax_class, "argmax_token": self.argmax_token, "continuation_class": self.continuation_class,
        }
        if self.per_letter_auroc is not None:
            out["per_letter_auroc"] = self.per_letter_auroc
        if self.argmax_split is not None:
            out["argmax_split"] = self.argmax_split
        if self.answer_letter_auroc is not None:
            out["answer_letter_auroc"] = self.answer_letter_auroc
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ReadoutSummary:
        letters, answer_letter = d.get("per_letter_auroc"), d.get("answer_letter_auroc")
        return cls(
            str(d["label"]), int(d["n_scored"]), _interval(d["auroc"]), _interval(d["prr"]), _interval(d.get("prr_0.5")),
            list(d["options"]), MassSummary.from_json(d["mass"]), _num(d["first_tokens_distinct"]), dict(d["argmax_class"]),
            dict(d["argmax_token"]), dict(d["continuation_class"]),
            None if letters is None else {k: LetterAuroc.from_json(v) for k, v in letters.items()},
            d.get("argmax_split"),
            None if answer_letter is None else AnswerLetterInterval.from_json(answer_letter),
        )


@dataclass(frozen=True)
class SettingSummary(JsonRecord):
    """One setting (own or constructed): its pairs, each readout (:class:`ReadoutSummary`), each
    readout minus Library per metric (None where no pair scores both), every pair of readouts per
    metric on the pairs all readouts score; field names and order are summary.json's keys."""

    n_pairs: int
    n_clusters: int
    n_correct: int
    rate_correct: float
    readouts: Mapping[str, ReadoutSummary]
    vs_library: Mapping[str, Mapping[str, PairedDifference | None]]
    pairs: Mapping[str, Mapping[str, PairedDifference]]
    n_all_readouts: int


@dataclass(frozen=True)
class PTrueSummary(JsonRecord):
    """Everything the P(True) report states: summary.json less the run's description, field names
    its keys; each setting present (own / constructed) a :class:`SettingSummary`. ``as_json`` is
    the JSON (NaN as null)."""

    B: int
    seed: int
    level: float
    settings: Mapping[str, SettingSummary]  # own / constructed, those present

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = clean({f.name: getattr(self, f.name) for f in fields(self)})
        return out


def summarise(rows: Sequence[Mapping[str, Any]], *, B: int = 20000, seed: int = 0, level: float = 0.95) -> PTrueSummary:
    """Per setting: AUROC/PRR with intervals per readout, paired differences against Library, and
    the scored-position diagnostics."""
    settings = {}
    for s in SETTINGS:
        srows = [r for r in rows if r["setting"] == s]
        if srows:
            settings[s] = _setting_summary(srows, B, seed, level)
    return PTrueSummary(B=B, seed=seed, level=level, settings=settings)


__all__ = [
    "ANSWER_MAX_NEW_TOKENS",
    "ARGMAX_SPLIT",
    "PRINTED_SEED",
    "PTrueRow",
    "PTrueSummary",
    "Pair",
    "READOUT_LABELS",
    "ReadoutSummary",
    "SettingSummary",
    "READOUT_OPTIONS",
    "SETTINGS",
    "argmax_split",
    "constructed_pairs",
    "no_instruction_note",
    "printed_wrong_letter",
    "score_pair_rows",
    "own_pairs",
    "parse_settings",
    "run_ptrue",
    "summarise",
]
