"""``opencompass-grader`` runs: App. E's judge experiment -- OpenCompass's default MMLU judge configuration
(its grading prompt pinned in ``data/scorers/opencompass_mmlu_llmjudge.yaml``) with the checkpoint as the
judge, greedy, its verdict read as OpenCompass reads it (the first "A" or "B" anywhere in the reply).

Each MMLU item is graded twice in its shipped order: with a correct candidate (the gold letter) and an
incorrect one (a non-gold letter drawn per item with a fixed seed, :func:`~sleight.readout.items.printed_wrong_letter`),
each written in the answer format the query template asks for. The grading prompt prints the gold letter.
The wrong verdict is B for a correct candidate and A for an incorrect one, so a judge that answers the
quoted item with the gold letter returns the wrong verdict when the gold letter is that letter. The
rotation contrast reorders the choices by two places (A<->C, B<->D): for each item exactly one of its two
candidates has its gold letter at the wrong verdict's letter or at the letter two places on, and that pair
is graded again in the rotated order, which moves the gold letter between the wrong verdict's letter and
C or D. One row per call, in a run directory's ``readings.parquet``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

import pyarrow as pa

from sleight import rundir
from sleight.errors import parse_yaml
from sleight.readout.reproduce.kinds.base import Rows, RunContext, RunKind, setting_int, single_pass

KIND = "opencompass-grader"
LETTERS = ("A", "B", "C", "D")
RIGHT = {"correct": "A", "incorrect": "B"}  # generic.py 31-37: A is correct, B incorrect
_TEXT = ("item_id", "candidate", "order", "gold", "candidate_letter", "wrong_letter")
_FLAGS = ("gold_at_wrong", "gold_at_cd", "contrast")
SCHEMA = pa.schema(
    [(k, pa.string()) for k in _TEXT] + [(k, pa.float64()) for k in _FLAGS] + [("response", pa.string()), ("verdict", pa.string())]
    + [(k, pa.float64()) for k in ("valid", "error", "wrong_verdict")]
)
ROW = tuple(SCHEMA.names)


@functools.cache
def grader_config() -> dict[str, Any]:
    """The pinned OpenCompass configuration: its template, system prompt, answer format and source."""
    path = "data/scorers/opencompass_mmlu_llmjudge.yaml"
    config = parse_yaml(resources.files("sleight").joinpath(path).read_text(encoding="utf-8"), path)
    assert isinstance(config, dict), path
    return config


def grader_prompt(question: str, choices: Sequence[str], gold: str, prediction: str) -> str:
    """GRADER_TEMPLATE with the item, the gold letter and the candidate filled in."""
    fields = {"input": question, **dict(zip(LETTERS, choices)), "target": gold, "prediction": prediction}
    text = str(grader_config()["template"])
    for key, value in fields.items():
        text = text.replace("{" + key + "}", str(value))
    return text


def verdict(reply: str) -> str:
    """OpenCompass's reading of a judge's reply (generic.py 63-69): its first "A" or "B", else "unknown"."""
    m = re.search(r"(A|B)", reply)
    return m.group(0) if m else "unknown"


def rotate(choices: Sequence[str], letter: str) -> tuple[list[str], str]:
    """The choices moved two places (A<->C, B<->D), and where ``letter``'s choice now sits."""
    k = LETTERS.index(letter)
    return [choices[(i + 2) % 4] for i in range(4)], LETTERS[(k + 2) % 4]


def calls(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every call of the experiment (pure): per item both candidates in the shipped order, then the
    contrast pair again in the rotated order."""
    from sleight.readout.items import printed_wrong_letter

    fmt = str(grader_config()["answer_format"])
    out = []
    for r in records:
        gold, choices = str(r["answer"]), [str(c) for c in r["choices"]]
        for candidate, letter in (("correct", gold), ("incorrect", printed_wrong_letter(str(r["id"]), gold))):
            wrong = RIGHT["incorrect" if candidate == "correct" else "correct"]
            contrast = gold in (wrong, rotate(LETTERS, wrong)[1])
            orders = [("shipped", choices, gold, letter)]
            if contrast:
                rotated, new_gold = rotate(choices, gold)
                orders.append(("rotated", rotated, new_gold, rotate(choices, letter)[1]))
            for order, shown, g, cand in orders:
                out.append({
                    "item_id": str(r["id"]), "candidate": candidate, "order": order, "gold": g, "candidate_letter": cand, "wrong_letter": wrong,
                    "gold_at_wrong": float(g == wrong), "gold_at_cd": float(g in ("C", "D")), "contrast": float(contrast),
                    "prompt": grader_prompt(str(r["question"]), shown, g, fmt.format(letter=cand)),
                })
    return out


def judge(model: Any, prompts: Sequence[str], max_new_tokens: int) -> list[str]:
    """The judge's greedy replies (the system prompt, then the grading prompt as the user turn)."""
    system = str(grader_config()["system"])
    ids = [model.render_chat([{"role": "system", "content": system}, {"role": "user", "content": p}]).ids for p in prompts]
    return [model.decode(c.token_ids) for c in model.generate_until(ids, max_new_tokens)]


def grader_rows(ctx: RunContext) -> Rows:
    """The calls judged by this checkpoint: a run directory of its own
    (:func:`~sleight.readout.reproduce.kinds.base.single_pass`)."""
    from sleight.readout.data import load_data

    max_new = setting_int(ctx.spec.settings, "max_new_tokens", 64)
    records = load_data(ctx.data).view("qa", ctx.limit)
    todo = calls(records)
    config = {
        "data": ctx.data, "limit": ctx.limit, "items_sha256": rundir.digest(records), "max_new_tokens": max_new,
        "template_sha256": str(grader_config()["source"]["template_sha256"]),
    }

    def compute() -> Rows:
        replies = judge(ctx.model(), [c["prompt"] for c in todo], max_new)
        rows = []
        for c, reply in zip(todo, replies):
            v = verdict(reply)
            row = {k: c[k] for k in ROW if k in c}
            row.update(response=reply, verdict=v, valid=float(v in ("A", "B")), error=float(v != RIGHT[c["candidate"]]), wrong_verdict=float(v == c["wrong_letter"]))
            rows.append(row)
        return rows

    return single_pass(ctx, KIND, config, SCHEMA, len(todo), compute, lambda: ctx.model().info.as_dict())


def _per_item(s: Mapping[str, Any]) -> tuple[int, int]:
    n = 3  # two candidates in the shipped order, the contrast pair rotated
    return n, n * setting_int(s, "max_new_tokens", 64)


KINDS = (
    RunKind(
        KIND,
        fields=lambda: ("max_new_tokens",),
        columns=lambda: ROW,
        values=lambda: {"candidate": ("correct", "incorrect"), "order": ("shipped", "rotated")},
        families=lambda _s: ("mmlu",),
        per_item=_per_item,
        rows=grader_rows,
        unit="item_id",
        pair=("item_id", "candidate", "order"),
        context_tokens=700,
    ),
)
