"""Questions for the P(True) experiment, the model's greedy answers, and whether they are right.

Two kinds of item share one loader so ``sleight readout ptrue --items`` takes either fixture schema:

* free-answer items ``{id, question, answers: [accepted, aliases...], wrong?}`` (``qa_items.jsonl``):
  an answer is correct when any alias occurs in it on word boundaries (:func:`alias_match`);
* lettered items ``{id, question, choices: [4 strings], answer: "A".."D", passage?}``
  (``race_items.jsonl``): correct when the first standalone letter A-D of the answer is the gold one
  (:func:`first_standalone_letter`).

Correctness is a fixed, documented string rule, not a judge: it is the target the P(True) scores are
ranked against, so it must be reproducible and cheap.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sleight.errors import UserError

if TYPE_CHECKING:
    from sleight.backends import LanguageModel

LETTERS: tuple[str, ...] = ("A", "B", "C", "D")
DEFAULT_ITEMS = Path(__file__).resolve().parents[2] / "data" / "fixtures" / "qa_items.jsonl"  # 36 shipped questions
LETTERED_INSTRUCTION = "Answer with the letter of the correct option (A, B, C or D)."


@dataclass(frozen=True)
class QAItem:
    """One question the model answers; ``aliases`` for free answers, ``gold_letter`` for lettered ones."""

    id: str
    question: str
    aliases: tuple[str, ...] = ()
    wrong: str | None = None
    choices: tuple[str, ...] | None = None
    gold_letter: str | None = None
    passage: str | None = None
    # the dataset's own prompt (lm-polygraph's input), answered as is; out of repr so that the digest of
    # items without one (every run before it existed) stays the same
    input_text: str | None = field(default=None, repr=False)

    @property
    def lettered(self) -> bool:
        return self.choices is not None

    @property
    def gold_text(self) -> str:
        """The gold answer as text (first alias, or ``"B. <choice>"`` for lettered items)."""
        if self.choices is not None and self.gold_letter is not None:
            return f"{self.gold_letter}. {self.choices[LETTERS.index(self.gold_letter)]}"
        return self.aliases[0]

    @property
    def prompt(self) -> str:
        """The user turn the model answers (and the question quoted in the P(True) prompt)."""
        if self.input_text is not None:
            return self.input_text
        if self.choices is None:
            return self.question
        block = "\n".join(f"{letter}. {text}" for letter, text in zip(LETTERS, self.choices))
        lead = f"{self.passage}\n\n" if self.passage else ""
        return f"{lead}{self.question}\n{block}\n{LETTERED_INSTRUCTION}"


def _str(rec: Mapping[str, Any], key: str, where: str) -> str:
    value = rec.get(key)
    if not isinstance(value, str) or not value.strip():
        raise UserError(f"{where}: '{key}' must be a non-empty string")
    return value


def qa_item_from_record(rec: Mapping[str, Any], where: str) -> QAItem:
    """Validate one record of either schema (see the module docstring)."""
    if "id" not in rec or not isinstance(rec["id"], (str, int)) or rec["id"] == "":
        raise UserError(f"{where}: missing 'id'")
    item_id, question = str(rec["id"]), _str(rec, "question", where)
    if rec.get("choices") is not None:
        choices = rec["choices"]
        if not isinstance(choices, list) or len(choices) != 4 or not all(isinstance(c, str) and c for c in choices):
            raise UserError(f"{where}: 'choices' must be a list of 4 non-empty strings")
        if rec.get("answer") not in LETTERS:
            raise UserError(f"{where}: 'answer' must be one of A, B, C, D for a lettered item")
        passage = rec.get("passage")
        if passage is not None and not isinstance(passage, str):
            raise UserError(f"{where}: 'passage' must be a string")
        return QAItem(item_id, question, choices=tuple(choices), gold_letter=rec["answer"], passage=passage or None, input_text=_input(rec, where))
    answers = rec.get("answers")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise UserError(f"{where}: needs 'answers' (a non-empty list of strings) or 'choices' + 'answer'")
    wrong = rec.get("wrong")
    if wrong is not None and (not isinstance(wrong, str) or not wrong.strip()):
        raise UserError(f"{where}: 'wrong' must be a non-empty string")
    return QAItem(item_id, question, aliases=tuple(answers), wrong=wrong, input_text=_input(rec, where))


def _input(rec: Mapping[str, Any], where: str) -> str | None:
    """``input``: the dataset's own prompt text (sleight.readout.data's lm-polygraph loaders)."""
    return _str(rec, "input", where) if rec.get("input") is not None else None


def load_qa_items(path: str | Path, limit: int | None = None) -> list[QAItem]:
    """Items from a JSONL file (errors name the file and line), ids unique, at most ``limit``."""
    from sleight.readout.audit.items import load_unique_items

    return load_unique_items(path, qa_item_from_record, limit)


# ---------------------------------------------------------------------------------------------
# correctness rules
# ---------------------------------------------------------------------------------------------


def _norm(text: str) -> str:
    """NFKC, curly quotes straightened, whitespace collapsed (case kept: the caller decides)."""
    text = unicodedata.normalize("NFKC", text).replace("\u2019", "'").replace("\u2018", "'")
    return re.sub(r"\s+", " ", text).strip()


def alias_match(text: str, aliases: Sequence[str]) -> str | None:
    """The first alias that occurs in ``text`` as whole words, else None.

    Case-insensitive, except for aliases of at most two characters that contain a capital
    (chemical symbols such as ``Na``, ``C``), which must match exactly so that "c" or "na" inside
    prose do not count. Whole words: the alias is neither preceded nor followed by a letter or
    digit, so ``4`` does not match ``40`` and ``cow`` does not match ``cowboy``.
    """
    hay = _norm(text)
    for alias in aliases:
        a = _norm(alias)
        if not a:
            continue
        flags = 0 if (len(a) <= 2 and any(ch.isupper() for ch in a)) else re.IGNORECASE
        if re.search(rf"(?<![^\W_]){re.escape(a)}(?![^\W_])", hay, flags):
            return alias
    return None


def first_standalone_letter(text: str, letters: Sequence[str] = LETTERS) -> str | None:
    """The first capital option letter that stands alone: not touching another letter or digit.

    ``"B"``, ``"(C)"``, ``"Answer: D."`` and ``"**A**"`` all give their letter. The rule is literal:
    an article "A" at the start of a sentence also counts, as it would for any string matcher.
    """
    lset = "".join(re.escape(x) for x in letters)
    m = re.search(rf"(?<![^\W_])([{lset}])(?![^\W_])", text)
    return m.group(1) if m else None


def judge_answer(item: QAItem, answer: str) -> tuple[bool, str | None]:
    """(correct, what matched): the letter read for lettered items, the matched alias otherwise."""
    if item.lettered:
        letter = first_standalone_letter(answer)
        return letter == item.gold_letter, letter
    alias = alias_match(answer, item.aliases)
    return alias is not None, alias


# ---------------------------------------------------------------------------------------------
# greedy answers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """The model's own greedy answer to one item, as lm-polygraph would feed it to P(True)."""

    text: str
    n_tokens: int
    finish_reason: str
    prompt_text: str


def greedy_answers(
    model: LanguageModel,
    items: Sequence[QAItem],
    max_new_tokens: int,
    *,
    instruct: bool = True,
    progress: Callable[[int], None] | None = None,
) -> list[Answer]:
    """Each item's question decoded greedily, as lm-polygraph's ``GreedyProbsCalculator`` feeds its
    ``greedy_texts`` to P(True) (``stat_calculators/greedy_probs.py`` lines 116-172): the question
    through ``WhiteboxModel.tokenize`` (one user turn with the generation prompt when ``instruct``,
    the raw string otherwise) and the decoded tokens before the end-of-sequence token, not stripped
    (raw-prompt answers often begin with a line break)."""
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text if instruct else it.prompt for it in items]
    ids = [model.encode(p) for p in prompts]
    gens = model.greedy(ids, max_new_tokens, progress=progress)
    return [Answer(model.decode(g.token_ids), len(g.token_ids), g.finish_reason, p) for g, p in zip(gens, prompts)]
