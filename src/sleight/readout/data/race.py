"""RACE-H as the paper samples it: the ``high`` config's test split of ``ehovy/race``, duplicates
removed, passages of at least 200 words, then a seeded draw.

The rule, in order:

1. rows of ``ehovy/race`` config ``high``, split ``test`` (columns ``example_id, article, question,
   options, answer``), in the file's order, at the pinned revision :data:`REVISION` when read from
   the hub (a file's own revision is read from its hub-cache path where it has one, and its sha256
   is always recorded);
2. duplicates removed: a row whose (article, question, options) was seen before is dropped, the
   first one kept;
3. passages of at least :data:`MIN_WORDS` = 200 words (whitespace-separated tokens of ``article``);
4. a seeded draw of ``n`` items: ``numpy.random.default_rng(seed).permutation(len(pool))``, the first
   ``n`` positions, in the drawn order -- so a smaller ``n`` is a prefix of a larger one and ``--limit``
   after the draw equals a smaller draw.

The paper's own ``n`` and seed were not available to this project: the defaults :data:`DEFAULT_N` =
500 and :data:`DEFAULT_SEED` = 0 are this project's choice (``race-h:FILE:n=N:seed=S`` sets both).
The pinned revision is the one another public harness pins for the same split (recorded in
``docs/data.md``).

Item ids are ``<example_id>:<k>``, ``k`` the question's position among the rows of that passage
file in the split (``example_id`` names a passage, which has several questions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sleight.errors import UserError
from sleight.readout.data.common import DataSet, HubSplit, Spec, check_params, int_param, load_split

HUB = HubSplit("ehovy/race", "high", "test", "2fec9fd81f1dc971569a9b729c43f2f0e6436637")
REVISION = HUB.revision
MIN_WORDS = 200
DEFAULT_N = 500
DEFAULT_SEED = 0
LETTERS = ("A", "B", "C", "D")


def word_count(text: str) -> int:
    """Whitespace-separated tokens: the passage-length filter's unit."""
    return len(text.split())


def race_rows_to_records(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Hub rows -> forecast records (``id, passage, question, choices, answer``) with their row index."""
    out = []
    per_passage: dict[str, int] = {}
    for k, r in enumerate(rows):
        for key in ("article", "question", "options", "answer"):
            if key not in r:
                raise UserError(f"race row {k + 1}: missing column '{key}' (expected ehovy/race's example_id, article, question, options, answer)")
        options = list(r["options"])
        if len(options) != 4 or r["answer"] not in LETTERS:
            raise UserError(f"race row {k + 1}: needs 4 options and an answer letter A-D")
        ex = str(r.get("example_id") or f"row{k}")
        q = per_passage.get(ex, 0)
        per_passage[ex] = q + 1
        out.append({
            "id": f"{ex}:{q}", "passage": r["article"], "question": r["question"], "choices": options, "answer": r["answer"],
            "example_id": ex, "source_index": k,
        })
    return out


def paper_sample(records: Sequence[Mapping[str, Any]], n: int | None, seed: int, min_words: int = MIN_WORDS) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """The paper's filters and draw over RACE records (see the module docstring); returns the drawn
    records and the counts at each step."""
    seen: set[tuple[str, str, tuple[str, ...]]] = set()
    unique = []
    for r in records:
        key = (r["passage"], r["question"], tuple(r["choices"]))
        if key in seen:
            continue
        seen.add(key)
        unique.append(dict(r))
    pool = [r for r in unique if word_count(r["passage"]) >= min_words]
    order = np.random.default_rng(seed).permutation(len(pool))
    drawn = [pool[int(i)] for i in (order if n is None else order[:n])]
    return drawn, {"rows": len(records), "unique": len(unique), "long_enough": len(pool), "drawn": len(drawn)}


def load(spec: Spec) -> DataSet:
    """``race-h:WHERE[:n=N][:seed=S]``: the paper's RACE-H sample."""
    from sleight.readout.data.common import lettered_ptrue_records

    check_params(spec, ("n", "seed"))
    n = int_param(spec, "n", DEFAULT_N, minimum=1)
    seed = int_param(spec, "seed", DEFAULT_SEED)
    assert seed is not None
    loaded = load_split(spec, HUB)
    drawn, counts = paper_sample(race_rows_to_records(loaded.rows), n, seed)
    if not drawn:
        raise UserError(f"--data '{spec.text}': no RACE item has a passage of at least {MIN_WORDS} words")
    prov = {
        "spec": spec.text, "family": "race-h", **loaded.record(HUB),
        "rule": {"dedupe": "article+question+options", "min_words": MIN_WORDS, "n": n, "seed": seed, "draw": "numpy default_rng(seed).permutation, first n"},
        "counts": counts,
    }
    views = {"forecast": _forecast, "qa": _forecast, "ptrue": lettered_ptrue_records}
    return DataSet("race-h", drawn, prov, views)


def _forecast(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in records]
