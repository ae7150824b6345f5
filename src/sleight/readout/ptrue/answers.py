"""Questions for the P(True) experiment, the model's greedy answers, and whether they are right.

Two kinds of item share one loader so ``sleight readout ptrue --items`` takes either fixture schema:

* free-answer items ``{id, question, answers: [accepted, aliases...], wrong?, instruction?}``
  (``qa_items.jsonl``): an answer is correct when its first line, normalised SQuAD-style, equals an
  alias normalised the same way (:func:`first_line_match`, the paper's TriviaQA rule; the older
  alias-anywhere rule, :func:`alias_match`, stays as ``rule="anywhere"``);
* lettered items ``{id, question, choices: [4 strings], answer: "A".."D", passage?}``
  (``race_items.jsonl``): correct when the first standalone letter A-D of the answer is the gold one
  (:func:`first_standalone_letter`).

Correctness is a fixed, documented string rule, not a judge: it is the target the P(True) scores are
ranked against, so it must be reproducible and cheap.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

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
    # the quoted item's instruction (the letter instruction on MMLU, the "answer briefly" line on
    # TriviaQA): the text the paper's "Deleted" readout deletes; out of repr, as input_text
    instruction: str | None = field(default=None, repr=False)

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
    def instruction_text(self) -> str | None:
        """The quoted item's instruction: the record's ``instruction``, else for a lettered item
        built here the letter instruction this module prints; None when the item has none."""
        if self.instruction is not None:
            return self.instruction
        if self.choices is not None and self.input_text is None:
            return LETTERED_INSTRUCTION
        return None

    @property
    def prompt_without_instruction(self) -> str | None:
        """The prompt with its instruction deleted (its last occurrence; the line breaks that joined
        it are tidied); None when the item has no instruction or the prompt does not contain it."""
        ins = self.instruction_text
        text = self.prompt
        if not ins or ins not in text:
            return None
        k = text.rfind(ins)
        out = text[:k] + text[k + len(ins) :]
        return re.sub(r"\n{3,}", "\n\n", out).strip("\n")

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
        return QAItem(item_id, question, choices=tuple(choices), gold_letter=rec["answer"], passage=passage or None, input_text=_input(rec, where), instruction=_instruction(rec, where))
    answers = rec.get("answers")
    if not isinstance(answers, list) or not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise UserError(f"{where}: needs 'answers' (a non-empty list of strings) or 'choices' + 'answer'")
    wrong = rec.get("wrong")
    if wrong is not None and (not isinstance(wrong, str) or not wrong.strip()):
        raise UserError(f"{where}: 'wrong' must be a non-empty string")
    return QAItem(item_id, question, aliases=tuple(answers), wrong=wrong, input_text=_input(rec, where), instruction=_instruction(rec, where))


def _instruction(rec: Mapping[str, Any], where: str) -> str | None:
    """``instruction``: the quoted item's instruction (what "Deleted" deletes), optional."""
    return _str(rec, "instruction", where) if rec.get("instruction") is not None else None


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


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation as lm-polygraph 0.7.0 applies it to TriviaQA outputs and targets
    (``normalize_em_triviaqa``, ``examples/configs/instruct/output_processing_scripts/triviaqa.py``
    lines 9-28): underscores to spaces, lowercase, punctuation (with ‘ ’ ´ `) to spaces, the
    articles a/an/the removed, whitespace collapsed."""
    text = text.replace("_", " ").lower()
    exclude = set(string.punctuation + "‘’´`")
    text = "".join(" " if ch in exclude else ch for ch in text)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split()).strip()


def first_line(text: str) -> str:
    """The answer's first line: the text before the first line break, once leading whitespace is
    dropped (an answer to a raw prompt often opens with a line break)."""
    return text.lstrip().split("\n", 1)[0]


def first_line_match(text: str, aliases: Sequence[str]) -> str | None:
    """The first alias equal to the answer's first line, both normalised (:func:`normalize_answer`):
    the paper's TriviaQA correctness rule. ``"Paris.\nIt is in France"`` matches ``Paris``;
    ``"It is Paris."`` does not (an alias elsewhere in the line does not count)."""
    got = normalize_answer(first_line(text))
    for alias in aliases:
        a = normalize_answer(alias)
        if a and got == a:
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


ALIAS_RULES = ("first_line", "anywhere")


def judge_answer(item: QAItem, answer: str, *, rule: str = "first_line") -> tuple[bool, str | None]:
    """(correct, what matched): the letter read for lettered items, the matched alias otherwise.

    Free answers: ``rule="first_line"`` (the default, the paper's TriviaQA rule:
    :func:`first_line_match`) or ``"anywhere"`` (an alias anywhere in the answer on word
    boundaries, :func:`alias_match`, this module's rule before issue #19)."""
    if item.lettered:
        letter = first_standalone_letter(answer)
        return letter == item.gold_letter, letter
    if rule not in ALIAS_RULES:
        raise ValueError(f"unknown alias rule '{rule}' (choose from {', '.join(ALIAS_RULES)})")
    alias = first_line_match(answer, item.aliases) if rule == "first_line" else alias_match(answer, item.aliases)
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


# ---------------------------------------------------------------------------------------------
# sampled answers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling:
    """How lm-polygraph 0.7.0 samples an answer when its model samples.

    The library's ``GenerationParameters`` defaults are ``temperature=1.0, top_k=50, top_p=1.0,
    do_sample=False`` (``utils/generation_parameters.py`` lines 28-31); ``polygraph_eval`` overrides
    them with the checkpoint's own ``generation_config`` and those with the config's
    ``generation_params`` (``scripts/polygraph_eval`` lines 406-409, ``GenerationParametersFactory``
    lines 48-65), so a checkpoint whose generation config samples (Qwen3, Llama-3 instruct) is
    sampled with its own temperature/top-k/top-p. The answer is decoded with ``min_new_tokens=2``
    (``stat_calculators/greedy_probs.py`` lines 119-127) and the task's ``max_new_tokens``
    (``examples/configs/polygraph_eval_triviaqa.yaml`` line 22: 20; ``polygraph_eval_mmlu.yaml``
    line 21: 3; the manager's default 100, ``utils/manager.py`` line 137); runs are seeded with
    ``transformers.set_seed(seed)``, seed 1 by default (``scripts/polygraph_eval`` lines 90-102).

    Here the seed drives numpy, one stream per item (``[seed, crc32(item id)]``), so an item's
    answer does not depend on the batch or on ``--limit``; torch's stream is not reproduced.
    """

    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    seed: int = 1
    min_new_tokens: int = 2

    def check(self) -> None:
        from sleight.errors import UserError

        if not self.temperature > 0:
            raise UserError(f"sampling temperature must be positive, got {self.temperature}")
        if self.top_k < 1:
            raise UserError("sampling needs a finite top-k of at least 1 (it draws from the engine's top-k reading)")
        if not 0 < self.top_p <= 1:
            raise UserError(f"sampling top-p must be in (0, 1], got {self.top_p}")


def sampling_probs(top_logprobs: Sequence[float] | np.ndarray, s: Sampling) -> np.ndarray:
    """The draw's probabilities over the most probable tokens (most probable first), as
    transformers' warpers give them: logits / temperature, the top ``s.top_k`` kept, then top-p
    (``TopPLogitsWarper``: sorted ascending, tokens whose cumulative probability is at most
    ``1 - top_p`` removed, at least one kept), renormalised. Exact from log-probabilities: a
    log-softmax differs from the logits by one constant per row."""
    lp = np.asarray(top_logprobs, dtype=np.float64)[: s.top_k] / s.temperature
    p = np.exp(lp - lp.max())
    p /= p.sum()
    if s.top_p < 1.0:
        asc = p[::-1]
        remove = np.cumsum(asc) <= 1.0 - s.top_p
        remove[-1] = False  # min_tokens_to_keep = 1: the most probable token stays
        p = np.where(remove[::-1], 0.0, p)
        p /= p.sum()
    return p


def sampled_answers(
    model: LanguageModel,
    items: Sequence[QAItem],
    max_new_tokens: int,
    sampling: Sampling,
    *,
    instruct: bool = True,
    progress: Callable[[int], None] | None = None,
) -> list[Answer]:
    """Each item's question answered by sampling (:class:`Sampling`), the prompt as
    :func:`greedy_answers` builds it.

    The engine has no sampling call, so each step reads the next-token distribution's top
    ``top_k`` (plus the end-of-sequence ids, left out in the first ``min_new_tokens`` steps as the
    library's ``min_new_tokens`` does) with ``read_next`` and draws from it: exact for a finite top-k,
    at the cost of one forward pass over every live sequence per step (no KV cache kept between
    steps)."""
    import zlib

    sampling.check()
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text if instruct else it.prompt for it in items]
    seqs = [model.encode(p) for p in prompts]
    rngs = [np.random.default_rng([sampling.seed, zlib.crc32(it.id.encode())]) for it in items]
    eos = sorted(model.eos_ids)
    out: list[list[int]] = [[] for _ in items]
    finish = ["length"] * len(items)
    live = list(range(len(items)))
    for step in range(max_new_tokens):
        if not live:
            break
        reads = model.read_next([seqs[i] + out[i] for i in live], [[] for _ in live], top_k=sampling.top_k + len(eos))
        still = []
        for i, r in zip(live, reads):
            ids, lps = np.asarray(r.top_ids), np.asarray(r.top_logprobs)
            if step < sampling.min_new_tokens:
                keep = ~np.isin(ids, eos)
                ids, lps = ids[keep], lps[keep]
            ids, lps = ids[: sampling.top_k], lps[: sampling.top_k]
            tok = int(ids[rngs[i].choice(ids.size, p=sampling_probs(lps, sampling))])
            if tok in model.eos_ids:
                finish[i] = "stop"
                continue
            out[i].append(tok)
            still.append(i)
        if progress is not None:
            progress(len(still))
        live = still
    return [Answer(model.decode(o), len(o), f, p) for o, f, p in zip(out, finish, prompts)]
