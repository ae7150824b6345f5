"""lm-polygraph's P(True) prompt and five ways of reading it.

The prompt is ``PromptCalculator``'s (lm-polygraph 0.7.0, ``stat_calculators/prompt.py``)::

    Question: {q}\\n Possible answer:{a}\\n Is the possible answer:\\n (A) True\\n (B) False\\n The possible answer is:

Readouts, each a function of (model, questions, answers) returning one value per pair:

* **Library** -- what lm-polygraph 0.7.0 itself computes: the prompt wrapped as one user turn with
  the generation prompt (``WhiteboxModel.tokenize`` in instruct mode, no special tokens added), the
  token ``True`` encoded alone (first id), read at the next position of
  ``generate(max_new_tokens=1, min_new_tokens=1)``. ``min_new_tokens=1`` sets the EOS logits to
  -inf; the library's ``_SanitizeLogitsProcessor`` then replaces -inf by the row's smallest finite
  logit (+inf by the largest, NaN by 0) before ``_ScoresProcessor`` takes the log-softmax. We
  reproduce that convention here, and only here (:func:`library_log_softmax`).
* **Renormalised** -- P(True) / (P(True) + P(False)) at the same position, plain log-softmax.
* **Labels in place** -- P("(A") / (P("(A") + P("(B")) at the same position, full-sequence
  probabilities of the labels encoded in context.
* **Moved** -- the stem "The possible answer is (" prefilled in the assistant turn, then
  P("A") / (P("A") + P("B")).
* **Deleted** -- the quoted instruction (the True/False question block) removed, then
  P(True) / (P(True) + P(False)) at the generation prompt: what the score reads when the question
  it is supposed to answer is gone.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from sleight.position import encode_continuation
from sleight.readout.batching import DEFAULT_ROWS_PER_PASS, gather, sliced_rows

PTRUE_TEMPLATE = (
    "Question: {q}\n Possible answer:{a}\n "
    "Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
)
PTRUE_INSTRUCTION = " Is the possible answer:\n (A) True\n (B) False\n The possible answer is:"
PTRUE_LABELS_BLOCK = "(A) True\n (B) False"
MOVED_STEM = "The possible answer is ("
EXPECTED = "True"

READOUTS = ("library", "renormalised", "labels_in_place", "moved", "deleted")


def ptrue_prompt(question: str, answer: str) -> str:
    """The library's prompt, formatted exactly as ``self.prompt.format(q=..., a=...)`` does."""
    return PTRUE_TEMPLATE.format(q=question, a=answer)


def ptrue_deleted_prompt(question: str, answer: str) -> str:
    """The prompt with its True/False instruction removed (the "Deleted" readout)."""
    return ptrue_prompt(question, answer).replace(PTRUE_INSTRUCTION, "")


def library_log_softmax(logits: np.ndarray, eos_ids: Iterable[int]) -> np.ndarray:
    """lm-polygraph 0.7.0's scores for the first generated token, from raw logits.

    ``min_new_tokens=1`` -> EOS logits = -inf; sanitiser -> -inf becomes the row's smallest finite
    logit, +inf its largest, NaN 0; then log-softmax. Pure; works on (V,) or (B, V).
    """
    x = np.array(logits, dtype=np.float64, copy=True)
    eos = sorted(int(e) for e in eos_ids)
    if eos:
        x[..., eos] = -np.inf
    finite = np.isfinite(x)
    if not finite.all():
        row_min = np.where(finite, x, np.inf).min(axis=-1, keepdims=True)
        row_max = np.where(finite, x, -np.inf).max(axis=-1, keepdims=True)
        row_min = np.where(np.isfinite(row_min), row_min, 0.0)
        row_max = np.where(np.isfinite(row_max), row_max, 0.0)
        x = np.where(np.isneginf(x), row_min, x)
        x = np.where(np.isposinf(x), row_max, x)
        x = np.nan_to_num(x, nan=0.0)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def plain_log_softmax(logits: np.ndarray) -> np.ndarray:
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))


def token_alone(model, text: str) -> int:
    """The first id of ``text`` encoded on its own (how the library picks ``True``)."""
    ids = [t for t in model.encode(text) if t not in model.eos_ids]
    if not ids:
        raise ValueError(f"{text!r} encodes to no tokens")
    return ids[0]


def user_turn(model, prompt: str, prefill: str | None = None) -> list[int]:
    """The prompt as one user turn with the generation prompt (and an optional answer stem)."""
    return model.render_chat([{"role": "user", "content": prompt}], add_generation_prompt=True, prefill=prefill).ids


def _pairs(questions: Sequence[str], answers: Sequence[str]) -> list[tuple[str, str]]:
    if len(questions) != len(answers):
        raise ValueError(f"{len(questions)} questions but {len(answers)} answers")
    return list(zip(questions, answers))


def _two_way(lp_a: np.ndarray, lp_b: np.ndarray) -> np.ndarray:
    """P(a) / (P(a) + P(b)) from log-probabilities (NaN where either is NaN)."""
    m = np.maximum(lp_a, lp_b)
    ea, eb = np.exp(lp_a - m), np.exp(lp_b - m)
    return ea / (ea + eb)


def library_logprob(model, questions: Sequence[str], answers: Sequence[str], *, rows_per_pass: int = DEFAULT_ROWS_PER_PASS) -> np.ndarray:
    """log P(True) exactly as lm-polygraph 0.7.0 computes it (see module docstring)."""
    return _library_and_renormalised(model, questions, answers, rows_per_pass)[0]


def renormalised(model, questions: Sequence[str], answers: Sequence[str], *, rows_per_pass: int = DEFAULT_ROWS_PER_PASS) -> np.ndarray:
    """P(True) / (P(True) + P(False)) at the library's position (plain log-softmax)."""
    return _library_and_renormalised(model, questions, answers, rows_per_pass)[1]


def _library_and_renormalised(model, questions, answers, rows_per_pass):
    seqs = [user_turn(model, ptrue_prompt(q, a)) for q, a in _pairs(questions, answers)]
    t_id, f_id = token_alone(model, "True"), token_alone(model, "False")
    lib = np.empty(len(seqs))
    ren = np.empty(len(seqs))

    def keep(i: int, logits: np.ndarray) -> None:
        lib[i] = library_log_softmax(logits, model.eos_ids)[t_id]
        plain = plain_log_softmax(logits)
        ren[i] = _two_way(plain[t_id], plain[f_id])

    sliced_rows(model.next_token_logits, seqs, keep, rows_per_pass)
    return lib, ren


def _label_choice(model, contexts: Sequence[list[int]], texts: Sequence[str], labels: tuple[str, str], rows_per_pass: int) -> np.ndarray:
    """P(label a) / (P(a) + P(b)) with full-sequence label probabilities encoded in context.

    When the two encodings share a token prefix and differ in one last token (``(`` + ``A``), the
    shared prefix cancels and one batched pass at ``context + prefix`` is exact; otherwise each
    context is scored with ``continuation_logprobs``. NaN where the boundary is not preserved.
    """
    out = np.full(len(contexts), np.nan)
    fast_seqs, fast_ids, fast_rows = [], [], []
    for i, (ids, text) in enumerate(zip(contexts, texts)):
        enc = [encode_continuation(model, text, lab) for lab in labels]
        if any(e is None for e in enc):
            continue
        a, b = enc
        if len(a) == len(b) and a[:-1] == b[:-1]:
            fast_seqs.append(list(ids) + list(a[:-1]))
            fast_ids.append([a[-1], b[-1]])
            fast_rows.append(i)
        else:
            la, lb = (float(np.sum(x)) for x in model.continuation_logprobs(ids, [a, b]))
            out[i] = _two_way(np.float64(la), np.float64(lb))
    for row, vals in zip(fast_rows, gather(model.next_token_logprobs, fast_seqs, fast_ids, rows_per_pass)):
        out[row] = _two_way(vals[0], vals[1])
    return out


def labels_in_place(model, questions: Sequence[str], answers: Sequence[str], *, rows_per_pass: int = DEFAULT_ROWS_PER_PASS) -> np.ndarray:
    """P("(A") / (P("(A") + P("(B")) at the library's position."""
    rendered = [model.render_chat([{"role": "user", "content": ptrue_prompt(q, a)}]) for q, a in _pairs(questions, answers)]
    return _label_choice(model, [r.ids for r in rendered], [r.text for r in rendered], ("(A", "(B"), rows_per_pass)


def moved(model, questions: Sequence[str], answers: Sequence[str], *, stem: str = MOVED_STEM, rows_per_pass: int = DEFAULT_ROWS_PER_PASS) -> np.ndarray:
    """P("A") / (P("A") + P("B")) after the stem "The possible answer is (" in the assistant turn."""
    rendered = [model.render_chat([{"role": "user", "content": ptrue_prompt(q, a)}], prefill=stem) for q, a in _pairs(questions, answers)]
    return _label_choice(model, [r.ids for r in rendered], [r.text for r in rendered], ("A", "B"), rows_per_pass)


def deleted(model, questions: Sequence[str], answers: Sequence[str], *, rows_per_pass: int = DEFAULT_ROWS_PER_PASS) -> np.ndarray:
    """P(True) / (P(True) + P(False)) with the True/False instruction deleted from the prompt."""
    seqs = [user_turn(model, ptrue_deleted_prompt(q, a)) for q, a in _pairs(questions, answers)]
    t_id, f_id = token_alone(model, "True"), token_alone(model, "False")
    vals = gather(model.next_token_logprobs, seqs, [[t_id, f_id]] * len(seqs), rows_per_pass)
    return np.array([_two_way(v[0], v[1]) for v in vals], dtype=np.float64)


def ptrue_readouts(model, questions: Sequence[str], answers: Sequence[str], *, rows_per_pass: int = DEFAULT_ROWS_PER_PASS) -> dict[str, np.ndarray]:
    """All five readouts for each (question, answer) pair.

    Keys: ``library_logprob`` (log P(True), the library's number), ``library`` (its exp),
    ``renormalised``, ``labels_in_place``, ``moved``, ``deleted`` (probabilities in [0, 1], NaN where
    a label's boundary is not preserved in context).
    """
    lib, ren = _library_and_renormalised(model, questions, answers, rows_per_pass)
    return {
        "library_logprob": lib,
        "library": np.exp(lib),
        "renormalised": ren,
        "labels_in_place": labels_in_place(model, questions, answers, rows_per_pass=rows_per_pass),
        "moved": moved(model, questions, answers, rows_per_pass=rows_per_pass),
        "deleted": deleted(model, questions, answers, rows_per_pass=rows_per_pass),
    }
