"""SummEval with its expert grades (the paper's Appendix G): ``mteb/summeval``, split ``test``.

The hub form has one row per source article (100): ``id``, ``text`` (the article),
``machine_summaries`` (16 system summaries), ``human_summaries`` (references), and per summary the
mean of the three expert annotations on each of ``coherence``, ``consistency``, ``fluency`` and
``relevance`` (lists parallel to ``machine_summaries``; the dataset card: "we averaged the 3 expert
annotations").

Each (article, machine summary) becomes one record, ``<id>:<k>`` with ``k`` the summary's position:
``source``, ``summary``, the four expert grades, and ``human_score`` = the grade of ``dim`` (default
``consistency``, the dimension the ``grade`` preset asks about). ``n=N`` keeps the first N records.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sleight.errors import UserError
from sleight.readout.data.common import DataSet, HubSplit, Provenance, Spec, check_params, choice_param, int_param, load_split

HUB = HubSplit("mteb/summeval", None, "test", "2cdabb83bf207713f8871b57de188e17773b2bd3")
DIMENSIONS = ("coherence", "consistency", "fluency", "relevance")


def summeval_records(rows: Sequence[Mapping[str, Any]], dim: str = "consistency") -> list[dict[str, Any]]:
    out = []
    for k, r in enumerate(rows):
        summaries = r.get("machine_summaries")
        if not isinstance(r.get("text"), str) or not isinstance(summaries, list):
            raise UserError(f"summeval row {k + 1}: expected mteb/summeval's id, text, machine_summaries and the four grade columns")
        for d in DIMENSIONS:
            if not isinstance(r.get(d), list) or len(r[d]) != len(summaries):
                raise UserError(f"summeval row {k + 1}: '{d}' must list one grade per machine summary")
        for j, summary in enumerate(summaries):
            grades = {d: float(r[d][j]) for d in DIMENSIONS}
            out.append({"id": f"{r.get('id', k)}:{j}", "source": r["text"], "summary": summary, **grades, "human_score": grades[dim], "dimension": dim, "source_index": k})
    return out


def load(spec: Spec) -> DataSet:
    """``summeval:WHERE[:dim=consistency|coherence|fluency|relevance][:n=N]``."""
    check_params(spec, ("dim", "n"))
    dim = choice_param(spec, "dim", "consistency", DIMENSIONS)
    n = int_param(spec, "n", None, minimum=1)
    loaded = load_split(spec, HUB)
    records = summeval_records(loaded.rows, dim)
    records = records[:n] if n is not None else records
    prov: Provenance = {"spec": spec.text, "family": "summeval", **loaded.record(HUB), "rule": {"unit": "article x machine summary", "dim": dim, "grades": "mean of 3 experts", "n": n}}
    return DataSet("summeval", records, prov, {"grade": _grade})


def _grade(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(r) for r in records]
