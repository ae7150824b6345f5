"""lm-polygraph's P(True) prompt and the one registry of its readouts.

The prompt is ``PromptCalculator``'s (lm-polygraph 0.7.0, ``stat_calculators/prompt.py`` lines
121-127)::

    Question: {q}\\n Possible answer:{a}\\n Is the possible answer:\\n (A) True\\n (B) False\\n The possible answer is:

Each readout is one :class:`Readout` record in :data:`READOUTS`: where it reads (the prompt, an
answer stem), which option set it reads there, and how its number follows from that reading.
:func:`score_pairs` reads every distinct context of every readout in one
:func:`sleight.position.read_positions` call, so the value, the option mass and the argmax of a
readout all come from the same reading; ``readout ptrue`` and ``readout audit --preset ptrue`` both
call it and record the same rows.

The prompt is rendered the way ``WhiteboxModel.tokenize`` does (``utils/model.py`` lines 668-697):
with ``instruct`` it is one user turn through the chat template with the generation prompt, no
special tokens added; without (a model loaded with ``instruct=False``) the raw prompt string is the
context. ``value``:

* ``polygraph`` -- what the library computes (Library): log p of ``True`` encoded alone (the first id
  of ``tokenizer(["True"])`` without EOS/BOS, ``prompt.py`` lines 68-75) at the next position of
  ``generate(min_new_tokens=1, max_new_tokens=1)`` (``prompt.py`` lines 94-107). ``min_new_tokens=1``
  sets the EOS logits to -inf; the library's ``_SanitizeLogitsProcessor`` (``utils/model.py`` lines
  458-487) replaces -inf by the row's smallest finite logit before ``_ScoresProcessor`` (lines
  449-456) takes the log-softmax. From log-probabilities that is
  ``ℓ_True - log(1 - Σ p_EOS + |EOS|·p_min)``; :func:`polygraph_logprob` drops the ``|EOS|·p_min``
  term (``p_min`` is the least probable token's probability, about 1e-13 on the default model).
* ``isolated`` -- P(o₁) / (P(o₁) + P(o₂)) over the two options encoded alone, plain log-softmax
  (Renormalised).

Deleted (the paper's) is the Library reading of the prompt whose quoted question has its own
instruction deleted (:attr:`sleight.readout.ptrue.answers.QAItem.prompt_without_instruction`); the
True/False block stays.
* ``in_context`` -- the same ratio over the options' full-sequence probabilities encoded in
  context (Labels in place, Moved).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from sleight.backends import LanguageModel
from sleight.position import OptionSetReading, PositionReading, read_positions, renormalise
from sleight.readout.audit.classify import classify_continuation
from sleight.readout.audit.measure import (
    DEFAULT_ROWS_PER_PASS,
    OptionColumns,
    PositionColumns,
    context_columns,
    continuations,
    echoes,
    option_columns,
    position_columns,
    unread_columns,
)

PTRUE_TEMPLATE = (
    "Question: {q}\n Possible answer:{a}\n "
    "Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
)
PTRUE_INSTRUCTION = " Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
PTRUE_LABELS_BLOCK = "(A) True\n (B) False"
MOVED_STEM = "The possible answer is ("  # prefilled in the assistant turn
RAW_MOVED_STEM = " ("  # without a chat template: the answer opened right after the prompt
LETTERS = ("A", "B")
QUOTED_LETTERS = ("A", "B", "C", "D")  # §4, App. E: an answer letter at the P(True) position is any of A-D


def ptrue_prompt(question: str, answer: str) -> str:
    """The library's prompt, formatted exactly as ``self.prompt.format(q=..., a=...)`` does."""
    return PTRUE_TEMPLATE.format(q=question, a=answer)


def ptrue_deleted_prompt(question: str, answer: str) -> str:
    """The prompt with its True/False instruction removed: the audit's ``deleted_instruction``
    variant of the ptrue preset (the "Deleted" readout before issue #19; the paper's Deleted keeps
    this block and deletes the quoted item's own instruction instead, see :data:`READOUTS`)."""
    return ptrue_prompt(question, answer).replace(PTRUE_INSTRUCTION, "")


@dataclass(frozen=True)
class Readout:
    """One way of reading the P(True) prompt: its context, its option set, how its value is read."""

    name: str
    label: str
    options: tuple[str, str]
    value: str  # "polygraph" | "isolated" | "in_context" (see the module docstring)
    prompt: Callable[[str, str], str] = ptrue_prompt
    stem: str | None = None  # the answer stem, prefilled in the assistant turn
    raw_stem: str | None = None  # the same without a chat template, appended to the raw prompt
    quotes: str = "question"  # "question": the item as asked; "deleted": its instruction deleted

    def context(self, model: LanguageModel, question: str, answer: str, *, instruct: bool = True) -> str:
        """The rendered context this readout reads (``instruct``: through the chat template)."""
        prompt = self.prompt(question, answer)
        if not instruct:
            return prompt + (self.raw_stem or "")
        return model.render_chat([{"role": "user", "content": prompt}], add_generation_prompt=True, prefill=self.stem).text


READOUTS: tuple[Readout, ...] = (
    Readout("library", "Library", ("True", "False"), "polygraph"),
    Readout("renormalised", "Renormalised", ("True", "False"), "isolated"),
    Readout("labels_in_place", "Labels in place", ("(A", "(B"), "in_context"),
    Readout("moved", "Moved", ("A", "B"), "in_context", stem=MOVED_STEM, raw_stem=RAW_MOVED_STEM),
    # The paper's Deleted: the quoted item's own instruction deleted (the letter instruction on
    # MMLU, the "answer briefly" line on TriviaQA), read as Library reads (same position, token, value).
    Readout("deleted", "Deleted", ("True", "False"), "polygraph", quotes="deleted"),
)
READOUT_NAMES: tuple[str, ...] = tuple(r.name for r in READOUTS)
READOUT_LABELS: dict[str, str] = {r.name: r.label for r in READOUTS}


class ReadoutRow(OptionColumns):
    """One readout of one pair (:func:`score_pairs`): its value, then the audit's columns for its
    option set at its position and the greedy continuation there (:func:`option_columns`; None
    throughout where the readout has no context). Columns of ptrue.parquet, written unchanged: a
    TypedDict of its keys."""

    readout: str
    score: float | None
    library_prob: float | None


def polygraph_logprob(logprob: float, eos_logprobs: Sequence[float]) -> float:
    """log p(t) once the EOS tokens are masked, as lm-polygraph's first generated step reads it
    (``min_new_tokens=1``); the sanitiser's ``|EOS|·p_min`` term is dropped (see the module)."""
    eos_mass = float(np.sum(np.exp(np.asarray(eos_logprobs, dtype=np.float64))))
    return float(logprob - math.log1p(-eos_mass))


def readout_value(r: Readout, s: OptionSetReading, pos: PositionReading, eos_ids: Sequence[int]) -> float | None:
    """The readout's number from its option set's reading (None where a boundary is not preserved)."""
    if r.value == "polygraph":
        t = s.isolated_logprobs[0]
        return None if t is None else polygraph_logprob(t, [pos.logprob(e) for e in eos_ids])
    p = renormalise(s.isolated_logprobs if r.value == "isolated" else s.logprobs)
    return None if p is None else float(p[0])


def score_pairs(
    model: LanguageModel,
    questions: Sequence[str],
    answers: Sequence[str],
    *,
    deleted_questions: Sequence[str | None] | None = None,
    instruct: bool = True,
    continuation_tokens: int = 16,
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
) -> list[ReadoutRow]:
    """One row per (pair, readout), pairs in order, readouts in registry order.

    ``score`` is the readout's value (log P(True) for Library, a probability for the others, None
    where a label's boundary is not preserved); ``library_prob`` is ``exp(score)`` on Library rows;
    the rest are the audit's columns for the readout's option set at its position, and the greedy
    continuation there (``continuation_tokens`` = 0: none).

    ``deleted_questions[k]`` is pair k's question with its instruction deleted (Deleted quotes it);
    where it is None (the item has no instruction; the default for every pair) the Deleted row has
    no context and every reading column is None.
    """
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    deleted = list(deleted_questions) if deleted_questions is not None else [None] * len(questions)
    if len(deleted) != len(questions):
        raise ValueError(f"{len(questions)} questions but {len(deleted)} deleted questions")
    texts: list[str] = []
    sets: list[list[tuple[str, ...]]] = []
    where: dict[str, int] = {}
    slots: list[list[tuple[int, int] | None]] = []  # per pair, per readout: (context index, option-set index)
    for q, a, dq in zip(questions, answers, deleted):
        per: list[tuple[int, int] | None] = []
        for r in READOUTS:
            quoted = dq if r.quotes == "deleted" else q
            if quoted is None:
                per.append(None)
                continue
            text = r.context(model, quoted, a, instruct=instruct)
            if text not in where:
                where[text] = len(texts)
                texts.append(text)
                sets.append([])
            c = where[text]
            if r.options not in sets[c]:
                sets[c].append(r.options)
            per.append((c, sets[c].index(r.options)))
        slots.append(per)
    eos = sorted(int(e) for e in model.eos_ids)
    readings = read_positions(model, texts, sets, extra_ids=eos, score_options=True)
    conts: list[str | None] = [None] * len(texts)
    if continuation_tokens > 0:
        groups = [list(range(k, min(k + rows_per_pass, len(texts)))) for k in range(0, len(texts), max(1, rows_per_pass))]
        conts = list(continuations(model, [r.context_ids for r in readings], groups, continuation_tokens))

    rows: list[ReadoutRow] = []
    for q, a, dq, per in zip(questions, answers, deleted, slots):
        for r, slot in zip(READOUTS, per):
            if slot is None:
                rows.append(_unread_row(r))
                continue
            c, k = slot
            quoted = dq if r.quotes == "deleted" and dq is not None else q
            pos, s = readings[c], readings[c].option_sets[k]
            score = readout_value(r, s, pos, eos)
            cont = conts[c]
            cls = None if cont is None else classify_continuation(cont, options=r.options, letters=QUOTED_LETTERS, echoes=echoes(quoted, r.prompt(quoted, a))).cls
            cols = option_columns(context_columns(texts[c], pos.context_ids), r.options, position_columns(model, pos, s, letters=QUOTED_LETTERS), cont, cls)
            library_prob = math.exp(score) if r.value == "polygraph" and score is not None else None
            rows.append(ReadoutRow(readout=r.name, score=score, library_prob=library_prob, **cols))
    return rows


def _unread_row(r: Readout) -> ReadoutRow:
    """A readout that has no context for this pair (Deleted of an item without an instruction)."""
    return ReadoutRow(readout=r.name, score=None, library_prob=None, **unread_columns(r.options))


POSITION_KEYS: tuple[str, ...] = tuple(PositionColumns.__annotations__)  # the audit's position columns a readout row carries


def ptrue_readouts(
    model: LanguageModel,
    questions: Sequence[str],
    answers: Sequence[str],
    *,
    deleted_questions: Sequence[str | None] | None = None,
    instruct: bool = True,
) -> dict[str, np.ndarray]:
    """Every readout's value per pair as arrays (NaN where undefined): ``library_logprob`` (log
    P(True), the library's number), ``library`` (its exp), then one key per other readout (Deleted
    is a log-probability like Library)."""
    rows = score_pairs(model, questions, answers, deleted_questions=deleted_questions, instruct=instruct, continuation_tokens=0)
    n = len(READOUTS)
    vals = {r.name: np.array([np.nan if x["score"] is None else x["score"] for x in rows[k::n]], dtype=np.float64) for k, r in enumerate(READOUTS)}
    return {"library_logprob": vals["library"], "library": np.exp(vals["library"]), **{k: v for k, v in vals.items() if k != "library"}}
