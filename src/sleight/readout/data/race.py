"""RACE-H as the paper samples it (App. A.1): ``ehovy/race`` config ``high`` at the pinned revision,
test, validation, then train, grouped by passage, passages of at least 200 words, shuffled with
``random.Random(0)``, one question per passage.

The rule, in order:

1. rows of ``ehovy/race`` config ``high`` (columns ``example_id, article, question, options,
   answer``), split ``test``, then ``validation``, then ``train``, each in stored row order, at the
   pinned revision :data:`REVISION` when read from the hub (a file's own revision is read from its
   hub-cache path where it has one, and every file's sha256 is recorded). A file spec names the test
   file; its ``validation``/``train`` siblings are read where they exist (the provenance lists the
   splits read);
2. rows grouped by the MD5 of the UTF-8 passage text: a passage keeps its first occurrence's position
   and accumulates its questions in encounter order (:func:`passage_groups`);
3. passages of at least :data:`MIN_WORDS` = 200 words (``str.split`` tokens: inferred, A.1 does not
   name its word count);
4. the passages shuffled with ``random.Random(seed)`` (seed 0), and one question chosen for each of
   the first :data:`PAPER_PASSAGES` = 3,052 passages with the same generator (``rng.choice``, in the
   shuffled order; inferred: A.1 names the generator, not the call); the sample of ``n`` items is the
   first ``n`` -- every RACE-H sample of the paper is a prefix of this one list, so ``--limit`` after
   the draw equals a smaller draw.

Item ids are ``<example_id>:<k>`` (``k``: the question's position among that passage file's rows in
its split; ``validation/``/``train/`` prefixed outside the test split); ``passage_id`` is the
passage's first occurrence's ``example_id`` and ``passage_md5`` its hash.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from sleight.errors import UserError
from sleight.readout.data.common import (
    DataSet,
    HubSplit,
    Loaded,
    Provenance,
    Spec,
    View,
    cells,
    check_params,
    int_param,
    load_split,
    text,
)
from sleight.readout.data.records import RaceRecord, SampledRaceRecord

HUB = HubSplit("ehovy/race", "high", "test", "2fec9fd81f1dc971569a9b729c43f2f0e6436637")
REVISION = HUB.revision
SPLITS = ("test", "validation", "train")  # A.1's reading order
MIN_WORDS = 200
PAPER_PASSAGES = 3052  # A.1: one question for each of the first 3,052 shuffled passages
DEFAULT_N = PAPER_PASSAGES
DEFAULT_SEED = 0  # A.1: random.Random(0)
LETTERS = ("A", "B", "C", "D")


def word_count(text: str) -> int:
    """Whitespace-separated tokens: the passage-length filter's unit."""
    return len(text.split())


def race_rows_to_records(rows: Sequence[Mapping[str, object]], split: str = "test") -> list[RaceRecord]:
    """Hub rows of one split -> forecast records (``id, passage, question, choices, answer``) with
    their split and row index."""
    out: list[RaceRecord] = []
    per_passage: dict[str, int] = {}
    prefix = "" if split == "test" else f"{split}/"
    for k, r in enumerate(rows):
        where = f"race {split} row {k + 1}"
        for key in ("article", "question", "options", "answer"):
            if key not in r:
                raise UserError(f"{where}: missing column '{key}' (expected ehovy/race's example_id, article, question, options, answer)")
        options = cells(r, "options", where)
        answer = r["answer"]
        if len(options) != 4 or not isinstance(answer, str) or answer not in LETTERS:
            raise UserError(f"{where}: needs 4 options and an answer letter A-D")
        if not all(isinstance(o, str) for o in options):
            raise UserError(f"{where}: the options must be strings")
        ex = str(r.get("example_id") or f"row{k}")
        q = per_passage.get(ex, 0)
        per_passage[ex] = q + 1
        out.append({
            "id": f"{prefix}{ex}:{q}", "passage": text(r, "article", where), "question": text(r, "question", where), "choices": [str(o) for o in options],
            "answer": answer, "example_id": ex, "split": split, "source_index": k,
        })
    return out


def passage_file(item_id: str | None) -> str | None:
    """The passage file of an item id :func:`race_rows_to_records` made (``high1845.txt:0`` ->
    ``high1845.txt``), by which the paper names single items; None for an id without one."""
    if item_id is None:
        return None
    return str(item_id).rpartition(":")[0] or None


def passage_md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


class PassageGroup(TypedDict):
    """One passage of A.1's grouping: its MD5, its first ``example_id``, the text, its questions."""

    md5: str
    passage_id: str
    passage: str
    questions: list[RaceRecord]


def passage_groups(records: Sequence[RaceRecord]) -> list[PassageGroup]:
    """A.1's grouping: records (test, validation, train, in stored order) grouped by the MD5 of the
    UTF-8 passage, each group at its first occurrence's position with its questions in encounter
    order."""
    groups: dict[str, PassageGroup] = {}
    for r in records:
        h = passage_md5(r["passage"])
        g = groups.get(h)
        if g is None:
            g = groups[h] = {"md5": h, "passage_id": r["example_id"], "passage": r["passage"], "questions": []}
        g["questions"].append(r.copy())
    return list(groups.values())


def paper_sample(
    records: Sequence[RaceRecord], n: int | None, seed: int = DEFAULT_SEED, min_words: int = MIN_WORDS, passages: int = PAPER_PASSAGES
) -> tuple[list[SampledRaceRecord], dict[str, int]]:
    """A.1's draw over RACE records in reading order (see the module docstring): the first ``n`` of
    the one list, and the counts at each step."""
    groups = passage_groups(records)
    pool = [g for g in groups if word_count(g["passage"]) >= min_words]
    rng = random.Random(seed)
    rng.shuffle(pool)
    listed: list[SampledRaceRecord] = []
    for g in pool[:passages]:
        q = rng.choice(g["questions"])
        listed.append({**q, "passage_id": g["passage_id"], "passage_md5": g["md5"]})
    drawn = listed if n is None else listed[:n]
    return drawn, {"rows": len(records), "passages": len(groups), "long_enough": len(pool), "listed": len(listed), "drawn": len(drawn)}


def _splits(spec: Spec) -> list[tuple[str, Loaded]]:
    """The splits A.1 reads, in its order: every one for the hub or a folder; for a file, the test
    file and its validation/train siblings where they exist."""
    out = [("test", load_split(spec, HUB))]
    path = Path(spec.where)
    for split in SPLITS[1:]:
        if spec.is_hub or path.is_dir():
            out.append((split, load_split(spec, HUB, split=split)))
            continue
        sibling = path.with_name(path.name.replace("test", split))
        if sibling != path and sibling.is_file():
            out.append((split, load_split(spec, HUB, split=split, where=str(sibling))))
    return out


def load(spec: Spec) -> DataSet:
    """``race-h:WHERE[:n=N][:seed=S]``: the paper's RACE-H sample (App. A.1)."""
    from sleight.readout.data.common import lettered_ptrue_records

    check_params(spec, ("n", "seed"))
    n = int_param(spec, "n", DEFAULT_N, minimum=1)
    seed = int_param(spec, "seed", DEFAULT_SEED)
    assert seed is not None
    splits = _splits(spec)
    records = [rec for split, loaded in splits for rec in race_rows_to_records(loaded.rows, split)]
    drawn, counts = paper_sample(records, n, seed)
    if not drawn:
        raise UserError(f"--data '{spec.text}': no RACE passage has at least {MIN_WORDS} words")
    test = splits[0][1]
    prov: Provenance = {
        "spec": spec.text, "family": "race-h", **test.record(HUB),
        "splits": {split: loaded.record(HubSplit(HUB.dataset, HUB.config, split, HUB.revision)) for split, loaded in splits},
        "rule": {
            "order": [s for s, _ in splits], "group": "md5 of the UTF-8 passage", "min_words": MIN_WORDS, "passages": PAPER_PASSAGES, "n": n, "seed": seed,
            "draw": "random.Random(seed).shuffle(passages), then rng.choice(questions) per passage (App. A.1)",
        },
        "counts": counts,
    }
    views: dict[str, View[SampledRaceRecord]] = {"forecast": _forecast, "qa": _forecast, "ptrue": lettered_ptrue_records}
    return DataSet("race-h", drawn, prov, views)


def _forecast(records: Sequence[SampledRaceRecord]) -> list[SampledRaceRecord]:
    return [r.copy() for r in records]
