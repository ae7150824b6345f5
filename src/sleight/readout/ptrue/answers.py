"""Questions for the P(True) experiment, the model's greedy answers, and whether they are right.

Two kinds of item share one loader so ``sleight readout ptrue --items`` takes either fixture schema:

* free-answer items ``{id, question, answers: [accepted, aliases...], wrong?, instruction?}``
  (``qa_items.jsonl``): an answer is correct when its first line, normalised SQuAD-style, equals an
  alias normalised the same way (:func:`first_line_match`, the paper's TriviaQA rule; the older
  alias-anywhere rule, :func:`alias_match`, stays as ``rule="anywhere"``);
* lettered items ``{id, question, choices: [4 strings], answer: "A".."D", passage?}``
  (``race_items.jsonl``): correct when the first standalone letter A-D of the answer is the gold one
  (:func:`first_standalone_letter`).

Own answers end after the first newline, as lm-polygraph's MMLU and TriviaQA configs end them
(:data:`POLYGRAPH_STOP`).

Correctness is a fixed, documented string rule, not a judge: it is the target the P(True) scores are
ranked against, so it must be reproducible and cheap.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np

from sleight.backends.base import Generation
from sleight.backends.base import Sampling as BaseSampling
from sleight.readout.items import DEFAULT_QA_ITEMS as DEFAULT_ITEMS  # noqa: F401 - re-exported
from sleight.readout.items import LETTERED_INSTRUCTION as LETTERED_INSTRUCTION
from sleight.readout.items import LETTERS, QAItem
from sleight.readout.items import load_qa_items as load_qa_items
from sleight.readout.items import qa_item_from_record as qa_item_from_record

if TYPE_CHECKING:
    from sleight.backends import LanguageModel



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


LEADING_ANSWER = re.compile(r"\A\s*Answer:\s*")


def strip_symbols(text: str) -> str:
    """App. E's extra removals before the library's normalisation: non-ASCII symbols (Unicode
    categories S*) and nonspacing marks (Mn, after NFD, so "é" keeps its "e")."""
    decomposed = unicodedata.normalize("NFD", text)
    kept = (ch for ch in decomposed if not (unicodedata.category(ch) == "Mn" or (ord(ch) > 127 and unicodedata.category(ch).startswith("S"))))
    return unicodedata.normalize("NFC", "".join(kept))


def first_line_match(text: str, aliases: Sequence[str]) -> str | None:
    """The first alias equal to the answer's first line: the paper's TriviaQA rule (App. E). The
    first line is stripped of a leading ``Answer:``; it and each alias are stripped of non-ASCII
    symbols and nonspacing marks (:func:`strip_symbols`) and normalised as the library does
    (:func:`normalize_answer`). ``"Answer: Paris ✓\nIt is in France"`` matches ``Paris``; ``"It is
    Paris."`` does not (an alias elsewhere in the line does not count)."""
    got = normalize_answer(strip_symbols(LEADING_ANSWER.sub("", first_line(text), count=1)))
    for alias in aliases:
        a = normalize_answer(strip_symbols(alias))
        if a and got == a:
            return alias
    return None


def library_match(text: str, aliases: Sequence[str]) -> str | None:
    """The first alias the library's own TriviaQA label accepts (App. E: "the library's label uses the
    full answer without these extra removals"): lm-polygraph 0.7.0 passes the whole answer and every
    alias through ``normalize_em_triviaqa`` (:func:`normalize_answer`) and takes the maximum of
    ``AccuracyMetric`` (equal once stripped) over the aliases (``AggregatedMetric``,
    ``generation_metrics/aggregated_metric.py`` 38-50, ``accuracy.py`` 37-40). ``"Answer: Paris"`` and
    ``"Paris ✓"`` match no alias ``Paris`` here; :func:`first_line_match` accepts both."""
    got = normalize_answer(text).strip()
    for alias in aliases:
        if got == normalize_answer(alias).strip():
            return alias
    return None


FUSED_LETTER = re.compile(r"\A\s*([A-Z])[a-z]")


def fused_gold_letter(text: str, gold_letter: str | None, letters: Sequence[str] = LETTERS) -> bool:
    """App. E's MMLU count of answers "with no standalone letter but a gold first letter fused to
    lowercase text, such as Bropical": the answer names no standalone letter
    (:func:`first_standalone_letter`) and opens, after whitespace, with the gold capital letter followed
    by a lowercase letter."""
    m = FUSED_LETTER.match(text)
    return bool(gold_letter and m and m.group(1) == gold_letter and first_standalone_letter(text, letters) is None)


class SamplingSettings(TypedDict):
    """lm-polygraph's three sampling settings for a checkpoint (:func:`generation_sampling`), merged
    unchanged into a run's settings, where they are compared by name: a TypedDict of those keys."""

    temperature: float
    top_k: int
    top_p: float


GENERATION_KEYS = ("temperature", "top_k", "top_p")
POLYGRAPH_SAMPLING = SamplingSettings(temperature=1.0, top_k=50, top_p=1.0)  # GenerationParameters, utils/generation_parameters.py 28-31


def generation_sampling(generation_config: Mapping[str, Any] | None) -> SamplingSettings:
    """The sampling settings lm-polygraph's answer step uses for a checkpoint (App. E: "at each
    checkpoint's own generation settings"): the library's defaults (:data:`POLYGRAPH_SAMPLING`) overridden by
    the checkpoint's ``generation_config`` where it sets ``temperature``, ``top_k`` or ``top_p``
    (``scripts/polygraph_eval`` 406-409)."""
    gc = dict(generation_config or {})
    temperature, top_k, top_p = (gc.get(k) for k in GENERATION_KEYS)
    return SamplingSettings(
        temperature=POLYGRAPH_SAMPLING["temperature"] if temperature is None else float(temperature),
        top_k=POLYGRAPH_SAMPLING["top_k"] if top_k is None else int(top_k),
        top_p=POLYGRAPH_SAMPLING["top_p"] if top_p is None else float(top_p),
    )


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
    """The model's own greedy answer to one item, as lm-polygraph would feed it to P(True).
    ``finish_reason``: ``"stop"`` (end of sequence), ``"length"`` (the budget) or ``"stop_token"``
    (a stop string of :data:`POLYGRAPH_STOP` ended it)."""

    text: str
    n_tokens: int
    finish_reason: str
    prompt_text: str


POLYGRAPH_STOP: tuple[str, ...] = ("\n",)
"""The answer step's stop strings in lm-polygraph 0.7.0's configs for the paper's two tasks:
``generation_params: stop_strings: ["\n"]`` in ``examples/configs/polygraph_eval_mmlu_simple_instruct.yaml``
(lines 25-27) and ``polygraph_eval_triviaqa_simple_instruct.yaml`` (lines 27-29), as in their plain
``polygraph_eval_mmlu.yaml`` / ``polygraph_eval_triviaqa.yaml``. ``polygraph_eval`` passes them into
``GenerationParameters`` (``scripts/polygraph_eval`` 406-409) and ``WhiteboxModel.generate`` into
transformers' ``StopStringCriteria`` (``utils/model.py`` 515-528): generation ends after the first
token whose text completes a stop string, that token kept (the answer text is cut at EOS only,
``stat_calculators/greedy_probs.py`` 166-172), and the criterion does not wait for
``min_new_tokens`` (which only bars EOS). App. E runs the library's answer step with these configs."""


def stop_at(model: LanguageModel, token_ids: Sequence[int], stop: Sequence[str] = POLYGRAPH_STOP) -> int | None:
    """How many of ``token_ids`` a stop string leaves: up to and including the first token at which
    the decoded text contains one of ``stop`` (transformers' ``StopStringCriteria``: the string must
    end in the last token, so the first such token ends generation), or None where none occurs."""
    if not stop:
        return None
    for k in range(1, len(token_ids) + 1):
        text = model.decode(list(token_ids[:k]))
        if any(s in text for s in stop):
            return k
    return None


def stopped_generation(model: LanguageModel, gen: Generation, stop: Sequence[str] = POLYGRAPH_STOP) -> Generation:
    """``gen`` as the stop strings leave it: its records cut after the token that completes one, the
    finish reason ``stop_token`` (no end-of-sequence read after it); unchanged where none occurs."""
    k = stop_at(model, gen.token_ids, stop)
    if k is None or k == len(gen.token_ids):
        return gen if k is None else replace(gen, finish_reason="stop_token", end=None)
    return replace(
        gen, token_ids=list(gen.token_ids[:k]), logprobs=gen.logprobs[:k], top_ids=gen.top_ids[:k], top_logprobs=gen.top_logprobs[:k],
        entropy=gen.entropy[:k], forced=gen.forced[:k], finish_reason="stop_token", edits=[e for e in gen.edits if e < k], end=None,
    )  # fmt: skip


def _stopped(model: LanguageModel, token_ids: Sequence[int], finish_reason: str, stop: Sequence[str]) -> tuple[list[int], str]:
    """``token_ids`` as the stop strings leave them, and the finish reason (``stop_token`` where one
    cut them). Cutting a finished decode is the same as stopping it: greedy tokens do not depend on
    later ones, and a sampled prompt draws from its own stream step by step."""
    k = stop_at(model, token_ids, stop)
    return (list(token_ids), finish_reason) if k is None else (list(token_ids[:k]), "stop_token")


def greedy_answers(
    model: LanguageModel,
    items: Sequence[QAItem],
    max_new_tokens: int,
    *,
    instruct: bool = True,
    progress: Callable[[int], None] | None = None,
    stop: Sequence[str] = POLYGRAPH_STOP,
) -> list[Answer]:
    """Each item's question decoded greedily, as lm-polygraph's ``GreedyProbsCalculator`` feeds its
    ``greedy_texts`` to P(True) (``stat_calculators/greedy_probs.py`` lines 116-172): the question
    through ``WhiteboxModel.tokenize`` (one user turn with the generation prompt when ``instruct``,
    the raw string otherwise) and the decoded tokens before the end-of-sequence token, not stripped
    (raw-prompt answers often begin with a line break), ended after the first newline as the
    library's configs end it (``stop``: :data:`POLYGRAPH_STOP`; ``()`` decodes to EOS or the budget)."""
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text if instruct else it.prompt for it in items]
    ids = [model.encode(p) for p in prompts]
    gens = model.greedy(ids, max_new_tokens, progress=progress)
    out = []
    for g, p in zip(gens, prompts):
        toks, finish = _stopped(model, g.token_ids, g.finish_reason, stop)
        out.append(Answer(model.decode(toks), len(toks), finish, p))
    return out


# ---------------------------------------------------------------------------------------------
# sampled answers
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sampling(BaseSampling):
    """How lm-polygraph 0.7.0 samples an answer when its model samples: the model layer's
    :class:`~sleight.backends.base.Sampling` with the library's defaults.

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
    The draw is :meth:`LanguageModel.sample`'s (one stream per prompt, :mod:`sleight.backends.sampling`);
    torch's global stream is not reproduced.
    """

    temperature: float = 1.0
    top_k: int = 50
    top_p: float = 1.0
    min_new_tokens: int = 2
    seed: int = 1

    def check(self) -> None:
        from sleight.backends.base import check_sampling

        check_sampling(self)


def sampling_probs(top_logprobs: Sequence[float] | np.ndarray, s: BaseSampling) -> np.ndarray:
    """The draw's probabilities over log-probabilities given most probable first, through the model
    layer's warpers (:func:`sleight.backends.sampling.warp`: temperature, top-k, top-p as
    transformers applies them). Exact from log-probabilities: a log-softmax differs from the logits
    by one constant per row."""
    import torch

    from sleight.backends.sampling import warp

    lp = torch.as_tensor(np.asarray(top_logprobs, dtype=np.float64))[None]
    p = warp(lp, s).softmax(dim=-1)[0].numpy()
    return p[: s.top_k] if s.top_k else p


DECODES = ("greedy", "sampled")


def answer_sampling(
    decode: str, temperature: float | None = None, top_k: int | None = None, top_p: float | None = None, seed: int | None = None
) -> Sampling | None:
    """How own answers are written: None for ``greedy``; for ``sampled`` the :class:`Sampling` (checked),
    a setting not given taking the library's default. One line for an unknown ``decode``, a bad
    setting, or a sampling setting other than the default given to a greedy run."""
    from sleight.errors import UserError

    if decode not in DECODES:
        raise UserError(f"unknown --decode '{decode}' (choose from {', '.join(DECODES)})")
    d = Sampling()
    s = Sampling(
        temperature=d.temperature if temperature is None else temperature, top_k=d.top_k if top_k is None else top_k,
        top_p=d.top_p if top_p is None else top_p, seed=d.seed if seed is None else seed,
    )
    if decode == "sampled":
        s.check()
        return s
    flags = {"temperature": "temperature", "top_k": "top-k", "top_p": "top-p", "seed": "sample-seed"}
    given = [f"--{flag}" for field, flag in flags.items() if getattr(s, field) != getattr(d, field)]
    if given:
        raise UserError(f"{', '.join(given)} only apply with --decode sampled")
    return None


def sampled_tokens(
    model: LanguageModel, prompts: Sequence[Sequence[int]], max_new_tokens: int, sampling: BaseSampling, stop: Sequence[str] = POLYGRAPH_STOP
) -> list[tuple[list[int], str]]:
    """One sample per prompt (:meth:`LanguageModel.sample`, KV-cached, seeded per prompt): its tokens
    before the end-of-sequence token, ended after the first newline (``stop``), and why it ended."""
    drawn = model.sample([list(p) for p in prompts], max_new_tokens, n=1, sampling=sampling)
    return [_stopped(model, d[0].token_ids, d[0].finish_reason, stop) for d in drawn]


def sampled_generations(
    model: LanguageModel, prompts: Sequence[Sequence[int]], max_new_tokens: int, sampling: BaseSampling, stop: Sequence[str] = POLYGRAPH_STOP
) -> list[Generation]:
    """:func:`sampled_tokens` with the records a greedy decode would carry for them: each answer's
    tokens scored under the unwarped model (:meth:`LanguageModel.score_tokens`, the same log-probs and
    entropies a decode reads at those positions), so the estimators read a sampled answer as they
    read a greedy one (App. E scores Table 10's sampled answers)."""
    out = []
    for p, (toks, finish) in zip(prompts, sampled_tokens(model, prompts, max_new_tokens, sampling, stop)):
        (sc,) = model.score_tokens(p, [toks])
        out.append(Generation.from_scored(sc, np.zeros(len(toks), dtype=bool), finish))
    return out


def sampled_answers(
    model: LanguageModel,
    items: Sequence[QAItem],
    max_new_tokens: int,
    sampling: BaseSampling,
    *,
    instruct: bool = True,
    progress: Callable[[int], None] | None = None,
    stop: Sequence[str] = POLYGRAPH_STOP,
) -> list[Answer]:
    """Each item's question answered by one sample (:func:`sampled_tokens`), the prompt as
    :func:`greedy_answers` builds it; the text is the sampled tokens, decoded. The draws come from
    sleight's per-prompt streams, not the torch stream lm-polygraph seeds once per run, so they
    match the library's answers in distribution only."""
    prompts = [model.render_chat([{"role": "user", "content": it.prompt}]).text if instruct else it.prompt for it in items]
    drawn = sampled_tokens(model, [model.encode(p) for p in prompts], max_new_tokens, sampling, stop)
    if progress is not None:
        progress(sum(len(toks) for toks, _finish in drawn))
    return [Answer(model.decode(toks), len(toks), finish, p) for (toks, finish), p in zip(drawn, prompts)]
