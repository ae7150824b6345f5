"""Several option sets read at one scored position, from a single next-token pass.

The downstream pipelines often read the *same* rendered context with more than one option set: the
note-only reader scores ``A``..``D`` and `` A``..`` D`` after one prompt, and P(True)'s "Labels in
place" reads ``(A``/``(B`` where Library reads ``True``. :func:`sleight.readout.measure.measure` takes
one option set per context (and decodes a continuation each time), so using it here would run the
same long context through the model several times. This module makes one pass per context and
applies the audit's own definitions to it -- :func:`~sleight.readout.measure.option_mass` and
:func:`~sleight.readout.classify.classify_token` -- so the numbers are the audit's numbers.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from sleight.backends import Rendered
from sleight.position import encode_continuation
from sleight.readout.batching import DEFAULT_ROWS_PER_PASS, sliced_rows
from sleight.readout.classify import classify_token
from sleight.readout.measure import TOP_TOKENS, option_mass, top_tokens


def read_positions(
    model: Any,
    contexts: Sequence[Rendered],
    option_sets: Sequence[Sequence[str]],
    *,
    letters: Sequence[str] = ("A", "B", "C", "D"),
    score_options: bool = True,
    rows_per_pass: int = DEFAULT_ROWS_PER_PASS,
) -> list[list[dict[str, Any]]]:
    """``out[i][k]``: option set ``k`` read at the end of context ``i``.

    Each reading has the audit's column names: ``options``, ``boundary_preserved``, ``option_mass``
    (None when an option's boundary is not preserved), ``first_token_ids``, ``first_tokens_distinct``,
    ``argmax_id``/``_token``/``_prob``/``_class``, ``top_tokens`` and ``option_logprobs`` (full
    sequence, in context; multi-token options are scored with ``continuation_logprobs``, one more
    pass over the context, unless ``score_options`` is False and only the position is wanted).
    """
    encs = [[[encode_continuation(model, ctx.text, o) for o in opts] for opts in option_sets] for ctx in contexts]
    is_special = getattr(model, "is_special", None)
    out: list[list[dict[str, Any]]] = [[] for _ in contexts]

    def reduce(i: int, lp: np.ndarray) -> None:
        arg = int(np.argmax(lp))
        token = model.token_text(arg)
        special = bool(is_special(arg)) if is_special else arg in model.eos_ids
        tops = [{"id": int(t), "token": model.token_text(int(t)), "prob": float(np.exp(lp[t]))} for t in top_tokens(lp, TOP_TOKENS)]
        for opts, enc in zip(option_sets, encs[i]):
            first = [e[0] if e else None for e in enc]
            ok = all(t is not None for t in first)
            out[i].append(
                {
                    "options": list(opts),
                    "boundary_preserved": ok,
                    "option_mass": option_mass(lp, first),
                    "first_token_ids": first,
                    "first_tokens_distinct": (len(set(first)) == len(first)) if ok else None,
                    "argmax_id": arg,
                    "argmax_token": token,
                    "argmax_prob": float(np.exp(lp[arg])),
                    "argmax_class": classify_token(token, is_special=special, is_option_first=arg in {t for t in first if t is not None}, letters=letters),
                    "top_tokens": tops,
                    "option_logprobs": [float(lp[e[0]]) if e is not None and len(e) == 1 else None for e in enc],
                }
            )

    sliced_rows(model.next_token_logprobs, [c.ids for c in contexts], reduce, rows_per_pass)
    for i, ctx in enumerate(contexts if score_options else ()):
        for k, enc in enumerate(encs[i]):
            multi = [j for j, e in enumerate(enc) if e is not None and len(e) > 1]
            if multi:
                for j, arr in zip(multi, model.continuation_logprobs(ctx.ids, [enc[j] for j in multi])):
                    out[i][k]["option_logprobs"][j] = float(np.sum(arr))
    return out
